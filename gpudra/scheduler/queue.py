"""The queue pass: every pending pod once, in queue order (`ClusterState.pending_pods`: PrioritySort), with the
pods of a gang held at Permit until the pass has decided the whole gang, and the pods nominated by preemption
counted on their nodes until the pass ends.

kube-scheduler's scheduling queue and its loop over it (pkg/scheduler/backend/queue/scheduling_queue.go,
schedule_one.go's ScheduleOne, v1.36.0) apart from the cycle of one pod (gpudra.scheduler.scheduler), which this
module drives through `Scheduler.schedule_pod`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Callable

from gpudra.api.load import cycle_collection_paused

from . import framework as fw
from . import preemption

if TYPE_CHECKING:
    from .scheduler import Scheduler


def queue_run() -> AbstractContextManager[None]:
    """Around a run of many pods: the scheduler builds a few hundred thousand small containers (verdicts, node
    views, allocations), none of them cyclic garbage (~15% of 1,000 pods on 2,000 nodes went to the cycle
    collector walking them), and what it built joins a frozen input."""
    return cycle_collection_paused(join_frozen=True)


def run_queue(scheduler: Scheduler, on_result: Callable[[fw.PodResult], None] | None = None) -> list[fw.PodResult]:
    """Schedule every pending pod once, in queue order. The pods of a gang (gpudra.scheduler.gangs) wait at
    Permit: their results come once the pass has decided the whole gang."""
    results: list[fw.PodResult] = []
    held: dict[str, list[fw.PodResult]] = {}  # gang key -> its pods' results, waiting at Permit
    with queue_run():  # the gang plan (and its first import) too: what the run allocates is collected after it
        from . import gangs
        from .workloadplacement import place_group

        plan = gangs.plan(scheduler.cluster)
        pending = scheduler.cluster.pending_pods()
        unplaced: set[str] = set()  # gangs no placement of their topology domain could hold: decided already
        for pod_key in pending:
            if pod_key in plan.waiting:
                result = gangs.wait_before_queue(scheduler, pod_key, plan.waiting[pod_key])
            elif pod_key in plan.member_of:
                gang = plan.gangs[plan.member_of[pod_key]]
                if gang.topology_key is None:
                    scheduler._gang_bindings[pod_key] = []
                    held.setdefault(gang.key, []).append(scheduler.schedule_pod(pod_key))
                elif gang.key not in held:  # the whole group at its first pod, as the pod group cycle does
                    members = [key for key in pending if plan.member_of.get(key) == gang.key]
                    held[gang.key], placed = place_group(scheduler, gang, members)
                    if not placed:
                        unplaced.add(gang.key)
                continue
            else:
                result = scheduler.schedule_pod(pod_key)
                preemption.hold_nominated(scheduler, result)
            results.append(result)
            if on_result is not None:
                on_result(result)
        for gang_key, gang_results in held.items():
            decided = gang_results if gang_key in unplaced else gangs.permit(scheduler, plan.gangs[gang_key], gang_results)
            for result in decided:
                results.append(result)
                if on_result is not None:
                    on_result(result)
    scheduler._gang_bindings.clear()
    scheduler.cluster.release_nominated()
    return results
