"""Constant arguments that cel-go refuses before any evaluation, which cel-cpp only reports when it evaluates.

Two upstream checks, both turning what would be a runtime error (or no error at all) into a compile error:

- Program planning with `cel.OptOptimize` (Kubernetes' base environment, k8s.io/apiserver
  pkg/cel/environment/base.go) folds a type conversion of a constant (cel-go v0.26.0
  interpreter/decorators.go `decOptimize` → `maybeOptimizeConstUnary`; list and map literals of constants
  are constants too): a conversion that fails there fails `env.Program`, which DRA reports as a compile
  error ("program instantiation failed", dynamic-resource-allocation cel/compile.go). The conversions
  follow cel-go v0.26.0 common/types (string.go, double.go, int.go, uint.go, bytes.go, overflow.go):
  `strconv.ParseInt/ParseUint/ParseFloat/ParseBool`, range-checked double/int/uint conversions, UTF-8
  checked bytes→string.
- The strings extension's format validator (cel-go v0.26.0 ext/formatting.go `stringFormatValidator`,
  enabled by ext.Strings version >= 1; Kubernetes uses version 2): a constant format string whose clauses
  do not match the types of a list literal's elements, or the number of elements, is a compile error.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpudra.cel.ast import Node, checked_syntax_tree, walk
from gpudra.gostrconv import INT64_MAX, parse_int64, parse_uint64

_UNIX_SECONDS = (-62135596800, 253402300799)  # cel-go minUnixTime / maxUnixTime
_CONVERSIONS = frozenset({"bool", "bytes", "double", "duration", "dyn", "int", "string", "timestamp", "type", "uint"})


@dataclass(frozen=True)
class Constant:
    kind: str  # null, bool, int, uint, double, string, bytes, list, map
    value: Any


class ConversionError(ValueError):
    def __init__(self, message: str, node_id: int):
        super().__init__(message)
        self.node_id = node_id


def _conversion_error(source: str, target: str) -> str:
    return f"type conversion error from '{source}' to '{target}'"


# ----- Go's strconv, as cel-go calls it ---------------------------------------------------------------------
_DECIMAL_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX_FLOAT = re.compile(r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)")
_HEX_PREFIX = re.compile(r"[+-]?0[xX]")
_SPECIAL_FLOAT = re.compile(r"([+-]?)(inf|infinity|nan)", re.IGNORECASE)
_GO_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
             "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


parse_go_int = parse_int64  # strconv.ParseInt(text, 10, 64), None on error (one copy: gpudra/gostrconv.py)
parse_go_uint = parse_uint64  # strconv.ParseUint(text, 10, 64), None on error


def parse_go_float(text: str) -> float | None:
    """strconv.ParseFloat(text, 64), None on error (syntax, or out of range)."""
    special = _SPECIAL_FLOAT.fullmatch(text)
    if special:
        if special.group(2).lower() == "nan":
            return math.nan
        return -math.inf if special.group(1) == "-" else math.inf
    if _DECIMAL_FLOAT.fullmatch(text):
        value = float(text)
    else:
        # underscores may separate digits only after a base prefix
        hexadecimal = _HEX_FLOAT.fullmatch(text.replace("_", "") if _HEX_PREFIX.match(text) else text)
        if not hexadecimal:
            return None
        try:
            value = float.fromhex(hexadecimal.group(1) + "0x" + hexadecimal.group(2))
        except OverflowError:
            return None
    return None if math.isinf(value) else value


def format_go_float(value: float) -> str:
    """fmt.Sprintf("%g", value) (strconv 'g' with the shortest digits: the exponent form when the decimal
    exponent is below -4 or at least 6)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    parts = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, parts.digits))
    point = len(digits) + int(parts.exponent)  # digits[:point] is the integer part
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{body}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


