"""The generic checkpoint entry a kubelet plugin keeps per prepared claim: the claim's identity, where its prepare
or unprepare stands, and the devices prepared for it (pool, device, request names, CDI IDs). What a device is to
its plugin (a GPU's minor, a MIG placement, a compute domain) is the plugin's: each plugin subclasses
`PreparedDevice` with its own typed fields and registers, per record `type`, how to decode it
(`register_device_types`); claim-wide plugin data (the GPU plugin's MPS daemon) is an `EntryPayload` registered
under its JSON key (`register_entry_payload`). This module imports no plugin: the plugins import it.

The records are typed and frozen: a change is a new record (`dataclasses.replace`) put in the checkpoint's claims
map under its lock. JSON crosses only in `to_json` / `from_json`; a device record stays one flat object (the
generic keys beside the plugin's), the shape the checkpoint has always had, so files of every version read back.

Learned from NVIDIA's `cmd/gpu-kubelet-plugin/prepared.go` and `checkpointv.go` (PreparedDevices, PreparedClaim with
its checkpoint state: the plugin's types, of which upstream's k8s.io/dynamic-resource-allocation/kubeletplugin
helper knows none); the fields are gpudra's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Protocol, TypeGuard, TypeVar

from .claimpaths import identity_problems

PREPARE_STARTED = "PrepareStarted"
PREPARE_COMPLETED = "PrepareCompleted"
UNPREPARE_STARTED = "UnprepareStarted"
STATES = (PREPARE_STARTED, PREPARE_COMPLETED, UNPREPARE_STARTED)

JSON = Any  # a value decoded from JSON: only the records' from_json and checkpoint.py take them apart


class EntryError(ValueError):
    """A checkpoint entry (or one of its device records) the driver cannot act on; the message says why."""


def is_small_int(value: JSON) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


def is_str_list(value: JSON) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def is_range(value: JSON, *, empty: bool) -> TypeGuard[list[int]]:
    """[start, end] of small non-negative integers, start < end (start <= end where `empty`)."""
    return (isinstance(value, list) and len(value) == 2 and all(map(is_small_int, value))
            and (value[0] <= value[1] if empty else value[0] < value[1]))


def optional_str(value: JSON, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise EntryError(f"{what} is not a string")
    return value


# -- a prepared device ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreparedDevice:
    """One allocated device of a claim as this node prepared it: what every plugin has. A plugin's record is a
    subclass that adds its own fields (and their JSON keys) and registers its types."""

    type: str  # the plugin's kind of device record (what `register_device_types` dispatches on)
    device: str  # the device's name in its ResourceSlice
    pool: str
    request: str  # the allocation result's request ("req" or "req/subrequest")
    request_names: tuple[str, ...]
    admin_access: bool
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None  # consumable capacity: one device, several allocations told apart by share ID

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {
            "type": self.type, "request": self.request, "requestNames": list(self.request_names), "pool": self.pool,
            "device": self.device, "adminAccess": self.admin_access, "cdiDeviceIDs": list(self.cdi_device_ids)}
        if self.share_id is not None:
            out["shareID"] = self.share_id
        return out

    @staticmethod
    def common_fields(record: dict[str, JSON], name: str) -> dict[str, Any]:
        """The generic fields of a device record as keyword arguments; EntryError when one is malformed."""
        for key in ("pool", "request"):
            if not isinstance(record.get(key), str):
                raise EntryError(f"device {name}: {key} is not a string")
        for key in ("requestNames", "cdiDeviceIDs"):
            if not is_str_list(record.get(key)):
                raise EntryError(f"device {name}: {key} is not a list of strings")
        if not isinstance(record.get("adminAccess"), bool):
            raise EntryError(f"device {name}: adminAccess is not a boolean")
        if "shareID" in record and not isinstance(record["shareID"], str):
            raise EntryError(f"device {name}: shareID is not a string")
        return {"type": record["type"], "device": name, "pool": record["pool"], "request": record["request"],
                "request_names": tuple(record["requestNames"]), "admin_access": record["adminAccess"],
                "cdi_device_ids": tuple(record["cdiDeviceIDs"]), "share_id": record.get("shareID")}

    @staticmethod
    def from_json(record: JSON, completed: bool = True) -> PreparedDevice:
        """The plugin record of `record`, decoded by the plugin registered for its type. EntryError when the record
        is not one the driver can act on (`completed`: its prepare finished)."""
        if not isinstance(record, dict):
            raise EntryError("a device record is not an object")
        name = record.get("device")
        if not isinstance(name, str) or not name:
            raise EntryError("a device record has no device name")
        kind = record.get("type")
        if not isinstance(kind, str):
            raise EntryError(f"device {name}: type is not a string")
        decode = _DEVICE_TYPES.get(kind)
        if decode is None:
            raise EntryError(f"device {name}: type {kind!r} is not a device type of this driver")
        return decode(record, name, completed)


DeviceDecoder = Callable[[dict[str, JSON], str, bool], PreparedDevice]  # (record, device name, completed)
_DEVICE_TYPES: dict[str, DeviceDecoder] = {}


def register_device_types(kinds: tuple[str, ...], decode: DeviceDecoder) -> None:
    """How a plugin's device records of these types are read back (called once, when the plugin's records module
    is imported). A type belongs to one plugin."""
    for kind in kinds:
        if _DEVICE_TYPES.get(kind, decode) is not decode:
            raise ValueError(f"device record type {kind!r} is registered twice")
        _DEVICE_TYPES[kind] = decode


class EntryPayload(Protocol):
    """Plugin data about the whole claim, kept in its entry under the plugin's JSON key."""

    def to_json(self) -> JSON: ...


