"""Big inputs without quadratic work (issue 11): counted in searches and copies, never in seconds."""

from __future__ import annotations

import copy
import os
import sys

import pytest

from gpudra.allocator import Features, build_report
from gpudra.allocator import allocator as allocator_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from gen_cluster import generate_cluster, gpu_claim  # noqa: E402


@pytest.fixture
def counted_searches(monkeypatch):
    calls = []
    original = allocator_module.Allocator.allocate

    def allocate(self, node, claims, *args, **kwargs):
        calls.append((node if isinstance(node, str) else node["metadata"]["name"], len(claims)))
        return original(self, node, claims, *args, **kwargs)

    monkeypatch.setattr(allocator_module.Allocator, "allocate", allocate)
    return calls


def _objects(nodes: int, claims: list[dict]) -> list[dict]:
    return generate_cluster(nodes, gpus=4, nvlink_domains=2) + claims


def test_each_mode_searches_once_per_claim_shape_and_node(counted_searches):
    claims = [gpu_claim(f"one-{i}", 1) for i in range(6)] + [gpu_claim(f"pair-{i}", 2, match_nvlink=True)
                                                              for i in range(3)]
    report = build_report(_objects(5, claims), "each", features=Features.parse("default"))
    assert len(counted_searches) == 2 * 5  # two shapes on five nodes, not nine claims on five nodes
    assert len(report["results"]) == 9 * 5  # still one entry per claim and node
    # the same answers as searching every claim alone
    for claim in claims:
        alone = build_report(_objects(5, [copy.deepcopy(claim)]), "each")["results"]
        mine = [r for r in report["results"] if r["claims"] == [f"default/{claim['metadata']['name']}"]]
        assert mine == alone


def test_variant_is_chosen_once_per_feature_set(monkeypatch):
    features = Features.parse("default")
    first = features.variant_name
    monkeypatch.setattr(Features, "enabled", lambda self: pytest.fail("variant recomputed"))
    assert features.variant_name == first
