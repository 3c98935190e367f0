"""NVIDIA's k8s-device-plugin with time-slicing (`--mode time-slicing`): every GPU is advertised as N replicas of
`nvidia.com/gpu` (config `sharing.timeSlicing.resources[{name: nvidia.com/gpu, replicas: N}]`), a pod asks for
replicas, and replicas isolate neither memory nor compute, so pods' demand can pile up on one GPU past its capacity.

Facts from NVIDIA/k8s-device-plugin (commit 1b826acc, 2026-08):
- internal/rm/device_map.go: each GPU `<uuid>` becomes the devices `<uuid>::0` … `<uuid>::N-1` (devices.go
  NewAnnotatedID) under the same resource name (unless `rename`/`renameByDefault`: not modelled).
- api/config/v1/replicas.go: `replicas` must be >= 2.
- internal/rm/rm.go ValidateRequests: with `failRequestsGreaterThanOne` the kubelet's Allocate refuses a request of
  more than one replica (the pod fails admission and holds nothing).
- internal/rm/nvml_manager.go getPreferredAllocation: replicas go through greedyAlloc with the
  `--shared-devices-allocation-policy` comparator, "distributed" by default; internal/rm/allocate.go greedyAlloc
  picks one replica at a time: the GPU with the fewest replicas allocated (allocated = its replicas on the node
  minus its free ones, counting the picks so far), on a tie the GPU picked least often in this request. Upstream
  breaks the remaining ties by Go map order (unspecified); here the lower GPU index wins, so runs repeat.

The scheduler sees only the count (`nvidia.com/gpu: GPUs × N` allocatable); the plugin decides the GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .fgd import NodeRes
from .trace import MILLI, Task

DEFAULT_REPLICAS = 4  # NVIDIA's time-slicing examples (GPU operator docs, plugin README) use replicas: 4
MIN_REPLICAS = 2  # api/config/v1/replicas.go: "number of replicas must be >= 2"


def replicas_asked(task: Task) -> int:
    """Replicas of `nvidia.com/gpu` a task asks for: one for a share, k for k whole GPUs."""
    if not task.num_gpu:
        return 0
    return 1 if task.shares_gpu else task.num_gpu


def distributed_pick(allocated: list[int], replicas: int, size: int) -> list[int] | None:
    """GPU indices (one per replica, repeats allowed) greedyAlloc's "distributed" policy gives a request of `size`
    replicas on a node whose GPU i has allocated[i] of its `replicas` replicas taken; None if too few are free."""
    taken = list(allocated)
    picked_from = [0] * len(taken)
    if sum(replicas - t for t in taken) < size:
        return None
    picks: list[int] = []
    for _ in range(size):
        best = min((i for i in range(len(taken)) if taken[i] < replicas),
                   key=lambda i: (taken[i], picked_from[i], i))
        taken[best] += 1
        picked_from[best] += 1
        picks.append(best)
    return picks


@dataclass
class ReplicaState:
    """Which GPU each pod's replicas landed on, and the GPU demand (milli) that piled up on every GPU."""

    replicas: int
    node_gpus: dict[str, int]  # node -> GPUs
    taken: dict[str, list[int]] = field(default_factory=dict)  # node -> replicas taken per GPU
    demand: dict[str, list[int]] = field(default_factory=dict)  # node -> GPU milli of the pods on each GPU
    pods: dict[str, tuple[str, list[int], int]] = field(default_factory=dict)  # pod -> (node, GPUs, milli each)
    over_milli: int = 0  # kept as demand changes: summing over every GPU after every task is too slow
    over_gpus: int = 0

    def __post_init__(self) -> None:
        for node, gpus in self.node_gpus.items():
            self.taken[node] = [0] * gpus
            self.demand[node] = [0] * gpus

    def place(self, pod: str, node: str, task: Task) -> list[int]:
        """The plugin's pick for a pod the scheduler bound to `node` (which has the replicas free)."""
        size = replicas_asked(task)
        gpus = distributed_pick(self.taken[node], self.replicas, size) if size else []
        if gpus is None:  # the scheduler counted the replicas free: state and scheduler disagree
            raise AssertionError(f"{pod}: {size} replicas not free on {node}")
        milli = task.gpu_milli if task.shares_gpu else MILLI  # each replica of a whole-GPU request wants a GPU
        for gpu in gpus:
            self.taken[node][gpu] += 1
            self._add_demand(node, gpu, milli)
        self.pods[pod] = (node, gpus, milli)
        return gpus

    def release(self, pod: str) -> str | None:
        placed = self.pods.pop(pod, None)
        if placed is None:
            return None
        node, gpus, milli = placed
        for gpu in gpus:
            self.taken[node][gpu] -= 1
            self._add_demand(node, gpu, -milli)
        return node

    def _add_demand(self, node: str, gpu: int, milli: int) -> None:
        before = self.demand[node][gpu]
        after = self.demand[node][gpu] = before + milli
        self.over_milli += max(0, after - MILLI) - max(0, before - MILLI)
        self.over_gpus += (after > MILLI) - (before > MILLI)

    def reserved_gpus(self, node: str) -> int:
        return sum(1 for t in self.taken.get(node, ()) if t)

    def left(self, node: str) -> tuple[int, ...]:
        """Per GPU, the milli its free replicas stand for (what a count-only scheduler could know)."""
        return tuple(MILLI * (self.replicas - t) // self.replicas for t in self.taken.get(node, ()))

    def gpu_res(self, node: str, res: NodeRes) -> NodeRes:
        """`res` with each GPU's free milli as the GPU has it: 1000 less the demand of the pods on it, never
        below 0 (an oversubscribed GPU has nothing free). What the fragmentation measure reads in time-slicing:
        over GPUs, not over the free replicas a count-only scheduler sees (`left`), which would count a GPU with
        two of four replicas free as 500 milli free whatever its pods ask."""
        return NodeRes(res.cpu_left, res.cpu_capacity,
                       tuple(max(0, MILLI - demand) for demand in self.demand.get(node, ())), res.model)

    def oversubscribed_milli(self) -> int:
        """GPU demand placed beyond GPU capacity: the sum over GPUs of max(0, demand - 1000)."""
        return self.over_milli

    def oversubscribed_gpus(self) -> int:
        return self.over_gpus
