"""What a placement takes from the tasks the workload still sends: the hosting reserve.

A node can host a task shape (CPU, GPU milli per GPU, GPU count, models) while its free CPU and GPUs fit one
copy. A placement that ends a node's ability to host a shape costs that shape more the fewer nodes of the idle
cluster could ever host it: an 8-GPU task that asks 120 cores fits only the 39 G3 nodes of the openb cluster,
a 1-GPU task fits almost every node. The cost of a placement is Σ_s w_s / H_s over the shapes s the node hosted
before and no longer hosts after, with w_s the shape's share of the workload's GPU demand (task count × GPU milli,
so a rare 8-GPU shape weighs as the GPUs it asks) and H_s the idle cluster's nodes that host s.

FGD's measure (`fgd.py`) weighs fragmentation by the typical tasks, the most frequent shapes up to 95% of the
tasks: the rare multi-GPU shapes and the few nodes that alone fit them are not in it, so among the nodes FGD scores
equally nothing keeps a placement off the last hosts of a rare shape (gpudra's `fragmentation` tie rule, which
prefers nodes with CPU to spare, even sought them out: seed 42 of the default trace turned 8-GPU tasks away at 5%
arrived demand, every G3 node partly taken). Reads only the workload's popularity and the cluster's state.
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
        demand = {shape: count * shape[1] * shape[2] for shape, count in counts.items() if shape[1] and shape[2] >= 2}
        total = sum(demand.values())
        idle = list(idle_nodes)
        self.weights: list[tuple[ResourceKey, float]] = []  # shape -> w_s / H_s, shapes some idle node hosts
        for shape, milli in sorted(demand.items(), key=lambda item: (item[0][:3], "|".join(item[0][3]))):
            hosting = sum(1 for node in idle if hosts(node.cpu_left, node.gpu_left, node.model, shape))
            if hosting and total:
                self.weights.append((shape, milli / total / hosting))
        self._memo: dict[tuple, float] = {}

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
