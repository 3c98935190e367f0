"""Decide which MIG profiles a DRA device selector accepts, for the layout planner.

The planner asks "would this CEL selector match a 3g.40gb device?" for a handful of synthetic
devices. It uses a small interpreter for the part of the DRA CEL environment selectors
actually use — attribute and capacity lookups, `quantity()`/`semver()`, comparisons,
`compareTo`/`isGreaterThan`/`isLessThan`, `&&`, `||`, `!`, `in`, `+`/`-` on integers.
An expression outside that subset is reported as such (PlanError), never guessed at.
Errors while evaluating (a missing attribute, a type mismatch) make the selector not
match, as in the scheduler.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpudra.api.quantity import Quantity, QuantityError

try:
    from gpudra.api.semver import Semver, parse_semver
except ImportError:  # pragma: no cover - semver module is part of the api package
    Semver = None  # type: ignore[assignment,misc]
    parse_semver = None  # type: ignore[assignment]


class UnsupportedSelector(ValueError):
    """The expression uses CEL the planner's interpreter does not understand."""


class _EvalError(Exception):
    """A runtime CEL error: the selector does not match this device."""


_TOKEN = re.compile(r"""
    \s*(?:
      (?P<num>\d+)
    | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    | (?P<op>&&|\|\||==|!=|<=|>=|[<>!()\[\].,+\-])
    | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
    )""", re.VERBOSE)


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise UnsupportedSelector(f"cannot read {text[pos:pos + 20]!r}")
        pos = match.end()
        if match.group("num") is not None:
            out.append(("lit", int(match.group("num"))))
        elif match.group("str") is not None:
            out.append(("lit", bytes(match.group("str")[1:-1], "utf-8").decode("unicode_escape")))
        elif match.group("op") is not None:
            out.append(("op", match.group("op")))
        else:
            word = match.group("id")
            if word in ("true", "false"):
                out.append(("lit", word == "true"))
            elif word == "in":
                out.append(("op", "in"))
            else:
                out.append(("id", word))
    out.append(("end", None))
    return out


@dataclass
class _Parser:
    tokens: list[tuple[str, Any]]
    pos: int = 0

    def peek(self) -> tuple[str, Any]:
        return self.tokens[self.pos]

    def take(self, kind: str, value: Any = None) -> Any:
        tok = self.tokens[self.pos]
        if tok[0] != kind or (value is not None and tok[1] != value):
            raise UnsupportedSelector(f"expected {value or kind}, found {tok[1]!r}")
        self.pos += 1
        return tok[1]

    def accept(self, value: str) -> bool:
        if self.peek() == ("op", value):
            self.pos += 1
            return True
        return False

    def parse(self) -> tuple:
        node = self.or_()
        if self.peek()[0] != "end":
            raise UnsupportedSelector(f"unexpected {self.peek()[1]!r}")
        return node

    def or_(self) -> tuple:
        node = self.and_()
        while self.accept("||"):
            node = ("or", node, self.and_())
        return node

    def and_(self) -> tuple:
        node = self.rel()
        while self.accept("&&"):
            node = ("and", node, self.rel())
        return node

    def rel(self) -> tuple:
        node = self.add()
        tok = self.peek()
        if tok[0] == "op" and tok[1] in ("==", "!=", "<", "<=", ">", ">=", "in"):
            self.pos += 1
            node = ("cmp", tok[1], node, self.add())
        return node

    def add(self) -> tuple:
        node = self.unary()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take("op")
            node = ("arith", op, node, self.unary())
        return node

    def unary(self) -> tuple:
        if self.accept("!"):
            return ("not", self.unary())
        if self.accept("-"):
            return ("arith", "-", ("lit", 0), self.unary())
        return self.postfix()

    def postfix(self) -> tuple:
        node = self.primary()
        while True:
            if self.accept("."):
                name = self.take("id")
                if self.accept("("):
                    node = ("method", node, name, self.args())
                else:
                    node = ("field", node, name)
            elif self.accept("["):
                node = ("index", node, self.or_())
                self.take("op", "]")
            else:
                return node

    def args(self) -> list:
        items = []
        if not self.accept(")"):
            items.append(self.or_())
            while self.accept(","):
                items.append(self.or_())
            self.take("op", ")")
        return items

    def primary(self) -> tuple:
        kind, value = self.peek()
        if kind == "lit":
            self.pos += 1
            return ("lit", value)
        if kind == "id":
            self.pos += 1
            if self.accept("("):
                return ("call", value, self.args())
            return ("var", value)
        if self.accept("("):
            node = self.or_()
            self.take("op", ")")
            return node
        if self.accept("["):
            items = []
            if not self.accept("]"):
                items.append(self.or_())
                while self.accept(","):
                    items.append(self.or_())
                self.take("op", "]")
            return ("list", items)
        raise UnsupportedSelector(f"unexpected {value!r}")


