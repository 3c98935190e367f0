"""Layout planner: a static MIG layout for a mix of claims, compared with dynamic MIG.

Input: ResourceClaims / ResourceClaimTemplates (dicts) whose requests select MIG devices —
by profile, by memory, or by anything else the device attributes/capacities express — and
DeviceClasses (the NVIDIA driver's `gpu.nvidia.com` and `mig.nvidia.com` are built in).

Static plan: each request gets the smallest acceptable profile (its earliest
`firstAvailable` alternative first); instances are packed best-fit-decreasing onto the
GPUs, each GPU's set of instances checked for a non-overlapping placement. A larger
profile is used only when the smaller ones no longer fit anywhere. This is a heuristic
(bin packing is NP-hard), not a proof of optimality.

Dynamic mode: what the scheduler does with dynamic-MIG devices when the claims arrive in
file order — per claim the first device, in slice/name order, that matches and whose
counters are still available. That first-fit by name can take a larger profile than
needed (on an A100-40GB `1g.10gb` sorts before `1g.5gb`), and it leaves placements where
the earliest name put them.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gpudra.quantity import Quantity
from gpudra.catalog import GpuModel, MigProfile
from gpudra.mig.demands import FULL_GPU, Demand, Option, PlanError, demands_from_objects, synthetic_gpu
from gpudra.mig.dynamic import DynamicMigGpu, counter_set, gpu_devices, resolve_mig_device
from gpudra.mig.placement import PlacedInstance, find_placement

__all__ = ["FULL_GPU", "Demand", "Option", "PlanError", "PlanResult", "demands_from_objects", "plan",
           "plan_static", "render_plan", "simulate_dynamic"]


# --- static plan ----------------------------------------------------------------------------------


@dataclass
class GpuPlan:
    index: int
    full_gpu_for: str | None = None
    assigned: list[tuple[Demand, MigProfile]] = field(default_factory=list)
    instances: tuple[PlacedInstance, ...] = ()

    def counts(self) -> dict[str, int]:
        return dict(Counter(profile.name for _, profile in self.assigned))


@dataclass
class Usage:
    served: int
    unserved: list[str]
    gpus_used: int
    memory_slices_used: int
    compute_slices_used: int
    memory_slices_stranded: int  # free but no further instance fits there
    compute_slices_stranded: int
    memory_mib_allocated: int
    claims_served: int = 0
    claims_total: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"claimsServed": self.claims_served, "claimsTotal": self.claims_total, "served": self.served, "unserved": self.unserved, "gpusUsed": self.gpus_used,
                "memorySlicesUsed": self.memory_slices_used, "computeSlicesUsed": self.compute_slices_used,
                "memorySlicesStranded": self.memory_slices_stranded,
                "computeSlicesStranded": self.compute_slices_stranded,
                "memoryMiBAllocated": self.memory_mib_allocated}


@dataclass
class PlanResult:
    model: GpuModel
    gpu_count: int
    demands: list[Demand]
    static: list[GpuPlan]
    static_usage: Usage
    dynamic: list[list[tuple[str, str]]]  # per GPU: (demand label, device name)
    dynamic_profiles: dict[int, str]  # demand index -> profile name (or FULL_GPU)
    static_profiles: dict[int, str]
    dynamic_usage: Usage

    def mig_parted_config(self) -> dict[str, Any]:
        entries = []
        for gpu in self.static:
            if gpu.full_gpu_for is not None or not gpu.assigned:
                entries.append({"devices": [gpu.index], "mig-enabled": False})
            else:
                entries.append({"devices": [gpu.index], "mig-enabled": True, "mig-devices": gpu.counts()})
        return {"version": "v1", "mig-configs": {"planned": entries}}

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.model.display_name,
            "gpuCount": self.gpu_count,
            "static": {
                "gpus": [{"index": g.index, "fullGpuFor": g.full_gpu_for,
                          "instances": [{"profile": i.profile.name, "placement": str(i.placement)}
                                        for i in g.instances]} for g in self.static],
                "usage": self.static_usage.to_dict(),
                "migPartedConfig": self.mig_parted_config(),
            },
            "dynamic": {
                "gpus": [[{"demand": label, "device": device} for label, device in gpu] for gpu in self.dynamic],
                "usage": self.dynamic_usage.to_dict(),
            },
            "differences": differences(self),
        }


def _size_key(profile: MigProfile | None, model: GpuModel) -> tuple[int, int]:
    if profile is None:
        return (model.memory_slices + 1, model.compute_slices + 1)
    return (profile.memory_slices, profile.compute_slices)


PERMUTATION_LIMIT = 6  # try every claim order up to this many claims, heuristic orders beyond
PERMUTATION_WORK = 20_000  # … and as long as (orders × devices) stays small


def _claim_groups(demands: list[Demand]) -> list[list[int]]:
    groups: dict[str, list[int]] = {}
    for index, demand in enumerate(demands):
        groups.setdefault(demand.claim, []).append(index)
    return list(groups.values())


def _pack(model: GpuModel, gpu_count: int, demands: list[Demand], claim_order: list[list[int]]
          ) -> tuple[list[GpuPlan], dict[int, str]]:
    """Place claim by claim; a claim whose devices do not all fit is left out entirely (a
    claim is allocated all or nothing)."""
    gpus = [GpuPlan(i) for i in range(gpu_count)]
    chosen: dict[int, str] = {}
    for indices in claim_order:
        saved = [(g.full_gpu_for, list(g.assigned), g.instances) for g in gpus]
        placed: dict[int, str] = {}
        largest_first = sorted(indices, key=lambda i: tuple(-x for x in _size_key(
            demands[i].choices[0] if demands[i].choices else None, model)) + (i,))
        for index in largest_first:
            demand = demands[index]
            for choice in demand.choices:
                target = _best_gpu(model, gpus, choice)
                if target is None:
                    continue
                if choice is None:
                    target.full_gpu_for = demand.label
                    placed[index] = FULL_GPU
                else:
                    target.assigned.append((demand, choice))
                    target.instances = find_placement(model, target.counts()).instances
                    placed[index] = choice.name
                break
            if index not in placed:
                break
        if len(placed) == len(indices):
            chosen.update(placed)
        else:
            for gpu, (full, assigned, instances) in zip(gpus, saved):
                gpu.full_gpu_for, gpu.assigned, gpu.instances = full, assigned, instances
    return gpus, chosen


def _claim_orders(model: GpuModel, demands: list[Demand], groups: list[list[int]]) -> list[list[list[int]]]:
    if len(groups) <= PERMUTATION_LIMIT and math.factorial(len(groups)) * len(demands) <= PERMUTATION_WORK:
        return [list(order) for order in itertools.permutations(groups)]

    def size(group: list[int]) -> int:
        return sum(_size_key(demands[i].choices[0] if demands[i].choices else None, model)[0] for i in group)

    return [groups, sorted(groups, key=size, reverse=True), sorted(groups, key=size)]


def plan_static(model: GpuModel, gpu_count: int, demands: list[Demand]) -> tuple[list[GpuPlan], dict[int, str]]:
    """Best of several claim orders by: claims served, requests served, stranded slices, slices
    used, GPUs used."""
    groups = _claim_groups(demands)
    best: tuple[Score, list[GpuPlan], dict[int, str]] | None = None
    for order in _claim_orders(model, demands, groups):
        gpus, chosen = _pack(model, gpu_count, demands, order)
        score = _score(_static_usage(model, demands, gpus, chosen))
        if best is None or score > best[0]:
            best = (score, gpus, chosen)
    assert best is not None
    return best[1], best[2]


Score = tuple[int, int, int, int, int, int]  # compared as a tuple: the larger, the better plan


def _score(usage: Usage) -> Score:
    return (usage.claims_served, usage.served, -usage.memory_slices_stranded, -usage.compute_slices_stranded,
            -usage.memory_slices_used, -usage.gpus_used)


def _static_usage(model: GpuModel, demands: list[Demand], gpus: list[GpuPlan], chosen: dict[int, str]) -> Usage:
    unserved = [d.label for i, d in enumerate(demands) if i not in chosen]
    return _usage(model, [(g.full_gpu_for is not None, [p for _, p in g.assigned]) for g in gpus], unserved,
                  _claims_served(demands, chosen))


def _claims_served(demands: list[Demand], chosen: dict[int, str]) -> tuple[int, int]:
    groups = _claim_groups(demands)
    return sum(1 for g in groups if all(i in chosen for i in g)), len(groups)


def _best_gpu(model: GpuModel, gpus: list[GpuPlan], choice: MigProfile | None) -> GpuPlan | None:
    """Best fit: the fullest GPU that still takes the instance."""
    best = None
    best_used = -1
    tried_empty = False
    for gpu in gpus:
        if gpu.full_gpu_for is not None:
            continue
        if choice is None:
            if not gpu.assigned:
                return gpu
            continue
        if not gpu.assigned:
            if tried_empty:  # empty GPUs are interchangeable: the first one answers for all
                continue
            tried_empty = True
        counts = gpu.counts()
        counts[choice.name] = counts.get(choice.name, 0) + 1
        if not find_placement(model, counts).feasible:
            continue
        used = sum(p.memory_slices for _, p in gpu.assigned)
        if used > best_used:
            best, best_used = gpu, used
    return best


def _stranded(model: GpuModel, counts: dict[str, int]) -> bool:
    """True when nothing else fits next to these instances."""
    for profile in model.profiles:
        extra = dict(counts)
        extra[profile.name] = extra.get(profile.name, 0) + 1
        if find_placement(model, extra).feasible:
            return False
    return True


def _usage(model: GpuModel, per_gpu: list[tuple[bool, list[MigProfile]]], unserved: list[str],
           claims: tuple[int, int] = (0, 0)) -> Usage:
    mem_used = compute_used = mem_stranded = compute_stranded = memory_mib = gpus_used = served = 0
    for full, profiles in per_gpu:
        if full:
            gpus_used += 1
            served += 1
            mem_used += model.memory_slices
            compute_used += model.compute_slices
            memory_mib += max(p.memory_mib for p in model.profiles)
            continue
        if not profiles:
            continue
        gpus_used += 1
        served += len(profiles)
        mem = sum(p.memory_slices for p in profiles)
        compute = sum(p.compute_slices for p in profiles)
        mem_used += mem
        compute_used += compute
        memory_mib += sum(p.memory_mib for p in profiles)
        if _stranded(model, dict(Counter(p.name for p in profiles))):
            mem_stranded += model.memory_slices - mem
            compute_stranded += model.compute_slices - compute
    return Usage(served, unserved, gpus_used, mem_used, compute_used, mem_stranded, compute_stranded, memory_mib,
                 claims[0], claims[1])


# --- dynamic mode ----------------------------------------------------------------------------------


def _counter_values(counters: dict[str, dict[str, str]]) -> dict[str, int]:
    return {name: Quantity.parse(value["value"]).as_int() or 0 for name, value in counters.items()}


class Candidate(NamedTuple):
    """A device a demand could take."""
    gpu_index: int
    device: dict[str, Any]  # the ResourceSlice device (gpudra.mig.dynamic.gpu_devices)
    need: dict[str, int]  # the counters it consumes
    profile: str  # its MIG profile, or FULL_GPU


def _candidates(model: GpuModel, devices: list[list[dict[str, Any]]], demand: Demand) -> list[Candidate]:
    """The demand's candidates in the order the allocator tries them."""
    out = []
    for option in demand.options:
        names = {p.name for p in option.profiles}
        for gpu_index, gpu_list in enumerate(devices):
            for device in gpu_list:
                ref = resolve_mig_device(device["name"], {gpu_index: model})
                if (ref is None and option.full_gpu) or (ref is not None and ref.profile.name in names):
                    need = _counter_values(device["consumesCounters"][0]["counters"])
                    out.append(Candidate(gpu_index, device, need, FULL_GPU if ref is None else ref.profile.name))
    return out


