"""Devices, shares, capacity and counters already in use by allocated claims."""

from __future__ import annotations

from typing import Any

from gpudra.plain import as_dict, as_list, as_str

from .features import Features
from .model import quantity_nanos

DeviceKey = tuple[str, str, str]


class AllocatedState:
    """What allocated claims hold. Reference-counted so that claims can be removed again.

    Results with adminAccess never count. With consumable capacity on, a result with a shareID is a
    share of a multi-allocatable device: it consumes capacity but does not make the device "allocated".
    """

    def __init__(self, features: Features):
        self.features = features
        # reference counts (plain dicts: an Allocator per pod builds this anew, and Counter() is slow to make)
        self.allocated: dict[DeviceKey, int] = {}  # dedicated use
        self.shares: dict[tuple[DeviceKey, str], int] = {}
        self.shared_devices: dict[DeviceKey, int] = {}
        self.capacity: dict[DeviceKey, dict[str, int]] = {}
        self.version = 0

    @staticmethod
    def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
        allocation = as_dict(as_dict(as_dict(claim).get("status")).get("allocation"))
        return list(as_list(as_dict(allocation.get("devices")).get("results")))

    def _apply(self, claim: dict[str, Any], sign: int) -> None:
        for result in self._results(claim):
            if not isinstance(result, dict) or result.get("adminAccess"):
                continue
            key = (as_str(result.get("driver")), as_str(result.get("pool")), as_str(result.get("device")))
            share = result.get("shareID")
            if share and self.features.consumable_capacity:
                share_key = (key, str(share))
                self.shares[share_key] = self.shares.get(share_key, 0) + sign
                self.shared_devices[key] = self.shared_devices.get(key, 0) + sign
                if self.shared_devices[key] <= 0:
                    del self.shared_devices[key]
                used = self.capacity.setdefault(key, {})
                for name, value in as_dict(result.get("consumedCapacity")).items():
                    used[name] = used.get(name, 0) + sign * (quantity_nanos(value) or 0)
                if not self.shared_devices.get(key):
                    self.capacity.pop(key, None)
            else:
                self.allocated[key] = self.allocated.get(key, 0) + sign
                if self.allocated[key] <= 0:
                    del self.allocated[key]
        self.version += 1

    def add(self, claim: dict[str, Any]) -> None:
        self._apply(claim, 1)

    def remove(self, claim: dict[str, Any]) -> None:
        self._apply(claim, -1)

    def counts_for_counters(self, key: DeviceKey) -> bool:
        """Whether an allocated device's counter consumption is already taken from its pool."""
        return key in self.allocated or key in self.shared_devices
