"""The driver's checkpoint: which claims are (being) prepared, with what.

Written atomically (`gpudra.atomicfile`: temp file in the same directory, fsync, rename,
fsync of the directory) and protected by a SHA-256 checksum of its canonical JSON, so a reader sees
either the old or the new state, and silent damage is detected instead of trusted.

The data carries a `version` (inside the checksummed data, so a damaged version is caught like any damage).
Version 0 is every file written before the field existed: the same entries, no `version` key; it is read as
version 1 and rewritten with `version: 1` at the next write. A version this driver does not know (a newer
driver wrote it, then the node was downgraded) is refused with `CheckpointVersionError`: its entries are not
guessed at. Upstream NVIDIA's driver versions its checkpoint too (`cmd/gpu-kubelet-plugin/checkpoint.go`:
`Version`, a V1 and a V2 view, `ToLatestVersion`); unlike it, gpudra keeps one view, since an older gpudra reads
the versioned file unchanged (it ignores the `version` key), so nothing else is needed for a downgrade by one.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

from gpudra import regularfile
from gpudra.atomicfile import write_atomic

from gpudra.errors import GpudraError

from .prepared import PREPARE_COMPLETED as PREPARE_COMPLETED
from .prepared import PREPARE_STARTED as PREPARE_STARTED
from .prepared import STATES as STATES
from .prepared import UNPREPARE_STARTED as UNPREPARE_STARTED
from .prepared import ClaimEntry, EntryError
from .prepared import entry_problem as entry_problem

API_VERSION = "gpudra.io/v1"
KIND = "DriverCheckpoint"
CHECKPOINT_VERSION = 1  # what this driver writes; it reads 0 (no version key) and 1
JOINS_KEY = "domainJoins"  # {claim UID: domain UID}: channel claims that labelled the node (compute-domain plugin)

log = logging.getLogger("gpudra.driver")


class CheckpointError(GpudraError):
    """The checkpoint exists but cannot be trusted (bad JSON, wrong checksum, unknown format)."""


class CheckpointVersionError(CheckpointError):
    """The checkpoint was written by a driver with a newer checkpoint format. `data` is what the file holds (its
    checksum verified): start-up sets its entries aside (quarantine) instead of guessing at them."""

    def __init__(self, message: str, version: int, data: dict[str, Any]):
        super().__init__(message)
        self.version = version
        self.data = data


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
    """An empty checkpoint's data, as JSON (tests and tools write these)."""
    return {"version": CHECKPOINT_VERSION, "nodeBootID": current_boot_id() if boot_id is None else boot_id,
            "claims": {}}


