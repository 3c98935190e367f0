#!/usr/bin/env python3
"""Allocator throughput: gpudra's allocator and the upstream Go allocator, timed in the same run on the same inputs.

    benchmarks/allocate.py FILE --node N [--scenario one-gpu|nvlink-8|file|builtin] [--no-go] [--json]

Two numbers per scenario and allocator:
  allocate/s   repeated allocation of the same claim objects on one node with a ready allocator
               (what one Filter call costs once the allocator exists);
  per-pod/s    building the allocator from all classes, slices and allocated claims plus one allocation,
               each pod bringing new claim objects (copies of the scenario's claims with their own name and
               uid, made before the timing window as an informer hands them out): kube-scheduler's PreFilter
               plus one Filter. Slices and classes stay the same objects.

Scenarios: `one-gpu` (1 GPU of class gpu.nvidia.com), `nvlink-8` (8 GPUs with matchAttribute
gpu.nvidia.com/nvlinkDomain), `file` (the pending claims in FILE, jointly). Default: `file` when FILE has
pending claims, else both built-in ones. Every object gets the API server's defaults first (a cluster stores
them defaulted; the Go allocator expects that). Rates are given by the wall clock and per CPU-second of the
timing process, each the median of 5 timing windows; the ×Go columns are gpudra's rate over Go's per CPU-second
(above 1: gpudra is faster), which moves least when other work shares the machine.

The Go side is k8s/cmd/allocate-bench over k8s.io/dynamic-resource-allocation/structured at the version k8s/go.mod
pins, or with --kubernetes-version 1.N the one k8s/releases/v1.N.mod pins (built with `go build -trimpath` on
first use into $XDG_CACHE_HOME/gpudra/kube/, then reused; see benchmarks/go_allocator.py). Both allocators run
with that Kubernetes release's default gates unless --features says otherwise, and must give the same answer on every scenario: a difference is printed and the exit code is 1.
Without Go on PATH (or with --no-go) gpudra is timed alone and stderr says so. Generate clusters with
benchmarks/gen_cluster.py. With --json the last line is one JSON object {"allocate_per_s": …, "per_pod_per_s": …}
for gpudra on the first scenario, with every scenario (Go's rates and the ratios included) under "scenarios".
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import time
from typing import Any, Callable, TypeVar

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import go_allocator  # noqa: E402
from gen_cluster import gpu_claim  # noqa: E402

from gpudra.allocator import FEATURE_NAMES, Allocator, Features  # noqa: E402
from gpudra.api.defaults import apply_defaults  # noqa: E402
from gpudra.api.load import LoadError, load_objects  # noqa: E402

T = TypeVar("T")
WINDOWS = 5
MIN_RUNS = 20


def rate(action: Callable[[T], Any], min_seconds: float, fresh: Callable[[int], T], windows: int = WINDOWS,
         min_runs: int = MIN_RUNS) -> tuple[float, float]:
    """Calls per second of `action` by the wall clock and per second of this process's CPU time: the medians over
    `windows` timing windows that together take about `min_seconds` and at least `min_runs` calls (medians, so that
    a burst of other work on a shared machine moves them less than one long average). Each call gets its input from
    `fresh`, made before its window's clock starts. k8s/cmd/allocate-bench times the Go allocator the same way."""
    action(fresh(0))  # warm-up: first-call caches (CEL compilation, indexes) are not steady state
    per_window = min_seconds / windows
    runs, start = 0, time.perf_counter()
    while runs < 3 or time.perf_counter() - start < per_window / 4:
        action(fresh(runs))
        runs += 1
    estimate = runs / (time.perf_counter() - start)
    calls = max(min_runs // windows, 1, math.ceil(estimate * per_window))
    wall_rates, cpu_rates = [], []
    for window in range(windows):
        inputs = [fresh(window * calls + i) for i in range(calls)]
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        for item in inputs:
            action(item)
        wall = time.perf_counter() - wall_start
        cpu = max(time.process_time() - cpu_start, 1e-9)
        wall_rates.append(calls / wall)
        cpu_rates.append(calls / cpu)
    return statistics.median(wall_rates), statistics.median(cpu_rates)


def from_template(claims: list[dict[str, Any]], pod: int) -> list[dict[str, Any]]:
    """The claims of pod number `pod`: new objects made from the scenario's claims as the resourceclaim controller
    makes them from a template (own name and uid), so no cache keyed on the claim object carries over."""
    fresh = []
    for index, template in enumerate(claims):
        claim = copy.deepcopy(template)
        metadata = claim.setdefault("metadata", {})
        metadata["name"] = f"{metadata.get('name', 'claim')}-pod{pod}"
        metadata["uid"] = f"pod-{pod}-claim-{index}"
        fresh.append(claim)
    return fresh


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
    node: dict[str, Any],
    features: Features,
    seconds: float,
) -> dict[str, Any]:
    classes = kinds["DeviceClass"]
    slices = kinds["ResourceSlice"]
    allocated = [c for c in kinds["ResourceClaim"] if is_allocated(c)]

    ready = Allocator(classes, slices, allocated, features)
    outcome = ready.allocate(node, claims)
    allocate_per_s, allocate_per_cpu_s = rate(lambda same: ready.allocate(node, same), seconds, lambda _: claims)

    def per_pod(pod_claims: list[dict[str, Any]]) -> None:
        Allocator(classes, slices, allocated, features).allocate(node, pod_claims)

    per_pod_per_s, per_pod_per_cpu_s = rate(per_pod, seconds, lambda pod: from_template(claims, pod))
    devices = sum(len((s.get("spec") or {}).get("devices") or []) for s in slices)
    return {
        "scenario": name,
        "outcome": outcome.outcome,
        "allocations": outcome.allocations,
        "devices_allocated": sum(len(((a or {}).get("devices") or {}).get("results") or []) for a in outcome.allocations or []),
        "slices": len(slices),
        "devices": devices,
        "allocate_per_s": round(allocate_per_s, 1),
        "per_pod_per_s": round(per_pod_per_s, 1),
        "allocate_per_cpu_s": round(allocate_per_cpu_s, 1),
        "per_pod_per_cpu_s": round(per_pod_per_cpu_s, 1),
    }


