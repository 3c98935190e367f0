"""Outputs of a simulation: CSV tables, PNG plots (matplotlib) and one self-contained HTML report.

Plots, one set per trace: allocation ratio against arrived GPU demand per policy (mean over seeds),
fragmentation against arrived demand per policy, per-GPU-model utilisation at 100% arrived demand, and — when
both modes ran — device plugin vs DRA (demand served against arrived demand).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from pathlib import Path
from typing import Any, Callable

from .results import ExperimentResult
from .sweep import level_field, summarize

Draw = Callable[[Any], None]  # draws a plot on matplotlib axes

SUMMARY_COLUMNS = ("trace", "mode", "policy", "seeds", "gpus", "served_ratio", "served_ratio_std", "unserved_gpus",
                   "allocation_ratio", "allocation_ratio_std", "unallocated_gpus", "fragmented_gpus",
                   "oversubscribed_ratio", "oversubscribed_gpus", "seconds", "cpu_seconds")
# The report page's headings for the summary's fields (summary.csv keeps the field names; each heading's tooltip
# names its field).
COLUMN_HEADINGS = {
    "trace": "Trace", "mode": "Mode", "policy": "Policy", "seeds": "Seeds", "gpus": "GPUs",
    "served_ratio": "GPU demand served (%)", "served_ratio_std": "± std", "unserved_gpus": "Unserved (GPUs)",
    "allocation_ratio": "GPUs reserved (%)", "allocation_ratio_std": "± std", "unallocated_gpus": "Unreserved (GPUs)",
    "fragmented_gpus": "Fragmented GPUs", "oversubscribed_ratio": "Oversubscribed (%)",
    "oversubscribed_gpus": "Oversubscribed (GPUs)", "seconds": "Wall time (s)", "cpu_seconds": "CPU time (s)",
}
SERIES_COLUMNS = ("trace", "mode", "policy", "seed", "arrived_percent", "allocation_ratio", "served_ratio",
                  "fragmented_gpus", "fragmentation_ratio", "oversubscribed_ratio")


# A text cell a spreadsheet would take for a formula (OWASP "CSV Injection"): a trace named `=1+1.csv` put a
# formula into summary.csv. Such a cell is written with a leading single quote, as spreadsheet-safe writers do.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """`value`, or for a text starting like a formula the same text after a `'` (numbers stay numbers)."""
    return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_START) else value


class _SafeWriter:
    """csv.writer whose text cells are spreadsheet-safe: every CSV gpudra writes goes through it."""

    def __init__(self, out: io.StringIO):
        self._writer = csv.writer(out, lineterminator="\n")

    def writerow(self, row: Any) -> None:
        self._writer.writerow([spreadsheet_safe(cell) for cell in row])


def summary_csv(rows: list[dict[str, Any]], levels: tuple[int, ...] = ()) -> str:
    """One row per (trace, mode, policy); `levels`: a served_ratio_at_L column each (`sweep.summarize`'s)."""
    columns = SUMMARY_COLUMNS + tuple(level_field(level) for level in levels)
    out = io.StringIO()
    writer = _SafeWriter(out)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([row.get(column, "") for column in columns])
    return out.getvalue()


def series_csv(results: list[ExperimentResult]) -> str:
    out = io.StringIO()
    writer = _SafeWriter(out)
    writer.writerow(SERIES_COLUMNS)
    for r in results:
        series = r.series
        over = r.series_points("oversubscribed_ratio")
        for i, percent in enumerate(r.series_points("arrived_percent")):
            writer.writerow([r.trace, r.mode, r.policy, r.seed, percent, series["allocation_ratio"][i],
                             series["served_ratio"][i], series["fragmented_gpus"][i],
                             series["fragmentation_ratio"][i], over[i] if i < len(over) else ""])
    return out.getvalue()


EVENTS_COLUMNS = ("trace", "mode", "policy", "seed", "time_s", "allocation_ratio", "fragmented_gpus")


def events_csv(results: list[ExperimentResult]) -> str:
    """The events method's series (against the trace's time, not arrived demand), one row per event."""
    out = io.StringIO()
    writer = _SafeWriter(out)
    writer.writerow(EVENTS_COLUMNS)
    for r in results:
        if r.method != "events":
            continue
        series = r.series
        for i, when in enumerate(series["time_s"]):
            writer.writerow([r.trace, r.mode, r.policy, r.seed, when, series["allocation_ratio"][i],
                             series["fragmented_gpus"][i]])
    return out.getvalue()


def _events_plot(members: list[ExperimentResult], trace: str) -> Draw:
    """Allocation and fragmented GPUs over the trace's time, one line each per experiment."""
    def draw(axes: Any) -> None:
        for r in members:
            label = f"{r.policy} ({r.mode}, seed {r.seed})"
            line, = axes.step(r.series["time_s"], r.series["allocation_ratio"], where="post", label=label)
            axes.step(r.series["time_s"], [100 * f / r.gpus for f in r.series["fragmented_gpus"]],
                      where="post", linestyle="--", color=line.get_color())
        axes.set_xlabel("trace time (s)")
        axes.set_ylabel("% of GPU capacity")
        axes.set_title(f"{trace}: GPUs allocated (solid) and fragmented (dashed) over time")
        axes.legend(fontsize=8)
    return draw


def _mean_series(members: list[ExperimentResult], field: str) -> tuple[list[float], list[float]]:
    xs, ys, _, _ = _seed_spread(members, field)
    return xs, ys


def _seed_spread(members: list[ExperimentResult], field: str
                 ) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per arrived percent: the mean over seeds, and the lowest and highest seed."""
    values: dict[float, list[float]] = {}
    for r in members:
        for percent, value in zip(r.series_points("arrived_percent"), r.series_points(field)):
            values.setdefault(percent, []).append(value)
    xs = sorted(values)
    return (xs, [sum(values[x]) / len(values[x]) for x in xs], [min(values[x]) for x in xs],
            [max(values[x]) for x in xs])


def _zoom(axes: Any, lows: list[float], highs: list[float]) -> None:
    """The y axis spans the data shown (a 0-100 axis hides differences of a point), with a small margin."""
    if lows and highs:
        low, high = min(lows), max(highs)
        margin = max((high - low) * 0.08, 0.5)
        axes.set_ylim(low - margin, high + margin)


def _label(name: str, members: list[ExperimentResult]) -> str:
    seeds = len({r.seed for r in members})
    return f"{name} ({seeds} seed{'s' if seeds != 1 else ''}{', band: lowest to highest' if seeds > 1 else ''})"


# What each plot shows, as the report's caption (the file name says only which).
CAPTIONS = {
    "allocation": "GPU capacity allocated as the arrived GPU demand grows (the FGD paper's Figure 7 axes), from 60% "
                  "arrived demand on; mean over seeds, the band spans the lowest to the highest seed.",
    "fragmentation": "Fragmented GPUs by FGD's measure as demand arrives. The idle cluster already counts as "
                     "fragmented: FGD counts the free GPUs each typical task cannot use (its node lacks the CPU or "
                     "memory, or the task is pinned to another GPU model), weighted by the task's popularity.",
    "models": "Share of each GPU model's capacity allocated at 100% arrived demand, mean over seeds.",
    "device-plugin-vs-dra": "GPU demand served (not GPUs reserved) in device-plugin mode (dashed: a share holds a "
                            "whole GPU) and DRA mode (solid), from 50% arrived demand on.",
    "over-time": "GPUs allocated (solid) and fragmented (dashed) over the trace's time (--method events).",
}


# What each mode isolates, as the report says it: a row's SERVED% means something else without it.
ISOLATION_CAPTION = (
    "Isolation: dra gives each task its own GPUs or its own share of a GPU's compute (the claim's capacity), so "
    "no demand exceeds a GPU; device-plugin gives each task whole GPUs (a share holds a whole GPU: isolated, and "
    "the rest of the GPU idle); time-slicing gives replicas that isolate neither memory nor compute, so tasks on "
    "one GPU can ask more than it has: that excess is oversubscribed_ratio, left out of served_ratio.")


def plot_caption(name: str) -> str:
    """The caption of a plot file `TRACE-KIND.png`."""
    for kind, caption in sorted(CAPTIONS.items(), key=lambda item: -len(item[0])):
        if name.endswith(f"-{kind}.png"):
            return f"{name[:-len(kind) - 5]}: {caption}"
    return name


def _figure_png(draw: Draw) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=100)
    draw(axes)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()


def plots(results: list[ExperimentResult]) -> dict[str, bytes]:
    """file name -> PNG bytes."""
    tuned = [r for r in results if r.method == "tune" and r.series_points("arrived_percent")]
    out: dict[str, bytes] = {}
    for trace in dict.fromkeys(r.trace for r in tuned):
        of_trace = [r for r in tuned if r.trace == trace]
        groups: dict[tuple[str, str], list[ExperimentResult]] = {}
        for r in of_trace:
            groups.setdefault((r.mode, r.policy), []).append(r)
        dra = {policy: members for (mode, policy), members in groups.items() if mode == "dra"} or \
            {f"{policy} ({mode})": members for (mode, policy), members in groups.items()}

        def curves(field: str, ylabel: str, title: str, low: float | None = None) -> Draw:
            def draw(axes: Any) -> None:
                lows: list[float] = []
                highs: list[float] = []
                for label, members in dra.items():
                    xs, ys, bottom, top = _seed_spread(members, field)
                    shown = [i for i, x in enumerate(xs) if low is None or x >= low]
                    line, = axes.plot(xs, ys, label=_label(label, members))
                    if len({r.seed for r in members}) > 1:
                        axes.fill_between(xs, bottom, top, alpha=0.2, color=line.get_color(), linewidth=0)
                    lows.extend(bottom[i] for i in shown)
                    highs.extend(top[i] for i in shown)
                axes.set_xlabel("arrived GPU demand (% of capacity)")
                axes.set_ylabel(ylabel)
                axes.set_title(title)
                if low is not None:
                    axes.set_xlim(left=low)
                _zoom(axes, lows, highs)
                axes.legend(fontsize=8)
            return draw

        out[f"{trace}-allocation.png"] = _figure_png(curves(
            "allocation_ratio", "GPU allocation ratio (%)", f"{trace}: GPU allocation vs arrived demand", 60))
        out[f"{trace}-fragmentation.png"] = _figure_png(curves(
            "fragmented_gpus", "fragmented GPUs (FGD measure)", f"{trace}: fragmentation vs arrived demand"))

        def models(axes: Any) -> None:
            labels = list(dra)
            model_names = sorted({m for members in dra.values() for r in members for m in r.model_utilisation})
            width = 0.8 / max(1, len(labels))
            for i, label in enumerate(labels):
                values = [sum(r.model_utilisation.get(m, 0.0) for r in dra[label]) / len(dra[label])
                          for m in model_names]
                axes.bar([x + i * width for x in range(len(model_names))], values, width,
                         label=_label(label, dra[label]))
            axes.set_xticks([x + width * (len(labels) - 1) / 2 for x in range(len(model_names))], model_names)
            axes.set_xlabel("GPU model")
            axes.set_ylabel("GPU milli allocated (% of the model's capacity)")
            axes.set_title(f"{trace}: utilisation per GPU model at 100% arrived demand")
            # below the axes: inside, the legend covered the bars it names (a bar can reach any height)
            axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=min(3, max(1, len(labels))),
                        frameon=False)

        out[f"{trace}-models.png"] = _figure_png(models)
        modes = {mode for mode, _ in groups}
        if {"dra", "device-plugin"} <= modes:
            def versus(axes: Any) -> None:
                lows: list[float] = []
                highs: list[float] = []
                for (mode, policy), members in groups.items():
                    xs, ys, bottom, top = _seed_spread(members, "served_ratio")
                    line, = axes.plot(xs, ys, label=_label(f"{mode}: {policy}", members),
                                      linestyle="-" if mode == "dra" else "--")
                    if len({r.seed for r in members}) > 1:
                        axes.fill_between(xs, bottom, top, alpha=0.15, color=line.get_color(), linewidth=0)
                    lows.extend(b for x, b in zip(xs, bottom) if x >= 50)
                    highs.extend(t for x, t in zip(xs, top) if x >= 50)
                axes.set_xlabel("arrived GPU demand (% of capacity)")
                axes.set_ylabel("GPU demand served (% of capacity)")
                axes.set_title(f"{trace}: device plugin vs DRA")
                axes.set_xlim(left=50)
                _zoom(axes, lows, highs)
                axes.legend(fontsize=8)

            out[f"{trace}-device-plugin-vs-dra.png"] = _figure_png(versus)
    events = [r for r in results if r.method == "events" and r.series_points("time_s")]
    for trace in dict.fromkeys(r.trace for r in events):
        out[f"{trace}-over-time.png"] = _figure_png(_events_plot([r for r in events if r.trace == trace], trace))
    return out


def html_report(results: list[ExperimentResult], images: dict[str, bytes]) -> str:
    rows = summarize(results)
    head = "".join(f'<th title="{html.escape(c)}">{html.escape(COLUMN_HEADINGS[c])}</th>' for c in SUMMARY_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(row.get(c, '')))}</td>" for c in SUMMARY_COLUMNS)
                   + "</tr>" for row in rows)
    figures = "".join(
        f'<figure><img alt="{html.escape(plot_caption(name))}" data-plot="{html.escape(name)}" '
        f'src="data:image/png;base64,{base64.b64encode(data).decode()}"><figcaption>{html.escape(plot_caption(name))}'
        f"</figcaption></figure>"
        for name, data in images.items())
    return (
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>gpudra simulate</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:2px 6px;text-align:right}figure{display:inline-block;margin:1em}</style></head><body>"
        "<h1>gpudra simulate</h1><p>GPU demand served within the GPUs' capacity (served_ratio, the same measure "
        "in every mode), demand placed beyond it (oversubscribed_ratio) and GPUs reserved (allocation_ratio) at "
        "100% arrived GPU demand, mean over seeds with their spread (the FGD paper's workload-tuning method).</p>"
        f"<p>{html.escape(ISOLATION_CAPTION)}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{figures}"
        f'<script type="application/json" id="results">{html.escape(json.dumps(rows))}</script>'
        # after loading, the page states how many plots it shows (rendered, non-empty): checked by the tests
        "<script>window.addEventListener('load',function(){var i=document.querySelectorAll('img[data-plot]');"
        "var n=0;i.forEach(function(e){if(e.complete&&e.naturalWidth>0)n++;});"
        "document.body.setAttribute('data-plots-shown',n+'/'+i.length);});</script></body></html>")


def write_files(directory: str, files: dict[str, str | bytes]) -> list[str]:
    """Write each file (text as UTF-8) into `directory`, created if missing; returns the paths written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in files.items():
        path = out / name
        if isinstance(data, str):
            path.write_text(data, encoding="utf-8")
        else:
            path.write_bytes(data)
        written.append(str(path))
    return written


def write_outputs(results: list[ExperimentResult], directory: str) -> list[str]:
    """results.json, summary.csv, series.csv (events.csv for --method events), the PNG plots and report.html;
    returns the paths written."""
    files: dict[str, str | bytes] = {"results.json": json.dumps([r.to_json() for r in results], indent=1),
                                     "summary.csv": summary_csv(summarize(results)), "series.csv": series_csv(results)}
    if any(r.method == "events" for r in results):
        files["events.csv"] = events_csv(results)
    images = plots(results)
    files.update(images)
    files["report.html"] = html_report(results, images)
    return write_files(directory, files)
