"""How long a sweep will take: an estimate before it starts, and an ETA that follows the measured times.

The estimate is the number of tasks each experiment submits (computed exactly: the workload tuning is cheap and
deterministic per seed) times a CPU cost per submitted task per policy and mode, measured on the 2-vCPU
development machine with `benchmarks/simulate.py` (the default openb trace, 1,213 nodes, 6,212 GPUs, seed 42,
tuned to 1.3 × capacity). Machines and loads differ, so once experiments finish the ETA calibrates: every
finished experiment's wall seconds against its estimate gives the speed of this machine under this load, and
what is left is re-estimated at that speed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .engine import SimulationError, path_taken, tuned_workload
from .trace import MILLI, Trace

if TYPE_CHECKING:  # pragma: no cover
    from .sweep import Experiment, TraceSource

# CPU milliseconds per submitted task (setup included), `python benchmarks/simulate.py --mode M --policy P`
# for every policy (10,771 tasks each), 2026-12-03 22:20-23:25 UTC on the 2-vCPU KVM development machine with other
# work running (load 5-10; process CPU time, which that load inflates less than wall time). DRA mode's paper
# policies and `fgd-reserve` take the fast path (fastpath.py): measured again 2026-12-04 04:10-04:36 UTC, same
# machine, load 5-9, niced (per experiment: fgd 2.2 s, fgd-reserve 5.4 s, bestfit 1.2 s, random 1.5 s,
# dotprod 1.2 s, gpu-clustering 1.6 s, gpu-packing 1.2 s). fgd and fgd-reserve (with its hosting reserve) again
# 2026-12-07 15:31-15:33 UTC, same machine, load 3-6: the mean CPU per task over the five bundled traces × ten
# seeds of `gpudra simulate --trace default,cpu100,gpushare40,gpuspec10,multigpu30 --policies fgd,fgd-reserve
# --seeds 10 -j 2` (fgd 0.10 ms, 1.1 s per default-trace experiment; fgd-reserve 0.18 ms, 1.8 s), which the
# earlier numbers (0.206 and 0.504) overestimated 2.5-fold.
PER_TASK_CPU_MS: dict[str, dict[str, float]] = {
    "dra": {"random": 0.14, "dotprod": 0.108, "gpu-clustering": 0.148, "gpu-packing": 0.109, "bestfit": 0.115,
            "fgd": 0.102, "kube": 5.82, "binpack": 2.78, "fgd-reserve": 0.177},
    "device-plugin": {"random": 3.38, "dotprod": 2.58, "gpu-clustering": 2.66, "gpu-packing": 2.78, "bestfit": 2.56,
                      "fgd": 3.01, "kube": 3.18, "binpack": 3.05, "fgd-reserve": 4.95},
}
# fgd-reserve-online (always the reference path): 113.7 s of CPU for seed 42 of the default trace where
# `fgd-reserve` took 70.3 s on the reference path in the same hour (2026-12-04 04:00-04:15 UTC, load 8-11): a
# ratio of 1.62, used for both online variants in REFERENCE_DRA_CPU_MS below
# time-slicing: device-plugin's numbers (the same scheduler work plus the plugin's replica pick per task). fgd in
# both measured again 2026-12-07 15:35-15:38 UTC, same machine, load 2-7, seed 42 of the default trace (`gpudra
# simulate --mode M --policy fgd -j 1`): device-plugin 14.8 s of CPU (the 2.56-3.38 above were measured before
# the scheduler's own fast paths and overestimate about 2-fold), time-slicing 14.2 s.
PER_TASK_CPU_MS["device-plugin"]["fgd"] = 1.38
PER_TASK_CPU_MS["time-slicing"] = {**PER_TASK_CPU_MS["device-plugin"], "fgd": 1.32}
# DRA mode on the reference path (`--path reference`, `--kubernetes-version`, `--features`): every placement through
# the scheduler and allocator. fgd and fgd-reserve measured 2026-12-07 15:35-15:38 UTC, same machine, load 4-7,
# seed 42 of the default trace (`gpudra simulate --policy P --path reference -j 1`): 21.4 and 25.2 s of CPU; the
# online variants: those times fgd-reserve-online's ratio to fgd-reserve measured 2026-12-04 (1.62, above);
# the other paper policies: device-plugin mode's numbers (the same scheduler work; an overestimate, as fgd's was).
REFERENCE_DRA_CPU_MS: dict[str, float] = {
    **{policy: PER_TASK_CPU_MS["device-plugin"][policy]
       for policy in ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit")},
    "fgd": 1.99, "fgd-reserve": 2.34, "fgd-online": 3.22, "fgd-reserve-online": 3.79,
    "kube": PER_TASK_CPU_MS["dra"]["kube"], "binpack": PER_TASK_CPU_MS["dra"]["binpack"]}
MANIFEST_POD_CPU_MS = 2.0  # a pod of a manifest replay: gpudra's own policies, about the scheduler's cost


def planned_tasks(trace: Any, experiment: "Experiment") -> int:
    """How many tasks (pods) the experiment submits: exact for traces, the pods for manifests."""
    if not isinstance(trace, Trace):
        return sum(1 for o in getattr(trace, "objects", []) if o.get("kind") == "Pod")
    if experiment.method != "tune":
        return len(trace.tasks)
    return len(tuned_workload(trace.tasks, trace.gpus * MILLI, experiment.tune, random.Random(experiment.seed)))


def predicted_cpu_seconds(trace: Any, experiment: "Experiment", tasks: int | None = None) -> float:
    tasks = planned_tasks(trace, experiment) if tasks is None else tasks
    if not isinstance(trace, Trace):
        return tasks * MANIFEST_POD_CPU_MS / 1000
    per_task = PER_TASK_CPU_MS.get(experiment.mode, PER_TASK_CPU_MS["dra"])
    if experiment.mode == "dra" and path_of(trace, experiment) == "reference":
        per_task = REFERENCE_DRA_CPU_MS
    return tasks * per_task.get(experiment.policy, max(per_task.values())) / 1000


def path_of(trace: Trace, experiment: "Experiment") -> str:
    """The path the experiment runs on (`engine.path_taken`); a refused `--path fast` is the caller's error, so it
    is estimated as the reference path here."""
    try:
        return path_taken(trace, experiment.policy, experiment.mode, experiment.release, experiment.path)
    except SimulationError:
        return "reference"


def predictions(experiments: list["Experiment"], trace_of: Any) -> list[float]:
    """Predicted CPU seconds per experiment. Task counts differ little between seeds, so each (trace, method,
    tune) is counted once, with its first experiment's seed."""
    counted: dict[tuple["TraceSource", str, float], int] = {}
    out = []
    for experiment in experiments:
        key = (experiment.source, experiment.method, experiment.tune)
        trace = trace_of(experiment.source)
        if key not in counted:
            counted[key] = planned_tasks(trace, experiment)
        out.append(predicted_cpu_seconds(trace, experiment, counted[key]))
    return out


