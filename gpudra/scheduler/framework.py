"""Result types of the scheduling cycle, shared by `gpudra schedule` and `gpudra explain`.

A `Reason` is one plugin's verdict on one node (or on the pod as a whole, `node=None`), with the message the
kube-scheduler would print and structured details for explanations. `FilterResult` collects them per node;
`PodResult` is the outcome of one scheduling attempt.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .bindingconditions import PREBIND_PLUGIN_ERROR, PendingCondition

# Plugin names as kube-scheduler reports them.
NODE_UNSCHEDULABLE = "NodeUnschedulable"
NODE_NAME = "NodeName"
TAINT_TOLERATION = "TaintToleration"
NODE_AFFINITY = "NodeAffinity"
NODE_RESOURCES_FIT = "NodeResourcesFit"
INTER_POD_AFFINITY = "InterPodAffinity"
DYNAMIC_RESOURCES = "DynamicResources"
SCHEDULING_GATES = "SchedulingGates"
GANG_SCHEDULING = "GangScheduling"
DEFAULT_PREEMPTION = "DefaultPreemption"


@dataclass(frozen=True)
class Reason:
    """Why a node was rejected (or why the whole pod was, when raised at PreFilter).

    `message` is kube-scheduler's wording for the summary line; `details` carries the data behind it
    (resource names and amounts, the taint, the claim, the allocator's error) for explanations.
    `resolvable` is False for UnschedulableAndUnresolvable statuses (preemption would not help).
    `fatal` marks an allocator error that aborts the whole scheduling attempt.
    """

    plugin: str
    message: str
    details: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    resolvable: bool = True
    fatal: bool = False


@dataclass
class FilterResult:
    node: str
    reasons: list[Reason] = field(default_factory=list)
    # DynamicResources' allocation for this node when it fits: one status.allocation per claim to allocate.
    allocations: list[dict[str, Any]] | None = None

    @property
    def fits(self) -> bool:
        return not self.reasons


class FilterResults(Mapping[str, FilterResult]):
    """node -> FilterResult over a list (a list of references is far smaller than a dict when thousands of
    unschedulable pods each keep hundreds of node verdicts)."""

    def __init__(self, results: list[FilterResult]):
        self._results = results
        self._by_node: dict[str, FilterResult] | None = None

    def _index(self) -> dict[str, FilterResult]:
        if self._by_node is None:
            self._by_node = {result.node: result for result in self._results}
        return self._by_node

    def __getitem__(self, node: str) -> FilterResult:
        return self._index()[node]

    def __iter__(self) -> Any:
        return iter(result.node for result in self._results)

    def __len__(self) -> int:
        return len(self._results)

    def values(self) -> Any:  # the summary line only needs the verdicts
        return list(self._results)


@dataclass(frozen=True)
class BindingWait:
    """A pod waiting at PreBind on `node` for its devices' binding conditions (gpudra.scheduler.bindingconditions)."""

    node: str
    pending: tuple[PendingCondition, ...]

    def message(self) -> str:
        waits = ", ".join(p.describe() for p in self.pending) or "its devices' binding conditions"
        return f"Binding: waiting for {waits} (node {self.node})"


@dataclass
class PodResult:
    pod: str  # namespace/name
    node: str | None = None
    scores: Mapping[str, float] = field(default_factory=dict)  # node -> total score (feasible nodes scored)
    filtered: Mapping[str, FilterResult] = field(default_factory=dict)  # node -> result, see the package doc
    prefilter: list[Reason] = field(default_factory=list)  # pod-level rejections (no node evaluated)
    error: str | None = None  # fatal error (e.g. a CEL error) that aborted the attempt
    num_nodes: int = 0
    claims: list[str] = field(default_factory=list)  # namespace/name of claims allocated or reserved
    gang: str | None = None  # why the pod's gang (gpudra.scheduler.gangs) was not bound, where it was not
    preempted: tuple[str, ...] = ()  # pods evicted for this one (DefaultPreemption), most important first
    nominated_node: str | None = None  # the node its preemption nominated (status.nominatedNodeName)
    post_filter: str = ""  # PostFilterMsg ("preemption: ..."), kept only by a Scheduler(graceful_preemption=True)
    binding: BindingWait | None = None  # assumed on a node, waiting at PreBind for binding conditions (not bound)
    binding_error: str | None = None  # PreBind failed: a binding failure condition or the binding timeout

    @property
    def at_prebind(self) -> bool:
        """The attempt reached PreBind and the pod is not bound: it waits there, or its wait failed."""
        return self.binding is not None or self.binding_error is not None

    @property
    def scheduled(self) -> bool:
        return self.node is not None

    def message(self) -> str:
        """The one-line kube-scheduler style summary for an unschedulable pod."""
        if self.scheduled:
            return ""
        if self.binding is not None:
            return self.binding.message()
        if self.binding_error is not None:
            return PREBIND_PLUGIN_ERROR + self.binding_error
        if self.error:
            return f"running DynamicResources filter plugin: {self.error}"
        if self.prefilter and self.prefilter[0].plugin in (SCHEDULING_GATES, GANG_SCHEDULING):
            return self.prefilter[0].message
        if self.prefilter:
            reasons = sorted({reason.message for reason in self.prefilter})
            return f"0/{self.num_nodes} nodes are available: {'; '.join(reasons)}."
        fit = fit_error_message(self.num_nodes, self.filtered.values())
        fit = f"{fit} {self.post_filter}" if self.post_filter else fit
        return f"{fit} {self.gang}" if self.gang else fit


def fit_error_message(num_nodes: int, results: Any) -> str:
    """`0/N nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint {k: v}.` (upstream's
    FitError: one count per distinct reason, entries sorted as strings)."""
    histogram: Counter[str] = Counter()
    single: list[str] = []  # most nodes fail for one reason: no set per node (a simulation asks this for every
    for result in results:  # pod that does not fit, over every node)
        reasons = result.reasons
        if len(reasons) == 1:
            single.append(reasons[0].message)
        else:
            histogram.update({reason.message for reason in reasons})
    histogram.update(single)
    entries = sorted(f"{count} {message}" for message, count in histogram.items())
    if not entries:
        return f"0/{num_nodes} nodes are available."
    return f"0/{num_nodes} nodes are available: {', '.join(entries)}."
