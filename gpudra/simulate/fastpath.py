"""The simulator's fast path: the paper's policies on a trace of the paper's simple shape, without Kubernetes
objects.

`gpudra simulate` routes every placement through gpudra's scheduler and allocator (the reference path,
`engine.Run` with a `ManagedCluster`): every node is filtered (NodeResourcesFit; DynamicResources through the
allocator), the policy scores the feasible nodes from `SimContext.node_res`, and its GPU choice is allocated.
For a trace whose every task asks for nothing the paper's node model (`NodeRes`) does not hold, the filters'
answers follow from that model alone: free CPU, free memory, the pod count, and free milli per GPU against one
request of `count` whole GPUs (a fully free GPU each: the device's `compute` capacity is consumed whole by
default) or of one share of `milli`, on a GPU of an allowed model (the claim's CEL selector on productName).
This path keeps that state per node and asks the same policy objects for the same scores, ties and GPUs, so it
places every pod where the reference path does (tests/simulate/test_simulate_fastpath.py compares them pod by pod over
many seeds and every policy; tests/simulate/test_simulate_artifact.py checks it against the FGD artifact's records).

What makes it fast: a policy's ranking of a node (`PaperPolicy.best_key`) depends only on the node's state and
the task's shape, so each shape keeps its feasible nodes in a heap by that key and re-ranks only the nodes that
changed since the shape's last pod (one per bind), as the scheduler's shape index does for its verdicts.
RandomScore keeps the feasible nodes in the scheduler's order instead and picks one by index.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import TYPE_CHECKING, Callable, Iterable, cast

from .fgd import Fragmentation, NodeRes, accessible, fits_gpus
from .objects import MAX_PODS, NAMESPACE
from .policies import (NodeKey, BestFitPolicy, DotProdPolicy, FgdPolicy, FgdReservePolicy, GpuClusteringPolicy,
                       GpuPackingPolicy, PaperPolicy, RandomPolicy, SimContext)
from .trace import MILLI, Task, TraceNode

# the policies whose node ranking depends only on (node state, task shape, node rank): a subclass that reads
# more (an online statistic, say) is not in this list and takes the reference path
FAST_POLICIES = (RandomPolicy, DotProdPolicy, GpuClusteringPolicy, GpuPackingPolicy, BestFitPolicy, FgdPolicy,
                 FgdReservePolicy)
FAST_POLICY_NAMES = tuple(cls.name for cls in FAST_POLICIES)
# ... and those whose key but for its last part (minus the node's rank) reads only the node's NodeRes
# (GpuClusteringScore also reads the kinds of pods on the node)
STATE_KEYED = tuple(cls for cls in FAST_POLICIES if cls is not GpuClusteringPolicy)
POD_LIMIT = int(MAX_PODS)
if TYPE_CHECKING:  # pragma: no cover
    from gpudra.controllers import ManagedCluster

ShapeKey = tuple[int, int, int, int, tuple[str, ...]]


def simple_task(task: Task) -> bool:
    """A task the node model holds whole: CPU only, one share of one GPU, or whole GPUs."""
    if not task.num_gpu:
        return True
    return task.num_gpu >= 1 and (task.gpu_milli == MILLI or (task.num_gpu == 1 and 0 < task.gpu_milli < MILLI))


def applies(nodes: Iterable[TraceNode], tasks: Iterable[Task], policy: PaperPolicy) -> bool:
    """Whether the fast path gives the reference path's answers for this trace and policy."""
    return type(policy) in FAST_POLICIES and not why_not(nodes, tasks)


def why_not(nodes: Iterable[TraceNode], tasks: Iterable[Task]) -> str | None:
    """Why the trace itself keeps a run off the fast path (None: its tasks and nodes fit the node model)."""
    odd = next((t for t in tasks if not simple_task(t)), None)
    if odd is not None:
        return (f"task {odd.name} asks {odd.num_gpu} GPU(s) of {odd.gpu_milli} milli each (the node model holds "
                "CPU-only tasks, one share of one GPU, or whole GPUs)")
    if any(n.gpus and not n.model for n in nodes):
        return "a node has GPUs but no GPU model"
    return None


# A node's entry in a shape's heap: its key descending (`_descending`), then its epoch and position
HeapEntry = tuple[float, ...]


