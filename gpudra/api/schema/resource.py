"""resource.k8s.io/v1 (Kubernetes 1.36): limits, shared pieces, DeviceClass and ResourceSlice.

ResourceClaim and ResourceClaimTemplate are in `claim.py`."""

from __future__ import annotations

import functools

from typing import Any

from gpudra.quantity import Quantity, QuantityError
from gpudra.resourcelimits import (ATTRIBUTE_VALUES_PER_DEVICE, ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
                                   DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH, attribute_values, uses_list_attributes)
from gpudra.api.schema import hints, names
from gpudra.api.schema.cel_check import check_selector_expression
from gpudra.api.schema.meta import NODE_SELECTOR
from gpudra.api.schema.types import (
    INT64_MAX, INT64_MIN, AnyValue, Bool, Context, F, Int, ListOf, MapOf, QuantityType, Str, Struct, Type, child,
    index, key, type_name, _key_problems, as_dict, as_list,
)

from gpudra.device_config import ALLOCATION_CONFIGS_MAX as ALLOCATION_CONFIGS_MAX  # noqa: E402
from gpudra.device_config import OPAQUE_PARAMETERS_MAX as OPAQUE_PARAMETERS_MAX  # noqa: E402

# Limits (resource/v1/types.go, Kubernetes 1.36); the two on opaque configs are gpudra.device_config's
REQUESTS_MAX = 32
SUBREQUESTS_MAX = 8
SELECTORS_MAX = 32
CONSTRAINTS_MAX = 32
CONFIGS_MAX = 32
RESULTS_MAX = 32
TOLERATIONS_MAX = 16
TAINTS_MAX = 16
DEVICES_MAX = 128
DEVICES_MAX_WITH_TAINTS_OR_COUNTERS = 64
COUNTER_SETS_MAX = 8
COUNTERS_PER_SET_MAX = 32
CONSUMES_COUNTERS_MAX = 2
BINDING_CONDITIONS_MAX = 4
VALID_VALUES_MAX = 10
RESERVED_FOR_MAX = 256
DEVICE_CONDITIONS_MAX = 8
CEL_EXPRESSION_MAX = 10 * 1024
DRIVER_NAME_MAX = 63


def _semver(value: str) -> list[str]:
    return list(_semver_problems(value))


@functools.lru_cache(maxsize=4096)  # a cluster's devices repeat a handful of driver and CUDA versions
def _semver_problems(value: str) -> tuple[str, ...]:
    from gpudra.semver import SemverError, parse_semver

    try:
        parse_semver(value)
    except SemverError as exc:
        return (f"{value!r} is not a semantic version (semver 2.0.0, e.g. 1.2.3): {exc}",)
    return ()


DRIVER = Str(validators=(names.dns_subdomain_63,), allow_empty=False)
CLASS_NAME = Str(validators=(names.device_class_name,), allow_empty=False)


class SelectorExpression(Str):
    def check(self, value: Any, path: str, ctx: Context) -> None:
        super().check(value, path, ctx)
        if isinstance(value, str) and value and len(value.encode()) <= CEL_EXPRESSION_MAX:
            check_selector_expression(value, path, ctx)


DEVICE_SELECTOR = Struct(
    "DeviceSelector",
    {"cel": F(Struct("CELDeviceSelector", {
        "expression": F(SelectorExpression(max_len=CEL_EXPRESSION_MAX, allow_empty=False), required=True),
    }))},
    one_of=((("cel",), True),),
)

OPAQUE = Struct(
    "OpaqueDeviceConfiguration",
    {
        "driver": F(DRIVER, required=True),
        "parameters": F(AnyValue(max_bytes=OPAQUE_PARAMETERS_MAX, must_be_object=True), required=True),
    },
)

# ----- DeviceClass -----------------------------------------------------------------------------------
DEVICE_CLASS_SPEC = Struct(
    "DeviceClassSpec",
    {
        "selectors": F(ListOf(DEVICE_SELECTOR, max_items=SELECTORS_MAX)),
        "config": F(ListOf(Struct("DeviceClassConfiguration", {"opaque": F(OPAQUE)}, one_of=((("opaque",), True),)),
                           max_items=CONFIGS_MAX)),
        "extendedResourceName": F(Str(validators=(names.extended_resource_name,))),
    },
)

