"""Seconds per `gpudra simulate` experiment: the default openb trace (1,213 nodes, 6,212 GPUs), one seed,
workload tuning to 1.3 × capacity (about 10,000 tasks). `--path` as `gpudra simulate`'s: auto (the default) places
the paper's policies and `fgd-reserve` in DRA mode on the fast path (the node model, the same placements), every
other experiment through gpudra's scheduler and allocator; reference sends every placement through them. The path
each experiment took is printed with it.

    python benchmarks/simulate.py [--policy fgd] [--trace default] [--seed 42] [--mode dra] [--path auto] [--json]

Wall-clock and process-CPU seconds are both printed (and the load average: on a busy machine the CPU time is the
one that says how fast gpudra is). The FGD artifact (Go) needs about 10 minutes per experiment on 2 vCPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpudra.simulate import ALL_POLICIES, BUNDLED_TRACES, bundled_trace, run_experiment  # noqa: E402
from gpudra.simulate.engine import PATHS, SimulationError  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", action="append", choices=ALL_POLICIES,
                        help="repeatable [default: fgd and fgd-reserve]")
    parser.add_argument("--trace", default="default", choices=BUNDLED_TRACES)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--mode", default="dra", choices=("dra", "device-plugin"))
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--path", default="auto", choices=PATHS)
    parser.add_argument("--json", action="store_true", help='print {"seconds_per_experiment": ...} as the last line')
    args = parser.parse_args()
    trace = bundled_trace(args.trace)
    rows = []
    for policy in args.policy or ["fgd", "fgd-reserve"]:
        try:
            result = run_experiment(trace, policy, args.seed, args.mode, args.tune, path=args.path)
        except SimulationError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        rows.append({"policy": policy, "path": result.path, "tasks": result.tasks, "seconds": result.seconds,
                     "cpu_seconds": result.cpu_seconds, "allocation_ratio": result.allocation_ratio,
                     "unallocated_gpus": result.unallocated_gpus})
    print(f"{'policy':<16}{'path':<11}{'tasks':>8}{'seconds':>10}{'cpu s':>10}{'alloc%@100':>12}{'unallocated':>13}")
    for row in rows:
        print(f"{row['policy']:<16}{row['path']:<11}{row['tasks']:>8}{row['seconds']:>10.1f}{row['cpu_seconds']:>10.1f}"
              f"{row['allocation_ratio']:>12.2f}{row['unallocated_gpus']:>13.1f}")
    if args.json:
        worst = max(rows, key=lambda r: r["seconds"])
        print(json.dumps({"seconds_per_experiment": worst["seconds"], "cpu_seconds_per_experiment":
                          max(r["cpu_seconds"] for r in rows), "trace": args.trace, "seed": args.seed,
                          "mode": args.mode, "load_average": [round(x, 1) for x in os.getloadavg()],
                          "experiments": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
