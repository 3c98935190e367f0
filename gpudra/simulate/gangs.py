"""Placing gang jobs (all pods or none, one pod per tray) on NVLink cliques, and the cliques' fragmentation.

Policies (`GANG_POLICIES`):
- `clique-aware`: all pods in one clique. Inside a clique, the trays with the fewest free GPUs that still fit a
  pod (ties to the earlier tray); among the cliques with enough such trays, the one left with the fewest free
  GPUs (best fit: big holes stay whole for big jobs), then the one whose chosen trays had the fewest free GPUs
  (full trays stay full), then the earlier clique. This is the rule a gang-aware scheduler applies when the
  ComputeDomain's pods must share a clique.
- `clique-blind`: each pod placed on its own by kube-scheduler's default scoring (LeastAllocated: the tray with
  the most free GPUs, as pods asking CPU and memory in proportion to their GPUs make it), ties at random as
  kube-scheduler's selectHost breaks them; cliques are not looked at.
- `clique-blind-binpack`: the same, each pod on the tray with the fewest free GPUs that fit (a bin-packing
  scoring profile), ties at random.
- `clique-affinity`: what users configure today (dra-driver-nvidia-gpu issue 804): a required pod affinity
  with topologyKey `nvidia.com/gpu.clique`. The first pod goes where the default scoring puts it; the others
  only to trays of its clique. Nothing looks ahead, so a first pod in a clique too small fails the gang.

Every policy is all or nothing: a gang that cannot place every pod places none. A blind policy's gang whose
pods land in more than one clique starts but gets no multi-node NVLink (its IMEX domain cannot span cliques):
`spans_cliques` says so, and the replay counts it as degraded, not as a job that got what it asked for.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .nvl72 import Topology

GANG_POLICIES = ("clique-aware", "clique-blind", "clique-blind-binpack", "clique-affinity")
Size = tuple[int, int]  # (pods, GPUs per pod)


@dataclass
class RackState:
    """Free GPUs per tray (by the topology's tray index) and who holds what."""

    topology: Topology
    free: list[int] = field(default_factory=list)
    clique_of: list[int] = field(default_factory=list)  # tray index -> clique index
    members: list[list[int]] = field(default_factory=list)  # clique index -> tray indices, in order
    held: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)  # job -> (trays, GPUs per pod)

    @classmethod
    def empty(cls, topology: Topology) -> "RackState":
        index = {c: i for i, c in enumerate(topology.cliques)}
        state = cls(topology, [t.gpus for t in topology.trays], [index[t.clique] for t in topology.trays])
        state.members = [[] for _ in index]
        for tray, clique in enumerate(state.clique_of):
            state.members[clique].append(tray)
        return state

    @property
    def free_gpus(self) -> int:
        return sum(self.free)

    def bind(self, job: str, trays: Sequence[int], gpus_per_pod: int) -> None:
        if job in self.held:
            raise ValueError(f"job {job} is already placed")
        if len(set(trays)) != len(trays):
            raise ValueError(f"job {job}: two pods on one tray")
        if any(self.free[t] < gpus_per_pod for t in trays):
            raise ValueError(f"job {job}: a tray has fewer than {gpus_per_pod} free GPUs")
        for t in trays:
            self.free[t] -= gpus_per_pod
        self.held[job] = (tuple(trays), gpus_per_pod)

    def release(self, job: str) -> None:
        trays, gpus_per_pod = self.held.pop(job)
        for t in trays:
            self.free[t] += gpus_per_pod

    def spans_cliques(self, trays: Sequence[int]) -> bool:
        return len({self.clique_of[t] for t in trays}) > 1


Placer = Callable[[RackState, int, int, random.Random], "tuple[int, ...] | None"]


def _clique_aware(state: RackState, pods: int, gpus: int, rng: random.Random) -> tuple[int, ...] | None:
    best: tuple[int, int, int] | None = None
    chosen: tuple[int, ...] | None = None
    for clique, trays in enumerate(state.members):
        fitting = sorted((state.free[t], t) for t in trays if state.free[t] >= gpus)
        if len(fitting) < pods:
            continue
        picked = fitting[:pods]
        key = (sum(state.free[t] for t in trays) - pods * gpus, sum(free for free, _ in picked), clique)
        if best is None or key < best:
            best, chosen = key, tuple(t for _, t in picked)
    return chosen


def _pick(candidates: list[int], score: Callable[[int], int], rng: random.Random) -> int:
    """The highest-scoring candidate; ties broken uniformly at random (kube-scheduler's selectHost)."""
    top = max(score(t) for t in candidates)
    return rng.choice([t for t in candidates if score(t) == top])


def _one_by_one(state: RackState, pods: int, gpus: int, rng: random.Random, score: Callable[[int], int],
                same_clique_as_first: bool = False) -> tuple[int, ...] | None:
    chosen: list[int] = []
    for _ in range(pods):
        taken = set(chosen)
        candidates = [t for t in range(len(state.free)) if state.free[t] >= gpus and t not in taken
                      and (not chosen or not same_clique_as_first or state.clique_of[t] == state.clique_of[chosen[0]])]
        if not candidates:
            return None  # all or nothing: the pods chosen so far are not bound
        chosen.append(_pick(candidates, score, rng))
    return tuple(chosen)


def _spread(state: RackState, pods: int, gpus: int, rng: random.Random) -> tuple[int, ...] | None:
    return _one_by_one(state, pods, gpus, rng, lambda t: state.free[t])


def _binpack(state: RackState, pods: int, gpus: int, rng: random.Random) -> tuple[int, ...] | None:
    return _one_by_one(state, pods, gpus, rng, lambda t: -state.free[t])


def _affinity(state: RackState, pods: int, gpus: int, rng: random.Random) -> tuple[int, ...] | None:
    return _one_by_one(state, pods, gpus, rng, lambda t: state.free[t], same_clique_as_first=True)


PLACERS: dict[str, Placer] = {"clique-aware": _clique_aware, "clique-blind": _spread,
                              "clique-blind-binpack": _binpack, "clique-affinity": _affinity}


def place(policy: str, state: RackState, pods: int, gpus: int, rng: random.Random) -> tuple[int, ...] | None:
    """The trays (one per pod) `policy` would give a gang of `pods` x `gpus` GPUs, or None; binds nothing."""
    return PLACERS[policy](state, pods, gpus, rng)


def hosts(state: RackState, clique: int, size: Size) -> bool:
    """Whether the clique has room for a gang of this size now."""
    pods, gpus = size
    return sum(1 for t in state.members[clique] if state.free[t] >= gpus) >= pods


def stranded_gpus(state: RackState, size: Size) -> int:
    """Free GPUs in cliques that cannot host a gang of this size (the GPUs that size cannot use)."""
    return sum(sum(state.free[t] for t in trays) for c, trays in enumerate(state.members) if not hosts(state, c, size))


def fragmented_gpus(state: RackState, mix: dict[Size, float]) -> float:
    """Clique fragmentation: the free GPUs stranded for each job size, weighted by the size's share of the jobs
    (FGD's popularity weighting, applied to cliques instead of GPUs)."""
    total = sum(mix.values())
    return sum(weight * stranded_gpus(state, size) for size, weight in mix.items()) / total if total else 0.0
