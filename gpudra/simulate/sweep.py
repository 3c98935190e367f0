"""Many experiments (traces × modes × policies × seeds) in parallel on the local cores or on a Dask cluster,
and their summary.

Each experiment runs in its own worker process (`concurrent.futures.ProcessPoolExecutor`, or a Dask worker:
`distributed.py`); results are returned in the order of the experiment list whatever order they finish in, so
a sweep's output does not depend on `jobs` or on where it ran.
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from statistics import mean, pstdev
from typing import Any, Callable, Iterable

from .engine import DEFAULT_TUNE, run_experiment
from .manifests import Manifests, load_manifests, run_manifests
from .results import ExperimentResult
from .timeslicing import DEFAULT_REPLICAS
from .trace import Trace, bundled_trace, load_trace

FIRST_SEED = 42  # the artifact's seeds are 42..51


@dataclass(frozen=True)
class TraceSource:
    name: str
    nodes: str | None = None  # CSV paths; None = bundled
    pods: str | None = None
    manifests: tuple[str, ...] = ()  # or manifest files and directories (`manifests.py`)

    def load(self) -> "Trace | Manifests":
        if self.manifests:
            return load_manifests(list(self.manifests), self.name)
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
    kubernetes_version: str | None = None  # the release the scheduler and allocator behave as (None: newest)
    features: str | None = None  # --features over that release's default gates
    replicas: int = DEFAULT_REPLICAS  # time-slicing mode: replicas per GPU
    fail_requests_greater_than_one: bool = False  # time-slicing mode: the plugin refuses requests of > 1 replica
    path: str = "auto"  # engine.PATHS: which path places the pods

    @property
    def release(self) -> tuple[str | None, str | None] | None:
        return (self.kubernetes_version, self.features) if self.kubernetes_version or self.features else None


_TRACES: dict[TraceSource, "Trace | Manifests"] = {}  # per worker process: each trace is parsed once


def run_one(trace: "Trace | Manifests", experiment: Experiment,
            progress: Callable[[int, int], None] | None = None) -> ExperimentResult:
    """One experiment on its (already parsed) trace or manifests."""
    if isinstance(trace, Manifests):
        return run_manifests(trace, experiment.policy, experiment.seed, progress, experiment.release)
    return run_experiment(trace, experiment.policy, experiment.seed, experiment.mode, experiment.tune,
                          experiment.method, progress, experiment.release, experiment.replicas,
                          experiment.fail_requests_greater_than_one, experiment.path)


def _run(experiment: Experiment) -> ExperimentResult:
    return run_one(trace_of(experiment.source), experiment)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def trace_of(source: TraceSource) -> "Trace | Manifests":
    """The source's trace, parsed once per process."""
    trace = _TRACES.get(source)
    if trace is None:
        trace = _TRACES[source] = source.load()
    return trace


OnDone = Callable[[int, int, int, ExperimentResult], None]  # (experiment index, finished, total, result)


class SweepInterrupted(Exception):
    """Ctrl-C stopped the sweep: `finished` holds the results of the experiments that had ended, in the order of
    the experiment list, so they can still be written."""

    def __init__(self, finished: list[ExperimentResult], total: int):
        super().__init__(f"interrupted after {len(finished)} of {total} experiments")
        self.finished = finished
        self.total = total


def run_sweep(experiments: list[Experiment], jobs: int | None = None, on_done: OnDone | None = None,
              progress: Callable[[int, int], None] | None = None,
              dask_scheduler: str | None = None) -> list[ExperimentResult]:
    """Run every experiment; `on_done(index, finished, total, result)` after each. With `dask_scheduler` (an
    address such as tcp://host:8786) on that Dask cluster; else with one job (or one experiment) everything runs
    in this process and `progress(done, total)` reports tasks within the experiment. Ctrl-C raises
    SweepInterrupted once the workers are stopped."""
    results: list[ExperimentResult | None] = [None] * len(experiments)
    try:
        if dask_scheduler:
            from .distributed import run_on_dask

            traces = {e.source: trace_of(e.source) for e in experiments}
            run_on_dask(experiments, dask_scheduler, traces, results, on_done)
        elif (jobs or default_jobs()) <= 1 or len(experiments) <= 1:
            for index, experiment in enumerate(experiments):
                results[index] = result = run_one(trace_of(experiment.source), experiment, progress)
                if on_done is not None:
                    on_done(index, index + 1, len(experiments), result)
        else:
            _run_on_local_cores(experiments, jobs or default_jobs(), results, on_done)
    except KeyboardInterrupt:
        raise SweepInterrupted([r for r in results if r is not None], len(experiments)) from None
    return [result for result in results if result is not None]  # every one: each ran or raised


