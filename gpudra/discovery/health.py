"""GPU health events as the hardware reports them, and where the simulated backend's come from.

A backend's `open_health_monitor()` returns a `HealthMonitor`; the driver calls `wait(timeout)`
in a loop and turns the events into device taints (`gpudra/gpuplugin/health.py`). On NVML the events
come from an NVML event set (`nvml_events.py`); on the simulated backend from a spool directory
beside the simulated GPU state, where `gpudra driver inject-event` drops one JSON file per event
(several processes may inject; each file is read once and removed), or from `inject()` in-process.
"""

from __future__ import annotations

import json
import os
import queue
import time
import uuid as uuidlib
from dataclasses import asdict, dataclass
from typing import Any, Callable

from gpudra.atomicfile import ensure_dir, write_atomic
from gpudra.errors import GpudraError
from gpudra.regularfile import read_regular_file

EVENT_KINDS = ("xid", "ecc", "gpu-lost", "unmonitored", "recovered", "gpu-reset")
RECOVERY_KINDS = ("recovered", "gpu-reset")  # reports that an error is gone, not that one happened
SPOOL_DIR_MODE = 0o700
_POLL_S = 0.2  # how often a waiting monitor looks at the spool directory


class HealthEventError(GpudraError, ValueError):
    """An event that cannot be injected (unknown kind, missing XID, …)."""


@dataclass(frozen=True)
class HealthEvent:
    """One report about one GPU (`gpu` = UUID, or None for every GPU of the node).

    `gi_id`/`ci_id` narrow an event to one MIG device (NVML reports them on MIG-mode GPUs); None
    means the whole GPU. `xid` is set for kind "xid"; kind "ecc" is an uncorrectable (double-bit)
    ECC error, "gpu-lost" a GPU fallen off the bus, "unmonitored" a GPU whose events cannot be read.
    The recovery kinds: "recovered" says an error cleared (`xid` set: that XID; else every error that clears on
    its own), "gpu-reset" that the GPU was reset (every error a reset clears is gone); see gpudra/discovery/xids.py."""

    kind: str
    gpu: str | None = None
    gi_id: int | None = None
    ci_id: int | None = None
    xid: int | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise HealthEventError(f"unknown health event kind {self.kind!r}; choose one of {', '.join(EVENT_KINDS)}")
        if self.kind == "xid" and (self.xid is None or self.xid < 0):
            raise HealthEventError("an xid event needs a non-negative XID number")
        if self.xid is not None and self.kind not in ("xid", "recovered"):
            raise HealthEventError(f"a {self.kind} event carries no XID number")
        if self.kind in RECOVERY_KINDS and self.gpu is None:
            raise HealthEventError(f"a {self.kind} event names one GPU")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}


class HealthMonitor:
    """Blocks in `wait` until events arrive or the timeout passes."""

    def wait(self, timeout_s: float) -> list[HealthEvent]:
        raise NotImplementedError

    def close(self) -> None:
        """Release the event source."""


def _integer(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is not None and type(value) is not int:  # `"xid": "79"`, true, 7.5
        raise HealthEventError(f"{key} must be an integer, not {json.dumps(value)[:40]}")
    return value


def _event_from_dict(data: Any, resolve_gpu: Callable[[Any], str | None]) -> HealthEvent:
    if not isinstance(data, dict):
        raise HealthEventError("an event must be a JSON object")
    gpu = data.get("gpu")
    if gpu is not None and (type(gpu) is not int and not isinstance(gpu, str)):
        raise HealthEventError(f"gpu must be a UUID or a minor number, not {json.dumps(gpu)[:40]}")
    return HealthEvent(kind=str(data.get("kind")), gpu=None if gpu is None else resolve_gpu(gpu),
                       gi_id=_integer(data, "gi_id"), ci_id=_integer(data, "ci_id"), xid=_integer(data, "xid"),
                       detail=str(data.get("detail") or ""))


MAX_EVENT_FILE_BYTES = 64 << 10  # an event is a few hundred bytes


def _read_event_file(path: str) -> Any:
    """One spool file's JSON: a regular file (not a FIFO, device or symlink) of at most MAX_EVENT_FILE_BYTES."""
    raw = read_regular_file(path, MAX_EVENT_FILE_BYTES)  # UnsafeFileError, an OSError, says why not
    if raw is None:
        raise FileNotFoundError(path)
    return json.loads(raw)


def spool_dir_for(state_path: str) -> str:
    """The simulated node's event spool: beside its GPU state file."""
    return os.path.join(os.path.dirname(os.path.abspath(state_path)), "events")


def write_spooled_event(spool_dir: str, event: HealthEvent) -> str:
    """Drop `event` into the spool (atomically: a reader never sees half a file). Returns its path."""
    ensure_dir(spool_dir, SPOOL_DIR_MODE)
    # names sort in arrival order: nanoseconds, then a random tail against collisions
    path = os.path.join(spool_dir, f"{time.time_ns():020d}-{uuidlib.uuid4().hex[:8]}.json")
    write_atomic(path, json.dumps(event.to_dict()).encode(), mode=0o600, label="health-event", fsync=False)
    return path


class SpoolMonitor(HealthMonitor):
    """Events from in-process `inject()` calls and from the spool directory (if any)."""

    def __init__(self, spool_dir: str | None, resolve_gpu: Callable[[Any], str | None]):
        self.spool_dir = spool_dir
        self.resolve_gpu = resolve_gpu
        self._queue: queue.Queue[HealthEvent] = queue.Queue()
        self.rejected: list[str] = []  # spool files that were not valid events (logged by the caller)

    def inject(self, event: HealthEvent) -> None:
        self._queue.put(event)

    def _drain_queue(self) -> list[HealthEvent]:
        events = []
        while True:
            try:
                events.append(self._queue.get_nowait())
            except queue.Empty:
                return events

    def _drain_spool(self) -> list[HealthEvent]:
        if self.spool_dir is None:
            return []
        try:
            names = sorted(n for n in os.listdir(self.spool_dir) if n.endswith(".json") and not n.startswith("."))
        except FileNotFoundError:
            return []
        events = []
        for name in names:
            path = os.path.join(self.spool_dir, name)
            try:
                events.append(_event_from_dict(_read_event_file(path), self.resolve_gpu))
            except FileNotFoundError:
                continue  # another reader took it
            except (OSError, ValueError, RecursionError) as exc:
                # reported and removed: one bad file must not hold up the events behind it (issue 20)
                self.rejected.append(f"{name}: {exc.strerror if isinstance(exc, OSError) else exc}")
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        return events

    def wait(self, timeout_s: float) -> list[HealthEvent]:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            events = self._drain_queue() + self._drain_spool()
            remaining = deadline - time.monotonic()
            if events or remaining <= 0:
                return events
            try:
                return [self._queue.get(timeout=min(_POLL_S, remaining))] + self._drain_queue()
            except queue.Empty:
                continue
