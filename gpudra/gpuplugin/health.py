"""Device health: GPU health events turned into DRA device taints (KEP-5055) and kubelet health states.

Taint keys and effects follow NVIDIA's GPU DRA driver (`cmd/gpu-kubelet-plugin/device_health.go`,
kubernetes-sigs/dra-driver-nvidia-gpu v0.4.0), in the driver's own domain (`<driver>/…`):

| event                         | key                   | value      | effect                                 |
|-------------------------------|-----------------------|------------|----------------------------------------|
| XID critical error            | `<driver>/xid`        | XID number | NoSchedule; None for application XIDs  |
| GPU fallen off the bus        | `<driver>/gpu-lost`   | —          | NoSchedule                             |
| events cannot be monitored    | `<driver>/unmonitored`| —          | None                                   |
| double-bit ECC (gpudra's own) | `<driver>/ecc`        | double-bit | NoSchedule                             |

Application XIDs (13, 31, 43, 45, 68, 109: the GPU is still healthy) get effect None, like NVIDIA's
hard-coded list plus `--additional-xids-to-ignore` (NVIDIA's ADDITIONAL_XIDS_TO_IGNORE). One taint
per key: a later XID replaces the earlier one's value (NVIDIA's AddOrUpdateTaint). `blocking_effect`
is what NoSchedule above becomes: NVIDIA's NoSchedule by default, NoExecute to have the device taint
eviction controller evict the pods on a failed GPU.

Recovery (gpudra's; NVIDIA's driver never removes a taint): a "recovered" event removes the taints whose
error clears on its own and a "gpu-reset" event also those a GPU reset clears, by NVIDIA's XID catalog
(gpudra/discovery/xids.py). Per key the stickiest error seen since the last removal decides, so a GPU
that fell off the bus (XID 79, needs a reboot) stays tainted when an application XID follows. ECC
double-bit errors count as XID 48 (a reset), a lost GPU as XID 79 and an unmonitored one as needing
a driver restart.

An event names a GPU (UUID) and, on MIG-mode GPUs, possibly one GPU/compute instance. A whole-GPU
event taints the full GPU device and every MIG device of that GPU (NVIDIA taints only a device it
finds at exactly (GPU, whole, whole)); an instance event taints that MIG device only.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any, Iterable

from gpudra.discovery.health import RECOVERY_KINDS, HealthEvent
from gpudra.discovery.model import Inventory
from gpudra.discovery.xids import RecoveryClass, recovery_class

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
HEALTHY, UNHEALTHY, UNKNOWN = "healthy", "unhealthy", "unknown"
HEALTH_STATES = (HEALTHY, UNHEALTHY, UNKNOWN)
_KEYS = {"xid": "xid", "gpu-lost": "gpu-lost", "unmonitored": "unmonitored", "ecc": "ecc"}
# how each kind's taint goes away (xid: by its number); the order is from least to most sticky
_RECOVERY: dict[str, RecoveryClass] = {"ecc": "reset", "gpu-lost": "reboot", "unmonitored": "reboot"}
_STICKINESS: tuple[RecoveryClass, ...] = ("clears", "reset", "reboot")
_REMOVED_BY: dict[str, tuple[RecoveryClass, ...]] = {"recovered": ("clears",), "gpu-reset": ("clears", "reset")}


def parse_xid_list(text: str) -> frozenset[int]:
    """`--additional-xids-to-ignore "48, 63"`: comma-separated numbers; like NVIDIA's, malformed entries
    are skipped (the flag is read at start-up, where a typo must not keep the driver from running)."""
    xids = set()
    for part in (text or "").split(","):
        part = part.strip()
        if part.isdigit():
            xids.add(int(part))
    return frozenset(xids)


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _attr(device: dict[str, Any], name: str) -> str | None:
    value = (device.get("attributes") or {}).get(name)
    return value.get("string") if isinstance(value, dict) else None


class DeviceHealth:
    """Taints by (GPU UUID, device name or None for the whole GPU); thread-safe. `version` grows on
    every change and `wait_for_change` blocks until it does (the kubelet health stream)."""

    def __init__(self, driver_name: str, *, ignored_xids: Iterable[int] = (), clock: Any = time.time,
                 blocking_effect: str = "NoSchedule"):
        if blocking_effect not in BLOCKING_EFFECTS:
            raise ValueError(f"blocking_effect must be one of {', '.join(BLOCKING_EFFECTS)}, not {blocking_effect!r}")
        self.driver_name = driver_name
        self.ignored_xids = APPLICATION_XIDS | frozenset(ignored_xids)
        self.clock = clock
        self.blocking_effect = blocking_effect
        self._taints: dict[tuple[str, str | None], dict[str, dict[str, Any]]] = {}
        # (target, taint key) -> the stickiest recovery class seen since the taint was last removed
        self._sticky: dict[tuple[tuple[str, str | None], str], RecoveryClass] = {}
        self._updated: dict[tuple[str, str | None], float] = {}
        self._cond = threading.Condition()
        self.version = 0
        self.started = clock()

    def taint_key(self, kind: str) -> str:
        return f"{self.driver_name}/{_KEYS[kind]}"

    def taint_for(self, event: HealthEvent) -> dict[str, Any]:
        taint: dict[str, Any] = {"key": self.taint_key(event.kind)}
        if event.kind == "xid":
            taint["value"] = str(event.xid)
            taint["effect"] = "None" if event.xid in self.ignored_xids else self.blocking_effect
        elif event.kind == "ecc":
            taint["value"] = "double-bit"
            taint["effect"] = self.blocking_effect
        elif event.kind == "gpu-lost":
            taint["effect"] = self.blocking_effect
        else:
            taint["effect"] = "None"
        return taint

    def _targets(self, event: HealthEvent, inventory: Inventory) -> list[tuple[str, str | None]]:
        gpus = [g for g in inventory.gpus if event.gpu is None or g.uuid == event.gpu]
        if event.gpu is not None and not gpus:
            return [(event.gpu, None)]  # a GPU gone from the inventory: keep the record, no device matches
        targets: list[tuple[str, str | None]] = []
        for gpu in gpus:
            if event.gi_id is None:
                targets.append((gpu.uuid, None))
                continue
            for mig in gpu.mig_devices:
                if mig.gi_id == event.gi_id and (event.ci_id is None or mig.ci_id == event.ci_id):
                    targets.append((gpu.uuid, mig.name))
        return targets

    def record(self, events: Iterable[HealthEvent], inventory: Inventory) -> list[tuple[HealthEvent, bool]]:
        """Apply events; returns each with whether it changed a taint (unknown MIG instances change nothing)."""
        outcome = []
        with self._cond:
            now = self.clock()
            changed_any = False
            for event in events:
                if event.kind in RECOVERY_KINDS:
                    changed = self._recover(event, inventory, now)
                    outcome.append((event, changed))
                    changed_any |= changed
                    continue
                taint = self.taint_for(event)
                changed = False
                stickiness = recovery_class(event.xid) if event.xid is not None else _RECOVERY[event.kind]
                for target in self._targets(event, inventory):
                    seen = self._sticky.get((target, taint["key"]), "clears")
                    self._sticky[(target, taint["key"])] = max(seen, stickiness, key=_STICKINESS.index)
                    taints = self._taints.setdefault(target, {})
                    old = taints.get(taint["key"])
                    if old is not None and old.get("value") == taint.get("value") and old["effect"] == taint["effect"]:
                        continue
                    taints[taint["key"]] = {**taint, "timeAdded": _rfc3339(now)}
                    self._updated[target] = now
                    changed = True
                outcome.append((event, changed))
                changed_any |= changed
            if changed_any:
                self.version += 1
                self._cond.notify_all()
        return outcome

    def _recover(self, event: HealthEvent, inventory: Inventory, now: float) -> bool:
        """Remove the taints of the event's GPU (or MIG device) that this recovery removes; under the lock."""
        removable = _REMOVED_BY[event.kind]
        if event.gi_id is None:
            targets = [target for target in self._taints if target[0] == event.gpu]
        else:
            targets = self._targets(event, inventory)
        changed = False
        for target in targets:
            taints = self._taints.get(target, {})
            for key, taint in list(taints.items()):
                if event.xid is not None and (key != self.taint_key("xid") or taint.get("value") != str(event.xid)):
                    continue
                if self._sticky.get((target, key), "clears") not in removable:
                    continue
                del taints[key]
                self._sticky.pop((target, key), None)
                self._updated[target] = now
                changed = True
        return changed

    def taints_of(self, device: dict[str, Any]) -> list[dict[str, Any]]:
        """The taints of one published device (found by its `uuid`/`parentUUID` attribute and name)."""
        gpu = _attr(device, "parentUUID") or _attr(device, "uuid")
        if gpu is None:
            return []
        with self._cond:
            merged = dict(self._taints.get((gpu, None), {}))
            merged.update(self._taints.get((gpu, device.get("name")), {}))
        return [dict(merged[key]) for key in sorted(merged)]

    def state_of(self, device: dict[str, Any]) -> tuple[str, str, float]:
        """(health state, message, time of the last change) of one published device."""
        taints = self.taints_of(device)
        gpu = _attr(device, "parentUUID") or _attr(device, "uuid")
        with self._cond:
            updated = max(self._updated.get((gpu, None), self.started),
                          self._updated.get((gpu, device.get("name")), self.started)) if gpu else self.started
        message = ", ".join(f"{t['key']}={t['value']}" if t.get("value") else t["key"] for t in taints)
        if any(t["effect"] in BLOCKING_EFFECTS for t in taints):
            return UNHEALTHY, message, updated
        if any(t["key"] == self.taint_key("unmonitored") for t in taints):
            return UNKNOWN, message, updated
        return HEALTHY, message, updated

    def counts(self, devices: Iterable[dict[str, Any]]) -> dict[str, int]:
        result = dict.fromkeys(HEALTH_STATES, 0)
        for device in devices:
            result[self.state_of(device)[0]] += 1
        return result

    def wait_for_change(self, seen_version: int, timeout_s: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self.version != seen_version, timeout=timeout_s)
            return self.version


class HealthView:
    """What the kubelet's health stream reads: the published devices of one pool with their states."""

    def __init__(self, health: DeviceHealth, pool: str, devices: Any):
        self.health = health
        self.pool = pool
        self.devices = devices  # () -> the devices last published

    @property
    def version(self) -> int:
        return self.health.version

    def wait_for_change(self, seen_version: int, timeout_s: float) -> int:
        return self.health.wait_for_change(seen_version, timeout_s)

    def snapshot(self) -> list[dict[str, Any]]:
        out = []
        for device in self.devices():
            state, message, updated = self.health.state_of(device)
            out.append({"pool": self.pool, "device": device["name"], "health": state, "message": message,
                        "updated": updated})
        return out
