"""Compile a device selector once, evaluate it on many devices."""

from __future__ import annotations

import re
from dataclasses import astuple
from functools import lru_cache
from typing import Any

from cel_expr_python import cel

from gpudra.cel import bind_chain, binding, budget, checks, chunked, constants, guards
from gpudra.cel import cost as cost_model
from gpudra.cel.device import DeviceInput
from gpudra.cel.environment import checking_env, checking_env_with, runtime_env, runtime_env_with
from gpudra.cel.errors import CELCompileError, CELRuntimeError
from gpudra.cel.reads import device_reads
from gpudra.cel.release import CelEnvironment, cel_environment
from gpudra.cel.adaptation import adapt
from gpudra.cel.source import (Rewritten, apply_operations, caret_report, line_column, offset_of, tokenize,
                               top_level_arguments)

MAX_EXPRESSION_BYTES = 10 * 1024  # CELSelectorExpressionMaxLength
MAX_COST = budget.MAX_COST  # CELSelectorExpressionMaxCost, also the runtime CostLimit

_ISSUE = re.compile(r"ERROR: <input>:(\d+):(\d+): ([^\n]*)")
_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r"\s*\[[A-Z_]+\]\s*$")
_TYPE_WORDS = {
    "INT": "int", "UINT": "uint", "DOUBLE": "double", "STRING": "string", "BYTES": "bytes", "BOOL": "bool",
    "NULL": "null_type", "DYN": "dyn", "TIMESTAMP": "google.protobuf.Timestamp",
    "DURATION": "google.protobuf.Duration", "ERROR": "*error*", "UNKNOWN": "*unknown*",
}


def cel_type_name(cel_type: cel.Type) -> str:
    """cel-go's spelling of a type: list(int), map(string, dyn), optional_type(int)."""
    text = str(cel_type)
    text = re.sub(r"\b(LIST|MAP|TYPE)<", lambda m: m.group(1).lower() + "(", text)
    text = text.replace("optional_type<", "optional_type(").replace(">", ")")
    return re.sub(r"\b[A-Z]+\b", lambda m: _TYPE_WORDS.get(m.group(), m.group()), text)


def _clean_compile_message(message: str) -> str:
    message = _STATUS_SUFFIX.sub("", message)
    # cel-go does not name the struct in this message
    return re.sub(r"(undefined field '[^']*') not found in struct '[^']*'", r"\1", message)


def clean_runtime_message(message: str) -> str:
    message = _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", str(message).strip()))
    match = re.match(r'Key not found in map ?: ?"?(.*?)"?$', message)
    if match:
        return f"no such key: {match.group(1)}"
    if message.startswith("No matching overloads found"):
        return "no such overload" + message[len("No matching overloads found"):].replace(" :", ":", 1)
    if message == "divide by zero":
        return "division by zero"
    return message


def _aborted_message(message: str) -> str:
    if "Iteration budget exceeded" in message:
        # cel-cpp stops after 10,000 comprehension iterations per evaluation; Kubernetes' limit is
        # a cost of 1,000,000. Both are the runtime limit, reported the way cel-go reports its own.
        return "operation cancelled: actual cost limit exceeded (more than 10000 comprehension iterations)"
    return clean_runtime_message(message)


