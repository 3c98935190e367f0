"""The FGD paper's scoring policies as gpudra scheduler policies: random, dotprod, gpu-clustering, gpu-packing,
bestfit and fgd (semantics of hkust-adsl/kubernetes-scheduler-simulator, pkg/simulator/plugin/*_score.go; our
own code).

They plug into `gpudra.scheduler.Scheduler` like its own policies: the scheduler filters every node (NodeResourcesFit
and DynamicResources through the real allocator), the policy scores the feasible nodes from the node's state as
the cluster and the allocator hold it (`SimContext.node_res`), and the policy's GPU choice inside the chosen node
is handed to the allocator, which allocates exactly those devices (the other GPUs of the node are hidden for
that one call). The artifact runs kube-scheduler with percentageOfNodesToScore 100 and only the policy's score
plugin.

Ties: the artifact's kube-scheduler (a fork, vendor/k8s.io/kubernetes/pkg/scheduler/core/generic_scheduler.go
selectHost) does not pick a random best node: "for reproducibility" it takes the smallest node name, and the
simulator names the nodes "%04d-<name>" from one random permutation per seed (pkg/simulator/simulator.go
syncClusterResourceList). So every pod of an experiment breaks ties by the same random node order: a tie goes to
the node that already won the earlier ties, which packs. Random ties instead spread the load and cost FGD five
points of allocation ratio on the default trace (90.2% instead of 95.2% at seed 42). `SimContext.node_rank` is that
order (`node_ranks`, drawn after tuning from the tuning stream, where the artifact draws it); RandomScore alone
picks a uniformly random feasible node (its PreScore), as the artifact.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING, Any, Iterable

from gpudra.gpuplugin.slices import COMPUTE_CAPACITY, COMPUTE_UNITS
from gpudra.scheduler.devicechoice import allocate_hiding, claims_to_allocate
from gpudra.scheduler.scoring import Policy

from .fgd import (MAX_NODE_SCORE, Fragmentation, NodeRes, ResourceKey, TypicalTask, fgd_choice, first_free_gpus,
                  fragmentation_growth, pinned_demand_per_gpu)
from .popularity import OnlinePopularity
from .reserve import HostingReserve
from .timeslicing import ReplicaState
from .trace import MILLI, Task

if TYPE_CHECKING:  # pragma: no cover
    from gpudra.controllers import ManagedCluster
    from gpudra.scheduler.cyclestate import NodeEval, PodInfo
    from gpudra.scheduler.scheduler import Scheduler

MAX_SPEC_CPU = 128_000  # the artifact's normalisers (open-gpu-share/utils/const.go)
MAX_SPEC_GPU = 8_000
PAPER_POLICIES = ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd")
NO_GPU = "no-gpu"
# How a policy ranks a feasible node for a task (`PaperPolicy.best_key`): numbers, or tuples of numbers, compared
# in order; the largest key wins
NodeKey = tuple[float | tuple[float, ...], ...]


def affinity_tag(task: Task) -> str:
    """GetGpuAffinityFromPodAnnotation: no-gpu, share, or "<n>-gpu"."""
    if not task.num_gpu:
        return NO_GPU
    return "share" if task.shares_gpu else f"{task.num_gpu}-gpu"


def node_ranks(node_names: "Iterable[str]", rng: random.Random) -> dict[str, int]:
    """The artifact's "%04d-" node-name prefixes: a permutation over the nodes sorted by name (rand.Perm, drawn
    from the experiment's stream right after workload tuning)."""
    names = sorted(node_names)
    prefixes = list(range(len(names)))
    rng.shuffle(prefixes)
    return dict(zip(names, prefixes))


