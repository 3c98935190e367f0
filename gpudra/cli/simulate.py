"""`gpudra simulate`: replay GPU cluster traces through gpudra's scheduler and allocator."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, NoReturn

import click

from gpudra.cli.errors import UsageError
from gpudra.cli.options import features_option, kubernetes_version_option
from gpudra.cli.output import output_option
from gpudra.simulate.engine import ALL_POLICIES, DEFAULT_TUNE, KNOWN_POLICIES, METHODS, PATHS, RENAMED_POLICIES
from gpudra.simulate.trace import BUNDLED_TRACES, DEFAULT_TRACE

if TYPE_CHECKING:  # pragma: no cover
    from gpudra.simulate.results import ExperimentResult


def _split(values: tuple[str, ...]) -> list[str]:
    """Comma-separated or repeated values, each once (a policy named twice is not a second seed)."""
    return list(dict.fromkeys(item.strip() for value in values for item in value.split(",") if item.strip()))


@click.command("simulate", short_help="Replay a GPU cluster trace (openb, bundled) through the scheduler.")
@click.option("--trace", "traces", multiple=True, metavar="NAME",
              help=f"Bundled trace(s), comma-separated or repeated: {', '.join(BUNDLED_TRACES)} "
                   f"[default: {DEFAULT_TRACE}].")
@click.option("--nodes", "nodes_csv", type=click.Path(dir_okay=False), default=None,
              help="Node list CSV (sn,cpu_milli,memory_mib,gpu,model) instead of a bundled trace; with --pods.")
@click.option("--pods", "pods_csv", type=click.Path(dir_okay=False), default=None,
              help="Task list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,creation_time,"
                   "deletion_time]); with --nodes.")
@click.option("-f", "--filename", "manifests", multiple=True, metavar="PATH",
              help="Manifest file or directory, repeatable: any cluster (Nodes, ResourceSlices, "
                   "DeviceClasses) and workload (Pods, claims, templates, workloads) replayed in queue order "
                   "(creationTimestamp where present, else file order) instead of a trace; gpudra's policies only.")
@click.option("--policy", "--policies", "policies", multiple=True, metavar="NAME",
              help=f"Scoring policies, comma-separated or repeated: {', '.join(KNOWN_POLICIES)}, or 'all' "
                   "(all but the -online variants, which learn task popularity from the tasks arrived so far) "
                   "[default: fgd; kube with -f]. fgd-reserve: FGD, its ties broken to keep scarce GPU models "
                   "and the hosts of whole-node tasks free (the simulator's 'fragmentation' before; with -f, "
                   "'fragmentation' is the scheduler's policy, as in gpudra schedule).")
@click.option("--seed", type=int, default=42, show_default=True, help="First seed (the paper's are 42..51).")
@click.option("--seeds", type=click.IntRange(1, None), default=1, show_default=True,
              help="How many seeds, from --seed on.")
@click.option("--mode", type=click.Choice(["dra", "device-plugin", "time-slicing", "both", "all"]), default="dra",
              show_default=True,
              help="dra: claims on shareable GPUs; device-plugin: count-only nvidia.com/gpu, a whole GPU per task; "
                   "time-slicing: the device plugin with --replicas per GPU, a share takes one replica and "
                   "demand can exceed a GPU; both: dra and device-plugin; all: the three.")
@click.option("--replicas", type=int, default=None,
              help="time-slicing: replicas of nvidia.com/gpu per GPU (the plugin's sharing.timeSlicing "
                   "replicas, at least 2) [default: 4].")
@click.option("--fail-requests-greater-than-one", is_flag=True, default=False,
              help="time-slicing: the plugin's failRequestsGreaterThanOne, a pod asking for more than one "
                   "replica fails admission.")
@click.option("--tune", type=float, default=DEFAULT_TUNE, show_default=True,
              help="Workload tuning: sample tasks until arrived GPU demand reaches this × capacity "
                   "(0: every task once; at most 10).")
@click.option("--method", type=click.Choice(METHODS), default="tune", show_default=True,
              help="tune: the paper's method; events: creation/deletion times of the trace.")
@click.option("--path", "path", type=click.Choice(PATHS), default="auto", show_default=True,
              help="Which path places the pods: fast (the node model, the same placements; DRA mode, the "
                   "paper's policies and fgd-reserve, simple task shapes), reference (every pod through gpudra's "
                   "scheduler and allocator, 10-30x the CPU), auto: fast where it applies.")
@click.option("--levels", default="", metavar="PERCENTS",
              help="Arrived-demand levels (% of capacity, e.g. 70,80,90,100) whose served share the table shows, "
                   "one column each, next to the one at 100%.")
@click.option("-j", "--jobs", type=click.IntRange(1, None), default=None,
              help="Experiments run in parallel [default: the usable CPU cores].")
@click.option("--dask-scheduler", metavar="ADDRESS", default=None,
              help="Run the experiments on this Dask distributed cluster (tcp://HOST:8786) instead of the local "
                   "cores; needs gpudra[distributed].")
@click.option("--out-dir", type=click.Path(file_okay=False), default=None,
              help="Write results.json, summary.csv, series.csv, PNG plots and report.html here.")
@click.option("--workload", type=click.Choice(["trace", "nvl72"]), default="trace", show_default=True,
              help="trace: replay --trace/--nodes/-f; nvl72: multi-node gang jobs on GB200 NVL72 racks (one pod "
                   "per tray, all pods or none), clique-aware vs clique-blind placement (policies: clique-aware, "
                   "clique-blind, clique-blind-binpack, clique-affinity; --method defaults to events).")
@click.option("--racks", type=click.IntRange(1, None), default=4, show_default=True,
              help="nvl72: racks of 18 trays x 4 GPUs, one NVLink clique each.")
@click.option("--gangs", "gangs_csv", type=click.Path(dir_okay=False), default=None,
              help="nvl72: gang trace CSV (name,pods,gpus_per_pod,arrival_s,duration_s) instead of the seeded "
                   "synthetic one.")
@click.option("--patience", type=click.IntRange(0, None), default=3600, show_default=True,
              help="nvl72 --method events: seconds a job waits for room before it gives up (not started).")
@click.option("--gang-placement", type=click.Choice(["replay", "scheduler"]), default=None,
              help="nvl72: who places the gangs: gpudra's scheduler and allocator on the trays as Nodes and "
                   "ResourceSlices (clique-aware, clique-blind, clique-affinity; ties drawn from the seed), or the "
                   "replay's own rules (every policy; fast). Default: the scheduler where it has the policy, the "
                   "replay's rule for clique-blind-binpack.")
@kubernetes_version_option("Schedule and allocate as this release (1.33-1.36; default 1.36): its default feature "
                           "gates. DRA mode shares GPUs through consumable capacity (DRAConsumableCapacity: alpha, "
                           "off by default in 1.34 and 1.35), which it then needs in --features.")
@features_option()
@output_option(formats=("table", "wide", "yaml", "json", "csv"),
               help="table: mean over seeds (wide: with tasks, scheduled and CPU seconds); json: one object per "
                    "experiment per line; yaml: the same objects as a `---` stream; csv: the summary.")
def command(traces: tuple[str, ...], nodes_csv: str | None, pods_csv: str | None, manifests: tuple[str, ...],
            policies: tuple[str, ...], seed: int, seeds: int, mode: str, replicas: int | None,
            fail_requests_greater_than_one: bool, tune: float, method: str, path: str, levels: str,
            jobs: int | None,
            dask_scheduler: str | None, out_dir: str | None, workload: str, racks: int, gangs_csv: str | None,
            patience: int, gang_placement: str | None, kubernetes_version: str | None, features: str, output: str) -> None:
    """Replay a trace of a GPU cluster: every task becomes a Pod (with a ResourceClaim in DRA mode), every node
    a Node with the ResourceSlices gpudra's driver publishes, and every placement goes through gpudra's scheduler
    and allocator (the paper's policies on a trace of its simple task shapes: an exact fast path on the same node
    model, tested pod by pod against them). Reports the GPU allocation ratio and the unallocated GPUs at 100% arrived GPU demand, the
    FGD paper's measure. Same seed, same result."""
    if workload == "nvl72" or _given("racks", "gangs_csv", "patience", "gang_placement"):
        _nvl72(traces, nodes_csv, manifests, policies, seed, seeds, mode, method, tune, out_dir, workload, racks,
               gangs_csv, patience, gang_placement, output)
        return
    from gpudra.simulate.distributed import DistributedError
    from gpudra.simulate.engine import SimulationError
    from gpudra.simulate.budget import SweepClock, cpu_share, predictions
    from gpudra.simulate.sweep import (Experiment, SweepInterrupted, TraceSource, default_jobs, run_sweep,
                                       trace_of)
    from gpudra.simulate.trace import TraceError

    from gpudra.scheduler.policies import POLICIES as GPUDRA_POLICIES

    usable = [p for p in GPUDRA_POLICIES] if manifests else list(KNOWN_POLICIES)
    chosen = _split(policies) or (["kube"] if manifests else ["fgd"])
    if "all" in chosen:
        chosen = usable if manifests else list(ALL_POLICIES)
    unknown = [p for p in chosen if p not in usable]
    renamed = [p for p in unknown if p in RENAMED_POLICIES]
    if renamed and not manifests:
        from gpudra.simulate.engine import SimulationError, check_trace_policy

        try:
            check_trace_policy(renamed[0])
        except SimulationError as exc:
            raise UsageError(str(exc)) from None
    if unknown:
        with_manifests = " with -f (the paper's policies need a trace)" if manifests else ""
        raise UsageError(f"unknown policy {unknown[0]!r}{with_manifests}; choose from {', '.join(usable)} or all")
    from gpudra.simulate.engine import check_tune

    try:
        check_tune(tune)
    except SimulationError as exc:
        raise UsageError(f"--{exc}") from None  # "--tune: must be …"
    given = click.get_current_context().get_parameter_source("tune") is not click.core.ParameterSource.DEFAULT
    if method == "events" and given:
        raise UsageError("--tune applies to --method tune; --method events replays the trace's own times")
    if (nodes_csv is None) != (pods_csv is None):
        raise UsageError("--nodes and --pods go together")
    if "-" in (nodes_csv, pods_csv):  # every experiment (and worker) reads the files itself
        raise UsageError("--nodes/--pods -: simulate reads traces from files, not stdin")
    sources: list[TraceSource] = []
    if manifests:
        if traces or nodes_csv:
            raise UsageError("use either -f (manifests) or --trace / --nodes and --pods")
        if mode != "dra" or method != "tune":
            raise UsageError("--mode and --method apply to traces; manifests are replayed as given")
        from pathlib import Path

        from gpudra.cli.inputs import read_inputs

        if "-" in manifests:  # every experiment (and worker) reads the files itself
            raise UsageError("-f -: simulate reads manifests from files or directories, not stdin")
        # unreadable or invalid manifests: the same errors (and exit codes) as gpudra schedule
        read_inputs(list(manifests), validate=True, command="simulate", has_no_validate=False)
        name = Path(manifests[-1]).stem or Path(manifests[-1]).name
        sources.append(TraceSource(name, manifests=tuple(manifests)))
    elif nodes_csv and pods_csv:
        if traces:
            raise UsageError("use either --trace or --nodes/--pods")
        from pathlib import Path

        sources.append(TraceSource(Path(pods_csv).stem, nodes_csv, pods_csv))
    else:
        names = _split(traces) or [DEFAULT_TRACE]
        for name in names:
            if name not in BUNDLED_TRACES:
                raise UsageError(f"unknown trace {name!r}; bundled: {', '.join(BUNDLED_TRACES)}")
        sources = [TraceSource(name) for name in names]
    try:
        for source in sources:
            trace_of(source)  # unreadable input is a usage error before any work starts (parsed once, kept)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    if out_dir:  # before the run, not after minutes of it
        _writable_directory(out_dir)
    modes = {"both": ["dra", "device-plugin"], "all": ["dra", "device-plugin", "time-slicing"]}.get(mode, [mode])
    replicas = _replicas(replicas, fail_requests_greater_than_one, "time-slicing" in modes)
    if manifests:
        modes = ["manifests"]
    version = _release(kubernetes_version, features, "dra" in modes)
    gates = None if features == "default" else features
    experiments = [Experiment(source, policy, s, m, tune, method, version, gates, replicas,
                              fail_requests_greater_than_one, path)
                   for source in sources for m in modes for policy in chosen for s in range(seed, seed + seeds)]
    shown_levels = _levels(levels)
    _check_path(experiments, trace_of)
    workers = min(jobs or default_jobs(), len(experiments))
    clock = SweepClock(predictions(experiments, trace_of), workers, cpu_share=cpu_share(workers))
    progress = SweepProgress(experiments, clock, dask_scheduler)
    progress.announce(len(sources), len(modes), len(chosen), seeds, out_dir)
    try:
        results = run_sweep(experiments, jobs, on_done=progress.experiment_done, progress=progress.task_done,
                            dask_scheduler=dask_scheduler)
    except (SimulationError, DistributedError) as exc:
        raise UsageError(str(exc)) from None
    except SweepInterrupted as stopped:
        progress.close()
        _interrupted(stopped, out_dir, output)
    finally:
        progress.close()
    if out_dir:
        _write(results, out_dir)
    for note in _empty_column_notes(results, tune):
        click.echo(f"note: {note}", err=True)
    _print(results, output, shown_levels)


