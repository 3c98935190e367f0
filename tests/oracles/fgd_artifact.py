"""An independent re-implementation of the FGD artifact's placement decisions, written from its Go source
(hkust-adsl/kubernetes-scheduler-simulator; paths below are in that repository). It imports nothing from gpudra.

It replays pods in submission order on nodes, with one score plugin enabled (weight 1000) as the artifact's
experiments run it, and returns each pod's node and GPU indices. `tests/simulate/test_simulate_artifact.py` checks it
against the placements the artifact's own binary recorded (tests/data/fgd_artifact/*.json), so it can stand in
for the binary where none is built (sim_direct_model.py: full-scale tables in seconds).

    nodes: [{"sn", "cpu_milli", "memory_mib", "gpu", "model"}]      pods: [{"name", "cpu_milli", "memory_mib",
    "num_gpu", "gpu_milli", "gpu_spec"}]  (openb CSV columns)       rank: node -> its "%04d-" prefix
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

MILLI = 1000  # pkg/type/open-gpu-share/utils/const.go
MAX_SPEC_CPU = 128000
MAX_SPEC_GPU = 8000
MAX_NODE_SCORE = 100  # k8s framework.MaxNodeScore
MIN_NODE_SCORE = 0
MAX_PODS = 1001  # the artifact's node YAML (data/node_yaml): allocatable pods


@dataclass(frozen=True, order=True)
class PodRes:
    """pkg/type/resource.go PodResource (utils.GetPodResource): cpu, milli per GPU, GPU count, GPU type."""

    cpu: int
    milli: int
    count: int
    gpu_type: str


def pod_res(pod: dict[str, Any]) -> PodRes:
    """data/pod_csv_to_yaml.py writes the annotations only for GPU pods (milli capped at 1000); GetPodResource
    reads them back; the CPU request is explicit (GetNonzeroRequests keeps an explicit 0)."""
    count = int(pod["num_gpu"])
    if not count:
        return PodRes(int(pod["cpu_milli"]), 0, 0, "")
    milli = int(pod["gpu_milli"])
    milli = milli if 0 < milli <= MILLI else MILLI if milli > MILLI else 0
    spec = "|".join(x for x in str(pod.get("gpu_spec") or "").split("|") if x)
    return PodRes(int(pod["cpu_milli"]), milli, count, spec)


@dataclass
class Node:
    name: str
    rank: int
    cpu_capacity: int
    cpu_left: int
    memory_left: int
    gpu_left: list[int]
    model: str
    pods: int = 0
    affinity: dict[str, int] = field(default_factory=dict)  # GPU affinity tag -> pods (GetNodeResourceViaNodeInfo)


# ----- typical pods: pkg/utils/frag.go GetTypicalPods, SortTargetPodInDecreasingCount ---------------------------

def typical_pods(pods: Iterable[dict[str, Any]], threshold: int = 95, step: int = 1) -> list[tuple[PodRes, float]]:
    """Pod shapes by decreasing count (equal counts: sort.Reverse of TargetPodList.Less, i.e. the larger
    (cpu, milli, count, type) first), taken `step` at a time until their count reaches `threshold`% of all pods
    (CPU pods included: IsInvolvedCpuPods), then each one's share renormalised over the chosen ones, with the
    artifact's two divisions."""
    counts: dict[PodRes, float] = {}
    total = 0.0
    for pod in pods:
        res = pod_res(pod)
        counts[res] = counts.get(res, 0.0) + 1
        total += 1
    ordered = [[res, count] for res, count in sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]
    expected = threshold * total / 100.0
    i = chosen = 0
    cumulative = 0.0
    while cumulative < expected:
        chosen += step
        while i < chosen and i < len(ordered):
            cumulative += ordered[i][1]
            ordered[i][1] = ordered[i][1] / total
            i += 1
        if i >= len(ordered):
            break
    if i >= len(ordered):
        return [(res, share) for res, share in ordered]
    return [(res, share / (cumulative / total)) for res, share in ordered[:i]]


# ----- fragmentation: pkg/utils/frag.go NodeGpuShareFragAmount, GetNodePodFrag --------------------------------

Q1_LACK_BOTH, Q2_LACK_GPU, Q3_SATISFIED, Q4_LACK_CPU, XL_SATISFIED, XR_LACK_CPU, NO_ACCESS = range(7)


def accessible(node_model: str, pod_type: str) -> bool:
    """pkg/utils/utils.go IsNodeAccessibleToPodByType."""
    if not pod_type:
        return True
    if not node_model:
        return False
    return node_model in pod_type.split("|")


