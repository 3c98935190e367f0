"""VFIO passthrough (NVIDIA's `PassthroughSupport` gate): a whole GPU handed to a VM (KubeVirt) bound to vfio-pci.

Learned from kubernetes-sigs/dra-driver-nvidia-gpu (commit 95932046), cmd/gpu-kubelet-plugin/:
* `nvlib.go` `getVfioDeviceInfo`: each GPU without MIG devices gets a sibling device `gpu-vfio-<i>` (i: its place
  among the node's NVIDIA PCI functions), `type: vfio`, a UUID that is SHA-1 UUID of the PCI address in the DNS
  namespace, `deviceID`/`vendorID` as `0x%04x`, `productName`, `iommuFDEnabled`, the standard PCI attributes and
  NUMA node, and capacity `addressableMemory` (`deviceinfo.go` `VfioDeviceInfo.GetDevice`);
* `vfio-device.go` `VfioPciManager.Configure`/`Unconfigure`: prepare binds the GPU to vfio-pci, unprepare back to
  nvidia; `device_state.go`: while one sibling is prepared the other is not published (`RemoveSiblingDevices`,
  `discoverSiblingAllocatables`);
* `vfio-cdi.go`: the container (the VM launcher) gets `NVIDIA_VISIBLE_DEVICES=void`, the group's `/dev/vfio/<iommu
  group>` (or `/dev/vfio/devices/vfio<N>` with `PreferIommuFD` where the node has `/dev/iommu`) and, with
  `enableAPIDevice`, `/dev/vfio/vfio` (or `/dev/iommu`); no /dev/nvidia* node and no driver library;
* `api/nvidia.com/resource/v1beta1/vfiodeviceconfig.go`, `iommu.go`: `VfioDeviceConfig` and its defaults.

gpudra binds simulated GPUs only: their PCI functions live in a sysfs-shaped tree beside the simulated GPU state
(`devices/<address>/driver` a link to `drivers/<name>`, `iommu_group` to `kernel/iommu_groups/<N>`), and a bind
re-points the link. Real unbinding (persistence mode, waiting for the GPU's clients, SR-IOV checks, modprobe) is
not implemented: the nvml backend refuses the gate.
"""

from __future__ import annotations

import os
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

from gpudra.atomicfile import ensure_dir
from gpudra.catalog import find_model
from gpudra.cdi import ContainerEdits, Device, DeviceNode, Spec
from gpudra.discovery.model import Gpu, Inventory
from gpudra.errors import GpudraError
from gpudra.kubeletplugin.cdispec import cdi_device_name, vendor_and_class
from .records import GPU_TYPE, VFIO_TYPE, GpuDevice
from gpudra.quantity import Quantity
from gpudra.vocabulary import NUMA_NODE_ATTRIBUTE, PCI_BUS_ID_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE

VFIO_DRIVER, NVIDIA_DRIVER = "vfio-pci", "nvidia"
NVIDIA_VENDOR_ID = 0x10DE
VFIO_DEVICES_ROOT = "/dev/vfio"
IOMMU_DEVICE = "/dev/iommu"
LEGACY_ONLY, PREFER_IOMMUFD = "LegacyOnly", "PreferIommuFD"
SIMULATED_IOMMU_GROUP_BASE = 40  # simulated groups: base + the GPU's PCI position (real ones are the kernel's)


class PassthroughError(GpudraError):
    """A GPU could not be bound to or released from vfio-pci."""


@dataclass(frozen=True)
class VfioFunction:
    """One GPU's PCI function as passthrough sees it."""
    index: int  # place among the node's NVIDIA PCI functions, sorted by address (NVIDIA's nvpci.GetGPUs order)
    address: str
    minor: int  # the GPU's minor while bound to nvidia (gpudra's device records key conflicts on it)
    iommu_group: int
    iommufd: str | None  # vfio<N> under /dev/vfio/devices while bound to vfio-pci with IOMMUFD, else None

    @property
    def name(self) -> str:
        return f"gpu-vfio-{self.index}"

    @property
    def uuid(self) -> str:
        """NVIDIA's uuid.NewSHA1(uuid.NameSpaceDNS, address): the same UUID for the same PCI address."""
        return str(uuid.uuid5(uuid.NAMESPACE_DNS, self.address))


