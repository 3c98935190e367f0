"""Consumable capacity (DRAConsumableCapacity): what a request consumes of a device.

The rules follow upstream's `calculateConsumedCapacity` and `violatesPolicy` exactly, including the
spelling of the result: an amount rounded up to a range step is a new BinarySI quantity (so 15G shows
as "15000000000" and 2147483648 as "2Gi"), every other amount keeps the spelling it came from.
"""

from __future__ import annotations

from typing import Any

from gpudra.plain import as_dict
from gpudra.quantity import NANO, Quantity

from .model import CapacityInfo, DeviceInfo, quantity_nanos


def _units(quantity: Quantity) -> int:
    """Quantity.Value(): the value rounded up to a whole number."""
    return -(-quantity.nanos // NANO)


def consumed_quantity(requested: Quantity | None, capacity: CapacityInfo) -> Quantity:
    """What one allocation consumes of one capacity (upstream's calculateConsumedCapacity)."""
    if requested is None:
        return capacity.default_q if capacity.default_q is not None else capacity.value_q
    if not capacity.has_policy:
        return requested
    if capacity.valid_values_q is not None:
        for value in capacity.valid_values_q:
            if requested <= value:
                return value
        return requested
    if capacity.range_min_q is not None:
        if requested < capacity.range_min_q:
            return capacity.range_min_q
        if capacity.range_step_q is None:
            return requested
        minimum, step = _units(capacity.range_min_q), _units(capacity.range_step_q)
        if step <= 0:
            return requested
        added = _units(requested) - minimum
        steps = added // step + (1 if added % step else 0)
        return Quantity.from_int(minimum + step * steps, "BinarySI")
    return requested


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
        requested = requests.get(name)
        amount = consumed_quantity(None if requested is None else Quantity(requested), capacity).nanos
        if capacity.has_policy and _violates_policy(amount, capacity):
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


def capacity_requests(request: dict[str, Any]) -> dict[str, int]:
    raw = as_dict(as_dict(request.get("capacity")).get("requests"))
    return {name: quantity_nanos(value) or 0 for name, value in raw.items()}