def run_go(
    harness: go_allocator.Harness,
    row: dict[str, Any],
    claims: list[dict[str, Any]],
    kinds: dict[str, list[dict[str, Any]]],
    node: dict[str, Any],
    features: Features,
    seconds: float,
) -> None:
    """Time the Go allocator on the scenario gpudra was just timed on; add its rates, the ratios and whether the
    answers agree to `row`."""
    payload = {
        "deviceClasses": kinds["DeviceClass"],
        "resourceSlices": kinds["ResourceSlice"],
        "allocatedClaims": [c for c in kinds["ResourceClaim"] if is_allocated(c)],
        "node": node,
        "claims": claims,
        "features": go_allocator.feature_names(features, FEATURE_NAMES),
        "seconds": seconds,
        "windows": WINDOWS,
        "minRuns": MIN_RUNS,
    }
    answer = go_allocator.run_harness(harness, payload, timeout_s=120 + 10 * seconds)
    row["go_outcome"] = "error" if answer.get("error") else "unallocatable" if answer.get("results") is None else "allocated"
    row["go_error"] = answer.get("error") or None
    row["go_allocations"] = answer.get("results")
    row["same_answer"] = go_allocator.same_answer(row["outcome"], row["allocations"], answer)
    for measure in ("allocate", "per_pod"):
        for clock in ("per_s", "per_cpu_s"):
            go_rate = float(answer.get(f"{measure}_{clock}") or 0)
            row[f"go_{measure}_{clock}"] = round(go_rate, 1)
            ratio = row[f"{measure}_{clock}"] / go_rate if go_rate > 0 else None
            row[f"{measure}_vs_go{'_wall' if clock == 'per_s' else ''}"] = None if ratio is None else round(ratio, 2)