# ----- ResourceSlice ---------------------------------------------------------------------------------
ATTRIBUTE_KINDS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")


def _string_attribute(value: str) -> list[str]:
    # Go len(): UTF-8 bytes.
    size, unit = (len(value), "characters") if value.isascii() else (len(value.encode()), "bytes (UTF-8)")
    return [] if size <= DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH else [f"must have at most {DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH} {unit} (has {size})"]


ATTRIBUTE_STRUCT = Struct(
    "DeviceAttribute",
    {
        "int": F(Int()),
        "bool": F(Bool()),
        "string": F(Str(validators=(_string_attribute,))),
        "version": F(Str(validators=(_string_attribute, _semver))),
        "ints": F(ListOf(Int(), min_items=1)),
        "bools": F(ListOf(Bool(), min_items=1)),
        "strings": F(ListOf(Str(validators=(_string_attribute,)), min_items=1)),
        "versions": F(ListOf(Str(validators=(_string_attribute, _semver)), min_items=1)),
    },
    one_of=((ATTRIBUTE_KINDS, True),),
    unknown_hints=(hints.attribute_quantity,),
)


_SCALAR_KINDS = frozenset({"int", "bool", "string", "version"})


def _attribute_quick_valid(value: Any) -> bool:
    """True only of a one-field scalar attribute on which AttributeType.check reports nothing (the checks of
    the field's own type in ATTRIBUTE_STRUCT and the amount-as-string hint); anything else takes the full walk.
    Inlined tests: this runs for each of the hundreds of thousands of attributes of a big cluster."""
    if type(value) is not dict or len(value) != 1:
        return False
    ((kind, item),) = value.items()
    if kind == "string":
        return (type(item) is str and len(item) <= DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH and item.isascii()
                and not hints.might_be_quantity(item))
    if kind == "int":
        return type(item) is int and INT64_MIN <= item <= INT64_MAX
    if kind == "bool":
        return type(item) is bool
    if kind == "version":
        return (type(item) is str and len(item) <= DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH and item.isascii()
                and not _semver_problems(item))
    return False


class AttributeType(Type):
    """A DeviceAttribute; bare scalars (`model: H100`) get the typed form suggested."""

    quick_valid = staticmethod(_attribute_quick_valid)

    def check(self, value: Any, path: str, ctx: Context) -> None:
        if type(value) is dict and len(value) == 1:
            # The common case, `{string: "…"}`: the struct walk would only check that one field, so check it
            # with the field's own type (16,000 devices of a dozen attributes each are validated in seconds).
            ((kind, item),) = value.items()
            spec = ATTRIBUTE_STRUCT.fields.get(kind) if kind in _SCALAR_KINDS else None
            if spec is not None and item is not None:
                spec.type.check(item, child(path, kind), ctx)
                if kind == "string":
                    hints.quantity_string_attribute(path.rsplit("[", 1)[-1].rstrip("]"), value, path, ctx)
                return
        if isinstance(value, dict):
            present = [k for k in ATTRIBUTE_KINDS if value.get(k) is not None]
            if not present and not any(k not in ATTRIBUTE_KINDS for k in value):
                ctx.error(path, "exactly one of " + ", ".join(ATTRIBUTE_KINDS) + " must be set")
                return
            ATTRIBUTE_STRUCT.check(value, path, ctx)
            name = path.rsplit("[", 1)[-1].rstrip("]")
            hints.quantity_string_attribute(name, value, path, ctx)
            return
        name = path.rsplit("[", 1)[-1].rstrip("]")
        if hints.looks_like_quantity(value):
            ctx.error(path, f"an attribute must be an object such as {{string: ...}}; {value!r} is an amount, "
                      f"which belongs in capacity", hints.fragment({"capacity": {name: {"value": value}}}))
            return
        typed = {bool: "bool", int: "int", str: "string"}.get(type(value))
        if typed is None:
            ctx.error(path, f"must be an object with one of {', '.join(ATTRIBUTE_KINDS)}, not {type_name(value)}")
            return
        ctx.error(path, f"an attribute must say its type; write {{{typed}: {value!r}}}",
                  hints.fragment({name: {typed: value}}))


