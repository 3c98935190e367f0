"""Why a local cluster's pod is pending: what `gpudra explain` reads from the store, and the per-node summary
`gpudra describe pod` shows under the kube-scheduler's one-line message."""

from __future__ import annotations

from typing import Any

from .controller import MODEL_KINDS
from .layout import ClusterDir
from .store import created_serial, public_view

# describe shows this many groups of nodes; `gpudra explain` shows them all with -o wide
DESCRIBE_NODE_SECTIONS = 5


def model_objects(cluster: ClusterDir) -> list[dict[str, Any]]:
    """The objects the scheduler works from, in the order its queue sees them (creation order), as `get` prints
    them (without the store's bookkeeping)."""
    return [public_view(obj) for kind in MODEL_KINDS
            for obj in sorted(cluster.store.list(kind), key=created_serial)]


def is_pending(pod: dict[str, Any]) -> bool:
    return (pod.get("kind") == "Pod" and not (pod.get("spec") or {}).get("nodeName")
            and not (pod.get("metadata") or {}).get("deletionTimestamp"))


def pending_reasons(cluster: ClusterDir, pod: dict[str, Any]) -> list[str]:
    """For a pending pod: explain's summary and its sections per group of nodes, as lines (empty when the pod is
    not pending, or fits now and only waits for the next control-loop round)."""
    from gpudra.explain.analyze import TargetError, explain
    from gpudra.explain.render import node_sections

    if not is_pending(pod):
        return []
    config = cluster.load_config()
    meta = pod.get("metadata") or {}
    try:
        explanation = explain(model_objects(cluster), f"pod/{meta.get('name')}",
                              namespace=meta.get("namespace") or "default", policy=config.policy, fixes=False,
                              features=config.feature_gates(), kubernetes_version=config.kubernetes_version)
    except (TargetError, KeyError, ValueError) as exc:  # an object the scheduler refuses: say so, do not fail
        return [f"(not explained: {exc})"]
    if explanation.fits:
        return [f"fits now: {explanation.summary} (the control loop places it at its next round)"]
    return node_sections(explanation, max_sections=DESCRIBE_NODE_SECTIONS)
