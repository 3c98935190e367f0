"""A minimal reader for the checked expression cel-expr-python serialises (`Expression.serialize()`:
a `google.protobuf.Any` holding a `cel.expr.CheckedExpr`).

Only the syntax tree is read (field numbers from cel/expr/syntax.proto), with a plain protobuf wire
decoder, so no generated cel.expr Python module is needed. Used for static checks: the cost
estimate and literal regular expressions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import lru_cache
from collections.abc import Iterator
from typing import Any


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) for every field of a message, in order. The value is an int (varint) or
    bytes (the other wire types): Any, as each caller knows from the field number which it reads."""
    out: list[tuple[int, int, Any]] = []
    position = 0
    value: int | bytes
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(data, position)
        elif wire == 1:
            value = data[position : position + 8]
            position += 8
        elif wire == 2:
            length, position = _varint(data, position)
            value = data[position : position + length]
            position += length
        elif wire == 5:
            value = data[position : position + 4]
            position += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass
class Node:
    """One expression node. kind: const, ident, select, call, list, struct, comprehension."""

    kind: str
    id: int = 0
    value: Any = None  # const value; ident name (str); select field (str); call function name (str)
    literal: str = ""  # const kind: null, bool, int, uint, double, string, bytes
    target: "Node | None" = None  # call target / select operand
    args: list["Node"] = field(default_factory=list)  # call args / list elements / struct values
    keys: list["Node | None"] = field(default_factory=list)  # struct map keys
    test_only: bool = False
    # comprehension parts
    iter_var: str = ""
    iter_var2: str = ""
    accu_var: str = ""
    iter_range: "Node | None" = None
    accu_init: "Node | None" = None
    loop_condition: "Node | None" = None
    loop_step: "Node | None" = None
    result: "Node | None" = None


def _constant(data: bytes) -> bool | int | float | str | bytes | None:
    for number, _wire, value in fields(data):
        if number == 1:
            return None
        if number == 2:
            return bool(value)
        if number in (3, 4):
            return _signed(value) if number == 3 else int(value)  # a varint
        if number == 5:
            return float(struct.unpack("<d", value)[0])
        if number == 6:
            return bytes(value).decode("utf-8", "replace")  # a length-delimited field
        if number == 7:
            return bytes(value)
    return None


_LITERAL_KINDS = {1: "null", 2: "bool", 3: "int", 4: "uint", 5: "double", 6: "string", 7: "bytes"}


def _literal_kind(data: bytes) -> str:
    return next((_LITERAL_KINDS[number] for number, _, _ in fields(data) if number in _LITERAL_KINDS), "")


def parse_expr(data: bytes) -> Node:
    node = Node("const")
    for number, _wire, value in fields(data):
        if number == 2:
            node.id = value
        elif number == 3:
            node.kind, node.value = "const", _constant(value)
            node.literal = _literal_kind(value)
        elif number == 4:
            node.kind = "ident"
            node.value = next((v.decode() for n, _, v in fields(value) if n == 1), "")
        elif number == 5:
            node.kind = "select"
            for n, _, v in fields(value):
                if n == 1:
                    node.target = parse_expr(v)
                elif n == 2:
                    node.value = v.decode()
                elif n == 3:
                    node.test_only = bool(v)
        elif number == 6:
            node.kind = "call"
            for n, _, v in fields(value):
                if n == 1:
                    node.target = parse_expr(v)
                elif n == 2:
                    node.value = v.decode()
                elif n == 3:
                    node.args.append(parse_expr(v))
        elif number == 7:
            node.kind = "list"
            node.args = [parse_expr(v) for n, _, v in fields(value) if n == 1]
        elif number == 8:
            node.kind = "struct"
            for n, _, v in fields(value):
                if n == 1:
                    node.value = v.decode()
                elif n == 2:
                    key = val = None
                    for en, _, ev in fields(v):
                        if en == 3:
                            key = parse_expr(ev)
                        elif en == 4:
                            val = parse_expr(ev)
                    node.keys.append(key)
                    node.args.append(val if val is not None else Node("const"))
        elif number == 9:
            node.kind = "comprehension"
            for n, _, v in fields(value):
                if n == 1:
                    node.iter_var = v.decode()
                elif n == 2:
                    node.iter_range = parse_expr(v)
                elif n == 3:
                    node.accu_var = v.decode()
                elif n == 4:
                    node.accu_init = parse_expr(v)
                elif n == 5:
                    node.loop_condition = parse_expr(v)
                elif n == 6:
                    node.loop_step = parse_expr(v)
                elif n == 7:
                    node.result = parse_expr(v)
                elif n == 8:
                    node.iter_var2 = v.decode()
    return node


@lru_cache(maxsize=8)
def checked_syntax_tree(serialized: bytes) -> Node:
    """The root expression of a serialised checked expression (cached: compiling one selector reads its tree in a
    dozen checks, and a 10 KiB selector's tree has 40,000 nodes; the tree is never modified)."""
    payload = serialized
    outer = fields(serialized)
    if outer and outer[0][0] == 1 and isinstance(outer[0][2], (bytes, memoryview)):
        payload = next((v for n, _, v in outer if n == 2), b"")  # unwrap google.protobuf.Any
    for number, _, value in fields(payload):
        if number == 4:
            return parse_expr(value)
    raise ValueError("no expression in the checked expression")


def walk(node: Node | None) -> Iterator[Node]:
    if node is None:
        return
    yield node
    for child in (node.target, *node.args, *[k for k in node.keys if k is not None], node.iter_range,
                  node.accu_init, node.loop_condition, node.loop_step, node.result):
        yield from walk(child)
