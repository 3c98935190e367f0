"""The cost limits of a selector: cel-go's estimate for the API server, and gpudra's own bound for the run time.

- The API server's reading refuses an expression whose cel-go cost estimate exceeds CELSelectorExpressionMaxCost
  (1,000,000): `gpudra.cel.estimate`, a port of cel-go's estimator as the DRA environment configures it.
- At run time Kubernetes stops an evaluation whose *actual* cost passes the same limit. cel-expr-python tracks no
  cost, so this module keeps an upper bound of what an evaluation can cost (`bound`), from the checked syntax
  tree, for kube-scheduler's reading (no estimate at compile time):

  - sizes come from literals and from the API limits on what a device can carry (at most 32 attributes
    plus capacities, strings of at most 64 bytes, lists of at most 64 entries), so the bound holds for
    every valid device;
  - a comprehension costs its range size times its body; accumulators that grow (map/filter, string or
    list concatenation through cel.bind) grow their size bound, so doubling tricks blow the bound
    up exponentially instead of the evaluation;
  - the unit is roughly cel-go's: one per call/select, one per ten bytes compared or copied.

  An expression is within the runtime limit for certain when either cel-go's estimate or this bound is
  (gpudra.cel.selector then evaluates it, part by part where cel-cpp's iteration budget stops it, see
  gpudra.cel.chunked); one over both that can grow values without bound (`may_grow_without_bound`) fails
  its evaluation as the runtime limit would stop it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, overload

from gpudra.cel.ast import Node, checked_syntax_tree, fields, walk
from gpudra.cel import source
from gpudra.cel.budget import MAX_COST
from gpudra.cel.errors import CELCompileError
from gpudra.cel.estimate import estimate
from gpudra.cel.estimate_sizes import MAX_U64
from gpudra.cel.library_k8s import validate_regex
from gpudra.resourcelimits import (ATTRIBUTE_VALUES_PER_DEVICE, ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
                                   DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH, DRIVER_NAME_MAX_LENGTH)

MAX_ATTRIBUTES = ATTRIBUTES_AND_CAPACITIES_PER_DEVICE  # attributes + capacity per device
MAX_STRING = DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH  # DeviceAttribute string/version values
MAX_LIST = ATTRIBUTE_VALUES_PER_DEVICE  # list-typed attribute values (all of a device's together)
MAX_NAME = DRIVER_NAME_MAX_LENGTH  # driver names, domains and identifiers
_INFINITE = 1e30


@dataclass(frozen=True, slots=True)
class Size:
    """Upper bound on a value: `size` elements (or bytes), each bounded by `item`."""

    size: float
    item: "Size | None" = None
    key: "Size | None" = None  # maps only: bound on the keys

    def weight(self) -> float:
        """Upper bound on the bytes/elements reachable from the value."""
        inner = self.item.weight() if self.item is not None else 1.0
        return min(_INFINITE, max(1.0, self.size) * max(1.0, inner))


SCALAR = Size(1)
_ATTRIBUTE_VALUE = Size(max(MAX_STRING, MAX_LIST), Size(MAX_STRING))
_NAME = Size(MAX_NAME)
_DEVICE_FIELDS = {
    "driver": _NAME,
    "attributes": Size(MAX_ATTRIBUTES, Size(MAX_ATTRIBUTES, _ATTRIBUTE_VALUE, _NAME), _NAME),
    "capacity": Size(MAX_ATTRIBUTES, Size(MAX_ATTRIBUTES, SCALAR, _NAME), _NAME),
    "allowMultipleAllocations": SCALAR,
}
_DEVICE = Size(len(_DEVICE_FIELDS), _ATTRIBUTE_VALUE)
_VARIABLES = {
    source.ATTRIBUTES_VARIABLE: _DEVICE_FIELDS["attributes"],
    source.CAPACITY_VARIABLE: _DEVICE_FIELDS["capacity"],
    source.NO_ATTRIBUTES_VARIABLE: Size(0, _ATTRIBUTE_VALUE, _NAME),
    source.NO_CAPACITY_VARIABLE: Size(0, SCALAR, _NAME),
}


@overload
def _larger(a: Size, b: Size | None) -> Size: ...


@overload
def _larger(a: Size | None, b: Size) -> Size: ...


@overload
def _larger(a: Size | None, b: Size | None) -> Size | None: ...


def _larger(a: Size | None, b: Size | None) -> Size | None:
    if a is None:
        return b
    if b is None:
        return a
    return Size(max(a.size, b.size), _larger(a.item, b.item), _larger(a.key, b.key))


def _cap(value: float) -> float:
    return min(_INFINITE, value)


# ----- types from the checker: numbers, booleans and messages are fixed-size ---------------------------
def _node_types(serialized: bytes) -> tuple[set[int], set[int]]:
    """(ids of fixed-size nodes, ids of map-typed nodes) from the checker's type map."""
    payload = serialized
    outer = fields(serialized)
    if outer and outer[0][0] == 1:
        payload = next((v for n, _, v in outer if n == 2), b"")
    scalar: set[int] = set()
    maps: set[int] = set()
    for number, _, entry in fields(payload):
        if number != 3:  # CheckedExpr.type_map
            continue
        node_id, type_bytes = 0, b""
        for n, _, v in fields(entry):
            if n == 1:
                node_id = v
            elif n == 2:
                type_bytes = v
        for n, wire, v in fields(type_bytes):
            # primitive bool/int/uint/double (string and bytes have sizes), well-known types, messages
            if (n == 3 and wire == 0 and v in (1, 2, 3, 4)) or n == 2 or (n == 9 and not bytes(v).startswith(b"kubernetes.DRADevice")):
                scalar.add(node_id)
            elif n == 7:
                maps.add(node_id)
    return scalar, maps


