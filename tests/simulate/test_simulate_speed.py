"""The simulator's fast paths give the answers of the plain ones: nodes in the same device state share one device
search (`Allocator.fits`), allocations are computed for the chosen node only, shape indexes and cached verdicts.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.gpuplugin.slices import COMPUTE_CAPACITY, DEFAULT_DRIVER_NAME, device_classes
from gpudra.scheduler.allocation import make_allocator
from gpudra.simulate.engine import start, tuned_workload
from gpudra.simulate.fgd import Fragmentation, NodeRes, TypicalTask, fgd_choice
from gpudra.simulate.objects import NAMESPACE, node_objects
from gpudra.simulate.trace import MILLI, TraceNode

from support.traces import small_trace


def _devices(allocation: dict) -> list:
    """What an allocation places: the devices and what it consumes of them. Not the shareIDs: they are derived
    from the claim a search ran for, and the plain path may reuse a verdict searched for another pod of the same
    shape, the fast path searches the chosen node for the pod itself."""
    results = allocation["devices"]["results"]
    return [(r["pool"], r["device"], r.get("consumedCapacity")) for r in results] + [allocation.get("nodeSelector")]


def _placements(policy: str, fast: bool) -> tuple[list, int]:
    """(node and devices of every pod, device searches shared between nodes) for one tuned experiment."""
    trace = small_trace(4)
    workload = tuned_workload(trace.tasks, trace.gpus * MILLI, 1.6, random.Random(7))
    run = start(trace, workload, policy, 7, "dra")
    if not fast:
        run.scheduler.indexed = False
        run.scheduler.defer_allocations = False
    placed = []
    for pod_name, _ in workload:
        result = run.scheduler.schedule_pod(f"{NAMESPACE}/{pod_name}")
        allocations = [_devices(run.cluster.claims[key]["status"]["allocation"]) for key in result.claims]
        placed.append((pod_name, result.node, allocations))
    return placed, run.cluster.allocator().fit_hits


@pytest.mark.parametrize("policy", ["fgd", "bestfit", "kube", "fgd-reserve", "binpack"])
def test_fast_scheduler_path_places_every_pod_as_the_plain_one(policy):
    fast, shared = _placements(policy, fast=True)
    plain, plain_shared = _placements(policy, fast=False)
    assert fast == plain
    assert sum(1 for _, node, _ in fast if node) > len(fast) // 2  # a run where placements matter
    assert plain_shared == 0 or policy == "fgd-reserve"  # the plain path searches every node itself
    if policy in ("fgd", "bestfit", "kube"):  # scores that need no allocations: searches were shared
        assert shared > 0


def _claim(name: str, count: int, milli: int | None) -> dict:
    exactly: dict = {"deviceClassName": DEFAULT_DRIVER_NAME, "allocationMode": "ExactCount", "count": count}
    if milli is not None:
        exactly["capacity"] = {"requests": {COMPUTE_CAPACITY: str(milli)}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "t", "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def _held(node: str, gpu: int, share: int | None, index: int) -> dict:
    """An allocated claim holding a share of `gpu` on `node` (or the whole GPU, exclusively, when share is None)."""
    result = {"request": "gpu", "driver": DEFAULT_DRIVER_NAME, "pool": node, "device": f"gpu-{gpu}"}
    if share is not None:
        result.update({"shareID": f"share-{node}-{index}", "consumedCapacity": {COMPUTE_CAPACITY: str(share)}})
    claim = _claim(f"held-{node}-{index}", 1, share)
    claim["status"] = {"allocation": {"devices": {"results": [result]}}}
    return claim


GPU_STATE = st.one_of(st.none(), st.lists(st.integers(1, 600), max_size=3).filter(lambda s: sum(s) <= MILLI))


@settings(max_examples=60, deadline=None)
@given(st.lists(GPU_STATE, min_size=4, max_size=4), st.randoms(use_true_random=False), st.integers(1, 4),
       st.one_of(st.none(), st.integers(1, 1000)), st.booleans())
def test_nodes_in_the_same_device_state_share_the_search_answer(states, rng, count, milli, same_product):
    """Node b holds the same GPU states as node a in another order: `fits` on b answers from a's search (no
    search of its own), and that answer is what `allocate` finds on b (also with a matchAttribute constraint)."""
    order = list(range(4))
    rng.shuffle(order)
    nodes = {name: node_objects(TraceNode(name, 64000, 262144, 4, "G2"), "dra") for name in ("a", "b")}
    slices = [s for objects in nodes.values() for s in objects[1:]]
    held, index = [], 0
    for gpu, state in enumerate(states):
        for node, at in (("a", gpu), ("b", order[gpu])):
            for share in [None] if state is None else state:
                held.append(_held(node, at, share, index))
                index += 1
    classes = {c["metadata"]["name"]: c for c in device_classes()}
    allocator = make_allocator(classes, slices, held)
    claim = _claim("asked", count if milli is None else 1, milli)
    if same_product:
        claim["spec"]["devices"]["constraints"] = [{"matchAttribute": f"{DEFAULT_DRIVER_NAME}/productName"}]
    on_a = allocator.fits(nodes["a"][0], [claim])
    searches = allocator.fit_searches
    on_b = allocator.fits(nodes["b"][0], [claim])
    assert allocator.fit_searches == searches and allocator.fit_hits == 1
    for name, answer in (("a", on_a), ("b", on_b)):
        assert answer.outcome == allocator.allocate(nodes[name][0], [claim]).outcome
        assert answer.allocations == [] and answer.deferred == (answer.outcome == "allocated")


def test_claims_of_other_shapes_are_searched_per_node():
    nodes = [node_objects(TraceNode(name, 64000, 262144, 2, "G2"), "dra") for name in ("a", "b")]
    classes = {c["metadata"]["name"]: c for c in device_classes()}
    allocator = make_allocator(classes, [s for objects in nodes for s in objects[1:]], [])
    claim = _claim("two", 2, None)
    same_product = {"matchAttribute": f"{DEFAULT_DRIVER_NAME}/productName"}
    claim["spec"]["devices"]["constraints"] = [same_product, dict(same_product)]  # one is of fit_key's shape, two not
    for objects in nodes:
        outcome = allocator.fits(objects[0], [claim])
        assert outcome.outcome == "allocated" and not outcome.deferred and len(outcome.allocations) == 1
    assert allocator.fit_hits == 0


TYPICAL = st.lists(st.builds(TypicalTask, st.sampled_from([0, 2000, 4000, 8000, 16000]),
                             st.sampled_from([0, 250, 500, 1000]), st.sampled_from([0, 1, 2]),
                             st.sampled_from([(), ("G2",), ("T4",)]), st.floats(0.01, 1.0)), min_size=1, max_size=6)
GPUS = st.lists(st.integers(0, 10).map(lambda x: 100 * x), min_size=1, max_size=4).map(tuple)


@settings(max_examples=100, deadline=None)
@given(TYPICAL, st.lists(st.integers(0, 20000), min_size=2, max_size=6), GPUS, st.sampled_from(["G2", "T4"]),
       st.sampled_from([(1000, 250, 1), (2000, 1000, 1), (4000, 1000, 2), (0, 500, 1)]))
def test_fragmentation_memo_keys_give_the_fresh_answers(typical, cpus, gpus, model, task):
    """The memo keys read free CPU through its class: whatever states were asked before, the answer for a node
    state is what a fresh (empty-memo) measure computes."""
    shared = Fragmentation(typical)
    cpu, milli, count = task
    for cpu_left in cpus:
        res = NodeRes(cpu_left, 32000, gpus, model)
        assert shared.amount(cpu_left, gpus, model) == Fragmentation(typical).amount(cpu_left, gpus, model)
        assert fgd_choice(shared, res, cpu, milli, count) == fgd_choice(Fragmentation(typical), res, cpu, milli, count)