def print_table(node_name: str, rows: list[dict[str, Any]]) -> None:
    def number(value: Any) -> str:
        return "-" if value is None else f"{value:,.0f}"

    def ratio(value: Any) -> str:
        return "-" if value is None else f"{value:.2f}"

    header = (
        f"{'scenario':<22} {'node':<16} {'slices':>6} {'devices':>7} {'outcome':<13} {'same':<4} "
        f"{'allocate/cpu-s':>14} {'Go':>8} {'×Go':>5} {'per-pod/cpu-s':>13} {'Go':>8} {'×Go':>5} "
        f"{'×Go wall':>9}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        outcome = f"{row['outcome']}({row['devices_allocated']})" if row["outcome"] == "allocated" else row["outcome"]
        same = "-" if "same_answer" not in row else "yes" if row["same_answer"] else "NO"
        wall = "-" if row.get("allocate_vs_go_wall") is None else (
            f"{ratio(row['allocate_vs_go_wall'])}/{ratio(row.get('per_pod_vs_go_wall'))}")
        print(
            f"{row['scenario']:<22} {node_name:<16} {row['slices']:>6} {row['devices']:>7} {outcome:<13} {same:<4} "
            f"{number(row['allocate_per_cpu_s']):>14} {number(row.get('go_allocate_per_cpu_s')):>8} "
            f"{ratio(row.get('allocate_vs_go')):>5} "
            f"{number(row['per_pod_per_cpu_s']):>13} {number(row.get('go_per_pod_per_cpu_s')):>8} "
            f"{ratio(row.get('per_pod_vs_go')):>5} {wall:>9}"
        )


def prepare_harness(wanted: bool, kubernetes_version: str | None = None
                    ) -> tuple[go_allocator.Harness | None, str | None]:
    """The Go harness built against `kubernetes_version` (None: k8s/go.mod's release), or None and why not (no Go
    on PATH, --no-go); a failed build raises HarnessError."""
    if not wanted:
        return None, "--no-go: timing gpudra alone"
    go = go_allocator.find_go()
    if go is None:
        return None, "go is not on PATH: timing gpudra alone (install Go to time the upstream allocator beside it)"
    started = time.perf_counter()
    harness = go_allocator.build_harness(go, kubernetes_version)
    how = f"built in {time.perf_counter() - started:.1f} s" if harness.built else "reused"
    return harness, f"Go allocator: {go_allocator.ALLOCATOR_MODULE} {harness.release} ({harness.binary}, {how})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("file", help="cluster manifests (DeviceClasses, ResourceSlices, Nodes, claims)")
    parser.add_argument("--node", required=True, help="node to allocate on")
    parser.add_argument("--scenario", choices=["one-gpu", "nvlink-8", "file", "builtin"], default=None)
    parser.add_argument("--kubernetes-version", default=None, metavar="1.N",
                        help="the release both allocators follow: gpudra's gates and the Go allocator of that "
                             "release (k8s/releases/v1.N.mod; default: the release k8s/go.mod pins)")
    parser.add_argument("--features", default="default",
                        help="allocator gates, `default` being those of the Kubernetes release (default)")
    parser.add_argument("--seconds", type=float, default=1.0, help="timing per measurement (default 1)")
    parser.add_argument("--no-go", action="store_true", help="time gpudra alone")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    if not args.seconds > 0:
        parser.error("--seconds must be positive")

    try:
        objects = [apply_defaults(obj) for obj in load_objects([args.file])]
        release = go_allocator.kubernetes_release(args.kubernetes_version)
        features = Features.parse(args.features, version=release)
    except LoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (go_allocator.HarnessError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        parser.error(f"--features: {exc}")
    kinds = split_objects(objects)
    node = next((n for n in kinds["Node"] if (n.get("metadata") or {}).get("name") == args.node),
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": args.node}})

    pending = [c for c in kinds["ResourceClaim"] if not is_allocated(c)]
    scenario = args.scenario or ("file" if pending else "builtin")
    if scenario == "file" and not pending:
        parser.error(f"{args.file} has no pending ResourceClaims")
    plans: list[tuple[str, list[dict[str, Any]]]] = []
    if scenario in ("one-gpu", "builtin"):
        plans.append(("1 GPU", [apply_defaults(gpu_claim("bench-one-gpu", 1))]))
    if scenario in ("nvlink-8", "builtin"):
        plans.append(("8 GPUs matchAttribute", [apply_defaults(gpu_claim("bench-nvlink-8", 8, match_nvlink=True))]))
    if scenario == "file":
        plans.append((f"{len(pending)} claim(s) from file", pending))

    try:
        harness, note = prepare_harness(not args.no_go, args.kubernetes_version)
    except go_allocator.HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(note, file=sys.stderr)
    rows = []
    failure = None
    for name, claims in plans:
        row = run_scenario(name, claims, kinds, node, features, args.seconds)
        if harness is not None and failure is None:
            try:
                run_go(harness, row, claims, kinds, node, features, args.seconds)
            except go_allocator.HarnessError as exc:
                failure = str(exc)
        rows.append(row)
    print_table(args.node, rows)
    print(f"gates: {features} (Kubernetes {release} defaults unless --features); ×Go: gpudra's rate over Go's "
          "per CPU-second (wall: by the wall clock, allocate/per pod)", file=sys.stderr)
    disagreements = [row for row in rows if row.get("same_answer") is False]
    for row in disagreements:
        print(f"error: gpudra and the Go allocator disagree on {row['scenario']!r}: gpudra {row['outcome']} "
              f"{json.dumps(row['allocations'])}, Go {row['go_outcome']} "
              f"{json.dumps(row['go_error'] or row['go_allocations'])}", file=sys.stderr)
    if failure:
        print(f"error: {failure}", file=sys.stderr)
    if args.json:
        print(json.dumps({
            "allocate_per_s": rows[0]["allocate_per_s"],
            "per_pod_per_s": rows[0]["per_pod_per_s"],
            "kubernetes": release,
            "go_allocator": None if harness is None else {"module": go_allocator.ALLOCATOR_MODULE,
                                                          "version": harness.release, "built": harness.built},
            "scenarios": rows,
        }))
    return 1 if disagreements or failure else 0


if __name__ == "__main__":
    sys.exit(main())
