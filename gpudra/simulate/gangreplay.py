"""Replaying a gang trace on NVL72 racks with one placement policy and one seed (`gangs.py`, `nvl72.py`).

`tune` (the FGD paper's method, as `engine.py` replays openb): the trace's jobs in random order, then jobs drawn
with replacement until the arrived GPU demand reaches `tune` x capacity; each job is submitted once and never
leaves; a job that does not fit when it arrives does not start. Allocation and clique fragmentation are
recorded against the arrived demand (the per-percent series of `engine.per_percent`).

`events`: jobs arrive at `arrival_s` and run `duration_s`. A job that does not fit waits in a FIFO queue; after
every departure the queue is tried in order and every waiting job that now fits starts (backfill). A job that
has waited `patience` seconds gives up: it is one of the jobs that could not start. Allocation over time is
averaged between the first and the last arrival (the time the trace offers load).

Counts: `started` includes `degraded` (a blind policy's gang spread over several cliques: it holds its GPUs for
its duration but has no multi-node NVLink); `started_nvlink` = started - degraded; `not_started` = jobs that
never started (too big for any clique, no room on arrival in `tune`, gave up waiting in `events`).

Clique fragmentation: `fragmented_gpus` weighs, for each job size of the trace by its share of the jobs, the
free GPUs in cliques that cannot host that size (`gangs.fragmented_gpus`); `stranded_for_waiting_gpus`
(events) counts the free GPUs in cliques where no job then waiting would fit. Both are time-weighted means
over the arrivals in `events`, values at 100% arrived demand in `tune`.
"""

from __future__ import annotations

import heapq
import random
import time
from collections import Counter
from typing import Any

from .engine import per_percent
from .gangs import GANG_POLICIES, REPLAY_POLICIES, SCHEDULER_POLICIES, RackState, Size, fragmented_gpus, place
from .nvl72 import GangJob, GangTrace, Topology

DEFAULT_PATIENCE_S = 3600
GANG_METHODS = ("tune", "events")


class GangSimulationError(ValueError):
    pass


def size_mix(jobs: tuple[GangJob, ...] | list[GangJob]) -> dict[Size, float]:
    """Each job size's share of the jobs (the fragmentation measure's weights); empty for no jobs."""
    counts = Counter(job.size for job in jobs)
    return {size: count / len(jobs) for size, count in sorted(counts.items())}


def clique_room(topology: Topology) -> list[int]:
    """[g]: the most trays with at least g GPUs in one clique of the empty cluster. A job of `pods` x g GPUs fits
    some clique (and can ever get NVLink) iff g < len(room) and room[g] >= pods."""
    most = max((t.gpus for t in topology.trays), default=0)
    return [max(sum(1 for t in topology.trays if t.clique == c and t.gpus >= g) for c in topology.cliques)
            for g in range(most + 1)]


def _fits(room: list[int], job: GangJob) -> bool:
    return job.gpus_per_pod < len(room) and room[job.gpus_per_pod] >= job.pods


def _base(topology: Topology, trace: GangTrace, policy: str, seed: int, method: str) -> dict[str, Any]:
    return {"trace": trace.name, "trace_source": trace.source, "mode": "gangs", "policy": policy, "seed": seed,
            "method": method, "topology": topology.name, "nodes": len(topology.trays),
            "cliques": len(topology.cliques), "gpus": topology.gpus}


def run_gangs(topology: Topology, trace: GangTrace, policy: str, seed: int = 42, method: str = "events",
              tune: float = 1.3, patience: int = DEFAULT_PATIENCE_S, via_scheduler: bool | None = None) -> dict[str, Any]:
    """`via_scheduler`: placements decided by gpudra's scheduler over the racks as Nodes, ResourceSlices and
    pods (gpudra.simulate.gangscheduler), for the policies in SCHEDULER_POLICIES; False: by the replay's own rule
    (`gangs.place`); None (the default): the scheduler where it can decide the policy."""
    if policy not in GANG_POLICIES:
        raise GangSimulationError(f"unknown policy {policy!r}; choose from {', '.join(GANG_POLICIES)}")
    if method not in GANG_METHODS:
        raise GangSimulationError(f"unknown method {method!r}; choose one of {', '.join(GANG_METHODS)}")
    if not trace.jobs:
        raise GangSimulationError(f"trace {trace.name}: no jobs")
    if via_scheduler and policy not in SCHEDULER_POLICIES:
        raise GangSimulationError(f"policy {policy!r}: the scheduler places only {', '.join(SCHEDULER_POLICIES)}")
    if via_scheduler is False and policy not in REPLAY_POLICIES:
        raise GangSimulationError(f"policy {policy!r}: the replay's own rules place only {', '.join(REPLAY_POLICIES)}; "
                                  f"gpudra's scheduler places {policy}")
    if via_scheduler is None:
        via_scheduler = policy in SCHEDULER_POLICIES
    started, cpu_started = time.perf_counter(), time.process_time()
    placer = _Placer(topology, policy, via_scheduler)
    result = (_tuned(topology, trace, placer, seed, tune) if method == "tune"
              else _events(topology, trace, placer, seed, patience))
    result["placement"] = "scheduler" if via_scheduler else "replay"  # who decided where each gang went
    result["seconds"] = round(time.perf_counter() - started, 3)
    result["cpu_seconds"] = round(time.process_time() - cpu_started, 3)
    return result


