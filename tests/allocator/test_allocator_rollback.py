"""Kubernetes 1.36.3 rolls back the shared counters of a device that a taint, a constraint or capacity rejects, and of
an undone multi-allocatable device (kubernetes/kubernetes#140663); 1.36.2 keeps them for the rest of the allocate()
call. gpudra models both, selected by the patch release (gpudra.versions.allocator_fixes).

The cases are upstream's own: the ones k8s.io/dynamic-resource-allocation v0.36.3 added to
structured/internal/allocatortesting/allocator_testing.go, as data in tests/data/allocator/rollback-v0.36.3.yaml,
run in every variant that supports their features; plus the one conformance case whose recorded v0.36.2 answer
v0.36.3 changes (random/each-0165, the live v0.36.3 allocator's answer written below).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpudra.allocator import Features, build_report
from gpudra.allocator.features import VARIANT_SUPPORT, VARIANTS
from gpudra.versions import allocator_fixes
from support.conformance import Loader, parse_args, _split

DATA = Path(__file__).resolve().parents[1] / "data"
TABLE = yaml.safe_load((DATA / "allocator" / "rollback-v0.36.3.yaml").read_text())
CASES = TABLE["cases"]


def objects_of(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The case's DeviceClass, Node, ResourceSlices (devices, then the counter set in a slice of its own) and
    ResourceClaims, as upstream's sliceWithDevices / sliceWithCounterSets / claimWithRequests build them."""
    slice_count = 1 if case.get("single_slice") else 2
    pool = {"name": "pool-1", "generation": 1, "resourceSliceCount": slice_count}
    objects = copy.deepcopy(TABLE["common"])
    objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "slice-1"},
                    "spec": {"driver": "driver-a", "pool": pool, "nodeName": "node-1",
                             "devices": copy.deepcopy(case["devices"])}})
    if slice_count == 2:
        counters = {name: {"value": value} for name, value in case["counters"].items()}
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "slice-2"},
                        "spec": {"driver": "driver-a", "pool": pool, "nodeName": "node-1",
                                 "sharedCounters": [{"name": "counter-set-1", "counters": counters}]}})
    for claim in case["claims"]:
        spec: dict[str, Any] = {"devices": {"requests": copy.deepcopy(claim["requests"])}}
        if claim.get("constraints"):
            spec["devices"]["constraints"] = copy.deepcopy(claim["constraints"])
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                        "metadata": {"name": claim["name"], "namespace": "default"}, "spec": spec})
    return objects


def answer(case: dict[str, Any], version: str, variant: str) -> Any:
    """'unallocatable', ('error', message) or per claim the [request=device, …] in result order."""
    features = Features.parse(case["features"], version).with_variant(variant)
    report = build_report(objects_of(case), mode="together", nodes=["node-1"], features=features, timeout=None)
    [result] = report["results"]
    if result["outcome"] != "allocated":
        return ("error", result.get("error", "")) if result["outcome"] == "error" else result["outcome"]
    return [[f"{r['request']}={r['device']}" for r in allocation["devices"]["results"]]
            for allocation in result["allocations"].values()]


def variants_of(case: dict[str, Any]) -> list[str]:
    enabled = set(Features.parse(case["features"]).enabled())
    return [name for name in VARIANTS if enabled <= VARIANT_SUPPORT[name]]


def expected(case: dict[str, Any], key: str = "expect") -> Any:
    want = case[key]
    if want == "unallocatable":
        return want
    return want["claims"] if "claims" in want else ("error", want["error"])


def same(got: Any, want: Any) -> bool:
    if isinstance(want, tuple):  # upstream matches the error by substring
        return isinstance(got, tuple) and want[1] in got[1]
    return bool(got == want)


PARAMS = [pytest.param(name, variant, id=f"{name}-{variant}")
          for name, case in CASES.items() for variant in variants_of(case)]


@pytest.mark.parametrize("name, variant", PARAMS)
def test_1_36_3_gives_upstreams_v0_36_3_answer(name, variant):
    case = CASES[name]
    assert same(answer(case, "1.36.3", variant), expected(case))


@pytest.mark.parametrize("name, variant", PARAMS)
def test_1_36_2_keeps_the_counters_where_v0_36_2_would(name, variant):
    case = CASES[name]
    want = expected(case, "leak" if "leak" in case else "expect")
    for version in ("1.36", "1.36.2"):
        assert same(answer(case, version, variant), want), version


def test_the_quirk_changes_answers_the_fix_repairs():
    assert sum("leak" in case for case in CASES.values()) >= 3


@pytest.mark.parametrize("version, fixed", [
    ("1.36", False), ("1.36.0", False), ("1.36.2", False), ("v1.36.2-gke.100", False),
    ("1.36.3", True), ("v1.36.6", True), ("1.36.3-eks.1", True),
    # not backported: v0.35.10, v0.34.13 and v0.33.13 still leak
    ("1.35.10", False), ("1.34.13", False), ("1.33.13", False)])
def test_the_patch_release_selects_the_rollback(version, fixed):
    assert ("rollback_rejected_devices" in allocator_fixes(version)) == fixed
    assert Features.parse("default", version).rollback_rejected_devices == fixed
    assert Features.parse("none,PartitionableDevices", version).rollback_rejected_devices == fixed
    assert Features.parse("all", version).rollback_rejected_devices == fixed


EACH_0165_ON_1_36_3 = ["gpu-1", "gpu-2", "gpu-3", "gpu-0"]  # allocate-bench built against v1.36.3


def each_0165_on_gpu_node_02(version: str) -> dict[str, Any]:
    case = DATA / "conformance" / "random" / "each-0165"
    args = parse_args((case / "args").read_text())
    objects = [d for d in yaml.load_all((case / "input.yaml").read_text(), Loader=Loader) if d]
    report = build_report(objects, mode=args.mode, nodes=_split(args.node), claims=["ml-infer/train-0"],
                          features=Features.parse(args.features, version).with_variant(args.allocator), timeout=None)
    [result] = [r for r in report["results"] if r.get("node") == "gpu-node-02"]
    return result


def test_conformance_case_each_0165_allocates_on_1_36_3_only():
    assert each_0165_on_gpu_node_02("1.36.2")["outcome"] == "unallocatable"
    fixed = each_0165_on_gpu_node_02("1.36.3")
    assert fixed["outcome"] == "allocated"
    [allocation] = fixed["allocations"].values()
    assert [r["device"] for r in allocation["devices"]["results"]] == EACH_0165_ON_1_36_3
