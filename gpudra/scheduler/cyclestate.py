"""What one scheduling cycle computes and keeps: `PodInfo`, a pod's PreFilter results and cache key (its shape),
and `NodeEval`, one node's Filter verdict with the raw inputs of the scoring plugins.

kube-scheduler's counterparts are framework.PodInfo and the CycleState the plugins write in PreFilter
(pkg/scheduler/framework/types.go, cycle_state.go, v1.36.0). Here they are records of their own so that the
policies, the shape index and preemption (which read them) need not import the scheduling cycle itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpudra.allocator import TIMED_OUT

from . import framework as fw
from . import interpodaffinity as ipa
from .dra import DraPodState, ExtendedRequest

# What the Filter verdicts of a pod depend on: its Node-object constraints (`node_shape`), its requests, their
# scoring defaults for cpu and memory, and its claims (`DraPodState.signature`)
PodShape = tuple[str, tuple[tuple[str, int], ...], int, int, str]


@dataclass
class PodInfo:
    """What the cycle precomputes once per pod attempt (PreFilter)."""

    key: str
    pod: dict[str, Any]
    requests: dict[str, int]
    non_zero_cpu: int
    non_zero_memory: int
    tolerations: list[dict[str, Any]]
    dra: DraPodState
    reasons: list[fw.Reason]  # PreFilter rejections for the whole pod
    shape: PodShape  # cache key: pods with equal shapes get equal verdicts on equal node states
    node_shape: str = ""  # the part of `shape` that the Node-object plugins read
    fit_order: tuple[str, ...] = ()  # requests in NodeResourcesFit's reporting order
    non_zero: dict[str, int] = field(default_factory=dict)  # requests with the scoring defaults for cpu/memory
    # InterPodAffinity's PreFilter and PreScore states (None: skipped). Either makes the pod's verdicts or scores
    # depend on where other pods are, which no node epoch tracks: such a pod bypasses the per-shape caches.
    affinity: ipa.FilterState | None = None
    affinity_scores: ipa.ScoreState | None = None

    @property
    def placement_dependent(self) -> bool:
        return self.affinity is not None or self.affinity_scores is not None


@dataclass
class NodeEval:
    """One node's Filter verdict for a pod shape, plus the raw inputs of the scoring plugins."""

    result: fw.FilterResult
    epoch: int = 0
    served: list[ExtendedRequest] = field(default_factory=list)
    extended_claim: dict[str, Any] | None = None
    first_available: int = 0
    fatal: str | None = None
    parts: Any = None  # the policy's per-node scoring inputs, cached with the verdict
    deferred: bool = False  # feasible, but `result.allocations` are computed only if the node is chosen


def timed_out(evaluation: NodeEval) -> bool:
    """The verdict ran out of its Filter time (not cached: another attempt gets a budget of its own)."""
    return any(reason.plugin == fw.DYNAMIC_RESOURCES and reason.message == TIMED_OUT
               for reason in evaluation.result.reasons)
