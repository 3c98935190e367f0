#!/usr/bin/env python3
"""Memory soak: does a long-running driver or scheduler grow? RSS growth per phase.

    python benchmarks/soak.py [--evaluations 1000000] [--builds 10000] [--compiles 20000] [--json]

Phases, each in this process one after the other:
  cel evaluations  selectors that call into Python (quantity and semver comparisons, format,
                   regex find) and plain ones, each evaluation on a fresh `device_input` (what a
                   driver or scheduler sees when slices are published again), so no memo answers;
  allocator builds `Allocator(classes, slices, …).allocate(node, claims)` on freshly built slices
                   (new dicts every build) with a DeviceTaintRule and a claim whose selector
                   compares quantities and versions;
  fresh compiles   distinct selectors, far more than the compile caches hold.
Growth is RSS at the end minus RSS after a warm-up (the first 2% of a phase, at least 100
iterations), in which bounded caches fill. With --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gen_cluster import generate_cluster, gpu_claim  # noqa: E402

from gpudra.allocator import Allocator, Features  # noqa: E402
from gpudra.cel import CELRuntimeError, compile_selector, device_input  # noqa: E402

DRIVER = "gpu.nvidia.com"
SELECTORS = [
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0',
    f'device.attributes["{DRIVER}"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
    f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("100Gi")) && '
    f'device.attributes["{DRIVER}"].productName.find("H[0-9]+") != ""',
    f'!format.dns1123Label().validate(device.attributes["{DRIVER}"].architecture.lowerAscii()).hasValue()',
    f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].index < 8',
]
CLAIM_SELECTOR = (
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0 && '
    f'device.attributes["{DRIVER}"].cudaComputeCapability.compareTo(semver("8.0.0")) >= 0'
)
TAINT_RULE = {
    "apiVersion": "resource.k8s.io/v1alpha3",
    "kind": "DeviceTaintRule",
    "metadata": {"name": "drain-gpu-7"},
    "spec": {"deviceSelector": {"device": "gpu-7"}, "taint": {"key": "example.com/drain", "effect": "NoSchedule"}},
}


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(name: str, iterations: int, step: Callable[[int], None]) -> dict[str, Any]:
    warm_up = max(100, iterations // 50)
    for index in range(warm_up):
        step(index)
    gc.collect()
    start_rss, start = rss_bytes(), time.perf_counter()
    for index in range(warm_up, warm_up + iterations):
        step(index)
    gc.collect()
    end_rss, seconds = rss_bytes(), time.perf_counter() - start
    growth = end_rss - start_rss
    return {
        "phase": name,
        "iterations": iterations,
        "rss_start_mib": round(start_rss / 2**20, 1),
        "rss_end_mib": round(end_rss / 2**20, 1),
        "growth_mb": round(growth / 1e6, 2),
        "bytes_per_iteration": round(growth / iterations, 2),
        "seconds": round(seconds, 1),
    }


def cel_phase(evaluations: int) -> Callable[[int], None]:
    raw = [d for s in generate_cluster(nodes=16, with_nodes=False)[1:] for d in s["spec"]["devices"]]
    selectors = [compile_selector(expression) for expression in SELECTORS]

    def step(index: int) -> None:
        selector = selectors[index % len(selectors)]
        device = device_input(DRIVER, raw[index % len(raw)])  # fresh: its outcome memo is empty
        try:
            selector.evaluate(device)
        except CELRuntimeError:
            pass

    return step


def allocator_phase() -> Callable[[int], None]:
    features = Features.parse("default")
    claim = gpu_claim("soak", 2)
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": CLAIM_SELECTOR}}]

    def step(index: int) -> None:
        objects = generate_cluster(nodes=2, seed=index % 1000)  # new dicts every build
        classes = [o for o in objects if o["kind"] == "DeviceClass"]
        slices = [o for o in objects if o["kind"] == "ResourceSlice"]
        node = next(o for o in objects if o["kind"] == "Node")
        outcome = Allocator(classes, slices, [], features, [TAINT_RULE]).allocate(node, [claim])
        if outcome.outcome != "allocated":
            raise SystemExit(f"soak: the allocator answered {outcome.outcome}")

    return step


def compile_phase() -> Callable[[int], None]:
    def step(index: int) -> None:
        compile_selector(f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{index}Mi")) >= 0')

    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=1_000_000)
    parser.add_argument("--builds", type=int, default=10_000)
    parser.add_argument("--compiles", type=int, default=20_000)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)

    rows = [
        measure("cel evaluations", args.evaluations, cel_phase(args.evaluations)),
        measure("allocator builds", args.builds, allocator_phase()),
        measure("fresh compiles", args.compiles, compile_phase()),
    ]
    header = f"{'phase':<18} {'iterations':>10} {'RSS start MiB':>13} {'RSS end MiB':>11} {'growth MB':>9} {'B/iter':>8} {'s':>6}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['phase']:<18} {row['iterations']:>10,} {row['rss_start_mib']:>13} {row['rss_end_mib']:>11} "
            f"{row['growth_mb']:>9} {row['bytes_per_iteration']:>8} {row['seconds']:>6}"
        )
    if args.json:
        print(json.dumps({"phases": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