COUNTER = Struct("Counter", {"value": F(QuantityType(), required=True)})
COUNTERS = MapOf(COUNTER, key_check=names.dns_label, max_items=COUNTERS_PER_SET_MAX)


def _policy_check(value: dict[str, Any], path: str, ctx: Context) -> None:
    default = _quantity(value.get("default"))
    valid_values = value.get("validValues")
    if isinstance(valid_values, list) and valid_values:
        parsed_or_none = [_quantity(v) for v in valid_values]
        parsed = [q for q in parsed_or_none if q is not None]
        if len(parsed) == len(parsed_or_none):  # all parse
            if any(a >= b for a, b in zip(parsed, parsed[1:])):
                ctx.error(child(path, "validValues"), "must be sorted in ascending order without duplicates")
            if default is not None and default not in parsed:
                ctx.error(child(path, "validValues"), f"must include the default value {value.get('default')!r}")
    valid_range = value.get("validRange")
    if isinstance(valid_range, dict):
        low, high, step = (_quantity(valid_range.get(n)) for n in ("min", "max", "step"))
        range_path = child(path, "validRange")
        if low is not None and high is not None and high < low:
            ctx.error(child(range_path, "max"), "must be greater than or equal to min")
        if step is not None and step.sign() <= 0:
            ctx.error(child(range_path, "step"), "must be greater than 0")
        if default is not None and low is not None:
            if default < low or (high is not None and default > high):
                ctx.error(child(path, "default"), "must be within validRange")
            elif step is not None and step.sign() > 0 and (default.nanos - low.nanos) % step.nanos:
                ctx.error(child(path, "default"), "must be min plus a multiple of step")
    if value.get("default") is None and (valid_values or valid_range):
        ctx.error(child(path, "default"), "required when validValues or validRange is set")


def _quantity(value: Any) -> Quantity | None:
    try:
        return Quantity.parse(value) if value is not None else None
    except QuantityError:
        return None


REQUEST_POLICY = Struct(
    "CapacityRequestPolicy",
    {
        "default": F(QuantityType(non_negative=True)),
        "validValues": F(ListOf(QuantityType(non_negative=True), max_items=VALID_VALUES_MAX)),
        "validRange": F(Struct("CapacityRequestPolicyRange", {
            "min": F(QuantityType(non_negative=True), required=True),
            "max": F(QuantityType(non_negative=True)),
            "step": F(QuantityType()),
        })),
    },
    one_of=((("validValues", "validRange"), False),),
    checks=(_policy_check,),
)

CAPACITY_STRUCT = Struct("DeviceCapacity", {"value": F(QuantityType(non_negative=True), required=True),
                                            "requestPolicy": F(REQUEST_POLICY)})


class CapacityType(Type):
    def check(self, value: Any, path: str, ctx: Context) -> None:
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            name = path.rsplit("[", 1)[-1].rstrip("]")
            ctx.error(path, f"a capacity is an object: write {{value: {value!r}}} (bare quantities are the "
                      "v1alpha3 layout)", hints.fragment({name: {"value": value}}))
            return
        CAPACITY_STRUCT.check(value, path, ctx)
        if isinstance(value, dict) and isinstance(value.get("requestPolicy"), dict):
            _policy_within_value(value, path, ctx)


def _policy_within_value(capacity: dict[str, Any], path: str, ctx: Context) -> None:
    """Amounts above the capacity value can never be granted: worth a warning, though the API accepts them."""
    total = _quantity(capacity.get("value"))
    policy = capacity["requestPolicy"]
    if total is None:
        return
    policy_path = child(path, "requestPolicy")
    default = _quantity(policy.get("default"))
    if default is not None and default > total:
        ctx.warning(child(policy_path, "default"),
                    f"exceeds the capacity value {capacity.get('value')}; no request can get it")
    for position, item in enumerate(as_list(policy.get("validValues"))):
        amount = _quantity(item)
        if amount is not None and amount > total:
            ctx.warning(index(child(policy_path, "validValues"), position),
                      f"exceeds the capacity value {capacity.get('value')}; no request can get it")
    valid_range = policy.get("validRange")
    if isinstance(valid_range, dict):
        low = _quantity(valid_range.get("min"))
        if low is not None and low > total:
            ctx.warning(child(child(policy_path, "validRange"), "min"),
                      f"exceeds the capacity value {capacity.get('value')}; no request can get it")


