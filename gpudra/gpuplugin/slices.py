"""ResourceSlices and DeviceClasses the way the NVIDIA GPU DRA driver publishes them.

One pool per node (pool name = node name). Full GPUs are `gpu-<minor>`, MIG devices
`gpu-<parentMinor>-mig-<profile>-<GI profile id>-<start>`. A pool that exceeds the API
limits is split into several slices that all carry the same generation and count.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Callable

from gpudra.catalog import MIG_ENGINE_CAPACITIES
from gpudra.discovery.model import Gpu, Inventory, MigDevice
from .records import VFIO_TYPE
from .consumableshares import DISABLED, apply_consumable_shares, enabled as consumable_enabled
from gpudra.vocabulary import (DRIVER_NAME, GPU_EXTENDED_RESOURCE, NUMA_NODE_ATTRIBUTE, NVLINK_CLIQUE_ATTRIBUTE,
                               NVLINK_DOMAIN_ATTRIBUTE, PARENT_UUID_ATTRIBUTE, PCI_BUS_ID_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE)

DEFAULT_DRIVER_NAME = DRIVER_NAME
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_COUNTERS = 64  # when any device has taints or consumesCounters
MAX_COUNTER_SETS_PER_SLICE = 8
# NVIDIA's GPU driver publishes no NVLink attribute for single-node NVLink (HGX/DGX baseboards, NVLink bridges);
# gpudra names the set of GPUs joined by NVLink with NVLINK_DOMAIN_ATTRIBUTE, so `matchAttribute:
# gpu.nvidia.com/nvlinkDomain` keeps a claim's GPUs on one NVLink domain (an HGX board: all 8 GPUs; a bridged
# PCIe pair: the pair). The names live in gpudra.vocabulary, the one list hints and repairs use too.
SHARING_MODES = ("none", "consumable")
# `--sharing consumable` (KEP-5075 consumable capacity): a full GPU may be allocated to several claims at once.
# `compute` is the GPU's compute in thousandths (1000 = the whole GPU; whole units, because upstream rounds
# request policies to whole units); a request that names no share takes the whole GPU, so plain "give me a GPU"
# claims stay exclusive. `memory` is only consumed when a request asks for it (default 0).
COMPUTE_CAPACITY = "compute"
COMPUTE_UNITS = 1000


def semver(version: str) -> str:
    """NVIDIA-style semver normalisation: `580.95.05` -> `580.95.5`, `13.0` -> `13.0.0`, `9` -> `9.0.0`."""
    parts = [p for p in re.split(r"[.\-+]", version.strip()) if p != ""][:3]
    numbers = []
    for part in parts:
        digits = re.match(r"\d+", part)
        numbers.append(str(int(digits.group(0))) if digits else "0")
    while len(numbers) < 3:
        numbers.append("0")
    return ".".join(numbers)


def binary_quantity(num_bytes: int) -> str:
    for exponent, suffix in ((5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
        unit = 1024**exponent
        if num_bytes >= unit and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)


def _s(value: str) -> dict[str, str]:
    return {"string": value}


def gpu_common_attributes(gpu: Gpu, inventory: Inventory, numa_list: bool = False) -> dict[str, dict[str, Any]]:
    """Attributes a full GPU shares with the MIG devices carved out of it. `numa_list` (NVIDIA's
    DRAListTypeAttributes gate): the NUMA node as a one-element list, KEP-6072's preferred form
    (NVIDIA's addNumaNodeAttribute in cmd/gpu-kubelet-plugin/deviceinfo.go)."""
    attrs: dict[str, dict[str, Any]] = {
        "productName": _s(gpu.product_name),
        "brand": _s(gpu.brand),
        "architecture": _s(gpu.architecture),
        "cudaComputeCapability": {"version": semver(gpu.cuda_compute_capability)},
        "driverVersion": {"version": semver(inventory.driver_version)},
        "cudaDriverVersion": {"version": semver(inventory.cuda_driver_version)},
        PCI_BUS_ID_ATTRIBUTE: _s(gpu.pci_bus_id),
    }
    if gpu.pcie_root:
        attrs[PCIE_ROOT_ATTRIBUTE] = _s(gpu.pcie_root)
    if gpu.numa_node is not None:
        attrs[NUMA_NODE_ATTRIBUTE] = {"ints": [gpu.numa_node]} if numa_list else {"int": gpu.numa_node}
    if gpu.nvlink_domain:  # GPUs that reach each other over NVLink (matchAttribute: gpu.nvidia.com/nvlinkDomain)
        attrs[NVLINK_DOMAIN_ATTRIBUTE] = _s(gpu.nvlink_domain)
    if gpu.nvlink_clique:  # NVLink fabric clique "<clusterUuid>.<cliqueId>" (NVIDIA's cliqueID)
        attrs[NVLINK_CLIQUE_ATTRIBUTE] = _s(gpu.nvlink_clique)
    return attrs


def gpu_device(gpu: Gpu, inventory: Inventory, sharing: str = "none", numa_list: bool = False) -> dict[str, Any]:
    attributes = {"type": _s("gpu"), "uuid": _s(gpu.uuid), **gpu_common_attributes(gpu, inventory, numa_list)}
    device: dict[str, Any] = {"name": gpu.name, "attributes": attributes}
    if gpu.memory_bytes is not None:  # NVML says NOT_SUPPORTED on unified-memory parts
        device["capacity"] = {"memory": {"value": binary_quantity(gpu.memory_bytes)}}
    if sharing == "consumable":
        device["allowMultipleAllocations"] = True
        capacity = device.setdefault("capacity", {})
        if "memory" in capacity:
            capacity["memory"]["requestPolicy"] = {"default": "0", "validRange": {"min": "0"}}
        whole = str(COMPUTE_UNITS)
        capacity[COMPUTE_CAPACITY] = {
            "value": whole,
            "requestPolicy": {"default": whole, "validRange": {"min": "1", "max": whole, "step": "1"}},
        }
    elif sharing != "none":
        raise ValueError(f"unknown sharing mode {sharing!r}; choose one of {', '.join(SHARING_MODES)}")
    return device


def mig_device(mig: MigDevice, parent: Gpu, inventory: Inventory, numa_list: bool = False) -> dict[str, Any]:
    attributes = {
        "type": _s("mig"),
        "uuid": _s(mig.uuid),
        PARENT_UUID_ATTRIBUTE: _s(parent.uuid),
        "profile": _s(mig.profile),
        **gpu_common_attributes(parent, inventory, numa_list),
    }
    capacity: dict[str, dict[str, str]] = {
        name: {"value": str(getattr(mig, attribute))} for name, attribute in MIG_ENGINE_CAPACITIES.items()
    }
    capacity["memory"] = {"value": binary_quantity(mig.memory_bytes)}
    for index in range(mig.placement_start, mig.placement_start + mig.placement_size):
        capacity[f"memorySlice{index}"] = {"value": "1"}
    return {"name": mig.name, "attributes": attributes, "capacity": capacity}


def node_devices(inventory: Inventory, sharing: str = "none", numa_list: bool = False) -> list[dict[str, Any]]:
    """Static devices: a full GPU, or its MIG devices when MIG mode is on (ordered by PCI bus id). With
    `sharing="consumable"` full GPUs are shareable (MIG devices never are)."""
    devices: list[dict[str, Any]] = []
    for gpu in sorted(inventory.gpus, key=lambda g: (g.pci_bus_id, g.minor)):
        if gpu.mig_enabled:
            devices.extend(mig_device(m, gpu, inventory, numa_list)
                           for m in sorted(gpu.mig_devices, key=lambda m: m.name))
        else:
            devices.append(gpu_device(gpu, inventory, sharing, numa_list))
    return devices


def slice_name(node_name: str, driver_name: str, index: int) -> str:
    """Deterministic, so a restarted driver finds (and updates) its own slices instead of adding more."""
    base = re.sub(r"[^a-z0-9.-]", "-", f"{node_name}-{driver_name}".lower()).strip("-.")
    if len(base) > 230:
        base = base[:200] + "-" + hashlib.sha256(base.encode()).hexdigest()[:16]
    return f"{base}-{index}"


def _limit_for(devices: list[dict[str, Any]]) -> int:
    if any(d.get("consumesCounters") or d.get("taints") for d in devices):
        return MAX_DEVICES_PER_SLICE_WITH_COUNTERS
    return MAX_DEVICES_PER_SLICE


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)] or [[]]


