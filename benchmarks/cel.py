"""DRA CEL selector throughput: compile once, evaluate over 10,000 devices.

    python benchmarks/cel.py [--devices N] [--repeat R] [--json]

Prints a table of evaluations per second for typical selectors (best of R passes, each a real
evaluation), the rate of repeated questions answered from the per-device memo, and the cost of
preparing the devices (`device_input`) and of compiling. With --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpudra.cel import CELRuntimeError, compile_selector, device_input  # noqa: E402

SELECTORS = {
    "driver equality": 'device.driver == "gpu.nvidia.com"',
    "productName": 'device.driver == "gpu.nvidia.com" && '
    'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
    "unknown domain (has)": 'has(device.attributes["other.example.com"].model)',
    "quantity compare": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    "semver compare": 'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
    "cel.bind + regex": 'cel.bind(gpu, device.attributes["gpu.nvidia.com"], '
    'gpu.productName.matches("^NVIDIA (A|H)100") && gpu.index < 4)',
}

PRODUCTS = [
    ("NVIDIA H100 80GB HBM3", "80Gi", "9.0.0"),
    ("NVIDIA A100-SXM4-40GB", "40Gi", "8.0.0"),
    ("NVIDIA L4", "24Gi", "8.9.0"),
    ("Tesla T4", "16Gi", "7.5.0"),
]


def make_devices(count: int, seed: int = 1) -> list[tuple[str, dict]]:
    rng = random.Random(seed)
    devices = []
    for index in range(count):
        product, memory, capability = rng.choice(PRODUCTS)
        devices.append(
            (
                "gpu.nvidia.com",
                {
                    "name": f"gpu-{index}",
                    "attributes": {
                        "productName": {"string": product},
                        "index": {"int": index % 8},
                        "uuid": {"string": f"GPU-{index:08x}-0000-0000-0000-000000000000"},
                        "cudaComputeCapability": {"version": capability},
                        "driverVersion": {"version": "550.54.15"},
                        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{index % 16:02x}"},
                        "type": {"string": "gpu"},
                    },
                    "capacity": {"memory": {"value": memory}, "multiprocessors": {"value": "132"}},
                },
            )
        )
    return devices


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()

    raw = make_devices(args.devices)
    start = time.perf_counter()
    inputs = [device_input(driver, device) for driver, device in raw]
    prepare_seconds = time.perf_counter() - start

    results = {}
    print(f"DRA CEL selectors over {args.devices} devices (best of {args.repeat})")
    print(f"{'selector':<22} {'evals/s':>12} {'µs/eval':>9} {'matches':>8} {'compile µs':>11} {'memo hits/s':>12}")
    for label, expression in SELECTORS.items():
        start = time.perf_counter()
        selector = compile_selector(expression)
        compile_micros = (time.perf_counter() - start) * 1e6
        best = float("inf")
        matches = errors = 0
        for _ in range(args.repeat):
            for device in inputs:
                device.results.clear()  # measure evaluations, not the per-device memo
            matches = errors = 0
            start = time.perf_counter()
            for device in inputs:
                try:
                    matches += selector.evaluate(device)
                except CELRuntimeError:
                    errors += 1
            best = min(best, time.perf_counter() - start)
        rate = len(inputs) / best
        start = time.perf_counter()
        for device in inputs:  # the same question again: answered from the per-device memo
            try:
                selector.evaluate(device)
            except CELRuntimeError:
                pass
        memo_rate = len(inputs) / (time.perf_counter() - start)
        results[label] = {
            "expression": expression,
            "evals_per_second": round(rate),
            "matches": matches,
            "errors": errors,
            "compile_microseconds": round(compile_micros),
            "memoized_per_second": round(memo_rate),
        }
        print(f"{label:<22} {rate:>12,.0f} {1e6 / rate:>9.2f} {matches:>8} {compile_micros:>11,.0f} {memo_rate:>12,.0f}")
    print(f"device_input: {args.devices / prepare_seconds:,.0f} devices/s ({prepare_seconds * 1e6 / args.devices:.1f} µs each)")
    if args.json:
        print(json.dumps({"devices": args.devices, "device_input_per_second": round(args.devices / prepare_seconds),
                          "selectors": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