@dataclass(frozen=True)
class UnusableEntry:
    """A checkpoint entry that passed the checksum but cannot be acted on: start-up quarantines it."""

    uid: str
    entry: Any  # as it was in the file: the operator reads it in quarantine.json
    reason: str


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint's data, typed. `claims` holds the usable entries, `unusable` the others."""

    node_boot_id: str
    claims: Mapping[str, ClaimEntry[Any]] = field(default_factory=dict)
    domain_joins: Mapping[str, str] = field(default_factory=dict)
    unusable: tuple[UnusableEntry, ...] = ()
    version: int = CHECKPOINT_VERSION  # the version the file had (what `to_json` writes is always the current)

    def to_json(self) -> dict[str, Any]:
        """The data to write: the current version; unusable entries are not written (they go to quarantine)."""
        data: dict[str, Any] = {"version": CHECKPOINT_VERSION, "nodeBootID": self.node_boot_id,
                                "claims": {uid: entry.to_json() for uid, entry in self.claims.items()}}
        if self.domain_joins:
            data[JOINS_KEY] = dict(self.domain_joins)
        return data

    @classmethod
    def newer(cls, error: CheckpointVersionError) -> Checkpoint:
        """A checkpoint of a newer format as this driver can hold it: every entry unusable (to be quarantined,
        its devices reserved as far as they can be read), nothing acted on."""
        boot_id = error.data.get("nodeBootID")
        reason = f"written by a newer driver (checkpoint version {error.version}; this driver reads up to " \
                 f"{CHECKPOINT_VERSION})"
        return cls(node_boot_id=boot_id if isinstance(boot_id, str) else "", version=error.version,
                   unusable=tuple(UnusableEntry(uid, raw, reason) for uid, raw in error.data["claims"].items()))

    @classmethod
    def from_json(cls, data: dict[str, Any], path: str = "checkpoint") -> Checkpoint:
        """`data` as `load_checkpoint` returns it. Version 0 (no key) migrates: its entries have today's shape."""
        version = data.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise CheckpointError(f"checkpoint {path} has an invalid version {version!r}")
        if version > CHECKPOINT_VERSION:
            raise CheckpointVersionError(
                f"checkpoint {path} has version {version}, newer than this driver reads (up to "
                f"{CHECKPOINT_VERSION}): it was written by a newer driver", version, data)
        if version < CHECKPOINT_VERSION:
            log.info("checkpoint %s has version %d: read as version %d, rewritten at the next write", path, version,
                     CHECKPOINT_VERSION)
        claims: dict[str, ClaimEntry[Any]] = {}
        unusable = []
        for uid, raw in data["claims"].items():
            try:
                claims[uid] = ClaimEntry.from_json(uid, raw)
            except EntryError as exc:
                unusable.append(UnusableEntry(uid, raw, str(exc)))
        joins = data.get(JOINS_KEY) or {}
        if not isinstance(joins, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in joins.items()):
            raise CheckpointError(f"checkpoint {path}: {JOINS_KEY} is not a map of claim UIDs to domain UIDs")
        boot_id = data.get("nodeBootID")
        return cls(node_boot_id=boot_id if isinstance(boot_id, str) else "", claims=claims, domain_joins=joins,
                   unusable=tuple(unusable), version=version)


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


def read_checkpoint(path: str) -> Checkpoint | None:
    """The typed checkpoint, or None when there is none yet. CheckpointVersionError for a newer format."""
    data = load_checkpoint(path)
    return None if data is None else Checkpoint.from_json(data, path)


class CompletedEntryCache:
    """The canonical JSON of `PrepareCompleted` entries, kept between checkpoint writes.

    Sound because entries are frozen `ClaimEntry` records: a change is a new object, and an entry is reused
    only while it is the very same object. Entries given as JSON (tests, tools) are encoded each time."""

    def __init__(self) -> None:
        self._by_uid: dict[str, tuple[ClaimEntry[Any], bytes]] = {}

    def claims_json(self, claims: Mapping[str, ClaimEntry[Any] | Any]) -> bytes:
        fresh: dict[str, tuple[ClaimEntry[Any], bytes]] = {}
        parts = []
        for uid in sorted(claims):
            entry = claims[uid]
            if not isinstance(entry, ClaimEntry):
                parts.append(_canonical(uid) + b":" + _canonical(entry))
                continue
            cached = self._by_uid.get(uid)
            raw = cached[1] if cached is not None and cached[0] is entry else _canonical(entry.to_json())
            if entry.completed:
                fresh[uid] = (entry, raw)
            parts.append(_canonical(uid) + b":" + raw)
        self._by_uid = fresh
        return b"{" + b",".join(parts) + b"}"


def _canonical_data(data: Mapping[str, Any], cache: CompletedEntryCache | None) -> bytes:
    """`data` whose claims map may hold `ClaimEntry` records (the journal's), encoded as their JSON."""
    claims = data.get("claims")
    if isinstance(claims, dict) and any(isinstance(e, ClaimEntry) for e in claims.values()):
        cache = cache or CompletedEntryCache()
    if cache is None or not isinstance(claims, dict) or not all(isinstance(k, str) for k in data):
        return _canonical(data)
    return b"{" + b",".join(_canonical(key) + b":" + (cache.claims_json(claims) if key == "claims" else _canonical(data[key]))
                            for key in sorted(data)) + b"}"


def encode_checkpoint(data: Mapping[str, Any], cache: CompletedEntryCache | None = None) -> bytes:
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


def save_checkpoint(path: str, data: Mapping[str, Any], *, fsync: bool = True) -> None:
    write_checkpoint_bytes(path, encode_checkpoint(data), fsync=fsync)