DEVICE_TAINT = Struct(
    "DeviceTaint",
    {
        "key": F(Str(validators=(names.qualified_name,)), required=True),
        "value": F(Str(validators=(names.label_value,))),
        "effect": F(Str(enum=("NoSchedule", "NoExecute", "None")), required=True),
        "timeAdded": F(Str()),
    },
)

CONDITION_NAMES = ListOf(Str(validators=(names.qualified_name,)), max_items=BINDING_CONDITIONS_MAX, unique_items=True)


def _device_check(device: dict[str, Any], path: str, ctx: Context) -> None:
    attributes = as_dict(device.get("attributes"))
    capacity = as_dict(device.get("capacity"))
    if len(attributes) + len(capacity) > ATTRIBUTES_AND_CAPACITIES_PER_DEVICE:
        ctx.error(path, f"attributes and capacity together must have at most {ATTRIBUTES_AND_CAPACITIES_PER_DEVICE} "
                  f"entries (has {len(attributes) + len(capacity)})")
    values = attribute_values(attributes)
    if values > ATTRIBUTE_VALUES_PER_DEVICE:  # only list-type attributes can get there (32 entries at most)
        ctx.error(child(path, "attributes"), f"must hold at most {ATTRIBUTE_VALUES_PER_DEVICE} values in all "
                  f"(a scalar attribute counts one, a list-type attribute its entries; has {values})")
    if device.get("allowMultipleAllocations") is not True:
        for name, item in capacity.items():
            if isinstance(item, dict) and item.get("requestPolicy") is not None:
                ctx.error(child(key(child(path, "capacity"), name), "requestPolicy"),
                          "allowMultipleAllocations must be true to use a request policy")
    conditions, failures = device.get("bindingConditions"), device.get("bindingFailureConditions")
    if conditions and not failures:
        ctx.error(child(path, "bindingFailureConditions"), "required when bindingConditions is set")
    if failures and not conditions:
        ctx.error(child(path, "bindingConditions"), "required when bindingFailureConditions is set")
    driver = ctx.facts.get("driver")
    if isinstance(driver, str):
        for name in attributes:
            if isinstance(name, str) and name.startswith(driver + "/") and name[len(driver) + 1:] in attributes:
                ctx.warning(key(child(path, "attributes"), name),
                          f"duplicates attribute {name[len(driver) + 1:]!r}: names without a domain belong to the "
                          f"driver's domain {driver!r}")


@functools.lru_cache(maxsize=4096)  # a fleet's devices repeat a few names (gpu-0…gpu-7) and sizes
def _plain_device_name(name: str) -> bool:
    return bool(name) and not names.dns_label(name)


@functools.lru_cache(maxsize=4096)
def _plain_capacity_value(value: str) -> bool:
    quantity = _quantity(value)
    return quantity is not None and quantity.sign() >= 0


_PLAIN_DEVICE_FIELDS = frozenset({"name", "attributes", "capacity"})
# Attribute and capacity names seen to pass dra_qualified_name, and those of them with a '/': thousands of devices
# repeat a dozen names, so a device's names are checked with one set operation.
_PLAIN_NAMES: set[str] = set()
_SLASHED_NAMES: set[str] = set()


def _plain_names(names_of: dict[str, Any]) -> bool:
    """Whether every name passes dra_qualified_name; afterwards they are all in _PLAIN_NAMES, and those with a '/'
    in _SLASHED_NAMES."""
    if _PLAIN_NAMES.issuperset(names_of):
        return True
    for name in names_of:
        if type(name) is not str or _key_problems(names.dra_qualified_name, name):
            return False
    if len(_PLAIN_NAMES) > 4096:
        _PLAIN_NAMES.clear()
        _SLASHED_NAMES.clear()
    _PLAIN_NAMES.update(names_of)
    _SLASHED_NAMES.update(name for name in names_of if "/" in name)
    return True