def can_host_on_gpus(gpu_left: list[int], res: PodRes) -> bool:
    """frag.go CanNodeHostPodOnGpuMemory."""
    wanted = res.count
    for left in gpu_left:
        if left >= res.milli:
            wanted -= 1
            if wanted <= 0:
                return True
    return False


def frag_type(cpu_left: int, gpu_left: list[int], model: str, res: PodRes) -> int:
    if res.milli == 0:
        return XL_SATISFIED if cpu_left >= res.cpu else XR_LACK_CPU
    if not accessible(model, res.gpu_type):
        return NO_ACCESS
    if can_host_on_gpus(gpu_left, res):
        return Q3_SATISFIED if cpu_left >= res.cpu else Q4_LACK_CPU
    return Q2_LACK_GPU if cpu_left >= res.cpu else Q1_LACK_BOTH


def frag_amount(cpu_left: int, gpu_left: list[int], model: str, typical: list[tuple[PodRes, float]]) -> float:
    """NodeGpuShareFragAmountScore: FragAmountSumExceptQ3 of the per-kind amounts, summed as Go sums them (one
    accumulator per kind, then the kinds in index order)."""
    data = [0.0] * 7
    total = sum(gpu_left)
    for res, share in typical:
        kind = frag_type(cpu_left, gpu_left, model, res)
        if kind == Q3_SATISFIED:  # the GPUs too small for the pod are fragments (GetGpuFragMilliByNodeResAndPodRes)
            fragment = sum(left for left in gpu_left if left < res.milli)
            data[Q2_LACK_GPU] += share * float(fragment)
            data[Q3_SATISFIED] += share * float(total - fragment)
        else:
            data[kind] += share * float(total)
    out = 0.0
    for kind in range(7):
        if kind != Q3_SATISFIED:
            out += data[kind]
    return out


def sigmoid(x: float) -> float:
    """fgd_score.go's sigmoid: 1 / (1 + e^-x)."""
    if -x > 709:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


def exclusive_gpus(gpu_left: list[int], res: PodRes) -> list[int]:
    """pkg/type/resource.go AllocateExclusiveGpuId: fully free GPUs in index order, until count × milli is met."""
    wanted = res.milli * res.count
    chosen = []
    for index, left in enumerate(gpu_left):
        if wanted <= 0:
            break
        if left == MILLI:
            chosen.append(index)
            wanted -= MILLI
    return chosen


def fgd(node: Node, res: PodRes, typical: list[tuple[PodRes, float]]) -> tuple[int, list[int]]:
    """pkg/simulator/plugin/fgd_score.go calculateGpuShareFragExtendScore: int64(sigmoid(ΔF/1000)·100); a share
    tries every GPU it fits and keeps the first with the highest score; other pods: the node minus the pod as
    NodeResource.Sub takes it (the least sufficient GPUs), GPUs by AllocateExclusiveGpuId."""
    before = frag_amount(node.cpu_left, node.gpu_left, node.model, typical)
    if res.count == 1 and res.milli < MILLI:
        score, gpu = 0, -1
        for index, left in enumerate(node.gpu_left):
            if left >= res.milli:
                after_left = list(node.gpu_left)
                after_left[index] -= res.milli
                after = frag_amount(node.cpu_left - res.cpu, after_left, node.model, typical)
                candidate = int(sigmoid((before - after) / 1000) * float(MAX_NODE_SCORE))
                if gpu < 0 or candidate > score:
                    score, gpu = candidate, index
        return score, ([gpu] if gpu >= 0 else [])
    after_left = list(node.gpu_left)
    if res.count:  # Sub: ascending free milli (stable), take from the least sufficient
        wanted = res.count
        for index in sorted(range(len(after_left)), key=lambda i: after_left[i]):
            if res.milli <= after_left[index]:
                after_left[index] -= res.milli
                wanted -= 1
                if wanted <= 0:
                    break
    after = frag_amount(node.cpu_left - res.cpu, after_left, node.model, typical)
    return int(sigmoid((before - after) / 1000) * float(MAX_NODE_SCORE)), exclusive_gpus(node.gpu_left, res)


# ----- the other paper policies: pkg/simulator/plugin/*_score.go ------------------------------------------------