def vfio_functions(inventory: Inventory) -> list[VfioFunction]:
    """The node's GPUs as PCI functions (simulated IOMMU groups), in NVIDIA's order."""
    ordered = sorted(inventory.gpus, key=lambda g: g.pci_bus_id)
    return [VfioFunction(i, g.pci_bus_id, g.minor, SIMULATED_IOMMU_GROUP_BASE + i, None) for i, g in enumerate(ordered)]


def _pci_device_id(gpu: Gpu) -> int:
    model = find_model(gpu.model or gpu.product_name)
    return model.pci_device_ids[0] if model is not None and model.pci_device_ids else 0


def vfio_device(gpu: Gpu, function: VfioFunction, iommufd_enabled: bool, numa_list: bool = False) -> dict[str, Any]:
    """The published `gpu-vfio-<i>` device (NVIDIA's VfioDeviceInfo.GetDevice)."""
    attributes: dict[str, dict[str, Any]] = {
        "type": {"string": VFIO_TYPE},
        "uuid": {"string": function.uuid},
        "deviceID": {"string": f"0x{_pci_device_id(gpu):04x}"},
        "vendorID": {"string": f"0x{NVIDIA_VENDOR_ID:04x}"},
        "productName": {"string": gpu.product_name},
        "iommuFDEnabled": {"bool": iommufd_enabled},
        PCI_BUS_ID_ATTRIBUTE: {"string": gpu.pci_bus_id},
    }
    if gpu.pcie_root:
        attributes[PCIE_ROOT_ATTRIBUTE] = {"string": gpu.pcie_root}
    if gpu.numa_node is not None:
        attributes[NUMA_NODE_ATTRIBUTE] = {"ints": [gpu.numa_node]} if numa_list else {"int": gpu.numa_node}
    device: dict[str, Any] = {"name": function.name, "attributes": attributes}
    if gpu.memory_bytes is not None:  # NVIDIA: the BARs' addressable memory; simulated: the GPU's memory
        device["capacity"] = {"addressableMemory": {"value": _binary(gpu.memory_bytes)}}
    return device


def _binary(num_bytes: int) -> str:
    return Quantity.from_int(num_bytes, "BinarySI").canonical()


def vfio_edits(functions: list[VfioFunction], *, enable_api_device: bool, prefer_iommufd: bool,
               iommufd_enabled: bool) -> ContainerEdits:
    """The claim's edits (NVIDIA's vfioCDIHandler.GetCommonEdits plus GetDeviceSpecsByPCIBusID per device)."""
    use_iommufd = prefer_iommufd and iommufd_enabled
    nodes: list[DeviceNode] = []
    if enable_api_device:
        nodes.append(DeviceNode(path=IOMMU_DEVICE if use_iommufd else f"{VFIO_DEVICES_ROOT}/vfio"))
    for function in functions:
        if use_iommufd:
            if not (function.iommufd or "").startswith("vfio"):
                raise PassthroughError(f"missing iommufd cdev for GPU {function.address!r}")
            nodes.append(DeviceNode(path=f"{VFIO_DEVICES_ROOT}/devices/{function.iommufd}"))
        else:
            nodes.append(DeviceNode(path=f"{VFIO_DEVICES_ROOT}/{function.iommu_group}"))
    return ContainerEdits(env=["NVIDIA_VISIBLE_DEVICES=void"], device_nodes=nodes)


