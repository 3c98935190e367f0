"""`all`/`exists`/`exists_one` loops that need more than cel-cpp's 10,000 iterations.

cel-cpp stops an evaluation after 10,000 comprehension iterations in all (cel-expr-python 0.1.3 cannot raise
the budget), while cel-go stops at a cost of 1,000,000, so nested loops such as
`lists.range(100).all(i, lists.range(150).all(j, i + j >= 0))` (15,000 iterations, a cost far below the
limit) are evaluated by Kubernetes. When an evaluation hits the budget and the whole expression is one such
macro, `R.all(x, BODY)`, the range R and then BODY for each element are evaluated as programs of their own
(each with the budget to itself), and the results combined as the macro does (cel-go parser/macro.go: `all`
is false at the first false, else the first error, else true; `exists` the converse; `exists_one` needs
exactly one true and no error). It is only tried for an expression whose cost estimate is within the limit
(so cel-go's actual cost is too); a range longer than the limit fails with it.

Such a macro elsewhere in an expression (`x && R.all(…)`), and `map`/`filter`, is *hoisted* (`evaluate_hoisted`):
every such call that reads no variable of an enclosing macro (it compiles on its own) is evaluated as above and
replaced by its outcome, `true`/`false`, a variable bound to its list, or a lookup that fails (mapped back to the
macro's error), and the rest evaluated with it (its outermost macro part by part again if need be). The
outcome is the same as evaluating in place: the macro is closed, and `&&`/`||`/`?:` absorb or propagate a
value and an error alike wherever it was computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cel_expr_python import cel

from gpudra.cel import list_cost
from gpudra.cel.source import apply_operations, receiver_start, tokenize, top_level_arguments

MACROS = ("all", "exists", "exists_one")
LIST_MACROS = ("map", "filter", "transformList")  # their outcome is a list: evaluated part by part only where hoisted
MAX_ITERATIONS = 1_000_000  # every iteration costs cel-go at least one unit of CELSelectorExpressionMaxCost


class OverLimit(Exception):
    """The loops need more iterations than cel-go's cost limit allows."""


@dataclass(frozen=True)
class Split:
    macro: str
    variable: str
    range_source: str
    body_source: str
    predicate_source: str | None = None  # map's filter: `R.map(x, P, BODY)`, `R.transformList(i, x, P, BODY)`
    index_variable: str | None = None  # transformList's first variable (the index; lists only)

    @property
    def variables(self) -> tuple[str, ...]:
        return (self.variable,) if self.index_variable is None else (self.index_variable, self.variable)


def split(runtime_source: str) -> Split | None:
    """The outermost macro of an evaluation text that is nothing but `R.<macro>(x, BODY)` (or `R.map(x, P, BODY)`),
    or None."""
    tokens = tokenize(runtime_source)
    if len(tokens) < 6 or tokens[-1].text != ")":
        return None
    for index in range(len(tokens) - 4, 0, -1):
        token = tokens[index]
        if token.text not in MACROS + LIST_MACROS or tokens[index - 1].text != "." or tokens[index + 1].text != "(":
            continue
        parsed = top_level_arguments(tokens, index + 1)
        if parsed is None or parsed[1] != len(tokens) - 1:
            continue  # an inner macro
        arguments = parsed[0]
        two_variables = token.text == "transformList"
        if len(arguments) - two_variables != 2 and not (token.text in ("map", "transformList")
                                                        and len(arguments) - two_variables == 3):
            return None
        names = arguments[: 1 + two_variables]
        if any(first != last or tokens[first].kind != "ident" for first, last in names):
            return None
        parts = [runtime_source[tokens[first].start : tokens[last].end] for first, last in arguments[len(names):]]
        return Split(token.text, tokens[names[-1][0]].text,
                     list_cost.unwrap(runtime_source[: tokens[index - 1].start]), parts[-1],
                     parts[0] if len(parts) == 2 else None, tokens[names[0][0]].text if two_variables else None)
    return None