class Selector:
    """A compiled selector. `evaluate(device_input)` returns a bool or raises CELRuntimeError."""

    __slots__ = ("expression", "environment", "estimated_cost", "runtime_bound", "reads", "refused", "_program",
                 "_env", "_key", "_runtime_source", "literal_calls")

    def __init__(self, expression: str, environment: CelEnvironment, program: Any, estimated_cost: int,
                 reads: tuple[tuple[str, ...], ...] | None = None, stored: bool = False, refused: bool = False,
                 runtime_source: str = "", runtime_bound: int | None = None,
                 literal_calls: tuple[tuple[str, str, int], ...] = ()):
        self.expression = expression
        # (function, string literal, offset in `expression`) of each `quantity("…")`/`semver("…")`: the API server
        # accepts any literal there, `gpudra validate` checks them (gpudra.api.schema.cel_check)
        self.literal_calls = literal_calls
        self.environment = environment
        # cel-go's estimate (gpudra.cel.estimate); over MAX_COST only for a stored expression (see compile_selector).
        self.estimated_cost = estimated_cost
        # The smaller of cel-go's estimate and gpudra's own bound (gpudra.cel.cost.bound): both are upper bounds of
        # the actual cost, so within the limit means cel-go's evaluation cannot be stopped by it.
        self.runtime_bound = estimated_cost if runtime_bound is None else min(estimated_cost, runtime_bound)
        # An expression over gpudra's bound that could grow values without bound is not started: it
        # fails as the runtime cost limit would stop it. Others run, bounded by cel-cpp's iteration budget,
        # the metered Python functions and the clamped lists.range (source.rewrite_range_bounds).
        self.refused = refused
        self._runtime_source = runtime_source  # the text cel-cpp evaluates (gpudra.cel.chunked splits it)
        # What of the device the expression reads (gpudra.cel.reads; None: it may read anything): devices alike
        # in these places (gpudra.cel.device.device_projection) get the same outcome.
        self.reads = reads
        self._program = program
        self._env = runtime_env()
        # a plain tuple: hashed on every memo lookup, where a dataclass would hash through Python code
        self._key = (expression, astuple(environment), stored)

    @property
    def consumable_capacity(self) -> bool:
        return self.environment.multiple_allocations

    def evaluate(self, device: DeviceInput, deadline: float | None = None) -> bool:
        """`deadline`: a time.monotonic() instant (the search's); past it, EvaluationDeadlineExceeded."""
        outcome = device.results.get(self._key)
        if outcome is None:
            outcome = device.results[self._key] = self._evaluate(device, deadline)
        if outcome is True or outcome is False:
            return outcome
        raise CELRuntimeError(outcome, self.expression)

    def _evaluate(self, device: DeviceInput, deadline: float | None) -> bool | str:
        """The result, or the runtime error message (a passed deadline raises: it is no outcome)."""
        try:
            return self._evaluate_or_raise(device, deadline)
        except CELRuntimeError as error:
            return error.message

    def _evaluate_or_raise(self, device: DeviceInput, deadline: float | None) -> bool:
        if device.error is not None:
            raise CELRuntimeError(device.error, self.expression)
        if self.refused:
            raise CELRuntimeError(_aborted_message("Iteration budget exceeded"), self.expression)
        if isinstance(self._program, bind_chain.ChainProgram):
            return self._evaluate_chain(self._program, device, deadline)
        with budget.evaluation(deadline) as meter:
            try:
                result = self._program.eval(device.activation(self._env))
            except Exception as error:  # noqa: BLE001 - cel-cpp aborts (iteration budget) raise instead of returning
                outcome = self._chunked(str(error), device, meter)
                limit_error = budget.outcome(meter)
                if limit_error is not None:
                    raise CELRuntimeError(limit_error, self.expression) from None
                if outcome is True or outcome is False:
                    return outcome
                raise CELRuntimeError(outcome or _aborted_message(str(error)), self.expression) from None
            finally:
                binding.settle()  # the references cel-expr-python kept from this evaluation's Python calls
        limit_error = budget.outcome(meter)  # an error inside `||`/`&&` may have been absorbed
        if limit_error is not None:
            raise CELRuntimeError(limit_error, self.expression)
        try:
            value = result.value()
        except Exception:  # noqa: BLE001 - a value cel-expr-python cannot hand to Python
            value = None
        if value is True or value is False:
            return value
        result_type = result.type()
        if result_type == cel.Type.ERROR or result_type == cel.Type.UNKNOWN:
            raise CELRuntimeError(clean_runtime_message(value), self.expression)
        raise CELRuntimeError(
            f"CEL result of type {cel_type_name(result_type)} could not be converted to bool", self.expression
        )

    def _evaluate_chain(self, program: bind_chain.ChainProgram, device: DeviceInput, deadline: float | None) -> bool:
        with budget.evaluation(deadline) as meter:
            try:
                outcome = program.evaluate(device.data)
            except Exception as error:  # noqa: BLE001 - a part aborted (cel-cpp's iteration budget)
                outcome = _aborted_message(str(error))
            finally:
                binding.settle()
        limit_error = budget.outcome(meter)
        if limit_error is not None:
            raise CELRuntimeError(limit_error, self.expression)
        if outcome is True or outcome is False:
            return outcome
        raise CELRuntimeError(clean_runtime_message(outcome), self.expression)

    def _chunked(self, error: str, device: DeviceInput, meter: budget.Meter) -> bool | str | None:
        """The outcome of the expression's macros evaluated part by part after cel-cpp's iteration budget stopped
        the whole (gpudra.cel.chunked: the outermost macro, else every closed one); None when that does not apply."""
        if "Iteration budget exceeded" not in error or meter.aborted is not None:
            return None
        if self.runtime_bound > MAX_COST and "__gpudra_list_cost" not in self._runtime_source:
            return None
        budget.restart(meter)  # the parts evaluate the whole again, charging as they go
        try:
            try:
                outcome = chunked.evaluate(self._runtime_source, device.data)
            except chunked.OverLimit:
                outcome = None  # perhaps only cel-cpp's budget on a part: the macros inside it may be closed
            if outcome is None:
                outcome = chunked.evaluate_hoisted(self._runtime_source, device.data)
        except chunked.OverLimit:
            return None
        except Exception:  # noqa: BLE001 - a part aborted otherwise: the original error stands
            return None
        finally:
            binding.settle()
        if isinstance(outcome, str):
            return clean_runtime_message(outcome)
        return outcome if isinstance(outcome, bool) else None

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"


