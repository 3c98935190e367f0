"""A direct model of `gpudra simulate`'s tune method on the paper's node model: no Kubernetes objects, no
scheduler, no allocator; each node is (free cpu, free memory, free milli per GPU, model). It applies the policies'
own rules (`gpudra.simulate.policies`: score, GPU choice, the artifact's tie order) with the artifact's filter
(cpu, memory, GPU model, GPUs with room), so `tests/test_simulate.py` can check that the scheduler path places
exactly the same pods, and so full-scale tables can be computed in seconds per experiment while the scheduler
path takes minutes. For tests and investigation only: `gpudra simulate` never takes this shortcut.

    python tests/sim_direct_model.py [--trace default | --pods FILE,...] [--policies all] [--seeds 10] [--seed 42]
        [--json]
"""

from __future__ import annotations

import argparse
import json
import random
from bisect import insort
import sys
import time
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpudra.simulate import BUNDLED_TRACES, bundled_trace  # noqa: E402
from gpudra.simulate.trace import BUNDLED_NODES, load_trace  # noqa: E402
from gpudra.simulate.engine import DEFAULT_TUNE, per_percent, tuned_workload  # noqa: E402
from gpudra.simulate.fgd import Fragmentation, NodeRes, accessible, fits_gpus, typical_tasks  # noqa: E402
from gpudra.simulate.policies import SIM_POLICIES, affinity_tag, node_ranks, paper_policy  # noqa: E402
from gpudra.simulate.trace import MILLI, Trace  # noqa: E402


def model_gpus(nodes) -> dict[str, int]:
    """GPU model -> GPUs of that model, as `SimContext.model_gpus` counts them."""
    counts: dict[str, int] = {}
    for node in nodes:
        if node.model and node.gpus:
            counts[node.model] = counts.get(node.model, 0) + node.gpus
    return counts


