"""List-building macros and sorts: charged as cel-go's cost tracker charges them, and kept out of cel-cpp past a length.

cel-cpp (as cel-expr-python 0.1.3 configures it, without `enable_comprehension_list_append`) builds the list of a
`map`/`filter`/`transformList` by copying its accumulator on every iteration into the evaluation's arena, which is
freed only when the evaluation ends: n iterations cost n²/2 element copies. `lists.range(9000).map(i, i)` took 3.4 s
and 870 MB, and the 60-byte `lists.range(30000).map(i, string(i)).join("").size() > 0` 4 s and 1.6 GB before
cel-cpp's 10,000-iteration budget stopped it, where cel-go (which appends in place) needs 1.4 s and 28 MB.

So in the evaluation text every such macro's range (and every `sort()`/`distinct()`/`sortBy` receiver) is wrapped:

    R.map(x, B)  ->  cel.bind(__gpudra_r, R, __gpudra_list_cost(size(__gpudra_r), KIND)
                              ? (<a loop past cel-cpp's iteration budget> ? __gpudra_r : __gpudra_r) : __gpudra_r).map(x, B)

`__gpudra_list_cost` charges the evaluation's meter (gpudra.cel.budget) what cel-go's tracker charges at least for
the macro over a range of that length, measured with k8s/cmd/cel-oracle (cel-go v0.26.0, k8s.io/dynamic-resource-
allocation v0.34.4): 13 per element appended by `map` (the accumulator, the one-element list, the `+`), at least 1
per element a `filter` tests, 2n² for `sort()`, `distinct()` and `sortBy` (Kubernetes' cost of comparing every
pair) plus 13n for `sortBy`'s keys. Over the limit, the charge ends the evaluation with cel-go's cost error, whatever `||`/`&&` absorb.
Past BUILD_IN_ONE_GO elements a list-building macro answers true, and the loop that follows spends cel-cpp's
iteration budget: the evaluation aborts at once, and gpudra.cel.chunked builds the list element by element in
Python (linear), charging the same per element (`charge_elements`). The body's own cost is not charged: the charge is
a lower bound of cel-go's actual cost, so gpudra never stops an evaluation that cel-go finishes, and an expression
whose bodies are costly may still run where cel-go stops (README, known differences).
"""

from __future__ import annotations

import re

from cel_expr_python import cel

from gpudra.cel import binding, budget
from gpudra.cel.source import Rewritten, Token, apply_operations, receiver_start, tokenize, top_level_arguments

BUILD_IN_ONE_GO = 200  # cel-cpp's arena holds n²/2 copied elements (about 0.6 MB at 200; 32 MB for all its 10,000 iterations)
FUNCTION = "__gpudra_list_cost"
VARIABLE = "__gpudra_r"
# Two-variable `all` over more elements than cel-cpp's budget: it never stops early, builds nothing, and is no
# `R.macro(x, BODY)` that gpudra.cel.chunked would take apart.
_SPEND_BUDGET = "lists.range(10001).all(__gpudra_i, __gpudra_v, true)"

MAP, FILTER, SORT, SORT_BY = 0, 1, 2, 3
_KINDS = {"map": MAP, "filter": FILTER, "transformList": FILTER, "sort": SORT, "sortBy": SORT_BY, "distinct": SORT}
APPEND_COST = 13  # cel-go per element a map appends: map(i, i) costs 14 per element, 1 of them the body

_WRAPPED = re.compile(
    rf"^cel\.bind\({VARIABLE}, (?P<range>.*), {FUNCTION}\(size\({VARIABLE}\), \d+\) \? "
    rf"\({re.escape(_SPEND_BUDGET)} \? {VARIABLE} : {VARIABLE}\) : {VARIABLE}\)$",
    re.DOTALL,
)


def _kind(tokens: list[Token], index: int) -> int | None:
    """The charge kind of the call at token `index` (`R.name(…)`), or None."""
    kind = _KINDS.get(tokens[index].text)
    if kind is None or index < 2 or tokens[index - 1].text != "." or index + 1 >= len(tokens):
        return None
    if tokens[index + 1].text != "(":
        return None
    parsed = top_level_arguments(tokens, index + 1)
    if parsed is None:
        return None
    arguments = len(parsed[0])
    if kind == SORT and arguments != 0 or kind == SORT_BY and arguments != 2:
        return None
    if kind == MAP and arguments == 3:
        return FILTER  # map with a filter: only the kept elements are appended
    if tokens[index].text == "transformList" and arguments == 3:
        return MAP
    return kind


def wrap_ranges(source: str) -> Rewritten:
    """Every list-building macro's range and sort receiver wrapped as the module docstring says."""
    tokens = tokenize(source)
    operations: list[tuple[int, int, str]] = []
    for index, token in enumerate(tokens):
        if token.text not in _KINDS:
            continue
        kind = _kind(tokens, index)
        start = receiver_start(tokens, index - 1) if kind is not None else None
        if kind is None or start is None:
            continue
        operations.append((tokens[start].start, tokens[start].start, f"cel.bind({VARIABLE}, "))
        operations.append((tokens[index - 1].start, tokens[index - 1].start,
                           f", {FUNCTION}(size({VARIABLE}), {kind}) ? ({_SPEND_BUDGET} ? {VARIABLE} : {VARIABLE})"
                           f" : {VARIABLE})"))
    return apply_operations(source, operations)


def unwrap(range_source: str) -> str:
    """A macro's range as the user wrote it (without wrap_ranges' wrapper, for gpudra.cel.chunked)."""
    match = _WRAPPED.match(range_source)
    return match.group("range") if match else range_source


def charge(length: int, kind: int) -> bool:
    """Charge cel-go's cost of a macro or sort over `length` elements; True: too long to build in one go."""
    if kind == SORT or kind == SORT_BY:
        budget.charge(2 * length * length + (APPEND_COST * length if kind == SORT_BY else 0))
        return False
    budget.charge(length * (APPEND_COST if kind == MAP else 1))
    return length > BUILD_IN_ONE_GO


def charge_elements(macro: str, count: int = 1) -> None:
    """What gpudra.cel.chunked charges per element it appends (`map`) or tests (`filter`)."""
    budget.charge(count * (APPEND_COST if macro == "map" else 1))


def declarations() -> list[cel.FunctionDecl]:
    return [cel.FunctionDecl(FUNCTION, [binding.overload(
        "gpudra_list_cost", cel.Type.BOOL, [cel.Type.INT, cel.Type.INT], charge, False)])]
