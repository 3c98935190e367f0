"""The PodGroupScheduled condition kube-scheduler 1.36 writes on a PodGroup (scheduling.k8s.io/v1alpha2) once it has
decided the group: kubernetes v1.36.0 pkg/scheduler/schedule_one_podgroup.go (True with reason `Scheduled`, False
with reason `Unschedulable` and the group's message; a True condition is never turned back to False by a later cycle
for extra pods, updatePodGroupCondition) and k8s.io/api v0.36.0 scheduling/v1alpha2/types.go (the condition type and
reasons). 1.35's Workload has no status: nothing is written there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

CONDITION_TYPE = "PodGroupScheduled"
REASON_SCHEDULED = "Scheduled"
REASON_UNSCHEDULABLE = "Unschedulable"


@dataclass(frozen=True)
class GroupDecision:
    namespace: str
    name: str  # the PodGroup
    scheduled: bool
    message: str


def decisions(plan: Any, results: Iterable[Any]) -> list[GroupDecision]:
    """What this queue pass decided for each 1.36 PodGroup gang (gpudra.scheduler.gangs.GangPlan) it attempted."""
    by_pod = {result.pod: result for result in results}
    found = []
    for gang in plan.gangs.values():
        # pods PreEnqueue held back (too few for the quorum) never reach the pod group's cycle
        decided = [by_pod[key] for key in gang.members if key in by_pod and key in plan.member_of]
        if not decided or gang.key.count("/") != 1:  # 1.35 keys are namespace/workload/group/replica
            continue
        namespace, name = gang.key.split("/")
        scheduled = any(result.scheduled for result in decided)  # Permit let the group through
        message = "" if scheduled else next(
            (result.gang or result.message() for result in decided), "")
        found.append(GroupDecision(namespace, name, scheduled, message))
    return found


def with_condition(pod_group: dict[str, Any], decision: GroupDecision, now: str) -> dict[str, Any] | None:
    """The PodGroup with the decision's condition set (apimachinery's SetStatusCondition: the transition time moves
    only when the status does), or None when nothing would change."""
    status = dict(pod_group.get("status") or {})
    conditions = [dict(c) for c in status.get("conditions") or [] if isinstance(c, dict)]
    existing = next((c for c in conditions if c.get("type") == CONDITION_TYPE), None)
    if existing is not None and existing.get("status") == "True" and not decision.scheduled:
        return None  # updatePodGroupCondition: a scheduled group does not regress
    wanted: dict[str, Any] = {"type": CONDITION_TYPE, "status": "True" if decision.scheduled else "False",
                              "reason": REASON_SCHEDULED if decision.scheduled else REASON_UNSCHEDULABLE,
                              "message": decision.message}
    generation = (pod_group.get("metadata") or {}).get("generation")
    if isinstance(generation, int):
        wanted["observedGeneration"] = generation
    if existing is not None and all(existing.get(k) == v for k, v in wanted.items()):
        return None
    transition = (existing.get("lastTransitionTime") if existing is not None
                  and existing.get("status") == wanted["status"] else now)
    wanted["lastTransitionTime"] = transition
    conditions = [c for c in conditions if c.get("type") != CONDITION_TYPE] + [wanted]
    return {**pod_group, "status": {**status, "conditions": conditions}}