class _Placer:
    """The replay's own placement rule (`gangs.place`), or gpudra's scheduler (kept in step on release)."""

    def __init__(self, topology: Topology, policy: str, via_scheduler: bool):
        from .gangscheduler import SchedulerPlacer

        self.policy = policy
        self.scheduler = SchedulerPlacer(topology, policy) if via_scheduler else None

    def place(self, state: RackState, job: GangJob, rng: random.Random) -> tuple[int, ...] | None:
        if self.scheduler is not None:
            return self.scheduler.place(job, rng)  # ties from the replay's seeded generator
        return place(self.policy, state, job.pods, job.gpus_per_pod, rng)

    def release(self, job_name: str) -> None:
        if self.scheduler is not None:
            self.scheduler.release(job_name)


def tuned_jobs(jobs: tuple[GangJob, ...], capacity: int, tune: float, rng: random.Random) -> list[GangJob]:
    """The jobs in random order, then drawn with replacement until arrived demand would pass tune x capacity."""
    order = list(jobs)
    rng.shuffle(order)
    target = tune * capacity
    total = sum(j.gpus for j in order)
    while total > target and order:
        total -= order.pop(rng.randrange(len(order))).gpus
    index = 0
    while True:
        job = jobs[rng.randrange(len(jobs))]
        if total + job.gpus > target:
            return order
        order.append(GangJob(f"{job.name}-tuned-{index}", job.pods, job.gpus_per_pod, job.arrival, job.duration))
        total += job.gpus
        index += 1


def _tuned(topology: Topology, trace: GangTrace, placer: _Placer, seed: int, tune: float) -> dict[str, Any]:
    policy = placer.policy
    if not 0 < tune <= 10:
        raise GangSimulationError(f"tune: must be above 0 and at most 10, not {tune:g}")
    rng = random.Random(seed)
    workload = tuned_jobs(trace.jobs, topology.gpus, tune, rng)
    room = clique_room(topology)
    mix = size_mix([j for j in trace.jobs if _fits(room, j)])  # a size no clique holds is not fragmentation
    state = RackState.empty(topology)
    capacity = topology.gpus
    arrived = served = 0
    counts = Counter[str]()
    alloc: list[tuple[float, float]] = []
    frag: list[tuple[float, float]] = []
    served_points: list[tuple[float, float]] = []
    for job in workload:
        arrived += job.gpus
        # a job no clique can hold never starts, whatever the policy (as in `events`): it would have no NVLink
        trays = placer.place(state, job, rng) if _fits(room, job) else None
        if trays is None:
            counts["not_started"] += 1
            counts["never_fits"] += not _fits(room, job)
        else:
            state.bind(job.name, trays, job.gpus_per_pod)
            counts["started"] += 1
            degraded = state.spans_cliques(trays)
            counts["degraded"] += degraded
            served += 0 if degraded else job.gpus
        x = 100 * arrived / capacity
        used = capacity - state.free_gpus
        alloc.append((x, 100 * used / capacity))
        served_points.append((x, 100 * served / capacity))
        frag.append((x, fragmented_gpus(state, mix)))
    upto = int(100 * arrived / capacity)
    allocation, fragmentation, served_series = (per_percent(p, upto) for p in (alloc, frag, served_points))
    percents = sorted(allocation)
    result = _base(topology, trace, policy, seed, "tune")
    result.update(_counts(len(workload), counts), tune=tune, **{
        "allocation_ratio": round(allocation[100], 4) if 100 in allocation else None,
        # GPU demand of jobs that got multi-node NVLink: a degraded job's GPUs are held, not served
        "served_ratio": round(served_series[100], 4) if 100 in served_series else None,
        "fragmented_gpus": round(fragmentation[100], 2) if 100 in fragmentation else None,
        "series": {"arrived_percent": percents,
                   "allocation_ratio": [round(allocation[p], 4) for p in percents],
                   "served_ratio": [round(served_series.get(p, 0.0), 4) for p in percents],
                   "fragmented_gpus": [round(fragmentation.get(p, 0.0), 3) for p in percents]}})
    return result


def _counts(jobs: int, counts: Counter[str]) -> dict[str, int]:
    return {"jobs": jobs, "started": counts["started"], "started_nvlink": counts["started"] - counts["degraded"],
            "degraded": counts["degraded"], "not_started": counts["not_started"], "never_fits": counts["never_fits"]}


