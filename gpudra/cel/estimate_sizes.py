"""Saturating cost/size ranges and the DRA environment's declared sizes, as cel-go's estimator sees them.

- `Range` and its arithmetic: cel-go v0.26.0 checker/cost.go (SizeEstimate/CostEstimate: Add, Multiply,
  MultiplyByCostFactor, Union), unsigned 64-bit and saturating at 2^64-1, a cost factor rounded up.
- `dra_size(path)`: k8s.io/dynamic-resource-allocation v0.36.2 cel/compile.go `sizeEstimator.EstimateSize`: the
  maximum size of what a field path from `device` reaches, from the declared types of `newCompiler`
  (driver and domain names 63, identifiers 32, at most 32 attributes/capacities per map, attribute values 64 --
  a string's length or, with DRAListTypeAttributes, a list's entries, whichever is larger -- and quantities 0).
- the type kinds of cel-go's common/types (from the checker's type names, gpudra.cel.checks.type_name).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

MAX_U64 = (1 << 64) - 1
_TWO_TO_64 = math.ldexp(1.0, 64)

# cel-go v0.26.0 common/cost.go
SELECT_AND_IDENT_COST = 1
LIST_CREATE_BASE_COST = 10
MAP_CREATE_BASE_COST = 30
STRUCT_CREATE_BASE_COST = 40
STRING_TRAVERSAL_COST_FACTOR = 0.1
REGEX_STRING_LENGTH_COST_FACTOR = 0.25

# k8s.io/api resource/v1 limits the DRA environment declares (values checked against cel-go's estimates of
# tests/data/conformance/cel: `includes` costs 48 per list, `in` on an attribute 64)
from gpudra.resourcelimits import (ATTRIBUTE_VALUES_PER_DEVICE, ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,  # noqa: E402
                                   DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH, DEVICE_MAX_DOMAIN_LENGTH, DEVICE_MAX_ID_LENGTH,
                                   DRIVER_NAME_MAX_LENGTH)
# k8s.io/apiserver v0.36.2 pkg/cel/limits.go
MAX_FORMAT_SIZE = 64
MAX_NAME_FORMAT_REGEX_SIZE = 128


def add_u64(x: int, y: int) -> int:
    return min(MAX_U64, x + y)


def multiply_u64(x: int, y: int) -> int:
    return min(MAX_U64, x * y)


def by_cost_factor(x: int, factor: float) -> int:
    """cel-go multiplyByCostFactor: float64 arithmetic, rounded up, saturating."""
    value = float(x)
    if value > 0 and factor > 0 and value > float(MAX_U64) / factor:
        return MAX_U64
    ceiling = math.ceil(value * factor)
    return MAX_U64 if ceiling >= _TWO_TO_64 else int(ceiling)


class Range(NamedTuple):
    """A SizeEstimate or CostEstimate: [lo, hi]."""

    lo: int
    hi: int

    def add(self, other: "Range") -> "Range":
        return Range(add_u64(self.lo, other.lo), add_u64(self.hi, other.hi))

    def multiply(self, other: "Range") -> "Range":
        return Range(multiply_u64(self.lo, other.lo), multiply_u64(self.hi, other.hi))

    def factor(self, factor: float) -> "Range":
        return Range(by_cost_factor(self.lo, factor), by_cost_factor(self.hi, factor))

    def union(self, other: "Range") -> "Range":
        return Range(min(self.lo, other.lo), max(self.hi, other.hi))


def fixed(value: int) -> Range:
    return Range(value, value)


ZERO = fixed(0)
ONE = fixed(1)
UNKNOWN = Range(0, MAX_U64)


# ----- cel-go type kinds from the checker's type names -------------------------------------------------
_SCALAR_KINDS = frozenset({"bool", "int", "uint", "double", "timestamp", "duration"})
_NAMED_KINDS = {
    "bool": "bool", "int": "int", "uint": "uint", "double": "double", "string": "string", "bytes": "bytes",
    "null_type": "null", "dyn": "dyn", "any": "any", "google.protobuf.Timestamp": "timestamp",
    "google.protobuf.Duration": "duration", "*error*": "error",
    # k8s.io/apiserver pkg/cel/ip.go, cidr.go: opaque types; Quantity, Semver, URL, NamedFormat are object types
    "net.IP": "opaque", "net.CIDR": "opaque",
}


def split_parameters(type_name: str) -> tuple[str, list[str]]:
    """`map(string, list(int))` -> ("map", ["string", "list(int)"])."""
    if not type_name.endswith(")") or "(" not in type_name:
        return type_name, []
    head, inner = type_name.split("(", 1)
    parameters, depth, start = [], 0, 0
    inner = inner[:-1]
    for index, char in enumerate(inner):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parameters.append(inner[start:index].strip())
            start = index + 1
    if inner.strip():
        parameters.append(inner[start:].strip())
    return head, parameters


def kind(type_name: str) -> str:
    head, _ = split_parameters(type_name)
    if head in ("list", "map", "type"):
        return head
    if head == "optional_type":
        return "opaque"
    return _NAMED_KINDS.get(type_name, "struct")


def is_scalar(type_name: str) -> bool:
    """cel-go checker/cost.go isScalar: fixed-size kinds, and optionals of them (not strings)."""
    head, parameters = split_parameters(type_name)
    if head == "optional_type":
        return bool(parameters) and is_scalar(parameters[0])
    return kind(type_name) in _SCALAR_KINDS


# ----- the DRA `device` declaration (dynamic-resource-allocation cel/compile.go newCompiler) ---------------
@dataclass(eq=False)
class DeclType:
    max_elements: int
    fields: dict[str, "DeclType"] = field(default_factory=dict)
    key: "DeclType | None" = None
    elem: "DeclType | None" = None


_ATTRIBUTE = DeclType(max(DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH, ATTRIBUTE_VALUES_PER_DEVICE))
_DOMAIN = DeclType(DEVICE_MAX_DOMAIN_LENGTH)
_ID = DeclType(DEVICE_MAX_ID_LENGTH)
_DEVICE = DeclType(0, {
    "driver": DeclType(DRIVER_NAME_MAX_LENGTH),
    "allowMultipleAllocations": DeclType(1),
    "attributes": DeclType(ATTRIBUTES_AND_CAPACITIES_PER_DEVICE, key=_DOMAIN,
                           elem=DeclType(ATTRIBUTES_AND_CAPACITIES_PER_DEVICE, key=_ID, elem=_ATTRIBUTE)),
    "capacity": DeclType(ATTRIBUTES_AND_CAPACITIES_PER_DEVICE, key=_DOMAIN,
                         elem=DeclType(ATTRIBUTES_AND_CAPACITIES_PER_DEVICE, key=_ID, elem=DeclType(0))),
})


def dra_size(path: tuple[str, ...] | None) -> Range | None:
    """sizeEstimator.EstimateSize: the size bound of the value a path from `device` reaches, or None."""
    if not path or path[0] != "device":
        return None
    node = _DEVICE
    for name in path[1:]:
        if name in ("@items", "@values"):
            if node.elem is None:
                return None
            node = node.elem
        elif name == "@keys":
            if node.key is None:
                return None
            node = node.key
        elif name in node.fields:
            node = node.fields[name]
        elif node.elem is _ATTRIBUTE:
            node = _ATTRIBUTE  # every attribute of a domain has the same bound, whatever its name
        else:
            return None
    return Range(0, node.max_elements)
