"""Precompiled, read-only views of ResourceSlices and their devices.

Everything the search asks about a device many times (its ID, attribute lookups for constraints,
capacities and counters as exact integers, taints) is computed once here.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from gpudra.plain import as_dict, as_list, as_str
from gpudra.quantity import Quantity, QuantityError

# A cache key made of hashable parts (request shapes, selector tuples, fit answers): only hashed and compared.
CacheKey = tuple[Hashable, ...]
# A device's identity: (driver, pool, device name), as upstream's DeviceID.
DeviceKey = tuple[str, str, str]

SCALAR_ATTRIBUTE_TYPES = ("int", "bool", "string", "version")
_SCALAR_PYTHON = {"int": int, "bool": bool, "string": str, "version": str}


# Tolerant accessors (as_dict, as_list, as_str: gpudra.plain; as_int here): malformed objects (wrong JSON
# types) must not crash the allocator; a field of the wrong type reads as absent, as the search then treats it.
def as_int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 10)
        except ValueError:
            return default
    return default


def _typed(kind: str, value: Any) -> bool:
    expected = _SCALAR_PYTHON[kind]
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)
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
            return (kind, raw[kind]) if _typed(kind, raw[kind]) else None
    for kind, element in LIST_ATTRIBUTE_TYPES.items():
        if kind in raw and raw[kind] is not None:
            values = raw[kind]
            if not isinstance(values, list) or not all(_typed(element, v) for v in values):
                return None
            return "list:" + element, tuple(values)
    return None


class CapacityInfo:
    """One device capacity with its request policy, as Quantities (for upstream's result spelling) and as
    exact nano-unit integers (for the search's arithmetic)."""

    __slots__ = ("value_q", "default_q", "valid_values_q", "range_min_q", "range_max_q", "range_step_q",
                 "value", "default", "valid_values", "range_min", "range_max", "range_step", "has_policy")

    def __init__(self, raw: dict[str, Any]):
        self.value_q = _quantity(raw.get("value")) or Quantity(0)
        policy = raw.get("requestPolicy")
        self.has_policy = isinstance(policy, dict)
        policy = as_dict(policy)
        self.default_q = _quantity(policy.get("default"))
        values = as_list(policy.get("validValues"))
        self.valid_values_q = [v for v in (_quantity(x) for x in values) if v is not None] if values else None
        valid_range = as_dict(policy.get("validRange")) if isinstance(policy.get("validRange"), dict) else None
        self.range_min_q = _quantity(valid_range.get("min")) if valid_range is not None else None
        self.range_max_q = _quantity(valid_range.get("max")) if valid_range is not None else None
        self.range_step_q = _quantity(valid_range.get("step")) if valid_range is not None else None
        self.value = self.value_q.nanos
        self.default = _nanos(self.default_q)
        self.valid_values = [v.nanos for v in self.valid_values_q] if self.valid_values_q is not None else None
        self.range_min = _nanos(self.range_min_q)
        self.range_max = _nanos(self.range_max_q)
        self.range_step = _nanos(self.range_step_q)


_PLAIN_CAPACITIES: dict[Any, CapacityInfo] = {}


def _capacity_info(raw: Any) -> CapacityInfo:
    """CapacityInfo of a capacity; one shared object for every plain `{value: V}` of the same V (a fleet's
    devices repeat a few sizes; CapacityInfo is read-only)."""
    if type(raw) is dict and len(raw) == 1 and type(raw.get("value")) is str:
        value = raw["value"]
        found = _PLAIN_CAPACITIES.get(value)
        if found is None:
            if len(_PLAIN_CAPACITIES) > 4096:
                _PLAIN_CAPACITIES.clear()
            found = _PLAIN_CAPACITIES[value] = CapacityInfo(raw)
        return found
    return CapacityInfo(as_dict(raw))


def _quantity(value: Any) -> Quantity | None:
    if value is None:
        return None
    try:
        return Quantity.parse(value)
    except (QuantityError, TypeError, ValueError):
        return None


def _nanos(quantity: Quantity | None) -> int | None:
    return None if quantity is None else quantity.nanos


class DeviceInfo:
    """One device of one slice, with everything the search needs precomputed."""

    __slots__ = (
        "key", "driver", "pool", "name", "raw", "slice", "index",
        "_attributes", "capacity", "consumes_counters",
        "taints", "binding_conditions", "binding_failure_conditions", "binds_to_node",
        "allow_multiple", "node_name", "node_selector", "all_nodes", "constraint_values",
    )

    def __init__(self, slice_info: "SliceInfo", raw: dict[str, Any], index: int):
        self.slice = slice_info
        self.raw = raw
        self.index = index
        self.driver = slice_info.driver
        self.pool = slice_info.pool_name
        self.name = as_str(raw.get("name"))
        self.key = (self.driver, self.pool, self.name)
        self._attributes: dict[str, tuple[str, Any] | None] | None = None  # lookup_attribute's answers
        self.constraint_values: dict[tuple[str, bool], tuple[str, frozenset[object]] | None] = {}  # constraints.attribute_values' answers
        self.capacity = {name: _capacity_info(value) for name, value in as_dict(raw.get("capacity")).items()}
        self.consumes_counters: list[tuple[str, dict[str, int]]] = []
        for entry in as_list(raw.get("consumesCounters")):
            entry = as_dict(entry)
            counters = {
                name: quantity_nanos(as_dict(value).get("value")) or 0
                for name, value in as_dict(entry.get("counters")).items()
            }
            self.consumes_counters.append((as_str(entry.get("counterSet")), counters))
        self.taints = [t for t in as_list(raw.get("taints")) if isinstance(t, dict)]
        self.binding_conditions = as_list(raw.get("bindingConditions"))
        self.binding_failure_conditions = as_list(raw.get("bindingFailureConditions"))
        self.binds_to_node = raw.get("bindsToNode") is True
        self.allow_multiple = raw.get("allowMultipleAllocations") is True
        self.node_name = as_str(raw.get("nodeName")) or None
        self.node_selector = raw.get("nodeSelector") if isinstance(raw.get("nodeSelector"), dict) else None
        self.all_nodes = bool(raw.get("allNodes"))

    def lookup_attribute(self, qualified: str) -> tuple[str, Any] | None:
        """matchAttribute/distinctAttribute lookup: the full name, or the bare id in the driver's domain; parsed
        (parse_attribute) on first use, one name at a time: constraints read one or two attributes of a device."""
        looked_up = self._attributes
        if looked_up is None:
            looked_up = self._attributes = {}
        elif qualified in looked_up:
            return looked_up[qualified]
        raw = self.raw.get("attributes")
        raw = raw if isinstance(raw, dict) else {}
        found = None
        if qualified in raw:
            found = parse_attribute(raw[qualified])
        else:
            domain, sep, ident = qualified.partition("/")
            if sep and domain == self.driver and ident in raw:
                found = parse_attribute(raw[ident])
        looked_up[qualified] = found
        return found

    def __repr__(self) -> str:
        return "/".join(self.key)


class SliceInfo:
    __slots__ = (
        "raw", "name", "driver", "pool_name", "pool_id", "generation", "slice_count",
        "node_name", "node_selector", "all_nodes", "per_device_node_selection", "per_device_field_set",
        "shared_counters", "_raw_devices", "_devices", "order", "counter_scope", "stamp",
    )

    def __init__(self, raw: dict[str, Any], order: int, scoped_counters: bool = False):
        self.raw = raw
        self.order = order
        self.stamp = object_stamp(raw)
        spec = as_dict(raw.get("spec"))
        self.name = as_str(as_dict(raw.get("metadata")).get("name"))
        self.driver = as_str(spec.get("driver"))
        pool = as_dict(spec.get("pool"))
        self.pool_name = as_str(pool.get("name"))
        self.pool_id = (self.driver, self.pool_name)
        self.generation = as_int(pool.get("generation"))
        self.slice_count = as_int(pool.get("resourceSliceCount"))
        self.node_name = as_str(spec.get("nodeName")) or None
        self.node_selector = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"), dict) else None
        self.all_nodes = spec.get("allNodes") is True
        self.per_device_node_selection = spec.get("perDeviceNodeSelection") is True
        # Upstream skips a slice whose perDeviceNodeSelection is set at all (even false) while
        # DRAPartitionableDevices is off: it tests the pointer, not the value.
        self.per_device_field_set = spec.get("perDeviceNodeSelection") is not None
        self.shared_counters: list[tuple[str, dict[str, int]]] = []
        for counter_set in as_list(spec.get("sharedCounters")):
            counter_set = as_dict(counter_set)
            counters = {
                name: quantity_nanos(as_dict(value).get("value")) or 0
                for name, value in as_dict(counter_set.get("counters")).items()
            }
            self.shared_counters.append((as_str(counter_set.get("name")), counters))
        # Up to Kubernetes 1.34 a slice's counter sets serve only its own devices (the allocator counts each
        # slice on its own): the names are then qualified by the slice ("<slice>/<set>"; "/" cannot occur in
        # either name), so equal names in two slices stay apart and a device finds only its own slice's sets.
        self.counter_scope = f"{self.name}/" if scoped_counters else ""
        if self.counter_scope:
            self.shared_counters = [(self.counter_scope + name, counters) for name, counters in self.shared_counters]
        self._raw_devices = as_list(spec.get("devices"))
        self._devices: list[DeviceInfo] | None = None

    @property
    def devices(self) -> list[DeviceInfo]:
        """Parsed on first use: most slices of a big cluster are never looked at for one node."""
        if self._devices is None:
            self._devices = [DeviceInfo(self, as_dict(device), i) for i, device in enumerate(self._raw_devices)]
            if self.counter_scope:
                for device in self._devices:
                    device.consumes_counters = [(self.counter_scope + name, counters)
                                                for name, counters in device.consumes_counters]
        return self._devices

    def edited(self) -> bool:
        """Whether the slice object was edited in place since it was read (a new generation or resourceVersion)."""
        return object_stamp(self.raw) != self.stamp

    @property
    def has_devices(self) -> bool:
        return bool(self._raw_devices)

    @property
    def has_binding_conditions(self) -> bool:
        """Some device has a bindingConditions list (even an empty one: upstream tests for nil)."""
        return any(as_dict(d).get("bindingConditions") is not None for d in self._raw_devices)



def object_stamp(raw: Any) -> tuple[Any, Any, Any]:
    """What changes whenever an API object changes: metadata.generation and metadata.resourceVersion (the API
    server bumps them), and for a ResourceSlice spec.pool.generation (a driver bumps it with every change to
    its pool). Caches keyed by an object's identity compare this to notice an object edited in place."""
    if type(raw) is not dict:
        return (None, None, None)
    metadata = raw.get("metadata")
    spec = raw.get("spec")
    pool = spec.get("pool") if type(spec) is dict else None
    if type(metadata) is not dict:
        return (None, None, pool.get("generation") if type(pool) is dict else None)
    return (metadata.get("generation"), metadata.get("resourceVersion"),
            pool.get("generation") if type(pool) is dict else None)
