"""Consumable capacity (DRAConsumableCapacity): what a request consumes of a device.

All amounts are exact integers (Quantity ×1e9).
"""

from __future__ import annotations

from .model import CapacityInfo, DeviceInfo


def _round_up(amount: int, capacity: CapacityInfo) -> int:
    if capacity.valid_values is not None:
        for value in capacity.valid_values:
            if value >= amount:
                return value
        return amount
    if capacity.range_min is not None:
        minimum = capacity.range_min
        if amount <= minimum:
            return minimum
        step = capacity.range_step
        if step:
            steps = -(-(amount - minimum) // step)
            return minimum + steps * step
    return amount


def _violates_policy(amount: int, capacity: CapacityInfo) -> bool:
    if capacity.default is not None and amount == capacity.default:
        return False
    if capacity.valid_values is not None:
        return amount not in capacity.valid_values
    if capacity.range_min is not None:
        if amount < capacity.range_min:
            return True
        if capacity.range_max is not None and amount > capacity.range_max:
            return True
        if capacity.range_step and (amount - capacity.range_min) % capacity.range_step:
            return True
    return False


def consumption(device: DeviceInfo, requests: dict[str, int]) -> dict[str, int] | None:
    """Per-capacity consumption of one allocation, or None when the device cannot serve the request."""
    capacities = device.capacity
    for name in requests:
        if name not in capacities:
            return None
    consumed: dict[str, int] = {}
    for name, capacity in capacities.items():
        if name in requests:
            amount = requests[name]
        elif capacity.default is not None:
            amount = capacity.default
        else:
            amount = capacity.value
        if capacity.has_policy:
            amount = _round_up(amount, capacity)
            if _violates_policy(amount, capacity):
                return None
        consumed[name] = amount
    return consumed


def fits(device: DeviceInfo, consumed: dict[str, int], *in_use: dict[str, int] | None) -> bool:
    for name, amount in consumed.items():
        total = amount
        for used in in_use:
            if used:
                total += used.get(name, 0)
        if total > device.capacity[name].value:
            return False
    return True
