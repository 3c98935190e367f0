"""GB200 NVL72 racks and multi-node (gang) jobs for the simulator (issue 25).

Facts (public): a GB200 NVL72 rack holds 18 compute trays, each a Kubernetes node with 4 Blackwell GPUs (two
Grace CPUs with two GPUs each: the `gb200-nvl72` node profile); NVSwitch trays join all 72 GPUs into one NVLink
domain. NVML reports each GPU's fabric clique as "<clusterUuid>.<cliqueId>" (GPU Feature Discovery's
`nvidia.com/gpu.clique` label); GPUs of one clique talk over NVLink, a clique never spans racks
(NVIDIA/topograph PR 496), and a rack split by fabric-manager partitioning has one clique per partition
(NVIDIA DRA driver's FabricManagerPartitioning gate). A ComputeDomain (NVIDIA/k8s-dra-driver-gpu) runs one IMEX
daemon per node its workload lands on, and its channel works only among nodes of one clique: a job across two
racks does not get multi-node NVLink (kubernetes-sigs/dra-driver-nvidia-gpu issues 377, 804).

A gang job is `pods` pods (a ComputeDomain's `numNodes`), each asking for `gpus_per_pod` GPUs of one tray, on
distinct trays (one pod per tray, as a ComputeDomain workload is laid out), all or nothing.

Gang trace CSV: `name, pods, gpus_per_pod, arrival_s, duration_s` (times in seconds, whole numbers).
No public trace of NVL72 jobs exists; `synthetic_gangs` draws one from the documented distribution below.
"""

from __future__ import annotations

import csv
import io
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpudra.discovery.profiles import RACK_PROFILE, TRAYS_PER_RACK_MAX, node_profile
from gpudra.discovery.profiles import rack_clique as fabric_clique

from .trace import TraceError, _int, _rows

NVL72_PROFILE = RACK_PROFILE  # the simulated tray, as `gpudra cluster up --racks` runs it
TRAYS_PER_NVL72_RACK = TRAYS_PER_RACK_MAX  # 18 compute trays x 4 GPUs = the 72 GPUs of an NVL72 rack
MAX_RACKS = 250  # 4,500 trays: within Kubernetes' 5,000-node limit (trace.MAX_TRACE_NODES)
MAX_GANG_JOBS = 200_000


def gpus_per_tray() -> int:
    """GPUs of one NVL72 compute tray: the simulated profile's, one copy of the fact."""
    return len(node_profile(NVL72_PROFILE).gpus)


@dataclass(frozen=True)
class Tray:
    name: str
    clique: str  # "<clusterUuid>.<cliqueId>"
    gpus: int


@dataclass(frozen=True)
class Topology:
    """Trays in a fixed order (a tray's index is its identity in placements) and the cliques they form."""

    name: str
    trays: tuple[Tray, ...]

    @property
    def cliques(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.clique for t in self.trays))

    @property
    def gpus(self) -> int:
        return sum(t.gpus for t in self.trays)


def rack_clique(rack: int, partition: int = 0) -> str:
    """Rack `rack`'s clique ID, as the local cluster's racks have it (`discovery.profiles.rack_clique`: rack 0 is
    the simulated driver's own, every rack its own cluster UUID); partitions of a rack are clique IDs 1, 2, ...
    under the rack's cluster UUID."""
    clique = fabric_clique(rack)
    if partition == 0:
        return clique
    cluster_uuid, _ = clique.split(".")
    return f"{cluster_uuid}.{partition + 1}"


