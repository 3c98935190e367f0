"""What an explanation says, as data. Rendering (text, YAML, JSON) lives in `render.py`.

Every class has `to_dict()` giving plain JSON-able data with camelCase keys, the shape `-o yaml|json`
prints, so tools can consume explanations without parsing text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Reason codes. DRA codes start with "dra-" so the summary can tell scheduler plugins apart.
NODE_NAME = "node-name"
UNSCHEDULABLE = "unschedulable"
NODE_TAINT = "node-taint"
NODE_AFFINITY = "node-affinity"
INSUFFICIENT = "insufficient"  # cpu, memory, pods, extended resources
DRA_CLAIM_NODE = "dra-claim-node"  # an allocated claim is not usable on this node
DRA_DEVICES = "dra-devices"  # a request has too few free matching devices
DRA_ALL = "dra-all"  # allocationMode All and some matching device cannot be taken
DRA_CONSTRAINT = "dra-constraint"
DRA_COMBINATION = "dra-combination"  # every request alone fits, together they do not
DRA_POOL = "dra-pool"
DRA_ERROR = "dra-error"  # the allocator failed on this node (CEL runtime error, ...)
OTHER = "other"


@dataclass
class Reason:
    code: str
    message: str
    # Structured facts behind the message (request, need, free...) so summaries can merge nodes.
    data: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data:
            out["data"] = dict(self.data)
        return out


@dataclass
class FunnelStep:
    """How many devices are left after one more condition. `step` is a stable machine key."""

    step: str  # visible | class | selector | free | tolerated | counters | capacity
    label: str
    count: int
    details: list[str] = field(default_factory=list)
    index: int | None = None  # selector index

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"step": self.step, "label": self.label, "count": self.count}
        if self.index is not None:
            data["index"] = self.index
        if self.details:
            data["details"] = list(self.details)
        return data


@dataclass
class RequestFunnel:
    claim: str  # namespace/name
    request: str  # "gpu", or "gpu/large" for a firstAvailable subrequest
    device_class: str
    mode: str  # ExactCount | All
    count: int | None  # None for All
    steps: list[FunnelStep] = field(default_factory=list)
    # claim key -> matching devices it holds (0: it holds devices drawing on the same shared counters)
    holders: dict[str, int] = field(default_factory=dict)
    holder_pods: dict[str, list[str]] = field(default_factory=dict)  # claim key -> pods reserving it
    taints: dict[str, dict[str, Any]] = field(default_factory=dict)  # text -> untolerated device taint

    @property
    def available(self) -> int:
        return self.steps[-1].count if self.steps else 0

    def step(self, key: str) -> FunnelStep | None:
        return next((s for s in self.steps if s.step == key), None)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "claim": self.claim,
            "request": self.request,
            "deviceClassName": self.device_class,
            "allocationMode": self.mode,
        }
        if self.count is not None:
            data["count"] = self.count
        data["available"] = self.available
        data["funnel"] = [s.to_dict() for s in self.steps]
        if self.taints:
            data["untoleratedTaints"] = [dict(t) for t in self.taints.values()]
        if self.holders:
            data["heldBy"] = [
                {"claim": key, "devices": n, "pods": self.holder_pods.get(key, [])}
                for key, n in self.holders.items()
            ]
        return data


@dataclass
class ConstraintReport:
    claim: str
    index: int
    attribute: str
    requests: list[str]
    need: int
    groups: dict[str, int]  # attribute value -> free matching devices with it
    missing: int = 0  # free matching devices without the attribute

    @property
    def message(self) -> str:
        seen = ", ".join(f"{value}: {n} free" for value, n in self.groups.items()) or "no free device"
        if self.missing:
            seen += f", {self.missing} without the attribute"
        short = self.attribute.rsplit("/", 1)[-1]
        return f"{seen}; need {self.need} with the same {short}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "index": self.index,
            "matchAttribute": self.attribute,
            "requests": self.requests,
            "need": self.need,
            "freeByValue": dict(self.groups),
            "withoutAttribute": self.missing,
            "message": self.message,
        }


@dataclass
class CelErrorReport:
    where: str  # "class gpu.example.com selector #0" / "claim default/c request gpu selector #1"
    expression: str
    device: str  # driver/pool/device, "" for compile errors
    message: str

    def to_dict(self) -> dict[str, Any]:
        data = {"where": self.where, "expression": self.expression, "message": self.message}
        if self.device:
            data["device"] = self.device
        return data


@dataclass
class NodeExplanation:
    node: str
    fits: bool
    reasons: list[Reason] = field(default_factory=list)
    requests: list[RequestFunnel] = field(default_factory=list)
    constraints: list[ConstraintReport] = field(default_factory=list)
    pool_problems: list[str] = field(default_factory=list)
    cel_errors: list[CelErrorReport] = field(default_factory=list)
    allocation: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # claim -> results

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"node": self.node, "fits": self.fits}
        if self.reasons:
            data["reasons"] = [r.to_dict() for r in self.reasons]
        if self.requests:
            data["requests"] = [r.to_dict() for r in self.requests]
        if self.constraints:
            data["constraints"] = [c.to_dict() for c in self.constraints]
        if self.pool_problems:
            data["poolProblems"] = list(self.pool_problems)
        if self.cel_errors:
            data["celErrors"] = [e.to_dict() for e in self.cel_errors]
        if self.allocation:
            data["allocation"] = {k: list(v) for k, v in self.allocation.items()}
        return data


@dataclass
class Fix:
    """A change that was tried and makes the pod fit on `nodes`."""

    kind: str  # release-claim | tolerate-taint | lower-count | remove-selector | lower-resource | ...
    message: str
    nodes: list[str]
    change: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "nodes": list(self.nodes), "change": dict(self.change)}


@dataclass
class Explanation:
    kind: str  # Pod | ResourceClaim
    namespace: str
    name: str
    fits: bool
    summary: str
    nodes: list[NodeExplanation] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # not per node: missing class, bad CEL, ...
    cel_errors: list[CelErrorReport] = field(default_factory=list)
    placement: dict[str, Any] | None = None  # {"node": n, "devices": {claim: [results]}}
    fixes: list[Fix] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The simulation the explanation came from (gpudra.explain.simulate.Run); not part of the output.
    context: Any = field(default=None, repr=False, compare=False)

    @property
    def target(self) -> str:
        short = {"Pod": "pod", "ResourceClaim": "claim"}.get(self.kind, self.kind.lower())
        return f"{short}/{self.name}" if not self.namespace else f"{short} {self.namespace}/{self.name}"

    def node(self, name: str) -> NodeExplanation | None:
        return next((n for n in self.nodes if n.node == name), None)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "Explanation",
            "target": {"kind": self.kind, "namespace": self.namespace, "name": self.name},
            "fits": self.fits,
            "summary": self.summary,
        }
        if self.placement:
            data["placement"] = self.placement
        if self.problems:
            data["problems"] = list(self.problems)
        if self.cel_errors:
            data["celErrors"] = [e.to_dict() for e in self.cel_errors]
        data["nodes"] = [n.to_dict() for n in self.nodes]
        data["fixes"] = [f.to_dict() for f in self.fixes]
        if self.notes:
            data["notes"] = list(self.notes)
        return data