class _Estimator:
    def __init__(self, scalar_ids: set[int], map_ids: set[int]):
        self.scalar_ids = scalar_ids
        self.map_ids = map_ids

    def estimate(self, node: Node | None, scope: dict[str, Size]) -> tuple[float, Size]:
        if node is None:
            return 0.0, SCALAR
        cost, size = self._estimate(node, scope)
        if node.id in self.scalar_ids:
            size = SCALAR
        return _cap(cost), size

    def _estimate(self, node: Node, scope: dict[str, Size]) -> tuple[float, Size]:
        kind = node.kind
        if kind == "const":
            value = node.value
            if isinstance(value, (str, bytes)):
                return 0.0, Size(max(1, len(value.encode() if isinstance(value, str) else value)))
            return 0.0, SCALAR
        if kind == "ident":
            if node.value == "device":
                return 1.0, _DEVICE
            if node.value in _VARIABLES:
                return 1.0, _VARIABLES[node.value]
            # anything else the checker accepted is a local variable or a type name (`map`, `int`, …)
            return 1.0, scope.get(node.value, SCALAR)
        if kind == "select":
            cost, target = self.estimate(node.target, scope)
            if node.test_only:
                return cost + 1, SCALAR
            if node.target is not None and node.target.kind == "ident" and node.target.value == "device":
                return cost + 1, _DEVICE_FIELDS.get(node.value, SCALAR)
            return cost + 1, target.item or SCALAR
        if kind == "list":
            cost, item = 1.0, None
            for element in node.args:
                element_cost, element_size = self.estimate(element, scope)
                cost += element_cost
                item = _larger(item, element_size)
            return cost, Size(len(node.args), item or SCALAR)
        if kind == "struct":
            cost, item, keys = 1.0, None, None
            for key, value in zip(node.keys, node.args):
                key_cost, key_size = self.estimate(key, scope)
                value_cost, value_size = self.estimate(value, scope)
                cost += key_cost + value_cost
                item, keys = _larger(item, value_size), _larger(keys, key_size)
            return cost, Size(len(node.args), item or SCALAR, keys or SCALAR)
        if kind == "comprehension":
            return self._comprehension(node, scope)
        return self._call(node, scope)

    def _comprehension(self, node: Node, scope: dict[str, Size]) -> tuple[float, Size]:
        range_cost, range_size = self.estimate(node.iter_range, scope)
        init_cost, accu = self.estimate(node.accu_init, scope)
        iterations = range_size.size
        element = range_size.item or SCALAR
        inner = dict(scope)
        is_map = (node.iter_range is not None and node.iter_range.id in self.map_ids) or range_size.key is not None
        key = (range_size.key or _larger(Size(MAX_NAME), element)) if is_map else SCALAR
        if node.iter_var2:
            inner[node.iter_var] = key  # index or key
            inner[node.iter_var2] = element
        else:
            inner[node.iter_var] = key if is_map else element
        inner[node.accu_var] = accu
        # Macro accumulators (@result) are appended in place by the runtime, so a step costs what it
        # costs on the initial accumulator; the accumulator's size still grows with the iterations.
        step_cost, first_step = self.estimate(node.loop_step, inner)
        if first_step.size > accu.size or first_step.weight() > accu.weight():
            growth = max(first_step.size - accu.size, 1.0)
            accu = Size(_cap(accu.size + iterations * growth), _larger(accu.item, first_step.item))
            inner[node.accu_var] = accu
        condition_cost, _ = self.estimate(node.loop_condition, inner)
        result_cost, result = self.estimate(node.result, inner)
        cost = range_cost + init_cost + iterations * (condition_cost + step_cost + 1) + result_cost
        return _cap(cost), result

    def _call(self, node: Node, scope: dict[str, Size]) -> tuple[float, Size]:
        arguments = ([node.target] if node.target is not None else []) + node.args
        cost = 1.0
        sizes: list[Size] = []
        for argument in arguments:  # both branches of &&, || and ?: count: an upper bound
            argument_cost, argument_size = self.estimate(argument, scope)
            cost += argument_cost
            sizes.append(argument_size)
        extra, result = _function_cost(node, sizes)
        return _cap(cost + extra), result


