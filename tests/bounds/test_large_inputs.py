"""Big inputs without quadratic work (issue 11): counted in searches and copies, never in seconds."""

from __future__ import annotations

import copy
import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.allocator import Features, build_report
from gpudra.allocator import allocator as allocator_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


# ----- progress on stderr ------------------------------------------------------------------------------------------
class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_appears_only_after_two_seconds_and_only_on_a_terminal():
    import io

    from gpudra.cli.progress import SHOW_AFTER_S, Progress

    clock, stream = FakeClock(), io.StringIO()
    bar = Progress(stream, enabled=True, clock=clock)
    bar("scheduling pods", 1, 10)
    assert stream.getvalue() == "" and bar.draws == 0  # quick work shows nothing
    clock.now = SHOW_AFTER_S + 0.1
    for done in range(2, 11):
        bar("scheduling pods", done, 10)
    bar.close()
    assert "scheduling pods" in stream.getvalue() and bar.draws == 9
    quiet, piped = io.StringIO(), Progress(io.StringIO(), clock=clock)  # a StringIO is not a terminal
    assert not piped.enabled
    Progress(quiet, enabled=False, clock=clock)("x", 5, 10)
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("command", [["schedule", "-o", "table"], ["allocate", "--mode", "each"],
                                     ["explain", "pod/pod-3"], ["validate"]])
def test_long_commands_report_progress(monkeypatch, tmp_path, command):
    """Each long-running command feeds the bar (shown at once here: a terminal, no two-second wait)."""
    import yaml
    from click.testing import CliRunner

    import gpudra.cli.progress as progress_module
    from gpudra.cli import cli

    objects = _objects(3, [])
    for index in range(4):
        objects.append(gpu_claim(f"claim-{index}", 3 if index == 3 else 2))
        objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{index}", "namespace": "default"},
                        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "g"}]}}],
                                 "resourceClaims": [{"name": "g", "resourceClaimName": f"claim-{index}"}]}})
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    monkeypatch.setattr(progress_module, "SHOW_AFTER_S", 0.0)
    monkeypatch.setattr(progress_module, "_is_terminal", lambda stream: True)
    drawn = []
    original = progress_module.Progress.__call__

    def record(self, label, done, total):
        drawn.append((label, done, total))
        return original(self, label, done, total)

    monkeypatch.setattr(progress_module.Progress, "__call__", record)
    result = CliRunner().invoke(cli, [command[0], "-f", str(path), *command[1:]])
    assert result.exit_code in (0, 1), result.output
    assert drawn and drawn[-1][1] == drawn[-1][2]  # counted up to the total
    assert drawn[-1][0] in result.stderr  # the bar, on stderr


# ----- YAML: the graph walk is skipped only where it has nothing to find ---------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


_values = st.recursive(st.one_of(st.integers(), st.text(max_size=5), st.booleans()),
                       lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner,
                                                                                   max_size=2),
                       max_leaves=40)


def _nest(value, depth: int, wrap_list: bool):
    for _ in range(depth):
        value = [value] if wrap_list else {"k": value}
    return value


@settings(max_examples=60, deadline=None)
@given(_values, st.integers(0, 130), st.booleans(), st.sampled_from([False, None, True]))
def test_plain_yaml_means_no_alias_and_shallow(value, extra, wrap_list, flow):
    import yaml

    from gpudra.api.load import MAX_DEPTH, _plain_yaml

    document = {"apiVersion": "v1", "kind": "X", "data": _nest(value, extra, wrap_list)}
    text = yaml.safe_dump(document, default_flow_style=flow, width=10**6)
    if _plain_yaml(text):
        assert _depth(yaml.safe_load(text)) <= MAX_DEPTH
    shared = [1, 2]
    assert not _plain_yaml(yaml.safe_dump({"a": shared, "b": shared, "c": document}))  # &id001 / *id001


def test_plain_yaml_is_not_walked(monkeypatch):
    import gpudra.api.load as load

    walked = []
    monkeypatch.setattr(load, "_check_yaml_shape", lambda *args: walked.append(args))
    load.load_text("apiVersion: v1\nkind: List\nitems:\n- a: b && c\n")
    assert walked == []
    load.load_text("apiVersion: v1\nkind: X\na: &x [1]\nb: *x\n")
    assert len(walked) == 1


def test_explain_with_fixes_never_copies_slices_nodes_or_classes(monkeypatch):
    """Explain copies the cluster for the replay and for each fix it verifies: only what a simulation changes."""
    import gpudra.explain.simulate as simulate
    from gpudra.explain.analyze import explain

    copied = []
    original, original_copy_object = copy.deepcopy, simulate.copy_object

    def deepcopy(value, *args):
        if isinstance(value, dict):
            copied.append(value.get("kind"))
        return original(value, *args)

    def copy_object(value):
        if isinstance(value, dict):
            copied.append(value.get("kind"))
        return original_copy_object(value)

    monkeypatch.setattr(copy, "deepcopy", deepcopy)
    monkeypatch.setattr(simulate, "copy_object", copy_object)
    objects = _objects(3, [gpu_claim("big", 5)])
    objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                    "spec": {"containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "g"}]}}],
                             "resourceClaims": [{"name": "g", "resourceClaimName": "big"}]}})
    explanation = explain(objects, "pod/p")
    assert not explanation.fits and explanation.fixes  # e.g. ask for 4 GPUs
    assert "Pod" in copied and "ResourceClaim" in copied
    assert not {"ResourceSlice", "Node", "DeviceClass"} & set(copied)