TaintsOf = Callable[[dict[str, Any]], list[dict[str, Any]]]


def _apply_taints(devices: list[dict[str, Any]], taints_of: TaintsOf | None) -> list[dict[str, Any]]:
    """Device taints (KEP-5055) from the driver's health monitor, set before the pool is split
    (a slice holding tainted devices has the lower device limit)."""
    if taints_of is not None:
        for device in devices:
            taints = taints_of(device)
            if taints:
                device["taints"] = taints
    return devices


def _dynamic_bodies(inventory: Inventory, sharing: str = "none", taints_of: TaintsOf | None = None,
                    layout: str = "split", numa_list: bool = False) -> list[dict[str, Any]]:
    """Dynamic MIG (KEP-4815 partitionable devices). `layout` "split" (Kubernetes 1.35 on): counter-set slices,
    then devices; "combined" (1.33, 1.34): one slice per GPU with its counter set and its devices, as NVIDIA's
    driver publishes for those releases (generateCombinedResourceSlices)."""
    from gpudra.mig import dynamic
    from gpudra.catalog import find_gpu_model

    partitionable, plain = [], []
    for gpu in sorted(inventory.gpus, key=lambda g: (g.pci_bus_id, g.minor)):
        model = find_gpu_model(gpu.model or gpu.product_name) if gpu.mig_capable else None
        # Ampere can only leave MIG mode with a reset: partition it only when MIG is already on.
        if model is not None and (model.dynamic_mig_capable or gpu.mig_enabled):
            attrs = gpu_common_attributes(gpu, inventory, numa_list)
            partitionable.append(dynamic.DynamicMigGpu(minor=gpu.minor, model=model, uuid=gpu.uuid, attributes=attrs,
                                                       include_full_gpu=model.dynamic_mig_capable))
        else:
            plain.append(gpu)
    bodies: list[dict[str, Any]] = []
    if layout == "combined":
        for g in partitionable:
            devices = _apply_taints(dynamic.gpu_devices(g), taints_of)
            if len(devices) > _limit_for(devices):  # a second slice would need a counter set of its own
                raise ValueError(f"GPU {g.minor}: {len(devices)} partitionable devices do not fit one "
                                 f"ResourceSlice ({_limit_for(devices)} at most), which Kubernetes 1.34 needs")
            bodies.append({"sharedCounters": [dynamic.counter_set(g.model, g.minor)], "devices": devices})
        plain_devices = _apply_taints([gpu_device(g, inventory, sharing, numa_list) for g in plain], taints_of)
        if plain_devices:
            bodies.extend({"devices": c} for c in _chunks(plain_devices, _limit_for(plain_devices)))
        return bodies
    counter_sets = [dynamic.counter_set(g.model, g.minor) for g in partitionable]
    for chunk in _chunks(counter_sets, MAX_COUNTER_SETS_PER_SLICE) if counter_sets else []:
        bodies.append({"sharedCounters": chunk})
    for g in partitionable:
        devices = _apply_taints(dynamic.gpu_devices(g), taints_of)
        bodies.extend({"devices": c} for c in _chunks(devices, _limit_for(devices)))
    plain_devices = _apply_taints([gpu_device(g, inventory, sharing, numa_list) for g in plain], taints_of)
    if plain_devices:
        bodies.extend({"devices": c} for c in _chunks(plain_devices, _limit_for(plain_devices)))
    return bodies


