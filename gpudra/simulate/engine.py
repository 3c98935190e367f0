"""One experiment: a trace replayed through gpudra's scheduler and allocator with one policy and one seed.

`tune` (the paper's "workload tuning", artifact pkg/simulator/simulator.go): the trace's tasks in random order,
then tasks sampled with replacement until the arrived GPU demand would pass `tune` × capacity; every task is
submitted once, in order, and never deleted. After every task the allocation ratio (GPU milli allocated /
capacity) and the fragmentation (FGD's measure, `fgd.py`) are recorded against the arrived GPU demand; the
per-percent series is the mean over the tasks whose arrived demand rounds to that percent (the artifact's
merge_alloc_discrete.py).

`events`: tasks are created at `creation_time` and deleted at `deletion_time`, in time order (a failed task is
not retried); the series is recorded against time.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable

from gpudra.errors import GpudraError
from gpudra.scheduler import Scheduler
from gpudra.controllers import ManagedCluster
from gpudra.scheduler.claimstatus import allocated_device_ids
from gpudra.scheduler.policies import POLICIES as GPUDRA_POLICIES

from .fgd import Fragmentation, NodeRes, typical_tasks
from .objects import MODES, NAMESPACE, cluster_objects, gpu_device_id, pod_objects
from . import fastpath
from .fastpath import FastContext, FastScheduler, FastState
from .results import ExperimentResult
from .policies import (ONLINE_POLICIES, PAPER_POLICIES, SIM_POLICIES, FgdReservePolicy, SimContext, node_ranks,
                       paper_policy, paper_policy_class)
from .timeslicing import DEFAULT_REPLICAS, MIN_REPLICAS, ReplicaState, replicas_asked
from .trace import MILLI, Task, Trace

# What `--policies all` runs on a trace: the paper's policies, the scheduler's kube and binpack, and gpudra's
# fgd-reserve. Not the scheduler's spread, nor its fragmentation (FGD adapted to DRA, one allocator search per workload
# class and node: for manifests, where `fragmentation` means it as in `gpudra schedule`).
ALL_POLICIES = PAPER_POLICIES + ("kube", "binpack", FgdReservePolicy.name)
KNOWN_POLICIES = ALL_POLICIES + ONLINE_POLICIES  # and the variants that learn task popularity online, by name
# The simulator's old names for its own policies: refused with the new name, so that a script written for them
# does not silently run the scheduler's `fragmentation`, a different algorithm.
RENAMED_POLICIES = {"fragmentation": "fgd-reserve", "fragmentation-online": "fgd-reserve-online"}
DEFAULT_TUNE = 1.3
METHODS = ("tune", "events")
# Which path places the pods: `fast` (fastpath.py: the node model, the same placements, tested pod by pod), the
# `reference` (gpudra's scheduler and allocator on the trace as Kubernetes objects), or `auto`: fast where it
# applies (DRA mode, a policy of fastpath.FAST_POLICIES, the newest release's behaviour, simple task shapes).
PATHS = ("auto", "fast", "reference")
Progress = Callable[[int, int], None]


class SimulationError(GpudraError, ValueError):
    pass


MAX_TUNE = 10.0  # ten times the capacity: every GPU is long taken; 1e308 would sample tasks until memory runs out


def check_tune(tune: float) -> None:
    """SimulationError unless `tune` ends: an infinite, NaN or huge target would sample tasks for ever."""
    if not (0 <= tune <= MAX_TUNE):  # also false for NaN
        raise SimulationError(f"tune: must be from 0 to {MAX_TUNE:g} (0: every task of the trace once, in random "
                              f"order), not {tune:g}")


def check_trace_policy(policy: str) -> None:
    """SimulationError unless `policy` replays a trace (KNOWN_POLICIES, or the scheduler's spread); an old name
    says its new one."""
    if policy in RENAMED_POLICIES:
        raise SimulationError(f"policy {policy!r} was renamed {RENAMED_POLICIES[policy]!r} (FGD with the "
                              "hosting-reserve tie-break); the scheduler's 'fragmentation' applies to -f manifests")
    if policy not in SIM_POLICIES and policy not in GPUDRA_POLICIES:
        raise SimulationError(f"unknown policy {policy!r}; choose from {', '.join(KNOWN_POLICIES)}")


def path_taken(trace: Trace, policy: str, mode: str, release: "Release" = None, path: str = "auto") -> str:
    """`fast` or `reference`: the path an experiment runs on. SimulationError for an unknown path, or for `fast`
    where it does not apply (the reason named)."""
    if path not in PATHS:
        raise SimulationError(f"unknown path {path!r}; choose {', '.join(PATHS)}")
    if path == "reference":
        return "reference"
    reason = fast_path_refusal(trace, policy, mode, release)
    if reason is None:
        return "fast"
    if path == "fast":
        raise SimulationError(f"--path fast: {reason}; use --path reference or auto")
    return "reference"


def fast_path_refusal(trace: Trace, policy: str, mode: str, release: "Release" = None) -> str | None:
    """Why an experiment cannot take the fast path (None: it takes it)."""
    if mode != "dra":
        return f"the fast path models DRA mode only, not {mode}"
    if release is not None:
        return "--kubernetes-version and --features run the scheduler and allocator of that release"
    if policy not in SIM_POLICIES or paper_policy_class(policy) not in fastpath.FAST_POLICIES:
        return f"policy {policy} is not on the fast path (only {', '.join(fastpath.FAST_POLICY_NAMES)})"
    return fastpath.why_not(trace.nodes, trace.tasks)


def tuned_workload(tasks: list[Task], capacity_milli: int, tune: float, rng: random.Random) -> list[tuple[str, Task]]:
    """(pod name, task) in submission order (SortClusterPods with shuffling, then TunePodsByNodeTotalResource)."""
    named = sorted(((t.name, t) for t in tasks), key=lambda item: item[0])
    rng.shuffle(named)
    if tune <= 0:
        return named
    target = tune * capacity_milli
    total = sum(t.total_gpu_milli for _, t in named)
    if total > target:  # tune down: drop random tasks
        while total > target and named:
            _, dropped = named.pop(rng.randrange(len(named)))
            total -= dropped.total_gpu_milli
        return named
    pool = sorted(tasks, key=lambda t: t.name)
    if not any(t.total_gpu_milli > 0 for t in pool):  # sampling would never reach the target
        raise SimulationError(f"cannot tune the workload to {tune} x the GPU capacity: no task of the trace requests "
                              "a GPU (use --tune 0 to submit the trace's tasks as they are)")
    index = 0
    while pool:
        task = pool[rng.randrange(len(pool))]
        # the artifact compares the per-GPU milli here (and adds the total): kept, it decides where sampling stops
        if total + task.gpu_milli > target:
            break
        total += task.total_gpu_milli
        named.append((f"{task.name}-tuned-{index}", task))
        index += 1
    return named


@dataclass(frozen=True)
class Placement:
    """Where one task went: the node (None: unschedulable) and the indices of the GPUs it got there (DRA mode;
    time-slicing: the GPU of each replica, so an index repeats when two replicas share a GPU; in device-plugin
    mode nothing says which GPUs, so none)."""

    pod: str
    node: str | None
    gpus: tuple[int, ...] = ()


Reference = tuple[ManagedCluster, Scheduler, SimContext]


@dataclass
class Run:
    """The live state of one experiment. Placements go through the fast path (`fastpath.py`) when it applies,
    else through the reference path: gpudra's scheduler and allocator on the trace as Kubernetes objects, built on
    first use (`cluster`, `scheduler`; a run that has placed pods on the fast path cannot switch)."""

    trace: Trace
    policy: str
    seed: int
    mode: str
    build_reference: Callable[[], Reference]
    context: SimContext
    capacity_milli: int
    node_used: dict[str, int]
    node_frag: dict[str, float]
    used: int = 0
    frag: float = 0.0
    # GPU milli free: capacity - used; in time-slicing, where `used` counts GPUs reserved, the GPUs' compute no
    # pod's demand fills (`ReplicaState.gpu_res`): the fragmentation measure's basis and its ratio's denominator
    free: int = 0
    node_free: dict[str, int] = field(default_factory=dict)
    fail_requests_greater_than_one: bool = False  # time-slicing: the plugin refuses requests of > 1 replica
    fast: FastScheduler | None = None
    _reference: Reference | None = None

    def reference(self) -> Reference:
        if self._reference is None:
            if self.fast is not None and self.fast.state.changes:
                raise RuntimeError("internal error: a run that placed pods on the fast path has no reference path")
            self._reference = self.build_reference()
            self.context = self._reference[2]
            self.fast = None
        return self._reference

    @property
    def cluster(self) -> ManagedCluster:
        return self.reference()[0]

    @property
    def scheduler(self) -> Scheduler:
        return self.reference()[1]

    def refresh(self, node: str) -> NodeRes:
        res = self.context.node_res(node)
        replicas = self.context.replicas
        # time-slicing: a GPU with any replica taken is reserved (its demand is `replicas.demand`)
        used = (MILLI * replicas.reserved_gpus(node) if replicas is not None
                else len(res.gpu_left) * MILLI - res.gpu_left_total)
        measured = res if replicas is None else replicas.gpu_res(node, res)
        frag = self.context.fragmentation.node(measured)
        self.used += used - self.node_used.get(node, 0)
        self.frag += frag - self.node_frag.get(node, 0.0)
        self.free += measured.gpu_left_total - self.node_free.get(node, 0)
        self.node_free[node] = measured.gpu_left_total
        self.node_used[node] = used
        self.node_frag[node] = frag
        return res

    def schedule(self, pod_name: str) -> Placement:
        """Schedule one submitted task through the scheduler and allocator; the node's totals follow."""
        key = f"{NAMESPACE}/{pod_name}"
        replicas = self.context.replicas
        task = self.context.tasks[key]
        if self.fast is not None:  # never an online policy (fastpath.FAST_POLICIES)
            node, gpus = self.fast.schedule(pod_name, task)
            if node is not None:
                self.refresh(node)
            return Placement(pod_name, node, gpus)
        self.context.popularity.observe(task)  # it has arrived: the online policies' estimate counts it
        if replicas is not None and self.fail_requests_greater_than_one and replicas_asked(task) > 1:
            # rm.go ValidateRequests: the kubelet's Allocate fails, the pod fails admission and holds nothing
            return Placement(pod_name, None)
        result = self.scheduler.schedule_pod(key)
        if not result.scheduled or result.node is None:
            return Placement(pod_name, None)
        if replicas is not None:
            picked = replicas.place(key, result.node, task)
            self.refresh(result.node)
            return Placement(pod_name, result.node, tuple(sorted(picked)))
        self.refresh(result.node)
        devices = self.context.node_gpus.get(result.node, ("", []))[1]
        indices = sorted(devices.index(device) for claim in result.claims
                         for device in allocated_device_ids(self.cluster.claims[claim]) if device in devices)
        return Placement(pod_name, result.node, tuple(indices))

    def delete(self, pod_name: str, node: str) -> None:
        key = f"{NAMESPACE}/{pod_name}"
        if self.fast is not None:
            self.refresh(self.fast.state.unbind(key))
            return
        self.cluster.delete_pod(key)
        if self.context.replicas is not None:
            self.context.replicas.release(key)
        self.refresh(node)

    def oversubscription(self) -> tuple[int, int]:
        """(GPU milli placed beyond capacity, GPUs oversubscribed); (0, 0) outside time-slicing."""
        replicas = self.context.replicas
        return (replicas.oversubscribed_milli(), replicas.oversubscribed_gpus()) if replicas is not None else (0, 0)


# (Kubernetes version, --features text) a run behaves as; None: the newest release's defaults.
Release = tuple[str | None, str | None] | None


def start(trace: Trace, workload: list[tuple[str, Task]], policy: str, seed: int, mode: str,
          rng: random.Random | None = None, release: Release = None,
          node_rank: dict[str, int] | None = None, replicas: int = DEFAULT_REPLICAS,
          fail_requests_greater_than_one: bool = False, fast: bool = True) -> Run:
    """`rng`: the experiment's stream after tuning; the paper policies' node order for ties is drawn from it,
    unless `node_rank` gives it (node -> rank, the artifact's "%04d-" name prefix). `release`: (Kubernetes
    version, --features text) the scheduler and allocator behave as (None: 1.36's). `fast`: place pods on the
    fast path where it applies (False: always the reference path, gpudra's scheduler and allocator)."""
    check_trace_policy(policy)
    tasks = {f"{NAMESPACE}/{pod_name}": task for pod_name, task in workload}
    node_gpus = {n.name: (n.model, [gpu_device_id(n.name, i) for i in range(n.gpus)]) for n in trace.nodes}
    fragmentation = Fragmentation(typical_tasks(trace.tasks))
    if node_rank is None:
        node_rank = node_ranks(node_gpus, rng if rng is not None else random.Random(seed))
    ranks = node_rank

    def build_reference() -> Reference:
        objects = cluster_objects(trace.nodes, mode, replicas)
        for pod_name, task in workload:
            objects.extend(pod_objects(task, pod_name, mode))
        version, features = release or (None, None)
        cluster = ManagedCluster(objects, features, version)
        state = ReplicaState(replicas, {n.name: n.gpus for n in trace.nodes}) if mode == "time-slicing" else None
        context = SimContext(cluster, mode, node_gpus, tasks, fragmentation, seed, ranks, state)
        # No wall-clock Filter timeout: a replay's placements must not depend on the machine's speed or load (a
        # trace task is one claim of at most one node's GPUs, so every device search is small and ends).
        chosen = paper_policy(policy, context) if policy in SIM_POLICIES else policy
        return cluster, Scheduler(cluster, policy=chosen, filter_timeout=None), context

    fast_scheduler = None
    context: SimContext | None = None
    if fast and mode == "dra" and release is None and policy in SIM_POLICIES:
        state = FastState(trace.nodes)
        context = FastContext(state, mode, node_gpus, tasks, fragmentation, seed, ranks)
        paper = paper_policy(policy, context)
        if fastpath.applies(trace.nodes, tasks.values(), paper):
            fast_scheduler = FastScheduler(state, paper)
    reference = None if fast_scheduler is not None else build_reference()
    if reference is not None:
        context = reference[2]
    assert context is not None
    run = Run(trace, policy, seed, mode, build_reference, context, trace.gpus * MILLI, {}, {},
              fail_requests_greater_than_one=fail_requests_greater_than_one, fast=fast_scheduler,
              _reference=reference)
    for node in trace.nodes:
        run.refresh(node.name)
    return run


def _model_utilisation(run: Run) -> dict[str, float]:
    used: dict[str, int] = {}
    capacity: dict[str, int] = {}
    for node in run.trace.nodes:
        if not node.gpus:
            continue
        used[node.model] = used.get(node.model, 0) + run.node_used[node.name]
        capacity[node.model] = capacity.get(node.model, 0) + node.gpus * MILLI
    return {model: round(100 * used[model] / capacity[model], 3) for model in sorted(capacity)}


def per_percent(points: list[tuple[float, float]], upto: int) -> dict[int, float]:
    """Mean of the values whose x rounds to each whole percent (else within ±1 of it), as the artifact does.
    A percent no task lands near (a small cluster, where one task moves the arrived demand by several percent)
    keeps the value after the last task before it: nothing changes between two submissions. `points` are in
    submission order, so x never decreases."""
    buckets: dict[int, list[float]] = {}
    for x, value in points:
        buckets.setdefault(round(x), []).append(value)
    series: dict[int, float] = {}
    passed, last = 0, None
    for percent in range(0, upto + 1):
        while passed < len(points) and points[passed][0] <= percent:
            last = points[passed][1]
            passed += 1
        values = buckets.get(percent)
        if not values:
            values = [v for p in (percent - 1, percent, percent + 1) for v in buckets.get(p, ())]
        if values:
            series[percent] = sum(values) / len(values)
        elif last is not None:
            series[percent] = last
    return series


def run_experiment(trace: Trace, policy: str, seed: int = 42, mode: str = "dra", tune: float = DEFAULT_TUNE,
                   method: str = "tune", progress: Progress | None = None, release: Release = None,
                   replicas: int = DEFAULT_REPLICAS, fail_requests_greater_than_one: bool = False,
                   path: str = "auto") -> ExperimentResult:
    """`replicas`, `fail_requests_greater_than_one`: the time-slicing config (`timeslicing.py`). `path`: one of
    PATHS (`path_taken`); the result's `path` says which one ran."""
    if mode not in MODES:
        raise SimulationError(f"unknown mode {mode!r}; choose {', '.join(MODES)}")
    if mode == "time-slicing" and replicas < MIN_REPLICAS:
        raise SimulationError(f"replicas: NVIDIA's device plugin needs at least {MIN_REPLICAS}, not {replicas}")
    if method not in METHODS:
        raise SimulationError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if trace.gpus <= 0:
        raise SimulationError(f"trace {trace.name}: the cluster has no GPUs")
    if method == "tune":
        check_tune(tune)
    fast = path_taken(trace, policy, mode, release, path) == "fast"
    started, cpu_started = time.perf_counter(), time.process_time()
    rng = random.Random(seed)
    if method == "events":
        return _run_events(trace, policy, seed, mode, progress, started, cpu_started, release, replicas,
                           fail_requests_greater_than_one, fast)
    workload = tuned_workload(trace.tasks, trace.gpus * MILLI, tune, rng)
    run = start(trace, workload, policy, seed, mode, rng, release, replicas=replicas,
                fail_requests_greater_than_one=fail_requests_greater_than_one, fast=fast)
    capacity = run.capacity_milli
    arrived = served = scheduled = 0
    alloc_points: list[tuple[float, float]] = []
    frag_points: list[tuple[float, float]] = []
    served_points: list[tuple[float, float]] = []
    ratio_points: list[tuple[float, float]] = []
    over_points: list[tuple[float, float]] = []
    over_gpu_points: list[tuple[float, float]] = []
    at_100: dict[str, float] | None = None  # the GPU models' utilisation when the arrived demand reached 100%
    for done, (pod_name, task) in enumerate(workload, start=1):
        arrived += task.total_gpu_milli
        if run.schedule(pod_name).node is not None:
            scheduled += 1
            served += task.total_gpu_milli
        x = 100 * arrived / capacity
        over_milli, over_gpus = run.oversubscription()
        alloc_points.append((x, 100 * run.used / capacity))
        # served: demand within the GPUs' capacity (time-slicing places some beyond it: oversubscribed, apart)
        served_points.append((x, 100 * (served - over_milli) / capacity))
        frag_points.append((x, run.frag / MILLI))
        idle = run.free
        ratio_points.append((x, 100 * run.frag / idle if idle > 0 else 0.0))
        over_points.append((x, 100 * over_milli / capacity))
        over_gpu_points.append((x, over_gpus))
        if at_100 is None and x >= 100:
            at_100 = _model_utilisation(run)
        if progress is not None:
            progress(done, len(workload))
    upto = int(100 * arrived / capacity)
    allocation = per_percent(alloc_points, upto)
    fragmentation = per_percent(frag_points, upto)
    ratio = per_percent(ratio_points, upto)
    served_series = per_percent(served_points, upto)
    over_series = per_percent(over_points, upto)
    over_gpu_series = per_percent(over_gpu_points, upto)
    percents = sorted(allocation)
    at = allocation.get(100)
    time_slicing = mode == "time-slicing"
    return ExperimentResult(
        trace=trace.name, mode=mode, policy=policy, seed=seed, method="tune", tune=tune, nodes=len(trace.nodes),
        gpus=trace.gpus, tasks=len(workload), scheduled=scheduled, unscheduled=len(workload) - scheduled,
        allocation_ratio=round(at, 4) if at is not None else None,
        unallocated_gpus=round(trace.gpus * (1 - at / 100), 2) if at is not None else None,
        served_ratio=round(served_series[100], 4) if 100 in served_series else None,
        fragmented_gpus=round(fragmentation[100], 2) if 100 in fragmentation else None,
        fragmentation_ratio=round(ratio[100], 4) if 100 in ratio else None,
        # GPU demand placed beyond the GPUs' capacity (time-slicing replicas isolate nothing), % of capacity
        oversubscribed_ratio=round(over_series[100], 4) if 100 in over_series else None,
        oversubscribed_gpus=round(over_gpu_series[100], 2) if 100 in over_gpu_series else None,
        model_utilisation=at_100 if at_100 is not None else _model_utilisation(run),
        series={
            "arrived_percent": percents,
            "allocation_ratio": [round(allocation[p], 4) for p in percents],
            "served_ratio": [round(served_series.get(p, 0.0), 4) for p in percents],
            "fragmented_gpus": [round(fragmentation.get(p, 0.0), 3) for p in percents],
            "fragmentation_ratio": [round(ratio.get(p, 0.0), 4) for p in percents],
            "oversubscribed_ratio": [round(over_series.get(p, 0.0), 4) for p in percents],
        },
        replicas=replicas if time_slicing else None,
        fail_requests_greater_than_one=fail_requests_greater_than_one if time_slicing else None,
        path="fast" if run.fast is not None else "reference",
        seconds=round(time.perf_counter() - started, 3),
        cpu_seconds=round(time.process_time() - cpu_started, 3),
    )


def _run_events(trace: Trace, policy: str, seed: int, mode: str, progress: Progress | None, started: float,
                cpu_started: float, release: Release = None, replicas: int = DEFAULT_REPLICAS,
                fail_requests_greater_than_one: bool = False, fast: bool = True) -> ExperimentResult:
    timed = [t for t in trace.tasks if t.creation is not None]
    if not timed:
        raise SimulationError(f"trace {trace.name}: no creation_time column, the events method needs one")
    workload = [(t.name, t) for t in sorted(timed, key=lambda t: (t.creation, t.name))]
    run = start(trace, workload, policy, seed, mode, release=release, replicas=replicas,
                fail_requests_greater_than_one=fail_requests_greater_than_one, fast=fast)
    events: list[tuple[int, int, str, Task]] = []  # (time, order: deletions before creations, pod, task)
    for pod_name, task in workload:
        events.append((task.creation or 0, 1, pod_name, task))
        if task.deletion is not None:
            events.append((task.deletion, 0, pod_name, task))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    placed: dict[str, str] = {}
    times: list[int] = []
    allocation: list[float] = []
    fragmented: list[float] = []
    oversubscribed: list[float] = []
    scheduled = 0
    capacity = run.capacity_milli
    for done, (when, kind, pod_name, _task) in enumerate(events, start=1):
        key = f"{NAMESPACE}/{pod_name}"
        if kind == 1:
            node = run.schedule(pod_name).node
            if node is not None:
                scheduled += 1
                placed[key] = node
        elif key in placed:
            run.delete(pod_name, placed.pop(key))
        times.append(when)
        allocation.append(round(100 * run.used / capacity, 4))
        fragmented.append(round(run.frag / MILLI, 3))
        oversubscribed.append(round(100 * run.oversubscription()[0] / capacity, 4))
        if progress is not None:
            progress(done, len(events))
    peak = max(allocation, default=0.0)
    return ExperimentResult(
        trace=trace.name, mode=mode, policy=policy, seed=seed, method="events", tune=None, nodes=len(trace.nodes),
        gpus=trace.gpus, tasks=len(workload), scheduled=scheduled, unscheduled=len(workload) - scheduled,
        allocation_ratio=None, unallocated_gpus=None, peak_allocation_ratio=peak,
        peak_oversubscribed_ratio=max(oversubscribed, default=0.0), model_utilisation=_model_utilisation(run),
        path="fast" if run.fast is not None else "reference",
        series={"time_s": times, "allocation_ratio": allocation, "fragmented_gpus": fragmented,
                "oversubscribed_ratio": oversubscribed},
        seconds=round(time.perf_counter() - started, 3), cpu_seconds=round(time.process_time() - cpu_started, 3),
    )
