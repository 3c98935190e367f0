"""Checkpoint entries the driver cannot use, kept aside for the operator.

An entry that passes the checksum but is malformed (a writer bug, a hand edit, an older format)
is neither trusted nor dropped: start-up moves it to `quarantine.json` next to the checkpoint,
logs why, and keeps every device it names reserved, so no other claim is handed a device that a
running container may still use. The operator inspects the file (`gpudra driver status` lists
it) and deletes it, or entries of it, once those devices are known to be free; the driver reads
it at start. After a reboot nothing an entry held is in use any more: the file stays for the
record, but only entries of the current boot reserve devices.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from gpudra.atomicfile import write_atomic

from .checkpoint import API_VERSION, CHECKPOINT_MODE, CheckpointError, read_regular_file
from .prepared import ReservedDevice, reserved_devices

log = logging.getLogger("gpudra.driver")

KIND = "DriverQuarantine"
MAX_QUARANTINE_BYTES = 16 << 20


@dataclass(frozen=True)
class QuarantinedEntry:
    """One entry set aside: the operator's file holds it as it was in the checkpoint, with the reason."""

    uid: Any  # as the file says: an operator may have edited it
    reason: Any
    entry: Any  # the checkpoint entry as it was (it could not be read as a record)
    node_boot_id: Any
    reserved: tuple[ReservedDevice, ...]  # recomputed from `entry` at each read

    def reserves_now(self, boot_id: str) -> bool:
        """Whether its devices are still reserved: only entries of this boot (or of an unknown one) hold any."""
        return self.node_boot_id in (None, "", boot_id)

    def to_json(self) -> dict[str, Any]:
        return {"uid": self.uid, "reason": self.reason, "entry": self.entry,
                "reserved": [r.to_json() for r in self.reserved], "nodeBootID": self.node_boot_id}

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> QuarantinedEntry:
        return cls(uid=item.get("uid"), reason=item.get("reason"), entry=item.get("entry"),
                   node_boot_id=item.get("nodeBootID"), reserved=reserved_devices(item.get("entry")))


def load_quarantine(path: str) -> list[QuarantinedEntry]:
    """The quarantined entries; [] without a file."""
    raw = read_regular_file(path, MAX_QUARANTINE_BYTES, what="quarantine file")
    if raw is None:
        return []
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"quarantine file {path} is not valid JSON ({exc}): fix or remove it") from None
    entries = doc.get("entries") if isinstance(doc, dict) and doc.get("kind") == KIND else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise CheckpointError(f"quarantine file {path} is not a {API_VERSION} {KIND}: fix or remove it")
    # an operator may have edited it: what stays reserved is recomputed from the entries
    return [QuarantinedEntry.from_json(item) for item in entries]


def save_quarantine(path: str, entries: list[QuarantinedEntry], *, fsync: bool = True) -> None:
    doc = {"apiVersion": API_VERSION, "kind": KIND, "entries": [e.to_json() for e in entries]}
    write_atomic(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), mode=CHECKPOINT_MODE,
                 label="quarantine", fsync=fsync)


def quarantine_entry(entries: list[QuarantinedEntry], uid: str, entry: Any, reason: str, boot_id: str) -> None:
    """Add one bad entry (once: start-up may be interrupted between writing this file and the checkpoint)."""
    if any(item.uid == uid and item.entry == entry for item in entries):
        return
    reserved = reserved_devices(entry)
    entries.append(QuarantinedEntry(uid=uid, reason=reason, entry=entry, node_boot_id=boot_id, reserved=reserved))
    log.error("checkpoint entry %r quarantined: %s; %s", uid[:100], reason,
              f"{len(reserved)} devices stay reserved until the operator releases them"
              if reserved else "it names no device that can be reserved")