def _device_quick_valid(device: Any) -> bool:
    """True only of a device on which the DEVICE walk reports nothing: a name, attributes that each take
    AttributeType's shortcut, capacities that are plain non-negative `{value: …}` quantities, nothing else (so no
    request policy, binding conditions or node selection), within the size limit, and no `domain/x` attribute whose
    bare `x` is there too (_device_check's warning when the domain is the driver's). Anything else takes the walk."""
    if type(device) is not dict or not _PLAIN_DEVICE_FIELDS.issuperset(device):
        return False
    name = device.get("name")
    attributes, capacity = device.get("attributes", {}), device.get("capacity", {})
    if type(name) is not str or not _plain_device_name(name) or type(attributes) is not dict or (
        type(capacity) is not dict or len(attributes) + len(capacity) > ATTRIBUTES_AND_CAPACITIES_PER_DEVICE
    ):
        return False
    if not all(map(_attribute_quick_valid, attributes.values())) or not _plain_names(attributes):
        return False
    for attribute_name in _SLASHED_NAMES.intersection(attributes):
        at = attribute_name.find("/")
        while at != -1:  # whatever the driver's name, _device_check might find a duplicate
            if attribute_name[at + 1:] in attributes:
                return False
            at = attribute_name.find("/", at + 1)
    for capacity_name, entry in capacity.items():
        if type(capacity_name) is not str or type(entry) is not dict or len(entry) != 1 or _key_problems(
            names.dra_qualified_name, capacity_name
        ):
            return False
        value = entry.get("value")
        if type(value) is not str or not _plain_capacity_value(value):
            return False
    return True


DEVICE = Struct(
    "Device",
    {
        "name": F(Str(validators=(names.dns_label,), allow_empty=False), required=True),
        "attributes": F(MapOf(AttributeType(), key_check=names.dra_qualified_name)),
        "capacity": F(MapOf(CapacityType(), key_check=names.dra_qualified_name)),
        "consumesCounters": F(ListOf(Struct("DeviceCounterConsumption", {
            "counterSet": F(Str(validators=(names.dns_label,), allow_empty=False), required=True),
            "counters": F(COUNTERS, required=True),
        }), max_items=CONSUMES_COUNTERS_MAX, unique_by="counterSet")),
        "nodeName": F(Str(validators=(names.dns_subdomain,))),
        "nodeSelector": F(NODE_SELECTOR),
        "allNodes": F(Bool()),
        "taints": F(ListOf(DEVICE_TAINT, max_items=TAINTS_MAX)),
        "bindsToNode": F(Bool()),
        "bindingConditions": F(CONDITION_NAMES),
        "bindingFailureConditions": F(CONDITION_NAMES),
        "allowMultipleAllocations": F(Bool()),
    },
    checks=(_device_check,),
    unknown_hints=(hints.device_basic,),
)
DEVICE.quick_valid = _device_quick_valid


def _slice_check(spec: dict[str, Any], path: str, ctx: Context) -> None:
    devices = as_list(spec.get("devices"))
    dicts = [d for d in devices if isinstance(d, dict)]
    uses_advanced = any(d.get("taints") or d.get("consumesCounters") or uses_list_attributes(as_dict(d.get("attributes")))
                        for d in dicts)
    if uses_advanced and len(devices) > DEVICES_MAX_WITH_TAINTS_OR_COUNTERS:
        ctx.error(child(path, "devices"), f"must have at most {DEVICES_MAX_WITH_TAINTS_OR_COUNTERS} devices when "
                  f"any device has taints, consumesCounters or list-type attributes (has {len(devices)})")
    _counter_layout_check(spec, dicts, path, ctx)
    per_device = spec.get("perDeviceNodeSelection") is True
    for position, device in enumerate(dicts):
        device_path = index(child(path, "devices"), position)
        chosen = [n for n in ("nodeName", "nodeSelector", "allNodes") if device.get(n) not in (None, False, "")]
        if per_device and len(chosen) != 1:
            ctx.error(device_path, "with perDeviceNodeSelection, exactly one of nodeName, nodeSelector, allNodes "
                      f"must be set on each device (found {len(chosen)})")
        if not per_device:
            for name in chosen:
                ctx.error(child(device_path, name), "only allowed when spec.perDeviceNodeSelection is true")
        if isinstance(device.get("nodeSelector"), dict):
            _one_term(device["nodeSelector"], child(device_path, "nodeSelector"), ctx)
    if isinstance(spec.get("nodeSelector"), dict):
        _one_term(spec["nodeSelector"], child(path, "nodeSelector"), ctx)
    if spec.get("nodeName") == "":
        ctx.error(child(path, "nodeName"), "must not be empty")


