"""DRA CEL selector throughput: compile once, evaluate over 10,000 devices.

    python benchmarks/cel.py [--devices N] [--repeat R] [--json]
    python benchmarks/cel.py --versus-cel-go [--oracle PATH] [--long-loops] [--json]

Prints a table of evaluations per second for typical selectors (best of R passes, each a real
evaluation), the rate of repeated questions answered from the per-device memo, and the cost of
preparing the devices (`device_input`) and of compiling. With --json the last line is one JSON object.

--versus-cel-go: costly selectors (issue 35) in kube-scheduler's reading, each compiled and evaluated once on one
device by gpudra and by cel-go (k8s/cmd/cel-oracle, built with `go build -trimpath` unless --oracle names a binary),
each side in a fresh process: outcome, compile and evaluation seconds, and the process's peak RSS (os.wait4). With
--long-loops cel-go also runs `lists.range(140000).exists(…)` (about a minute; kube-scheduler's DRA Filter gives up
after 10 s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
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


REPO = Path(__file__).resolve().parent.parent
# (label, expression, cel-go runs it without --long-loops)
COSTLY = [
    ("join of 30,000 strings", 'lists.range(30000).map(i, string(i)).join("").size() > 0', True),
    ("10,000 × !", "!" * 10000 + "true", True),
    ("map 60,000", "lists.range(60000).map(i, i).size() > 0", True),
    ("map 100,000 (over the limit)", "lists.range(100000).map(i, i).size() > 0", True),
    ("nested maps 300 × 300", "lists.range(300).map(i, lists.range(300).map(j, j)).size() > 0", True),
    ("sortBy 3,000", "lists.range(3000).sortBy(i, -i).size() > 0", True),
    ("240 chained cel.bind", None, True),
    ("device.?attributes", 'device.?attributes["other.vendor"].?model.orValue("") == ""', True),
    ("exists 16,000", "lists.range(16000).exists(i, i == 15999)", True),
    ("exists 140,000", "lists.range(140000).exists(i, i == 139999)", False),
]

_GPUDRA_ONE = r"""
import json, resource, sys, time
from gpudra.cel import CELCompileError, CELRuntimeError, compile_selector, device_input
expression = sys.stdin.read()
device = device_input("gpu.nvidia.com", {"name": "gpu-0"})
start = time.perf_counter()
try:
    selector = compile_selector(expression, stored=True, version="1.34")
except CELCompileError as error:
    print(json.dumps({"outcome": "compile error", "compile_s": time.perf_counter() - start})); raise SystemExit
compiled = time.perf_counter()
try:
    outcome = selector.evaluate(device)
except CELRuntimeError as error:
    outcome = "runtime error: " + error.message
print(json.dumps({"outcome": outcome, "compile_s": compiled - start, "evaluate_s": time.perf_counter() - compiled}))
"""


def _bind_chain(count: int) -> str:
    text = f"a{count - 1} == {count - 1}"
    for index in range(count - 1, 0, -1):
        text = f"cel.bind(a{index}, a{index - 1} + 1, {text})"
    return f"cel.bind(a0, 0, {text})"


def _run_measured(command: list[str], stdin_text: str) -> tuple[str, float]:
    """stdout and the peak RSS (MiB) of one process."""
    with tempfile.TemporaryFile("w+") as stdin, tempfile.TemporaryFile("w+") as stdout:
        stdin.write(stdin_text)
        stdin.seek(0)
        process = subprocess.Popen(command, stdin=stdin, stdout=stdout, env={**os.environ, "PYTHONPATH": str(REPO)})
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        return stdout.read(), usage.ru_maxrss / 1024


def _oracle(path: str | None) -> str:
    if path:
        return path
    from gpudra.errors import GpudraError
    from gpudra.kubecluster.build import build_command

    try:  # the one cached Go build (gpudra.kubecluster.build): reused while k8s/ and Go are unchanged
        return build_command("cel-oracle", str(REPO / "k8s")).binary
    except GpudraError as exc:
        raise SystemExit(f"error: --versus-cel-go needs k8s/cmd/cel-oracle ({exc}) or --oracle PATH") from None


def _go_outcome(answer: dict) -> str:
    if answer.get("compileError"):
        return "compile error"
    if answer.get("runtimeError"):
        return "runtime error: " + answer["runtimeError"]
    return str(answer["result"])


def versus_cel_go(oracle: str | None, long_loops: bool, as_json: bool) -> int:
    binary = _oracle(oracle)
    rows = []
    print("costly selectors, kube-scheduler's reading, one device; each side in a fresh process")
    print(f"{'selector':<30} {'side':<7} {'outcome':<16} {'compile s':>10} {'eval s':>8} {'peak MiB':>9}")
    for label, expression, go_by_default in COSTLY:
        expression = expression or _bind_chain(240)
        output, peak = _run_measured([sys.executable, "-c", _GPUDRA_ONE], expression)
        gpudra = json.loads(output.strip().splitlines()[-1])
        sides = {"gpudra": {**gpudra, "outcome": str(gpudra["outcome"]), "peak_mib": round(peak, 1)}}
        if go_by_default or long_loops:
            case = {"id": "1", "expression": expression, "driver": "gpu.nvidia.com", "device": {}}
            output, peak = _run_measured([binary, "-timing"], json.dumps([case]))
            answer = json.loads(output.strip().splitlines()[-1])
            sides["cel-go"] = {"outcome": _go_outcome(answer), "compile_s": answer.get("compileSeconds"),
                               "evaluate_s": answer.get("evaluateSeconds"), "actual_cost": answer.get("actualCost"),
                               "peak_mib": round(peak, 1)}
        for side, numbers in sides.items():
            evaluate = numbers.get("evaluate_s")
            print(f"{label if side == 'gpudra' else '':<30} {side:<7} {numbers['outcome'][:16]:<16} "
                  f"{numbers['compile_s']:>10.3f} {evaluate if evaluate is None else round(evaluate, 3)!s:>8} "
                  f"{numbers['peak_mib']:>9.1f}")
        rows.append({"label": label, "expression": expression if len(expression) < 200 else expression[:200] + "…",
                     **sides})
    if as_json:
        print(json.dumps({"versus_cel_go": rows}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--versus-cel-go", action="store_true", help="costly selectors, gpudra beside cel-go")
    parser.add_argument("--oracle", help="a built k8s/cmd/cel-oracle (default: build it with go)")
    parser.add_argument("--long-loops", action="store_true", help="cel-go runs the 140,000-element loop too")
    args = parser.parse_args()
    if args.versus_cel_go:
        return versus_cel_go(args.oracle, args.long_loops, args.json)

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