def dynamic_mig_layout(kubernetes_version: str | None = None, features: Any = None) -> tuple[bool, str | None]:
    """Whether Kubernetes `kubernetes_version` (with `features`, default: its default gates) can allocate
    the dynamic-MIG layout, and, when not, why (a note for the user).

    The layout needs partitionable devices (DRAPartitionableDevices). Where the counter sets go depends
    on the release (gpudra.versions.partitionable_layout; build_resource_slices(slice_layout=…)): 1.33 and
    1.34 want each GPU's counter set in the slice of its devices, 1.35 on in slices of their own. Without
    the gate gpudra publishes what the cluster can allocate: the full GPUs and the MIG devices that exist.
    """
    from gpudra.allocator.features import Features
    from gpudra.versions import gate_state, parse_version

    version = parse_version(kubernetes_version)
    state = gate_state("DRAPartitionableDevices", version)
    fallback = "; publishing what it can allocate: the full GPUs and the existing MIG devices"
    if not Features.parse(features, version).partitionable_devices:
        return False, (f"dynamic MIG needs the DRAPartitionableDevices feature gate ({state.describe()})"
                       + fallback)
    return True, None


def build_resource_slices(inventory: Inventory, node_name: str, *, driver_name: str = DEFAULT_DRIVER_NAME,
                          generation: int = 1, node_uid: str | None = None, dynamic_mig: bool = False,
                          max_devices_per_slice: int | None = None, sharing: str = "none",
                          taints_of: TaintsOf | None = None, slice_layout: str = "split",
                          numa_list: bool = False, consumable_shares: str = DISABLED,
                          extra_devices: list[dict[str, Any]] | None = None,
                          withheld: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The node's pool as ResourceSlice objects (resource.k8s.io/v1). `sharing="consumable"` publishes full
    GPUs with allowMultipleAllocations and shareable `compute`/`memory` capacities (consumable capacity).
    `taints_of(device)` gives each device's taints (the health monitor's; see health.py). `slice_layout`
    (dynamic MIG only): "split" or "combined", the release's (gpudra.versions.partitionable_layout).
    `numa_list`: resource.kubernetes.io/numaNode as a list (NVIDIA's DRAListTypeAttributes gate).
    `consumable_shares`: NVIDIA's `--consumable-shares` option on every GPU and MIG device (consumableshares.py).
    `extra_devices` (VFIO passthrough devices, passthrough.py) join the GPUs; devices named in `withheld` are not
    published (a prepared GPU's VFIO sibling and the other way round)."""
    if sharing not in SHARING_MODES:
        raise ValueError(f"unknown sharing mode {sharing!r}; choose one of {', '.join(SHARING_MODES)}")
    if dynamic_mig:
        bodies = _dynamic_bodies(inventory, sharing, taints_of, slice_layout, numa_list)
    else:
        devices = _apply_taints(node_devices(inventory, sharing, numa_list), taints_of)
        if consumable_enabled(consumable_shares):  # NVIDIA leaves VFIO devices out of consumable shares
            devices = [apply_consumable_shares(d, consumable_shares) for d in devices]
        devices = [d for d in devices + list(extra_devices or ()) if d["name"] not in withheld]
        limit = min(max_devices_per_slice or MAX_DEVICES_PER_SLICE, _limit_for(devices))
        bodies = [{"devices": chunk} for chunk in _chunks(devices, limit)]
    if max_devices_per_slice and dynamic_mig:
        split: list[dict[str, Any]] = []
        for body in bodies:
            if "devices" in body and "sharedCounters" not in body:  # a combined slice stays whole
                split.extend({"devices": c} for c in _chunks(body["devices"], max_devices_per_slice))
            else:
                split.append(body)
        bodies = split
    if dynamic_mig and consumable_enabled(consumable_shares):
        bodies = [{**body, "devices": [apply_consumable_shares(d, consumable_shares) for d in body["devices"]]}
                  if "devices" in body else body for body in bodies]
    return resource_slices(bodies, node_name, driver_name=driver_name, generation=generation, node_uid=node_uid)


def resource_slices(bodies: list[dict[str, Any]], node_name: str, *, driver_name: str, generation: int = 1,
                    node_uid: str | None = None) -> list[dict[str, Any]]:
    """One node-local pool: a ResourceSlice per body (its devices, counters), named, owned by the Node."""
    pool = {"name": node_name, "generation": generation, "resourceSliceCount": len(bodies)}
    slices = []
    for index, body in enumerate(bodies):
        metadata: dict[str, Any] = {"name": slice_name(node_name, driver_name, index)}
        if node_uid:
            metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid,
                                            "controller": True}]
        spec = {"driver": driver_name, "nodeName": node_name, "pool": dict(pool), **body}
        slices.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": metadata,
                       "spec": spec})
    return slices


