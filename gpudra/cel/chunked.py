"""An outermost `all`/`exists`/`exists_one` whose loops need more than cel-cpp's 10,000 iterations.

cel-cpp stops an evaluation after 10,000 comprehension iterations in all (cel-expr-python 0.1.3 cannot raise
the budget), while cel-go stops at a cost of 1,000,000, so nested loops such as
`lists.range(100).all(i, lists.range(150).all(j, i + j >= 0))` (15,000 iterations, a cost far below the
limit) are evaluated by Kubernetes. When an evaluation hits the budget and the whole expression is one such
macro, `R.all(x, BODY)`, the range R and then BODY for each element are evaluated as programs of their own
(each with the budget to itself), and the results combined as the macro does (cel-go parser/macro.go: `all`
is false at the first false, else the first error, else true; `exists` the converse; `exists_one` needs
exactly one true and no error). It is only tried for an expression whose cost estimate is within the limit
(so cel-go's actual cost is too); a range longer than the limit fails with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cel_expr_python import cel

from gpudra.cel.source import tokenize, top_level_arguments

MACROS = ("all", "exists", "exists_one")
MAX_ITERATIONS = 1_000_000  # every iteration costs cel-go at least one unit of CELSelectorExpressionMaxCost


class OverLimit(Exception):
    """The loops need more iterations than cel-go's cost limit allows."""


@dataclass(frozen=True)
class Split:
    macro: str
    variable: str
    range_source: str
    body_source: str


def split(runtime_source: str) -> Split | None:
    """The outermost macro of an evaluation text that is nothing but `R.<macro>(x, BODY)`, or None."""
    tokens = tokenize(runtime_source)
    if len(tokens) < 6 or tokens[-1].text != ")":
        return None
    for index in range(len(tokens) - 4, 0, -1):
        token = tokens[index]
        if token.text not in MACROS or tokens[index - 1].text != "." or tokens[index + 1].text != "(":
            continue
        parsed = top_level_arguments(tokens, index + 1)
        if parsed is None or parsed[1] != len(tokens) - 1:
            continue  # an inner macro
        arguments = parsed[0]
        if len(arguments) != 2:
            return None
        variable = tokens[arguments[0][0]]
        if arguments[0][0] != arguments[0][1] or variable.kind != "ident":
            return None
        body = runtime_source[tokens[arguments[1][0]].start : tokens[arguments[1][1]].end]
        return Split(token.text, variable.text, runtime_source[: tokens[index - 1].start], body)
    return None


@lru_cache(maxsize=64)
def _programs(runtime_source: str) -> tuple[Split, Any, Any] | None:
    from gpudra.cel.environment import runtime_env, runtime_env_with

    found = split(runtime_source)
    if found is None:
        return None
    try:
        range_program = runtime_env().compile(found.range_source)
        body_program = runtime_env_with(found.variable).compile(found.body_source)
    except Exception:  # noqa: BLE001 - not a shape this fallback takes (e.g. R is not a whole operand)
        return None
    return found, range_program, body_program


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


def evaluate(runtime_source: str, data: dict[str, Any]) -> bool | str | None:
    """The macro's outcome (True, False, or an error message), None when this fallback does not apply; raises
    OverLimit past cel-go's cost limit. `data`: the device's activation data."""
    programs = _programs(runtime_source)
    if programs is None:
        return None
    found, range_program, body_program = programs
    try:
        elements = _value(range_program.eval(data=data))
    except Exception as error:  # noqa: BLE001 - the range alone exceeded the budget
        if "Iteration budget exceeded" in str(error):
            raise OverLimit from None
        raise
    if isinstance(elements, _Error):
        return elements.message
    if isinstance(elements, dict):
        elements = list(elements)
    if not isinstance(elements, list):
        return None
    if len(elements) > MAX_ITERATIONS:
        raise OverLimit
    outcomes: list[Any] = []
    for element in elements:
        try:
            outcome = _value(body_program.eval(data={**data, found.variable: element}))
        except Exception as error:  # noqa: BLE001 - one body alone exceeded the budget
            if "Iteration budget exceeded" in str(error):
                raise OverLimit from None
            raise
        outcomes.append(outcome)
        if found.macro == "all" and outcome is False or found.macro == "exists" and outcome is True:
            return outcome
    errors = [outcome.message for outcome in outcomes if isinstance(outcome, _Error)]
    non_bool = [outcome for outcome in outcomes if not isinstance(outcome, (_Error, bool))]
    if non_bool:
        return "no such overload"
    if errors:
        return errors[0]
    if found.macro == "exists_one":
        return sum(1 for outcome in outcomes if outcome is True) == 1
    return found.macro == "all"