def direct_model(trace: Trace, policy: str, seed: int, tune: float = DEFAULT_TUNE,
                 until_percent: int | None = None) -> dict:
    """Returns scheduled pods, GPU milli used, pods per node and the allocation-ratio series (with
    `until_percent`, only up to that percent of arrived demand: later pods cannot change it)."""
    tuning = random.Random(seed)
    workload = tuned_workload(trace.tasks, trace.gpus * MILLI, tune, tuning)
    rank = node_ranks((n.name for n in trace.nodes), tuning)  # right after tuning, from the same stream
    nodes = sorted(trace.nodes, key=lambda n: n.name)
    usage = {n.name: SimpleNamespace(pods=[]) for n in nodes}
    tasks: dict[str, object] = {}
    context = SimpleNamespace(rng=random.Random(seed), fragmentation=Fragmentation(typical_tasks(trace.tasks)),
                              node_rank=rank, cluster=SimpleNamespace(usage=usage), tasks=tasks,
                              model_gpus=model_gpus(trace.nodes))
    scorer = paper_policy(policy, context)
    by_rank = sorted(nodes, key=lambda n: rank[n.name])  # first of the best in the tie order wins
    # Nodes in the same state (free cpu, memory, GPU milli, model; gpu-clustering: the kinds of tasks placed) get
    # the same verdict and score, and ties go to the lowest rank: one candidate per state, its lowest rank.
    groups: dict[tuple, list[int]] = {}
    for position, node in enumerate(by_rank):
        state = (NodeRes(node.cpu_milli, node.cpu_milli, (MILLI,) * node.gpus, node.model), node.memory_mib,
                 frozenset())
        groups.setdefault(state, []).append(position)
    memo: dict[tuple, object] = {}
    tie_key = getattr(scorer, "tie_key", None)
    capacity = trace.gpus * MILLI
    arrived = used = scheduled = 0
    placed = {n.name: 0 for n in nodes}
    points = []
    for pod_name, task in workload:
        arrived += task.total_gpu_milli
        best_score, best_position, best_group, feasible = None, -1, None, []
        for group, positions in groups.items():
            state, memory, tags = group
            if task.cpu_milli > state.cpu_left or task.memory_mib > memory:
                continue
            if task.num_gpu and not (accessible(state.model, task.gpu_spec)
                                     and fits_gpus(state.gpu_left, task.gpu_milli, task.num_gpu)):
                continue
            if policy == "random":
                feasible.extend(by_rank[p].name for p in positions)
                continue
            key = (state, task.resource_key, tags if policy == "gpu-clustering" else None)
            scored = memo.get(key)  # [score, tie key or None until asked]
            if scored is None:
                scored = memo[key] = [scorer.node_score(state, task, by_rank[positions[0]].name)[0], None]
            score = scored[0]
            if best_score is None or score > best_score:
                best_score, tied = score, [(positions[0], group, scored)]
            elif score == best_score:
                tied.append((positions[0], group, scored))
        if best_score is not None:
            best_position, best_group, _ = min(tied, key=lambda item: item[0])  # the first in the node order
            if len(tied) > 1 and tie_key is not None:  # the policy's own rule among the nodes tied at the top
                for _, group, scored in tied:
                    if scored[1] is None:
                        scored[1] = tie_key(group[0], task)
                best_position, best_group, _ = max(tied, key=lambda item: (item[2][1], -item[0]))
        if policy == "random" and feasible:
            feasible.sort()  # the scheduler lists feasible nodes by name
            best = feasible[context.rng.randrange(len(feasible))] if len(feasible) > 1 else feasible[0]
            best_position = next(i for i, n in enumerate(by_rank) if n.name == best)
            best_group = next(g for g, positions in groups.items() if best_position in positions)
        if best_group is not None:
            state, memory, tags = best_group
            positions = groups[best_group]
            positions.remove(best_position)
            if not positions:
                del groups[best_group]
            name = by_rank[best_position].name
            gpus = scorer.gpus(state, task)
            assert len(gpus) == task.num_gpu
            left = list(state.gpu_left)
            for index in gpus:
                left[index] -= task.gpu_milli
                assert left[index] >= 0
            key = f"sim/{pod_name}"
            tasks[key] = task
            usage[name].pods.append(key)
            if task.num_gpu and policy == "gpu-clustering":
                tags = tags | {affinity_tag(task)}
            after = (NodeRes(state.cpu_left - task.cpu_milli, state.cpu_capacity, tuple(left), state.model),
                     memory - task.memory_mib, tags)
            insort(groups.setdefault(after, []), best_position)
            used += task.total_gpu_milli
            scheduled += 1
            placed[name] += 1
        points.append((100 * arrived / capacity, 100 * used / capacity))
        if len(memo) > 2_000_000:
            memo.clear()
        if until_percent is not None and points[-1][0] > until_percent + 1.5:  # its bucket (±0.5) is complete
            break
    series = per_percent(points, until_percent if until_percent is not None else int(100 * arrived / capacity))
    return {"scheduled": scheduled, "used": used, "placed": placed, "series": series}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="default", help=f"comma-separated: {', '.join(BUNDLED_TRACES)}")
    parser.add_argument("--policies", default="all", help=f"comma-separated: {', '.join(SIM_POLICIES)} or all")
    parser.add_argument("--pods", help="comma-separated pod CSVs of the openb shape, on the bundled node list "
                        "(instead of --trace: e.g. the artifact's other openb_pod_list_*.csv)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="one JSON object per experiment")
    args = parser.parse_args()
    policies = SIM_POLICIES if args.policies == "all" else tuple(args.policies.split(","))
    nodes = str(resources.files("gpudra.simulate") / "data" / "openb" / BUNDLED_NODES)
    if args.pods:
        traces = [load_trace(nodes, path, Path(path).stem.removeprefix("openb_pod_list_"))
                  for path in args.pods.split(",")]
    else:
        traces = [bundled_trace(name) for name in args.trace.split(",")]
    for trace in traces:
        trace_name = trace.name
        for policy in policies:
            ratios = []
            for seed in range(args.seed, args.seed + args.seeds):
                started = time.process_time()
                result = direct_model(trace, policy, seed, until_percent=100)
                ratio = result["series"][100]
                ratios.append(ratio)
                line = {"trace": trace_name, "policy": policy, "seed": seed, "allocation_ratio": round(ratio, 4),
                        "unallocated_gpus": round(trace.gpus * (1 - ratio / 100), 2),
                        "cpu_seconds": round(time.process_time() - started, 1)}
                print(json.dumps(line) if args.json else
                      f"{trace_name:<12}{policy:<16}{seed:>5}{ratio:>9.2f}%{line['unallocated_gpus']:>9.1f}"
                      f"{line['cpu_seconds']:>8.1f}s", flush=True)
            mean = sum(ratios) / len(ratios)
            if not args.json:
                print(f"{trace_name:<12}{policy:<16} mean{mean:>9.2f}%{trace.gpus * (1 - mean / 100):>9.1f}"
                      f"  ({len(ratios)} seeds)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
