"""Outputs of a gang simulation (`--workload nvl72`): the summary over seeds, CSV tables and PNG plots, written
with the trace experiments' helpers (`report.py`)."""

from __future__ import annotations

import csv
import io
import json
from statistics import mean, pstdev
from typing import Any

from .nvl72 import GangTrace, gangs_csv
from .report import _figure_png, spreadsheet_safe, write_files

GANG_SUMMARY_COLUMNS = ("trace", "topology", "method", "policy", "seeds", "gpus", "jobs", "started", "started_nvlink",
                        "degraded", "not_started", "never_fits", "allocation_ratio", "served_ratio",
                        "served_ratio_std", "fragmented_gpus", "stranded_for_waiting_gpus", "mean_wait_s", "seconds",
                        "cpu_seconds")
_MEANS = {"jobs": 1, "started": 1, "started_nvlink": 1, "degraded": 1, "not_started": 1, "never_fits": 1,
          "allocation_ratio": 2, "served_ratio": 2, "fragmented_gpus": 1, "stranded_for_waiting_gpus": 1,
          "mean_wait_s": 1, "seconds": 3,
          "cpu_seconds": 3}


def summarize_gangs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean over seeds (and the served ratio's population standard deviation) per (trace, topology, method,
    policy), in first-seen order."""
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["trace"], r["topology"], r["method"], r["policy"]), []).append(r)
    rows = []
    for (trace, topology, method, policy), members in groups.items():
        row: dict[str, Any] = {"trace": trace, "topology": topology, "method": method, "policy": policy,
                               "seeds": len(members), "gpus": members[0]["gpus"]}
        for key, digits in _MEANS.items():
            values = [r[key] for r in members if r.get(key) is not None]
            row[key] = round(mean(values), digits) if values else None
        served = [r["served_ratio"] for r in members if r.get("served_ratio") is not None]
        row["served_ratio_std"] = round(pstdev(served), 2) if served else None
        rows.append(row)
    return rows


def _csv(header: tuple[str, ...], rows: list[list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in [list(header), *rows]:
        writer.writerow([spreadsheet_safe(cell) for cell in row])
    return out.getvalue()


def gang_summary_csv(rows: list[dict[str, Any]]) -> str:
    return _csv(GANG_SUMMARY_COLUMNS, [[row.get(c, "") for c in GANG_SUMMARY_COLUMNS] for row in rows])


def gang_series_csv(results: list[dict[str, Any]]) -> str:
    """One row per recorded point: against arrived demand (tune) or time (events)."""
    header = ("trace", "method", "policy", "seed", "x", "allocation_ratio", "fragmented_gpus")
    rows = []
    for r in results:
        series = r["series"]
        xs = series.get("arrived_percent") or series.get("time_s") or []
        for i, x in enumerate(xs):
            rows.append([r["trace"], r["method"], r["policy"], r["seed"], x, series["allocation_ratio"][i],
                         series["fragmented_gpus"][i]])
    return _csv(header, rows)


def gang_plots(results: list[dict[str, Any]]) -> dict[str, bytes]:
    """file name -> PNG, per method: allocation (solid) and clique-fragmented GPUs (dashed) for the first seed of
    each policy, and the jobs started with NVLink, started across cliques and not started, per policy."""
    out: dict[str, bytes] = {}
    for method in dict.fromkeys(r["method"] for r in results):
        shown: dict[str, dict[str, Any]] = {}
        for r in results:
            if r["method"] == method:
                shown.setdefault(r["policy"], r)

        def draw(axes: Any, shown: dict[str, dict[str, Any]] = shown, method: str = method) -> None:
            x_key = "arrived_percent" if method == "tune" else "time_s"
            for policy, r in shown.items():
                xs = r["series"][x_key]
                scale = 1 if method == "tune" else 3600
                line, = axes.step([x / scale for x in xs], r["series"]["allocation_ratio"], where="post",
                                  label=f"{policy} (seed {r['seed']})")
                axes.step([x / scale for x in xs], [100 * f / r["gpus"] for f in r["series"]["fragmented_gpus"]],
                          where="post", linestyle="--", color=line.get_color())
            axes.set_xlabel("arrived GPU demand (% of capacity)" if method == "tune" else "trace time (h)")
            axes.set_ylabel("% of GPU capacity")
            axes.set_title(f"{next(iter(shown.values()))['topology']}: GPUs allocated (solid), stranded in "
                           "cliques (dashed)", fontsize=9)
            axes.legend(fontsize=8)

        out[f"nvl72-{method}-allocation.png"] = _figure_png(draw)
        rows = [row for row in summarize_gangs(results) if row["method"] == method]

        def jobs(axes: Any, rows: list[dict[str, Any]] = rows) -> None:
            kinds = (("started_nvlink", "started with NVLink"), ("degraded", "started across cliques (no NVLink)"),
                     ("not_started", "not started"))
            bottom = [0.0] * len(rows)
            for key, label in kinds:
                values = [float(row[key] or 0) for row in rows]
                axes.bar([row["policy"] for row in rows], values, bottom=bottom, label=label)
                bottom = [b + v for b, v in zip(bottom, values)]
            axes.set_ylabel("jobs (mean over seeds)")
            axes.set_title(f"{rows[0]['topology']}: what became of the jobs ({rows[0]['seeds']} seed(s))", fontsize=9)
            axes.tick_params(axis="x", labelsize=8)
            axes.legend(fontsize=8)

        out[f"nvl72-{method}-jobs.png"] = _figure_png(jobs)
    return out


def write_gang_outputs(results: list[dict[str, Any]], directory: str,
                       traces: dict[str, GangTrace] | None = None) -> list[str]:
    """results.json, summary.csv, series.csv, the plots and each generated trace (`traces`: file stem -> trace,
    replayable with --gangs); returns the paths written."""
    files: dict[str, str | bytes] = {"results.json": json.dumps(results, indent=1),
                                     "summary.csv": gang_summary_csv(summarize_gangs(results)),
                                     "series.csv": gang_series_csv(results), **gang_plots(results),
                                     **{f"{stem}.csv": gangs_csv(trace) for stem, trace in (traces or {}).items()}}
    return write_files(directory, files)
