"""Allocated share of `fgd-reserve` (and its online variant) against FGD below and at saturation, per trace.

    gpudra simulate --trace T --policies fgd,fgd-reserve,fgd-reserve-online --seeds 10 -j 2 -o json > T.jsonl
    python tools/frag_vs_fgd.py T.jsonl [MORE.jsonl …] [--levels 70,75,80,85,90,95,100] [--json]

Reads the experiments `gpudra simulate -o json` prints (one JSON object per line) and, for every trace and every
arrived-demand level, prints the mean over the seeds of the allocated share (the `allocation_ratio` series: GPU
milli allocated / capacity, in %) of FGD (every seed it ran) and of every other policy found, with the
difference from FGD in percentage points and on how many seeds the policy allocated at least as much as FGD: both
over the seeds the policy and FGD both ran, matched one to one (a policy run on fewer seeds is compared on those).
`--baseline P` compares with P instead of FGD.
One Markdown table, a row of FGD's allocated % and a row of differences per policy for every trace (docs/performance.md's
layout); `--per-trace`: a table per trace with every mean; `--json`: the rows as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

BASELINE = "fgd"
DEFAULT_LEVELS = tuple(range(70, 101, 5))
ORDER = ("fgd-reserve", "fgd-reserve-online", "fgd-online")  # columns first in this order, then the rest

Series = dict[int, float]  # arrived demand % -> allocated %


class InputError(Exception):
    pass


def read_experiments(paths: list[str]) -> dict[str, dict[str, dict[int, Series]]]:
    """trace -> policy -> seed -> allocated share by arrived-demand level, from `simulate -o json` lines."""
    found: dict[str, dict[str, dict[int, Series]]] = defaultdict(lambda: defaultdict(dict))
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                result = json.loads(line)
                series = result["series"]
                levels = dict(zip(series["arrived_percent"], series["allocation_ratio"]))
                found[result["trace"]][result["policy"]][int(result["seed"])] = levels
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"{path}:{number}: not an experiment of `gpudra simulate -o json` ({exc})") from None
    return found


def compare(policies: dict[str, dict[int, Series]], levels: tuple[int, ...],
            baseline_policy: str = BASELINE) -> list[dict[str, Any]]:
    """One row per level: FGD's mean over its seeds; each other policy's mean, its paired difference from FGD
    and the seeds on which it allocated at least FGD's share, over the seeds both ran."""
    baseline = policies.get(baseline_policy)
    if not baseline:
        return []
    others = sorted((p for p in policies if p != baseline_policy),
                    key=lambda p: (ORDER.index(p) if p in ORDER else len(ORDER), p))
    seeds = sorted(baseline)
    rows = []
    for level in levels:
        if any(level not in baseline[s] for s in seeds):
            continue
        row: dict[str, Any] = {"level": level, "seeds": seeds, "baseline": baseline_policy,
                               baseline_policy: sum(baseline[s][level] for s in seeds) / len(seeds)}
        for policy in others:
            paired = sorted(s for s in policies[policy] if s in baseline and level in policies[policy][s])
            if not paired:
                continue
            values = [policies[policy][s][level] for s in paired]
            base = [baseline[s][level] for s in paired]
            row[policy] = {"mean": sum(values) / len(paired), "difference": (sum(values) - sum(base)) / len(paired),
                           "at_least_fgd": sum(1 for v, b in zip(values, base) if v >= b), "seeds": paired}
        rows.append(row)
    return rows


def seed_span(seeds: list[int]) -> str:
    """42–51, 42 or 42,44: the seeds as a reader scans them."""
    if len(seeds) == 1:
        return str(seeds[0])
    if seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ",".join(map(str, seeds))


def markdown(trace: str, rows: list[dict[str, Any]]) -> str:
    if not rows:
        return f"{trace}: no level with the baseline policy"
    base = rows[0]["baseline"]
    others = [key for key in rows[0] if key not in ("level", "seeds", "baseline", base)]
    caption = [f"{base} seeds {seed_span(rows[0]['seeds'])}"]
    caption += [f"`{policy}` seeds {seed_span(rows[0][policy]['seeds'])}" for policy in others]
    head = ["arrived demand", f"{base} %"]
    for policy in others:
        head += [f"`{policy}` %", "difference (pp)", f"seeds ≥ {base}"]
    lines = [f"{trace} ({'; '.join(caption)})", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [f"{row['level']}%", f"{row[base]:.2f}"]
        for policy in others:
            cell = row.get(policy)
            if cell is None:
                cells += ["", "", ""]
                continue
            cells += [f"{cell['mean']:.2f}", f"{cell['difference']:+.2f}".replace("-", "−"),
                      f"{cell['at_least_fgd']} of {len(cell['seeds'])}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(tables: dict[str, list[dict[str, Any]]]) -> str:
    """One table: per trace, FGD's allocated % at each level, then each policy's difference from FGD in pp
    (seeds on which it allocated at least FGD's share, of the seeds both ran)."""
    levels = sorted({row["level"] for rows in tables.values() for row in rows})
    head = ["trace", "policy", "seeds"] + [f"{level}%" for level in levels]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for trace, rows in tables.items():
        by_level = {row["level"]: row for row in rows}
        if not rows:
            continue
        base = rows[0]["baseline"]
        shares = [f"{by_level[level][base]:.2f}" if level in by_level else "" for level in levels]
        name = "FGD" if base == BASELINE else f"`{base}`"
        lines.append("| " + " | ".join([trace, f"{name} allocated %", seed_span(rows[0]["seeds"])] + shares) + " |")
        for policy in [key for key in rows[0] if key not in ("level", "seeds", "baseline", base)]:
            cells = []
            for level in levels:
                cell = by_level.get(level, {}).get(policy)
                cells.append("" if cell is None else f"{cell['difference']:+.2f}".replace("-", "−")
                             + f" ({cell['at_least_fgd']}/{len(cell['seeds'])})")
            lines.append("| " + " | ".join([trace, f"`{policy}` − {name} (pp)", seed_span(rows[0][policy]["seeds"])]
                                            + cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="`gpudra simulate -o json` output (JSON lines)")
    parser.add_argument("--levels", default=",".join(map(str, DEFAULT_LEVELS)),
                        help="arrived-demand levels in %% [default: 70,75,…,100]")
    parser.add_argument("--baseline", default=BASELINE, help="the policy the others are compared with [default: fgd]")
    parser.add_argument("--per-trace", action="store_true", help="a table per trace with every policy's mean")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON line")
    args = parser.parse_args(argv)
    try:
        levels = tuple(int(level) for level in args.levels.split(","))
    except ValueError:
        parser.error(f"--levels: whole percents separated by commas, not {args.levels!r}")
    try:
        found = read_experiments(args.files)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    tables = {trace: compare(found[trace], levels, args.baseline) for trace in found}
    if args.json:
        print(json.dumps(tables, separators=(",", ":")))
    elif args.per_trace:
        print("\n\n".join(markdown(trace, rows) for trace, rows in tables.items()))
    else:
        print(summary(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
