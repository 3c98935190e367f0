"""Placing gang jobs (all pods or none, one pod per tray) on NVLink cliques, and the cliques' fragmentation.

Policies (`GANG_POLICIES`); the ones kube-scheduler has (`SCHEDULER_POLICIES`) are placed by gpudra's scheduler
(gpudra.simulate.gangscheduler), the rules here are the replay's own (`REPLAY_POLICIES`):
- `clique-aware`: all pods in one clique. Scheduler: kube-scheduler 1.36's topology-aware workload scheduling on
  the clique label. Replay rule (gpudra's own best fit, no upstream counterpart): inside a clique, the trays with
  the fewest free GPUs that still fit a pod (ties to the earlier tray); among the cliques with enough such trays,
  the one left with the fewest free GPUs (big holes stay whole for big jobs), then the one whose chosen trays had
  the fewest free GPUs (full trays stay full), then the earlier clique.
- `clique-blind`: each pod placed on its own by kube-scheduler's default scoring (LeastAllocated: the tray with
  the most free GPUs, as pods asking CPU and memory in proportion to their GPUs make it), ties at random as
  kube-scheduler's selectHost breaks them; cliques are not looked at. Scheduler only.
- `clique-blind-binpack`: each pod on the tray with the fewest free GPUs that fit (a bin-packing scoring
  profile, which kube-scheduler's default profile is not), ties at random. Replay rule only.
- `clique-affinity`: what users configure today (dra-driver-nvidia-gpu issue 804): a required pod affinity
  with topologyKey `nvidia.com/gpu.clique`. The first pod goes where the default scoring puts it; the others
  only to trays of its clique. Nothing looks ahead, so a first pod in a clique too small fails the gang.
  Scheduler only.

Every policy is all or nothing: a gang that cannot place every pod places none. A blind policy's gang whose
pods land in more than one clique starts but gets no multi-node NVLink (its IMEX domain cannot span cliques):
`spans_cliques` says so, and the replay counts it as degraded, not as a job that got what it asked for.
"""

from __future__ import annotations

import random
from bisect import bisect_left, insort
from typing import Callable, Sequence

from .nvl72 import Topology

GANG_POLICIES = ("clique-aware", "clique-blind", "clique-blind-binpack", "clique-affinity")
# the policies kube-scheduler has a counterpart for, placed by gpudra's scheduler by default
# (gpudra.simulate.gangscheduler); `clique-blind-binpack` (a bin-packing scoring profile) stays with the rule here
SCHEDULER_POLICIES = ("clique-aware", "clique-blind", "clique-affinity")
Size = tuple[int, int]  # (pods, GPUs per pod)


class RackState:
    """Free GPUs per tray (by the topology's tray index), who holds what, and an index kept in step with every
    change so that a placement or a fragmentation reading does not scan every tray: per clique its free GPUs and
    how many of its trays have at least g free, and per free count the trays that have it (in tray order)."""

    def __init__(self, topology: Topology, free: Sequence[int] | None = None):
        self.topology = topology
        self.capacity = [t.gpus for t in topology.trays]
        index = {c: i for i, c in enumerate(topology.cliques)}
        self.clique_of = [index[t.clique] for t in topology.trays]  # tray index -> clique index
        self.members: list[list[int]] = [[] for _ in index]  # clique index -> tray indices, in order
        for tray, clique in enumerate(self.clique_of):
            self.members[clique].append(tray)
        self.held: dict[str, tuple[tuple[int, ...], int]] = {}  # job -> (trays, GPUs per pod)
        self.most = max(self.capacity, default=0)
        self.free = [0] * len(self.capacity)
        self.clique_free = [0] * len(self.members)
        self.at_least = [[len(trays)] + [0] * self.most for trays in self.members]  # [clique][g]
        self.by_free: list[list[int]] = [list(range(len(self.capacity)))] + [[] for _ in range(self.most)]
        for tray, gpus in enumerate(self.capacity if free is None else free):
            if not 0 <= gpus <= self.capacity[tray]:
                raise ValueError(f"tray {tray}: {gpus} free GPUs of {self.capacity[tray]}")
            self._set(tray, gpus)

    @classmethod
    def empty(cls, topology: Topology) -> "RackState":
        return cls(topology)

    def _set(self, tray: int, gpus: int) -> None:
        old = self.free[tray]
        if gpus == old:
            return
        clique = self.clique_of[tray]
        self.free[tray] = gpus
        self.clique_free[clique] += gpus - old
        counts = self.at_least[clique]
        for g in range(min(old, gpus) + 1, max(old, gpus) + 1):
            counts[g] += 1 if gpus > old else -1
        bucket = self.by_free[old]
        del bucket[bisect_left(bucket, tray)]
        insort(self.by_free[gpus], tray)

    @property
    def free_gpus(self) -> int:
        return sum(self.clique_free)

    def bind(self, job: str, trays: Sequence[int], gpus_per_pod: int) -> None:
        if job in self.held:
            raise ValueError(f"job {job} is already placed")
        if len(set(trays)) != len(trays):
            raise ValueError(f"job {job}: two pods on one tray")
        if any(self.free[t] < gpus_per_pod for t in trays):
            raise ValueError(f"job {job}: a tray has fewer than {gpus_per_pod} free GPUs")
        for t in trays:
            self._set(t, self.free[t] - gpus_per_pod)
        self.held[job] = (tuple(trays), gpus_per_pod)

    def release(self, job: str) -> None:
        trays, gpus_per_pod = self.held.pop(job)
        for t in trays:
            self._set(t, self.free[t] + gpus_per_pod)

    def spans_cliques(self, trays: Sequence[int]) -> bool:
        return len({self.clique_of[t] for t in trays}) > 1

    def hosts(self, clique: int, size: Size) -> bool:
        """Whether the clique has room for a gang of this size now."""
        pods, gpus = size
        return gpus <= self.most and self.at_least[clique][gpus] >= pods