def best_fit(node: Node, res: PodRes) -> int:
    """best_fit_score.go getBestFitScore (its NormalizeScore is a monotone min-max map: same best nodes)."""
    free = [float(node.cpu_left), float(sum(node.gpu_left))]
    request = [float(res.cpu), float(res.milli * res.count)]
    score = 0.0
    for i, limit in enumerate((MAX_SPEC_CPU, MAX_SPEC_GPU)):
        score += (free[i] - request[i]) / limit * 0.5
    return int((1.0 - score) * MAX_NODE_SCORE)


def dot_product(node: Node, res: PodRes) -> int:
    """dot_product_score.go with dimExtMethod merge, normMethod max: 1 − (node·pod)/2 on vectors normalised by
    the largest node; a node short of CPU has no match group (MinNodeScore)."""
    if node.cpu_left < res.cpu:
        return MIN_NODE_SCORE
    node_vec = [node.cpu_left / MAX_SPEC_CPU, sum(node.gpu_left) / MAX_SPEC_GPU]
    pod_vec = [res.cpu / MAX_SPEC_CPU, res.milli * res.count / MAX_SPEC_GPU]
    dot = 0.0
    for a, b in zip(node_vec, pod_vec):
        dot += a * b
    score = 1 - dot / 2
    return int(float(MAX_NODE_SCORE) * score)


def affinity_tag(res: PodRes) -> str:
    """open-gpu-share/utils/pod.go GetGpuAffinityFromPodAnnotation."""
    if res.count == 0:
        return "no-gpu"
    if res.count == 1 and res.milli < MILLI:
        return "share"
    return f"{res.count}-gpu"


