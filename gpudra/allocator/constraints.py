"""Claim constraints: matchAttribute and distinctAttribute, checked incrementally during the search.

An attribute value is seen as (element type, set of values): a scalar is a one-element set, and with
DRAListTypeAttributes a list attribute is the set of its elements. matchAttribute then needs a common
element across all devices (scalars: equal values), distinctAttribute needs disjoint values.
"""

from __future__ import annotations

from .model import DeviceInfo


def attribute_values(device: DeviceInfo, name: str, list_types: bool) -> tuple[str, frozenset[object]] | None:
    """(element type, values) of the device's attribute, or None; remembered per device (the search asks
    again for every combination it tries)."""
    cache = device.constraint_values
    key = (name, list_types)
    if key in cache:
        return cache[key]
    found = device.lookup_attribute(name)
    values: tuple[str, frozenset[object]] | None = None
    if found is not None:
        kind, value = found
        if not kind.startswith("list:"):
            values = kind, frozenset((value,))
        elif list_types and value:
            values = kind[5:], frozenset(value)
    cache[key] = values
    return values


class MatchAttribute:
    __slots__ = ("requests", "attribute", "list_types", "_stack")

    def __init__(self, requests: list[str], attribute: str, list_types: bool):
        self.requests = frozenset(requests)
        self.attribute = attribute
        self.list_types = list_types
        self._stack: list[tuple[str, frozenset[object]]] = []

    def applies(self, base_name: str, full_name: str) -> bool:
        return not self.requests or base_name in self.requests or full_name in self.requests

    def add(self, base_name: str, full_name: str, device: DeviceInfo) -> bool:
        if not self.applies(base_name, full_name):
            return True
        values = attribute_values(device, self.attribute, self.list_types)
        if values is None:
            return False
        if self._stack:
            kind, common = self._stack[-1]
            if kind != values[0]:
                return False
            common = common & values[1]
            if not common:
                return False
            self._stack.append((kind, common))
        else:
            self._stack.append(values)
        return True

    def remove(self, base_name: str, full_name: str, device: DeviceInfo) -> None:
        if self.applies(base_name, full_name):
            self._stack.pop()


class DistinctAttribute:
    """Upstream keeps one value per request name (the latest device of that request)."""

    __slots__ = ("requests", "attribute", "list_types", "_by_request")

    def __init__(self, requests: list[str], attribute: str, list_types: bool):
        self.requests = frozenset(requests)
        self.attribute = attribute
        self.list_types = list_types
        self._by_request: dict[str, tuple[str, frozenset[object]]] = {}

    def applies(self, base_name: str, full_name: str) -> bool:
        return not self.requests or base_name in self.requests or full_name in self.requests

    def add(self, base_name: str, full_name: str, device: DeviceInfo) -> bool:
        if not self.applies(base_name, full_name):
            return True
        values = attribute_values(device, self.attribute, self.list_types)
        if values is None:
            return False
        kind, elements = values
        for other_kind, other in self._by_request.values():
            if other_kind == kind and other & elements:
                return False
        self._by_request[base_name] = values
        return True

    def remove(self, base_name: str, full_name: str, device: DeviceInfo) -> None:
        if self.applies(base_name, full_name):
            self._by_request.pop(base_name, None)