_METHODS = frozenset({"compareTo", "isGreaterThan", "isLessThan", "asInteger", "add", "sub", "startsWith", "endsWith",
                      "contains", "matches"})
_FUNCTIONS = frozenset({"has", "quantity", "semver", "size"})


def _check(node: Any) -> None:
    if not isinstance(node, tuple):
        return
    kind = node[0]
    if kind == "call" and node[1] not in _FUNCTIONS:
        raise UnsupportedSelector(f"function {node[1]}() is not supported by the planner")
    if kind == "method" and node[2] not in _METHODS:
        raise UnsupportedSelector(f"method {node[2]}() is not supported by the planner")
    if kind == "var" and node[1] != "device":
        raise UnsupportedSelector(f"unknown variable {node[1]!r}")
    for child in node[1:]:
        if isinstance(child, tuple):
            _check(child)
        elif isinstance(child, list):
            for item in child:
                _check(item)


def compile_selector(expression: str) -> tuple:
    """Parse once; raises UnsupportedSelector for syntax outside the supported subset."""
    tree = _Parser(_tokens(expression)).parse()
    _check(tree)
    return tree


def _attribute_value(value: Any) -> Any:
    if not isinstance(value, dict) or len(value) != 1:
        raise _EvalError("malformed attribute")
    kind, raw = next(iter(value.items()))
    if kind == "version" and parse_semver is not None:
        return parse_semver(raw)
    return raw


def _domain_map(entries: dict[str, Any], driver: str, convert) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for name, value in entries.items():
        domain, _, short = name.rpartition("/")
        result.setdefault(domain or driver, {})[short] = convert(value)
    return result


def device_environment(device: dict[str, Any], driver: str) -> dict[str, Any]:
    """The `device` variable of the DRA CEL environment for a ResourceSlice device dict."""
    attributes = _domain_map(device.get("attributes", {}), driver, _attribute_value)
    capacity = _domain_map(device.get("capacity", {}), driver, lambda c: Quantity.parse(c["value"]))
    return {"driver": driver, "attributes": attributes, "capacity": capacity,
            "allowMultipleAllocations": bool(device.get("allowMultipleAllocations", False))}


def _compare(op: str, left: Any, right: Any) -> bool:
    if op == "in":
        if isinstance(right, (dict, list)):
            return left in right
        raise _EvalError("'in' needs a map or list")
    if type(left) is not type(right) and not (isinstance(left, int) and isinstance(right, int)):
        raise _EvalError("no such overload")
    if isinstance(left, bool) != isinstance(right, bool):
        raise _EvalError("no such overload")
    if op == "==":
        return left == right
    if op == "!=":
        return left != right
    if isinstance(left, Quantity):
        raise _EvalError("quantities compare with compareTo()")
    try:
        return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]
    except TypeError:
        raise _EvalError("no such overload") from None


