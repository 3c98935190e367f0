"""A chain of `cel.bind` deeper than cel-cpp's parser allows, checked and evaluated one binding at a time.

`cel.bind(a0, E0, cel.bind(a1, E1, … cel.bind(aN, EN, BODY)))`: every binding nests the rest, so a chain of 31
bindings passes cel-cpp's parser recursion limit of 32 (as cel-expr-python 0.1.3 builds it), while cel-go's parser
(v0.26.0 parser/parser.go, limit 250; Kubernetes sets no parser option) accepts 240 (checked with
k8s/cmd/cel-oracle: 240 bindings evaluate, 260 are "expression recursion limit exceeded"). No text rewrite can
flatten it (each binding reads the ones before), so such a chain, when the whole expression is one and cel-cpp's
parser refuses it, is taken apart:

- checking: each Ei is checked in the checking environment with a0…a(i-1) declared with the types the checker gave
  their expressions, then BODY; the result type is checked as for any selector;
- evaluation: each Ei is evaluated with the values before it (a binding whose expression failed is left out, and a
  read of it is reported with that failure: cel-go binds lazily, so a failure matters only where it is read and not
  absorbed by `||`/`&&`), then BODY.

Each part goes through gpudra.cel.adaptation.adapt like a whole selector; a part that needs more than cel-cpp's
iteration budget fails with the cost limit's error (gpudra.cel.chunked does not take parts of a chain apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from cel_expr_python import cel

from gpudra.cel.adaptation import adapt
from gpudra.cel.source import GO_MAX_RECURSION, tokenize, top_level_arguments

MIN_CHAIN = 8  # shorter chains parse in cel-cpp (the limit is reached by what they contain)


@dataclass(frozen=True)
class Chain:
    names: tuple[str, ...]
    initializers: tuple[str, ...]
    body: str


def split(expression: str) -> Chain | None:
    """The chain the whole expression is, or None."""
    tokens = tokenize(expression)
    names: list[str] = []
    initializers: list[str] = []
    index, end = 0, len(tokens) - 1
    while index + 3 <= end and [t.text for t in tokens[index : index + 4]] == ["cel", ".", "bind", "("]:
        parsed = top_level_arguments(tokens, index + 3)
        if parsed is None or parsed[1] != end or len(parsed[0]) != 3:
            break
        (name_first, name_last), (init_first, init_last), (body_first, _) = parsed[0]
        if name_first != name_last or tokens[name_first].kind != "ident":
            break
        names.append(tokens[name_first].text)
        initializers.append(expression[tokens[init_first].start : tokens[init_last].end])
        index, end = body_first, end - 1
    if len(names) < MIN_CHAIN or len(names) > GO_MAX_RECURSION:
        return None
    body = expression[tokens[index].start : tokens[end].end]
    return Chain(tuple(names), tuple(initializers), body)


def check(chain: Chain, new_env: Callable[[tuple[tuple[str, Any], ...]], Any], on_part: Callable[[str, Any], None]) -> Any:
    """Checks each part (the bindings' expressions, then BODY) and hands it to `on_part(text, checked)`; returns
    BODY's checked expression. `new_env(variables)` makes a checking environment with the given typed variables (a
    binding typed `google.protobuf.Any` is declared `dyn`: cel-go's `any` is assignable to every parameter, cel-cpp's
    is not). Raises the checker's error (its text names the part's own line and column)."""
    types: list[cel.Type] = []
    checked = None
    for position, part in enumerate((*chain.initializers, chain.body)):
        env = new_env(tuple(zip(chain.names[:position], types)))
        checked = env.compile(adapt(part).text)
        on_part(part, checked)
        result_type = checked.return_type()
        # (cel-expr-python hands `google.protobuf.Any` back as ERROR)
        unrepresented = result_type == cel.Type.ERROR or "google.protobuf.Any" in str(result_type)
        types.append(cel.Type.DYN if unrepresented else result_type)
    return checked


@dataclass(frozen=True)
class _Failed:
    message: str


class ChainProgram:
    """Evaluates a checked chain part by part (see the module docstring)."""

    def __init__(self, chain: Chain, env: cel.Env):
        self.chain = chain
        self._initializers = [env.compile(adapt(text, runtime=True).text) for text in chain.initializers]
        self._body = env.compile(adapt(chain.body, runtime=True).text)

    def evaluate(self, data: dict[str, Any]) -> bool | str:
        """The outcome: a bool, or a runtime error message."""
        values: dict[str, Any] = {}
        failures: dict[str, str] = {}
        for name, program in zip(self.chain.names, self._initializers):
            value = _value(program.eval(data={**data, **values}), failures)
            if isinstance(value, _Failed):
                failures[name] = value.message
                values.pop(name, None)  # an outer binding of the same name is hidden by this one
            else:
                values[name] = value
                failures.pop(name, None)
        outcome = _value(self._body.eval(data={**data, **values}), failures)
        if isinstance(outcome, _Failed):
            return outcome.message
        if outcome is True or outcome is False:
            return outcome
        return "no such overload"


def _value(result: Any, failures: dict[str, str]) -> Any:
    if result.type() == cel.Type.ERROR or result.type() == cel.Type.UNKNOWN:
        message = str(result.value())
        for name, failure in failures.items():
            if f"'{name}'" in message or f'"{name}"' in message:
                return _Failed(failure)  # the read of a binding whose expression failed
        return _Failed(message)
    try:
        return result.plain_value()
    except Exception:  # noqa: BLE001 - a value cel-expr-python cannot hand to Python
        return _Failed("unsupported value")
