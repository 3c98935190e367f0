"""Property tests: the CEL quantity and semver libraries give the answers of Kubernetes' quantity grammar and of
semver.org's precedence (computed apart from gpudra, in tests/support/quantity_semver_reference.py), and the source
adaptations do not change what an expression means."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import quantity_semver_reference as reference

from gpudra.api.semver import parse_semver
from gpudra.cel import CELRuntimeError, compile_selector, device_input
from gpudra.cel.adaptation import adapt

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NO_DEVICE = device_input("example.com", {"name": "d"})

suffixes = st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3",
                            "E-2", "e-12", "e+20"])
quantities = st.builds(
    lambda sign, whole, fraction, suffix: f"{sign}{whole}{'.' + fraction if fraction else ''}{suffix}",
    st.sampled_from(["", "-", "+"]),
    st.integers(min_value=0, max_value=10**6).map(str),
    st.one_of(st.just(""), st.integers(min_value=0, max_value=9999).map(str)),
    suffixes,
)


def _evaluate(expression: str):
    return compile_selector(expression).evaluate(NO_DEVICE)


@SETTINGS
@given(quantities, quantities)
def test_quantity_ordering_matches_kubernetes_quantity_grammar(left, right):
    """Expected values from tests/support/quantity_semver_reference.py (Fractions, from quantity.go's grammar and
    rounding), checked against cel-go itself in tests/oracles/test_cel_quantity_oracle.py."""
    expected = reference.compare(reference.quantity_value(left), reference.quantity_value(right))
    a, b = json.dumps(left), json.dumps(right)
    assert _evaluate(f"quantity({a}).compareTo(quantity({b})) == {expected}")
    assert _evaluate(f"quantity({a}).isGreaterThan(quantity({b}))") is (expected > 0)
    assert _evaluate(f"quantity({a}).isLessThan(quantity({b}))") is (expected < 0)
    assert _evaluate(f"quantity({a}) == quantity({b})") is (expected == 0)


@SETTINGS
@given(quantities, quantities)
def test_quantity_arithmetic_matches_kubernetes_quantity_grammar(left, right):
    # isInteger/asInteger read the internal form Kubernetes keeps (int64Amount or inf.Dec), not the value: their
    # answers come from cel-go (tests/oracles/test_cel_quantity_oracle.py), not from a reference here
    x, y = reference.quantity_value(left), reference.quantity_value(right)
    a, b = json.dumps(left), json.dumps(right)
    assert _evaluate(f"quantity({a}).add(quantity({b})) == quantity({json.dumps(reference.quantity_text(x + y))})")
    assert _evaluate(f"quantity({a}).sub(quantity({b})) == quantity({json.dumps(reference.quantity_text(x - y))})")
    assert _evaluate(f"sign(quantity({a})) == {reference.compare(x, 0)}")  # a function in Kubernetes, not a method


identifiers = st.one_of(
    st.integers(min_value=0, max_value=30),
    st.text(alphabet="abcxyz-", min_size=1, max_size=4),
)
versions = st.tuples(
    st.integers(0, 20),
    st.integers(0, 20),
    st.integers(0, 20),
    st.lists(identifiers, max_size=3).map(tuple),
    st.lists(st.sampled_from(["b1", "sha", "7"]), max_size=2).map(tuple),
)


@SETTINGS
@given(versions, versions)
def test_semver_ordering_follows_semver_org_in_python_and_cel(left, right):
    expected = reference.precedence(left, right)  # semver.org 2.0.0 §11, written out in the reference
    a, b = reference.version_text(left), reference.version_text(right)
    assert parse_semver(a).compare(parse_semver(b)) == expected
    a, b = json.dumps(a), json.dumps(b)
    assert _evaluate(f"semver({a}).compareTo(semver({b})) == {expected}")
    assert _evaluate(f"semver({a}) == semver({b})") is (expected == 0)
    assert _evaluate(f"semver({a}).isLessThan(semver({b}))") is (expected < 0)


@SETTINGS
@given(st.dictionaries(st.text(alphabet="abc", min_size=1, max_size=3), st.integers(-5, 5), max_size=5))
def test_transform_map_agrees_with_a_python_dict_comprehension(entries):
    literal = json.dumps(entries)
    expected = json.dumps({k: v * 2 + 1 for k, v in entries.items()})
    filtered = json.dumps({k: v for k, v in entries.items() if v > 0})
    assert _evaluate(f"{literal}.transformMap(k, v, v * 2 + 1) == {expected}")
    assert _evaluate(f"{literal}.transformMap(k, v, v > 0, v) == {filtered}")
    assert _evaluate(f"{literal}.transformMapEntry(k, v, {{k + \"!\": v}}).size() == {len(entries)}")


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "other.com/c", "example.com/d"]),
        st.integers(-3, 3).map(lambda i: {"int": i}),
        max_size=4,
    ),
    st.sampled_from(["example.com", "other.com", "missing.io"]),
    st.sampled_from(["a", "b", "c", "d"]),
)
def test_unknown_domains_behave_as_empty_maps(attributes, domain, name):
    device = device_input("example.com", {"name": "d", "attributes": attributes})
    present = device.device["attributes"].get(domain, {})
    has = compile_selector(f'has(device.attributes["{domain}"].{name})').evaluate(device)
    assert has is (name in present)
    assert compile_selector(f'"{domain}" in device.attributes').evaluate(device) is (domain in device.device["attributes"])
    assert compile_selector(f'size(device.attributes["{domain}"]) == {len(present)}').evaluate(device)
    selector = compile_selector(f'device.attributes["{domain}"].{name} == 0')
    if name in present:
        assert selector.evaluate(device) is (present[name] == 0)
    else:
        try:
            selector.evaluate(device)
        except CELRuntimeError as error:
            assert str(error) == f"no such key: {name}"
        else:
            raise AssertionError("a missing attribute must be a runtime error")


@SETTINGS
@given(st.text(alphabet='device.attributes[]"x?() capacity,.transformMap', max_size=40))
def test_adaptation_maps_every_position_back_into_the_source(text):
    rewritten = adapt(text)
    assert len(rewritten.origin) == len(rewritten.text)
    assert all(0 <= offset <= max(0, len(text)) for offset in rewritten.origin)


FRAGMENTS = [
    "device", ".", "attributes", "capacity", "driver", "allowMultipleAllocations", '["gpu.nvidia.com"]', "[?", "]",
    "(", ")", "[", "{", "}", ",", ":", "?", "!", "&&", "||", "==", "<", ">=", "+", "-", "*", "/", "%", " in ",
    "1", "2.5", "3u", '"x"', "'y'", "true", "null", "quantity", "semver", "compareTo", "isGreaterThan", "all",
    "exists", "map", "filter", "transformMap", "cel.bind", "has", "size", "x", "k", "v", "lists.range", "sets.contains",
    "find", "matches", "format.dns1123Label()", ".validate", "optional.of", ".?", "orValue", "includes", "ip", "cidr",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=14))
def test_any_text_gives_a_selector_or_a_clean_compile_error(fragments):
    from gpudra.cel import CELCompileError

    expression = "".join(fragments)
    device = device_input("gpu.nvidia.com", {"name": "d", "attributes": {"x": {"int": 1}}, "capacity": {"memory": {"value": "1Gi"}}})
    try:
        selector = compile_selector(expression)
    except CELCompileError as error:
        assert str(error) and error.expression == expression
        return
    try:
        assert selector.evaluate(device) in (True, False)
    except CELRuntimeError as error:
        assert str(error)


_INT64 = (-(2**63), 2**63 - 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from("+-"), st.one_of(st.integers(-9, 9), st.just(2**62))), min_size=32,
                max_size=90), st.integers(-9, 9))
def test_long_chains_add_left_to_right_as_cel_go_does(terms, first):
    """A chain past cel-cpp's parser depth (gpudra.cel.nesting splits it) gives what left-to-right int64
    arithmetic gives (cel-go parser: left-associative; common/types/int.go: an overflow is an error), computed
    here with Python's integers."""
    expression = str(first) + "".join(f" {op} {value}" for op, value in terms)
    total, overflow = first, False
    for op, value in terms:
        total = total + value if op == "+" else total - value
        overflow = overflow or not _INT64[0] <= total <= _INT64[1]
    selector = compile_selector(f"{expression} == {total}" if not overflow else f"{expression} == 0")
    if overflow:
        try:
            selector.evaluate(NO_DEVICE)
        except CELRuntimeError as error:
            assert "overflow" in error.message
        else:
            raise AssertionError(f"no overflow error for {expression}")
    else:
        assert selector.evaluate(NO_DEVICE) is True