def gpu_clustering(node: Node, res: PodRes) -> int:
    """gpu_clustering_score.go: integer arithmetic, as Go's int64."""
    tag = affinity_tag(res)
    if tag == "no-gpu":
        return MIN_NODE_SCORE
    fill = MAX_NODE_SCORE // 4 * (MAX_SPEC_GPU - sum(node.gpu_left)) // MAX_SPEC_GPU
    if node.affinity.get(tag, 0) > 0:
        return fill + (MAX_NODE_SCORE * 3 // 4 if len(node.affinity) == 1 else MAX_NODE_SCORE * 2 // 4)
    return fill + (MAX_NODE_SCORE // 4 if not node.affinity else 0)


def gpu_packing(node: Node, res: PodRes) -> int:
    """gpu_packing_score.go getPackingScore."""
    if res.milli <= 0:
        return MIN_NODE_SCORE
    free = sum(1 for left in node.gpu_left if left == MILLI)
    if free == len(node.gpu_left):
        return max(MAX_NODE_SCORE // 3 - free, free)
    wanted, free_used, used = res.count, 0, []
    for index in sorted(range(len(node.gpu_left)), key=lambda i: node.gpu_left[i]):  # stable, fullest first
        if wanted == 0:
            break
        left = node.gpu_left[index]
        if res.milli <= left:
            wanted -= 1
            used.append(index)
            if left == MILLI:
                free_used += 1
    if wanted:
        return MIN_NODE_SCORE
    if free_used:
        return max(MAX_NODE_SCORE // 2 - free_used, MAX_NODE_SCORE // 3)
    ratio = sum(node.gpu_left[i] * 100 // MILLI for i in used)
    return max(MAX_NODE_SCORE - ratio // 10, MAX_NODE_SCORE // 2)


def best_fit_gpus(node: Node, res: PodRes) -> list[int]:
    """open_gpu_share.go allocateGpuIdBasedOnBestFit (gpuSelMethod "best"): a share on the GPU with the least
    free milli that fits it (the first on ties), whole GPUs by AllocateExclusiveGpuId."""
    if res.milli < MILLI:
        best = -1
        for index, left in enumerate(node.gpu_left):
            if left >= res.milli and (best < 0 or left < node.gpu_left[best]):
                best = index
        return [best] if best >= 0 else []
    return exclusive_gpus(node.gpu_left, res)


Scorer = Callable[[Node, PodRes, list], tuple[int, Optional[list[int]]]]
SCORERS: dict[str, Scorer] = {  # score, and the GPUs when the policy chooses them itself (FGD's gpuSelMethod)
    "fgd": lambda node, res, typical: fgd(node, res, typical),
    "bestfit": lambda node, res, typical: (best_fit(node, res), None),
    "dotprod": lambda node, res, typical: (dot_product(node, res), None),
    "gpu-clustering": lambda node, res, typical: (gpu_clustering(node, res), None),
    "gpu-packing": lambda node, res, typical: (gpu_packing(node, res), None),
}


# ----- filters and the scheduling cycle -------------------------------------------------------------------------

def gpu_filter(node: Node, res: PodRes) -> bool:
    """open_gpu_share.go Filter: GPU pods need a GPU node of an accepted model where GpuNodeInfo.AllocateGpuId
    finds devices (1 GPU: any with room; more: its two-pointer walk over the devices)."""
    if res.milli <= 0:
        return True
    if not node.gpu_left or not accessible(node.model, res.gpu_type):
        return False
    idle = list(node.gpu_left)
    if res.count == 1:
        return any(left >= res.milli for left in idle)
    device = found = 0
    while device < len(idle) and found < res.count:
        if idle[device] >= res.milli:
            idle[device] -= res.milli
            found += 1
        else:
            device += 1
    return found == res.count


def feasible(node: Node, pod: dict[str, Any], res: PodRes) -> bool:
    """NodeResourcesFit (cpu, memory, pod count) and Open-Gpu-Share's Filter."""
    return (node.pods + 1 <= MAX_PODS and int(pod["cpu_milli"]) <= node.cpu_left
            and int(pod["memory_mib"]) <= node.memory_left and gpu_filter(node, res))


def state_key(node: Node) -> tuple:
    """What the filters and every score read of a node: nodes with equal keys get equal verdicts and scores."""
    return (node.cpu_left, node.memory_left, tuple(node.gpu_left), node.model, node.pods,
            tuple(sorted(node.affinity.items())))


def replay(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], rank: dict[str, int], policy: str,
           typical_from: Optional[list[dict[str, Any]]] = None) -> list[list[Any]]:
    """[pod name, node or None, GPU indices] per pod, in submission order. The chosen node: the highest score,
    ties to the smallest "%04d-<name>", i.e. the lowest rank (the artifact's kube-scheduler fork,
    vendor/k8s.io/kubernetes/pkg/scheduler/core/generic_scheduler.go selectHost). `typical_from`: the pods the
    typical shapes come from (the artifact: every pod of the trace, before tuning).

    Nodes in the same state (`state_key`) are scored once, by their lowest-ranked member, which is the one
    selectHost would take among them: the answer is the node-by-node one, in time for 1,213 nodes."""
    scorer = SCORERS[policy]
    typical = typical_pods(typical_from if typical_from is not None else pods)
    groups: dict[tuple, list[Node]] = {}  # state -> its nodes by rank
    for n in sorted(nodes, key=lambda n: rank[n["sn"]]):
        gpus = int(n["gpu"])
        node = Node(n["sn"], rank[n["sn"]], int(n["cpu_milli"]), int(n["cpu_milli"]), int(n["memory_mib"]),
                    [MILLI] * gpus, (n.get("model") or "") if gpus else "")
        groups.setdefault(state_key(node), []).append(node)
    memo: dict[tuple, tuple[bool, int, Optional[list[int]]]] = {}
    out: list[list[Any]] = []
    for pod in pods:
        res = pod_res(pod)
        request = (int(pod["cpu_milli"]), int(pod["memory_mib"]), res)
        best: Optional[tuple[int, int, tuple, Optional[list[int]]]] = None  # score, rank, state, GPUs
        for key, members in groups.items():
            first = members[0]
            found = memo.get((key, request))
            if found is None:
                fits = feasible(first, pod, res)
                score, gpus = scorer(first, res, typical) if fits else (MIN_NODE_SCORE, None)
                found = memo[(key, request)] = (fits, score, gpus)
            fits, score, gpus = found
            if fits and (best is None or score > best[0] or (score == best[0] and first.rank < best[1])):
                best = (score, first.rank, key, gpus)
        if len(memo) > 500_000:
            memo.clear()
        if best is None:
            out.append([pod["name"], None, []])
            continue
        _, _, key, gpus = best
        node = groups[key].pop(0)
        if not groups[key]:
            del groups[key]
        if res.milli <= 0:
            gpus = []  # Reserve skips pods without GPU milli
        elif gpus is None:
            gpus = best_fit_gpus(node, res)
        for index in gpus:
            node.gpu_left[index] -= res.milli
        node.cpu_left -= int(pod["cpu_milli"])
        node.memory_left -= int(pod["memory_mib"])
        node.pods += 1
        tag = affinity_tag(res)
        if tag != "no-gpu":
            node.affinity[tag] = node.affinity.get(tag, 0) + 1
        members = groups.setdefault(state_key(node), [])
        members.append(node)
        members.sort(key=lambda n: n.rank)
        out.append([pod["name"], node.name, list(gpus)])
    return out