def level_field(level: int) -> str:
    from gpudra.simulate.sweep import level_field as field

    return field(level)


def _levels(text: str) -> tuple[int, ...]:
    """`--levels 70,80,90`: whole percents from 1 to the tuning's reach, each once, in order."""
    levels: list[int] = []
    for part in _split((text,)):
        try:
            level = int(part)
        except ValueError:
            raise UsageError(f"--levels: {part!r} is not a whole percent (e.g. --levels 70,80,90,100)") from None
        if not 1 <= level <= 1000:
            raise UsageError(f"--levels: {level} is not a percent of capacity from 1 to 1000")
        if level not in levels:
            levels.append(level)
    return tuple(sorted(levels))


def _check_path(experiments: list[Any], trace_of: Any) -> None:
    """`--path fast` where the fast path does not apply is a usage error before any work starts."""
    from gpudra.simulate.engine import SimulationError, path_taken
    from gpudra.simulate.manifests import Manifests

    for experiment in experiments:
        trace = trace_of(experiment.source)
        if isinstance(trace, Manifests):
            if experiment.path == "fast":
                raise UsageError("--path fast: manifests are replayed through the scheduler (the reference path)")
            continue
        try:
            path_taken(trace, experiment.policy, experiment.mode, experiment.release, experiment.path)
        except SimulationError as exc:
            raise UsageError(str(exc)) from None


