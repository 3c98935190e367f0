"""The driver's checkpoint in memory and on disk: one lock around the data, group commit of writes, and the
rolling-update lock under which a second driver pod's writes are picked up first.

`DeviceState` (state.py) decides what goes into the checkpoint; this module only keeps it and writes it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from .checkpoint import (CHECKPOINT_VERSION, JOINS_KEY, MAX_CHECKPOINT_BYTES, Checkpoint, CompletedEntryCache,
                         encode_checkpoint, read_checkpoint, read_regular_file, write_checkpoint_bytes)
from .prepared import ClaimEntry

log = logging.getLogger("gpudra.driver")


class CheckpointJournal:
    def __init__(self, path: str, boot_id: str, *, fsync: bool = True, serialize_lock: str | None = None):
        self.path = path
        self.boot_id = boot_id
        self.fsync = fsync
        # Rolling updates: two driver pods serve the kubelet at once. Each prepare/unprepare (and start-up) then
        # runs under this file lock and first rereads the checkpoint the other pod may have written.
        self.serialize_lock = serialize_lock
        self.lock = threading.RLock()  # guards `claims`, `domain_joins` and `entry_cache`
        # The checkpoint in memory: frozen entries, replaced (never edited) under `lock`.
        self.claims: dict[str, ClaimEntry[Any]] = {}
        self.domain_joins: dict[str, str] = {}  # compute-domain plugin: claim UID -> the domain it joined
        self.entry_cache = CompletedEntryCache()
        self._disk_raw: bytes | None = None  # the checkpoint bytes this process last wrote or read
        # group commit: concurrent claims share checkpoint writes (each write is fsync + rename)
        self._version = 0
        self._saved_version = 0
        self._saving = False
        self._save_cond = threading.Condition()

    def replace(self, checkpoint: Checkpoint | None) -> None:
        """Start over from `checkpoint` (start-up, or what another driver pod wrote); None: empty. Its unusable
        entries are the caller's to quarantine. Hold `lock`."""
        self.claims = dict(checkpoint.claims) if checkpoint is not None else {}
        self.domain_joins = dict(checkpoint.domain_joins) if checkpoint is not None else {}
        self.entry_cache = CompletedEntryCache()

    def _data(self) -> dict[str, Any]:
        """The data to encode, its claims as records (the encoder caches completed ones). Hold `lock`."""
        data: dict[str, Any] = {"version": CHECKPOINT_VERSION, "nodeBootID": self.boot_id, "claims": self.claims}
        if self.domain_joins:
            data[JOINS_KEY] = self.domain_joins
        return data

    def save_now(self) -> None:
        """Write now (start-up only, when nothing runs concurrently)."""
        raw = encode_checkpoint(self._data())
        write_checkpoint_bytes(self.path, raw, fsync=self.fsync)
        self._disk_raw = raw

    @contextmanager
    def serialized(self) -> Iterator[None]:
        """With a serialize lock: hold it (a new open file description per call, so threads of this process
        exclude each other too) and start from the checkpoint on disk."""
        if self.serialize_lock is None:
            yield
            return
        fd = os.open(self.serialize_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._reload_if_changed()
            yield
        finally:
            os.close(fd)

    def _reload_if_changed(self) -> None:
        raw = read_regular_file(self.path, MAX_CHECKPOINT_BYTES)  # CheckpointError for a planted FIFO or link
        if raw == self._disk_raw or raw is None:
            return
        loaded = read_checkpoint(self.path)  # written by the other pod, whose start-up quarantined bad entries
        if loaded is not None and loaded.unusable:
            log.error("checkpoint %s written by the other driver pod has %d unusable entries: ignored until the next "
                      "start-up quarantines them", self.path, len(loaded.unusable))
        with self.lock:
            self.replace(loaded)
            self._disk_raw = raw

    def changed(self) -> int:
        """Call with `lock` held after changing the checkpoint; returns the version to persist."""
        self._version += 1
        return self._version

    def persist(self, version: int) -> None:
        """Return once a checkpoint containing `version` is on disk. While one thread writes, the
        others wait and the next writer covers all their changes at once."""
        with self._save_cond:
            while self._saved_version < version:
                if not self._saving:
                    self._saving = True
                    break
                self._save_cond.wait()
            else:
                return
        written = None
        try:
            with self.lock:
                raw = encode_checkpoint(self._data(), self.entry_cache)
                target = self._version
            write_checkpoint_bytes(self.path, raw, fsync=self.fsync)
            self._disk_raw = raw
            written = target
        finally:
            with self._save_cond:
                self._saving = False
                if written is not None:
                    self._saved_version = max(self._saved_version, written)
                self._save_cond.notify_all()

    def checkpoint(self) -> Checkpoint:
        """The checkpoint as it stands (its records are frozen: a copy of the maps is a snapshot)."""
        with self.lock:
            return Checkpoint(node_boot_id=self.boot_id, claims=dict(self.claims), domain_joins=dict(self.domain_joins))

    def snapshot(self) -> dict[str, Any]:
        """The checkpoint's data as JSON, as the file holds it."""
        return self.checkpoint().to_json()
