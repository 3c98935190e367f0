"""Whether repaired manifests now allocate: `gpudra validate --fix` re-runs the allocator on its own result."""

from __future__ import annotations

from gpudra.allocator import build_report
from gpudra.api.convert import to_v1
from gpudra.explain.analyze import explain_claim
from gpudra.api.objectmeta import key_of


def check_allocatable(objects: list[dict], cluster: list[dict]) -> list[tuple[str, str, str]]:
    """Allocate the repaired pending claims one after another (as the scheduler would) on the devices given with
    them plus the live cluster's: (claim, node, "") where one fits, else (claim, "", why not, as `explain` says)."""

    def identity(obj: dict) -> tuple:
        raw = obj.get("metadata")
        meta = raw if isinstance(raw, dict) else {}
        return obj.get("kind"), meta.get("namespace"), meta.get("name")

    repaired = [to_v1(o) for o in objects if isinstance(o, dict)]
    given = {identity(o) for o in repaired}
    everything = repaired + [o for o in cluster if identity(o) not in given]
    pending = [o for o in repaired
               if o.get("kind") == "ResourceClaim" and not (o.get("status") or {}).get("allocation")]
    if not pending:
        return []
    report = build_report(everything, "sequential")
    nodes: dict[str, str] = {}
    for entry in report.get("results") or []:
        if entry.get("outcome") == "allocated":
            for key in entry.get("allocations") or {}:
                nodes.setdefault(key, entry.get("node", ""))
    verdicts = []
    for claim in pending:
        meta = claim.get("metadata") or {}
        key = key_of(claim)
        if key in nodes:
            verdicts.append((key, nodes[key], ""))
            continue
        explanation = explain_claim(everything, meta.get("namespace") or "default", meta.get("name", ""))
        verdicts.append((key, "", "; ".join([explanation.summary, *explanation.problems])))
    return verdicts