SEARCH_STEP_LIMIT = 200_000


def simulate_dynamic(model: GpuModel, gpu_count: int, demands: list[Demand]
                     ) -> tuple[list[list[tuple[str, str]]], dict[int, str]]:
    """Claims in input order; within a claim, a backtracking search over devices in slice/name
    order (as the allocator does), the counters of dynamic MIG deciding what still fits."""
    gpus = [DynamicMigGpu(minor=i, model=model, uuid=f"GPU-{i}", attributes=synthetic_gpu(model).attributes)
            for i in range(gpu_count)]
    devices = [gpu_devices(gpu) for gpu in gpus]
    remaining = [_counter_values(counter_set(model, gpu.minor)["counters"]) for gpu in gpus]
    placed: list[list[tuple[str, str]]] = [[] for _ in range(gpu_count)]
    chosen: dict[int, str] = {}
    claims: dict[str, list[int]] = {}
    for index, demand in enumerate(demands):
        claims.setdefault(demand.claim, []).append(index)
    for indices in claims.values():
        candidates = [_candidates(model, devices, demands[i]) for i in indices]
        picks = _search_claim(candidates, remaining)
        if picks is None:
            continue  # the claim stays pending: all or nothing
        for index, (gpu_index, device, need, profile) in zip(indices, picks):
            for key, value in need.items():
                remaining[gpu_index][key] -= value
            placed[gpu_index].append((demands[index].label, device["name"]))
            chosen[index] = profile
    return placed, chosen