# ----- conversions -----------------------------------------------------------------------------------------
def convert(function: str, argument: Constant, node_id: int) -> Constant | None:
    """cel-go's conversion of a constant: the constant it folds to, None when the value is not modelled here
    (no verdict), or ConversionError when cel-go's planner refuses it."""
    kind, value = argument.kind, argument.value
    if function == "dyn":
        return argument
    if function == "type":
        return None

    def fail(message: str | None = None) -> ConversionError:
        return ConversionError(message or _conversion_error(kind, function), node_id)

    if function == "int":
        if kind == "int":
            return argument
        if kind == "uint":
            if value > INT64_MAX:
                raise fail("integer overflow")
            return Constant("int", value)
        if kind == "double":
            if math.isinf(value) or math.isnan(value) or value <= -(2.0**63) or value >= 2.0**63:
                raise fail("integer overflow")
            return Constant("int", int(value))
        if kind == "string":
            parsed = parse_go_int(value)
            if parsed is None:
                raise fail()
            return Constant("int", parsed)
        return None
    if function == "uint":
        if kind == "uint":
            return argument
        if kind == "int":
            if value < 0:
                raise fail("unsigned integer overflow")
            return Constant("uint", value)
        if kind == "double":
            if math.isinf(value) or math.isnan(value) or value < 0 or value >= 2.0**64:
                raise fail("unsigned integer overflow")
            return Constant("uint", int(value))
        if kind == "string":
            parsed = parse_go_uint(value)
            if parsed is None:
                raise fail()
            return Constant("uint", parsed)
        return None
    if function == "double":
        if kind in ("int", "uint"):
            return Constant("double", float(value))
        if kind == "double":
            return argument
        if kind == "string":
            parsed_float = parse_go_float(value)
            if parsed_float is None:
                raise fail()
            return Constant("double", parsed_float)
        return None
    if function == "bool":
        if kind == "bool":
            return argument
        if kind == "string":
            if value not in _GO_BOOLS:
                raise fail()
            return Constant("bool", _GO_BOOLS[value])
        return None
    if function == "bytes":
        if kind == "bytes":
            return argument
        if kind == "string":
            return Constant("bytes", value.encode("utf-8"))
        return None
    if function == "string":
        if kind == "string":
            return argument
        if kind in ("int", "uint"):
            return Constant("string", str(value))
        if kind == "bool":
            return Constant("string", "true" if value else "false")
        if kind == "double":
            return Constant("string", format_go_float(value))
        if kind == "bytes":
            try:
                return Constant("string", bytes(value).decode("utf-8"))
            except UnicodeDecodeError:
                raise fail("invalid UTF-8 in bytes, cannot convert to string") from None
        return None
    if function == "timestamp" and kind == "int":
        if not _UNIX_SECONDS[0] <= value <= _UNIX_SECONDS[1]:
            raise fail("timestamp overflow")
        return None
    return None  # duration/timestamp of strings: the literal validators check those


def _children(node: Node) -> list[Node]:
    children = [node.target, *node.args, *[k for k in node.keys if k is not None], node.iter_range,
                node.accu_init, node.loop_condition, node.loop_step, node.result]
    return [child for child in children if child is not None]


def _fold(node: Node) -> Constant | None:
    """The constant `node` plans to (cel-go's planner, bottom-up), or None; raises ConversionError."""
    folded = [_fold(child) for child in _children(node)] if node.kind != "const" else []
    if node.kind == "const":
        return Constant(node.literal, node.value) if node.literal else None
    if node.kind == "list" and all(item is not None for item in folded):
        return Constant("list", tuple(folded))
    if node.kind == "call" and node.target is None and node.value in _CONVERSIONS and len(node.args) == 1:
        argument = folded[0]
        if argument is not None:
            return convert(str(node.value), argument, node.id)
    return None


_SUBSTITUTED = frozenset({"int", "uint", "double", "bool", "string", "bytes"})


def _outermost_conversions(node: Node, found: list[tuple[int, Constant]]) -> None:
    if node.kind == "call" and node.target is None and node.value in _SUBSTITUTED and len(node.args) == 1:
        try:
            folded = _fold(node)
        except ConversionError:
            folded = None
        if folded is not None:
            found.append((node.id, folded))
            return
    for child in _children(node):
        _outermost_conversions(child, found)


