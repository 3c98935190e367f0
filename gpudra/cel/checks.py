"""Checks Kubernetes' CEL environment makes at compile time that cel-cpp's checker does not:

- HomogeneousAggregateLiterals: every element of a list literal, and every key/value of a map
  literal, has exactly the type of the first (cel-go's validator compares exact types, so
  `[1, dyn("a")]` is refused), except inside a call of `format`, which cel-go exempts;
- the type parameters of the Kubernetes list functions, which cel-expr-python's checker cannot bind
  (they are declared on list(dyn) there): isSorted/min/max need comparable elements, sum summable
  ones, and a list's indexOf/lastIndexOf an argument of the element type.
"""

from __future__ import annotations

from functools import lru_cache
from collections.abc import Iterator
from typing import Any

from gpudra.cel.ast import Node, checked_syntax_tree, fields, walk

_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {1: "any", 2: "google.protobuf.Timestamp", 3: "google.protobuf.Duration"}


def _payload(serialized: bytes) -> bytes:
    outer = fields(serialized)
    if outer and outer[0][0] == 1:
        return next((v for n, _, v in outer if n == 2), b"")
    return serialized


def type_name(data: bytes) -> str:
    """cel-go's spelling of a serialised cel.expr.Type."""
    for number, _wire, value in fields(data):
        if number == 1:
            return "dyn"
        if number == 2:
            return "null_type"
        if number == 3:
            return _PRIMITIVES.get(value, "dyn")
        if number == 4:
            return f"wrapper({_PRIMITIVES.get(value, '?')})"
        if number == 5:
            return _WELL_KNOWN.get(value, "dyn")
        if number == 6:
            element = next((v for n, _, v in fields(value) if n == 1), b"")
            return f"list({type_name(element)})"
        if number == 7:
            parts = {n: v for n, _, v in fields(value)}
            return f"map({type_name(parts.get(1, b''))}, {type_name(parts.get(2, b''))})"
        if number == 9:
            return bytes(value).decode()
        if number == 10:
            return bytes(value).decode()
        if number == 11:
            return f"type({type_name(value)})"
        if number == 12:
            return "*error*"
        if number == 14:
            abstract = fields(value)
            name = next((bytes(v).decode() for n, _, v in abstract if n == 1), "")
            params = [type_name(v) for n, _, v in abstract if n == 2]
            return f"{name}({', '.join(params)})" if params else name
    return "dyn"


@lru_cache(maxsize=8)
def _type_map(payload: bytes) -> dict[int, str]:
    types = {}
    for number, _, entry in fields(payload):
        if number == 3:
            parts = {n: v for n, _, v in fields(entry)}
            types[parts.get(1, 0)] = type_name(parts.get(2, b""))
    return types


@lru_cache(maxsize=8)
def _positions(payload: bytes) -> dict[int, int]:
    positions = {}
    for number, _, value in fields(payload):
        if number == 5:  # source_info
            for n, _, entry in fields(value):
                if n == 4:
                    parts = {k: v for k, _, v in fields(entry)}
                    positions[parts.get(1, 0)] = parts.get(2, 0)
    return positions


# cel-go's HomogeneousAggregateLiteralExemptFunctions, set by its strings extension
_EXEMPT_FROM_HOMOGENEITY = frozenset({"format"})


def _outside_exempt_calls(node: Node | None, inside: bool = False) -> Iterator[Node]:
    """The nodes that are not within (an argument or target of) an exempt call."""
    if node is None:
        return
    if not inside:
        yield node
    inside = inside or (node.kind == "call" and node.value in _EXEMPT_FROM_HOMOGENEITY)
    for child in (node.target, *node.args, *[k for k in node.keys if k is not None], node.iter_range,
                  node.accu_init, node.loop_condition, node.loop_step, node.result):
        yield from _outside_exempt_calls(child, inside)