def _given(*names: str) -> bool:
    context = click.get_current_context()
    return any(context.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT for name in names)


def _nvl72(traces: tuple[str, ...], nodes_csv: str | None, manifests: tuple[str, ...], policies: tuple[str, ...],
           seed: int, seeds: int, mode: str, method: str, tune: float, out_dir: str | None, workload: str,
           racks: int, gangs_csv: str | None, patience: int, gang_placement: str | None, output: str) -> None:
    """`--workload nvl72` (gpudra/cli/simulate_gangs.py); the trace options do not apply."""
    from gpudra.cli.simulate_gangs import run_nvl72

    if workload != "nvl72":
        raise UsageError("--racks, --gangs, --patience and --gang-placement apply to --workload nvl72")
    if traces or nodes_csv or manifests:
        raise UsageError("--workload nvl72 replays gang jobs (--gangs or the synthetic trace), not --trace, "
                         "--nodes or -f")
    if mode != "dra" or _given("replicas", "fail_requests_greater_than_one", "kubernetes_version", "features",
                                "dask_scheduler", "path", "levels"):
        raise UsageError("--workload nvl72 places whole GPUs per tray: --mode, --replicas, --kubernetes-version, "
                         "--features, --path, --levels and --dask-scheduler do not apply")
    method = method if _given("method") else "events"
    if method == "events" and _given("tune"):
        raise UsageError("--tune applies to --method tune; --method events replays the jobs' own times")
    if method == "tune" and _given("patience"):
        raise UsageError("--patience applies to --method events; in --method tune a job that does not fit "
                         "when it arrives does not start")
    if out_dir:
        _writable_directory(out_dir)
    run_nvl72(racks=racks, gangs_csv=gangs_csv, policies=_split(policies), seed=seed, seeds=seeds, method=method,
              tune=tune, patience=patience, out_dir=out_dir, output=output,
              via_scheduler=None if gang_placement is None else gang_placement == "scheduler")