def folded_conversions(serialized: bytes) -> list[tuple[int, Constant]]:
    """(offset of the call's '(' in the checked text, value) of each outermost constant conversion: cel-go
    evaluates these once, with its own conversion rules, when it plans the program (cel-cpp's rules differ,
    e.g. bool("T"), int(" 1"), double("1e400"), string(1e300)); gpudra puts the value in their place."""
    found: list[tuple[int, Constant]] = []
    try:
        _outermost_conversions(checked_syntax_tree(serialized), found)
    except RecursionError:
        return []
    return [(_offset(serialized, node_id), value) for node_id, value in found]


def literal(constant: Constant) -> str | None:
    """CEL source text for a constant, or None when it has none."""
    kind, value = constant.kind, constant.value
    if kind == "bool":
        return "true" if value else "false"
    if kind == "int":
        return f"({value})" if value >= -(2**63) + 1 else f"({value + 1} - 1)"
    if kind == "uint":
        return f"{value}u"
    if kind == "double":
        if math.isnan(value) or math.isinf(value):
            return f'double("{format_go_float(value)}")'
        return f"({value!r})"
    if kind == "string":
        return '"' + "".join(c if c.isalnum() or c in " ._-/:" else f"\\U{ord(c):08x}" for c in value) + '"'
    if kind == "bytes":
        return 'b"' + "".join(f"\\x{b:02x}" for b in value) + '"'
    if kind == "list":
        items = [literal(item) for item in value]
        written = [item for item in items if item is not None]
        return None if len(written) < len(items) else "[" + ", ".join(written) + "]"
    return None


def _offset(serialized: bytes, node_id: int) -> int:
    from gpudra.cel.checks import _payload, _positions

    return _positions(_payload(serialized)).get(node_id, 0)


def fold(node: Node) -> Constant | None:
    """The constant cel-go's planner makes of `node`, or None; raises ConversionError."""
    return _fold(node)


def conversion_problem(serialized: bytes) -> tuple[str, int] | None:
    """(message, offset in the checked text) of the first constant conversion cel-go's planner refuses, or None."""
    try:
        _fold(checked_syntax_tree(serialized))
    except ConversionError as error:
        return f"program instantiation failed: {error}", _offset(serialized, error.node_id)
    except RecursionError:
        return None
    return None


# ----- string.format validation ---------------------------------------------------------------------------
_STRING_CLAUSE_KINDS = ("list(", "map(", "int", "uint", "double", "bool", "string", "google.protobuf.Timestamp",
                        "bytes", "google.protobuf.Duration", "type(", "null_type")
_CLAUSE_KINDS = {
    "d": (("int", "uint"), "decimal clause can only be used on integers, was given {}"),
    "f": (("double", "string"), "fixed-point clause can only be used on doubles, was given {}"),
    "e": (("double", "string"), "scientific clause can only be used on doubles, was given {}"),
    "b": (("int", "uint", "bool"), "only integers and bools can be formatted as binary, was given {}"),
    "x": (("int", "uint", "string", "bytes"),
          "only integers, byte buffers, and strings can be formatted as hex, was given {}"),
    "o": (("int", "uint"), "octal clause can only be used on integers, was given {}"),
}
_CLAUSE_KINDS["X"] = _CLAUSE_KINDS["x"]
_STRING_CLAUSE_ERROR = ("string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, "
                        "durations, and timestamps, was given {}")


def _kind_matches(type_name: str, kinds: tuple[str, ...]) -> bool:
    if type_name == "dyn":
        return True
    return any(type_name.startswith(kind) if kind.endswith("(") else type_name == kind for kind in kinds)


def _string_clause_problem(node: Node, types: dict[int, str]) -> tuple[str, int] | None:
    type_name = types.get(node.id, "dyn")
    if not _kind_matches(type_name, _STRING_CLAUSE_KINDS):
        return _STRING_CLAUSE_ERROR.format(_go_type_name(type_name)), node.id
    if node.kind == "list":
        for element in node.args:
            problem = _string_clause_problem(element, types)
            if problem:
                return problem
    elif node.kind == "struct" and not node.value:
        for key, value in zip(node.keys, node.args):
            for part in (key, value):
                if part is not None:
                    problem = _string_clause_problem(part, types)
                    if problem:
                        return problem
    return None


