"""The evaluation-time helpers behind gpudra.cel.guards: what cel-go answers where a version or quantity (a
tagged string while evaluating, values.py) meets `==`, a string function or a sort, and cel-go's conversions of
values known only at run time (gpudra.cel.constants.convert). Registered in the evaluation environment only."""

from __future__ import annotations

from typing import Any, Callable

from cel_expr_python import cel

from gpudra.cel import binding, guards
from gpudra.cel import values as V
from gpudra.cel.library_k8s import LIST_DYN, cel_equal

T = cel.Type


def _untagged(value: Any) -> Any:
    kind = "kubernetes.Semver" if V.is_runtime_semver(value) else "kubernetes.Quantity"
    raise ValueError(f"no such overload: {kind} is not a string")


def _go_equal(left: Any, right: Any) -> bool | None:
    """cel-go's types.Equal on converted values: True, False, or None for an error (no such overload)."""
    if right is None or left is None:
        return left is None and right is None
    if V.is_runtime_semver(left):
        return V.semver_of(left).compare(V.semver_of(right)) == 0 if V.is_runtime_semver(right) else None
    if V.is_runtime_quantity(left):
        if not V.is_runtime_quantity(right) or V.is_quantity_pointer(right):
            return None  # Quantity.Equal takes a Quantity value, not another type or an add/sub result
        return V.quantity_of(left).cmp(V.quantity_of(right)) == 0
    if isinstance(left, (list, tuple)):
        # baseList.Equal (common/types/list.go): only an element found False makes the lists unequal
        if not isinstance(right, (list, tuple)) or len(left) != len(right):
            return False
        return all(_go_equal(a, b) is not False for a, b in zip(left, right))
    if isinstance(left, dict):
        # baseMap.Equal (common/types/map.go): the same keys, and no value found False
        if not isinstance(right, dict) or len(left) != len(right) or any(key not in right for key in left):
            return False
        return all(_go_equal(value, right[key]) is not False for key, value in left.items())
    if V.is_runtime_semver(right) or V.is_runtime_quantity(right):
        return False  # a string, number, … Equal of another type
    return cel_equal(left, right)


def _tagged_equals(left: Any, right: Any) -> bool:
    """`==` with a version, quantity or list on the left: Semver.Equal / Quantity.Equal (k8s.io/apiserver
    pkg/cel) answer no such overload for another type; null is compared first (cel-go common/types/util.go
    Equal); lists compare element by element, and only an element found unequal makes them unequal."""
    equal = _go_equal(left, right)
    if equal is None:
        raise ValueError("no such overload")
    return equal


def _quantity_in(element: Any, values: list[Any]) -> bool:
    """`element in values` as cel-go's list Contains: true at the first element Equal calls equal."""
    return any(_go_equal(element, value) is True for value in values)


def _go_conversion(function: str) -> Callable[[Any], Any]:
    """`function(value)` by cel-go's rules (gpudra.cel.constants.convert) for a value known only at run time."""
    from gpudra.cel.constants import Constant, ConversionError, convert

    def conversion(value: Any) -> Any:
        if isinstance(value, bool):
            kind = "bool"
        elif isinstance(value, int):
            kind = "int" if value <= 2**63 - 1 else "uint"
        elif isinstance(value, float):
            kind = "double"
        elif isinstance(value, str):
            if V.is_runtime_semver(value) or V.is_runtime_quantity(value):
                raise ValueError(f"type conversion error to '{function}'")
            kind = "string"
        elif isinstance(value, (bytes, bytearray)):
            kind, value = "bytes", bytes(value)
        else:
            raise ValueError(f"no such overload: {function}")
        try:
            converted = convert(function, Constant(kind, value), 0)
        except ConversionError as error:
            raise ValueError(str(error)) from None
        if converted is None:
            raise ValueError(f"no such overload: {function}")
        return converted.value

    return conversion


def _sortable(values: list[Any]) -> list[Any]:
    if any(V.is_runtime_semver(value) or V.is_runtime_quantity(value) for value in values):
        raise ValueError("list elements must be comparable")
    return values


def declarations() -> list[cel.FunctionDecl]:
    conversions = [
        cel.FunctionDecl(guards.GO_CONVERSION_PREFIX + name,
                         [binding.overload(f"gpudra_go_{name}", result, [T.DYN], _go_conversion(name), False)])
        for name, result in (("int", T.INT), ("uint", T.UINT), ("double", T.DOUBLE), ("bool", T.BOOL),
                             ("string", T.STRING))
    ]
    return conversions + [
        cel.FunctionDecl(guards.UNTAGGED, [binding.overload("gpudra_untagged", T.DYN, [T.DYN], _untagged, False)]),
        cel.FunctionDecl(guards.TAGGED_EQUALS, [
            binding.overload("gpudra_tagged_equals", T.BOOL, [T.DYN, T.DYN], _tagged_equals, False)]),
        cel.FunctionDecl(guards.QUANTITY_IN, [
            binding.overload("gpudra_quantity_in", T.BOOL, [T.DYN, LIST_DYN], _quantity_in, False)]),
        cel.FunctionDecl(guards.SORTABLE, [binding.overload("gpudra_sortable", LIST_DYN, [LIST_DYN], _sortable, False)]),
    ]
