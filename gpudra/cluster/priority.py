"""The Priority admission plugin of the local cluster's API server: a new pod's spec.priority and
spec.preemptionPolicy come from its PriorityClass (scheduling.k8s.io/v1), or from the global default class.

Learned from kubernetes v1.36.0 plugin/pkg/admission/priority/admission.go (`admitPod`, `establishPriority`,
`getDefaultPriorityClass`: of several globalDefault classes the lowest value wins; none: priority 0 and
PreemptLowerPriority) and pkg/apis/scheduling/types.go with pkg/registry/scheduling/rest/storage_scheduling.go
(the API server's own classes system-cluster-critical = 2000000000 and system-node-critical = 2000001000).
"""

from __future__ import annotations

from typing import Any, Callable

from .kinds import StoreError

SYSTEM_CRITICAL_PRIORITY = 2 * 1_000_000_000  # 2 x HighestUserDefinablePriority
SYSTEM_CLASSES = {
    "system-cluster-critical": SYSTEM_CRITICAL_PRIORITY,
    "system-node-critical": SYSTEM_CRITICAL_PRIORITY + 1000,
}
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"

LookUp = Callable[[str], "dict[str, Any] | None"]  # a PriorityClass by name


def _forbidden(pod: dict[str, Any], why: str) -> StoreError:
    name = (pod.get("metadata") or {}).get("name") or (pod.get("metadata") or {}).get("generateName") or ""
    return StoreError(f'pods "{name}" is forbidden: {why}', 403)


def _class(name: str, look_up: LookUp) -> tuple[int, str | None] | None:
    if name in SYSTEM_CLASSES:
        return SYSTEM_CLASSES[name], PREEMPT_LOWER_PRIORITY
    found = look_up(name)
    if found is None:
        return None
    return int(found.get("value") or 0), found.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY


def admit_pod(pod: dict[str, Any], look_up: LookUp, classes: list[dict[str, Any]]) -> None:
    """Set the new pod's priority, class name and preemption policy in place; a StoreError (403) as the plugin
    forbids: an unknown class, or a spec.priority / spec.preemptionPolicy other than the class gives."""
    spec = pod.setdefault("spec", {})
    if not isinstance(spec, dict):
        return  # validation answers for it
    name = spec.get("priorityClassName") or ""
    if name:
        resolved = _class(str(name), look_up)
        if resolved is None:
            raise _forbidden(pod, f"no PriorityClass with name {name} was found")
        priority, policy = resolved
    else:
        defaults = [c for c in classes if c.get("globalDefault") is True]
        chosen = min(defaults, key=lambda c: int(c.get("value") or 0), default=None)
        if chosen is None:
            priority, policy = 0, PREEMPT_LOWER_PRIORITY
        else:
            name = (chosen.get("metadata") or {}).get("name") or ""
            priority, policy = int(chosen.get("value") or 0), chosen.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY
            spec["priorityClassName"] = name
    if spec.get("priority") is not None and spec["priority"] != priority:
        raise _forbidden(pod, f"the integer value of priority ({spec['priority']}) must not be provided in pod spec; "
                              f"priority admission controller computed {priority} from the given PriorityClass name")
    spec["priority"] = priority
    if spec.get("preemptionPolicy") is not None and spec["preemptionPolicy"] != policy:
        raise _forbidden(pod, f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must not be "
                              f"provided in pod spec; priority admission controller computed {policy} from the "
                              "given PriorityClass name")
    spec["preemptionPolicy"] = policy