def _go_type_name(type_name: str) -> str:
    """cel-go's TypeName(): the name without parameters."""
    return type_name.split("(", 1)[0]


def _format_problem(format_text: str, elements: list[Node], types: dict[int, str], call_id: int
                    ) -> tuple[str, int] | None:
    index, argument, requested = 0, 0, 0
    while index < len(format_text):
        if format_text[index] != "%":
            index += 1
            continue
        if index + 1 < len(format_text) and format_text[index + 1] == "%":
            index += 2
            continue
        requested += 1
        current = argument
        if index + 1 >= len(format_text):
            return "unexpected end of string", call_id
        if argument >= len(elements):
            return f"index {argument} out of range", call_id
        position = index + 1
        if format_text[position] == ".":
            position += 1
            start = position
            while position < len(format_text) and format_text[position].isascii() and format_text[position].isdigit():
                position += 1
            if position >= len(format_text):
                return ("could not parse formatting clause: error while parsing precision: "
                        "could not find end of precision specifier"), call_id
            if position == start:
                return ("could not parse formatting clause: error while parsing precision: error while converting "
                        'precision to integer: strconv.Atoi: parsing "": invalid syntax'), call_id
        clause = format_text[position]
        element = elements[current]
        if clause == "s":
            problem = _string_clause_problem(element, types)
            if problem:
                return "error during formatting: " + problem[0], problem[1]
        elif clause in _CLAUSE_KINDS:
            kinds, message = _CLAUSE_KINDS[clause]
            type_name = types.get(element.id, "dyn")
            if not _kind_matches(type_name, kinds):
                return "error during formatting: " + message.format(_go_type_name(type_name)), element.id
        else:
            return f'could not parse formatting clause: unrecognized formatting clause "{clause}"', call_id
        index = position + 1
        argument += 1
    if len(elements) > requested:
        return (f"too many arguments supplied to string.format (expected {requested}, got {len(elements)})",
                call_id)
    return None


def format_problem(serialized: bytes) -> tuple[str, int] | None:
    """(message, offset in the checked text) of the first `"<constant>".format([<list literal>])` cel-go's
    validator refuses."""
    from gpudra.cel.checks import _payload, _type_map
    from gpudra.cel.ast import walk

    types = _type_map(_payload(serialized))
    for node in walk(checked_syntax_tree(serialized)):
        if node.kind != "call" or node.value != "format" or node.target is None or len(node.args) != 1:
            continue
        if node.target.kind != "const" or node.target.literal != "string" or node.args[0].kind != "list":
            continue
        problem = _format_problem(str(node.target.value), node.args[0].args, types, node.id)
        if problem:
            return problem[0], _offset(serialized, problem[1])
    return None


# ----- string literals given to a conversion the API server does not check --------------------------------------
LITERAL_FUNCTIONS = frozenset({"quantity", "semver"})  # Kubernetes' library: an invalid literal fails at runtime


def string_literal_calls(serialized: bytes, functions: frozenset[str] = LITERAL_FUNCTIONS) -> tuple[
        tuple[str, str, int], ...]:
    """(function, argument, offset in the checked text) of each global call of one of `functions` on a string
    literal: `quantity("16GB")` compiles (cel-go folds only type conversions, interpreter/decorators.go
    decOptimize), and fails each evaluation."""
    found = []
    try:
        for node in walk(checked_syntax_tree(serialized)):
            if (node.kind == "call" and node.value in functions and node.target is None and node.args
                    and node.args[0].kind == "const" and isinstance(node.args[0].value, str)):
                found.append((str(node.value), node.args[0].value, _offset(serialized, node.args[0].id)))
    except (ValueError, IndexError, RecursionError):
        return ()
    return tuple(found)
