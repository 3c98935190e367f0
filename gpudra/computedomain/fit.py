"""Why a ComputeDomain workload does not fit, in the domain's terms: `gpudra explain` adds these lines to its
per-node verdicts for a pending pod that claims a domain's IMEX channel.

A multi-node NVLink job runs one pod per tray (the channel device is one per node: NVIDIA's plugin publishes
channel 0 only) on trays of one NVLink clique (the pods select it, by GPU feature discovery's node label). So it
does not fit when the clique its pods may use has fewer trays than the job has pods ("clique too small"), or when
enough of those trays are taken by others ("trays busy": the scheduler's verdict on each, and a tray labelled for
another ComputeDomain, whose daemon it runs). One place for these rules; explain only calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra.api.schema.computedomain import apply_defaults, is_compute_domain

from .controller import CLIQUE_NODE_LABEL, DOMAIN_LABEL


@dataclass
class Tray:
    """One node the pod may use, and the scheduler's verdict on it."""

    name: str
    clique: str
    fits: bool
    why: str = ""  # the scheduler's reason when it does not fit


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def pod_domain(pod: dict[str, Any], objects: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ComputeDomain whose channel template one of the pod's claims comes from (same namespace)."""
    namespace = _meta(pod).get("namespace") or "default"
    templates = {c.get("resourceClaimTemplateName") for c in (pod.get("spec") or {}).get("resourceClaims") or []
                 if isinstance(c, dict)}
    for obj in objects:
        if not is_compute_domain(obj) or (_meta(obj).get("namespace") or "default") != namespace:
            continue
        spec = apply_defaults(obj).get("spec")
        channel = spec.get("channel") if isinstance(spec, dict) else None
        template = ((channel or {}).get("resourceClaimTemplate") or {}).get("name") if isinstance(channel, dict) \
            else None
        if template and template in templates:
            return obj
    return None


def _controller_uid(pod: dict[str, Any]) -> str | None:
    return next((r.get("uid") for r in _meta(pod).get("ownerReferences") or [] if r.get("controller")), None)


def workload_size(pod: dict[str, Any], pods: list[dict[str, Any]]) -> int:
    """The pods of the pod's controller (a Job's, a StatefulSet's), the pod included: trays the job needs."""
    owner = _controller_uid(pod)
    if owner is None:
        return 1
    return sum(1 for p in pods if _controller_uid(p) == owner)


def domain_notes(pod: dict[str, Any], domain: dict[str, Any], pods: list[dict[str, Any]],
                 nodes: list[dict[str, Any]], trays: list[Tray]) -> list[str]:
    """The domain's reasons, one line each: `trays` are the nodes the pod's selector and affinity allow."""
    meta = _meta(domain)
    name = f"ComputeDomain {meta.get('namespace') or 'default'}/{meta.get('name')}"
    needed = workload_size(pod, pods)
    owner = _controller_uid(pod)
    uid = meta.get("uid")
    labels = {_meta(n).get("name"): (_meta(n).get("labels") or {}) for n in nodes}
    cliques: dict[str, list[Tray]] = {}
    for tray in trays:
        cliques.setdefault(tray.clique, []).append(tray)
    if not any(cliques.get(c) for c in cliques if c):
        return [f"{name}: none of the nodes this pod may use is in an NVLink clique (node label "
                f"{CLIQUE_NODE_LABEL}): its IMEX channel needs multi-node NVLink trays (GB200 NVL72)"]
    notes = []
    own = {(p.get("spec") or {}).get("nodeName") for p in pods if owner and _controller_uid(p) == owner}
    for clique, members in sorted(cliques.items()):
        if not clique:
            continue
        size = len(members)
        if size < needed:
            notes.append(f"{name}: clique too small: clique {clique} has {size} tray{'s' if size != 1 else ''} "
                         f"this pod may use, the workload needs {needed} (one pod per tray)")
            continue
        busy = []
        for tray in members:
            other = labels.get(tray.name, {}).get(DOMAIN_LABEL)
            if other and other != uid:
                busy.append(f"{tray.name} (runs the IMEX daemon of another ComputeDomain, {DOMAIN_LABEL}={other})")
            elif not tray.fits and tray.name not in own:
                busy.append(f"{tray.name} ({tray.why})" if tray.why else tray.name)
        free = size - len(busy)
        if busy and free < needed:
            notes.append(f"{name}: trays busy: {len(busy)} of the {size} trays of clique {clique} are taken, "
                         f"{free} free for a workload of {needed}: " + "; ".join(busy))
    return notes