def _counter_layout_check(spec: dict[str, Any], devices: list[dict[str, Any]], path: str, ctx: Context) -> None:
    """Where counter sets may live differs by release (gpudra.versions.partitionable_layout): from 1.35 a slice
    holds devices or sharedCounters, never both (kubernetes/kubernetes#134189); up to 1.34 a device consumes
    only counter sets of its own slice, so they must be there (1.34's validateDeviceCounterConsumption)."""
    from gpudra.versions import SPLIT_SLICES, partitionable_layout

    release = ctx.facts.get("release")
    counter_sets = as_list(spec.get("sharedCounters"))
    if partitionable_layout(release) == SPLIT_SLICES:
        if devices and counter_sets:
            ctx.error(path, "only one of devices and sharedCounters may be set: counter sets go in their own "
                      "ResourceSlice of the same pool (from Kubernetes 1.35; 1.34 wants them together)")
        return
    known = {c.get("name"): c.get("counters") for c in counter_sets if isinstance(c, dict)}
    for position, device in enumerate(devices):
        for entry, consumption in enumerate(as_list(device.get("consumesCounters"))):
            if not isinstance(consumption, dict) or not isinstance(consumption.get("counterSet"), str):
                continue
            entry_path = index(child(index(child(path, "devices"), position), "consumesCounters"), entry)
            name = consumption["counterSet"]
            if name not in known:
                ctx.error(child(entry_path, "counterSet"), f"must reference a counter set in this ResourceSlice's sharedCounters: Kubernetes "
                          f"{release} keeps counter sets with the devices that consume them "
                          f"(counter set {name!r} is not here; the split layout is 1.35's)")
                continue
            counters = as_dict(known[name])
            for counter in as_dict(consumption.get("counters")):
                if counter not in counters:
                    ctx.error(child(entry_path, "counters"), f"counter {counter!r} is not in "
                              f"counter set {name!r} of this ResourceSlice")


def _one_term(selector: dict[str, Any], path: str, ctx: Context) -> None:
    terms = selector.get("nodeSelectorTerms")
    if isinstance(terms, list) and len(terms) != 1:
        ctx.error(child(path, "nodeSelectorTerms"), "must have exactly one node selector term")


RESOURCE_SLICE_SPEC = Struct(
    "ResourceSliceSpec",
    {
        "driver": F(DRIVER, required=True),
        "pool": F(Struct("ResourcePool", {
            "name": F(Str(validators=(names.pool_name,)), required=True),
            "generation": F(Int(minimum=0)),
            "resourceSliceCount": F(Int(minimum=1), required=True),
        }), required=True),
        "nodeName": F(Str(validators=(names.dns_subdomain,))),
        "nodeSelector": F(NODE_SELECTOR),
        "allNodes": F(Bool()),
        "perDeviceNodeSelection": F(Bool()),
        "devices": F(ListOf(DEVICE, max_items=DEVICES_MAX, unique_by="name")),
        "sharedCounters": F(ListOf(Struct("CounterSet", {
            "name": F(Str(validators=(names.dns_label,), allow_empty=False), required=True),
            "counters": F(COUNTERS, required=True),
        }), max_items=COUNTER_SETS_MAX, unique_by="name")),
    },
    one_of=((("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection"), True),),
    false_is_unset=True,
    checks=(_slice_check,),
)