def _descending(key: NodeKey) -> HeapEntry:
    """A key heapq's min-heap pops largest first: every number negated, nested tuples flattened."""
    if len(key) == 2:  # (score, -rank): the paper's policies
        score, rank = key
        if not isinstance(score, tuple) and not isinstance(rank, tuple):
            return -score, -rank
    out: list[float] = []
    for part in key:
        if isinstance(part, tuple):
            out.extend(-x for x in part)
        else:
            out.append(-part)
    return tuple(out)


class _ShapeView:
    """One task shape's feasible nodes: a heap by the policy's key (largest first), or for RandomScore the sorted
    node positions. `epochs[i]`: the node's epoch when last judged for this shape (-1: never)."""

    def __init__(self, count: int):
        self.epochs = [-1] * count
        self.entries: list[HeapEntry | None] = [None] * count  # the node's live heap entry, None when infeasible
        self.heap: list[HeapEntry] = []
        self.feasible: list[int] = []  # RandomScore: sorted positions
        self.keys: dict[NodeRes, HeapEntry] = {}  # node state -> the policy's key less the rank (STATE_KEYED policies)
        self.log_position = 0


class FastState:
    """The cluster as the paper's node model holds it, and the scheduling of one pod on it."""

    def __init__(self, nodes: list[TraceNode]):
        ordered = sorted(nodes, key=lambda n: n.name)  # the scheduler walks nodes by name (ClusterState.node_names)
        self.names = [n.name for n in ordered]
        self.position = {name: i for i, name in enumerate(self.names)}
        self.res = [NodeRes(n.cpu_milli, n.cpu_milli, (MILLI,) * n.gpus, n.model)
                    for n in ordered]
        self.memory_left = [n.memory_mib for n in ordered]
        self.pods: list[dict[str, tuple[Task, tuple[int, ...]]]] = [{} for _ in ordered]  # key -> (task, GPUs)
        self.epoch = [0] * len(ordered)
        self.changes: list[int] = []  # positions of the nodes changed, in order
        self.placed: dict[str, int] = {}  # pod key -> node position

    def node_res(self, node: str) -> NodeRes:
        return self.res[self.position[node]]

    def fits(self, i: int, task: Task) -> bool:
        """NodeResourcesFit (pods, cpu, memory) and DynamicResources on the node model."""
        if len(self.pods[i]) + 1 > POD_LIMIT or task.memory_mib > self.memory_left[i]:
            return False
        res = self.res[i]
        if task.cpu_milli > res.cpu_left:
            return False
        if not task.num_gpu:
            return True
        return (bool(res.gpu_left) and accessible(res.model, task.gpu_spec)
                and fits_gpus(res.gpu_left, task.gpu_milli, task.num_gpu))

    def _change(self, i: int, res: NodeRes, memory_delta: int) -> None:
        self.res[i] = res
        self.memory_left[i] += memory_delta
        self.epoch[i] += 1
        self.changes.append(i)

    def bind(self, key: str, i: int, task: Task, gpus: tuple[int, ...]) -> None:
        res = self.res[i]
        left = list(res.gpu_left)
        for g in gpus:
            left[g] -= task.gpu_milli
        self.pods[i][key] = (task, gpus)
        self.placed[key] = i
        self._change(i, NodeRes(res.cpu_left - task.cpu_milli, res.cpu_capacity, tuple(left), res.model),
                     -task.memory_mib)

    def unbind(self, key: str) -> str:
        i = self.placed.pop(key)
        task, gpus = self.pods[i].pop(key)
        res = self.res[i]
        left = list(res.gpu_left)
        for g in gpus:
            left[g] += task.gpu_milli
        self._change(i, NodeRes(res.cpu_left + task.cpu_milli, res.cpu_capacity, tuple(left), res.model),
                     task.memory_mib)
        return self.names[i]


class FastContext(SimContext):
    """SimContext over a FastState: the policies read the node model from it instead of the cluster."""

    def __init__(self, state: FastState, mode: str, node_gpus: dict[str, tuple[str, list[tuple[str, str, str]]]],
                 tasks: dict[str, Task], fragmentation: Fragmentation, seed: int, node_rank: dict[str, int]):
        super().__init__(cast("ManagedCluster", None), mode, node_gpus, tasks, fragmentation, seed, node_rank)  # no cluster
        self.state = state

    def node_res(self, node: str) -> NodeRes:
        return self.state.node_res(node)

    def pods_on(self, node: str) -> Iterable[str]:
        return self.state.pods[self.state.position[node]]


