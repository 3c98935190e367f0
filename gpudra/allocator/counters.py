"""Partitionable devices' shared counters: what a pool has left, and the first counter a request would overdraw."""

from __future__ import annotations

from typing import Callable, Iterable

from .model import DeviceInfo, DeviceKey


def counters_left(
    counter_sets: dict[str, dict[str, int]], devices: Iterable[DeviceInfo], allocated: Callable[[DeviceKey], bool]
) -> dict[str, dict[str, int]]:
    """A pool's counter sets minus what its allocated devices consume (may go negative, as upstream)."""
    available = {name: dict(counters) for name, counters in counter_sets.items()}
    for device in devices:
        if device.consumes_counters and allocated(device.key):
            for set_name, counters in device.consumes_counters:
                target = available.get(set_name)
                if target is None:
                    continue
                for counter, amount in counters.items():
                    if counter in target:
                        target[counter] -= amount
    return available


def first_short_counter(
    available: dict[str, dict[str, int]], consumed: dict[str, dict[str, int]]
) -> tuple[str, str] | None:
    """(counter set, counter) of the first counter of the pool where consumption exceeds what is
    available, or None. Every counter of the pool is checked, so an already over-allocated pool
    (negative availability) rejects every device that consumes counters, as upstream does."""
    for set_name, counters in available.items():
        used = consumed.get(set_name) or {}
        for counter, amount in counters.items():
            if amount < used.get(counter, 0):
                return set_name, counter
    return None