def _method(target: Any, name: str, args: list[Any]) -> Any:
    if isinstance(target, Quantity):
        if name == "compareTo" and len(args) == 1 and isinstance(args[0], Quantity):
            return target.cmp(args[0])
        if name == "isGreaterThan" and len(args) == 1:
            return target.cmp(args[0]) > 0
        if name == "isLessThan" and len(args) == 1:
            return target.cmp(args[0]) < 0
        if name == "asInteger" and not args:
            value = target.as_int()
            if value is None:
                raise _EvalError("not an integer")
            return value
        if name in ("add", "sub") and len(args) == 1:
            return target.add(args[0]) if name == "add" else target.sub(args[0])
    if Semver is not None and isinstance(target, Semver) and name == "compareTo" and len(args) == 1:
        return target.compare(args[0])
    if isinstance(target, str) and len(args) == 1 and isinstance(args[0], str):
        if name == "startsWith":
            return target.startswith(args[0])
        if name == "endsWith":
            return target.endswith(args[0])
        if name == "contains":
            return args[0] in target
        if name == "matches":
            return re.search(args[0], target) is not None
    raise UnsupportedSelector(f"method {name}() is not supported by the planner")


def _evaluate(node: tuple, env: dict[str, Any]) -> Any:
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "list":
        return [_evaluate(item, env) for item in node[1]]
    if kind == "var":
        if node[1] not in env:
            raise UnsupportedSelector(f"unknown variable {node[1]!r}")
        return env[node[1]]
    if kind == "field" or kind == "index":
        target = _evaluate(node[1], env)
        key = node[2] if kind == "field" else _evaluate(node[2], env)
        if not isinstance(target, dict):
            raise _EvalError("not a map")
        if key not in target:
            raise _EvalError(f"no such key {key!r}")
        return target[key]
    if kind == "call":
        if node[1] == "has" and len(node[2]) == 1 and node[2][0][0] == "field":
            target = _evaluate(node[2][0][1], env)
            if not isinstance(target, dict):
                raise _EvalError("has() needs a map")
            return node[2][0][2] in target
        if node[1] not in ("quantity", "semver", "size"):
            raise UnsupportedSelector(f"function {node[1]}() is not supported by the planner")
        args = [_evaluate(a, env) for a in node[2]]
        if node[1] == "size" and len(args) == 1 and isinstance(args[0], (str, list, dict)):
            return len(args[0])
        if node[1] == "quantity" and len(args) == 1 and isinstance(args[0], str):
            try:
                return Quantity.parse(args[0])
            except QuantityError:
                raise _EvalError("bad quantity") from None
        if node[1] == "semver" and parse_semver is not None and args and isinstance(args[0], str):
            return parse_semver(args[0])
        raise UnsupportedSelector(f"function {node[1]}() is not supported by the planner")
    if kind == "method":
        target = _evaluate(node[1], env)
        return _method(target, node[2], [_evaluate(a, env) for a in node[3]])
    if kind == "not":
        value = _evaluate(node[1], env)
        if not isinstance(value, bool):
            raise _EvalError("! needs a bool")
        return not value
    if kind == "arith":
        left, right = _evaluate(node[2], env), _evaluate(node[3], env)
        if not (isinstance(left, int) and isinstance(right, int)) or isinstance(left, bool):
            raise _EvalError("arithmetic needs integers")
        return left + right if node[1] == "+" else left - right
    if kind == "cmp":
        return _compare(node[1], _evaluate(node[2], env), _evaluate(node[3], env))
    if kind in ("and", "or"):
        # CEL's logical operators absorb errors when the other side decides the result
        results = []
        for side in (node[1], node[2]):
            try:
                value = _evaluate(side, env)
                if not isinstance(value, bool):
                    raise _EvalError("logical operator needs bools")
                results.append(value)
            except _EvalError as exc:
                results.append(exc)
        decisive = False if kind == "and" else True
        if decisive in results:
            return decisive
        for value in results:
            if isinstance(value, _EvalError):
                raise value
        return not decisive
    raise UnsupportedSelector(f"unsupported expression node {kind}")


def selector_matches(compiled: tuple, device: dict[str, Any], driver: str) -> bool:
    try:
        return _evaluate(compiled, {"device": device_environment(device, driver)}) is True
    except _EvalError:
        return False
