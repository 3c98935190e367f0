"""Table-driven DRA CEL semantics (tests/data/cel/expressions.yaml) and the conformance selectors."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from gpudra.cel import CELCompileError, CELRuntimeError, compile_selector, device_input

DATA = Path(__file__).parent.parent / "data"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_all(text: str) -> list:
    return list(yaml.load_all(text, Loader=LOADER))


def _load(text: str):
    return yaml.load(text, Loader=LOADER)
TABLE = _load((DATA / "cel" / "expressions.yaml").read_text())
CASES = TABLE["cases"]


@lru_cache(maxsize=None)
def _device(name: str):
    entry = TABLE["devices"][name]
    return device_input(entry["driver"], entry["device"], list_type_attributes=entry.get("list_type_attributes", False))


def _outcome(case: dict, reading: str = "validation"):
    """The table case's outcome in the API server's reading or kube-scheduler's ("scheduler":
    a stored expression, compiled with every field declared, runtime cost limit)."""
    stored = reading == "scheduler"
    # the device's DRAListTypeAttributes setting is the environment's too (it types attribute values)
    list_type_attributes = TABLE["devices"][case.get("device", "h100")].get("list_type_attributes", False)
    try:
        selector = compile_selector(case["expression"], consumable_capacity=stored or case.get("consumable_capacity", True),
                                    stored=stored, list_type_attributes=list_type_attributes)
    except CELCompileError as error:
        return {"compile_error": str(error)}
    try:
        return selector.evaluate(_device(case.get("device", "h100")))
    except CELRuntimeError as error:
        return {"runtime_error": str(error)}


def test_the_table_is_large_and_covers_every_outcome():
    assert len(CASES) >= 100
    kinds = {type(case["expected"]).__name__ if not isinstance(case["expected"], dict) else next(iter(case["expected"]))
             for case in CASES}
    assert kinds == {"bool", "compile_error", "runtime_error"}
    assert {True, False} <= {case["expected"] for case in CASES if isinstance(case["expected"], bool)}


def _check(case: dict, expected, outcome) -> None:
    if isinstance(expected, bool):
        assert outcome is expected, f"{case['expression']!r} gave {outcome!r}"
        return
    (kind, text), = expected.items()
    assert isinstance(outcome, dict) and kind in outcome, f"{case['expression']!r} gave {outcome!r}, expected {kind}"
    assert text in outcome[kind]


@pytest.mark.parametrize("case", CASES, ids=[f"{i:03d}" for i in range(len(CASES))])
def test_expression(case):
    _check(case, case["expected"], _outcome(case))


@pytest.mark.parametrize("case", CASES, ids=[f"{i:03d}" for i in range(len(CASES))])
def test_expression_as_kube_scheduler_reads_it(case):
    _check(case, case.get("scheduler", case["expected"]), _outcome(case, "scheduler"))


# Selectors that Kubernetes would refuse too, but whose conformance cases never evaluate them
# (the allocator compiles a selector when it first evaluates it, and an earlier selector of the
# same request is false for every device), so the expected outcome shows no compile error.
NEVER_EVALUATED_INVALID = {
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= "0"',
}
COMPILE_ERROR_PREFIX = "CEL compile error: compilation failed: "


def _selectors_in(document) -> list[str]:
    found, stack = [], [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            cel = node.get("cel")
            if isinstance(cel, dict) and isinstance(cel.get("expression"), str):
                found.append(cel["expression"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _upstream_compile_errors(expected) -> set[str]:
    """First lines of the CEL compile errors an expected.yaml reports."""
    errors, stack = set(), [expected]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and COMPILE_ERROR_PREFIX in node:
            errors.add(node.split(COMPILE_ERROR_PREFIX, 1)[1].split("\n", 1)[0])
    return errors


def _conformance_cases():
    cases = []
    for path in sorted((DATA / "conformance").glob("*/*/input.yaml")):
        selectors = [e for document in _load_all(path.read_text()) for e in _selectors_in(document)]
        expected_path = path.parent / "expected.yaml"
        expected = _load(expected_path.read_text()) if expected_path.exists() else {}
        cases.append((path.parent.name, selectors, _upstream_compile_errors(expected)))
    return cases


@lru_cache(maxsize=1)
def _conformance() -> list:
    return _conformance_cases()


def _first_line(expression: str) -> str | None:
    try:
        compile_selector(expression)
    except CELCompileError as error:
        return str(error).split("\n", 1)[0]
    return None


def test_every_conformance_selector_compiles_unless_upstream_refuses_it():
    selectors = {e for _, found, _ in _conformance() for e in found}
    assert len(selectors) > 100
    reported = {line for _, _, errors in _conformance() for line in errors}
    unexpected = []
    for expression in sorted(selectors):
        line = _first_line(expression)
        if line is not None and line not in reported and expression not in NEVER_EVALUATED_INVALID:
            unexpected.append((expression, line))
    assert not unexpected, unexpected


def test_conformance_compile_errors_match_upstream_word_for_word():
    with_errors = [(name, found, errors) for name, found, errors in _conformance() if errors]
    assert with_errors
    for name, found, errors in with_errors:
        ours = {_first_line(expression) for expression in found} - {None}
        assert errors <= ours, f"{name}: upstream {errors}, ours {ours}"


RUNTIME_ERROR_PREFIX = "CEL runtime error: "


def _conformance_runtime_error_cases():
    cases = []
    for expected_path in sorted((DATA / "conformance").glob("*/*/expected.yaml")):
        text = expected_path.read_text()
        if RUNTIME_ERROR_PREFIX not in text:
            continue
        errors = set()
        for result in (_load(text) or {}).get("results") or []:
            message = result.get("error") or ""
            if RUNTIME_ERROR_PREFIX in message:
                errors.add(message.split(RUNTIME_ERROR_PREFIX, 1)[1])
        if errors:
            cases.append(pytest.param(expected_path.parent, errors, id=expected_path.parent.name))
    return cases


@pytest.mark.parametrize("case, errors", _conformance_runtime_error_cases())
def test_conformance_runtime_errors_are_reproduced(case, errors):
    """Every CEL runtime error upstream reports in a case comes out of evaluating the case's
    selectors on the case's devices."""
    arguments = (case / "args").read_text()
    list_type_attributes = "ListTypeAttributes" in arguments
    documents = _load_all((case / "input.yaml").read_text())
    selectors = {e for document in documents if document and document.get("kind") in ("DeviceClass", "ResourceClaim")
                 for e in _selectors_in(document)}
    devices = [
        device_input(document["spec"]["driver"], device, list_type_attributes=list_type_attributes)
        for document in documents
        if document and document.get("kind") == "ResourceSlice"
        for device in document["spec"].get("devices") or []
    ]
    ours = set()
    for expression in selectors:
        try:
            selector = compile_selector(expression, list_type_attributes=list_type_attributes)
        except CELCompileError:
            continue
        for device in devices:
            try:
                selector.evaluate(device)
            except CELRuntimeError as error:
                ours.add(str(error))
    assert errors <= ours
