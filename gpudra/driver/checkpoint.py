"""The driver's checkpoint: which claims are (being) prepared, with what.

Written atomically (`gpudra.atomicfile`: temp file in the same directory, fsync, rename,
fsync of the directory) and protected by a SHA-256 checksum of its canonical JSON, so a reader sees
either the old or the new state, and silent damage is detected instead of trusted.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gpudra.atomicfile import write_atomic

API_VERSION = "gpudra.io/v1"
KIND = "DriverCheckpoint"

PREPARE_STARTED = "PrepareStarted"
PREPARE_COMPLETED = "PrepareCompleted"
UNPREPARE_STARTED = "UnprepareStarted"
STATES = (PREPARE_STARTED, PREPARE_COMPLETED, UNPREPARE_STARTED)


class CheckpointError(Exception):
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


def load_checkpoint(path: str) -> dict[str, Any] | None:
    """The checkpoint data, or None when there is no checkpoint yet."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise CheckpointError(f"checkpoint {path} has an unknown format (want {API_VERSION} {KIND})")
    data = doc.get("data")
    if doc.get("checksum") != checksum(data):
        raise CheckpointError(f"checkpoint {path} is corrupted: checksum mismatch")
    if not isinstance(data, dict) or not isinstance(data.get("claims"), dict):
        raise CheckpointError(f"checkpoint {path} has no claims map")
    for uid, entry in data["claims"].items():
        if not isinstance(entry, dict) or entry.get("state") not in STATES:
            raise CheckpointError(f"checkpoint {path}: claim {uid} has an invalid state")
    return data


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
    """Callers serialize writes to one `path` (the temp name is fixed)."""
    write_atomic(path, raw, mode=CHECKPOINT_MODE, label="checkpoint", fsync=fsync, reuse_temp=True)


def save_checkpoint(path: str, data: dict[str, Any], *, fsync: bool = True) -> None:
    write_checkpoint_bytes(path, encode_checkpoint(data), fsync=fsync)