Placer = Callable[[RackState, int, int, random.Random], "tuple[int, ...] | None"]


def _clique_aware(state: RackState, pods: int, gpus: int, rng: random.Random) -> tuple[int, ...] | None:
    feasible = [c for c in range(len(state.members)) if state.hosts(c, (pods, gpus))]
    if not feasible:
        return None
    fewest_left = min(state.clique_free[c] for c in feasible)
    best: tuple[int, int] | None = None
    chosen: tuple[int, ...] | None = None
    for clique in feasible:
        if state.clique_free[clique] != fewest_left:
            continue
        picked = sorted((state.free[t], t) for t in state.members[clique] if state.free[t] >= gpus)[:pods]
        key = (sum(free for free, _ in picked), clique)
        if best is None or key < best:
            best, chosen = key, tuple(t for _, t in picked)
    return chosen


def _binpack(state: RackState, pods: int, gpus: int, rng: random.Random) -> tuple[int, ...] | None:
    """Each pod on the tray with the fewest free GPUs that still fit it (not one of the gang's so far), as a
    bin-packing scoring profile would score it; ties uniformly at random, as kube-scheduler's selectHost picks
    among equal scores (the candidates in tray order). The pods chosen so far hold their GPUs while the next pod
    is scored (as bound pods do) and are handed back at the end: nothing is bound here."""
    chosen: list[int] = []
    try:
        for _ in range(pods):
            tray = next((rng.choice(candidates) for level in range(gpus, state.most + 1)
                         if (candidates := [t for t in state.by_free[level] if t not in chosen])), None)
            if tray is None:
                return None  # all or nothing
            chosen.append(tray)
            state._set(tray, state.free[tray] - gpus)
        return tuple(chosen)
    finally:
        for tray in chosen:
            state._set(tray, state.free[tray] + gpus)


# the policies with a rule of the replay's own; the others are placed by gpudra's scheduler only
PLACERS: dict[str, Placer] = {"clique-aware": _clique_aware, "clique-blind-binpack": _binpack}
REPLAY_POLICIES = tuple(PLACERS)


def place(policy: str, state: RackState, pods: int, gpus: int, rng: random.Random) -> tuple[int, ...] | None:
    """The trays (one per pod) the replay's rule for `policy` would give a gang of `pods` x `gpus` GPUs, or None;
    binds nothing."""
    return PLACERS[policy](state, pods, gpus, rng)


def stranded_gpus(state: RackState, size: Size) -> int:
    """Free GPUs in cliques that cannot host a gang of this size (the GPUs that size cannot use)."""
    return sum(free for c, free in enumerate(state.clique_free) if not state.hosts(c, size))


def fragmented_gpus(state: RackState, mix: dict[Size, float]) -> float:
    """Clique fragmentation: the free GPUs stranded for each job size, weighted by the size's share of the jobs
    (FGD's popularity weighting, applied to cliques instead of GPUs)."""
    total = sum(mix.values())
    return sum(weight * stranded_gpus(state, size) for size, weight in mix.items()) / total if total else 0.0