_ENTRY_PAYLOADS: dict[str, tuple[type, Callable[[JSON], EntryPayload]]] = {}  # key -> (its class, its decoder)


def register_entry_payload(key: str, kind: type, decode: Callable[[JSON], EntryPayload]) -> None:
    """The entry key under which a plugin keeps its claim-wide payload (of class `kind`), and how it is read back."""
    if _ENTRY_PAYLOADS.get(key, (kind, decode)) != (kind, decode):
        raise ValueError(f"entry payload key {key!r} is registered twice")
    _ENTRY_PAYLOADS[key] = (kind, decode)


def _payload_key(payload: EntryPayload) -> str:
    for key, (kind, _) in _ENTRY_PAYLOADS.items():
        if isinstance(payload, kind):
            return key
    raise TypeError(f"{type(payload).__name__} is not a registered entry payload")


# -- a claim's checkpoint entry ------------------------------------------------------------------------------
D = TypeVar("D", bound=PreparedDevice)


@dataclass(frozen=True)
class ClaimEntry(Generic[D]):
    """One claim in the checkpoint: where its prepare or unprepare stands, the devices it holds (the plugin's
    records) and the plugin's claim-wide payload, if any."""

    state: str  # one of STATES
    namespace: str
    name: str
    devices: tuple[D, ...]
    payload: EntryPayload | None = None

    @property
    def completed(self) -> bool:
        return self.state == PREPARE_COMPLETED

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"state": self.state, "namespace": self.namespace, "name": self.name,
                                "devices": [d.to_json() for d in self.devices]}
        if self.payload is not None:
            out[_payload_key(self.payload)] = self.payload.to_json()
        return out

    @staticmethod
    def from_json(uid: str, entry: JSON) -> ClaimEntry[Any]:
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
        payload = None
        for key, (_, decode) in _ENTRY_PAYLOADS.items():
            if entry.get(key) is not None:
                payload = decode(entry[key])
        return ClaimEntry(state=state, namespace=entry["namespace"], name=entry["name"], devices=records,
                          payload=payload)


def entry_problem(uid: str, entry: JSON) -> str | None:
    """Why the checkpoint entry of `uid` cannot be used (None when it can)."""
    try:
        ClaimEntry.from_json(uid, entry)
    except EntryError as exc:
        return str(exc)
    return None


# -- what a quarantined entry keeps reserved -----------------------------------------------------------------
# Still GPU-shaped (gpuMinor, slices, MIG placement): quarantine.py reserves what an unparseable entry names, and
# `gpudra mig apply` (gpudra.mig, below the GPU plugin) reads the same reservations; moving them to the GPU plugin
# needs a registered reservation reader that both can reach.
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
        minor = record.get("gpuMinor") if is_small_int(record.get("gpuMinor")) else None
        slices = record.get("slices")
        mig = record.get("mig")
        placement = (mig["giProfileId"], mig["start"]) if isinstance(mig, dict) and is_small_int(
            mig.get("giProfileId")) and is_small_int(mig.get("start")) else None
        if device is None and minor is None:
            continue
        reserved.append(ReservedDevice(
            device=device, gpu_minor=minor,
            slices=(slices[0], slices[1]) if is_range(slices, empty=False) else None,
            mig=placement))
    return tuple(reserved)