@lru_cache(maxsize=64)
def _programs(runtime_source: str, bound: tuple[str, ...] = ()) -> tuple[Split, Any, Any, Any] | None:
    """The range and body programs of `R.macro(x, BODY)`; `bound`: the variables of enclosing macros."""
    from gpudra.cel.environment import runtime_env_with

    found = split(runtime_source)
    if found is None:
        return None
    try:
        range_program = runtime_env_with(*bound).compile(found.range_source)
        body_program = runtime_env_with(*bound, *found.variables).compile(found.body_source)
        predicate_program = None
        if found.predicate_source is not None:
            predicate_program = runtime_env_with(*bound, *found.variables).compile(found.predicate_source)
    except Exception:  # noqa: BLE001 - not a shape this fallback takes (e.g. R is not a whole operand)
        return None
    return found, range_program, body_program, predicate_program


def _value(result: Any) -> Any:
    if result.type() == cel.Type.ERROR or result.type() == cel.Type.UNKNOWN:
        return _Error(str(result.value()))
    try:
        return result.plain_value()
    except Exception:  # noqa: BLE001 - a value cel-expr-python cannot hand to Python
        return _Error("unsupported value")


@dataclass(frozen=True)
class _Error:
    message: str


class _Unsupported(Exception):
    """A value cel-expr-python cannot hand to Python (the fallback does not apply)."""


def _run(program: Any, data: dict[str, Any], source: str, bound: tuple[str, ...]) -> Any:
    """A value, or _Error; a program that needs more than the budget is evaluated part by part in turn."""
    try:
        value = _value(program.eval(data=data))
    except Exception as error:  # noqa: BLE001 - one body alone exceeded the budget
        if "Iteration budget exceeded" not in str(error):
            raise
        value = evaluate(source, data, bound)
        if value is None:
            raise OverLimit from None
        if isinstance(value, str):
            value = _Error(value)
    if isinstance(value, _Error) and value.message == "unsupported value":
        raise _Unsupported
    return value


def evaluate(runtime_source: str, data: dict[str, Any], bound: tuple[str, ...] = ()) -> bool | str | list[Any] | None:
    """The macro's outcome (True, False, a list for map/filter, or an error message), None when this fallback does
    not apply; raises OverLimit past cel-go's cost limit. `data`: the device's activation data (and `bound`, the
    values of the enclosing macros' variables). A body that needs more than the budget is evaluated the same way
    in turn."""
    programs = _programs(runtime_source, bound)
    if programs is None:
        return None
    found, range_program, body_program, predicate_program = programs
    try:
        elements = _value(range_program.eval(data=data))
    except Exception as error:  # noqa: BLE001 - the range alone exceeded the budget
        if "Iteration budget exceeded" in str(error):
            raise OverLimit from None
        raise
    if isinstance(elements, _Error):
        return elements.message
    if isinstance(elements, dict):
        if found.index_variable is not None:
            return None  # transformList over a map: not a shape this takes
        elements = list(elements)
    if not isinstance(elements, list):
        return None
    if len(elements) > MAX_ITERATIONS:
        raise OverLimit
    inner = (*bound, *found.variables)
    try:
        if found.macro in LIST_MACROS:
            return _list_macro(found, elements, data, inner, body_program, predicate_program)
        outcomes: list[Any] = []
        for element in elements:
            outcome = _run(body_program, {**data, found.variable: element}, found.body_source, inner)
            outcomes.append(outcome)
            if found.macro == "all" and outcome is False or found.macro == "exists" and outcome is True:
                return outcome
    except _Unsupported:
        return None
    errors = [outcome.message for outcome in outcomes if isinstance(outcome, _Error)]
    non_bool = [outcome for outcome in outcomes if not isinstance(outcome, (_Error, bool))]
    if non_bool:
        return "no such overload"
    if errors:
        return errors[0]
    if found.macro == "exists_one":
        return sum(1 for outcome in outcomes if outcome is True) == 1
    return found.macro == "all"