def duration(seconds: float) -> str:
    """`45 s`, `12 min`, `3 h 50 min`: rounded as a person reads an estimate."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def cpu_share(workers: int, cores: int | None = None, load: float | None = None) -> float:
    """The share of a core each of `workers` processes gets while the machine runs `load` other runnable
    processes (the 1-minute load average) on `cores`: the scheduler shares the cores among all of them. A sweep
    estimated at 9 s on an idle machine took 66 s beside a build (issue 35): the load was the difference."""
    import os

    cores = cores or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not on every platform
            load = 0.0
    return min(1.0, cores / max(1e-9, workers + max(0.0, load)))


@dataclass
class SweepClock:
    """The ETA of a sweep whose experiments run `workers` at a time.

    Work is counted in seconds of one worker: finished experiments by their measured wall seconds, the others
    by their prediction times the speed seen so far (measured / predicted over the finished ones; 1 before any
    has finished). The sweep ends after about (all work) / workers of wall time; the ETA is that less what has
    passed."""

    predicted: list[float]
    workers: int
    measured: dict[int, float] = field(default_factory=dict)
    # The share of a core each worker gets, before anything is measured: 1 on an idle machine, less where other
    # work keeps the cores busy (cpu_share). The predictions are CPU seconds; wall seconds stretch by 1 / share.
    cpu_share: float = 1.0

    def finished(self, index: int, wall_seconds: float) -> None:
        self.measured[index] = max(0.0, wall_seconds)

    @property
    def speed(self) -> float:
        predicted = sum(self.predicted[i] for i in self.measured)
        if predicted > 0 and self.measured:
            return sum(self.measured.values()) / predicted
        return 1.0 / min(1.0, max(self.cpu_share, 0.01))

    def total_seconds(self) -> float:
        """Wall seconds the whole sweep takes, as far as is known now."""
        speed = self.speed
        work = sum(self.measured.values()) + sum(p * speed for i, p in enumerate(self.predicted)
                                                 if i not in self.measured)
        parallel = max(1, min(self.workers, len(self.predicted)))
        longest = max((self.measured.get(i, p * speed) for i, p in enumerate(self.predicted)), default=0.0)
        return max(work / parallel, longest)

    def remaining_seconds(self, elapsed: float) -> float:
        if len(self.measured) == len(self.predicted):
            return 0.0
        return max(0.0, self.total_seconds() - elapsed)
