"""What one experiment measured: the record `run_experiment` and `run_manifests` return and the sweep, the
report, the CLI and the benchmarks read.

`to_json` is the one place its JSON form (`simulate -o json`, results.json) is written: per method, the fields
that method measures, in a fixed order, so the output reads as it always has.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

# The series an experiment records, by name: the x axis (`arrived_percent` for --method tune, `time_s` for events,
# `pods_percent` for manifests) and the measures at each point.
Series = Mapping[str, Sequence[float]]


@dataclass(frozen=True)
class Unschedulable:
    """A pod of a manifest replay that found no node, and the scheduler's reason."""

    pod: str
    message: str


@dataclass(frozen=True)
class ExperimentResult:
    """One experiment: a trace (or manifests) replayed with one policy, seed and mode.

    The figures at 100% arrived GPU demand (the FGD paper's measure) are None where the run never got there
    (--method events, or a tuning below 1); `peak_*` are the events method's."""

    trace: str
    mode: str
    policy: str
    seed: int
    method: str  # "tune", "events" or "manifests"
    tune: float | None  # the tuning target (× capacity) for --method tune
    nodes: int
    gpus: int
    tasks: int  # tasks (pods) submitted
    scheduled: int
    unscheduled: int
    allocation_ratio: float | None  # GPU capacity reserved, %: the paper's allocation ratio
    unallocated_gpus: float | None
    series: Series
    seconds: float
    cpu_seconds: float
    served_ratio: float | None = None  # GPU demand served within capacity, %
    fragmented_gpus: float | None = None  # FGD's measure, in GPUs
    fragmentation_ratio: float | None = None  # fragmented / free GPU milli, %
    oversubscribed_ratio: float | None = None  # time-slicing: demand placed beyond capacity, % of capacity
    oversubscribed_gpus: float | None = None
    peak_allocation_ratio: float | None = None
    peak_oversubscribed_ratio: float | None = None
    model_utilisation: Mapping[str, float] = field(default_factory=dict)  # GPU model -> % used
    path: str | None = None  # "fast" or "reference" (traces)
    replicas: int | None = None  # time-slicing: replicas per GPU
    fail_requests_greater_than_one: bool | None = None
    unschedulable: tuple[Unschedulable, ...] = ()  # manifests
    warnings: tuple[str, ...] = ()  # manifests: what the controllers could not expand

    def timeless(self) -> ExperimentResult:
        """The record with its timings zeroed: what the trace, policy, seed and mode determine."""
        return replace(self, seconds=0.0, cpu_seconds=0.0)

    def series_points(self, name: str) -> Sequence[float]:
        """One series by name (empty where this experiment does not record it)."""
        return self.series.get(name) or ()

    def to_json(self) -> dict[str, Any]:
        """The JSON object of `simulate -o json` and results.json."""
        head: dict[str, Any] = {
            "trace": self.trace, "mode": self.mode, "policy": self.policy, "seed": self.seed, "method": self.method,
            "tune": self.tune, "nodes": self.nodes, "gpus": self.gpus, "tasks": self.tasks,
            "scheduled": self.scheduled, "unscheduled": self.unscheduled, "allocation_ratio": self.allocation_ratio,
            "unallocated_gpus": self.unallocated_gpus}
        series = {name: list(points) for name, points in self.series.items()}
        times = {"seconds": self.seconds, "cpu_seconds": self.cpu_seconds}
        if self.method == "manifests":
            return {**head, "unschedulable": [{"pod": u.pod, "message": u.message} for u in self.unschedulable],
                    "warnings": list(self.warnings), "series": series, **times}
        if self.method == "events":
            return {**head, "peak_allocation_ratio": self.peak_allocation_ratio,
                    "peak_oversubscribed_ratio": self.peak_oversubscribed_ratio,
                    "model_utilisation": dict(self.model_utilisation), "path": self.path, "series": series, **times}
        tuned = {**head, "served_ratio": self.served_ratio, "fragmented_gpus": self.fragmented_gpus,
                 "fragmentation_ratio": self.fragmentation_ratio, "oversubscribed_ratio": self.oversubscribed_ratio,
                 "oversubscribed_gpus": self.oversubscribed_gpus, "model_utilisation": dict(self.model_utilisation),
                 "series": series}
        if self.replicas is not None:
            tuned["replicas"] = self.replicas
            tuned["fail_requests_greater_than_one"] = self.fail_requests_greater_than_one
        return {**tuned, "path": self.path, **times}
