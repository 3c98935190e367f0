"""Fragmentation as the FGD paper measures it (Weng et al., USENIX ATC'23; artifact
hkust-adsl/kubernetes-scheduler-simulator, pkg/utils/frag.go), on the paper's node model `NodeRes`.

Typical tasks M: the trace's task shapes (cpu, gpu milli, gpu count, allowed models), most popular first, taken
until they cover 95% of the tasks, weights renormalised (GetTypicalPods with the artifact's settings:
popularity 95, step 1, CPU-only tasks included).

Fragmentation of a node for task m (NodeGpuShareFragAmount): when m fits (enough CPU and enough GPUs with room
for its share), the free milli of the GPUs too small for m; otherwise every free GPU milli of the node (CPU-only
tasks can never use a GPU, so for them all free GPU milli is fragmented). F_n = Σ_m p_m·F_n(m).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from .trace import MILLI, Task

POPULARITY_THRESHOLD = 95  # percent of tasks the typical shapes must cover
MAX_NODE_SCORE = 100

ResourceKey = tuple[int, int, int, tuple[str, ...]]  # cpu milli, gpu milli, gpu count, models


@dataclass(frozen=True)
class NodeRes:
    """What the paper's policies see of a node: free CPU, the free milli of each GPU (by index), the model."""

    cpu_left: int
    cpu_capacity: int
    gpu_left: tuple[int, ...]
    model: str

    @property
    def gpu_left_total(self) -> int:
        return sum(self.gpu_left)

    @property
    def free_gpus(self) -> int:
        return sum(1 for left in self.gpu_left if left >= MILLI)


def accessible(model: str, wanted: tuple[str, ...]) -> bool:
    """IsNodeAccessibleToPodByType: no constraint fits any node; a constraint needs a GPU node of one model."""
    if not wanted:
        return True
    return bool(model) and model in wanted


def fits_gpus(gpu_left: Iterable[int], milli: int, count: int) -> bool:
    """CanNodeHostPodOnGpuMemory: `count` GPUs with at least `milli` free each."""
    needed = count
    for left in gpu_left:
        if left >= milli:
            needed -= 1
            if needed <= 0:
                return True
    return False


@dataclass(frozen=True)
class TypicalTask:
    cpu: int
    milli: int
    count: int
    models: tuple[str, ...]
    weight: float


def typical_tasks(tasks: Iterable[Task], threshold: int = POPULARITY_THRESHOLD) -> list[TypicalTask]:
    return typical_of_counts(Counter(t.resource_key for t in tasks), threshold)


def typical_of_counts(counts: Counter[ResourceKey], threshold: int = POPULARITY_THRESHOLD) -> list[TypicalTask]:
    """The typical tasks of a task mix given as shape -> how many tasks of that shape (`typical_tasks` counts a
    task list; `popularity.OnlinePopularity` counts the tasks arrived so far)."""
    total = sum(counts.values())
    if not total:
        return []
    # decreasing count; equal counts: the "larger" shape first (Go's sort.Reverse of (count, cpu, milli, n, type))
    ordered = sorted(counts.items(), key=lambda item: (item[1], item[0][0], item[0][1], item[0][2],
                                                       "|".join(item[0][3])), reverse=True)
    expected = threshold * total / 100
    chosen: list[tuple[ResourceKey, int]] = []
    covered = 0
    for key, count in ordered:
        if covered >= expected:
            break
        chosen.append((key, count))
        covered += count
    # the artifact's two divisions (share of all tasks, then of the chosen ones): the same floats as its weights
    if len(chosen) == len(ordered):
        return [TypicalTask(k[0], k[1], k[2], k[3], count / total) for k, count in chosen]
    return [TypicalTask(k[0], k[1], k[2], k[3], (count / total) / (covered / total)) for k, count in chosen]


