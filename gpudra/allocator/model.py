"""Precompiled, read-only views of ResourceSlices and their devices.

Everything the search asks about a device many times (its ID, attribute lookups for constraints,
capacities and counters as exact integers, taints) is computed once here.
"""

from __future__ import annotations

from typing import Any

from gpudra.api.quantity import Quantity, QuantityError

SCALAR_ATTRIBUTE_TYPES = ("int", "bool", "string", "version")
LIST_ATTRIBUTE_TYPES = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}


def quantity_nanos(value: Any) -> int | None:
    """Exact value ×1e9 of a Quantity given as str/int, or None when it does not parse."""
    if value is None:
        return None
    try:
        return Quantity.parse(value).nanos
    except (QuantityError, TypeError, ValueError):
        return None


def parse_attribute(raw: Any) -> tuple[str, Any] | None:
    """(type, value) of a DeviceAttribute; list types give (type, tuple). None when unusable."""
    if not isinstance(raw, dict):
        return None
    for kind in SCALAR_ATTRIBUTE_TYPES:
        if kind in raw and raw[kind] is not None:
            return kind, raw[kind]
    for kind, element in LIST_ATTRIBUTE_TYPES.items():
        if kind in raw and raw[kind] is not None:
            return "list:" + element, tuple(raw[kind])
    return None


class CapacityInfo:
    __slots__ = ("value", "default", "valid_values", "range_min", "range_max", "range_step", "has_policy")

    def __init__(self, raw: dict[str, Any]):
        self.value = quantity_nanos(raw.get("value")) or 0
        policy = raw.get("requestPolicy")
        self.has_policy = isinstance(policy, dict)
        policy = policy or {}
        self.default = quantity_nanos(policy.get("default"))
        values = policy.get("validValues")
        self.valid_values = [v for v in (quantity_nanos(x) for x in values) if v is not None] if values else None
        valid_range = policy.get("validRange")
        if isinstance(valid_range, dict):
            self.range_min = quantity_nanos(valid_range.get("min"))
            self.range_max = quantity_nanos(valid_range.get("max"))
            self.range_step = quantity_nanos(valid_range.get("step"))
        else:
            self.range_min = self.range_max = self.range_step = None


class DeviceInfo:
    """One device of one slice, with everything the search needs precomputed."""

    __slots__ = (
        "key", "driver", "pool", "name", "raw", "slice", "index",
        "attributes", "has_list_attributes", "capacity", "consumes_counters",
        "taints", "binding_conditions", "binding_failure_conditions", "binds_to_node",
        "allow_multiple", "node_name", "node_selector", "all_nodes",
    )

    def __init__(self, slice_info: "SliceInfo", raw: dict[str, Any], index: int):
        self.slice = slice_info
        self.raw = raw
        self.index = index
        self.driver = slice_info.driver
        self.pool = slice_info.pool_name
        self.name = str(raw.get("name") or "")
        self.key = (self.driver, self.pool, self.name)
        self.attributes: dict[str, tuple[str, Any] | None] = {}
        self.has_list_attributes = False
        for name, value in (raw.get("attributes") or {}).items():
            parsed = parse_attribute(value)
            self.attributes[name] = parsed
            if parsed is not None and parsed[0].startswith("list:"):
                self.has_list_attributes = True
        self.capacity = {
            name: CapacityInfo(value if isinstance(value, dict) else {})
            for name, value in (raw.get("capacity") or {}).items()
        }
        self.consumes_counters: list[tuple[str, dict[str, int]]] = []
        for entry in raw.get("consumesCounters") or []:
            counters = {
                name: quantity_nanos((value or {}).get("value")) or 0
                for name, value in ((entry or {}).get("counters") or {}).items()
            }
            self.consumes_counters.append((str((entry or {}).get("counterSet") or ""), counters))
        self.taints = list(raw.get("taints") or [])
        self.binding_conditions = list(raw.get("bindingConditions") or [])
        self.binding_failure_conditions = list(raw.get("bindingFailureConditions") or [])
        self.binds_to_node = bool(raw.get("bindsToNode"))
        self.allow_multiple = bool(raw.get("allowMultipleAllocations"))
        self.node_name = raw.get("nodeName") or None
        self.node_selector = raw.get("nodeSelector")
        self.all_nodes = bool(raw.get("allNodes"))

    def lookup_attribute(self, qualified: str) -> tuple[str, Any] | None:
        """matchAttribute/distinctAttribute lookup: the full name, or the bare id in the driver's domain."""
        if qualified in self.attributes:
            return self.attributes[qualified]
        domain, sep, ident = qualified.partition("/")
        if sep and domain == self.driver and ident in self.attributes:
            return self.attributes[ident]
        return None

    def __repr__(self) -> str:
        return "/".join(self.key)


class SliceInfo:
    __slots__ = (
        "raw", "name", "driver", "pool_name", "pool_id", "generation", "slice_count",
        "node_name", "node_selector", "all_nodes", "per_device_node_selection",
        "shared_counters", "devices", "has_binding_conditions", "order",
    )

    def __init__(self, raw: dict[str, Any], order: int):
        self.raw = raw
        self.order = order
        spec = raw.get("spec") or {}
        self.name = str((raw.get("metadata") or {}).get("name") or "")
        self.driver = str(spec.get("driver") or "")
        pool = spec.get("pool") or {}
        self.pool_name = str(pool.get("name") or "")
        self.pool_id = (self.driver, self.pool_name)
        self.generation = int(pool.get("generation") or 0)
        self.slice_count = int(pool.get("resourceSliceCount") or 0)
        self.node_name = spec.get("nodeName") or None
        self.node_selector = spec.get("nodeSelector")
        self.all_nodes = bool(spec.get("allNodes"))
        self.per_device_node_selection = bool(spec.get("perDeviceNodeSelection"))
        self.shared_counters: list[tuple[str, dict[str, int]]] = []
        for counter_set in spec.get("sharedCounters") or []:
            counters = {
                name: quantity_nanos((value or {}).get("value")) or 0
                for name, value in ((counter_set or {}).get("counters") or {}).items()
            }
            self.shared_counters.append((str((counter_set or {}).get("name") or ""), counters))
        self.devices = [DeviceInfo(self, device or {}, i) for i, device in enumerate(spec.get("devices") or [])]
        self.has_binding_conditions = any(d.binding_conditions for d in self.devices)

    @property
    def has_counters(self) -> bool:
        return bool(self.raw.get("spec", {}).get("sharedCounters"))