class SimContext:
    """What the paper's policies read: each node's GPUs (device IDs by index, model) and each pod's task."""

    def __init__(self, cluster: "ManagedCluster", mode: str, node_gpus: dict[str, tuple[str, list[tuple[str, str, str]]]],
                 tasks: dict[str, Task], fragmentation: Fragmentation, seed: int,
                 node_rank: dict[str, int] | None = None, replicas: ReplicaState | None = None):
        self.cluster = cluster
        self.mode = mode
        self.replicas = replicas  # time-slicing: which GPU the plugin gave each replica
        self.node_gpus = node_gpus  # node -> (model, GPU device IDs; in device-plugin mode just as many IDs)
        self.tasks = tasks
        self.fragmentation = fragmentation  # typical tasks of the whole trace (the artifact's oracle)
        self.popularity = OnlinePopularity()  # typical tasks of the tasks arrived so far (the engine observes)
        self.rng = random.Random(seed)  # RandomScore's node and GPU picks
        self.node_rank = node_rank if node_rank is not None else node_ranks(node_gpus, random.Random(seed))
        self.model_gpus: dict[str, int] = {}  # GPU model -> GPUs of that model in the cluster
        for model, devices in node_gpus.values():
            if model:
                self.model_gpus[model] = self.model_gpus.get(model, 0) + len(devices)

    def node_res(self, node: str) -> NodeRes:
        cluster = self.cluster
        allocatable = cluster.allocatable(node) or {}
        usage = cluster.usage[node]
        cpu_capacity = allocatable.get("cpu", 0)
        model, devices = self.node_gpus.get(node, ("", []))
        if self.replicas is not None:
            # a count-only scheduler knows replicas, not demand: a GPU's free replicas stand for its free part
            left = self.replicas.left(node)
        elif self.mode == "device-plugin":
            used = usage.requested.get("nvidia.com/gpu", 0)
            left = tuple(0 if i < used else MILLI for i in range(len(devices)))
        else:
            state = cluster.allocator().state
            left_list = []
            for device in devices:
                if device in state.allocated:
                    left_list.append(0)
                    continue
                consumed = state.capacity.get(device)
                used_nanos = consumed.get(COMPUTE_CAPACITY, 0) if consumed else 0
                left_list.append(MILLI - used_nanos * MILLI // (COMPUTE_UNITS * 1_000_000_000))
            left = tuple(left_list)
        return NodeRes(cpu_capacity - usage.requested.get("cpu", 0), cpu_capacity, left, model)

    def task(self, info: "PodInfo") -> Task:
        return self.tasks[info.key]

    def pods_on(self, node: str) -> "Iterable[str]":
        """The keys of the pods bound to `node`."""
        return self.cluster.usage[node].pods


def best_fit_gpu(res: NodeRes, task: Task) -> tuple[int, ...]:
    """allocateGpuIdBasedOnBestFit: a share on the fullest GPU it fits (first on ties), whole GPUs first-free."""
    if task.shares_gpu:
        best = -1
        for index, left in enumerate(res.gpu_left):
            if left >= task.gpu_milli and (best < 0 or left < res.gpu_left[best]):
                best = index
        return (best,) if best >= 0 else ()
    return first_free_gpus(res, task.num_gpu)


def idle(res: NodeRes) -> NodeRes:
    """The node as it is with no pod on it: all its CPU and every GPU free."""
    return NodeRes(res.cpu_capacity, res.cpu_capacity, (MILLI,) * len(res.gpu_left), res.model)


class PaperPolicy(Policy):
    default_percentage_of_nodes_to_score = 100
    node_allocations = False  # scores read SimContext.node_res; the allocations only matter on the chosen node

    def __init__(self, context: SimContext):
        self.context = context

    def plain_score(self, parts: Any) -> float | None:
        return None  # ties are broken at random per pod, so scores are never "plain"

    def node_parts(self, scheduler: "Scheduler", info: "PodInfo", evaluation: "NodeEval") -> tuple[object, ...]:
        task = self.context.task(info)
        res = self.context.node_res(evaluation.result.node)
        return self.node_score(res, task, evaluation.result.node)

    def node_score(self, res: NodeRes, task: Task, node: str) -> tuple[int, tuple[int, ...]]:
        raise NotImplementedError

    def gpus(self, res: NodeRes, task: Task) -> tuple[int, ...]:
        return best_fit_gpu(res, task)

    def best_key(self, res: NodeRes, task: Task, node: str) -> NodeKey:
        """What `combine` ranks the feasible nodes by, as one key per node: the node with the largest key wins
        (the score, then the tie order: the lowest rank). Its last part is minus the node's rank. The fast path
        (`fastpath.py`) keeps nodes sorted by it."""
        return self.node_score(res, task, node)[0], -self.context.node_rank[node]

    def combine(self, scheduler: "Scheduler", info: "PodInfo", feasible: list["NodeEval"]) -> dict[str, float]:
        scores: dict[str, float] = {e.result.node: e.parts[0] for e in feasible}
        top = max(scores.values())
        tied = [node for node, score in scores.items() if score == top]
        if len(tied) > 1:
            scores[self.break_tie(tied)] += 0.5
        return scores

    def break_tie(self, tied: list[str]) -> str:
        """The artifact's selectHost: the smallest (prefixed) node name, i.e. the lowest rank."""
        return min(tied, key=self.context.node_rank.__getitem__)

    def choose_allocations(self, scheduler: "Scheduler", info: "PodInfo", chosen: "NodeEval") -> list[dict[str, Any]]:
        first_fit = list(chosen.result.allocations or [])
        claims = claims_to_allocate(scheduler, info, chosen)
        if not claims:
            return first_fit
        node = chosen.result.node
        task = self.context.task(info)
        res = self.context.node_res(node)
        wanted = self.gpus(res, task)
        devices = self.context.node_gpus[node][1]
        hidden = [device for index, device in enumerate(devices) if index not in wanted]
        if not hidden:
            return first_fit
        steered = allocate_hiding(scheduler, node, claims, hidden)
        return steered if steered is not None else first_fit


class RandomPolicy(PaperPolicy):
    """RandomScore: one feasible node at random (PreScore picks it); a share goes to a random GPU it fits."""

    name = "random"

    def node_score(self, res: NodeRes, task: Task, node: str) -> tuple[int, tuple[int, ...]]:
        return 0, ()

    def break_tie(self, tied: list[str]) -> str:
        return tied[self.pick(len(tied))]

    def pick(self, count: int) -> int:
        """RandomScore's node: an index into the `count` feasible nodes in the scheduler's order."""
        return self.context.rng.randrange(count)

    def gpus(self, res: NodeRes, task: Task) -> tuple[int, ...]:
        if not task.shares_gpu:
            return first_free_gpus(res, task.num_gpu)
        fitting = [i for i, left in enumerate(res.gpu_left) if left >= task.gpu_milli]
        return (fitting[self.context.rng.randrange(len(fitting))],) if fitting else ()


class DotProdPolicy(PaperPolicy):
    """DotProductScore (merged GPU dimension, normalised by the largest node): prefer the node whose free
    (cpu, gpu) vector is least aligned with the task's."""

    name = "dotprod"

    def node_score(self, res: NodeRes, task: Task, node: str) -> tuple[int, tuple[int, ...]]:
        if res.cpu_left < task.cpu_milli:
            return 0, ()
        dot = (res.cpu_left / MAX_SPEC_CPU) * (task.cpu_milli / MAX_SPEC_CPU) + \
            (res.gpu_left_total / MAX_SPEC_GPU) * (task.total_gpu_milli / MAX_SPEC_GPU)
        return int(MAX_NODE_SCORE * (1 - dot / 2)), ()


class GpuClusteringPolicy(PaperPolicy):
    """GpuClusteringScore: put tasks of one kind (share, 1-, 2-, 4-, 8-GPU) together, fuller nodes first."""

    name = "gpu-clustering"

    def node_score(self, res: NodeRes, task: Task, node: str) -> tuple[int, tuple[int, ...]]:
        tag = affinity_tag(task)
        if tag == NO_GPU:
            return 0, ()
        tags = {affinity_tag(self.context.tasks[key]) for key in self.context.pods_on(node) if key in self.context.tasks}
        tags.discard(NO_GPU)
        fill = (MAX_NODE_SCORE // 4) * (MAX_SPEC_GPU - res.gpu_left_total) // MAX_SPEC_GPU
        if tag in tags:
            return fill + (MAX_NODE_SCORE * 3 // 4 if len(tags) == 1 else MAX_NODE_SCORE * 2 // 4), ()
        return fill + (MAX_NODE_SCORE // 4 if not tags else 0), ()


class GpuPackingPolicy(PaperPolicy):
    """GpuPackingScore: prefer partly used GPUs, then partly used nodes, then idle nodes."""

    name = "gpu-packing"

    def node_score(self, res: NodeRes, task: Task, node: str) -> tuple[int, tuple[int, ...]]:
        if not task.num_gpu:
            return 0, ()
        free = res.free_gpus
        if free == len(res.gpu_left):
            return max(MAX_NODE_SCORE // 3 - free, free), ()
        order = sorted(range(len(res.gpu_left)), key=lambda i: res.gpu_left[i])  # stable: fullest first
        wanted, free_used, used = task.num_gpu, 0, []
        for index in order:
            if not wanted:
                break
            left = res.gpu_left[index]
            if task.gpu_milli <= left:
                wanted -= 1
                used.append(index)
                if left == MILLI:
                    free_used += 1
        if wanted:
            return 0, ()
        if free_used:
            return max(MAX_NODE_SCORE // 2 - free_used, MAX_NODE_SCORE // 3), ()
        ratio = sum(res.gpu_left[i] * 100 // MILLI for i in used)
        return max(MAX_NODE_SCORE - ratio // 10, MAX_NODE_SCORE // 2), ()


class BestFitPolicy(PaperPolicy):
    """BestFitScore: the node left with the least free (cpu, gpu), each normalised by the largest node."""

    name = "bestfit"

    def node_score(self, res: NodeRes, task: Task, node: str) -> tuple[int, tuple[int, ...]]:
        free_cpu = res.cpu_left - task.cpu_milli
        free_gpu = res.gpu_left_total - task.total_gpu_milli
        if free_cpu < 0 or free_gpu < 0:
            return 0, ()
        waste = free_cpu / MAX_SPEC_CPU * 0.5 + free_gpu / MAX_SPEC_GPU * 0.5
        return int((1.0 - waste) * MAX_NODE_SCORE), ()


class FgdPolicy(PaperPolicy):
    """FGDScore: the node (and GPU) whose fragmentation grows least for the typical tasks.

    `online` (the `-online` variants): the typical tasks are those of the tasks arrived so far
    (`SimContext.popularity`), not the whole trace's. Each new estimate (a popularity version) gets a new measure,
    so memos never mix estimates, and the node parts the scheduler cached under an older version are recomputed
    before they are compared (`combine`): the last element of an online policy's parts is its version."""

    name = "fgd"
    online = False

    def __init__(self, context: SimContext):
        super().__init__(context)
        self._version = -1
        self._measure = context.fragmentation

    def measure(self) -> Fragmentation:
        if self.online:
            self._follow_popularity()
        return self._measure

    def _follow_popularity(self) -> None:
        popularity = self.context.popularity
        if popularity.version != self._version:
            self._version = popularity.version
            self.use_typical(popularity.typical)

    def use_typical(self, typical: list[TypicalTask]) -> None:
        """Score with these typical tasks from now on (a fresh measure: nothing memoised under others)."""
        self._measure = Fragmentation(typical)

    def node_parts(self, scheduler: "Scheduler", info: "PodInfo", evaluation: "NodeEval") -> tuple[object, ...]:
        if not self.online:
            return self.scored_parts(scheduler, info, evaluation)
        self._follow_popularity()
        return self.scored_parts(scheduler, info, evaluation) + (self._version,)

    def scored_parts(self, scheduler: "Scheduler", info: "PodInfo", evaluation: "NodeEval") -> tuple[object, ...]:
        return super().node_parts(scheduler, info, evaluation)

    def combine(self, scheduler: "Scheduler", info: "PodInfo", feasible: list["NodeEval"]) -> dict[str, float]:
        if self.online:
            self._follow_popularity()
            for evaluation in feasible:
                if evaluation.parts[-1] != self._version:  # cached under an older estimate
                    evaluation.parts = self.node_parts(scheduler, info, evaluation)
        return self.compare(scheduler, info, feasible)

    def compare(self, scheduler: "Scheduler", info: "PodInfo", feasible: list["NodeEval"]) -> dict[str, float]:
        return super().combine(scheduler, info, feasible)

    def node_score(self, res: NodeRes, task: Task, node: str) -> tuple[int, tuple[int, ...]]:
        return fgd_choice(self.measure(), res, task.cpu_milli, task.gpu_milli, task.num_gpu)

    def gpus(self, res: NodeRes, task: Task) -> tuple[int, ...]:
        return fgd_choice(self.measure(), res, task.cpu_milli, task.gpu_milli, task.num_gpu)[1]


class FgdReservePolicy(FgdPolicy):
    """`fgd-reserve`: FGD's score and GPU choice first; FGD's equals are ranked by what they keep in reserve for
    the tasks that need scarce resources (a GPU model, a whole node), in order: for a GPU task free to run on any model, the model that tasks pinned to GPU models (`gpu_spec`) need
    least (`pinned_demand_per_gpu`: it leaves the scarce models to the tasks that can run nowhere else; without
    it, CPU-poor P100/V100 nodes, whose GPUs look stranded, drew unpinned tasks and openb gpuspec25 lost 62 GPUs);
    the node whose hosts of whole-node shapes the placement takes least (`reserve.HostingReserve`: without it the
    CPU rule spread small tasks over idle nodes and onto the only hosts of the largest tasks, and allocated less
    than FGD below saturation); the node whose CPU-aware fragmentation (`Fragmentation(cpu_aware=True)`: GPUs
    the node's free CPU cannot serve count as fragmented) grows least; then FGD's node order.

    FGD's score is an integer (int(sigmoid(ΔF/1000)·100): one point is about 40 milli of fragmentation, and
    most nodes share a few states), so most placements are ties that FGD gives to the first node in its order.
    FGD's measure counts a GPU as usable by a typical task whenever the task fits once, even when the free CPU
    serves one copy: 8 free GPUs next to 4 free cores are "unfragmented" for a 4-core, 1-GPU task. Among the
    nodes FGD finds equal, the tie rule takes the one where the free CPU strands fewest GPUs. The remaining ties
    keep FGD's order, which packs: idle nodes stay idle for the multi-GPU tasks no typical task represents.
    Node state is read as for FGD (what the cluster and the allocator hold). Not the scheduler's `fragmentation`
    (gpudra.scheduler.fragmentation: FGD adapted to DRA, one allocator search per workload class and node), which
    scores clusters given as manifests; this policy was called `fragmentation` in the simulator until both had
    their own names."""

    name = "fgd-reserve"

    def __init__(self, context: SimContext):
        super().__init__(context)
        self._idle_nodes = [idle(context.node_res(node)) for node in sorted(context.node_gpus)]
        self.use_typical(context.fragmentation.typical)

    def use_typical(self, typical: list[TypicalTask]) -> None:
        super().use_typical(typical)
        self._cpu_aware = Fragmentation(typical, cpu_aware=True)
        self._pinned_demand = pinned_demand_per_gpu(typical, self.context.model_gpus)
        self._reserve = HostingReserve(self.shape_counts(), self._idle_nodes)
        self._tie_keys: dict[tuple[NodeRes, ResourceKey], tuple[float, float, float]] = {}  # -> tie key

    def shape_counts(self) -> "Counter[ResourceKey]":
        """How many tasks of each shape the workload holds (the online variant: the tasks arrived up to the
        estimate's last refresh, as its typical tasks)."""
        if self.online:
            return self.context.popularity.counted
        return Counter(task.resource_key for task in self.context.tasks.values())

    def cpu_aware(self) -> Fragmentation:
        return self._cpu_aware

    def scored_parts(self, scheduler: "Scheduler", info: "PodInfo", evaluation: "NodeEval") -> NodeKey:
        """`best_key`, computed with the node's verdict (cached with it until the node changes), so `combine`
        only compares."""
        node = evaluation.result.node
        return self.best_key(self.context.node_res(node), self.context.task(info), node)

    def best_key(self, res: NodeRes, task: Task, node: str) -> NodeKey:
        """FGD's score, then `tie_key`, then the node order."""
        score, _gpus = self.node_score(res, task, node)
        return score, self.tie_key(res, task), -self.context.node_rank[node]

    def tie_key(self, res: NodeRes, task: Task) -> tuple[float, float, float]:
        """Among nodes of equal FGD score, larger is better: minus the pinned tasks' demand for the node's model
        (unpinned GPU tasks only), minus the whole-node hosting the placement takes, then minus the CPU-aware
        fragmentation's growth, both when the task takes FGD's GPUs. Memoised: many tied nodes are in the same
        state."""
        key = (res, task.resource_key)
        memo = self._tie_keys
        found = memo.get(key)
        if found is None:
            if len(memo) > 1_000_000:
                memo.clear()
            gpus = self.gpus(res, task)
            growth = fragmentation_growth(self._cpu_aware, res, task.cpu_milli, task.gpu_milli, gpus)
            lost = self._reserve.lost(res, task.cpu_milli, task.gpu_milli, gpus)
            found = memo[key] = (-self.pinned_demand(res.model, task), -lost, -growth)
        return found

    def pinned_demand(self, model: str, task: Task) -> float:
        """For a GPU task free to run on any model: what pinned typical tasks need of one GPU of `model`, to a
        thousandth of a milli (models equal within that tie). 0 for pinned or CPU-only tasks."""
        if task.gpu_spec or not task.num_gpu:
            return 0.0
        return round(self._pinned_demand.get(model, 0.0), 3)

    def compare(self, scheduler: "Scheduler", info: "PodInfo", feasible: list["NodeEval"]) -> dict[str, float]:
        """FGD's score, then `tie_key`, then the node order: the best node alone scores 1."""
        keys = [e.parts[:3] for e in feasible]  # an online policy's parts end with its estimate's version
        scores = dict.fromkeys([e.result.node for e in feasible], 0.0)
        scores[feasible[keys.index(max(keys))].result.node] = 1.0
        return scores


class FgdOnlinePolicy(FgdPolicy):
    """FGD with the typical tasks estimated from the tasks arrived so far (`popularity.OnlinePopularity`)."""

    name = "fgd-online"
    online = True


class FgdReserveOnlinePolicy(FgdReservePolicy):
    """`fgd-reserve` with the typical tasks (both measures and the pinned-model demand) estimated from the
    tasks arrived so far (`popularity.OnlinePopularity`)."""

    name = "fgd-reserve-online"
    online = True


_CLASSES = {cls.name: cls for cls in (RandomPolicy, DotProdPolicy, GpuClusteringPolicy, GpuPackingPolicy,
                                       BestFitPolicy, FgdPolicy, FgdReservePolicy, FgdOnlinePolicy,
                                       FgdReserveOnlinePolicy)}
SIM_POLICIES = tuple(_CLASSES)  # the paper's six, gpudra's fgd-reserve, and both with online popularity
ONLINE_POLICIES = (FgdOnlinePolicy.name, FgdReserveOnlinePolicy.name)


def paper_policy(name: str, context: SimContext) -> PaperPolicy:
    return _CLASSES[name](context)


def paper_policy_class(name: str) -> type[PaperPolicy]:
    return _CLASSES[name]
