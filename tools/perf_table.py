"""Benchmark results as recorded JSON files, and the table of them in docs/performance.md.

    python tools/perf_table.py record NAME -- python benchmarks/cel.py --devices 2000 --json
        runs the command (its last stdout line is the benchmark's `--json` object) and writes
        benchmarks/results/NAME.json: the command, the date (UTC), the machine, the load average before and after
        and the benchmark's own JSON, untouched.
    python tools/perf_table.py render [--check]
        renders every results file into the table between the markers in docs/performance.md (--check: exit 1
        if the file differs from the rendering, and change nothing).

One copy of each number: the results files are the record, the table is rendered from them and never edited.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "performance.md"
BEGIN = "<!-- perf-table: rendered by tools/perf_table.py from benchmarks/results/*.json; do not edit -->"
END = "<!-- /perf-table -->"
MAX_FIGURES = 6  # the row's result cell: the benchmark's first scalar figures, in its own order


@dataclass(frozen=True)
class Result:
    name: str
    command: str
    date: str
    machine: str
    load: str
    output: dict[str, Any]

    @classmethod
    def read(cls, path: Path) -> Result:
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(path.stem, data["command"], data["date"], data["machine"], data["load"], data["output"])


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} vCPU {model}, CPython {platform.python_version()}"


def load_average() -> float:
    return os.getloadavg()[0]


def record(name: str, command: list[str]) -> Path:
    before = load_average()
    started = datetime.datetime.now(datetime.timezone.utc)
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    lines = done.stdout.strip().splitlines()
    try:
        output = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        sys.exit(f"error: {' '.join(command)}: the last line of its output is not a JSON object")
    after = load_average()
    shown = " ".join(("python" if part == sys.executable else part) for part in command)
    data = {"command": shown, "date": started.strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "load": f"{before:.1f}–{after:.1f}", "output": output}
    path = RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def _figure(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _is_measure(key: str) -> bool:
    return key.endswith(("_s", "_ms", "seconds", "ratio")) or "per_" in key


def figures(output: dict[str, Any]) -> str:
    """The benchmark's numbers (nested one level: `scenario.key`, or `phases[name].key` for a list of records named
    by their first text field; not its strings and flags, which echo its options), the measured ones (rates, times,
    ratios) first, at most MAX_FIGURES of them."""
    found: list[tuple[str, Any]] = []

    def numbers(prefix: str, record: dict[str, Any]) -> None:
        found.extend((f"{prefix}{key}", value) for key, value in record.items()
                     if isinstance(value, (int, float)) and not isinstance(value, bool))

    numbers("", output)
    for key, value in output.items():
        if isinstance(value, dict):
            numbers(f"{key}.", value)
        elif isinstance(value, list):
            for record in (item for item in value if isinstance(item, dict)):
                label = next((v for v in record.values() if isinstance(v, str)), str(value.index(record)))
                numbers(f"{key}[{label}].", record)
    found.sort(key=lambda item: not _is_measure(item[0]))  # stable: the benchmark's order within each group
    shown = [f"{key} {_figure(value)}" for key, value in found[:MAX_FIGURES]]
    more = len(found) - len(shown)
    return "; ".join(shown) + (f"; … ({more} more in the file)" if more > 0 else "")


def render_table(results: list[Result]) -> str:
    rows = ["| benchmark | command | date | machine | load (1-min, before–after) | result (the `--json` figures) |",
            "|---|---|---|---|---|---|"]
    for result in results:
        cells = [f"[{result.name}](../benchmarks/results/{result.name}.json)", f"`{result.command}`", result.date,
                 result.machine, result.load, figures(result.output)]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def rendered_document(text: str, results: list[Result]) -> str:
    head, sep, rest = text.partition(BEGIN)
    if not sep or END not in rest:
        raise ValueError(f"{DOC}: the markers {BEGIN!r} and {END!r} are missing")
    return head + BEGIN + "\n" + render_table(results) + END + rest.split(END, 1)[1]


def all_results(folder: Path = RESULTS) -> list[Result]:
    return [Result.read(path) for path in sorted(folder.glob("*.json"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("name")
    rec.add_argument("command", nargs=argparse.REMAINDER)
    ren = sub.add_parser("render")
    ren.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.action == "record":
        command = [part for part in args.command if part != "--"]
        if command and command[0] == "python":
            command[0] = sys.executable
        print(record(args.name, command))
        return 0
    text = DOC.read_text(encoding="utf-8")
    new = rendered_document(text, all_results())
    if args.check:
        if new != text:
            print(f"{DOC} is not the rendering of {RESULTS}: run python tools/perf_table.py render", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