def test_each_summary_gives_the_claims_view_of_the_full_report(counted_searches):
    """`allocate --mode each` without --brief needs per claim the first node that fits and how many do: the
    summary has that without an entry per claim and node, and prints the same claims and notes."""
    from gpudra.cli.allocate import allocated_claims_view

    claims = [gpu_claim(f"one-{i}", 1) for i in range(4)] + [gpu_claim("pair", 2, match_nvlink=True),
                                                             gpu_claim("too-many", 9)]
    objects = _objects(4, claims)
    full = build_report(objects, "each")
    searches = len(counted_searches)
    summary = build_report(objects, "each", summary=True)
    # the four idle nodes share one search per shape, plus one to build the first node's devices where one fits
    assert len(counted_searches) - searches == (1 + 1) + (1 + 1) + 1
    assert len(summary["results"]) == 5  # one per claim that fits somewhere
    assert summary["nodesThatFit"]["default/one-0"] == 4 and summary["nodesThatFit"]["default/too-many"] == 0
    assert allocated_claims_view(claims, summary, "each") == allocated_claims_view(claims, full, "each")
    # nodes given out of name order: the first node is still the first by name, as in the full report
    shuffled = objects[:1] + list(reversed(objects[1:-len(claims)])) + objects[-len(claims):]
    assert allocated_claims_view(claims, build_report(shuffled, "each", summary=True), "each") == \
        allocated_claims_view(claims, build_report(shuffled, "each"), "each")


def test_verifying_a_fix_does_not_explain_every_node_again(monkeypatch):
    """Every filter on every node is evaluated once, for the explanation; a fix only needs to know whether the pod
    fits then (on 2,000 nodes each full evaluation costs as much as a schedule of the pod)."""
    import gpudra.explain.simulate as simulate
    from gpudra.explain.analyze import explain

    evaluated = []
    original = simulate._evaluate_all
    monkeypatch.setattr(simulate, "_evaluate_all", lambda *args: evaluated.append(1) or original(*args))
    objects = _objects(3, [gpu_claim("big", 5)])
    objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                    "spec": {"containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "g"}]}}],
                             "resourceClaims": [{"name": "g", "resourceClaimName": "big"}]}})
    explanation = explain(objects, "pod/p")
    assert explanation.fixes and len(evaluated) == 1


def test_objects_read_for_a_command_are_not_copied(monkeypatch, tmp_path):
    """What was just read is converted where it is old, never copied: a copy of 2,000 slices costs seconds."""
    import yaml

    import gpudra.api.convert as convert
    from gpudra.cli.inputs import read_objects

    copies = []
    monkeypatch.setattr(convert, "copy_object", lambda value: copies.append(value) or value)
    objects = _objects(2, [gpu_claim("c", 1)])
    old = {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim", "metadata": {"name": "old"},
           "spec": {"devices": {"requests": [{"name": "r", "deviceClassName": "gpu.nvidia.com"}]}}}
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(objects + [old]))
    read = read_objects([str(path)])
    assert len(read) == len(objects) + 1 and read[-1]["apiVersion"] == "resource.k8s.io/v1"
    assert [c.get("kind") for c in copies] == ["ResourceClaim"]  # only the v1beta1 claim, to convert it


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sets(st.integers(0, 3), max_size=4), min_size=2, max_size=6), st.integers(1, 4))
def test_same_domain_claims_share_searches_between_nodes_alike_in_their_domains(held_gpus, count):
    """A claim for `count` GPUs on one NVLink domain: `fits` searches once per distinct state (free GPUs per
    domain, whatever the domains' names and the GPUs' order) and answers every node as `allocate` does."""
    from gpudra.allocator import Allocator

    objects = _objects(len(held_gpus), [])
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    held = []
    for node_slice, gpus in zip(slices, held_gpus):
        pool = node_slice["spec"]["pool"]["name"]
        for gpu in sorted(gpus):
            claim = gpu_claim(f"held-{pool}-{gpu}", 1)
            claim["status"] = {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": node_slice["spec"]["driver"], "pool": pool, "device": f"gpu-{gpu}"}]}}}
            held.append(claim)
    allocator = Allocator([o for o in objects if o["kind"] == "DeviceClass"], slices, held)
    states = set()
    for node_slice, gpus in zip(slices, held_gpus):
        free: dict[str, int] = {}
        for position, device in enumerate(node_slice["spec"]["devices"]):
            domain = device["attributes"]["nvlinkDomain"]["string"]
            free[domain] = free.get(domain, 0) + (position not in gpus)
        states.add(tuple(sorted(free.values())))
    asked = gpu_claim("asked", count, match_nvlink=True)
    for node in (o for o in objects if o["kind"] == "Node"):
        assert allocator.fits(node, [asked]).outcome == allocator.allocate(node, [asked]).outcome
    assert allocator.fit_searches <= len(states)
    assert allocator.fit_searches + allocator.fit_hits == len(held_gpus)
