"""A small declarative schema language for Kubernetes objects, and the walker that checks values against it.

A schema is a tree of `Type`s. `Struct` knows its fields, which of them are required, exactly-one-of groups,
extra checks (functions that see the whole value) and how to explain an unknown field. The walker reports every
problem it finds with the field path, never stopping at the first one.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from gpudra.plain import as_dict as as_dict, as_list as as_list  # re-exported: the checks read them from here
from gpudra.quantity import Quantity, QuantityError
from gpudra.api.problems import Severity

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def index(path: str, position: int) -> str:
    return f"{path}[{position}]"


def key(path: str, name: Any) -> str:
    return f"{path}[{name}]"


class Context:
    """Collects problems for one document. Checks record through `error` / `warning`."""

    def __init__(self, api_version: str = "", kind: str = "", **facts: Any):
        self.api_version = api_version
        self.kind = kind
        self.facts: dict[str, Any] = facts  # e.g. driver name of a ResourceSlice
        self.found: list[tuple[Severity, str, str, str | None]] = []  # (severity, path, message, fix)

    def error(self, path: str, message: str, fix: str | None = None) -> None:
        self.found.append(("error", path, message, fix))

    def warning(self, path: str, message: str, fix: str | None = None) -> None:
        self.found.append(("warning", path, message, fix))


Check = Callable[[Any, str, Context], None]
# Explains an unknown field: (field name, struct value, path of the struct, context) -> handled?
UnknownHint = Callable[[str, dict[str, Any], str, Context], bool]


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class Type:
    description = "value"

    def check(self, value: Any, path: str, ctx: Context) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    # Optionally, a predicate that is true only of values on which `check` would report nothing, much cheaper
    # than `check` (no path strings, no calls per field): MapOf skips such items. A big cluster repeats one
    # shape of map entry (a device attribute) hundreds of thousands of times, nearly always valid.
    quick_valid: Callable[[Any], bool] | None = None


@dataclass
class Str(Type):
    validators: tuple[Callable[[str], list[str]], ...] = ()
    enum: tuple[str, ...] | None = None
    max_len: int | None = None
    allow_empty: bool = True
    description: str = "string"

    def check(self, value: Any, path: str, ctx: Context) -> None:
        if not isinstance(value, str):
            ctx.error(path, f"must be a {self.description}, not {type_name(value)} {_short(value)}")
            return
        if self.enum is not None:
            if value not in self.enum:
                suggestion = _suggest(value, self.enum)
                ctx.error(path, f"unsupported value {value!r}; supported values: "
                          + ", ".join(repr(v) for v in self.enum) + suggestion)
            return
        if not value and not self.allow_empty:
            ctx.error(path, "must not be empty")
            return
        if self.max_len is not None:
            # The API server's limits are Go len(): UTF-8 bytes.
            size, unit = (len(value), "characters") if value.isascii() else (len(value.encode()), "bytes (UTF-8)")
            if size > self.max_len:
                ctx.error(path, f"must have at most {self.max_len} {unit} (has {size})")
        for validator in self.validators:
            for message in validator(value):
                ctx.error(path, message)


@dataclass
class Int(Type):
    minimum: int | None = None
    maximum: int | None = None
    description: str = "integer"

    def check(self, value: Any, path: str, ctx: Context) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            elif isinstance(value, str) and value.lstrip("-").isdigit():
                ctx.error(path, f"must be an integer, not the string {value!r}; remove the quotes")
                return
            else:
                ctx.error(path, f"must be an integer, not {type_name(value)} {_short(value)}")
                return
        if not INT64_MIN <= value <= INT64_MAX:
            ctx.error(path, f"{value} does not fit in a 64-bit integer")
            return
        if self.minimum is not None and value < self.minimum:
            ctx.error(path, f"must be greater than or equal to {self.minimum} (is {value})")
        if self.maximum is not None and value > self.maximum:
            ctx.error(path, f"must be less than or equal to {self.maximum} (is {value})")


@dataclass
class Bool(Type):
    description: str = "boolean"

    def check(self, value: Any, path: str, ctx: Context) -> None:
        if not isinstance(value, bool):
            hint = "; write true or false without quotes" if str(value).lower() in ("true", "false") else ""
            ctx.error(path, f"must be a boolean, not {type_name(value)} {_short(value)}{hint}")


@dataclass
class QuantityType(Type):
    non_negative: bool = False
    description: str = "quantity"

    def check(self, value: Any, path: str, ctx: Context) -> None:
        try:
            quantity = Quantity.parse(value)
        except QuantityError as exc:
            ctx.error(path, str(exc))
            return
        if self.non_negative and quantity.sign() < 0:
            ctx.error(path, f"must be greater than or equal to 0 (is {value})")


@dataclass
class AnyValue(Type):
    """Free-form content (opaque parameters, raw extensions); optionally limited in serialized size."""

    max_bytes: int | None = None
    must_be_object: bool = False
    description: str = "value"

    def check(self, value: Any, path: str, ctx: Context) -> None:
        if self.must_be_object and not isinstance(value, dict):
            ctx.error(path, f"must be an object, not {type_name(value)} {_short(value)}")
            return
        if self.max_bytes is not None:
            import json

            try:
                size = len(json.dumps(value, separators=(",", ":"), default=str))
            except (TypeError, ValueError):
                return
            if size > self.max_bytes:
                ctx.error(path, f"must be at most {self.max_bytes} bytes when serialized (is {size})")


@dataclass
class ListOf(Type):
    item: Type
    max_items: int | None = None
    min_items: int = 0
    unique_by: str | None = None  # field of the item that must be unique, e.g. "name"
    unique_items: bool = False
    description: str = "list"

    def check(self, value: Any, path: str, ctx: Context) -> None:
        if not isinstance(value, list):
            ctx.error(path, f"must be a list, not {type_name(value)} {_short(value)}")
            return
        if self.max_items is not None and len(value) > self.max_items:
            ctx.error(path, f"must have at most {self.max_items} items (has {len(value)})")
        if len(value) < self.min_items:
            ctx.error(path, "must not be empty" if self.min_items == 1 else f"must have at least {self.min_items} items")
        seen: dict[Any, int] = {}
        quick_valid = self.item.quick_valid
        for position, item in enumerate(value):
            if quick_valid is None or not quick_valid(item):
                self.item.check(item, index(path, position), ctx)
            marker: Any = None
            field_name = None  # the unique_by field the marker was read from
            if self.unique_by and isinstance(item, dict):
                marker, field_name = item.get(self.unique_by), self.unique_by
            elif self.unique_items and isinstance(item, (str, int)):
                marker = item
            if marker is not None and isinstance(marker, (str, int)) and not isinstance(marker, bool):
                if marker in seen:
                    if field_name is not None:
                        where, what = child(index(path, position), field_name), f"{field_name} {marker!r}"
                    else:
                        where, what = index(path, position), repr(marker)
                    ctx.error(where, f"duplicate {what} (already used by item {seen[marker]})")
                else:
                    seen[marker] = position


@functools.lru_cache(maxsize=65536)
def _key_problems(key_check: Callable[[str], list[str]], name: str) -> tuple[str, ...]:
    """Key checks are pure and a cluster repeats a few dozen attribute names over thousands of devices."""
    return tuple(key_check(name))


@dataclass
class MapOf(Type):
    value: Type
    key_check: Callable[[str], list[str]] | None = None
    max_items: int | None = None
    description: str = "map"

    def check(self, value: Any, path: str, ctx: Context) -> None:
        if not isinstance(value, dict):
            ctx.error(path, f"must be a map, not {type_name(value)} {_short(value)}")
            return
        if self.max_items is not None and len(value) > self.max_items:
            ctx.error(path, f"must have at most {self.max_items} entries (has {len(value)})")
        quick_valid, key_check = self.value.quick_valid, self.key_check
        for name, item in value.items():
            if quick_valid is not None and type(name) is str and quick_valid(item) and (
                key_check is None or not _key_problems(key_check, name)
            ):
                continue  # what the walk below would find nothing in
            item_path = key(path, name)
            if not isinstance(name, str):
                ctx.error(item_path, f"keys must be strings, not {type_name(name)}")
                continue
            if self.key_check is not None:
                for message in _key_problems(self.key_check, name):
                    ctx.error(item_path, message)
            self.value.check(item, item_path, ctx)


@dataclass
class F:
    """A field of a struct."""

    type: Type
    required: bool = False
    nullable: bool = True  # `field: null` is accepted as "not set" (as the API server's decoder does)


@dataclass
class Struct(Type):
    name: str
    fields: dict[str, F] = field(default_factory=dict)
    # Groups of fields of which exactly one (required=True) or at most one (required=False) is set.
    one_of: tuple[tuple[tuple[str, ...], bool], ...] = ()
    checks: tuple[Check, ...] = ()
    open: bool = False  # tolerate fields we do not model (core/apps kinds)
    # In one_of groups, does `false` mean "not set"? True for the node-selection flags of a slice
    # (allNodes: false selects nothing); False where false is a value (a bool attribute).
    false_is_unset: bool = False
    # In one_of groups, is `{}` set? True for unions of pointers to structs (`basic: {}` is a policy).
    empty_is_set: bool = False
    unknown_hints: tuple[UnknownHint, ...] = ()
    description: str = "object"

    def __post_init__(self) -> None:
        self._required = tuple(name for name, spec in self.fields.items() if spec.required)
        self._groups = tuple((group, frozenset(group), required) for group, required in self.one_of)

    def check(self, value: Any, path: str, ctx: Context) -> None:
        if not isinstance(value, dict):
            ctx.error(path, f"must be an object ({self.name}), not {type_name(value)} {_short(value)}")
            return
        for name, item in value.items():
            spec = self.fields.get(name) if isinstance(name, str) else None
            if spec is None:
                if not self.open:
                    self.unknown(str(name), value, path, ctx)
                continue
            if item is None and spec.nullable:
                continue
            spec.type.check(item, child(path, name), ctx)
        for name in self._required:
            if value.get(name) is None:
                ctx.error(child(path, name), "required field is missing")
        for group, members, required in self._groups:
            present = [n for n in value if n in members and (
                _is_set(value[n], self.false_is_unset) or (self.empty_is_set and value[n] == {}))]
            listing = ", ".join(group)
            if len(present) > 1:
                ctx.error(path, f"only one of {listing} may be set (found {', '.join(present)})")
            elif required and not present:
                if len(group) == 1:
                    ctx.error(child(path, group[0]), "required field is missing")
                else:
                    ctx.error(path, f"exactly one of {listing} must be set")
        for check in self.checks:
            try:
                check(value, path, ctx)
            except (TypeError, AttributeError, KeyError, ValueError):
                # Extra checks assume the shapes the schema walk has just reported on; malformed input
                # already has its problems listed, so a check that cannot run is skipped.
                continue

    def unknown(self, name: str, value: dict[str, Any], path: str, ctx: Context) -> None:
        for hint in self.unknown_hints:
            try:
                if hint(name, value, path, ctx):
                    return
            except (TypeError, AttributeError, KeyError, ValueError):
                continue  # a hint that cannot make sense of malformed input falls back to the plain message
        suggestion = _suggest(name, list(self.fields))
        ctx.error(child(path, name), f"unknown field in {self.name}{suggestion}")


def _is_set(value: Any, false_is_unset: bool = True) -> bool:
    if value is None or (value is False and false_is_unset):
        return False
    if isinstance(value, (list, dict)) and not value:
        return False
    return True


def _suggest(name: str, candidates: Iterable[str]) -> str:
    candidates = list(candidates)
    lowered = {c.lower().replace("-", "").replace("_", ""): c for c in candidates}
    normal = name.lower().replace("-", "").replace("_", "")
    if normal in lowered and lowered[normal] != name:
        return f"; did you mean {lowered[normal]!r}?"
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    if close:
        return f"; did you mean {close[0]!r}?"
    return ""


def suggest(name: str, candidates: Iterable[str]) -> str:
    return _suggest(name, candidates)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