def _first_segment_of_qualified_name(expression: str, message: str, offset: int) -> tuple[str, int]:
    """cel-cpp reports `undeclared reference to 'a.b.c'` at the last dot; cel-go reports 'a' where it starts."""
    match = re.fullmatch(r"undeclared reference to '([^']+)' (\(in container '[^']*'\))", message)
    if not match or "." not in match.group(1):
        return message, offset
    name = match.group(1)
    start = offset - len(name.rsplit(".", 1)[0])
    if start >= 0 and expression[start : start + len(name)] == name:
        first = name.split(".", 1)[0]
        return f"undeclared reference to '{first}' {match.group(2)}", start
    return message, offset


def _compile_error(expression: str, rewritten: Rewritten, raw: str) -> CELCompileError:
    issues = list(_ISSUE.finditer(raw))
    if not issues:
        message = _clean_compile_message(_STATUS_PREFIX.sub("", raw.strip()))
        return CELCompileError(expression, message, None, report=f"ERROR: <input>: {message}")
    reports = []
    first_message, first_offset = None, None
    for issue in issues:
        line, column, message = int(issue.group(1)), int(issue.group(2)), _clean_compile_message(issue.group(3))
        offset = rewritten.original_offset(offset_of(rewritten.text, line, column))
        message, offset = _first_segment_of_qualified_name(expression, message, offset)
        if first_message is None:
            first_message, first_offset = message, offset
        reports.append(caret_report(expression, message, offset))
    assert first_message is not None and first_offset is not None  # set by the first of the (non-empty) issues
    line, column = line_column(expression, first_offset)
    return CELCompileError(expression, first_message, column, line, report="\n".join(reports))


def _result_type_allowed(checked: Any, environment: CelEnvironment) -> str | None:
    """None when the result type is bool or the attribute type (compile.go: `dyn`, or `any` with
    DRAListTypeAttributes off), else the type's name."""
    result_type = checked.return_type()
    if result_type == cel.Type.BOOL:
        return None
    root_type = checks.root_type_name(checked.serialize())
    allowed = "dyn" if environment.list_attributes else "any"
    if root_type == allowed:
        return None
    return root_type or cel_type_name(result_type)


def _evaluation_source(expression: str, rewritten: Rewritten, serialized: bytes) -> str:
    """`expression` as cel-cpp evaluates it: each constant conversion replaced by the value cel-go's planner
    folds it to (gpudra.cel.constants.folded_conversions), dyn operands guarded (gpudra.cel.guards)."""
    operations = guards.guard_operations(expression, rewritten, serialized)
    folded = constants.folded_conversions(serialized)
    tokens = tokenize(rewritten.text)
    by_start = {token.start: index for index, token in enumerate(tokens)}
    for offset, value in folded:
        index = by_start.get(offset)
        text = constants.literal(value)
        if index is None or index == 0 or text is None or tokens[index].text != "(":
            continue
        parsed = top_level_arguments(tokens, index)
        if parsed is None:
            continue
        start = rewritten.original_offset(tokens[index - 1].start)
        end = rewritten.original_offset(tokens[parsed[1]].start) + 1
        if expression[start:end].startswith(tokens[index - 1].text) and expression[end - 1 : end] == ")":
            operations.append((start, end, text))
    if not operations:
        return expression
    return apply_operations(expression, operations).text