WIDE_LEVELS = (70, 80, 90)  # the levels -o wide shows without --levels


def _print(results: "list[ExperimentResult]", output: str, levels: tuple[int, ...] = ()) -> None:
    from gpudra.cli.output import echo_experiments
    from gpudra.simulate.report import summary_csv
    from gpudra.simulate.sweep import summarize

    shown = levels or (WIDE_LEVELS if output == "wide" else ())
    # -o json/yaml print each experiment's JSON form; the table and CSV summarize the records themselves
    echo_experiments([r.to_json() for r in results], output, lambda _: summarize(results, shown),
                     lambda rows: summary_csv(rows, shown), lambda rows, wide: _table(rows, wide, shown))


def _write(results: "list[ExperimentResult]", out_dir: str) -> None:
    from gpudra.simulate.report import write_outputs

    try:
        written = write_outputs(results, out_dir)
    except OSError as exc:
        raise UsageError(f"--out-dir {out_dir}: {_reason(exc)}") from None
    for path in written:
        click.echo(f"wrote {path}", err=True)


def _interrupted(stopped: Any, out_dir: str | None, output: str) -> NoReturn:
    """Ctrl-C: what finished is written and printed, then exit 130 as a shell reports SIGINT."""
    click.echo(f"interrupted: {len(stopped.finished)} of {stopped.total} experiments had finished", err=True)
    if stopped.finished:
        if out_dir:
            _write(stopped.finished, out_dir)
        _print(stopped.finished, output)
    raise click.exceptions.Exit(130)


