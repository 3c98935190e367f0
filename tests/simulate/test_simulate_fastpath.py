"""The simulator's fast path (gpudra/simulate/fastpath.py) against the reference path (gpudra's scheduler and
allocator on the trace as Kubernetes objects): every pod on the same node and GPUs, and the same allocation and
fragmentation after every pod, for every paper policy and `fgd-reserve`, over many seeds and random traces."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.simulate import run_experiment
from gpudra.simulate.engine import start, tuned_workload
from gpudra.simulate.policies import ONLINE_POLICIES, SIM_POLICIES
from gpudra.simulate.trace import MILLI, Task, Trace, TraceNode

from support.traces import small_trace
from test_simulate_artifact import POLICIES as ARTIFACT_POLICIES
from test_simulate_artifact import TRACES as ARTIFACT_TRACES
from test_simulate_artifact import replay_against_artifact


def _replay(trace: Trace, workload: list[tuple[str, Task]], policy: str, seed: int, fast: bool) -> list:
    """(pod, node, GPUs, allocated, fragmented, free) after every pod of the workload."""
    tuning = random.Random(seed)
    tuning.random()  # the tie order is drawn from the stream after tuning; any state of it will do here
    run = start(trace, workload, policy, seed, "dra", tuning, fast=fast)
    assert (run.fast is not None) == fast
    out = []
    for pod_name, _task in workload:
        placement = run.schedule(pod_name)
        out.append((pod_name, placement.node, placement.gpus, run.used, round(run.frag, 6), run.free))
    return out


def _compare(trace: Trace, workload: list[tuple[str, Task]], policy: str, seed: int) -> list:
    fast = _replay(trace, workload, policy, seed, True)
    reference = _replay(trace, workload, policy, seed, False)
    differ = [(f, r) for f, r in zip(fast, reference) if f != r]
    assert not differ, f"{len(differ)} of {len(fast)} pods differ; first (fast, reference): {differ[0]}"
    return fast


FAST_PATH_POLICIES = tuple(p for p in SIM_POLICIES if p not in ONLINE_POLICIES)


@pytest.mark.parametrize("policy", ONLINE_POLICIES)
def test_online_policies_take_the_reference_path(policy):
    """Their keys change with every new popularity estimate, which the fast path's per-shape heaps cannot follow."""
    trace = small_trace(3)
    workload = tuned_workload(trace.tasks, trace.gpus * MILLI, 1.5, random.Random(0))
    assert start(trace, workload, policy, 0, "dra", random.Random(0)).fast is None
    assert start(trace, workload, "fgd-reserve", 0, "dra", random.Random(0)).fast is not None


@pytest.mark.parametrize("policy", FAST_PATH_POLICIES)
def test_fast_path_places_every_pod_as_the_reference_path_over_seeds(policy):
    trace = small_trace(3)
    unplaced = 0
    for seed in range(8):
        workload = tuned_workload(trace.tasks, trace.gpus * MILLI, 1.5, random.Random(seed))
        placed = _compare(trace, workload, policy, seed)
        unplaced += sum(1 for p in placed if p[1] is None)
    assert unplaced > 0  # the cluster filled: the filters' negative answers were compared too


MODELS = ("G2", "T4", "V100")
NODES = st.lists(st.builds(TraceNode, st.just(""), st.sampled_from([2000, 8000, 32000]),
                           st.sampled_from([4096, 16384, 65536]), st.integers(0, 4), st.sampled_from(MODELS)),
                 min_size=1, max_size=5)
SHAPES = st.one_of(
    st.tuples(st.just(0), st.just(0)),  # CPU only
    st.tuples(st.just(1), st.sampled_from([100, 250, 330, 500, 700])),  # a share
    st.tuples(st.integers(1, 4), st.just(MILLI)),  # whole GPUs
)
TASKS = st.lists(st.tuples(st.sampled_from([0, 1000, 4000, 8000]), st.sampled_from([0, 2048, 8192, 32768]), SHAPES,
                           st.sampled_from([(), ("T4",), ("G2", "V100")])), min_size=1, max_size=6)


@settings(max_examples=120, deadline=None)
@given(NODES, TASKS, st.integers(0, 2**16), st.sampled_from(FAST_PATH_POLICIES))
def test_fast_path_matches_the_reference_on_random_traces(nodes, shapes, seed, policy):
    """Random clusters (CPU-only nodes, short memory, models) and task shapes (pinned, CPU-only, shares, whole
    GPUs, zero requests), 40 tasks drawn with replacement: the cluster fills."""
    nodes = [TraceNode(f"n-{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model if n.gpus else "")
             for i, n in enumerate(nodes)]
    tasks = [Task(f"t-{i}", cpu, memory, count, milli, spec if count else ())
             for i, (cpu, memory, (count, milli), spec) in enumerate(shapes)]
    draw = random.Random(seed)
    workload = [(f"w-{i}", tasks[draw.randrange(len(tasks))]) for i in range(40)]
    _compare(Trace("random", nodes, tasks), workload, policy, seed)


@pytest.mark.parametrize("policy", ["fgd", "random", "gpu-clustering", "fgd-reserve"])
def test_events_with_deletions_give_the_reference_series(policy):
    fast = run_experiment(small_trace(2), policy, seed=3, method="events")
    reference = run_experiment(small_trace(2), policy, seed=3, method="events", path="reference")
    assert (fast.path, reference.path) == ("fast", "reference")
    assert replace(fast.timeless(), path=None) == replace(reference.timeless(), path=None)
    assert fast.series["allocation_ratio"][-1] == 0.0 and fast.peak_allocation_ratio > 0


def test_the_reference_path_serves_what_the_fast_path_cannot_hold():
    """A task of two half GPUs is outside the node model: the run takes the reference path; a run whose
    scheduler is asked for before any pod switches to it; one that placed pods on the fast path refuses."""
    nodes = [TraceNode("a", 8000, 16384, 2, "G2")]
    odd = Task("odd", 1000, 1024, 2, 500)
    plain = Task("plain", 1000, 1024, 1, 500)
    assert start(Trace("odd", nodes, [odd]), [("odd", odd)], "fgd", 1, "dra").fast is None
    assert start(Trace("p", nodes, [plain]), [("p", plain)], "kube", 1, "dra").fast is None
    assert start(Trace("p", nodes, [plain]), [("p", plain)], "fgd", 1, "device-plugin").fast is None
    run = start(Trace("p", nodes, [plain]), [("p", plain), ("q", plain)], "fgd", 1, "dra")
    assert run.fast is not None
    assert run.scheduler.schedule_pod("sim/p").node == "a" and run.fast is None
    run = start(Trace("p", nodes, [plain]), [("p", plain), ("q", plain)], "fgd", 1, "dra")
    assert run.schedule("p").node == "a"
    with pytest.raises(RuntimeError):
        run.reference()


@pytest.mark.parametrize("trace", ARTIFACT_TRACES)
@pytest.mark.parametrize("policy", ARTIFACT_POLICIES)
def test_the_reference_path_places_every_pod_where_the_artifact_does(trace, policy):
    """tests/simulate/test_simulate_artifact.py replays the artifact's records on the default path (the fast one for these
    traces); the reference path, which the fast one is checked against, must match them too."""
    assert replay_against_artifact(trace, policy, fast=False).fast is None