def _compile(expression: str, environment: CelEnvironment, stored: bool = False) -> Selector:
    if not isinstance(expression, str):
        raise CELCompileError(str(expression), "expression must be a string")
    size = len(expression.encode("utf-8"))
    if size > MAX_EXPRESSION_BYTES:
        raise CELCompileError(expression, f"Too long: may not be more than {MAX_EXPRESSION_BYTES} bytes")
    rewritten = adapt(expression, semver_normalize=environment.semver_normalize)
    try:
        checked = checking_env(environment).compile(rewritten.text)
    except Exception as error:  # noqa: BLE001 - cel-expr-python raises RuntimeError/ValueError with the issues
        chain = bind_chain.split(expression) if "recursion limit" in str(error) else None
        if chain is not None:
            return _compile_chain(expression, environment, stored, chain)
        raise _compile_error(expression, rewritten, str(error)) from None
    wrong_type = _result_type_allowed(checked, environment)
    if wrong_type is not None:
        message = f"must evaluate to bool or the unknown type, not {wrong_type}"
        raise CELCompileError(expression, message, report=message)
    serialized = checked.serialize()
    problem = (
        checks.heterogeneous_literal(serialized)
        or checks.list_function_overloads(serialized)
        or checks.invalid_time_literals(serialized)
        or constants.format_problem(serialized)
        or constants.conversion_problem(serialized)
    )
    if problem is not None:
        message, offset = problem
        offset = rewritten.original_offset(offset)
        line, column = line_column(expression, offset)
        raise CELCompileError(expression, message, column, line, report=caret_report(expression, message, offset))
    estimate, bound = cost_model.check(expression, rewritten, checked, refuse_costly=not stored)
    runtime_source = _evaluation_source(expression, rewritten, serialized)
    program, runtime_text = None, ""
    # A guard or fold the token scan placed wrongly, or list_cost's wrappers past cel-cpp's nesting limit: the next
    # text in line (the last one cannot fail for a checked expression, but is reported cleanly if it does).
    for source_text, wrap_lists in ((runtime_source, True), (runtime_source, False), (expression, False)):
        runtime_text = adapt(source_text, runtime=True, wrap_lists=wrap_lists).text
        try:
            program = runtime_env().compile(runtime_text)
            break
        except Exception as error:  # noqa: BLE001 - cel-expr-python raises RuntimeError/ValueError with the issues
            if not wrap_lists:
                raise _compile_error(expression, rewritten, str(error)) from None
    # gpudra's bound, not cel-go's estimate: cel-go concatenates lists lazily at O(1), cel-cpp copies them
    refused = bound > MAX_COST and cost_model.may_grow_without_bound(serialized)
    literal_calls = tuple((function, text, rewritten.original_offset(offset))
                          for function, text, offset in constants.string_literal_calls(serialized))
    return Selector(expression, environment, program, estimate, device_reads(serialized), stored, refused,
                    runtime_text, bound, literal_calls)


def _compile_chain(expression: str, environment: CelEnvironment, stored: bool, chain: bind_chain.Chain) -> Selector:
    """A `cel.bind` chain too deep for cel-cpp's parser, checked and evaluated part by part (gpudra.cel.bind_chain)."""
    estimates: list[int] = []  # cel-go's estimate of a binding: its expression's plus its body's

    def estimate_part(part: str, checked: Any) -> None:
        estimates.append(cost_model.check(part, adapt(part), checked, refuse_costly=False)[0])

    try:
        body = bind_chain.check(chain, lambda variables: checking_env_with(environment, variables), estimate_part)
    except CELCompileError:
        raise
    except Exception as error:  # noqa: BLE001 - a part's issues (positions within the part)
        message = _clean_compile_message(_STATUS_PREFIX.sub("", str(error).strip()))
        raise CELCompileError(expression, message.split("\n")[0], report=message) from None
    wrong_type = _result_type_allowed(body, environment)
    if wrong_type is not None:
        message = f"must evaluate to bool or the unknown type, not {wrong_type}"
        raise CELCompileError(expression, message, report=message)
    estimate = min(sum(estimates), 2**64 - 1)
    if estimate > MAX_COST and not stored:
        raise CELCompileError(
            expression, f"too complex, exceeds cost limit (estimated cost {estimate}, limit {MAX_COST})")
    program = bind_chain.ChainProgram(chain, runtime_env_with(*chain.names))
    return Selector(expression, environment, program, estimate, None, stored, False, "", estimate)


@lru_cache(maxsize=4096)
def _cached(expression: str, environment: CelEnvironment, stored: bool = False) -> Selector | CELCompileError:
    # Failures are cached too: an allocator asks for the same broken selector on every node.
    try:
        return _compile(expression, environment, stored)
    except CELCompileError as error:
        return error


def compile_selector(expression: str, *, consumable_capacity: bool | None = None, stored: bool = False,
                     version: str | None = None, list_type_attributes: bool | None = None) -> Selector:
    """Compile a DRA device selector (cached per expression and options); raises CELCompileError.

    The API server's reading (the default) refuses an expression whose estimated cost exceeds the
    limit. `stored=True` is kube-scheduler's reading of an expression already stored: no estimate
    at compile time, the runtime cost limit applies instead (an expression whose cost bound exceeds
    the limit fails its evaluation with "actual cost limit exceeded").

    `version`: the Kubernetes release (default gpudra.versions.DEFAULT_KUBERNETES_VERSION) whose CEL
    libraries and DRA CEL features apply; `consumable_capacity` / `list_type_attributes`: the gates
    DRAConsumableCapacity / DRAListTypeAttributes; None: the release's default for the first, on where the
    release has it for the second (gpudra.cel.release.cel_environment).
    """
    if not isinstance(expression, str):
        raise CELCompileError(str(expression), "expression must be a string")
    environment = cel_environment(version, stored=bool(stored), consumable_capacity=consumable_capacity,
                                  list_type_attributes=list_type_attributes)
    result = _cached(expression, environment, bool(stored))
    if isinstance(result, CELCompileError):
        raise CELCompileError(result.expression, result.message, result.column, result.line, result.report)
    return result
