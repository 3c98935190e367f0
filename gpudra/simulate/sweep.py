"""Many experiments (traces × modes × policies × seeds) in parallel on the local cores, and their summary.

Each experiment runs in its own worker process (`concurrent.futures.ProcessPoolExecutor`); results are
returned in the order of the experiment list whatever order they finish in, so a sweep's output does not
depend on `jobs`.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from statistics import mean, pstdev
from typing import Any, Callable

from .engine import DEFAULT_TUNE, run_experiment
from .trace import Trace, bundled_trace, load_trace

FIRST_SEED = 42  # the artifact's seeds are 42..51


@dataclass(frozen=True)
class TraceSource:
    name: str
    nodes: str | None = None  # CSV paths; None = bundled
    pods: str | None = None

    def load(self) -> Trace:
        if self.nodes is None or self.pods is None:
            return bundled_trace(self.name)
        return load_trace(self.nodes, self.pods, self.name)


@dataclass(frozen=True)
class Experiment:
    source: TraceSource
    policy: str
    seed: int
    mode: str = "dra"
    tune: float = DEFAULT_TUNE
    method: str = "tune"


_TRACES: dict[TraceSource, Trace] = {}  # per worker process: each trace is parsed once


def _run(experiment: Experiment) -> dict[str, Any]:
    trace = _TRACES.get(experiment.source)
    if trace is None:
        trace = _TRACES[experiment.source] = experiment.source.load()
    return run_experiment(trace, experiment.policy, experiment.seed, experiment.mode, experiment.tune,
                          experiment.method)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def run_sweep(experiments: list[Experiment], jobs: int | None = None,
              on_done: Callable[[int, int, dict[str, Any]], None] | None = None,
              progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Run every experiment; `on_done(finished, total, result)` after each. With one job (or one experiment)
    everything runs in this process and `progress(done, total)` reports tasks within the experiment."""
    jobs = jobs or default_jobs()
    results: list[dict[str, Any] | None] = [None] * len(experiments)
    if jobs <= 1 or len(experiments) <= 1:
        for index, experiment in enumerate(experiments):
            trace = _TRACES.get(experiment.source) or _TRACES.setdefault(experiment.source, experiment.source.load())
            results[index] = run_experiment(trace, experiment.policy, experiment.seed, experiment.mode,
                                            experiment.tune, experiment.method, progress)
            if on_done is not None:
                on_done(index + 1, len(experiments), results[index])  # type: ignore[arg-type]
        return results  # type: ignore[return-value]
    with ProcessPoolExecutor(max_workers=min(jobs, len(experiments))) as pool:
        futures = {pool.submit(_run, experiment): index for index, experiment in enumerate(experiments)}
        for finished, future in enumerate(as_completed(futures), start=1):
            index = futures[future]
            results[index] = future.result()
            if on_done is not None:
                on_done(finished, len(experiments), results[index])  # type: ignore[arg-type]
    return results  # type: ignore[return-value]


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean (and population standard deviation) over seeds, per (trace, mode, policy), in first-seen order."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for result in results:
        groups.setdefault((result["trace"], result["mode"], result["policy"]), []).append(result)
    rows = []
    for (trace, mode, policy), members in groups.items():
        ratios = [r["allocation_ratio"] for r in members if r.get("allocation_ratio") is not None]
        row: dict[str, Any] = {"trace": trace, "mode": mode, "policy": policy, "seeds": len(members),
                               "gpus": members[0]["gpus"]}
        if ratios:
            row["allocation_ratio"] = round(mean(ratios), 2)
            row["allocation_ratio_std"] = round(pstdev(ratios), 2)
            row["unallocated_gpus"] = round(mean(r["unallocated_gpus"] for r in members
                                                 if r.get("unallocated_gpus") is not None), 1)
            served = [r["served_ratio"] for r in members if r.get("served_ratio") is not None]
            row["served_ratio"] = round(mean(served), 2) if served else None
            frag = [r["fragmented_gpus"] for r in members if r.get("fragmented_gpus") is not None]
            row["fragmented_gpus"] = round(mean(frag), 1) if frag else None
        row["seconds"] = round(mean(r["seconds"] for r in members), 2)
        row["cpu_seconds"] = round(mean(r["cpu_seconds"] for r in members), 2)
        rows.append(row)
    return rows
