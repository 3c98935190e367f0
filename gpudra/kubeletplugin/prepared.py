"""The records a kubelet plugin keeps per prepared claim: what each device is and what preparing it created.

They cross modules (the GPU plugin and the compute-domain plugin write them, the CDI spec writer, the sharing steps,
the MIG manager and `gpudra driver status` read them) and reach disk in the checkpoint, so they are typed and
frozen: a change is a new record (`dataclasses.replace`) put in the checkpoint's claims map under its lock. JSON
crosses only here (`from_json` / `to_json`); the JSON shape is the one the checkpoint has always had, so a file
written before checkpoints had a version reads as the same records (checkpoint.py migrates it).

Learned from NVIDIA's `cmd/gpu-kubelet-plugin/prepared.go` and `checkpointv.go` (PreparedDevices, PreparedClaim with
its checkpoint state), which type the same facts; the fields are gpudra's own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from gpudra.device_config import Sharing

from .claimpaths import identity_problems

PREPARE_STARTED = "PrepareStarted"
PREPARE_COMPLETED = "PrepareCompleted"
UNPREPARE_STARTED = "UnprepareStarted"
STATES = (PREPARE_STARTED, PREPARE_COMPLETED, UNPREPARE_STARTED)

GPU_TYPE, MIG_TYPE, VFIO_TYPE = "gpu", "mig", "vfio"
# A compute-domain record has type channel or daemon, no GPU, a domainID (a UID: it names a directory) and, for a
# channel, imexChannels [first, end): the channel device nodes it injects.
DOMAIN_RECORD_TYPES = ("channel", "daemon")

JSON = Any  # a value decoded from JSON: only this module and checkpoint.py take them apart


class EntryError(ValueError):
    """A checkpoint entry (or one of its device records) the driver cannot act on; the message says why."""


def _is_int(value: JSON) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


def _is_str_list(value: JSON) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_range(value: JSON, *, empty: bool) -> TypeGuard[list[int]]:
    """[start, end] of small non-negative integers, start < end (start <= end where `empty`)."""
    return (isinstance(value, list) and len(value) == 2 and all(map(_is_int, value))
            and (value[0] <= value[1] if empty else value[0] < value[1]))


def _optional_str(value: JSON, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise EntryError(f"{what} is not a string")
    return value


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
        if not isinstance(value, dict) or not _is_int(value.get("giProfileId")) or not _is_int(value.get("start")):
            raise EntryError(f"device {name}: mig has no giProfileId/start")
        ids_known = _is_int(value.get("giId")) and _is_int(value.get("ciId"))
        if not isinstance(value.get("dynamic"), bool) or (completed or not value["dynamic"]) and not ids_known:
            raise EntryError(f"device {name}: mig has no GPU/compute instance IDs")
        size = value.get("size")
        if size is not None and not _is_int(size):
            raise EntryError(f"device {name}: mig size is not a small non-negative integer")
        for key in ("giId", "ciId"):
            if value.get(key) is not None and not _is_int(value[key]):
                raise EntryError(f"device {name}: mig {key} is not a small non-negative integer")
        return cls(gi_profile_id=value["giProfileId"], start=value["start"], size=size, dynamic=value["dynamic"],
                   gi_id=value.get("giId"), ci_id=value.get("ciId"),
                   uuid=_optional_str(value.get("uuid"), f"device {name}: mig uuid"))


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
            if value.get(key) is not None and not _is_int(value[key]):
                raise EntryError(problem)
            numbers[key] = value.get(key)
        per_device = value.get("mpsPerDevicePinnedMemoryMiB") or {}
        if not isinstance(per_device, dict) or not all(isinstance(k, str) and _is_int(v)
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


@dataclass(frozen=True)
class DomainBinding:
    """What a compute-domain channel or daemon device was prepared for."""

    domain_id: str
    allocation_mode: str | None = None  # channel
    imex_channels: tuple[int, int] | None = None  # channel: [first, end)
    clique: str | None = None  # daemon
    domain_name: str | None = None  # daemon
    domain_namespace: str | None = None  # daemon

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"domainID": self.domain_id}
        if self.allocation_mode is not None:
            out["allocationMode"] = self.allocation_mode
        if self.imex_channels is not None:
            out["imexChannels"] = list(self.imex_channels)
        for key, value in (("clique", self.clique), ("domainName", self.domain_name),
                           ("domainNamespace", self.domain_namespace)):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, record: dict[str, JSON], name: str, kind: str) -> DomainBinding:
        from gpudra.api.schema import names

        if record.get("gpuMinor") is not None or record.get("mig") is not None or record.get("slices") is not None:
            raise EntryError(f"device {name}: a {kind} record names a GPU")
        if names.field_problems("domainID", record.get("domainID"), names.kubernetes_uid, 36):
            raise EntryError(f"device {name}: domainID is not a UID")
        channels = record.get("imexChannels")
        if kind == "channel" and not _is_range(channels, empty=True):
            raise EntryError(f"device {name}: imexChannels is not [first, end]")
        return cls(domain_id=record["domainID"],
                   allocation_mode=_optional_str(record.get("allocationMode"), f"device {name}: allocationMode"),
                   imex_channels=(channels[0], channels[1]) if channels is not None else None,
                   clique=_optional_str(record.get("clique"), f"device {name}: clique"),
                   domain_name=_optional_str(record.get("domainName"), f"device {name}: domainName"),
                   domain_namespace=_optional_str(record.get("domainNamespace"), f"device {name}: domainNamespace"))


# -- a prepared device ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreparedDevice:
    """One allocated device of a claim as this node prepared it."""

    type: str  # "gpu" | "mig" | "vfio" (GPU plugin) | "channel" | "daemon" (compute-domain plugin)
    device: str  # the device's name in its ResourceSlice
    pool: str
    request: str  # the allocation result's request ("req" or "req/subrequest")
    request_names: tuple[str, ...]
    admin_access: bool
    cdi_device_ids: tuple[str, ...]
    gpu_minor: int | None = None  # None: no GPU (a compute-domain device)
    gpu_uuid: str | None = None
    slices: tuple[int, int] | None = None  # the memory slices a MIG device occupies; None: the whole GPU
    mig: MigPlacement | None = None
    sharing: SharingRecord | None = None
    share_id: str | None = None  # consumable capacity: one device, several allocations told apart by share ID
    domain: DomainBinding | None = None
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
        out: dict[str, JSON] = {
            "type": self.type, "gpuMinor": self.gpu_minor, "gpuUUID": self.gpu_uuid,
            "slices": list(self.slices) if self.slices is not None else None,
            "mig": self.mig.to_json() if self.mig is not None else None,
            "request": self.request, "requestNames": list(self.request_names), "pool": self.pool,
            "device": self.device, "adminAccess": self.admin_access,
            "sharing": self.sharing.to_json() if self.sharing is not None else None,
            "cdiDeviceIDs": list(self.cdi_device_ids)}
        if self.domain is not None:
            out.update(self.domain.to_json())
        if self.share_id is not None:
            out["shareID"] = self.share_id
        if self.vfio is not None:
            out.update(self.vfio.to_json())
        return out

    @classmethod
    def from_json(cls, record: JSON, completed: bool = True) -> PreparedDevice:
        """EntryError when the record is not one the driver can act on (`completed`: its prepare finished, so a
        dynamic MIG device has its instance IDs)."""
        if not isinstance(record, dict):
            raise EntryError("a device record is not an object")
        name = record.get("device")
        if not isinstance(name, str) or not name:
            raise EntryError("a device record has no device name")
        kind = record.get("type")
        domain = None
        if kind in DOMAIN_RECORD_TYPES:
            domain = DomainBinding.from_json(record, name, kind)
        elif not _is_int(record.get("gpuMinor")):
            raise EntryError(f"device {name}: gpuMinor is not a small non-negative integer")
        slices = record.get("slices")
        if slices is not None and not _is_range(slices, empty=False):
            raise EntryError(f"device {name}: slices is not [start, end]")
        mig = MigPlacement.from_json(record["mig"], name, completed) if record.get("mig") is not None else None
        for key in ("pool", "request"):
            if not isinstance(record.get(key), str):
                raise EntryError(f"device {name}: {key} is not a string")
        for key in ("requestNames", "cdiDeviceIDs"):
            if not _is_str_list(record.get(key)):
                raise EntryError(f"device {name}: {key} is not a list of strings")
        if not isinstance(record.get("adminAccess"), bool):
            raise EntryError(f"device {name}: adminAccess is not a boolean")
        sharing = SharingRecord.from_json(record["sharing"], name) if record.get("sharing") is not None else None
        if "shareID" in record and not isinstance(record["shareID"], str):
            raise EntryError(f"device {name}: shareID is not a string")
        if not isinstance(kind, str):
            raise EntryError(f"device {name}: type is not a string")
        vfio = VfioBinding.from_json(record, name) if kind == VFIO_TYPE else None
        return cls(type=kind, device=name, pool=record["pool"], request=record["request"],
                   request_names=tuple(record["requestNames"]), admin_access=record["adminAccess"],
                   cdi_device_ids=tuple(record["cdiDeviceIDs"]), gpu_minor=record.get("gpuMinor"),
                   gpu_uuid=_optional_str(record.get("gpuUUID"), f"device {name}: gpuUUID"),
                   slices=(slices[0], slices[1]) if slices is not None else None, mig=mig, sharing=sharing,
                   share_id=record.get("shareID"), domain=domain, vfio=vfio)


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
                and _is_str_list(value.get("gpus")) and _is_str_list(value.get("devices"))):
            raise EntryError("mpsDaemon is not an MPS control daemon record")
        return cls(id=value["id"], pipe=value["pipe"], log=value["log"], gpus=tuple(value["gpus"]),
                   devices=tuple(value["devices"]))


# -- a claim's checkpoint entry ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClaimEntry:
    """One claim in the checkpoint: where its prepare or unprepare stands and the devices it holds."""

    state: str  # one of STATES
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]
    mps_daemon: MpsDaemon | None = None

    @property
    def completed(self) -> bool:
        return self.state == PREPARE_COMPLETED

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"state": self.state, "namespace": self.namespace, "name": self.name,
                                "devices": [d.to_json() for d in self.devices]}
        if self.mps_daemon is not None:
            out["mpsDaemon"] = self.mps_daemon.to_json()
        return out

    @classmethod
    def from_json(cls, uid: str, entry: JSON) -> ClaimEntry:
        """EntryError when the entry of `uid` cannot be used. The checksum only says the file is what some
        writer wrote; this says the entry is one the driver can act on."""
        if not isinstance(entry, dict):
            raise EntryError("the entry is not an object")
        problems = identity_problems(entry.get("namespace"), entry.get("name"), uid)  # file names derive from them
        if problems:
            raise EntryError(problems[0])
        state = entry.get("state")
        if state not in STATES:
            raise EntryError(f"state {state!r} is not one of {', '.join(STATES)}")
        devices = entry.get("devices")
        if not isinstance(devices, list):
            raise EntryError("devices is not a list")
        records = tuple(PreparedDevice.from_json(record, state == PREPARE_COMPLETED) for record in devices)
        daemon = MpsDaemon.from_json(entry["mpsDaemon"]) if entry.get("mpsDaemon") is not None else None
        return cls(state=state, namespace=entry["namespace"], name=entry["name"], devices=records,
                   mps_daemon=daemon)


def entry_problem(uid: str, entry: JSON) -> str | None:
    """Why the checkpoint entry of `uid` cannot be used (None when it can)."""
    try:
        ClaimEntry.from_json(uid, entry)
    except EntryError as exc:
        return str(exc)
    return None


# -- what a quarantined entry keeps reserved -----------------------------------------------------------------
@dataclass(frozen=True)
class ReservedDevice:
    """A device a quarantined entry may still hold: what could be read of it, conservatively."""

    device: str | None
    gpu_minor: int | None
    slices: tuple[int, int] | None  # None: the whole GPU (or unknown)
    mig: tuple[int, int] | None  # (GI profile ID, placement start)
    admin_access: bool = False  # never: a reservation excludes every other claim
    share_id: str | None = None

    def to_json(self) -> dict[str, JSON]:
        return {"device": self.device, "gpuMinor": self.gpu_minor,
                "slices": list(self.slices) if self.slices is not None else None,
                "mig": {"giProfileId": self.mig[0], "start": self.mig[1]} if self.mig is not None else None,
                "adminAccess": False}


def reserved_devices(entry: JSON) -> tuple[ReservedDevice, ...]:
    """What a bad entry may still hold: every device it names (and, where its GPU is known, its slices or the
    whole GPU) stays unavailable to other claims."""
    devices = entry.get("devices") if isinstance(entry, dict) else None
    reserved = []
    for record in devices if isinstance(devices, list) else ():
        if not isinstance(record, dict):
            continue
        device = record.get("device") if isinstance(record.get("device"), str) else None
        minor = record.get("gpuMinor") if _is_int(record.get("gpuMinor")) else None
        slices = record.get("slices")
        mig = record.get("mig")
        placement = (mig["giProfileId"], mig["start"]) if isinstance(mig, dict) and _is_int(
            mig.get("giProfileId")) and _is_int(mig.get("start")) else None
        if device is None and minor is None:
            continue
        reserved.append(ReservedDevice(
            device=device, gpu_minor=minor,
            slices=(slices[0], slices[1]) if _is_range(slices, empty=False) else None,
            mig=placement))
    return tuple(reserved)


def conflicts(a: PreparedDevice | ReservedDevice, b: PreparedDevice | ReservedDevice) -> bool:
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

