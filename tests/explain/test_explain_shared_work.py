"""Work explain shares instead of repeating gives the answers of the plain path it replaces.

- the device funnel takes CEL outcomes from the allocator's SelectorEvaluator (instead of evaluating again);
- the per-node verdicts of an explanation reuse the target attempt's DynamicResources verdicts (`defer`);
- fix candidates are verified on trials that share the snapshot's unchanged objects (`trials.Trial`) instead of
  a full copy each, and no trial writes the snapshot; releases and request edits are tried on forks of the
  replayed cluster (`Cluster.fork`) with the same answers.
"""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra.allocator.features import Features
from gpudra.explain import simulate
from gpudra.explain.analyze import explain
from gpudra.explain.devices import SelectorSet, slice_index, visible_pools
from gpudra.explain.fixes import find_fixes
from test_explain_scenarios import DRIVER, PRODUCT, claim, device_class, gpu, gpu_slice, node, pod, request

TAINT = {"key": "example.com/broken", "value": "yes", "effect": "NoSchedule"}
EXPRESSIONS = (
    f"{PRODUCT} == 'H100'",
    f"device.attributes['{DRIVER}'].missing == 1",  # a runtime error on every device
    f"device.attributes['{DRIVER}'].cores > 2",  # an error on devices without `cores`
    f"device.capacity['{DRIVER}'].memory.compareTo(quantity('40Gi')) >= 0",
    "device.allowMultipleAllocations == true",
    f"'{DRIVER}' in device.attributes && device.attributes['{DRIVER}'].tags.exists(t, t == 'a')",
    "device.driver ==",  # a compile error
)


@st.composite
def devices(draw):
    found = []
    for index in range(draw(st.integers(1, 4))):
        attributes = {}
        if draw(st.booleans()):
            attributes["cores"] = {"int": draw(st.integers(0, 4))}
        if draw(st.booleans()):
            attributes["tags"] = {"strings": draw(st.lists(st.sampled_from(["a", "b"]), max_size=2))}
        extra = {"allowMultipleAllocations": True} if draw(st.booleans()) else {}
        found.append(gpu(f"gpu-{index}", draw(st.sampled_from(["A100", "H100"])),
                         draw(st.sampled_from(["40Gi", "80Gi"])), attributes=attributes, **extra))
    return found


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(devices(), st.sampled_from(["default", "default,+ListTypeAttributes", "default,-ConsumableCapacity", "all"]),
       st.sampled_from(["1.34", "1.36"]))
def test_selector_outcomes_taken_from_the_allocator_are_the_funnels_own(found, gates, release):
    from gpudra.versions import parse_version

    features = Features.parse(gates, parse_version(release))
    index = slice_index([gpu_slice("node-a", found)], features)
    refs = [ref for pool in visible_pools(node("node-a"), index=index) for ref in pool.devices]
    assert refs and all(ref.info is not None for ref in refs)
    plain = SelectorSet(features.list_type_attributes)
    shared = SelectorSet(features.list_type_attributes)
    for expression in EXPRESSIONS:
        for ref in refs:
            assert shared.evaluate(expression, ref, index.evaluator) == plain.evaluate(expression, ref)


# ------------------------------------------------------------------------------------ whole clusters


