#!/usr/bin/env python3
"""Allocator throughput: allocations per second on one node of a cluster.

    benchmarks/allocate.py FILE --node N [--scenario one-gpu|nvlink-8|file|builtin] [--json]

Two numbers per scenario:
  allocate/s   repeated `Allocator.allocate(node, claims)` with a ready allocator
               (what one scheduling cycle costs per node once the allocator exists);
  per-pod/s    building the allocator from all classes, slices and allocated claims plus
               one allocation (what kube-scheduler pays per pod: PreFilter + one Filter).

Scenarios: `one-gpu` (1 GPU of class gpu.nvidia.com), `nvlink-8` (8 GPUs with
matchAttribute gpu.nvidia.com/nvlinkDomain), `file` (the pending claims in FILE, jointly).
Default: `file` when FILE has pending claims, else both built-in ones. Rates are given by
the wall clock and per CPU-second of this process (the same on an idle machine), each the
median of 5 timing windows.
Generate clusters with benchmarks/gen_cluster.py. With --json the last line is one JSON
object {"allocate_per_s": …, "per_pod_per_s": …} for the first scenario, with every
scenario under "scenarios".

Against Go: benchmarks/go_allocator_medians.json holds the upstream Go allocator's rates per
CPU-second for the generated 1- and 1,000-node clusters (see its "provenance"), with the rate of a
fixed pure-Python workload measured beside them. This run measures that workload again and scales
the Go figures by the ratio, so that a slower or busier machine is compared with Go on the same
footing; the "×Go" columns are gpudra's CPU rates over the scaled Go ones.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gen_cluster import gpu_claim  # noqa: E402

from gpudra.allocator import Allocator, Features  # noqa: E402
from gpudra.api.load import LoadError, load_objects  # noqa: E402


def rate(action: Callable[[], Any], min_seconds: float, min_runs: int = 20, windows: int = 5) -> tuple[float, float]:
    """Calls per second of `action` by the wall clock and per second of this process's CPU time: the median
    over `windows` timing windows that together take at least `min_seconds` and `min_runs` calls (a median,
    so that a burst of other work on a shared machine moves it less than one long average). The CPU figure is
    what an idle machine would show when other work competes for the cores."""
    action()  # warm-up: first-call caches (CEL compilation, indexes) are not steady state
    wall_rates, cpu_rates = [], []
    for _ in range(windows):
        runs = 0
        start, cpu_start = time.perf_counter(), time.process_time()
        deadline = start + min_seconds / windows
        while True:
            action()
            runs += 1
            now = time.perf_counter()
            if runs >= max(1, min_runs // windows) and now >= deadline:
                cpu = max(time.process_time() - cpu_start, 1e-9)
                wall_rates.append(runs / (now - start))
                cpu_rates.append(runs / cpu)
                break
    return statistics.median(wall_rates), statistics.median(cpu_rates)


GO_MEDIANS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "go_allocator_medians.json")


def calibration_work() -> int:
    """A fixed interpreter-bound workload (dict lookups, tuples, calls: what the allocator does) whose rate
    gauges this machine's speed against the one the Go medians were recorded on."""
    counts: dict[tuple[int, str], int] = {}
    for i in range(2000):
        key = (i & 63, "device")
        counts[key] = counts.get(key, 0) + 1
    return len(counts)


def calibration_rate(seconds: float) -> float:
    return rate(calibration_work, seconds)[1]


def go_medians(nodes: int, scenario: str) -> dict[str, float] | None:
    """The recorded Go rates per CPU-second for this cluster size and scenario, or None."""
    try:
        with open(GO_MEDIANS, encoding="utf-8") as handle:
            recorded = json.load(handle)
    except (OSError, ValueError):
        return None
    found = recorded.get("scenarios", {}).get(f"{nodes} nodes/{scenario}")
    if not isinstance(found, dict):
        return None
    return {**found, "calibration_per_cpu_s": recorded["calibration_per_cpu_s"]}