def device_classes(driver_name: str = DEFAULT_DRIVER_NAME, *,
                   extended_resource_name: str | None = GPU_EXTENDED_RESOURCE) -> list[dict[str, Any]]:
    """DeviceClasses `gpu.nvidia.com` (full GPUs), `mig.nvidia.com` (MIG devices) and `vfio.gpu.nvidia.com` (GPUs
    bound to vfio-pci, the `PassthroughSupport` gate's `gpu-vfio-<i>` devices): NVIDIA's chart templates
    deviceclass-{gpu,mig,vfio-gpu}.yaml (kubernetes-sigs/dra-driver-nvidia-gpu 95932046), which install all three
    whenever GPUs are enabled, the vfio class whether or not the gate is on (it then selects nothing)."""
    prefix = driver_name.split(".", 1)[1] if "." in driver_name else driver_name

    def device_class(name: str, device_type: str, extra: dict[str, Any]) -> dict[str, Any]:
        selector = f"device.driver == '{driver_name}' && device.attributes['{driver_name}'].type == '{device_type}'"
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": selector}}], **extra},
        }

    gpu_extra = {"extendedResourceName": extended_resource_name} if extended_resource_name else {}
    return [
        device_class(driver_name, "gpu", gpu_extra),
        device_class(f"mig.{prefix}", "mig", {}),
        device_class(f"vfio.{driver_name}", VFIO_TYPE, {}),
    ]


def pool_devices(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices for d in s["spec"].get("devices", [])]
