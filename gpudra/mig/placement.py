"""Whether a set of MIG instances fits on one GPU, where, and why not.

A layout is a multiset of profiles ({"3g.40gb": 2, "1g.10gb": 1}). It fits when every
instance gets one of its profile's placements with no two placements sharing a memory
slice, the compute slices add up to at most the GPU's, counts stay within each profile's
maximum, and at most one instance holds the media extensions (`+me`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterator, Mapping

from gpudra.catalog import GpuModel, MigProfile, Placement


@dataclass(frozen=True)
class PlacedInstance:
    profile: MigProfile
    placement: Placement


@dataclass(frozen=True)
class Feasibility:
    feasible: bool
    instances: tuple[PlacedInstance, ...] = ()  # one valid placement when feasible
    reason: str = ""  # why not, in words, when infeasible

    def __bool__(self) -> bool:
        return self.feasible


def describe_layout(counts: Mapping[str, int]) -> str:
    """`3g.40gb ×2 + 1g.10gb` (largest first)."""
    parts = []
    for name, count in counts.items():
        if count <= 0:
            continue
        parts.append(name if count == 1 else f"{name} ×{count}")
    return " + ".join(parts) if parts else "nothing"


def _ordered(model: GpuModel, counts: Mapping[str, int]) -> dict[str, int]:
    order = {p.name: i for i, p in enumerate(model.profiles)}
    resolved = {model.profile(name).name: n for name, n in counts.items() if n > 0}
    return dict(sorted(resolved.items(), key=lambda kv: (-model.profile(kv[0]).memory_slices,
                                                          -model.profile(kv[0]).compute_slices, order[kv[0]])))


def _article(name: str) -> str:
    # model names are read letter by letter: "an A100", "an H100", "a B200"
    return "an" if name[:1].upper() in "AEFHILMNORSX" else "a"


def find_placement(model: GpuModel, counts: Mapping[str, int]) -> Feasibility:
    """Check a layout on one GPU of `model`; unknown profile names raise UnknownMigProfile."""
    wanted = _ordered(model, counts)
    text = describe_layout(wanted)
    gpu = f"{_article(model.display_name)} {model.display_name}"
    for name, count in wanted.items():
        profile = model.profile(name)
        if count > profile.max_instances:
            return Feasibility(False, reason=f"{name} ×{count} exceeds the maximum of {profile.max_instances} "
                                             f"{name} instances on {gpu}")
    media = sum(n for name, n in wanted.items() if model.profile(name).media_extensions)
    if media > 1:
        return Feasibility(False, reason=f"{text} asks for {media} instances with media extensions (+me); "
                                         f"{gpu} has one set of media engines")
    memory = sum(model.profile(name).memory_slices * n for name, n in wanted.items())
    if memory > model.memory_slices:
        return Feasibility(False, reason=f"{text} needs {memory} memory slices; {gpu} has {model.memory_slices}")
    compute = sum(model.profile(name).compute_slices * n for name, n in wanted.items())
    if compute > model.compute_slices:
        return Feasibility(False, reason=f"{text} needs {compute} compute slices; {gpu} has {model.compute_slices}")
    instances = _search(model, wanted)
    if instances is None:
        where = "; ".join(f"{name} at {', '.join(str(p) for p in model.profile(name).placements)}"
                          for name in wanted)
        return Feasibility(False, reason=f"{text} has no non-overlapping placement on {gpu} "
                                         f"(allowed start:size placements: {where})")
    return Feasibility(True, instances=tuple(sorted(instances, key=lambda i: i.placement)))


def _search(model: GpuModel, wanted: Mapping[str, int]) -> list[PlacedInstance] | None:
    """Backtracking over placements, largest instances first; same-profile instances take
    increasing starts so permutations of identical instances are not retried."""
    queue: list[MigProfile] = [model.profile(name) for name, n in wanted.items() for _ in range(n)]
    used = [False] * model.memory_slices
    chosen: list[PlacedInstance] = []

    def free(placement: Placement) -> bool:
        return placement.end <= len(used) and not any(used[i] for i in placement.memory_slices)

    def mark(placement: Placement, value: bool) -> None:
        for i in placement.memory_slices:
            used[i] = value

    def place(position: int, min_start: int) -> bool:
        if position == len(queue):
            return True
        profile = queue[position]
        for placement in profile.placements:
            if placement.start < min_start or not free(placement):
                continue
            mark(placement, True)
            chosen.append(PlacedInstance(profile, placement))
            next_min = placement.start + 1 if position + 1 < len(queue) and queue[position + 1] is profile else 0
            if place(position + 1, next_min):
                return True
            chosen.pop()
            mark(placement, False)
        return False

    return chosen if place(0, 0) else None


def is_feasible(model: GpuModel, counts: Mapping[str, int]) -> bool:
    return find_placement(model, counts).feasible


def max_packing(model: GpuModel, profile: MigProfile) -> int:
    """Most instances of one profile whose placements do not overlap (ignoring max counts)."""
    best = 0
    placements = sorted(profile.placements, key=lambda p: p.end)
    end = -1
    for placement in placements:  # interval scheduling: earliest end first is optimal
        if placement.start >= end:
            best += 1
            end = placement.end
    return best


def enumerate_layouts(model: GpuModel) -> Iterator[tuple[PlacedInstance, ...]]:
    """Every set of instances that can coexist on one GPU (placements included), the empty one too.

    Walks memory slices left to right: at each slice either leave it empty or start an instance
    there, so each set of placed instances is produced exactly once.
    """
    starting_at: dict[int, list[PlacedInstance]] = {}
    for profile in model.profiles:
        for placement in profile.placements:
            starting_at.setdefault(placement.start, []).append(PlacedInstance(profile, placement))
    limit = model.memory_slices

    def walk(slice_index: int, chosen: list[PlacedInstance], compute: int, media: int,
             counts: Counter[str]) -> Iterator[tuple[PlacedInstance, ...]]:
        if slice_index >= limit:
            yield tuple(chosen)
            return
        yield from walk(slice_index + 1, chosen, compute, media, counts)
        for candidate in starting_at.get(slice_index, ()):
            profile = candidate.profile
            if candidate.placement.end > limit or compute + profile.compute_slices > model.compute_slices:
                continue
            if counts[profile.name] >= profile.max_instances:
                continue
            if profile.media_extensions and media:
                continue
            chosen.append(candidate)
            counts[profile.name] += 1
            yield from walk(candidate.placement.end, chosen, compute + profile.compute_slices,
                            media + profile.media_extensions, counts)
            counts[profile.name] -= 1
            chosen.pop()

    yield from walk(0, [], 0, 0, Counter())


def feasible_multisets(model: GpuModel) -> set[tuple[tuple[str, int], ...]]:
    """All layouts that fit, as sorted (profile name, count) tuples."""
    result = set()
    for layout in enumerate_layouts(model):
        counts = Counter(instance.profile.name for instance in layout)
        result.add(tuple(sorted(counts.items())))
    return result
