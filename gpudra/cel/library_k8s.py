"""Kubernetes CEL libraries implemented in Python on top of cel-expr-python: Quantity, Semver, the
Kubernetes `lists` functions, `includes`, regex `find`/`findAll` and cross-type numeric comparisons.

Runtime dispatch in cel-cpp is keyed on argument *kinds* and every message type has the same kind,
so a member function shared by Quantity and Semver (compareTo, isGreaterThan, isLessThan) has ONE
implementation that looks at the message type; the second overload is a declaration for the checker.
An exception raised here becomes a CEL error value (its message is what users see).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Callable

from cel_expr_python import cel

from gpudra.quantity import Quantity, QuantityError
from gpudra.resourcelimits import ATTRIBUTE_VALUES_PER_DEVICE
from gpudra.semver import SemverError, is_semver, parse_semver
from gpudra.cel import binding, source
from gpudra.cel import values as V
from gpudra.cel.budget import MAX_COST, charge, metered
from gpudra.cel.release import CelEnvironment

T = cel.Type
QUANTITY = T(V.QUANTITY_TYPE)
SEMVER = T(V.SEMVER_TYPE)
LIST_DYN = T.List(T.DYN)

_QUANTITY_FORMAT_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


def _overload(overload_id: str, result: Any, params: list[Any], impl: Callable[..., Any] | None = None,
              member: bool = True) -> Any:
    return binding.overload(overload_id, result, params, None if impl is None else metered(impl), member)


# ----- quantity ---------------------------------------------------------------------------------------
_QUANTITY_SHAPE = re.compile(r"[+-]?[0-9.]+[eEinumkKMGTP]*[-+]?[0-9]*")


def _quantity(text: str) -> Any:
    try:
        return V.parse_runtime_quantity(text)
    except QuantityError as error:
        # resource.ParseQuantity's three errors
        if not _QUANTITY_SHAPE.fullmatch(text):
            raise ValueError(_QUANTITY_FORMAT_ERROR) from None
        if "too large" in str(error):
            raise ValueError(str(error)) from None  # gpudra's bound, not one of ParseQuantity's errors
        if "suffix" in str(error):
            raise ValueError("unable to parse quantity's suffix") from None
        raise ValueError("unable to parse numeric part of quantity") from None


def _is_quantity(text: str) -> bool:
    try:
        V.parse_runtime_quantity(text)
    except QuantityError:
        return False
    return True


def _as_integer(message: Any) -> int:
    # Quantity.AsInt64 (k8s.io/apiserver v0.34.4 pkg/cel/library/quantity.go): the internal form, not the value
    value = V.quantity_of(message).as_int64()
    if value is None:
        raise ValueError("cannot convert value to integer")
    return value


def _add(message: Any, other: Any) -> Any:
    quantity = V.quantity_of(message)
    result = quantity.add(other) if isinstance(other, int) else quantity.add(V.quantity_of(other))
    return V.runtime_quantity(_check_quantity_range(result), pointer=True)


def _sub(message: Any, other: Any) -> Any:
    quantity = V.quantity_of(message)
    result = quantity.sub(other) if isinstance(other, int) else quantity.sub(V.quantity_of(other))
    return V.runtime_quantity(_check_quantity_range(result), pointer=True)


def _check_quantity_range(quantity: Quantity) -> Quantity:
    # resource.Quantity.Add/Sub never overflow: past int64 they continue in inf.Dec (arbitrary precision),
    # so sums near and beyond 2^63 stay exact (asInteger then fails: "cannot convert value to integer").
    # A selector cannot multiply, and the cost limit bounds the number of additions, so values stay small.
    return quantity


# ----- semver -----------------------------------------------------------------------------------------
@lru_cache(maxsize=1024)
def _semver_value(text: str, normalize: bool) -> Any:
    try:
        return V.runtime_semver(parse_semver(text, normalize))
    except SemverError as error:
        raise ValueError(str(error)) from None


def _semver(text: str) -> Any:
    return _semver_value(text, False)


def _semver_normalized(text: str, normalize: bool) -> Any:
    return _semver_value(text, bool(normalize))


# ----- shared ordering of Quantity and Semver -----------------------------------------------------------
def _compare(left: Any, right: Any) -> int:
    if V.is_runtime_quantity(left) and V.is_runtime_quantity(right):
        return V.quantity_of(left).cmp(V.quantity_of(right))
    if V.is_runtime_semver(left) and V.is_runtime_semver(right):
        return V.semver_of(left).compare(V.semver_of(right))
    raise ValueError("no such overload: compareTo")


# ----- Kubernetes lists library ------------------------------------------------------------------------
def cel_equal(left: Any, right: Any) -> bool:
    """CEL equality on converted Python values (bool is not a number; numbers compare across types)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(cel_equal(a, b) for a, b in zip(left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(cel_equal(left[k], right[k]) for k in left)
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    if V.is_runtime_quantity(left) and V.is_runtime_quantity(right):
        return V.quantity_of(left).cmp(V.quantity_of(right)) == 0
    if isinstance(left, (bytes, bytearray)) and isinstance(right, (bytes, bytearray)):
        return bytes(left) == bytes(right)
    if type(left) is not type(right):
        return False
    return bool(left == right)


def _sort_key(value: Any) -> Any:
    # Kubernetes' Semver and Quantity are not traits.Comparer: isSorted/min/max refuse them
    # (k8s.io/apiserver pkg/cel/library/lists.go)
    if V.is_runtime_quantity(value) or V.is_runtime_semver(value):
        raise ValueError("no such overload: list elements are not comparable")
    if hasattr(value, "DESCRIPTOR"):
        raise ValueError(f"no such overload: {value.DESCRIPTOR.full_name} is not comparable")
    if isinstance(value, (bytearray, bytes)):
        return bytes(value)
    if isinstance(value, (list, dict)) or value is None:
        raise ValueError(f"no such overload: {type(value).__name__} is not comparable")
    return value


def _comparable(values: Any) -> Any:
    keys = [_sort_key(value) for value in values]
    kinds = {("number" if isinstance(k, (int, float)) and not isinstance(k, bool) else type(k)) for k in keys}
    if len(kinds) > 1:
        raise ValueError("no such overload: list elements are not mutually comparable")
    return keys


def _is_sorted(values: Any) -> bool:
    keys = _comparable(values)
    return all(not keys[i + 1] < keys[i] for i in range(len(keys) - 1))


def _sum(values: Any) -> Any:
    if not values:
        return 0
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        # Quantity is no traits.Adder: a list of quantities has no sum (k8s.io/apiserver library/lists.go)
        raise ValueError("no such overload: sum() needs a list of numbers")
    if all(isinstance(v, int) for v in values):
        total = sum(values)
        if not -(2**63) <= total < 2**63:
            raise ValueError("integer overflow")
        return total
    return float(sum(values))


def _extreme(values: Any, pick_max: bool) -> Any:
    if not values:
        raise ValueError(f"{'max' if pick_max else 'min'} called on empty list")
    keys = _comparable(values)
    best = 0
    for index in range(1, len(values)):
        if (keys[index] > keys[best]) if pick_max else (keys[index] < keys[best]):
            best = index
    return values[best]


def _index_of(values: Any, item: Any) -> int:
    for index, value in enumerate(values):
        if cel_equal(value, item):
            return index
    return -1


def _last_index_of(values: Any, item: Any) -> int:
    for index in range(len(values) - 1, -1, -1):
        if cel_equal(values[index], item):
            return index
    return -1


MAX_ATTRIBUTE_VALUES = ATTRIBUTE_VALUES_PER_DEVICE  # includesFunc's bound: ResourceSliceMaxAttributeValuesPerDevice


def _includes(target: Any, item: Any) -> bool:
    """DRA's includesFunc (dynamic-resource-allocation cel/compile.go): a list includes an equal element (a list
    longer than an attribute may be is refused), any other value is compared with the argument."""
    if isinstance(target, (list, tuple)):
        for index, value in enumerate(target):
            if index >= MAX_ATTRIBUTE_VALUES:
                raise ValueError(
                    f"'includes' function cannot be applied to lists longer than {MAX_ATTRIBUTE_VALUES} values")
            if cel_equal(value, item):
                return True
        return False
    return cel_equal(target, item)


# ----- strings extension: indexOf/lastIndexOf with an offset (cel-go v0.26.0 ext/strings.go) -------------
def _offset_answer(text: str, needle: str, offset: int) -> int | None:
    """What both functions answer before searching: the offset for an empty needle, -1 past the end; None: search."""
    if needle == "":
        return offset
    if offset < 0:
        raise ValueError(f"index out of range: {offset}")
    return -1 if offset >= len(text) else None


def _index_of_offset(text: str, needle: str, offset: int) -> int:
    early = _offset_answer(text, needle, offset)
    return early if early is not None else text.find(needle, offset)


def _last_index_of_offset(text: str, needle: str, offset: int) -> int:
    early = _offset_answer(text, needle, offset)
    if early is not None:
        return early
    start = min(offset, len(text) - len(needle))
    return -1 if start < 0 else text.rfind(needle, 0, start + len(needle))


def _range_over_limit(count: int) -> int:
    charge(MAX_COST + 1)  # raises: the evaluation has exceeded the cost limit, whatever absorbs the error
    return count


# ----- map builders behind transformMap / transformMapEntry (see source.rewrite_map_transforms) -----
def _map_key(key: Any) -> Any:
    # Python would merge 1, 1.0 and True into one dict key; CEL keeps bool apart from numbers.
    return ("bool", key) if isinstance(key, bool) else key


def _map_from_entries(entries: Any) -> Any:
    result = {}
    seen = set()
    for key, value in entries:
        marker = _map_key(key)
        if marker in seen:
            raise ValueError(f"insert failed: key {key} already exists")
        seen.add(marker)
        result[key] = value
    return result


def _merge_maps(maps: Any) -> Any:
    result = {}
    seen = set()
    for entry in maps:
        for key, value in entry.items():
            marker = _map_key(key)
            if marker in seen:
                raise ValueError(f"insert failed: key {key} already exists")
            seen.add(marker)
            result[key] = value
    return result


# ----- regex find / findAll on RE2 (cel-cpp's own regex extension, so no backtracking blow-up) --------
_regex_env = None
_regex_program = None


def _regex_all(text: str, pattern: str) -> list[str]:
    global _regex_env, _regex_program
    if _regex_program is None:
        config = cel.NewEnvConfigFromYaml("extensions:\n  - name: optional\n  - name: regex\n")
        _regex_env = cel.NewEnv(config=config, variables={"s": T.STRING, "p": T.STRING})
        _regex_program = _regex_env.compile("regex.extractAll(s, p)")
    result = _regex_program.eval(data={"s": text, "p": whole_match_pattern(pattern)})
    if result.type() == T.ERROR:
        raise ValueError(_clean_regex_error(str(result.value())))
    return list(result.plain_value())


def _clean_regex_error(message: str) -> str:
    for prefix in ("INVALID_ARGUMENT: ", "UNKNOWN: "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    return message


@lru_cache(maxsize=512)
def whole_match_pattern(pattern: str) -> str:
    """Turn every capturing group into a non-capturing one and capture the whole pattern.

    regex.extractAll returns the single capture group when there is one; Kubernetes' find/findAll
    return the whole match, so the whole pattern becomes the only group.
    """
    out: list[str] = []
    index, in_class = 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            out.append(pattern[index : index + 2])
            index += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
        elif char == "[":
            in_class = True
            # a ']' right after '[' or '[^' is a literal
            out.append(char)
            index += 1
            if index < len(pattern) and pattern[index] == "^":
                out.append("^")
                index += 1
            if index < len(pattern) and pattern[index] == "]":
                out.append("]")
                index += 1
            continue
        elif char == "(":
            if pattern.startswith("(?P<", index) or pattern.startswith("(?<", index):
                end = pattern.find(">", index)
                if end > 0:
                    out.append("(?:")
                    index = end + 1
                    continue
            elif not pattern.startswith("(?", index):
                out.append("(?:")
                index += 1
                continue
        out.append(char)
        index += 1
    return "(" + "".join(out) + ")"


def _find(text: str, pattern: str) -> str:
    matches = _regex_all(text, pattern)
    return matches[0] if matches else ""


def _find_all(text: str, pattern: str) -> list[str]:
    return _regex_all(text, pattern)


def _find_all_limit(text: str, pattern: str, limit: int) -> list[str]:
    if limit == 0:
        return []
    matches = _regex_all(text, pattern)
    return matches if limit < 0 else matches[:limit]


_match_program = None


def validate_regex(pattern: str) -> str | None:
    """The RE2 error for a pattern, or None when it compiles."""
    global _match_program
    if _match_program is None:
        _match_program = cel.NewEnv(variables={"p": T.STRING}).compile('"".matches(p)')
    result = _match_program.eval(data={"p": pattern})
    if result.type() == T.ERROR:
        return _clean_regex_error(str(result.value()))
    return None


# ----- declarations -------------------------------------------------------------------------------------
def comparison_declarations() -> list[cel.FunctionDecl]:
    # The standard library's ordering operators are excluded in the environment config and
    # re-declared here with Kubernetes' CrossTypeNumericComparisons overloads. They are
    # declarations only: cel-cpp's runtime already compares int/uint/double across types.
    same_type = [T.INT, T.UINT, T.DOUBLE, T.STRING, T.BYTES, T.BOOL, T.TIMESTAMP, T.DURATION]
    cross = [(T.INT, T.DOUBLE), (T.DOUBLE, T.INT), (T.INT, T.UINT), (T.UINT, T.INT), (T.UINT, T.DOUBLE), (T.DOUBLE, T.UINT)]
    declarations = []
    for operator, name in (("_<_", "less"), ("_<=_", "less_equals"), ("_>_", "greater"), ("_>=_", "greater_equals")):
        overloads = [
            _overload(f"{name}_{t.name().lower()}", T.BOOL, [t, t], member=False) for t in same_type
        ] + [
            _overload(f"{name}_{a.name().lower()}_{b.name().lower()}", T.BOOL, [a, b], member=False) for a, b in cross
        ]
        declarations.append(cel.FunctionDecl(operator, overloads))
    return declarations


def declarations(runtime: bool = False, features: CelEnvironment = CelEnvironment()) -> list[cel.FunctionDecl]:
    """`runtime`: the evaluation environment, where quantities and versions are tagged strings; `features`:
    what the release offers (SemverLib v1's normalizing overloads, DRA's `includes`; gpudra.cel.release)."""
    bool_, int_, double, string = T.BOOL, T.INT, T.DOUBLE, T.STRING
    quantity, semver = (T.STRING, T.STRING) if runtime else (QUANTITY, SEMVER)
    normalizing = features.semver_normalize
    return [
        # quantity
        cel.FunctionDecl("quantity", [_overload("string_to_quantity", quantity, [string], _quantity, member=False)]),
        cel.FunctionDecl("isQuantity", [_overload("is_quantity_string", bool_, [string], _is_quantity, member=False)]),
        # Kubernetes declares sign as a global function (sign(q)), not as a method of Quantity.
        cel.FunctionDecl(
            "sign", [_overload("quantity_sign", int_, [quantity], lambda q: V.quantity_of(q).sign(), member=False)]
        ),
        cel.FunctionDecl("isInteger", [_overload("quantity_is_integer", bool_, [quantity], lambda q: V.quantity_of(q).as_int64() is not None)]),
        cel.FunctionDecl("asInteger", [_overload("quantity_get_integer", int_, [quantity], _as_integer)]),
        cel.FunctionDecl(
            "asApproximateFloat",
            [_overload("quantity_get_float", double, [quantity], lambda q: V.quantity_of(q).as_float())],
        ),
        cel.FunctionDecl(
            "add",
            [
                _overload("quantity_add", quantity, [quantity, quantity], _add),
                _overload("quantity_add_int", quantity, [quantity, int_], _add),
            ],
        ),
        cel.FunctionDecl(
            "sub",
            [
                _overload("quantity_sub", quantity, [quantity, quantity], _sub),
                _overload("quantity_sub_int", quantity, [quantity, int_], _sub),
            ],
        ),
        # semver
        cel.FunctionDecl(
            "semver",
            [
                _overload("string_to_semver", semver, [string], _semver, member=False),
            ] + ([_overload("string_bool_to_semver", semver, [string, bool_], _semver_normalized, member=False)]
                 if normalizing else []),
        ),
        cel.FunctionDecl(
            "isSemver",
            [
                _overload("is_semver_string", bool_, [string], is_semver, member=False),
            ] + ([_overload("is_semver_string_bool", bool_, [string, bool_], lambda s, n: is_semver(s, bool(n)),
                            member=False)] if normalizing else []),
        ),
        cel.FunctionDecl("major", [_overload("semver_major", int_, [semver], lambda v: V.semver_of(v).major)]),
        cel.FunctionDecl("minor", [_overload("semver_minor", int_, [semver], lambda v: V.semver_of(v).minor)]),
        cel.FunctionDecl("patch", [_overload("semver_patch", int_, [semver], lambda v: V.semver_of(v).patch)]),
        # Kubernetes lists library (element types are checked at runtime: the engine's checker
        # cannot bind type parameters to Python implementations)
        cel.FunctionDecl("isSorted", [_overload("list_is_sorted", bool_, [LIST_DYN], _is_sorted)]),
        cel.FunctionDecl("sum", [_overload("list_sum", T.DYN, [LIST_DYN], _sum)]),
        cel.FunctionDecl("min", [_overload("list_min", T.DYN, [LIST_DYN], lambda values: _extreme(values, False))]),
        cel.FunctionDecl("max", [_overload("list_max", T.DYN, [LIST_DYN], lambda values: _extreme(values, True))]),
        cel.FunctionDecl(
            "__gpudra_map_from_entries",
            [_overload("gpudra_map_from_entries", T.Map(T.DYN, T.DYN), [LIST_DYN], _map_from_entries)],
        ),
        cel.FunctionDecl(
            "__gpudra_merge_maps", [_overload("gpudra_merge_maps", T.Map(T.DYN, T.DYN), [LIST_DYN], _merge_maps)]
        ),
        cel.FunctionDecl(source.RANGE_OVER_LIMIT, [
            binding.overload("gpudra_range_over_limit", int_, [int_], _range_over_limit, False)]),
        cel.FunctionDecl(source.INDEX_OF_OFFSET, [
            _overload("gpudra_index_of_offset", int_, [string, string, int_], _index_of_offset)]),
        cel.FunctionDecl(source.LAST_INDEX_OF_OFFSET, [
            _overload("gpudra_last_index_of_offset", int_, [string, string, int_], _last_index_of_offset)]),
        # regex
        cel.FunctionDecl("find", [_overload("string_find_string", string, [string, string], _find)]),
        cel.FunctionDecl(
            "findAll",
            [
                _overload("string_find_all_string", T.List(string), [string, string], _find_all),
                _overload("string_find_all_string_int", T.List(string), [string, string, int_], _find_all_limit),
            ],
        ),
    ] + (_includes_declarations(runtime) if features.includes else [])


def _includes_declarations(runtime: bool) -> list[cel.FunctionDecl]:
    # One member overload on (dyn, dyn), as DRA declares it (dra_includes_dyn_dyn): membership for a list
    # attribute, equality for a scalar one (so a selector works whether a driver publishes `strings` or `string`).
    return [cel.FunctionDecl("includes", [_overload("dra_includes_dyn_dyn", T.BOOL, [T.DYN, T.DYN], _includes)])]


def ordering_declarations(runtime: bool = False) -> list[cel.FunctionDecl]:
    """Ordering shared by Quantity and Semver: one implementation, the Semver overload is a
    declaration only. These must be plain environment functions: an extension would register the
    declaration-only overload a second time and clash."""
    bool_, int_ = T.BOOL, T.INT
    quantity = T.STRING if runtime else QUANTITY

    def semver(overload_id: Any, result: Any) -> Any:  # declaration only; at runtime both are strings, one overload
        return [] if runtime else [_overload(overload_id, result, [SEMVER, SEMVER])]
    return [
        cel.FunctionDecl(
            "isGreaterThan",
            [
                _overload("quantity_is_greater_than", bool_, [quantity, quantity], lambda a, b: _compare(a, b) > 0),
            ]
            + semver("semver_is_greater_than", bool_),
        ),
        cel.FunctionDecl(
            "isLessThan",
            [
                _overload("quantity_is_less_than", bool_, [quantity, quantity], lambda a, b: _compare(a, b) < 0),
            ]
            + semver("semver_is_less_than", bool_),
        ),
        cel.FunctionDecl(
            "compareTo",
            [
                _overload("quantity_compare_to", int_, [quantity, quantity], _compare),
            ]
            + semver("semver_compare_to", int_),
        ),
    ]


def list_index_declarations() -> list[cel.FunctionDecl]:
    """indexOf/lastIndexOf on lists; merged into the strings extension's functions of the same name."""
    return [
        cel.FunctionDecl("indexOf", [_overload("list_index_of", T.INT, [LIST_DYN, T.DYN], _index_of)]),
        cel.FunctionDecl("lastIndexOf", [_overload("list_last_index_of", T.INT, [LIST_DYN, T.DYN], _last_index_of)]),
    ]
