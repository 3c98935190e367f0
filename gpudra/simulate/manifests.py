"""Any cluster and workload given as manifests, replayed through the scheduler: `gpudra simulate -f cluster/
-f workload.yaml`.

The manifests are applied as `gpudra schedule` applies them (Nodes, ResourceSlices, DeviceClasses, Pods,
ResourceClaims and templates, workloads); then every pending pod is scheduled once, in the scheduler's queue
order: priority, then creationTimestamp where pods have one, then file order. Nothing is sampled or deleted.
Allocation is measured in physical devices (`ClusterState.free_capacity`: a GPU and its MIG partitions are one; a
GPU that any claim uses, even a share of it, counts as allocated) after every pod, against the percent of pods
submitted. Only gpudra's own policies apply: the paper's policies read the openb task model, which manifests
do not have.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from gpudra.copying import copy_object
from gpudra.scheduler import Scheduler
from gpudra.controllers import ManagedCluster
from gpudra.scheduler.scoring import POLICIES as GPUDRA_POLICIES

from .engine import SimulationError, per_percent
from .results import ExperimentResult, Unschedulable

MODE = "manifests"


@dataclass
class Manifests:
    """A cluster and workload as Kubernetes objects (what `gpudra.api.load` reads), in input order."""

    name: str
    objects: list[dict[str, Any]]


def load_manifests(paths: list[str], name: str) -> Manifests:
    """Files and directories as `gpudra schedule -f` reads them (converted to resource.k8s.io/v1)."""
    from gpudra.api.convert import to_v1
    from gpudra.api.load import LoadError, load_paths

    from .trace import TraceError

    try:
        documents = load_paths(paths)
    except LoadError as exc:
        raise TraceError(str(exc)) from None
    except OSError as exc:
        raise TraceError(f"{exc.filename or ''}: {exc.strerror or exc}") from None
    return Manifests(name, [to_v1(doc.obj) for doc in documents])


def _gpus(cluster: ManagedCluster, node: str) -> int:
    return len(cluster.node_groups(node))


def run_manifests(workload: Manifests, policy: str, seed: int = 42,
                  progress: Callable[[int, int], None] | None = None,
                  release: tuple[str | None, str | None] | None = None) -> ExperimentResult:
    if policy not in GPUDRA_POLICIES:
        raise SimulationError(f"policy {policy!r} reads openb task shapes; with manifests use one of "
                              f"{', '.join(GPUDRA_POLICIES)}")
    started, cpu_started = time.perf_counter(), time.process_time()
    version, features = release or (None, None)  # (Kubernetes version, --features text)
    cluster = ManagedCluster(copy_object(workload.objects), features, version)  # scheduling writes into the objects
    problems = list(cluster.problems)
    scheduler = Scheduler(cluster, policy=policy)
    nodes = cluster.node_names()
    capacity = sum(_gpus(cluster, node) for node in nodes)
    free = {node: cluster.free_capacity(node) for node in nodes}
    free_total = sum(free.values())
    queue = cluster.pending_pods()
    if not capacity:  # as for a trace: nothing to measure the allocation ratio against
        raise SimulationError(f"{workload.name}: the cluster has no GPUs (Nodes with ResourceSlices)")
    if not queue:  # say why when the input's workloads could not be expanded
        raise SimulationError("; ".join([f"{workload.name}: no pending pods to replay", *problems]))
    points: list[tuple[float, float]] = []
    scheduled = 0
    unschedulable: list[Unschedulable] = []
    for done, pod_key in enumerate(queue, start=1):
        result = scheduler.schedule_pod(pod_key)
        if result.node is not None:  # scheduled
            scheduled += 1
            before = free[result.node]
            free[result.node] = cluster.free_capacity(result.node)
            free_total += free[result.node] - before
        else:
            unschedulable.append(Unschedulable(pod_key, result.message()))
        if capacity:
            points.append((100 * done / len(queue), 100 * (capacity - free_total) / capacity))
        if progress is not None:
            progress(done, len(queue))
    series = per_percent(points, 100)
    percents = sorted(series)
    final = 100 * (capacity - free_total) / capacity if capacity else None
    return ExperimentResult(
        trace=workload.name, mode=MODE, policy=policy, seed=seed, method="manifests", tune=None, nodes=len(nodes),
        gpus=capacity, tasks=len(queue), scheduled=scheduled, unscheduled=len(queue) - scheduled,
        allocation_ratio=round(final, 4) if final is not None else None,
        unallocated_gpus=round(free_total, 2) if capacity else None,
        unschedulable=tuple(unschedulable), warnings=tuple(problems),
        series={"pods_percent": percents, "allocation_ratio": [round(series[p], 4) for p in percents]},
        seconds=round(time.perf_counter() - started, 3),
        cpu_seconds=round(time.process_time() - cpu_started, 3),
    )