def nvl72_racks(racks: int, cliques_per_rack: int = 1, trays_per_rack: int = TRAYS_PER_NVL72_RACK,
                gpus: int | None = None) -> Topology:
    """`racks` NVL72 racks; `cliques_per_rack` > 1 splits each rack's trays into that many equal partitions.
    `trays_per_rack` and `gpus` (per tray) other than the NVL72's make the small racks the tests search."""
    if not 1 <= racks <= MAX_RACKS:
        raise TraceError(f"racks: must be from 1 to {MAX_RACKS}, not {racks}")
    if cliques_per_rack < 1 or trays_per_rack % cliques_per_rack:
        raise TraceError(f"cliques per rack: {cliques_per_rack} does not divide the rack's {trays_per_rack} trays")
    per_tray = gpus_per_tray() if gpus is None else gpus
    size = trays_per_rack // cliques_per_rack
    trays = tuple(Tray(f"rack{r:02d}-tray{t:02d}", rack_clique(r, t // size), per_tray)
                  for r in range(racks) for t in range(trays_per_rack))
    return Topology(f"{racks}x-nvl72" if trays_per_rack == TRAYS_PER_NVL72_RACK else f"{racks}x{trays_per_rack}",
                    trays)


@dataclass(frozen=True)
class GangJob:
    name: str
    pods: int  # one per tray
    gpus_per_pod: int
    arrival: int = 0  # seconds from the trace's start
    duration: int = 3600

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod

    @property
    def size(self) -> tuple[int, int]:
        return (self.pods, self.gpus_per_pod)


@dataclass(frozen=True)
class GangTrace:
    name: str
    jobs: tuple[GangJob, ...]
    source: str  # where the jobs came from, said in every result


# The synthetic distribution (no public NVL72 trace exists; these are our assumptions, stated as such):
# trays per job, and GPUs per pod for single-tray and for multi-tray jobs (multi-node jobs mostly take whole
# trays), durations log-normal (median 30 min, sigma 1, clipped to 1 min..24 h), Poisson arrivals whose rate makes
# the offered load (GPU-seconds asked per GPU-second of capacity) `load`.
SYNTHETIC_PODS = {1: 0.40, 2: 0.20, 4: 0.20, 8: 0.12, 16: 0.08}
SYNTHETIC_GPUS_SINGLE = {1: 0.25, 2: 0.25, 4: 0.50}
SYNTHETIC_GPUS_MULTI = {2: 0.20, 4: 0.80}
SYNTHETIC_MEDIAN_S = 1800
SYNTHETIC_SIGMA = 1.0
SYNTHETIC_DURATION_RANGE_S = (60, 86_400)
SYNTHETIC_JOBS_PER_RACK = 150
SYNTHETIC_LOAD = 0.9


def _shares(weights: dict[int, float]) -> str:
    return "{" + ", ".join(f"{k}:{round(100 * v)}%" for k, v in weights.items()) + "}"


def synthetic_source(load: float, seed: int) -> str:
    """What a synthetic trace was drawn from, said in every result (from the constants above: one copy)."""
    low, high = SYNTHETIC_DURATION_RANGE_S
    return (f"synthetic (no public NVL72 trace): trays per job {_shares(SYNTHETIC_PODS)}; GPUs per pod "
            f"{_shares(SYNTHETIC_GPUS_SINGLE)} for one tray, {_shares(SYNTHETIC_GPUS_MULTI)} for more; durations "
            f"log-normal (median {SYNTHETIC_MEDIAN_S} s, sigma {SYNTHETIC_SIGMA:g}, {low}..{high} s); Poisson "
            f"arrivals at offered load {load:g}; seed {seed}")


def _draw(rng: random.Random, weights: dict[int, float]) -> int:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def synthetic_gangs(topology: Topology, seed: int, jobs: int | None = None,
                    load: float = SYNTHETIC_LOAD) -> GangTrace:
    """A seeded gang trace for `topology` from the distribution above (`jobs`: default 150 per rack).
    Job sizes never exceed the largest clique or a tray, so every job fits an empty cluster."""
    if not 0 < load <= 10:
        raise TraceError(f"load: must be above 0 and at most 10, not {load:g}")
    rng = random.Random(seed)
    biggest_clique = max(sum(1 for t in topology.trays if t.clique == c) for c in topology.cliques)
    per_tray = min(t.gpus for t in topology.trays)
    count = jobs if jobs is not None else SYNTHETIC_JOBS_PER_RACK * max(1, len(topology.trays) // TRAYS_PER_NVL72_RACK)
    low, high = SYNTHETIC_DURATION_RANGE_S
    shapes: list[tuple[int, int, int]] = []
    for _ in range(count):
        pods = min(_draw(rng, SYNTHETIC_PODS), biggest_clique)
        gpus = min(_draw(rng, SYNTHETIC_GPUS_SINGLE if pods == 1 else SYNTHETIC_GPUS_MULTI), per_tray)
        duration = round(SYNTHETIC_MEDIAN_S * math.exp(rng.gauss(0.0, SYNTHETIC_SIGMA)))
        shapes.append((pods, gpus, min(max(duration, low), high)))
    demand = sum(p * g * d for p, g, d in shapes)
    mean_gap = demand / (max(1, count) * load * topology.gpus)  # mean inter-arrival time for the offered load
    clock = 0.0
    out = []
    for index, (pods, gpus, duration) in enumerate(shapes):
        out.append(GangJob(f"job-{index:05d}", pods, gpus, round(clock), duration))
        clock += rng.expovariate(1.0 / mean_gap) if mean_gap > 0 else 0.0
    return GangTrace("nvl72-synthetic", tuple(out), synthetic_source(load, seed))


GANG_COLUMNS = ("name", "pods", "gpus_per_pod", "arrival_s", "duration_s")


def read_gangs(stream: IO[str], where: str, max_gpus_per_pod: int) -> list[GangJob]:
    jobs: list[GangJob] = []
    lines: dict[str, int] = {}
    for line, row in _rows(stream, where, GANG_COLUMNS, MAX_GANG_JOBS, "jobs"):
        at = f"{where}:{line}"
        name = (row.get("name") or "").strip()
        if not name:
            raise TraceError(f"{at}: name: missing")
        if name in lines:
            raise TraceError(f"{at}: name: {name!r} is already the name of the job on line {lines[name]}")
        lines[name] = line
        pods, gpus = _int(row, "pods", at), _int(row, "gpus_per_pod", at)
        if pods < 1:
            raise TraceError(f"{at}: pods: a job needs at least one pod")
        if not 1 <= gpus <= max_gpus_per_pod:
            raise TraceError(f"{at}: gpus_per_pod: must be from 1 to {max_gpus_per_pod} (a tray's GPUs), not {gpus}")
        duration = _int(row, "duration_s", at)
        if duration < 1:
            raise TraceError(f"{at}: duration_s: must be at least 1 second")
        jobs.append(GangJob(name, pods, gpus, _int(row, "arrival_s", at), duration))
    if not jobs:
        raise TraceError(f"{where}: no jobs (a header and nothing else)")
    return jobs


def load_gangs(path: str, max_gpus_per_pod: int | None = None) -> GangTrace:
    """A gang trace CSV; unreadable files in the manifest loader's words."""
    from gpudra.api.load import LoadError, read_text

    try:
        text = read_text(path).removeprefix("\ufeff")
    except LoadError as exc:
        raise TraceError(str(exc)) from None
    limit = gpus_per_tray() if max_gpus_per_pod is None else max_gpus_per_pod
    jobs = read_gangs(io.StringIO(text, newline=""), path, limit)
    return GangTrace(Path(path).stem, tuple(jobs), f"file {path}")


def gangs_csv(trace: GangTrace) -> str:
    from .report import spreadsheet_safe

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(GANG_COLUMNS)
    for job in trace.jobs:
        writer.writerow([spreadsheet_safe(job.name), job.pods, job.gpus_per_pod, job.arrival, job.duration])
    return out.getvalue()