class Fragmentation:
    """F_n for node states, memoised: nodes with equal (model, free cpu, free milli multiset) are equal.

    `cpu_aware` (gpudra's `fgd-reserve` policy, not the paper): a typical task that fits makes usable only
    the GPUs the node's free CPU can serve copies of it on: with c cores free and a task of k cores, at most
    c // k copies, so at most that many of the GPUs it fits (those with the most free milli, one copy each;
    whole-GPU tasks: that many groups of its GPU count). The paper counts every GPU the task fits as usable,
    even when the CPU left serves one copy: 8 free GPUs next to 4 free cores are "not fragmented" for a
    4-core, 1-GPU task."""

    def __init__(self, typical: list[TypicalTask], cpu_aware: bool = False):
        self.typical = typical
        self.cpu_aware = cpu_aware
        # (model, CPU class, free milli of each GPU, sorted) -> fragmentation amount
        self._memo: dict[tuple[str, int, tuple[int, ...]], float] = {}
        # fgd_choice's memo: (model, free milli per GPU, CPU class before, after, milli per GPU, GPUs) -> choice
        self.choices: dict[tuple[str, tuple[int, ...], int, int, int, int], tuple[int, tuple[int, ...]]] = {}
        self._by_model: dict[str, list[TypicalTask]] = {}
        self._cpu_steps: dict[str, list[int]] = {}

    def _for_model(self, model: str) -> list[TypicalTask]:
        found = self._by_model.get(model)
        if found is None:
            found = self._by_model[model] = [t for t in self.typical if accessible(model, t.models)] if model else []
            self._cpu_steps[model] = sorted({t.cpu for t in found})
        return found

    def cpu_class(self, model: str, cpu_left: int) -> int:
        """Free CPU as the memo keys need it. The paper's F_n reads free CPU only through `task.cpu <= cpu_left`,
        so the number of the model's typical tasks' CPU requests that fit in `cpu_left` is enough: node states
        that differ only within one class have equal F_n. A measure that reads more of the free CPU (how many
        copies of a task it serves: a `cpu_aware` variant) keys on the free CPU itself."""
        if self.cpu_aware:
            return cpu_left
        self._for_model(model)
        return bisect_right(self._cpu_steps[model], cpu_left)

    def amount(self, cpu_left: int, gpu_left: tuple[int, ...], model: str) -> float:
        """Σ_m p_m·F_n(m) in GPU milli (FragAmountSumExceptQ3)."""
        if not gpu_left:
            return 0.0
        ordered = tuple(sorted(gpu_left))
        key = (model, self.cpu_class(model, cpu_left), ordered)
        value = self._memo.get(key)
        if value is not None:
            return value
        prefix = [0]  # prefix[i]: the free milli of the i GPUs with the least free milli
        for left in ordered:
            prefix.append(prefix[-1] + left)
        total_left, gpus = prefix[-1], len(ordered)
        value = 0.0
        if total_left and not self.cpu_aware:
            value = self._artifact_sum(cpu_left, ordered, prefix, model)
        elif total_left:
            satisfied_weight = 0.0
            for task in self._for_model(model):
                if not task.milli or task.cpu > cpu_left:
                    continue
                too_small = bisect_left(ordered, task.milli)  # GPUs with less free milli than the task's share
                if gpus - too_small < task.count:
                    continue
                # Q3 (fits): only the GPUs too small for the task are fragmented
                if self.cpu_aware:  # and those beyond the copies the free CPU serves (the fullest GPUs first)
                    copies = cpu_left // task.cpu if task.cpu else gpus
                    served = min(copies * task.count, (gpus - too_small) // task.count * task.count)
                    value += task.weight * prefix[gpus - served]
                else:
                    value += task.weight * prefix[too_small]
                satisfied_weight += task.weight
            # every other typical task (lacks cpu or gpu, inaccessible, or CPU-only) sees all free milli
            value += (1.0 - satisfied_weight) * total_left
        if len(self._memo) > 1_000_000:
            self._memo.clear()
        self._memo[key] = value
        return value

    def _artifact_sum(self, cpu_left: int, ordered: tuple[int, ...], prefix: list[int], model: str) -> float:
        """The paper's F_n summed as the artifact sums it (NodeGpuShareFragAmount: one accumulator per kind of
        fragment, every typical task in order, then FragAmountSumExceptQ3 adds the kinds in index order). Equal in
        exact arithmetic to Σ_m p_m·F_n(m), but a task moving between two kinds with the same amount (lack GPU ->
        lack both when a task takes the CPU) can change the float by an ulp, and int(sigmoid(ΔF/1000)·100) is then
        49, not 50: the artifact's placements follow that (tests/data/fgd_artifact/synthetic-float.json)."""
        lack_both, lack_gpu, lack_cpu, cpu_task_fits, cpu_task_short, no_access = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
        total_left, gpus = float(prefix[-1]), len(ordered)
        for task in self.typical:
            if not task.milli:
                if task.cpu <= cpu_left:
                    cpu_task_fits += task.weight * total_left
                else:
                    cpu_task_short += task.weight * total_left
            elif not accessible(model, task.models):
                no_access += task.weight * total_left
            elif gpus - bisect_left(ordered, task.milli) >= task.count:  # fits: the GPUs too small are fragments
                if task.cpu <= cpu_left:
                    lack_gpu += task.weight * float(prefix[bisect_left(ordered, task.milli)])
                else:
                    lack_cpu += task.weight * total_left
            elif task.cpu <= cpu_left:
                lack_gpu += task.weight * total_left
            else:
                lack_both += task.weight * total_left
        value = 0.0
        for kind in (lack_both, lack_gpu, lack_cpu, cpu_task_fits, cpu_task_short, no_access):
            value += kind
        return value

    def node(self, res: NodeRes) -> float:
        return self.amount(res.cpu_left, res.gpu_left, res.model)


def pinned_demand_per_gpu(typical: list[TypicalTask], model_gpus: dict[str, int]) -> dict[str, float]:
    """GPU model -> how much the typical tasks pinned to GPU models (`gpu_spec`) ask of each of its GPUs: every
    pinned typical task's GPU milli, weighted by its popularity, spread evenly over the GPUs of the models it
    accepts. 0 for a model no typical task is pinned to; a model that pinned tasks depend on and that has few
    GPUs scores high (openb gpuspec25: T4 about 0.11, P100 0.06, V100 0.04, G3 0.01, G2 0.007)."""
    demand = dict.fromkeys(model_gpus, 0.0)
    for task in typical:
        if not task.models or not task.milli:
            continue
        accepted = [model for model in model_gpus if accessible(model, task.models)]
        gpus = sum(model_gpus[model] for model in accepted)
        for model in accepted if gpus else ():
            demand[model] += task.weight * task.milli * task.count / gpus
    return demand


def sigmoid(x: float) -> float:
    if x < -700:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


def fgd_choice(frag: Fragmentation, res: NodeRes, cpu: int, milli: int, count: int) -> tuple[int, tuple[int, ...]]:
    """FGD's node score and GPU choice (calculateGpuShareFragExtendScore): the score is
    int(sigmoid((F_before − F_after)/1000)·100); a share goes to the GPU with the best score (the first on ties),
    whole GPUs to the first free ones. Memoised: many nodes are in the same state (idle ones above all); free CPU
    counts only through its class before and after the task (`Fragmentation.cpu_class`)."""
    key = (res.model, res.gpu_left, frag.cpu_class(res.model, res.cpu_left),
           frag.cpu_class(res.model, res.cpu_left - cpu), milli, count)
    found = frag.choices.get(key)
    if found is None:
        if len(frag.choices) > 1_000_000:
            frag.choices.clear()
        found = frag.choices[key] = _fgd_choice(frag, res, cpu, milli, count)
    return found


def _fgd_choice(frag: Fragmentation, res: NodeRes, cpu: int, milli: int, count: int) -> tuple[int, tuple[int, ...]]:
    before = frag.node(res)
    if count == 1 and milli < MILLI:
        best_score, best_gpu = 0, -1
        for index, left in enumerate(res.gpu_left):
            if left >= milli:
                after_left = res.gpu_left[:index] + (left - milli,) + res.gpu_left[index + 1:]
                after = frag.amount(res.cpu_left - cpu, after_left, res.model)
                score = int(sigmoid((before - after) / 1000) * MAX_NODE_SCORE)
                if best_gpu < 0 or score > best_score:
                    best_score, best_gpu = score, index
        return best_score, ((best_gpu,) if best_gpu >= 0 else ())
    gpus = first_free_gpus(res, count)
    after_left = tuple(0 if i in gpus else left for i, left in enumerate(res.gpu_left))
    after = frag.amount(res.cpu_left - cpu, after_left, res.model)
    return int(sigmoid((before - after) / 1000) * MAX_NODE_SCORE), gpus


def fragmentation_growth(frag: Fragmentation, res: NodeRes, cpu: int, milli: int, gpus: tuple[int, ...]) -> float:
    """How much F_n grows (GPU milli) when a task of `cpu` and `milli` per GPU takes the GPUs `gpus` of the node."""
    after_left = tuple(left - milli if i in gpus else left for i, left in enumerate(res.gpu_left))
    return frag.amount(res.cpu_left - cpu, after_left, res.model) - frag.node(res)


def first_free_gpus(res: NodeRes, count: int) -> tuple[int, ...]:
    """AllocateExclusiveGpuId: the first `count` fully free GPUs by index."""
    chosen: list[int] = []
    for index, left in enumerate(res.gpu_left):
        if len(chosen) >= count:
            break
        if left >= MILLI:
            chosen.append(index)
    return tuple(chosen)