def _ignore_interrupts() -> None:
    # Ctrl-C reaches every process of the terminal's group: the workers leave it to the parent, which stops them
    # (a worker's KeyboardInterrupt would print a traceback and be taken for the experiment's failure).
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_on_local_cores(experiments: list[Experiment], jobs: int, results: list[ExperimentResult | None],
                        on_done: OnDone | None) -> None:
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(experiments)), initializer=_ignore_interrupts)
    try:
        futures = {pool.submit(_run, experiment): index for index, experiment in enumerate(experiments)}
        for finished, future in enumerate(as_completed(futures), start=1):
            index = futures[future]
            results[index] = result = future.result()
            if on_done is not None:
                on_done(index, finished, len(experiments), result)
    except BaseException:
        _stop_now(pool)
        raise
    pool.shutdown()


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """Stop a pool's workers mid-experiment: the queued experiments are cancelled and the running ones killed
    (ProcessPoolExecutor has no public way to end a running task before Python 3.14's terminate_workers)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
    try:
        workers = list((getattr(pool, "_processes", None) or {}).values())  # shutdown() forgets them
        pool.shutdown(wait=False, cancel_futures=True)
        for process in workers:
            if process.is_alive():
                process.terminate()
        for process in workers:
            process.join(timeout=1)
    finally:
        signal.signal(signal.SIGINT, previous)


def level_field(level: int) -> str:
    """The summary field of the demand served at `level`% arrived GPU demand."""
    return f"served_ratio_at_{level}"


def served_at(result: ExperimentResult, level: int) -> float | None:
    """An experiment's demand served (% of capacity) at `level`% arrived demand: its series' point (None where
    the arrived demand never reached that level, or for the events method)."""
    points = dict(zip(result.series_points("arrived_percent"), result.series_points("served_ratio")))
    return points.get(level)


def _present(values: "Iterable[float | None]") -> list[float]:
    return [value for value in values if value is not None]


def summarize(results: list[ExperimentResult], levels: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """Mean (and population standard deviation) over seeds, per (trace, mode, policy), in first-seen order.
    `levels`: also the mean demand served at those arrived-demand percents (`level_field`). The rows are the
    summary's table, CSV and JSON as printed."""
    groups: dict[tuple[str, str, str], list[ExperimentResult]] = {}
    for result in results:
        groups.setdefault((result.trace, result.mode, result.policy), []).append(result)
    rows = []
    for (trace, mode, policy), members in groups.items():
        ratios = _present(r.allocation_ratio for r in members)
        row: dict[str, Any] = {"trace": trace, "mode": mode, "policy": policy, "seeds": len(members),
                               "gpus": members[0].gpus, "tasks": round(mean(r.tasks for r in members), 1),
                               "scheduled": round(mean(r.scheduled for r in members), 1)}
        if ratios:
            row["allocation_ratio"] = round(mean(ratios), 2)
            row["allocation_ratio_std"] = round(pstdev(ratios), 2)
            row["unallocated_gpus"] = round(mean(_present(r.unallocated_gpus for r in members)), 1)
            served = _present(r.served_ratio for r in members)
            row["served_ratio"] = round(mean(served), 2) if served else None
            row["served_ratio_std"] = round(pstdev(served), 2) if served else None
            # GPUs no task's demand fills: the same measure in both modes (device-plugin rows reserve a whole
            # GPU for a share, so their allocation ratio counts GPUs reserved, not used)
            row["unserved_gpus"] = round(mean(r.gpus * (1 - r.served_ratio / 100) for r in members
                                              if r.served_ratio is not None), 1) if served else None
            frag = _present(r.fragmented_gpus for r in members)
            row["fragmented_gpus"] = round(mean(frag), 1) if frag else None
            # time-slicing: GPU demand placed beyond capacity (0 in the other modes, which cannot oversubscribe)
            over = _present(r.oversubscribed_ratio for r in members)
            row["oversubscribed_ratio"] = round(mean(over), 2) if over else None
            over_gpus = _present(r.oversubscribed_gpus for r in members)
            row["oversubscribed_gpus"] = round(mean(over_gpus), 1) if over_gpus else None
        for level in levels:
            at = [value for r in members if (value := served_at(r, level)) is not None]
            row[level_field(level)] = round(mean(at), 2) if len(at) == len(members) else None
        row["seconds"] = round(mean(r.seconds for r in members), 2)
        row["cpu_seconds"] = round(mean(r.cpu_seconds for r in members), 2)
        rows.append(row)
    return rows