class FastScheduler:
    """Schedules one pod at a time as `Scheduler.schedule_pod` with a paper policy does."""

    def __init__(self, state: FastState, policy: PaperPolicy):
        self.state = state
        self.policy = policy
        self.random = isinstance(policy, RandomPolicy)
        self.pick: Callable[[int], int] | None = policy.pick if isinstance(policy, RandomPolicy) else None
        self.views: dict[ShapeKey, _ShapeView] = {}
        self.state_keyed = type(policy) in STATE_KEYED
        self.rank = [policy.context.node_rank[name] for name in state.names]

    def _view(self, task: Task) -> _ShapeView:
        shape = (task.cpu_milli, task.memory_mib, task.num_gpu, task.gpu_milli, task.gpu_spec)
        view = self.views.get(shape)
        if view is None:
            view = self.views[shape] = _ShapeView(len(self.state.names))
            changed: Iterable[int] = range(len(self.state.names))
        else:
            changes = self.state.changes
            if view.log_position == len(changes):
                return view
            changed = set(changes[view.log_position:])
        view.log_position = len(self.state.changes)
        self._judge(view, task, changed)
        return view

    def _judge(self, view: _ShapeView, task: Task, changed: Iterable[int]) -> None:
        state, policy = self.state, self.policy
        epochs, entries, names = view.epochs, view.entries, state.names
        pushed: list[HeapEntry] = []
        for i in changed:
            epoch = state.epoch[i]
            if epochs[i] == epoch:
                continue
            epochs[i] = epoch
            was = entries[i] is not None
            if not state.fits(i, task):
                entries[i] = None
                if was and self.random:
                    del view.feasible[bisect_left(view.feasible, i)]
                continue
            if self.random:
                entries[i] = ()
                if not was:
                    insort(view.feasible, i)
                continue
            res = state.res[i]
            if self.state_keyed:  # nodes in one state share the key but for the rank, its last part
                prefix = view.keys.get(res)
                if prefix is None:
                    if len(view.keys) > 100_000:
                        view.keys.clear()
                    prefix = view.keys[res] = _descending(policy.best_key(res, task, names[i]))[:-1]
                entry = entries[i] = (*prefix, self.rank[i], epoch, i)
            else:
                entry = entries[i] = (*_descending(policy.best_key(res, task, names[i])), epoch, i)
            pushed.append(entry)
        heap = view.heap
        if len(heap) + len(pushed) > 4 * len(names) + 64:  # mostly stale entries: keep the live ones
            view.heap = [e for e in entries if e]
            heapq.heapify(view.heap)
        elif len(pushed) * 8 > len(heap):
            heap.extend(pushed)
            heapq.heapify(heap)
        else:
            for entry in pushed:
                heapq.heappush(heap, entry)

    def _best(self, view: _ShapeView) -> int | None:
        if self.random:
            feasible = view.feasible
            if not feasible:
                return None
            assert self.pick is not None
            return feasible[self.pick(len(feasible))] if len(feasible) > 1 else feasible[0]
        heap, epoch = view.heap, self.state.epoch
        while heap and (heap[0][-2] != epoch[int(heap[0][-1])] or view.entries[int(heap[0][-1])] is None):
            heapq.heappop(heap)
        return int(heap[0][-1]) if heap else None

    def schedule(self, pod_name: str, task: Task) -> tuple[str | None, tuple[int, ...]]:
        """(node, indices of the GPUs the task got there) or (None, ()) when no node fits."""
        view = self._view(task)
        i = self._best(view)
        if i is None:
            return None, ()
        state = self.state
        gpus: tuple[int, ...] = ()
        if task.num_gpu:
            gpus = tuple(sorted(self.policy.gpus(state.res[i], task)))
            if len(gpus) != task.num_gpu:
                raise RuntimeError(f"internal error: policy {self.policy.name} chose GPUs {gpus} of node "
                                   f"{state.names[i]} for {task.num_gpu} GPU(s)")
        state.bind(f"{NAMESPACE}/{pod_name}", i, task, gpus)
        return state.names[i], gpus