class SimulatedPciBus:
    """The simulated node's PCI functions in a sysfs-shaped tree under `root`; every bind is also a line in
    `root/binds.log` ("<address> <driver>")."""

    def __init__(self, root: str, functions: list[VfioFunction]):
        self.root = root
        self._lock = threading.Lock()
        ensure_dir(root, 0o700)
        for sub in (f"drivers/{NVIDIA_DRIVER}", f"drivers/{VFIO_DRIVER}", "kernel/iommu_groups"):
            os.makedirs(os.path.join(root, sub), exist_ok=True)
        for function in functions:
            device = os.path.join(root, "devices", function.address)
            os.makedirs(device, exist_ok=True)
            group = os.path.join(root, "kernel", "iommu_groups", str(function.iommu_group))
            os.makedirs(group, exist_ok=True)
            if not os.path.islink(os.path.join(device, "iommu_group")):
                os.symlink(os.path.relpath(group, device), os.path.join(device, "iommu_group"))
            if not os.path.islink(os.path.join(device, "driver")):  # a restart keeps what was bound
                self._link(function.address, NVIDIA_DRIVER)

    def _link(self, address: str, driver: str) -> None:
        device = os.path.join(self.root, "devices", address)
        temp = os.path.join(device, ".driver.tmp")
        if os.path.lexists(temp):
            os.unlink(temp)
        os.symlink(os.path.relpath(os.path.join(self.root, "drivers", driver), device), temp)
        os.replace(temp, os.path.join(device, "driver"))  # atomic: a crash leaves the old or the new binding

    def driver(self, address: str) -> str:
        """The driver the function is bound to (the last component of the `driver` link, as NVIDIA's getDriver)."""
        try:
            return os.path.basename(os.readlink(os.path.join(self.root, "devices", address, "driver")))
        except OSError as exc:
            raise PassthroughError(f"error getting driver details for GPU {address!r}: {exc}") from None

    def iommu_group(self, address: str) -> int:
        return int(os.path.basename(os.readlink(os.path.join(self.root, "devices", address, "iommu_group"))))

    def bind(self, address: str, driver: str) -> None:
        """Idempotent: nothing happens when the function is bound to `driver` already (NVIDIA's changeDriver)."""
        with self._lock:
            current = self.driver(address)
            if current == driver:
                return
            if current not in (NVIDIA_DRIVER, VFIO_DRIVER):
                raise PassthroughError(f"GPU {address!r} is bound to {current!r} driver, expected {VFIO_DRIVER!r} "
                                       f"or {NVIDIA_DRIVER!r}")
            self._link(address, driver)
            fd = os.open(os.path.join(self.root, "binds.log"),
                         os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(f"{address} {driver}\n")


class Passthrough:
    """What prepare needs: the node's PCI functions by device name and the bus that binds them."""

    def __init__(self, bus: SimulatedPciBus, functions: list[VfioFunction], iommufd_enabled: bool = False):
        self.bus = bus
        self.functions = {f.name: f for f in functions}
        self.iommufd_enabled = iommufd_enabled

    def function(self, name: str) -> VfioFunction | None:
        return self.functions.get(name)

    def sibling(self, record: GpuDevice) -> str | None:
        """The name of a prepared gpu/vfio record's sibling, which is not published meanwhile."""
        for function in self.functions.values():
            if function.minor == record.gpu_minor:
                if record.type == VFIO_TYPE:
                    return f"gpu-{function.minor}"
                if record.type == GPU_TYPE:
                    return function.name
        return None

    def claim_spec(self, driver_name: str, claim_uid: str, records: Sequence[GpuDevice]) -> Spec:
        """The claim's CDI spec: one CDI device per VFIO device with its /dev/vfio node, the claim-wide node and
        variable in the spec's edits (NVIDIA: one VfioDeviceConfig applies to all of a claim's VFIO devices)."""
        binding = records[0].vfio
        prefer = binding is not None and binding.backend_policy == PREFER_IOMMUFD
        api = binding is not None and binding.enable_api_device
        functions = [self.functions[r.device] for r in records]
        common = vfio_edits([], enable_api_device=api, prefer_iommufd=prefer, iommufd_enabled=self.iommufd_enabled)
        devices = [Device(name=cdi_device_name(claim_uid, r.device),
                          container_edits=vfio_edits([f], enable_api_device=False, prefer_iommufd=prefer,
                                                     iommufd_enabled=self.iommufd_enabled))
                   for r, f in zip(records, functions)]
        for device in devices:
            device.container_edits.env = []  # the variable is the spec's, once
        vendor, cls = vendor_and_class(driver_name)
        return Spec(kind=f"{vendor}/{cls}", devices=devices, container_edits=common)