def _search_claim(candidates: list[list[Candidate]], remaining: list[dict[str, int]]) -> list[Candidate] | None:
    """One candidate for each of a claim's demands, all fitting the counters left together (None: none found
    within SEARCH_STEP_LIMIT steps)."""
    steps = 0
    taken: list[Candidate] = []
    used_names: set[tuple[int, str]] = set()
    have = [dict(r) for r in remaining]

    def fits(gpu_index: int, need: dict[str, int]) -> bool:
        return all(have[gpu_index].get(k, 0) >= v for k, v in need.items())

    def walk(position: int) -> bool:
        nonlocal steps
        if position == len(candidates):
            return True
        for candidate in candidates[position]:
            steps += 1
            if steps > SEARCH_STEP_LIMIT:
                return False
            gpu_index, device, need, _ = candidate
            key = (gpu_index, device["name"])
            if key in used_names or not fits(gpu_index, need):
                continue
            used_names.add(key)
            for k, v in need.items():
                have[gpu_index][k] -= v
            taken.append(candidate)
            if walk(position + 1):
                return True
            taken.pop()
            for k, v in need.items():
                have[gpu_index][k] += v
            used_names.discard(key)
        return False

    return list(taken) if walk(0) else None


# --- both ------------------------------------------------------------------------------------------


