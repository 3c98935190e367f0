"""What a placement takes from the whole-node tasks still to come: the hosting reserve of `fgd-reserve`.

A whole-node shape asks more than half of the GPUs of the cluster's largest node (openb: the 8-GPU tasks on
8-GPU nodes): two such tasks never share a node, so each needs a node almost untouched, and every small task
put on such a node takes a host from them. FGD's measure cannot see this: it weighs fragmentation by the typical
tasks, the most frequent shapes up to 95% of the tasks, and the whole-node shapes are rare by count (44 of the
default trace's 8,152 tasks) though not by GPUs (352 of the 7,433 GPUs its tasks ask). FGD keeps idle nodes only through
its tie order, which packs; this policy's earlier tie rule (the node where the CPU-aware fragmentation grows
least) spread small tasks over idle nodes with CPU to spare and sought out the few nodes that alone host the
largest shapes (the 39 G3 nodes, the only 8-GPU nodes with the 120 cores some 8-GPU tasks ask): seed 42 of the
default trace turned an 8-GPU task away at 5% arrived demand, and the policy allocated 0.4-1.6 pp less than FGD
from 50% to 95% arrived demand.

The cost of a placement is Σ_s w_s / H_s over the whole-node shapes s the node could host before and cannot
after (one copy of s fits its free CPU and GPUs and its model), with w_s the shape's share of the whole-node
shapes' GPU demand (task count × GPUs × milli) and H_s the nodes of the idle cluster that can host s: a node that
is one of the few hosts of a shape costs most. `fgd-reserve` ranks FGD's equals by it before the CPU rule, so
small tasks go to nodes no whole-node shape can use any more, and to the commonest hosts before the rare ones.
Smaller multi-GPU shapes are left to the CPU rule: protecting them too (a 2-GPU shape is lost whenever a node
goes from 2 free GPUs to 1) fought it near saturation (cpu100: -0.05 pp at 100% against FGD, 10 seeds).
Reads the workload's popularity and the cluster's state only: no task's future.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from .fgd import NodeRes, ResourceKey, accessible, fits_gpus


def hosts(cpu_left: int, gpu_left: tuple[int, ...], model: str, shape: ResourceKey) -> bool:
    """One copy of a GPU task of `shape` fits the node's free CPU and GPUs (and its model)."""
    cpu, milli, count, models = shape
    return (cpu <= cpu_left and bool(gpu_left) and accessible(model, models)
            and fits_gpus(gpu_left, milli, count))


class HostingReserve:
    """`lost`: the weighted hosting capacity a placement takes away (memoised per node state and placement)."""

    def __init__(self, counts: Counter[ResourceKey], idle_nodes: Iterable[NodeRes]):
        idle = list(idle_nodes)
        largest = max((len(node.gpu_left) for node in idle), default=0)
        demand = {shape: count * shape[1] * shape[2] for shape, count in counts.items()
                  if shape[1] and 2 * shape[2] > largest}  # whole-node shapes: over half the largest node's GPUs
        total = sum(demand.values())
        self.weights: list[tuple[ResourceKey, float]] = []  # shape -> w_s / H_s, shapes some idle node hosts
        for shape, milli in sorted(demand.items(), key=lambda item: (item[0][:3], "|".join(item[0][3]))):
            hosting = sum(1 for node in idle if hosts(node.cpu_left, node.gpu_left, node.model, shape))
            if hosting and total:
                self.weights.append((shape, milli / total / hosting))
        self._memo: dict[tuple[NodeRes, int, int, tuple[int, ...]], float] = {}  # (node, cpu, milli, gpus)

    def lost(self, res: NodeRes, cpu: int, milli: int, gpus: tuple[int, ...]) -> float:
        """Σ w_s / H_s over the shapes the node hosts now and no longer hosts once a task of `cpu` and `milli`
        per GPU takes the GPUs `gpus`."""
        key = (res, cpu, milli, gpus)
        found = self._memo.get(key)
        if found is not None:
            return found
        after_left = tuple(left - milli if i in gpus else left for i, left in enumerate(res.gpu_left))
        after_cpu = res.cpu_left - cpu
        value = 0.0
        for shape, weight in self.weights:
            if (hosts(res.cpu_left, res.gpu_left, res.model, shape)
                    and not hosts(after_cpu, after_left, res.model, shape)):
                value += weight
        if len(self._memo) > 1_000_000:
            self._memo.clear()
        self._memo[key] = value
        return value