def _tenth(value: float) -> float:
    return math.ceil(value / 10)


def _function_cost(node: Node, sizes: list[Size]) -> tuple[float, Size]:
    name = node.value or ""
    first = sizes[0] if sizes else SCALAR
    total = sum(size.weight() for size in sizes)
    if name in ("_&&_", "_||_", "!_", "@not_strictly_false"):
        return 0.0, SCALAR
    if name in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"):
        # cel-go (checker/cost.go functionCost): the smaller operand's size times the string traversal
        # factor (0.1); lists and maps count their elements, not what those hold
        return _tenth(min(min(size.size for size in sizes) if sizes else 1.0, _INFINITE)), SCALAR
    if name == "type":
        return 0.0, SCALAR
    if name in ("_[_]", "_[?_]", "_?._"):
        return 0.0, first.item or SCALAR
    if name == "size":
        return 0.0, SCALAR  # O(1) in cel-go
    if name in ("dyn", "optional.of", "optional.ofNonZeroValue", "value", "optional.none", "hasValue"):
        return 0.0, first if name not in ("optional.none", "hasValue") else SCALAR
    if name in ("orValue", "or"):
        return 0.0, _larger(first, sizes[1] if len(sizes) > 1 else None) or SCALAR
    if name == "_?_:_":
        return 0.0, _larger(sizes[1], sizes[2]) if len(sizes) == 3 else SCALAR
    if name == "@in":
        # a list is searched (O(n), cel-go's InList estimate), a map looked up (O(1))
        container = sizes[1] if len(sizes) > 1 else SCALAR
        return (0.0 if container.key is not None else container.size), SCALAR
    if name == "_+_" and len(sizes) == 2:
        a, b = sizes
        result = Size(_cap(a.size + b.size), _larger(a.item, b.item))
        return _tenth(result.size), result  # copies elements (or bytes), not what they reference
    if name in ("matches", "find", "findAll"):
        pattern = sizes[1].size if len(sizes) > 1 else 1
        text = first.size
        cost = _cap(text * max(1.0, pattern / 4))
        if name == "findAll":
            return cost, Size(text, Size(text))
        return cost, Size(text) if name == "find" else SCALAR
    if name in ("contains", "startsWith", "endsWith", "indexOf", "lastIndexOf", "charAt"):
        # string traversals: lengths (not what a list holds) times cel-go's traversal factor
        return _tenth(sum(size.size for size in sizes)), SCALAR if name != "charAt" else Size(4)
    if name in ("lowerAscii", "upperAscii", "trim", "reverse", "substring"):
        return _tenth(first.weight()), first
    if name == "replace" and len(sizes) >= 3:
        result = Size(_cap(first.size * max(1.0, sizes[2].size)))
        return _tenth(result.size) + first.size, result
    if name == "split":
        return first.size, Size(first.size + 1, Size(first.size))
    if name == "join":
        separator = sizes[1].size if len(sizes) > 1 else 0
        result = Size(_cap(first.weight() + first.size * separator))
        return _tenth(result.size), result
    if name == "strings.quote":
        return _tenth(first.size), Size(2 * first.size + 2)
    if name == "format":
        result = Size(_cap((first.size + total) * 400))
        return _tenth(result.size), result
    if name == "lists.range":
        # cel-go ext/lists.go estimateListsRange: a literal bound (a negative one is an empty list), else unbounded
        count = node.args[0].value if node.args and node.args[0].kind == "const" else None
        length = float(max(count, 0)) if isinstance(count, int) and not isinstance(count, bool) else _INFINITE
        return length, Size(length, SCALAR)
    if name in ("distinct",):
        return _cap(first.size * first.size), first
    if name == "flatten":
        inner = first.item or SCALAR
        result = Size(_cap(first.size * max(1.0, inner.size)), inner.item or SCALAR)
        return result.size, result
    if name in ("sort", "@sortByAssociatedKeys", "slice"):
        return _cap(first.weight() * max(1.0, math.log2(max(2.0, first.size)))), first
    if name in ("first", "last"):
        return 1.0, first.item or SCALAR
    if name in ("sets.contains", "sets.equivalent", "sets.intersects"):
        # cel-go ext/sets.go estimateSetsCost: element counts multiplied, twice for equivalent
        second = sizes[1] if len(sizes) > 1 else SCALAR
        factor = 2.0 if name == "sets.equivalent" else 1.0
        return _cap(first.size * second.size * factor), SCALAR
    if name in ("isSorted", "sum", "min", "max", "includes"):
        # one step per element (k8s.io/apiserver library/cost.go; DRA's includes: the attribute list bound)
        return first.size, first.item or SCALAR
    if name == "cel.@mapInsert":
        value = sizes[-1] if sizes else SCALAR
        key = sizes[1] if len(sizes) > 2 else None
        return 1.0, Size(_cap(first.size + 1), _larger(first.item, value), _larger(first.key, key))
    if name == "__gpudra_map_from_entries":
        entry = first.item or SCALAR
        return first.size, Size(first.size, entry.item or SCALAR, entry.item or SCALAR)
    if name == "__gpudra_merge_maps":
        entry = first.item or SCALAR
        return first.weight(), Size(first.weight(), entry.item or SCALAR, entry.key or SCALAR)
    if name in ("getScheme", "getHost", "getHostname", "getPort", "getEscapedPath", "string"):
        return _tenth(total), Size(max(32.0, total))
    if name == "getQuery":
        return _tenth(total), Size(total, Size(total, Size(total)))
    # everything else returns a fixed-size value or a value no larger than its inputs
    return _tenth(total), Size(max(1.0, total)) if total > 1 else SCALAR