def _layout_of_dynamic(model: GpuModel, demands: list[Demand], placed: list[list[tuple[str, str]]]
                       ) -> list[GpuPlan]:
    by_label: dict[str, list[Demand]] = {}
    for demand in demands:
        by_label.setdefault(demand.label, []).append(demand)
    gpus = []
    for index, gpu in enumerate(placed):
        plan_ = GpuPlan(index)
        instances = []
        for label, name in gpu:
            ref = resolve_mig_device(name, {index: model})
            if ref is None:
                plan_.full_gpu_for = label
                continue
            plan_.assigned.append((by_label[label][0], ref.profile))
            instances.append(PlacedInstance(ref.profile, ref.placement))
        plan_.instances = tuple(sorted(instances, key=lambda i: i.placement))
        gpus.append(plan_)
    return gpus


def plan(model: GpuModel, gpu_count: int, demands: list[Demand]) -> PlanResult:
    """Static plan vs dynamic mode. The layout dynamic MIG ends up with is itself a valid static
    layout, so the static plan is never worse than it: whichever scores better is proposed."""
    static, static_profiles = plan_static(model, gpu_count, demands)
    static_usage = _static_usage(model, demands, static, static_profiles)
    dynamic, dynamic_profiles = simulate_dynamic(model, gpu_count, demands)
    dynamic_layout = _layout_of_dynamic(model, demands, dynamic)
    per_gpu = [(g.full_gpu_for is not None, [p for _, p in g.assigned]) for g in dynamic_layout]
    unserved_dynamic = [d.label for i, d in enumerate(demands) if i not in dynamic_profiles]
    dynamic_usage = _usage(model, per_gpu, unserved_dynamic, _claims_served(demands, dynamic_profiles))
    if _score(dynamic_usage) > _score(static_usage):
        static, static_profiles, static_usage = dynamic_layout, dict(dynamic_profiles), dynamic_usage
    return PlanResult(model, gpu_count, demands, static, static_usage, dynamic, dynamic_profiles, static_profiles,
                      dynamic_usage)


