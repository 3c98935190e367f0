"""Checks Kubernetes' CEL environment makes at compile time that cel-cpp's checker does not:
HomogeneousAggregateLiterals (every element of a list literal, and every key/value of a map literal,
has the same type unless one of them is dyn)."""

from __future__ import annotations

from gpudra.cel.ast import checked_syntax_tree, fields, walk

_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {1: "any", 2: "google.protobuf.Timestamp", 3: "google.protobuf.Duration"}


def _payload(serialized: bytes) -> bytes:
    outer = fields(serialized)
    if outer and outer[0][0] == 1:
        return next((v for n, _, v in outer if n == 2), b"")
    return serialized


def type_name(data: bytes) -> str:
    """cel-go's spelling of a serialised cel.expr.Type."""
    for number, wire, value in fields(data):
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
            parts = fields(value)
            name = next((bytes(v).decode() for n, _, v in parts if n == 1), "")
            params = [type_name(v) for n, _, v in parts if n == 2]
            return f"{name}({', '.join(params)})" if params else name
    return "dyn"


def _type_map(payload: bytes) -> dict[int, str]:
    types = {}
    for number, _, entry in fields(payload):
        if number == 3:
            parts = {n: v for n, _, v in fields(entry)}
            types[parts.get(1, 0)] = type_name(parts.get(2, b""))
    return types


def _positions(payload: bytes) -> dict[int, int]:
    positions = {}
    for number, _, value in fields(payload):
        if number == 5:  # source_info
            for n, _, entry in fields(value):
                if n == 4:
                    parts = {k: v for k, _, v in fields(entry)}
                    positions[parts.get(1, 0)] = parts.get(2, 0)
    return positions


def _mismatch(expected: str, found: str) -> bool:
    return expected != found and "dyn" not in (expected, found) and not expected.startswith("dyn") and found != "null_type"


def heterogeneous_literal(serialized: bytes) -> tuple[str, int] | None:
    """(message, offset in the checked text) of the first literal mixing element types, or None."""
    payload = _payload(serialized)
    types = _type_map(payload)
    positions = _positions(payload)
    for node in walk(checked_syntax_tree(serialized)):
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
                if _mismatch(expected, found):
                    return f"expected type '{expected}' but found '{found}'", positions.get(element.id, 0)
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


_LITERAL_PROGRAMS: dict = {}


def _literal_program(function: str):
    from cel_expr_python import cel

    if function not in _LITERAL_PROGRAMS:
        env = cel.NewEnv(variables={"s": cel.Type.STRING})
        _LITERAL_PROGRAMS[function] = env.compile(f"{function}(s)")
    return _LITERAL_PROGRAMS[function]
