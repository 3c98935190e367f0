"""The driver's checkpoint: which claims are (being) prepared, with what.

Written atomically (temp file in the same directory, fsync, rename, fsync of the
directory) and protected by a SHA-256 checksum of its canonical JSON, so a reader sees
either the old or the new state, and silent damage is detected instead of trusted.

The rename is an exchange where the kernel offers one (`renameat2(RENAME_EXCHANGE)`):
the previous checkpoint becomes the next temp file, overwritten in place next time. Creating
and freeing an inode per write costs more than the rest of the write on some filesystems;
what a reader of the checkpoint can observe is the same as with a plain rename.
"""

from __future__ import annotations

import ctypes
import errno
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


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
try:
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    _renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    _renameat2.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - not glibc/Linux
    _renameat2 = None


def _exchange(a: str, b: str) -> bool:
    """Atomically swap the two names; False when the kernel, filesystem or libc cannot (or one is missing)."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOENT, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), a, None, b)


def write_checkpoint_bytes(path: str, raw: bytes, *, fsync: bool = True) -> None:
    """Callers serialize writes to one `path` (the temp name is fixed)."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp")
    # No O_TRUNC: overwriting the old temp file's blocks in place is cheaper than freeing and
    # reallocating them; ftruncate drops a longer tail. The temp file is never read.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
        os.ftruncate(fd, len(raw))
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if not _exchange(tmp, path):
        os.replace(tmp, path)
    if fsync:
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def save_checkpoint(path: str, data: dict[str, Any], *, fsync: bool = True) -> None:
    write_checkpoint_bytes(path, encode_checkpoint(data), fsync=fsync)