def _events(topology: Topology, trace: GangTrace, placer: _Placer, seed: int, patience: int) -> dict[str, Any]:
    policy = placer.policy
    if patience < 0:
        raise GangSimulationError(f"patience: must not be negative, not {patience}")
    rng = random.Random(seed)
    jobs = sorted(trace.jobs, key=lambda j: (j.arrival, j.name))
    room = clique_room(topology)
    mix = size_mix([j for j in jobs if _fits(room, j)])  # a size no clique holds is not fragmentation
    state = RackState.empty(topology)
    capacity = topology.gpus
    counts = Counter[str]()
    departures: list[tuple[int, str]] = []  # (time, job) heap
    waiting: list[GangJob] = []  # FIFO
    waits: list[int] = []
    times: list[int] = []
    allocation: list[float] = []
    fragmented: list[float] = []
    queued: list[int] = []
    stranded: list[int] = []
    held_gpu_seconds = nvlink_gpu_seconds = 0

    def start(job: GangJob, now: int) -> bool:
        nonlocal held_gpu_seconds, nvlink_gpu_seconds
        trays = placer.place(state, job, rng)
        if trays is None:
            return False
        state.bind(job.name, trays, job.gpus_per_pod)
        heapq.heappush(departures, (now + job.duration, job.name))
        counts["started"] += 1
        degraded = state.spans_cliques(trays)
        counts["degraded"] += degraded
        held_gpu_seconds += job.gpus * job.duration
        nvlink_gpu_seconds += 0 if degraded else job.gpus * job.duration
        waits.append(now - job.arrival)
        return True

    def give_up(now: int) -> None:
        for job in [j for j in waiting if j.arrival + patience < now]:
            waiting.remove(job)
            counts["not_started"] += 1

    def record(now: int) -> None:
        times.append(now)
        allocation.append(round(100 * (capacity - state.free_gpus) / capacity, 4))
        fragmented.append(round(fragmented_gpus(state, mix), 3))
        queued.append(len(waiting))
        stranded.append(stranded_for(state, {job.size for job in waiting}))

    arrivals = iter(jobs)
    upcoming = next(arrivals, None)
    while upcoming is not None or departures:
        if departures and (upcoming is None or departures[0][0] <= upcoming.arrival):
            now, name = heapq.heappop(departures)  # departures first at a tie: the arriving job sees their room
            state.release(name)
            placer.release(name)
            give_up(now)
            for job in list(waiting):
                if start(job, now):
                    waiting.remove(job)
        else:
            assert upcoming is not None
            now = upcoming.arrival
            give_up(now)
            if not _fits(room, upcoming):
                counts["not_started"] += 1
                counts["never_fits"] += 1
            elif not start(upcoming, now):
                waiting.append(upcoming)
            upcoming = next(arrivals, None)
        record(now)
    counts["not_started"] += len(waiting)  # nothing left to leave: they never start
    first, last = jobs[0].arrival, jobs[-1].arrival
    result = _base(topology, trace, policy, seed, "events")
    result.update(_counts(len(jobs), counts), patience_s=patience, **{
        "allocation_ratio": _time_mean(times, allocation, first, last),
        "fragmented_gpus": _time_mean(times, fragmented, first, last),
        "stranded_for_waiting_gpus": _time_mean(times, [float(v) for v in stranded], first, last),
        # GPU-seconds of jobs that got multi-node NVLink, per GPU-second the trace asked for
        "served_ratio": round(100 * nvlink_gpu_seconds / sum(j.gpus * j.duration for j in jobs), 4),
        "held_ratio": round(100 * held_gpu_seconds / sum(j.gpus * j.duration for j in jobs), 4),
        "mean_wait_s": round(sum(waits) / len(waits), 1) if waits else None,
        "series": {"time_s": times, "allocation_ratio": allocation, "fragmented_gpus": fragmented,
                   "waiting_jobs": queued, "stranded_for_waiting_gpus": stranded}})
    return result


def stranded_for(state: RackState, sizes: set[Size]) -> int:
    """Free GPUs in cliques where none of the waiting jobs' sizes fits (0 while nobody waits)."""
    if not sizes:
        return 0
    return sum(free for c, free in enumerate(state.clique_free) if not any(state.hosts(c, size) for size in sizes))


def _time_mean(times: list[int], values: list[float], first: int, last: int) -> float | None:
    """The time-weighted mean of a step series (each value holds until the next time) over [first, last]."""
    if last <= first:
        return values[-1] if values else None
    total = 0.0
    for i, value in enumerate(values):
        begin = max(times[i], first)
        end = min(times[i + 1] if i + 1 < len(times) else last, last)
        if end > begin:
            total += value * (end - begin)
    return round(total / (last - first), 4)
