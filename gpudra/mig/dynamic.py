"""Dynamic MIG as partitionable devices: the ResourceSlice layout of the NVIDIA DRA driver (k8s >= 1.35).

Per physical GPU:
* one counter set `gpu-<minor>-counter-set` holding, per dimension, the maximum over all MIG
  profiles (multiprocessors, engines, memory) plus `memory-slice-0 … memory-slice-(S-1)` of 1 each;
* the full GPU, consuming every counter (so it excludes, and is excluded by, any MIG device);
* one abstract MIG device per (profile, placement), consuming its engine/memory counts and one
  unit of each memory slice it covers — two devices whose placements overlap can never both fit.

The counter set goes into its own slice (slice 0 holds the counter sets of all GPUs); each GPU's
devices follow in one slice per GPU, ordered by name, as the NVIDIA driver does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from gpudra.catalog import MIG_ENGINE_CAPACITIES, GpuModel, MigProfile, Placement, gpu_model
from gpudra.vocabulary import DRIVER_NAME, PARENT_UUID_ATTRIBUTE

# capacity name (C identifier, camelCase) -> counter name (DNS label: copyEngines -> copy-engines)
ENGINE_COUNTERS: dict[str, str] = {
    name: re.sub(r"[A-Z]", lambda upper: "-" + upper.group().lower(), name) for name in MIG_ENGINE_CAPACITIES
}

_MIG_NAME = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")


def binary_quantity(num_bytes: int) -> str:
    """Canonical BinarySI form of a byte count (e.g. `9984Mi`, `80Gi`)."""
    for exponent, suffix in ((5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
        unit = 1024**exponent
        if num_bytes % unit == 0 and num_bytes >= unit:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def memory_slice_counter(index: int) -> str:
    return f"memory-slice-{index}"


def memory_slice_capacity(index: int) -> str:
    """Static MIG devices publish the memory slices they hold as capacities `memorySlice<N>`."""
    return f"memorySlice{index}"


def _rfc1123(text: str) -> str:
    text = re.sub(r"[^a-z0-9.-]", "-", text.lower()).strip("-").rstrip(".")
    return text[:253]


def mig_device_name(minor: int, profile: MigProfile | str, profile_id: int | None, start: int) -> str:
    """Canonical MIG device name: `gpu-<parentMinor>-mig-<profile w/o dots>-<profile ID>-<start>`."""
    if isinstance(profile, MigProfile):
        profile_id = profile.profile_id if profile_id is None else profile_id
        profile = profile.name
    if profile_id is None:
        raise ValueError("profile_id is required when the profile is given by name")
    return f"gpu-{minor}-mig-{_rfc1123(profile.replace('.', ''))}-{profile_id}-{start}"


@dataclass(frozen=True)
class ParsedMigName:
    parent_minor: int
    profile_token: str  # profile name without dots, `+` -> `-` (e.g. `1g10gb-me`)
    profile_id: int
    start: int


def parse_mig_device_name(name: str) -> ParsedMigName | None:
    match = _MIG_NAME.match(name)
    if match is None:
        return None
    return ParsedMigName(int(match.group(1)), match.group(2), int(match.group(3)), int(match.group(4)))


def full_gpu_device_name(minor: int) -> str:
    return f"gpu-{minor}"


def known_engine_capacities(model: GpuModel) -> list[str]:
    """Engine dimensions known for every profile of the model.

    A counter only means something if every consumer declares it; a dimension the catalog
    does not know for some profile is left out rather than guessed.
    """
    return [cap for cap in ENGINE_COUNTERS if all(p.engine_counts[cap] is not None for p in model.profiles)]


def profile_capacity(profile: MigProfile, engines: Iterable[str]) -> dict[str, dict[str, str]]:
    capacity = {cap: {"value": str(profile.engine_counts[cap])} for cap in engines}
    capacity["memory"] = {"value": binary_quantity(profile.memory_bytes)}
    return capacity


def max_capacity(model: GpuModel) -> dict[str, int]:
    """Per-dimension maximum over all profiles (what the full GPU and the counter set carry)."""
    engines = known_engine_capacities(model)
    maxima: dict[str, int] = {cap: max(p.engine_counts[cap] for p in model.profiles) for cap in engines}  # type: ignore[type-var, misc]  # known: not None
    maxima["memory"] = max(p.memory_bytes for p in model.profiles)
    return maxima


def memory_slice_count(model: GpuModel) -> int:
    """Largest placement end seen, as the driver sizes `memory-slice-*` counters."""
    return max(placement.end for p in model.profiles for placement in p.placements)


def counter_set(model: GpuModel, minor: int) -> dict[str, Any]:
    counters: dict[str, dict[str, str]] = {}
    for cap, value in max_capacity(model).items():
        name = "memory" if cap == "memory" else ENGINE_COUNTERS[cap]
        counters[name] = {"value": binary_quantity(value) if cap == "memory" else str(value)}
    for index in range(memory_slice_count(model)):
        counters[memory_slice_counter(index)] = {"value": "1"}
    return {"name": counter_set_name(minor), "counters": counters}


def _mig_counters(profile: MigProfile, placement: Placement, engines: list[str]) -> dict[str, dict[str, str]]:
    counters = {ENGINE_COUNTERS[cap]: {"value": str(profile.engine_counts[cap])} for cap in engines}
    counters["memory"] = {"value": binary_quantity(profile.memory_bytes)}
    for index in placement.memory_slices:
        counters[memory_slice_counter(index)] = {"value": "1"}
    return counters


def _string(value: str) -> dict[str, str]:
    return {"string": value}


@dataclass
class DynamicMigGpu:
    """What the layout needs to know about one physical GPU."""

    minor: int
    model: GpuModel
    uuid: str
    # Extra attributes in DRA shape ({"string": …}, {"version": …}), e.g. productName, brand,
    # architecture, cudaComputeCapability, driverVersion, cudaDriverVersion,
    # resource.kubernetes.io/pciBusID. Copied to the full GPU and to every MIG device.
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Ampere needs a reset to leave MIG mode: announce the full GPU only on Hopper and later.
    include_full_gpu: bool | None = None

    @classmethod
    def of(cls, minor: int, model: GpuModel | str, uuid: str, **kwargs: Any) -> "DynamicMigGpu":
        return cls(minor=minor, model=gpu_model(model) if isinstance(model, str) else model, uuid=uuid, **kwargs)

    @property
    def announces_full_gpu(self) -> bool:
        return self.model.dynamic_mig_capable if self.include_full_gpu is None else self.include_full_gpu


def full_gpu_device(gpu: DynamicMigGpu) -> dict[str, Any]:
    model = gpu.model
    attributes = {"type": _string("gpu"), "uuid": _string(gpu.uuid)}
    attributes.update({k: dict(v) for k, v in gpu.attributes.items() if k not in attributes})
    capacity = {cap: {"value": binary_quantity(v) if cap == "memory" else str(v)} for cap, v in max_capacity(model).items()}
    consumed = counter_set(model, gpu.minor)["counters"]
    return {
        "name": full_gpu_device_name(gpu.minor),
        "attributes": attributes,
        "capacity": capacity,
        "consumesCounters": [{"counterSet": counter_set_name(gpu.minor), "counters": consumed}],
    }


def mig_device(gpu: DynamicMigGpu, profile: MigProfile, placement: Placement) -> dict[str, Any]:
    engines = known_engine_capacities(gpu.model)
    attributes = {"type": _string("mig"), "profile": _string(profile.name), PARENT_UUID_ATTRIBUTE: _string(gpu.uuid)}
    attributes.update({k: dict(v) for k, v in gpu.attributes.items() if k not in attributes and k != "uuid"})
    return {
        "name": mig_device_name(gpu.minor, profile, None, placement.start),
        "attributes": attributes,
        "capacity": profile_capacity(profile, engines),
        "consumesCounters": [{"counterSet": counter_set_name(gpu.minor),
                              "counters": _mig_counters(profile, placement, engines)}],
    }


def gpu_devices(gpu: DynamicMigGpu) -> list[dict[str, Any]]:
    """The full GPU (when announced) and one device per (profile, placement), sorted by name."""
    devices = [full_gpu_device(gpu)] if gpu.announces_full_gpu else []
    for profile in gpu.model.profiles:
        if profile.compute_slices < 1:
            continue
        devices.extend(mig_device(gpu, profile, placement) for placement in profile.placements)
    return sorted(devices, key=lambda device: device["name"].encode())


@dataclass(frozen=True)
class MigDeviceRef:
    """Which physical instance an abstract dynamic-MIG device stands for."""

    parent_minor: int
    profile: MigProfile
    placement: Placement


def resolve_mig_device(name: str, models_by_minor: Mapping[int, GpuModel]) -> MigDeviceRef | None:
    """Map a dynamic-MIG device name back to (GPU, profile, placement); None if not a MIG name."""
    parsed = parse_mig_device_name(name)
    if parsed is None or parsed.parent_minor not in models_by_minor:
        return None
    model = models_by_minor[parsed.parent_minor]
    profile = model.profile_by_id(parsed.profile_id)
    if _rfc1123(profile.name.replace(".", "")) != parsed.profile_token:
        return None
    return MigDeviceRef(parsed.parent_minor, profile, profile.placement_at(parsed.start))


def resource_slices(node_name: str, gpus: list[DynamicMigGpu], *, driver: str = DRIVER_NAME,
                    generation: int = 1, node_uid: str | None = None) -> list[dict[str, Any]]:
    """ResourceSlice objects (resource.k8s.io/v1) for a node in dynamic-MIG mode, k8s >= 1.35 split layout.

    Slice 0 carries the counter sets of all GPUs; then one devices-only slice per GPU in the
    order given (the driver orders GPUs by PCI bus ID).
    """
    count = 1 + len(gpus)
    pool = {"name": node_name, "generation": generation, "resourceSliceCount": count}

    def slice_object(index: int, body: dict[str, Any]) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": f"{node_name}-{driver}-{index}".replace("/", "-")}
        if node_uid is not None:
            metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid,
                                            "controller": True}]
        spec = {"driver": driver, "nodeName": node_name, "pool": dict(pool), **body}
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": metadata, "spec": spec}

    slices = [slice_object(0, {"sharedCounters": [counter_set(gpu.model, gpu.minor) for gpu in gpus]})]
    slices.extend(slice_object(i + 1, {"devices": gpu_devices(gpu)}) for i, gpu in enumerate(gpus))
    return slices


def combined_resource_slices(node_name: str, gpus: list[DynamicMigGpu], *, driver: str = DRIVER_NAME,
                             generation: int = 1) -> list[dict[str, Any]]:
    """The k8s 1.34 layout: one slice per GPU holding its counter set and its devices."""
    pool = {"name": node_name, "generation": generation, "resourceSliceCount": len(gpus)}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{driver}-{i}".replace("/", "-")},
            "spec": {"driver": driver, "nodeName": node_name, "pool": dict(pool),
                     "sharedCounters": [counter_set(gpu.model, gpu.minor)], "devices": gpu_devices(gpu)},
        }
        for i, gpu in enumerate(gpus)
    ]
