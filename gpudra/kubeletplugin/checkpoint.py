"""The driver's checkpoint: which claims are (being) prepared, with what.

Written atomically (`gpudra.atomicfile`: temp file in the same directory, fsync, rename,
fsync of the directory) and protected by a SHA-256 checksum of its canonical JSON, so a reader sees
either the old or the new state, and silent damage is detected instead of trusted.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gpudra import regularfile
from gpudra.atomicfile import write_atomic

from gpudra.errors import GpudraError

from .claimpaths import identity_problems

API_VERSION = "gpudra.io/v1"
KIND = "DriverCheckpoint"

PREPARE_STARTED = "PrepareStarted"
PREPARE_COMPLETED = "PrepareCompleted"
UNPREPARE_STARTED = "UnprepareStarted"
STATES = (PREPARE_STARTED, PREPARE_COMPLETED, UNPREPARE_STARTED)


class CheckpointError(GpudraError):
    """The checkpoint exists but cannot be trusted (bad JSON, wrong checksum, unknown format)."""


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def checksum(data: Any) -> str:
    return "sha256:" + hashlib.sha256(_canonical(data)).hexdigest()


def current_boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def empty_checkpoint(boot_id: str | None = None) -> dict[str, Any]:
    return {"nodeBootID": current_boot_id() if boot_id is None else boot_id, "claims": {}}


MAX_CHECKPOINT_BYTES = 64 << 20  # ~100,000 claims; anything bigger is not ours


def read_regular_file(path: str, limit: int, what: str = "checkpoint") -> bytes | None:
    """The file's bytes; None when it does not exist. Refuses what is not a regular file (a symlink
    to /dev/zero, a FIFO that would block start-up) and what is larger than `limit`."""
    try:
        return regularfile.read_regular_file(path, limit)
    except regularfile.UnsafeFileError as exc:
        raise CheckpointError(f"{what} {path} {exc.problem}") from None


def load_checkpoint(path: str) -> dict[str, Any] | None:
    """The checkpoint data, or None when there is no checkpoint yet. Only the envelope is checked
    here (format, checksum, a claims map): `entry_problem` judges each entry."""
    raw = read_regular_file(path, MAX_CHECKPOINT_BYTES)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        data = doc.get("data") if isinstance(doc, dict) else None
        digest = checksum(data)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise CheckpointError(f"checkpoint {path} is nested too deeply to be a checkpoint") from None
    if not isinstance(doc, dict) or doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise CheckpointError(f"checkpoint {path} has an unknown format (want {API_VERSION} {KIND})")
    if doc.get("checksum") != digest:
        raise CheckpointError(f"checkpoint {path} is corrupted: checksum mismatch")
    if not isinstance(data, dict) or not isinstance(data.get("claims"), dict):
        raise CheckpointError(f"checkpoint {path} has no claims map")
    return data


# -- entries ---------------------------------------------------------------------------------------------
# An entry's shape (written by state.py): {"state", "namespace", "name", "devices": [record]}, a record
# {"type", "gpuMinor", "gpuUUID", "slices": [start, end] | None, "mig": {...} | None, "request",
#  "requestNames", "pool", "device", "adminAccess", "sharing": {...} | None, "cdiDeviceIDs", ["shareID"]}.


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# A compute-domain driver record (cdstate.py) has "type" channel or daemon, "gpuMinor" None, "domainID" (a UID:
# it names a directory) and, for a channel, "imexChannels" [first, end): the channel device nodes it injects.
DOMAIN_RECORD_TYPES = ("channel", "daemon")


def _domain_record_problem(record: dict[str, Any], name: str) -> str | None:
    from gpudra.api.schema import names

    if record.get("gpuMinor") is not None or record.get("mig") is not None or record.get("slices") is not None:
        return f"device {name}: a {record['type']} record names a GPU"
    if names.field_problems("domainID", record.get("domainID"), names.kubernetes_uid, 36):
        return f"device {name}: domainID is not a UID"
    channels = record.get("imexChannels")
    if record["type"] == "channel" and not (isinstance(channels, list) and len(channels) == 2
                                            and all(map(_is_int, channels)) and channels[0] <= channels[1]):
        return f"device {name}: imexChannels is not [first, end]"
    return None


def _record_problem(record: Any, completed: bool) -> str | None:
    if not isinstance(record, dict):
        return "a device record is not an object"
    if not isinstance(record.get("device"), str) or not record["device"]:
        return "a device record has no device name"
    name = record["device"]
    if record.get("type") in DOMAIN_RECORD_TYPES:
        problem = _domain_record_problem(record, name)
        if problem:
            return problem
    elif not _is_int(record.get("gpuMinor")):
        return f"device {name}: gpuMinor is not a small non-negative integer"
    slices = record.get("slices")
    if slices is not None and not (isinstance(slices, list) and len(slices) == 2 and all(map(_is_int, slices))
                                   and slices[0] < slices[1]):
        return f"device {name}: slices is not [start, end]"
    mig = record.get("mig")
    if mig is not None:
        if not isinstance(mig, dict) or not _is_int(mig.get("giProfileId")) or not _is_int(mig.get("start")):
            return f"device {name}: mig has no giProfileId/start"
        ids_known = _is_int(mig.get("giId")) and _is_int(mig.get("ciId"))
        if not isinstance(mig.get("dynamic"), bool) or (completed or not mig["dynamic"]) and not ids_known:
            return f"device {name}: mig has no GPU/compute instance IDs"
    for key in ("pool", "request"):
        if not isinstance(record.get(key), str):
            return f"device {name}: {key} is not a string"
    for key in ("requestNames", "cdiDeviceIDs"):
        if not _is_str_list(record.get(key)):
            return f"device {name}: {key} is not a list of strings"
    if not isinstance(record.get("adminAccess"), bool):
        return f"device {name}: adminAccess is not a boolean"
    sharing = record.get("sharing")
    if sharing is not None and not (isinstance(sharing, dict) and all(
            isinstance(v, (str, int, float, bool, type(None))) for v in sharing.values())):
        return f"device {name}: sharing is not a flat object"
    if "shareID" in record and not isinstance(record["shareID"], str):
        return f"device {name}: shareID is not a string"
    return None


def entry_problem(uid: str, entry: Any) -> str | None:
    """Why the checkpoint entry of `uid` cannot be used (None when it can). The checksum only says
    the file is what some writer wrote; this says the entry is one the driver can act on."""
    if not isinstance(entry, dict):
        return "the entry is not an object"
    problems = identity_problems(entry.get("namespace"), entry.get("name"), uid)  # file names derive from them
    if problems:
        return problems[0]
    if entry.get("state") not in STATES:
        return f"state {entry.get('state')!r} is not one of {', '.join(STATES)}"
    devices = entry.get("devices")
    if not isinstance(devices, list):
        return "devices is not a list"
    for record in devices:
        problem = _record_problem(record, entry["state"] == PREPARE_COMPLETED)
        if problem:
            return problem
    return None


def reserved_records(entry: Any) -> list[dict[str, Any]]:
    """What a bad entry may still hold, as conservative device records: every device it names
    (and, where its GPU is known, its slices or the whole GPU) stays unavailable to other claims."""
    devices = entry.get("devices") if isinstance(entry, dict) else None
    reserved = []
    for record in devices if isinstance(devices, list) else ():
        if not isinstance(record, dict):
            continue
        device = record.get("device") if isinstance(record.get("device"), str) else None
        minor = record.get("gpuMinor") if _is_int(record.get("gpuMinor")) else None
        slices = record.get("slices")
        if not (isinstance(slices, list) and len(slices) == 2 and all(map(_is_int, slices)) and slices[0] < slices[1]):
            slices = None  # unknown: the whole GPU
        mig = record.get("mig")
        mig = ({"giProfileId": mig["giProfileId"], "start": mig["start"]}
               if isinstance(mig, dict) and _is_int(mig.get("giProfileId")) and _is_int(mig.get("start")) else None)
        if device is None and minor is None:
            continue
        reserved.append({"device": device, "gpuMinor": minor, "slices": slices, "mig": mig, "adminAccess": False})
    return reserved


class CompletedEntryCache:
    """The canonical JSON of `PrepareCompleted` entries, kept between checkpoint writes.

    Sound only because the driver never edits a completed entry in place except to change its
    state: an entry is reused only while it is the very same object and still completed."""

    def __init__(self) -> None:
        self._by_uid: dict[str, tuple[dict[str, Any], bytes]] = {}

    def claims_json(self, claims: dict[str, Any]) -> bytes:
        fresh: dict[str, tuple[dict[str, Any], bytes]] = {}
        parts = []
        for uid in sorted(claims):
            entry = claims[uid]
            cached = self._by_uid.get(uid)
            if cached is not None and cached[0] is entry and entry.get("state") == PREPARE_COMPLETED:
                raw = cached[1]
            else:
                raw = _canonical(entry)
            if entry.get("state") == PREPARE_COMPLETED:
                fresh[uid] = (entry, raw)
            parts.append(_canonical(uid) + b":" + raw)
        self._by_uid = fresh
        return b"{" + b",".join(parts) + b"}"


def _canonical_data(data: dict[str, Any], cache: CompletedEntryCache | None) -> bytes:
    claims = data.get("claims")
    if cache is None or not isinstance(claims, dict) or not all(isinstance(k, str) for k in data):
        return _canonical(data)
    return b"{" + b",".join(_canonical(key) + b":" + (cache.claims_json(claims) if key == "claims" else _canonical(data[key]))
                            for key in sorted(data)) + b"}"


def encode_checkpoint(data: dict[str, Any], cache: CompletedEntryCache | None = None) -> bytes:
    """The same bytes as `json.dumps(doc, sort_keys=True, separators=(",", ":"))` of
    {apiVersion, checksum, data, kind}, with `data` serialized once instead of twice (and its
    unchanged completed entries not at all, given a cache)."""
    canonical = _canonical_data(data, cache)
    digest = "sha256:" + hashlib.sha256(canonical).hexdigest()
    # one line: `indent` would switch json to its pure-Python encoder, several times slower
    return b"".join((b'{"apiVersion":', json.dumps(API_VERSION).encode(), b',"checksum":', json.dumps(digest).encode(),
                     b',"data":', canonical, b',"kind":', json.dumps(KIND).encode(), b"}"))


CHECKPOINT_MODE = 0o600  # it names the node's claims: root's business only


def write_checkpoint_bytes(path: str, raw: bytes, *, fsync: bool = True) -> None:
    write_atomic(path, raw, mode=CHECKPOINT_MODE, label="checkpoint", fsync=fsync)


def save_checkpoint(path: str, data: dict[str, Any], *, fsync: bool = True) -> None:
    write_checkpoint_bytes(path, encode_checkpoint(data), fsync=fsync)