def _list_macro(found: Split, elements: list[Any], data: dict[str, Any], inner: tuple[str, ...], body_program: Any,
                predicate_program: Any) -> list[Any] | str:
    """map/filter (cel-go parser/macro.go: the accumulated list, or the first error: `+` does not absorb one)."""
    results = []
    for position, element in enumerate(elements):
        list_cost.charge_elements("filter" if found.macro == "filter" or predicate_program is not None else "map")
        element_data = {**data, found.variable: element}
        if found.index_variable is not None:
            element_data[found.index_variable] = position
        if predicate_program is not None:
            keep = _run(predicate_program, element_data, found.predicate_source or "", inner)
            if isinstance(keep, _Error):
                return keep.message
            if not isinstance(keep, bool):
                return "no such overload"
            if not keep:
                continue
        value = _run(body_program, element_data, found.body_source, inner)
        if isinstance(value, _Error):
            return value.message
        if found.macro == "filter":
            if not isinstance(value, bool):
                return "no such overload"
            if value:
                results.append(element)
        else:
            results.append(value)
    return results


_HOISTED_ERROR = "__gpudra_hoisted_error_"
_HOISTED_LIST = "__gpudra_hoisted_list_"


def _macro_spans(runtime_source: str) -> list[tuple[int, int]]:
    """Character spans of every `R.all(…)`/`R.exists(…)`/`R.exists_one(…)` call, outermost first."""
    tokens = tokenize(runtime_source)
    spans = []
    for index, token in enumerate(tokens):
        if token.text not in MACROS + LIST_MACROS or index < 2 or tokens[index - 1].text != "." or index + 1 >= len(tokens):
            continue
        if tokens[index + 1].text != "(":
            continue
        parsed = top_level_arguments(tokens, index + 1)
        start = receiver_start(tokens, index - 1)
        if parsed is None or start is None:
            continue
        spans.append((tokens[start].start, tokens[parsed[1]].end))
    return sorted(spans, key=lambda span: (span[0], -span[1]))


@lru_cache(maxsize=64)
def _compiled(runtime_source: str, variables: tuple[str, ...]) -> Any:
    from gpudra.cel.environment import runtime_env_with

    return runtime_env_with(*variables).compile(runtime_source)


def evaluate_hoisted(runtime_source: str, data: dict[str, Any]) -> bool | str | None:
    """The outcome with every closed macro evaluated part by part first; None when none applies; raises OverLimit
    past cel-go's cost limit."""
    operations: list[tuple[int, int, str]] = []
    errors: dict[str, str] = {}
    lists: dict[str, list[Any]] = {}
    covered_until, over_limit = -1, False
    for start, end in _macro_spans(runtime_source):
        if start < covered_until:
            continue  # inside a macro already replaced
        try:
            outcome = evaluate(runtime_source[start:end], data)
        except OverLimit:
            over_limit = True  # perhaps only cel-cpp's budget on this whole span: try the macros inside it
            continue
        if outcome is None:
            continue  # not closed (reads an enclosing macro's variable), or not a shape this takes
        if isinstance(outcome, bool):
            text = "true" if outcome else "false"
        elif isinstance(outcome, list):
            text = f"{_HOISTED_LIST}{len(lists)}"
            lists[text] = outcome
        else:
            key = f"{_HOISTED_ERROR}{len(errors)}"
            errors[key] = outcome
            text = f'dyn({{}})["{key}"]'
        operations.append((start, end, text))
        covered_until = end
    if not operations:
        if over_limit:
            raise OverLimit
        return None
    rest = apply_operations(runtime_source, operations).text
    try:
        program = _compiled(rest, tuple(lists))
    except Exception:  # noqa: BLE001 - the replacement does not compile in place: not a shape this takes
        return None
    try:
        result = _value(program.eval(data={**data, **lists}))
    except Exception as error:  # noqa: BLE001 - the rest alone exceeded the budget
        if "Iteration budget exceeded" not in str(error):
            raise
        # e.g. a hoisted map's list is the range of the outermost macro: that one part by part in turn
        outcome = evaluate(rest, {**data, **lists}, tuple(lists))
        if outcome is None:
            raise OverLimit from None
        result = _Error(outcome) if isinstance(outcome, str) else outcome
    if isinstance(result, _Error):
        return next((message for key, message in errors.items() if key in result.message), result.message)
    if isinstance(result, bool):
        return result
    return None