def differences(result: PlanResult) -> list[str]:
    out = []
    for index, demand in enumerate(result.demands):
        static = result.static_profiles.get(index, "unserved")
        dynamic = result.dynamic_profiles.get(index, "unserved")
        if static != dynamic:
            out.append(f"{demand.label}: static {static}, dynamic {dynamic}")
    return out


def render_plan(result: PlanResult, wide: bool = False) -> str:
    """The plan as text; `wide` adds, under each GPU, one line per MIG device: where it sits, its memory and the
    claim request it serves."""
    model = result.model
    lines = [f"{len(result.demands)} MIG requests on {result.gpu_count} × {model.display_name} "
             f"({model.compute_slices} compute / {model.memory_slices} memory slices each)", "", "Static layout:"]
    for gpu in result.static:
        if gpu.full_gpu_for is not None:
            lines.append(f"  GPU {gpu.index}: MIG disabled, whole GPU for {gpu.full_gpu_for}")
        elif not gpu.instances:
            lines.append(f"  GPU {gpu.index}: unused")
        else:
            layout = ", ".join(f"{i.profile.name}@{i.placement}" for i in gpu.instances)
            lines.append(f"  GPU {gpu.index}: {layout}")
            if wide:
                lines += _instance_lines(gpu)
    lines += _usage_lines(model, result.gpu_count, result.static_usage)
    lines += ["", "Dynamic MIG (claims in input order; per claim the first devices in slice/name order that fit the counters):"]
    for index, devices in enumerate(result.dynamic):
        lines.append(f"  GPU {index}: " + (", ".join(name for _, name in devices) if devices else "unused"))
        if wide:
            width = max((len(name) for _, name in devices), default=0)
            lines += [f"    {name.ljust(width)}  {label}" for label, name in devices]
    lines += _usage_lines(model, result.gpu_count, result.dynamic_usage)
    diff = differences(result)
    lines += ["", "Differences:" if diff else "Both modes give every request the same profile."]
    lines += [f"  {line}" for line in diff]
    lines += ["", "mig-parted config for the static layout:"]
    from gpudra.api.dump import dump_yaml_data

    lines += ["  " + line for line in dump_yaml_data(result.mig_parted_config()).rstrip().splitlines()]
    return "\n".join(lines)


def _instance_lines(gpu: GpuPlan) -> list[str]:
    """`    1g.10gb@0:1   10240 MiB  ns/claim/request` for each instance of a GPU of the static layout."""
    waiting: dict[str, list[str]] = {}
    for demand, profile in gpu.assigned:
        waiting.setdefault(profile.name, []).append(demand.label)
    rows = [(f"{i.profile.name}@{i.placement}", f"{i.profile.memory_mib} MiB",
             (waiting.get(i.profile.name) or ["-"]).pop(0)) for i in gpu.instances]
    widths = [max(len(row[column]) for row in rows) for column in range(2)]
    return [f"    {where.ljust(widths[0])}  {memory.rjust(widths[1])}  {label}" for where, memory, label in rows]


def _usage_lines(model: GpuModel, gpu_count: int, usage: Usage) -> list[str]:
    total_mem = gpu_count * model.memory_slices
    total_compute = gpu_count * model.compute_slices
    lines = [f"  served {usage.claims_served}/{usage.claims_total} claims, {usage.served}/"
             f"{usage.served + len(usage.unserved)} devices on {usage.gpus_used} GPU(s); "
             f"memory slices {usage.memory_slices_used}/{total_mem}, compute slices "
             f"{usage.compute_slices_used}/{total_compute}; stranded: {usage.memory_slices_stranded} memory, "
             f"{usage.compute_slices_stranded} compute slices"]
    if usage.unserved:  # one entry per request, with its count: a claim for 20 devices is not 20 names
        counts = Counter(usage.unserved)
        lines.append("  unserved: " + ", ".join(name if n == 1 else f"{name} ×{n}" for name, n in counts.items()))
    return lines