@st.composite
def clusters(draw):
    """A few nodes (some tainted), pods already bound with their claims, pods pending ahead of the target (some
    cannot fit), and a target that usually does not fit, so fixes of every kind are tried."""
    objects = [device_class()]
    names = [f"node-{i}" for i in range(draw(st.integers(1, 3)))]
    gpus: dict[str, list[str]] = {}
    for name in names:
        taints = [dict(TAINT)] if draw(st.integers(0, 3)) == 0 else None
        objects.append(node(name, cpu=draw(st.sampled_from(["2", "8"])), taints=taints))
        found = []
        for index in range(draw(st.integers(1, 4))):
            extra = {"taints": [dict(TAINT)]} if draw(st.integers(0, 4)) == 0 else {}
            found.append(gpu(f"gpu-{index}", draw(st.sampled_from(["A100", "H100"])), **extra))
        gpus[name] = [d["name"] for d in found]
        objects.append(gpu_slice(name, found))
    for number, name in enumerate(names):  # bound pods holding devices
        held = [d for d in gpus[name] if draw(st.integers(0, 2)) == 0]
        if held:
            holder = claim(f"held-{number}", [request(count=len(held))], allocated=(name, held),
                           reserved_for=f"bound-{number}")
            objects.append(holder)
            uses = {"gpu": f"held-{number}"}
            if len(held) > 1 and draw(st.booleans()):  # the pod keeps one device in a claim of its own
                objects.append(claim(f"own-{number}", [request()], allocated=(name, held[-1:]),
                                     reserved_for=f"bound-{number}"))
                holder["spec"]["devices"]["requests"][0]["exactly"]["count"] = len(held) - 1
                del holder["status"]["allocation"]["devices"]["results"][-1]
                uses["own"] = f"own-{number}"
            objects.append(pod(f"bound-{number}", uses, node_name=name, tolerations=[{"operator": "Exists"}]))
            if draw(st.integers(0, 3)) == 0:  # a second pod shares the claim
                holder["status"]["reservedFor"].append({"resource": "pods", "name": f"sharer-{number}",
                                                        "uid": f"uid-sharer-{number}"})
                objects.append(pod(f"sharer-{number}", {"gpu": f"held-{number}"}, node_name=name,
                                   tolerations=[{"operator": "Exists"}]))
    if draw(st.booleans()):  # a pool every node sees, part of it held by a pod on the first node
        shared = gpu_slice("unused", [gpu(f"net-{i}") for i in range(draw(st.integers(1, 3)))], pool="net",
                           name="net-gpus", allNodes=True)
        del shared["spec"]["nodeName"]
        objects.append(shared)
        held_net = [d["name"] for d in shared["spec"]["devices"] if draw(st.booleans())]
        if held_net:
            holder = claim("held-net", [request(count=len(held_net))], allocated=("net", held_net),
                           reserved_for="bound-net")
            holder["status"]["allocation"].pop("nodeSelector")
            objects.append(holder)
            objects.append(pod("bound-net", {"gpu": "held-net"}, node_name=names[0]))
    for number in range(draw(st.integers(0, 3))):  # pending pods ahead of the target
        objects.append(claim(f"ahead-{number}", [request(count=draw(st.integers(1, 5)))]))
        objects.append(pod(f"ahead-{number}", {"gpu": f"ahead-{number}"}))
    selectors = (f"{PRODUCT} == '{draw(st.sampled_from(['A100', 'H100']))}'",) if draw(st.booleans()) else ()
    objects.append(claim("target", [request(count=draw(st.integers(1, 4)), selectors=selectors)]))
    extra = {"schedulingGates": [{"name": "wait"}]} if draw(st.integers(0, 5)) == 0 else {}
    objects.append(pod("target", {"gpu": "target"}, cpu=draw(st.sampled_from(["1", "4"])), **extra))
    return objects


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_fixes_on_shared_trials_are_those_on_full_copies(objects):
    explanation = explain(objects, "pod/target", fixes=False)
    if explanation.fits or explanation.context is None:
        return
    cluster = explanation.context.cluster
    before = copy.deepcopy(simulate.snapshot(cluster))
    shared = find_fixes(objects, explanation, share=True)
    assert simulate.snapshot(cluster) == before  # no trial wrote what the next one starts from
    full = find_fixes(objects, explanation, share=False)
    assert [f.to_dict() for f in shared] == [f.to_dict() for f in full]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_node_verdicts_reused_from_the_attempt_are_fresh_ones(objects):
    """Every filter's verdict per node as the explanation keeps it (DynamicResources from the attempt's cache)
    equals a fresh evaluation with every allocation computed."""
    from gpudra.scheduler.scheduler import Scheduler

    run = simulate.run_until(simulate.working_copy(objects), "default/target")
    if run.evaluations is None:
        return
    fresh = Scheduler(run.cluster)
    fresh.defer_allocations = False
    info = fresh.pod_info("default/target")
    for node_name, result in run.evaluations.items():
        evaluation = fresh.filter_node(info, node_name, all_reasons=True)
        assert [(r.plugin, r.message) for r in result.reasons] == \
            [(r.plugin, r.message) for r in evaluation.result.reasons]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_claim_explanations_from_shared_searches_are_those_of_one_search_per_node(objects):
    """`explain claim/X` asks Allocator.fits per node (nodes in one device state share a search) and searches the
    devices only on the first node that fits: the same explanation, fixes included, as a full search per node."""
    import pytest

    from gpudra.explain.render import to_json

    shared = to_json(explain(objects, "claim/target"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simulate, "fits", simulate.allocate)
        plain = to_json(explain(objects, "claim/target"))
    assert shared == plain


def test_releases_and_request_edits_are_tried_on_forks_of_the_cluster_not_rebuilt_ones(monkeypatch):
    """Releasing a claim that one pod holds (Cluster.fork + delete_pod) and lowering a count (a fork's copy of the
    claim edited) are tried without building a cluster again from the objects, and leave the replayed one as it was."""
    from gpudra.scheduler import state as cluster_module

    objects = [device_class(), node("node-a"), node("node-b"),
               gpu_slice("node-a", [gpu("gpu-0"), gpu("gpu-1")]), gpu_slice("node-b", [gpu("gpu-0")]),
               claim("one", [request()], allocated=("node-a", ["gpu-0"]), reserved_for="small"),
               pod("small", {"gpu": "one"}, node_name="node-a"),
               claim("two", [request()], allocated=("node-a", ["gpu-1"]), reserved_for="other"),
               pod("other", {"gpu": "two"}, node_name="node-a"),
               claim("want", [request(count=3)]), pod("target", {"gpu": "want"})]
    explanation = explain(objects, "pod/target", fixes=False)
    before = copy.deepcopy(simulate.snapshot(explanation.context.cluster))
    built, forks = [], []
    real_init, real_fork = cluster_module.ClusterState.__init__, cluster_module.ClusterState.fork
    monkeypatch.setattr(cluster_module.ClusterState, "__init__",
                        lambda self, *a, **k: (built.append(1), real_init(self, *a, **k))[1])
    monkeypatch.setattr(cluster_module.ClusterState, "fork",
                        lambda self, *a, **k: (forks.append(1), real_fork(self, *a, **k))[1])
    fixes = find_fixes(objects, explanation)
    # node-a has 2 devices and 3 are needed, so neither release helps: judged on forks; the lower-count trial (1
    # device, on node-b) edits the claim on a fork too: no cluster is built again
    assert len(forks) == 3 and built == []
    assert simulate.snapshot(explanation.context.cluster) == before
    assert [f.kind for f in fixes] == ["lower-count"]
    monkeypatch.undo()
    assert [f.to_dict() for f in find_fixes(objects, explanation, share=False)] == [f.to_dict() for f in fixes]
