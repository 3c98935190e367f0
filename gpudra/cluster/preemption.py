"""Preemption on the local cluster: the API calls kube-scheduler's preemption executor makes for each victim the
scheduler chose (gpudra.scheduler.preemption marks them), the API server's graceful deletion, and the kubelet's
grace period.

Learned from kubernetes v1.36.0 (the same in v1.34.4 and v1.35.0 for what is used here):
- pkg/scheduler/framework/preemption/executor.go `PreemptPod`/`prepareCandidate`: a victim already being deleted
  gets no second call; else its status is patched with the DisruptionTarget condition (reason
  PreemptionByScheduler), it is deleted with default options (so with its own grace period), and a `Preempted`
  event names the preemptor: "Preempted by pod <uid> on node <node>".
- pkg/apis/core/v1/defaults.go: spec.terminationGracePeriodSeconds defaults to 30;
  staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go `BeforeDelete`: a graceful delete sets
  deletionTimestamp = now + the grace period and deletionGracePeriodSeconds (pkg/registry/core/pod/strategy.go
  `CheckGracefulDelete` takes the pod's own period; an unbound pod is deleted at once).
- pkg/kubelet: the containers are stopped (SIGTERM, SIGKILL when the grace period is over), then the pod is
  removed. The stand-in's containers run no process, so a victim stays on its node, its claims reserved, until its
  grace period is over, as a container that does not exit on SIGTERM would.
- pkg/registry/core/pod/storage/storage.go: with ClearingNominatedNodeNameAfterBinding (beta, on by default from
  1.35; kube_features.go) the binding clears status.nominatedNodeName.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from gpudra.api.objectmeta import parse_time
from gpudra.scheduler import preemption
from gpudra.scheduler.state import ClusterState
from gpudra.versions import parse_version

from .store import Store, StoreError

DEFAULT_TERMINATION_GRACE_PERIOD_S = 30  # SetDefaults_PodSpec
PREEMPTED_REASON = "Preempted"
SCHEDULER = "default-scheduler"
CLEARS_NOMINATION_ON_BINDING_FROM = (1, 35)  # ClearingNominatedNodeNameAfterBinding's default

Event = Callable[[dict[str, Any], str, str, str, str], None]
Step = Callable[[str, str], None]


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def termination_grace_period(pod: dict[str, Any]) -> int:
    """The pod's grace period in seconds: spec.terminationGracePeriodSeconds, 30 when unset; a negative one
    counts as 1 (the API server's pod strategy)."""
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    if not isinstance(value, int) or isinstance(value, bool):
        return DEFAULT_TERMINATION_GRACE_PERIOD_S
    return max(value, 1) if value < 0 else value


def in_grace_period(pod: dict[str, Any], now: datetime) -> bool:
    """A pod deleted with a grace period that has not run out yet: the kubelet has not stopped it."""
    meta = pod.get("metadata") or {}
    if not meta.get("deletionGracePeriodSeconds"):
        return False
    end = parse_time(meta.get("deletionTimestamp"))
    return end is not None and now < end


def delete_victims(store: Store, cluster: ClusterState, results: Iterable[Any], now: datetime, event: Event,
                   step: Step) -> set[str]:
    """The executor's calls for every victim this scheduling pass marked (PodResult.preempted): the
    DisruptionTarget condition, a graceful delete, the Preempted event. Returns the victims' keys (their
    in-memory marks are not written back as they are: the store's deletion is the one that counts)."""
    victims: set[str] = set()
    for result in results:
        if not result.preempted:
            continue
        preemptor = cluster.pods[result.pod]
        for key in result.preempted:
            victims.add(key)
            namespace, name = key.split("/", 1)
            stored = store.get("Pod", namespace, name)
            marked = cluster.pods.get(key) or {}
            if (stored is None or stored["metadata"].get("uid") != (marked.get("metadata") or {}).get("uid")
                    or stored["metadata"].get("deletionTimestamp")):
                continue  # gone, replaced under its name, or already being deleted: no call, as upstream
            condition = {**preemption.disruption_condition(preemptor), "lastTransitionTime": _rfc3339(now)}
            stored["status"] = preemption.with_condition(stored.get("status") or {}, condition)
            grace = termination_grace_period(stored)
            try:
                store.replace(stored)
                store.delete("Pod", namespace, name, grace_period_seconds=grace, now=now)
            except StoreError:
                continue  # changed or deleted meanwhile: the next pass decides again
            uid = (preemptor.get("metadata") or {}).get("uid")
            event(stored, "Normal", PREEMPTED_REASON, f"Preempted by pod {uid} on node {result.nominated_node}",
                  SCHEDULER)
            step("preempted", f"pod {key} preempted by {result.pod} on node {result.nominated_node} "
                              f"(grace period {grace}s)")
    return victims


def clear_nominations_of_bound(cluster: ClusterState, results: Iterable[Any], kubernetes_version: str) -> None:
    """The binding clears status.nominatedNodeName from 1.35 (ClearingNominatedNodeNameAfterBinding)."""
    major, minor = (int(part) for part in parse_version(kubernetes_version).split("."))
    if (major, minor) < CLEARS_NOMINATION_ON_BINDING_FROM:
        return
    for result in results:
        if result.scheduled:
            (cluster.pods[result.pod].get("status") or {}).pop("nominatedNodeName", None)
