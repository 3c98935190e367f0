"""The FGD artifact's decisions at full scale, without gpudra's scheduler: the paper's tune experiments replayed
by tests/oracles/fgd_artifact.py, the independent re-implementation of hkust-adsl/kubernetes-scheduler-simulator
that reproduces every placement its binary recorded (tests/simulate/test_simulate_artifact.py). Its allocation ratios are
what the artifact would give on gpudra's tuned workloads, to set beside `gpudra simulate`'s (the two place the
same pods: tests/simulate/test_simulate.py compares them pod by pod on a tuned trace).

From gpudra it takes only the inputs: the bundled trace files, the tuned workload (which tasks arrive, in which
order: `tuned_workload`) and the tie order drawn after it (`node_ranks`), so both sides see the same
experiment. Every decision (filters, typical tasks, scores, ties, GPU choice) and the 100%-demand figure are the
oracle's. RandomScore is not covered (its picks come from Go's random stream), nor gpudra's own policies.

    python tests/support/sim_direct_model.py [--trace default | --pods FILE,...] [--policies fgd,...] [--seeds 10]
        [--seed 42] [--tune 1.3] [--json] [--compare]

`--compare` also runs the experiment through gpudra's scheduler and allocator (`gpudra simulate`'s path) and
counts the tasks placed on another node or other GPUs than the artifact's decisions.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: gpudra
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracles"))

import fgd_artifact  # noqa: E402

from gpudra.simulate import BUNDLED_TRACES, bundled_trace  # noqa: E402
from gpudra.simulate.engine import tuned_workload  # noqa: E402
from gpudra.simulate.policies import node_ranks  # noqa: E402
from gpudra.simulate.trace import BUNDLED_NODES, Task, Trace, load_trace  # noqa: E402

POLICIES = tuple(fgd_artifact.SCORERS)


def pod_row(name: str, task: Task) -> dict[str, Any]:
    return {"name": name, "cpu_milli": task.cpu_milli, "memory_mib": task.memory_mib, "num_gpu": task.num_gpu,
            "gpu_milli": task.gpu_milli, "gpu_spec": "|".join(task.gpu_spec)}


def allocation_at(points: list[tuple[float, float]], percent: int = 100) -> float | None:
    """The artifact's merge_alloc_discrete.py: the mean allocation ratio of the pods whose arrived demand rounds
    to `percent` (None if no pod does)."""
    values = [ratio for arrived, ratio in points if round(arrived) == percent]
    return sum(values) / len(values) if values else None


def experiment(trace: Trace, policy: str, seed: int, tune: float) -> dict[str, Any]:
    """One tune experiment: the same workload and tie order as `gpudra simulate` with this seed."""
    stream = random.Random(seed)
    capacity = trace.gpus * 1000
    workload = tuned_workload(trace.tasks, capacity, tune, stream)
    rank = node_ranks((n.name for n in trace.nodes), stream)
    nodes = [{"sn": n.name, "cpu_milli": n.cpu_milli, "memory_mib": n.memory_mib, "gpu": n.gpus, "model": n.model}
             for n in trace.nodes]
    by_name = {name: task for name, task in workload}
    placements = fgd_artifact.replay(nodes, [pod_row(name, task) for name, task in workload], rank, policy,
                                     typical_from=[pod_row(t.name, t) for t in trace.tasks])
    arrived = used = 0
    points = []
    for name, node, _gpus in placements:
        task = by_name[name]
        arrived += task.total_gpu_milli
        if node is not None:
            used += task.total_gpu_milli
        points.append((100 * arrived / capacity, 100 * used / capacity))
    return {"placements": placements, "allocation_ratio": allocation_at(points),
            "scheduled": sum(1 for p in placements if p[1] is not None), "tasks": len(placements)}


def differing_placements(trace: Trace, policy: str, seed: int, tune: float, expected: list[list[Any]]) -> int:
    """Tasks that gpudra's scheduler path places elsewhere (node or GPU indices) than `expected`."""
    from gpudra.simulate.engine import start

    stream = random.Random(seed)
    workload = tuned_workload(trace.tasks, trace.gpus * 1000, tune, stream)
    run = start(trace, workload, policy, seed, "dra", stream)
    differ = 0
    for (name, _task), want in zip(workload, expected):
        placement = run.schedule(name)
        differ += [name, placement.node, list(placement.gpus)] != want
    return differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="default", help=f"comma-separated: {', '.join(BUNDLED_TRACES)}")
    parser.add_argument("--policies", default="fgd", help=f"comma-separated: {', '.join(POLICIES)} or all")
    parser.add_argument("--pods", help="comma-separated pod CSVs of the openb shape, on the bundled node list "
                        "(instead of --trace: e.g. the artifact's other openb_pod_list_*.csv)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--json", action="store_true", help="one JSON object per experiment")
    parser.add_argument("--compare", action="store_true", help="also count the tasks gpudra places elsewhere")
    args = parser.parse_args()
    policies = POLICIES if args.policies == "all" else tuple(args.policies.split(","))
    nodes = str(resources.files("gpudra.simulate") / "data" / "openb" / BUNDLED_NODES)
    if args.pods:
        traces = [load_trace(nodes, path, Path(path).stem.removeprefix("openb_pod_list_"))
                  for path in args.pods.split(",")]
    else:
        traces = [bundled_trace(name) for name in args.trace.split(",")]
    for trace in traces:
        for policy in policies:
            ratios = []
            for seed in range(args.seed, args.seed + args.seeds):
                started = time.process_time()
                result = experiment(trace, policy, seed, args.tune)
                ratio = result["allocation_ratio"]
                ratios.append(ratio)
                line = {"trace": trace.name, "policy": policy, "seed": seed,
                        "allocation_ratio": None if ratio is None else round(ratio, 4),
                        "unallocated_gpus": None if ratio is None else round(trace.gpus * (1 - ratio / 100), 2),
                        "cpu_seconds": round(time.process_time() - started, 1)}
                if args.compare:
                    line["gpudra_differs"] = differing_placements(trace, policy, seed, args.tune,
                                                                  result["placements"])
                print(json.dumps(line) if args.json else
                      f"{trace.name:<12}{policy:<16}{seed:>5}{line['allocation_ratio']!s:>9}%"
                      f"{line['unallocated_gpus']!s:>9}{line['cpu_seconds']:>8.1f}s"
                      + (f"  gpudra differs on {line['gpudra_differs']} tasks" if args.compare else ""), flush=True)
            known = [r for r in ratios if r is not None]
            if known and not args.json:
                mean = sum(known) / len(known)
                print(f"{trace.name:<12}{policy:<16} mean{mean:>9.2f}%{trace.gpus * (1 - mean / 100):>9.1f}"
                      f"  ({len(known)} seeds)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
