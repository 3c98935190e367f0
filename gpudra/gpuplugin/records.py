"""The GPU plugin's records in the checkpoint: what a prepared GPU, MIG or VFIO device is (`GpuDevice`, a
`PreparedDevice` with the GPU's fields) and the claim's MPS control daemon (`MpsDaemon`, the entry's payload).
The kubelet-plugin helper keeps them without knowing them: importing this module registers how they are read back
(`register_device_types`, `register_entry_payload`). Their JSON is the checkpoint's as it has always been (one flat
record per device), so files of every version read back unchanged.

Learned from NVIDIA's `cmd/gpu-kubelet-plugin/prepared.go` and `checkpointv.go` (PreparedDevices, PreparedClaim),
which type the same facts in the plugin, not in the helper; the fields are gpudra's own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpudra.device_config import Sharing
from gpudra.kubeletplugin.prepared import (JSON, ClaimEntry, EntryError, PreparedDevice, ReservedDevice, is_range,
                                           is_small_int, is_str_list, optional_str, register_device_types,
                                           register_entry_payload)

GPU_TYPE, MIG_TYPE, VFIO_TYPE = "gpu", "mig", "vfio"
GPU_RECORD_TYPES = (GPU_TYPE, MIG_TYPE, VFIO_TYPE)


# -- the parts of a device record ----------------------------------------------------------------------------
@dataclass(frozen=True)
class MigPlacement:
    """A MIG device: its GPU-instance profile and placement, and (once it exists) its instance IDs."""

    gi_profile_id: int
    start: int
    size: int | None
    dynamic: bool  # created by this prepare (dynamic MIG), not by the MIG manager beforehand
    gi_id: int | None = None
    ci_id: int | None = None
    uuid: str | None = None

    @property
    def key(self) -> tuple[int, int]:
        """What identifies the device on its GPU across re-creations (its instance IDs may change)."""
        return self.gi_profile_id, self.start

    def to_json(self) -> dict[str, JSON]:
        return {"giId": self.gi_id, "ciId": self.ci_id, "uuid": self.uuid, "giProfileId": self.gi_profile_id,
                "start": self.start, "size": self.size, "dynamic": self.dynamic}

    @classmethod
    def from_json(cls, value: JSON, name: str, completed: bool) -> MigPlacement:
        if not isinstance(value, dict) or not is_small_int(value.get("giProfileId")) or not is_small_int(value.get("start")):
            raise EntryError(f"device {name}: mig has no giProfileId/start")
        ids_known = is_small_int(value.get("giId")) and is_small_int(value.get("ciId"))
        if not isinstance(value.get("dynamic"), bool) or (completed or not value["dynamic"]) and not ids_known:
            raise EntryError(f"device {name}: mig has no GPU/compute instance IDs")
        size = value.get("size")
        if size is not None and not is_small_int(size):
            raise EntryError(f"device {name}: mig size is not a small non-negative integer")
        for key in ("giId", "ciId"):
            if value.get(key) is not None and not is_small_int(value[key]):
                raise EntryError(f"device {name}: mig {key} is not a small non-negative integer")
        return cls(gi_profile_id=value["giProfileId"], start=value["start"], size=size, dynamic=value["dynamic"],
                   gi_id=value.get("giId"), ci_id=value.get("ciId"),
                   uuid=optional_str(value.get("uuid"), f"device {name}: mig uuid"))


@dataclass(frozen=True)
class SharingRecord:
    """The sharing a device was prepared with (decoded from its opaque config: `device_config.Sharing`)."""

    strategy: str  # "TimeSlicing" | "MPS"
    time_slice_interval: str | None = None
    mps_active_thread_percentage: int | None = None
    mps_pinned_memory_limit_mib: int | None = None
    mps_per_device_pinned_memory_mib: tuple[tuple[str, int], ...] = ()  # (device UUID or index, MiB)
    mps_multi_user: bool | None = None  # NVIDIA's MpsConfig.MultiUser (`-d -M`); None: the config did not say

    @property
    def is_mps(self) -> bool:
        return self.strategy == "MPS"

    @property
    def is_time_slicing(self) -> bool:
        return self.strategy == "TimeSlicing"

    def to_json(self) -> dict[str, JSON]:
        """The checkpoint's form: the opaque config's own JSON (`device_config.Sharing`, one copy of the names)."""
        spec = Sharing(self.strategy, self.time_slice_interval, self.mps_active_thread_percentage,
                       self.mps_pinned_memory_limit_mib, dict(self.mps_per_device_pinned_memory_mib),
                       self.mps_multi_user)
        json_form: dict[str, JSON] = spec.to_dict()
        return json_form

    def normalized(self) -> SharingRecord:
        """As NVIDIA's Normalize leaves a config: TimeSlicing without an interval means the Default interval
        (gpudra's decoder fills it in already; this keeps records written without it comparable)."""
        if self.is_time_slicing and self.time_slice_interval is None:
            return replace(self, time_slice_interval="Default")
        return self

    @classmethod
    def from_json(cls, value: JSON, name: str) -> SharingRecord:
        problem = f"device {name}: sharing is not a sharing config"
        if not isinstance(value, dict) or not isinstance(value.get("strategy"), str):
            raise EntryError(problem)
        numbers = {}
        for key in ("mpsActiveThreadPercentage", "mpsPinnedMemoryLimitMiB"):
            if value.get(key) is not None and not is_small_int(value[key]):
                raise EntryError(problem)
            numbers[key] = value.get(key)
        per_device = value.get("mpsPerDevicePinnedMemoryMiB") or {}
        if not isinstance(per_device, dict) or not all(isinstance(k, str) and is_small_int(v)
                                                       for k, v in per_device.items()):
            raise EntryError(problem)
        interval = value.get("timeSliceInterval")
        if interval is not None and not isinstance(interval, str):
            raise EntryError(problem)
        multi_user = value.get("mpsMultiUser")
        if multi_user is not None and not isinstance(multi_user, bool):
            raise EntryError(problem)
        return cls(strategy=value["strategy"], time_slice_interval=interval,
                   mps_active_thread_percentage=numbers["mpsActiveThreadPercentage"],
                   mps_pinned_memory_limit_mib=numbers["mpsPinnedMemoryLimitMiB"],
                   mps_per_device_pinned_memory_mib=tuple(per_device.items()), mps_multi_user=multi_user)


@dataclass(frozen=True)
class VfioBinding:
    """A GPU passed through whole (type `vfio`): its PCI function, bound to vfio-pci while prepared, and the
    claim's VfioDeviceConfig `iommu` (NVIDIA's defaults when the claim has none; passthrough.py)."""

    pci_bus_id: str
    backend_policy: str = "LegacyOnly"
    enable_api_device: bool = False

    def to_json(self) -> dict[str, JSON]:
        return {"pciBusID": self.pci_bus_id,
                "iommu": {"backendPolicy": self.backend_policy, "enableAPIDevice": self.enable_api_device}}

    @classmethod
    def from_json(cls, record: dict[str, JSON], name: str) -> VfioBinding:
        address, iommu = record.get("pciBusID"), record.get("iommu")
        if not isinstance(address, str) or not address:
            raise EntryError(f"device {name}: a vfio record has no pciBusID")
        if iommu is None:
            return cls(pci_bus_id=address)
        if not (isinstance(iommu, dict) and isinstance(iommu.get("backendPolicy"), str)
                and isinstance(iommu.get("enableAPIDevice"), bool)):
            raise EntryError(f"device {name}: iommu is not a VFIO IOMMU config")
        return cls(pci_bus_id=address, backend_policy=iommu["backendPolicy"],
                   enable_api_device=iommu["enableAPIDevice"])


# -- a prepared GPU device ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuDevice(PreparedDevice):
    """A GPU, MIG or VFIO device of a claim as this node prepared it (the compute-domain plugin's records extend
    it: their GPU fields are None)."""

    gpu_minor: int | None = None  # None: no GPU (a compute-domain device)
    gpu_uuid: str | None = None
    slices: tuple[int, int] | None = None  # the memory slices a MIG device occupies; None: the whole GPU
    mig: MigPlacement | None = None
    sharing: SharingRecord | None = None
    vfio: VfioBinding | None = None  # type vfio: the GPU's PCI function, bound to vfio-pci (passthrough)

    @property
    def dynamic_mig(self) -> MigPlacement | None:
        """The MIG device this prepare creates and its unprepare destroys (dynamic MIG), if any."""
        return self.mig if self.mig is not None and self.mig.dynamic else None

    @property
    def device_uuid(self) -> str | None:
        """The UUID a CUDA process sees: the MIG device's where there is one, else the GPU's."""
        return self.mig.uuid if self.mig is not None and self.mig.uuid else self.gpu_uuid

    def to_json(self) -> dict[str, JSON]:
        out = super().to_json()
        out.update({"gpuMinor": self.gpu_minor, "gpuUUID": self.gpu_uuid,
                    "slices": list(self.slices) if self.slices is not None else None,
                    "mig": self.mig.to_json() if self.mig is not None else None,
                    "sharing": self.sharing.to_json() if self.sharing is not None else None})
        if self.vfio is not None:
            out.update(self.vfio.to_json())
        return out

    @staticmethod
    def gpu_fields(record: dict[str, JSON], name: str, completed: bool) -> dict[str, Any]:
        """The GPU fields of a record (besides gpuMinor, which the caller checks) as keyword arguments."""
        slices = record.get("slices")
        if slices is not None and not is_range(slices, empty=False):
            raise EntryError(f"device {name}: slices is not [start, end]")
        mig = MigPlacement.from_json(record["mig"], name, completed) if record.get("mig") is not None else None
        return {"gpu_minor": record.get("gpuMinor"),
                "gpu_uuid": optional_str(record.get("gpuUUID"), f"device {name}: gpuUUID"),
                "slices": (slices[0], slices[1]) if slices is not None else None, "mig": mig}

    @classmethod
    def decode(cls, record: dict[str, JSON], name: str, completed: bool) -> GpuDevice:
        """EntryError when the record is not one the driver can act on (`completed`: its prepare finished, so a
        dynamic MIG device has its instance IDs)."""
        if not is_small_int(record.get("gpuMinor")):
            raise EntryError(f"device {name}: gpuMinor is not a small non-negative integer")
        gpu = cls.gpu_fields(record, name, completed)
        common = PreparedDevice.common_fields(record, name)
        sharing = SharingRecord.from_json(record["sharing"], name) if record.get("sharing") is not None else None
        vfio = VfioBinding.from_json(record, name) if record["type"] == VFIO_TYPE else None
        return cls(**common, **gpu, sharing=sharing, vfio=vfio)


GpuClaimEntry = ClaimEntry[GpuDevice]


@dataclass(frozen=True)
class MpsDaemon:
    """The claim's MPS control daemon, recorded before it starts so an unprepare after a restart stops it."""

    id: str
    pipe: str
    log: str
    gpus: tuple[str, ...]  # GPU UUIDs whose compute mode it set
    devices: tuple[str, ...]  # the device UUIDs it serves (CUDA_VISIBLE_DEVICES)

    def to_json(self) -> dict[str, JSON]:
        return {"id": self.id, "pipe": self.pipe, "log": self.log, "gpus": list(self.gpus),
                "devices": list(self.devices)}

    @classmethod
    def from_json(cls, value: JSON) -> MpsDaemon:
        if not (isinstance(value, dict) and all(isinstance(value.get(k), str) for k in ("id", "pipe", "log"))
                and is_str_list(value.get("gpus")) and is_str_list(value.get("devices"))):
            raise EntryError("mpsDaemon is not an MPS control daemon record")
        return cls(id=value["id"], pipe=value["pipe"], log=value["log"], gpus=tuple(value["gpus"]),
                   devices=tuple(value["devices"]))


def mps_daemon_of(entry: ClaimEntry[Any]) -> MpsDaemon | None:
    """The claim's recorded MPS control daemon, if it has one."""
    return entry.payload if isinstance(entry.payload, MpsDaemon) else None


def conflicts(a: GpuDevice | ReservedDevice, b: GpuDevice | ReservedDevice) -> bool:
    """Two device records that cannot be handed to two different claims at once."""
    if a.admin_access or b.admin_access:
        return False
    if a.share_id and b.share_id and a.share_id != b.share_id:
        return False  # consumable capacity: one device, several allocations told apart by share ID
    if a.device == b.device:
        return True
    if a.gpu_minor is None or a.gpu_minor != b.gpu_minor:
        return False  # no GPU (a compute-domain channel or daemon) or another GPU: only the same device conflicts
    if a.slices is None or b.slices is None:  # a full GPU excludes every MIG device on it
        return True
    return a.slices[0] < b.slices[1] and b.slices[0] < a.slices[1]


register_device_types(GPU_RECORD_TYPES, GpuDevice.decode)
register_entry_payload("mpsDaemon", MpsDaemon, MpsDaemon.from_json)
