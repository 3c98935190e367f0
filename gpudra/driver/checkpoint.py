"""The driver's checkpoint: which claims are (being) prepared, with what.

Written atomically (temp file in the same directory, fsync, rename, fsync of the
directory) and protected by a SHA-256 checksum of its canonical JSON, so a reader sees
either the old or the new state, and silent damage is detected instead of trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

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


def encode_checkpoint(data: dict[str, Any]) -> bytes:
    doc = {"apiVersion": API_VERSION, "kind": KIND, "checksum": checksum(data), "data": data}
    # one line: `indent` would switch json to its pure-Python encoder, several times slower
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def write_checkpoint_bytes(path: str, raw: bytes, *, fsync: bool = True) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(raw)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    if fsync:
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def save_checkpoint(path: str, data: dict[str, Any], *, fsync: bool = True) -> None:
    write_checkpoint_bytes(path, encode_checkpoint(data), fsync=fsync)
