"""Scoring policies (`--policy`). Every policy returns one number per feasible node, higher is better; the
cycle picks the highest and breaks ties by node name, so results never depend on chance.

- `kube`: kube-scheduler's default scores for the plugins gpudra models — NodeResourcesFit (LeastAllocated on
  cpu and memory with the non-zero defaults, weight 1), NodeResourcesBalancedAllocation (actual requests;
  skipped for best-effort pods, weight 1), DynamicResources' firstAvailable
  preference (8 − subrequest index, normalised to 0..100, weight 1), TaintToleration (PreferNoSchedule taints,
  weight 3) and NodeAffinity (preferred terms, weight 2). Devices are chosen by the allocator's first fit,
  exactly as upstream. Like upstream it scores only the first feasible nodes on large clusters.
  Not modelled: ImageLocality, InterPodAffinity and PodTopologySpread (including its system default
  ScheduleAnyway constraints for pods owned by ReplicaSets/StatefulSets), so workload pods may be spread
  differently from a real cluster where those break ties.
- `binpack`: fill nodes and devices before opening new ones — prefer the node left with the fewest untouched
  physical devices, then the most allocated cpu/memory; inside the node prefer devices on GPUs already in use.
- `spread`: the opposite — the node left with the most untouched physical devices, then the least allocated.

A physical device is a group of node-local devices drawing on one counter set (a GPU and its MIG
partitions), or a device on its own (`ClusterState.device_group`); it is "free" while nothing is allocated from it.
- `fragmentation`: in the spirit of Fragmentation Gradient Descent (Weng et al., USENIX ATC'23) — prefer the
  node (and devices) whose allocation least increases the node's expected fragmentation. See `fragmentation.py`.
  Not the simulator's `fgd-reserve` (gpudra.simulate.policies: the paper's FGD on trace task shapes, its ties
  broken by a hosting reserve), which `gpudra simulate` called `fragmentation` before.

binpack, spread and fragmentation look at every node (percentageOfNodesToScore = 100): they are about placement
quality, not speed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from gpudra import schedulinghelpers as nodematch
from . import resources as res

if TYPE_CHECKING:  # pragma: no cover
    from .cyclestate import NodeEval, PodInfo
    from .scheduler import Scheduler

MAX_NODE_SCORE = 100


def default_normalize(scores: dict[str, int], reverse: bool = False) -> dict[str, int]:
    """helper.DefaultNormalizeScore: scale to 0..100 by the maximum; `reverse` flips (lower raw is better)."""
    highest = max(scores.values(), default=0)
    if highest == 0:
        return {node: (MAX_NODE_SCORE if reverse else 0) for node in scores}
    normalized = {node: MAX_NODE_SCORE * value // highest for node, value in scores.items()}
    if reverse:
        normalized = {node: MAX_NODE_SCORE - value for node, value in normalized.items()}
    return normalized


def least_allocated(requested: int, capacity: int) -> int:
    if capacity <= 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def most_allocated(requested: int, capacity: int) -> int:
    if capacity <= 0:
        return 0
    return min(requested, capacity) * MAX_NODE_SCORE // capacity


def _cpu_memory(scheduler: "Scheduler", info: "PodInfo", node: str) -> tuple[int, int, int, int]:
    """(cpu requested incl. the pod, cpu allocatable, memory requested, memory allocatable), non-zero requests."""
    usage = scheduler.cluster.usage[node]
    allocatable = scheduler.cluster.allocatable(node) or {}
    return (
        usage.non_zero_cpu + info.non_zero_cpu,
        allocatable.get(res.CPU, 0),
        usage.non_zero_memory + info.non_zero_memory,
        allocatable.get(res.MEMORY, 0),
    )


def resource_score(scheduler: "Scheduler", info: "PodInfo", node: str,
                   strategy: Callable[[int, int], int]) -> int:
    cpu, cpu_cap, memory, memory_cap = _cpu_memory(scheduler, info, node)
    return (strategy(cpu, cpu_cap) + strategy(memory, memory_cap)) // 2


def balanced_allocation(scheduler: "Scheduler", info: "PodInfo", node: str) -> int:
    if not info.requests.get(res.CPU) and not info.requests.get(res.MEMORY):
        return 0  # best-effort pods skip BalancedAllocation (kubernetes#129138)
    usage = scheduler.cluster.usage[node]
    allocatable = scheduler.cluster.allocatable(node) or {}
    fractions = []
    for resource in (res.CPU, res.MEMORY):
        capacity = allocatable.get(resource, 0)
        if capacity <= 0:
            continue
        requested = usage.requested.get(resource, 0) + info.requests.get(resource, 0)
        fractions.append(min(requested / capacity, 1.0))
    if len(fractions) < 2:
        return MAX_NODE_SCORE
    deviation = abs(fractions[0] - fractions[1]) / 2
    return int((1 - deviation) * MAX_NODE_SCORE)


class Policy:
    """A scoring policy. `node_parts` computes what depends only on the node's state and the pod's shape; the
    scheduler caches it with the node's verdict. `combine` turns the parts of all feasible nodes into scores
    (normalisations across nodes happen there)."""

    name = ""
    default_percentage_of_nodes_to_score = 100
    indexable = True  # whether the scheduler may use a ShapeIndex (fast with `plain_score`, exact without)
    # whether `node_parts` reads a feasible node's allocations; without, they are computed for the chosen node
    # only, and nodes in the same device state share one device search (Allocator.fits)
    node_allocations = True

    def plain_score(self, parts: Any) -> float | None:
        """The node's final score when it does not depend on the other scored nodes, else None. Only an int is
        used as such (ShapeIndex ranks plain scores as ints); any other value counts as not plain (`combine`)."""
        return None

    def node_parts(self, scheduler: "Scheduler", info: "PodInfo", evaluation: "NodeEval") -> Any:
        return None

    def combine(self, scheduler: "Scheduler", info: "PodInfo", feasible: list["NodeEval"]) -> dict[str, float]:
        raise NotImplementedError

    def score(self, scheduler: "Scheduler", info: "PodInfo", feasible: list["NodeEval"]) -> dict[str, float]:
        for evaluation in feasible:
            if evaluation.parts is None:
                evaluation.parts = self.node_parts(scheduler, info, evaluation)
        return self.combine(scheduler, info, feasible)

    def choose_allocations(self, scheduler: "Scheduler", info: "PodInfo", chosen: "NodeEval") -> list[dict[str, Any]]:
        return list(chosen.result.allocations or [])


class KubePolicy(Policy):
    name = "kube"
    default_percentage_of_nodes_to_score = 0  # adaptive, as kube-scheduler
    node_allocations = False  # first_available, its only device input, is known without them

    def plain_score(self, parts: Any) -> float | None:
        # with no PreferNoSchedule taint, preferred affinity or firstAvailable rank anywhere, the normalised
        # plugins add the same constant to every node: TaintToleration's all-zero reverse normalisation (3 x 100)
        if parts[1] or parts[2] or parts[3]:
            return None
        score: int = parts[0] + 3 * MAX_NODE_SCORE  # parts[0]: NodeResourcesFit + NodeResourcesBalancedAllocation
        return score

    def node_parts(self, scheduler: "Scheduler", info: "PodInfo", evaluation: "NodeEval") -> Any:
        node = evaluation.result.node
        node_obj = scheduler.cluster.nodes[node]
        return (
            resource_score(scheduler, info, node, least_allocated) + balanced_allocation(scheduler, info, node),
            nodematch.count_untolerated_prefer_no_schedule(nodematch.node_taints(node_obj), info.tolerations),
            nodematch.preferred_affinity_score(info.pod, node_obj),
            evaluation.first_available,
        )

    def combine(self, scheduler: "Scheduler", info: "PodInfo", feasible: list["NodeEval"]) -> dict[str, float]:
        parts = [(e.result.node, e.parts) for e in feasible]
        columns = list(zip(*(p for _, p in parts)))
        constant = 0
        normalized: list[tuple[int, int, int, bool]] = []  # (index, weight, highest, reverse)
        for index, weight, reverse in ((1, 3, True), (2, 2, False), (3, 1, False)):
            highest = max(columns[index])
            if highest == 0:  # DefaultNormalizeScore of all zeros: 0 each, or 100 each when reversed
                constant += weight * MAX_NODE_SCORE if reverse else 0
            else:
                normalized.append((index, weight, highest, reverse))
        scores: dict[str, float] = {node: p[0] + constant for node, p in parts}
        for index, weight, highest, reverse in normalized:
            for node, p in parts:
                value = MAX_NODE_SCORE * p[index] // highest
                scores[node] += weight * (MAX_NODE_SCORE - value if reverse else value)
        return scores


class _DevicePolicy(Policy):
    """binpack and spread: free devices left on the node first, cpu/memory allocation second."""

    fill = True

    def node_parts(self, scheduler: "Scheduler", info: "PodInfo", evaluation: "NodeEval") -> Any:
        node = evaluation.result.node
        free_before = scheduler.cluster.free_node_groups(node)
        taken = scheduler.cluster.groups_opened(node, evaluation.result.allocations)
        strategy = most_allocated if self.fill else least_allocated
        return free_before, free_before - taken, resource_score(scheduler, info, node, strategy)

    def combine(self, scheduler: "Scheduler", info: "PodInfo", feasible: list["NodeEval"]) -> dict[str, float]:
        most_free = max((e.parts[0] for e in feasible), default=0)
        scores: dict[str, float] = {}
        for evaluation in feasible:
            _, free_after, resources = evaluation.parts
            device_score = MAX_NODE_SCORE * free_after / most_free if most_free > 0 else 0.0
            if self.fill and most_free > 0:
                device_score = MAX_NODE_SCORE - device_score
            scores[evaluation.result.node] = 2 * device_score + resources
        return scores

    def choose_allocations(self, scheduler: "Scheduler", info: "PodInfo", chosen: "NodeEval") -> list[dict[str, Any]]:
        from .devicechoice import choose_device_alternative

        return choose_device_alternative(scheduler, info, chosen, prefer_used_groups=self.fill)


class BinpackPolicy(_DevicePolicy):
    name = "binpack"
    fill = True


class SpreadPolicy(_DevicePolicy):
    name = "spread"
    fill = False