_GROWING_TYPES = ("string", "bytes", "list(", "dyn", "map(")


def may_grow_without_bound(serialized: bytes) -> bool:
    """Whether an evaluation could build ever larger values (concatenation or replace: doubling through
    cel.bind or an accumulator). Without these, cel-cpp's iteration budget and the metered Python functions
    bound an evaluation, so a stored expression over the estimate may still run (cel-go decides by the
    actual cost, which is often far below the estimate)."""
    from gpudra.cel.checks import _payload, _type_map

    types = _type_map(_payload(serialized))
    for node in walk(checked_syntax_tree(serialized)):
        if node.kind != "call":
            continue
        if node.value in ("replace", "join", "format", "repeat", "flatten") or node.value in (
                "__gpudra_map_from_entries", "__gpudra_merge_maps", "cel.@mapInsert"):
            return True
        if node.value == "_+_" and types.get(node.id, "dyn").startswith(_GROWING_TYPES):
            return True
    return False


def bound(serialized: bytes) -> float:
    """gpudra's upper bound of an evaluation's actual cost."""
    root = checked_syntax_tree(serialized)
    cost, _ = _Estimator(*_node_types(serialized)).estimate(root, {})
    return cost


def literal_regex_problems(serialized: bytes) -> list[tuple[str, str]]:
    """(pattern, RE2 error) for every constant pattern of matches/find/findAll that does not compile."""
    problems = []
    for node in walk(checked_syntax_tree(serialized)):
        if node.kind != "call" or node.value not in ("matches", "find", "findAll"):
            continue
        arguments = ([node.target] if node.target is not None else []) + node.args
        if len(arguments) >= 2 and arguments[1].kind == "const" and isinstance(arguments[1].value, str):
            problem = validate_regex(arguments[1].value)
            if problem:
                problems.append((arguments[1].value, problem))
    return problems


def check(expression: str, rewritten: source.Rewritten, checked: Any, refuse_costly: bool = True) -> tuple[int, int]:
    """Refuse expressions whose literal regex is invalid or (unless `refuse_costly` is false) whose cel-go cost
    estimate exceeds the limit; returns (cel-go's estimate, gpudra's runtime bound)."""
    serialized = checked.serialize()
    for pattern, problem in literal_regex_problems(serialized):
        raise CELCompileError(expression, f"invalid regular expression {pattern!r}: {problem}")
    estimated = estimate(expression, rewritten, serialized)
    if estimated > MAX_COST and refuse_costly:
        raise CELCompileError(
            expression, f"too complex, exceeds cost limit (estimated cost {estimated}, limit {MAX_COST})"
        )
    return estimated, int(min(bound(serialized), float(MAX_U64)))