def _release(kubernetes_version: str | None, features: str, dra: bool) -> str | None:
    """The release to simulate (None: the newest); DRA mode's shared GPUs need consumable capacity there."""
    from gpudra.allocator.features import Features
    from gpudra.versions import gate_state, parse_version

    if kubernetes_version is None and features == "default":
        return None
    version = parse_version(kubernetes_version)
    try:
        gates = Features.parse(features, version)
    except ValueError as exc:
        raise UsageError(f"--features: {exc}") from None
    if dra and not gates.consumable_capacity:
        raise UsageError(f"--mode dra shares GPUs through consumable capacity, which Kubernetes {version} leaves "
                         f"off (DRAConsumableCapacity: {gate_state('DRAConsumableCapacity', version).describe()}): "
                         "add --features default,+DRAConsumableCapacity if the cluster enables the gate, or use "
                         "--mode device-plugin")
    return version


def _replicas(replicas: int | None, fail_requests_greater_than_one: bool, time_slicing: bool) -> int:
    """--replicas (default 4), a usage error outside time-slicing or below the plugin's minimum of 2."""
    from gpudra.simulate.timeslicing import DEFAULT_REPLICAS, MIN_REPLICAS

    if not time_slicing and (replicas is not None or fail_requests_greater_than_one):
        option = "--replicas" if replicas is not None else "--fail-requests-greater-than-one"
        raise UsageError(f"{option} applies to --mode time-slicing (or all)")
    if replicas is None:
        return DEFAULT_REPLICAS
    if replicas < MIN_REPLICAS:
        raise UsageError(f"--replicas: NVIDIA's device plugin needs at least {MIN_REPLICAS} replicas per GPU "
                         f"(api/config/v1/replicas.go), not {replicas}")
    return replicas


def _writable_directory(path: str) -> None:
    """UsageError unless `path` is (or can be made) a directory this process can write in."""
    import os
    import tempfile

    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UsageError(f"--out-dir {path}: {_reason(exc)}") from None