def split_objects(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {"DeviceClass": [], "ResourceSlice": [], "ResourceClaim": [], "Node": []}
    for obj in objects:
        kinds.setdefault(obj.get("kind", ""), []).append(obj)
    return kinds


def is_allocated(claim: dict[str, Any]) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def run_scenario(
    name: str,
    claims: list[dict[str, Any]],
    kinds: dict[str, list[dict[str, Any]]],
    node: Any,
    features: Any,
    seconds: float,
) -> dict[str, Any]:
    classes = kinds["DeviceClass"]
    slices = kinds["ResourceSlice"]
    allocated = [c for c in kinds["ResourceClaim"] if is_allocated(c)]

    ready = Allocator(classes, slices, allocated, features)
    outcome = ready.allocate(node, claims)
    allocate_per_s, allocate_per_cpu_s = rate(lambda: ready.allocate(node, claims), seconds)

    def per_pod() -> None:
        Allocator(classes, slices, allocated, features).allocate(node, claims)

    per_pod_per_s, per_pod_per_cpu_s = rate(per_pod, seconds)
    devices = sum(len((s.get("spec") or {}).get("devices") or []) for s in slices)
    return {
        "scenario": name,
        "outcome": outcome.outcome,
        "devices_allocated": sum(len(((a or {}).get("devices") or {}).get("results") or []) for a in outcome.allocations or []),
        "slices": len(slices),
        "devices": devices,
        "allocate_per_s": round(allocate_per_s, 1),
        "per_pod_per_s": round(per_pod_per_s, 1),
        "allocate_per_cpu_s": round(allocate_per_cpu_s, 1),
        "per_pod_per_cpu_s": round(per_pod_per_cpu_s, 1),
    }


def compare_with_go(row: dict[str, Any], nodes: int, calibration: float) -> None:
    """Add the scaled Go rates and gpudra's ratios to them to `row` (nothing when none is recorded)."""
    go = go_medians(nodes, row["scenario"])
    if go is None:
        return
    scale = calibration / go["calibration_per_cpu_s"]
    for measure in ("allocate", "per_pod"):
        go_rate = go[f"{measure}_per_cpu_s"] * scale
        row[f"go_{measure}_per_cpu_s"] = round(go_rate, 1)
        row[f"{measure}_vs_go"] = round(row[f"{measure}_per_cpu_s"] / go_rate, 2)


def print_table(node_name: str, rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'scenario':<22} {'node':<16} {'slices':>7} {'devices':>8} {'outcome':<13} "
        f"{'allocate/s':>11} {'per-pod/s':>10} {'allocate/cpu-s':>15} {'per-pod/cpu-s':>14} "
        f"{'×Go alloc':>9} {'×Go pod':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        outcome = f"{row['outcome']}({row['devices_allocated']})" if row["outcome"] == "allocated" else row["outcome"]
        print(
            f"{row['scenario']:<22} {node_name:<16} {row['slices']:>7} {row['devices']:>8} {outcome:<13} "
            f"{row['allocate_per_s']:>11,.0f} {row['per_pod_per_s']:>10,.0f} "
            f"{row['allocate_per_cpu_s']:>15,.0f} {row['per_pod_per_cpu_s']:>14,.0f} "
            f"{row.get('allocate_vs_go', '-'):>9} {row.get('per_pod_vs_go', '-'):>8}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", help="cluster manifests (DeviceClasses, ResourceSlices, Nodes, claims)")
    parser.add_argument("--node", required=True, help="node to allocate on")
    parser.add_argument("--scenario", choices=["one-gpu", "nvlink-8", "file", "builtin"], default=None)
    parser.add_argument("--features", default="default")
    parser.add_argument("--seconds", type=float, default=1.0, help="minimum timing per measurement (default 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)

    try:
        objects = load_objects([args.file])
    except LoadError as exc:
        print(f"allocate.py: {exc}", file=sys.stderr)
        return 2
    kinds = split_objects(objects)
    node = next((n for n in kinds["Node"] if (n.get("metadata") or {}).get("name") == args.node), args.node)
    features = Features.parse(args.features)

    pending = [c for c in kinds["ResourceClaim"] if not is_allocated(c)]
    scenario = args.scenario or ("file" if pending else "builtin")
    if scenario == "file" and not pending:
        parser.error(f"{args.file} has no pending ResourceClaims")
    plans: list[tuple[str, list[dict[str, Any]]]] = []
    if scenario in ("one-gpu", "builtin"):
        plans.append(("1 GPU", [gpu_claim("bench-one-gpu", 1)]))
    if scenario in ("nvlink-8", "builtin"):
        plans.append(("8 GPUs matchAttribute", [gpu_claim("bench-nvlink-8", 8, match_nvlink=True)]))
    if scenario == "file":
        plans.append((f"{len(pending)} claim(s) from file", pending))

    rows = [run_scenario(name, claims, kinds, node, features, args.seconds) for name, claims in plans]
    calibration = calibration_rate(args.seconds)
    for row in rows:
        compare_with_go(row, len(kinds["Node"]), calibration)
    print_table(args.node, rows)
    print(f"calibration workload: {calibration:,.0f}/cpu-s; Go rates: {GO_MEDIANS} scaled by it", file=sys.stderr)
    if args.json:
        print(json.dumps({"allocate_per_s": rows[0]["allocate_per_s"], "per_pod_per_s": rows[0]["per_pod_per_s"],
                          "calibration_per_cpu_s": round(calibration, 1), "scenarios": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
