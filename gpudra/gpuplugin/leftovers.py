"""What start-up does besides replaying the checkpoint: set aside a newer driver's checkpoint, quarantine entries
that cannot be acted on (their devices stay reserved), and remove what no completed claim owns any more (CDI specs,
dynamic MIG devices, MPS directories) after a crash.

A mixin of `DeviceState` (state.py), kept apart so the prepare/unprepare protocol reads on its own; `reconcile()`
there calls these in order.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from typing import Mapping

from gpudra.discovery import GpuBackend
from gpudra.kubeletplugin.checkpoint import (MAX_CHECKPOINT_BYTES, Checkpoint, CheckpointVersionError,
                                             read_regular_file, write_checkpoint_bytes)
from gpudra.kubeletplugin.journal import CheckpointJournal
from gpudra.kubeletplugin.paths import DriverPaths
from gpudra.kubeletplugin.prepared import ReservedDevice
from gpudra.kubeletplugin.quarantine import QuarantinedEntry, load_quarantine, quarantine_entry, save_quarantine

from .records import GpuClaimEntry

log = logging.getLogger("gpudra.driver")


class StartupLeftovers:
    """Set up by DeviceState.__init__."""

    journal: CheckpointJournal
    paths: DriverPaths
    backend: GpuBackend
    boot_id: str
    dynamic_mig: bool
    _mig_lock: threading.Lock
    _reserved: list[ReservedDevice]  # devices of quarantined checkpoint entries
    _quarantined_uids: set[str]

    def _spec_name(self, uid: str) -> str:
        raise NotImplementedError  # DeviceState's

    def _spec_name_prefix(self) -> str:
        raise NotImplementedError  # DeviceState's

    def _set_aside_newer_checkpoint(self, error: CheckpointVersionError) -> Checkpoint:
        """A newer driver's checkpoint (the node was downgraded): keep the file byte for byte beside it (a re-upgrade
        can restore it), quarantine its entries with their devices reserved, and go on with none of them."""
        raw = read_regular_file(self.paths.checkpoint, MAX_CHECKPOINT_BYTES)
        aside = self.paths.newer_checkpoint(error.version)
        if raw is not None:
            write_checkpoint_bytes(aside, raw, fsync=self.journal.fsync)
        log.error("%s: kept as %s; its %d claims are quarantined (%s)", error, aside, len(error.data["claims"]),
                  self.paths.quarantine)
        return Checkpoint.newer(error)

    def _quarantine_bad_entries(self, loaded: Checkpoint | None, report: dict[str, list[str]]) -> None:
        """Move the checkpoint's entries that cannot be acted on to the quarantine file (written before the
        checkpoint drops them), and reserve what they and earlier quarantined entries hold. `journal.lock` held."""
        path = self.paths.quarantine
        entries: list[QuarantinedEntry] = load_quarantine(path)
        known = len(entries)
        for bad in loaded.unusable if loaded is not None else ():
            quarantine_entry(entries, bad.uid, bad.entry, bad.reason, self.boot_id)
            report["quarantined"].append(bad.uid)
        if len(entries) != known:
            save_quarantine(path, entries, fsync=self.journal.fsync)
        current = [item for item in entries if item.reserves_now(self.boot_id)]
        self._reserved = [record for item in current for record in item.reserved]
        self._quarantined_uids = {item.uid for item in current if isinstance(item.uid, str)}

    def _spec_exists(self, uid: str) -> bool:
        base = os.path.join(self.paths.cdi_spec_dir, self._spec_name(uid))
        return os.path.exists(base + ".yaml") or os.path.exists(base + ".json")

    def _remove_leftovers(self, completed: Mapping[str, GpuClaimEntry], report: dict[str, list[str]]) -> None:
        """Delete the CDI specs, dynamic MIG devices and MPS directories that neither a completed claim nor a
        quarantined entry owns (a crash between two steps of a prepare or unprepare leaves them)."""
        prefix = self._spec_name_prefix()
        try:
            names = os.listdir(self.paths.cdi_spec_dir)
        except FileNotFoundError:
            names = []
        for name in names:
            # directory entries: one path component each, whatever the (possibly foreign) UID in them
            if name.startswith(prefix) and name.endswith((".yaml", ".json")):
                uid = name[len(prefix):].rsplit(".", 1)[0]
                if uid not in completed and uid not in self._quarantined_uids:
                    try:
                        os.unlink(os.path.join(self.paths.cdi_spec_dir, name))
                    except FileNotFoundError:
                        pass
                    if uid not in report["cdiRemoved"]:
                        report["cdiRemoved"].append(uid)
        if self.dynamic_mig:
            owned = {(d.gpu_minor, *d.mig.key) for e in completed.values() for d in e.devices if d.mig is not None}
            owned |= {(r.gpu_minor, *r.mig) for r in self._reserved if r.mig is not None and r.gpu_minor is not None}
            for gpu in self.backend.inventory().gpus:
                for mig in gpu.mig_devices:
                    if (gpu.minor, mig.gi_profile_id, mig.placement_start) not in owned:
                        with self._mig_lock:
                            self.backend.destroy_mig_device(gpu.minor, mig.gi_id)
                        report["migDestroyed"].append(mig.name)
        mps_root = os.path.join(self.paths.plugin_dir, "mps")
        if os.path.isdir(mps_root):
            for uid in os.listdir(mps_root):
                if uid not in completed and uid not in self._quarantined_uids:
                    shutil.rmtree(os.path.join(mps_root, uid), ignore_errors=True)