def _reason(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    return reason[:1].lower() + reason[1:]  # "not a directory", as the loader words it


def _empty_column_notes(results: "list[ExperimentResult]", tune: float) -> list[str]:
    """Why a row's columns at 100% arrived demand are empty, once per (trace, mode, policy)."""
    notes: dict[str, str] = {}
    for r in results:
        key = f"{r.trace} {r.mode} {r.policy}"
        if r.allocation_ratio is not None or key in notes:
            continue
        if r.method == "events":
            notes[key] = (f"{key}: --method events has no arrived-demand axis, so nothing is measured at 100%; "
                          f"peak allocation {r.peak_allocation_ratio}% (-o json has the series over time)")
        elif r.method == "tune":
            reached = max(r.series_points("arrived_percent") or [0])
            notes[key] = (f"{key}: the arrived GPU demand reached {reached}% of capacity (--tune {tune:g}), "
                          "so nothing is measured at 100%; raise --tune above 1")
    return list(notes.values())


def _table(rows: list[dict], wide: bool = False, levels: tuple[int, ...] = ()) -> str:
    # Served demand first: one measure for both modes, the demand within the GPUs' capacity. OVERSUB% next to it
    # (time-slicing): GPU demand placed beyond the GPUs' capacity, % of capacity, which SERVED% leaves out (the
    # two add up to the demand placed). RESERVED% is the GPUs held (the paper's allocation ratio): equal to
    # SERVED% in DRA mode, where a share takes its own milli-GPUs, and higher with the device plugin, where a
    # share holds a whole GPU or a replica. FRAG-GPUS: FGD's measure over the GPUs' free compute. SERVED%@L: the
    # demand served when L% of the capacity had arrived (--levels).
    columns = [("TRACE", "trace"), ("MODE", "mode"), ("POLICY", "policy"), ("SEEDS", "seeds"), ("GPUS", "gpus"),
               *[(f"SERVED%@{level}", level_field(level)) for level in levels],
               ("SERVED%@100", "served_ratio"), ("OVERSUB%", "oversubscribed_ratio"), ("STD", "served_ratio_std"),
               ("UNSERVED-GPUS", "unserved_gpus"), ("RESERVED%", "allocation_ratio"),
               ("FRAG-GPUS", "fragmented_gpus"), ("SECONDS", "seconds")]
    if 100 in levels:  # shown once, at its usual place
        columns.remove(("SERVED%@100", level_field(100)))
    if wide:
        columns[5:5] = [("TASKS", "tasks"), ("SCHEDULED", "scheduled")]
        columns[-2:-2] = [("RESERVED-STD", "allocation_ratio_std"), ("UNRESERVED-GPUS", "unallocated_gpus")]
        after = columns.index(("OVERSUB%", "oversubscribed_ratio")) + 1
        columns[after:after] = [("OVERSUB-GPUS", "oversubscribed_gpus")]
        columns.append(("CPU-SECONDS", "cpu_seconds"))
    cells = [[h for h, _ in columns]] + [["-" if row.get(k) is None else str(row.get(k)) for _, k in columns]
                                         for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


class SweepProgress:
    """What a person waiting on a sweep sees on stderr: the experiment count and an estimate before it starts,
    then after each experiment how many are done and about how long is left (`gpudra/simulate/budget.py`: the
    estimate recalibrates to the measured times). On a terminal one line is redrawn; in a log, a line per
    experiment. One experiment alone shows a bar over its tasks on a terminal, as before."""

    def __init__(self, experiments: list[Any], clock: Any, dask_scheduler: str | None):
        self.experiments = experiments
        self.clock = clock
        self.dask = dask_scheduler
        self.terminal = sys.stderr.isatty()
        self.started = time.monotonic()
        self.bar: Any = None  # the task bar of a single experiment
        self.last = 0
        self.line = False  # a redrawn line is on the terminal

    def announce(self, traces: int, modes: int, policies: int, seeds: int, out_dir: str | None) -> None:
        from gpudra.simulate.budget import duration

        total = len(self.experiments)
        if total <= 1:
            return
        shape = " × ".join(f"{n} {one if n == 1 else many}" for n, one, many in
                           ((traces, "trace", "traces"), (modes, "mode", "modes"), (policies, "policy", "policies"),
                            (seeds, "seed", "seeds")))
        where = "on the Dask cluster" if self.dask else f"{self.clock.workers} at a time"
        cpu = sum(self.clock.predicted)
        loaded = self.clock.cpu_share < 0.95  # the machine's other work shares the cores (budget.cpu_share)
        estimate = (f"about {duration(cpu)} of CPU" if self.dask
                    else f"about {duration(self.clock.total_seconds())}"
                    + (f" (this machine's other work leaves each worker about {self.clock.cpu_share:.0%} of a core)"
                       if loaded else ""))
        keep = " and keeps the finished ones in --out-dir" if out_dir else " and prints the finished ones"
        click.echo(f"{total} experiments ({shape}), {where}: {estimate} (estimated from the CPU time measured "
                   f"per task; the ETA follows this machine's own times). Ctrl-C stops{keep}.", err=True)

    def task_done(self, done: int, total: int) -> None:  # one experiment in this process: its tasks
        if len(self.experiments) > 1 or not self.terminal:
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label="tasks", file=sys.stderr)
            self.bar.__enter__()
        if done - self.last >= 50 or done == total:
            self.bar.update(done - self.last)
            self.last = done

    def experiment_done(self, index: int, done: int, total: int, result: "ExperimentResult") -> None:
        from gpudra.simulate.budget import duration

        self.clock.finished(index, result.seconds)
        if total <= 1:
            return
        elapsed = time.monotonic() - self.started
        left = self.clock.remaining_seconds(elapsed)
        status = (f"{done}/{total} experiments, {duration(elapsed)} elapsed"
                  + (f", about {duration(left)} left" if done < total else ""))
        if self.terminal:
            click.echo(f"\r\x1b[K{status}", err=True, nl=done == total)
            self.line = done < total
        else:
            e = self.experiments[index]
            click.echo(f"[{done}/{total}] {e.source.name} {e.mode} {e.policy} seed {e.seed}: "
                       f"{duration(result.seconds)}"
                       + (f"; about {duration(left)} left" if done < total else ""), err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
        if self.line:
            click.echo("", err=True)
            self.line = False
