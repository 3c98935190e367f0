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
from typing import Any

from gpudra.atomicfile import write_atomic

from .checkpoint import API_VERSION, CHECKPOINT_MODE, CheckpointError, read_regular_file, reserved_records

log = logging.getLogger("gpudra.driver")

KIND = "DriverQuarantine"
MAX_QUARANTINE_BYTES = 16 << 20


def load_quarantine(path: str) -> list[dict[str, Any]]:
    """The quarantined entries ({uid, reason, entry, reserved, nodeBootID}); [] without a file."""
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
    for item in entries:  # an operator may have edited it: recompute what stays reserved
        item["reserved"] = reserved_records(item.get("entry"))
    return entries


def save_quarantine(path: str, entries: list[dict[str, Any]], *, fsync: bool = True) -> None:
    doc = {"apiVersion": API_VERSION, "kind": KIND, "entries": entries}
    write_atomic(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), mode=CHECKPOINT_MODE,
                 label="quarantine", fsync=fsync)


def quarantine_entry(entries: list[dict[str, Any]], uid: str, entry: Any, reason: str, boot_id: str) -> None:
    """Add one bad entry (once: start-up may be interrupted between writing this file and the checkpoint)."""
    if any(item.get("uid") == uid and item.get("entry") == entry for item in entries):
        return
    reserved = reserved_records(entry)
    entries.append({"uid": uid, "reason": reason, "entry": entry, "reserved": reserved, "nodeBootID": boot_id})
    log.error("checkpoint entry %r quarantined: %s; %s", uid[:100], reason,
              f"{len(reserved)} devices stay reserved until the operator releases them"
              if reserved else "it names no device that can be reserved")