def heterogeneous_literal(serialized: bytes) -> tuple[str, int] | None:
    """(message, offset in the checked text) of the first literal mixing element types, or None."""
    payload = _payload(serialized)
    types = _type_map(payload)
    positions = _positions(payload)
    for node in _outside_exempt_calls(checked_syntax_tree(serialized)):
        if node.kind == "list":
            groups = [node.args]
        elif node.kind == "struct" and not node.value:  # a map literal
            groups = [[key for key in node.keys if key is not None], node.args]
        else:
            continue
        for group in groups:
            if len(group) < 2:
                continue
            expected = types.get(group[0].id, "dyn")
            for element in group[1:]:
                found = types.get(element.id, "dyn")
                if expected != found:
                    return f"expected type '{expected}' but found '{found}'", positions.get(element.id, 0)
    return None


# Element types of the Kubernetes lists library's overloads (k8s.io/apiserver pkg/cel/library/lists.go).
_COMPARABLE = {"int", "uint", "double", "bool", "string", "bytes", "google.protobuf.Duration",
               "google.protobuf.Timestamp", "dyn"}
_SUMMABLE = {"int", "uint", "double", "google.protobuf.Duration", "dyn"}
_ELEMENT_TYPES = {"isSorted": _COMPARABLE, "min": _COMPARABLE, "max": _COMPARABLE, "sum": _SUMMABLE}


def _element_type(list_type: str) -> str | None:
    return list_type[5:-1] if list_type.startswith("list(") and list_type.endswith(")") else None


def list_function_overloads(serialized: bytes) -> tuple[str, int] | None:
    """(message, offset) of the first list-library call no overload of Kubernetes' accepts, or None."""
    payload = _payload(serialized)
    types = _type_map(payload)
    positions = _positions(payload)
    for node in walk(checked_syntax_tree(serialized)):
        if node.kind != "call" or node.target is None:
            continue
        target = types.get(node.target.id, "dyn")
        element = _element_type(target)
        if element is None:
            continue
        name = node.value
        if name in _ELEMENT_TYPES and not node.args:
            if element not in _ELEMENT_TYPES[name]:
                return (f"found no matching overload for '{name}' applied to '{target}.()'",
                        positions.get(node.id, 0))
        elif name in ("indexOf", "lastIndexOf") and len(node.args) == 1:
            argument = types.get(node.args[0].id, "dyn")
            if "dyn" not in (element, argument) and element != argument:
                return (f"found no matching overload for '{name}' applied to '{target}.({argument})'",
                        positions.get(node.id, 0))
    return None


def invalid_time_literals(serialized: bytes) -> tuple[str, int] | None:
    """(message, offset) of the first constant duration()/timestamp() argument that does not parse
    (cel-go's ValidateDurationLiterals/ValidateTimestampLiterals, enabled by Kubernetes)."""
    from cel_expr_python import cel

    payload = _payload(serialized)
    positions = _positions(payload)
    for node in walk(checked_syntax_tree(serialized)):
        if node.kind != "call" or node.value not in ("duration", "timestamp") or node.target is not None:
            continue
        if len(node.args) != 1 or node.args[0].kind != "const" or not isinstance(node.args[0].value, str):
            continue
        result = _literal_program(node.value).eval(data={"s": node.args[0].value})
        if result.type() == cel.Type.ERROR:
            detail = str(result.value()).split(": ", 1)[-1]
            return f"invalid {node.value} argument: {detail}", positions.get(node.args[0].id, 0)
    return None


_LITERAL_PROGRAMS: dict[str, Any] = {}  # function -> its cel-expr-python program (untyped library)


def _literal_program(function: str) -> Any:
    from cel_expr_python import cel

    if function not in _LITERAL_PROGRAMS:
        env = cel.NewEnv(variables={"s": cel.Type.STRING})
        _LITERAL_PROGRAMS[function] = env.compile(f"{function}(s)")
    return _LITERAL_PROGRAMS[function]


def root_type_name(serialized: bytes) -> str | None:
    """cel-go's spelling of the checked type of the whole expression (None when the checker left none)."""
    root = checked_syntax_tree(serialized)
    if root is None:
        return None
    return _type_map(_payload(serialized)).get(root.id)
