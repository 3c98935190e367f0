"""Fuzzing the hostile-input boundaries (issue 12, item 8): the loader, quantities, versions and the values
a device hands to CEL. Every case ends in a result or a clean error of the documented type, never another
exception. Bounded CI time: max_examples per property."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, example, given, settings, strategies as st

from gpudra.api.load import LoadError, load_text
from gpudra.api.problems import Problem
from gpudra.api.quantity import Quantity, QuantityError
from gpudra.api.semver import SemverError, parse_semver
from gpudra.api.validate import validate_documents
from gpudra.cel import CELRuntimeError, compile_selector, device_input

FUZZ = settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])

# ----- loader ------------------------------------------------------------------------------------------------
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=False), st.text(max_size=12),
                    st.sampled_from(["16Gi", "1e1000000000", "1.2.3", "9" * 5000, "\ud800", "&a", "*a", "<<"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=25)
HEADS = st.sampled_from([
    {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice"},
    {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim"},
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass"},
    {"apiVersion": "v1", "kind": "List"},
    {"apiVersion": "v1", "kind": "Pod"},
])
NOISE = st.sampled_from(["[", "]", "{", "}", ": ", "- ", "&a ", "*a", "\n", '"\\ud800"', "9" * 4500, ",", "'", "? ",
                         '"x": 1, "x": 2', "[" * 300, "- " * 300, "!!binary ", "<<: *a"])


def _render(obj, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(obj)
    import yaml

    return yaml.safe_dump(obj)


@settings(FUZZ, max_examples=60)
@given(HEADS, VALUES, st.sampled_from(["json", "yaml"]), st.lists(st.tuples(st.integers(0, 10**6), NOISE), max_size=4))
@example({"apiVersion": "v1", "kind": "List"}, {"items": [{"a": 1}]}, "json", [(0, "[" * 300)])
@example({"apiVersion": "v1", "kind": "ConfigMap"}, {"a": "x"}, "yaml", [(10, "- " * 300)])
def test_loader_gives_documents_or_a_load_error(head, body, fmt, insertions):
    obj = dict(head, spec=body, metadata={"name": "x"})
    text = _render(obj, fmt)
    for position, noise in insertions:
        position %= len(text) + 1
        text = text[:position] + noise + text[position:]
    try:
        documents = load_text(text, "fuzz")
    except LoadError as error:
        assert str(error).startswith("fuzz")
        return
    for problem in validate_documents(documents):
        assert isinstance(problem, Problem)
        problem.render()


# ----- quantities --------------------------------------------------------------------------------------------
QUANTITY_TEXT = st.one_of(
    st.text(alphabet="0123456789.+-eEinumkKMGTP", max_size=30),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(-(10**6), 10**6), st.integers(-(2**70), 2**70)),
    # long texts built from short draws (drawing thousands of characters one by one is slow)
    st.builds(lambda d, n, s: d * n + s, st.text(alphabet="0123456789.", min_size=1, max_size=3),
              st.integers(300, 2500), st.sampled_from(["", "Ki", "Ei", "n", "E", "e-9", "e9"])),
)


@FUZZ
@given(QUANTITY_TEXT)
@example("1e1000000000")
@example("0." + "0" * 5000 + "1Ei")
def test_quantities_parse_or_give_a_quantity_error(text):
    try:
        quantity = Quantity.parse(text)
    except QuantityError as error:
        assert str(error).startswith("quantity")
        return
    assert Quantity.parse(str(quantity)) == quantity


# ----- versions ----------------------------------------------------------------------------------------------
VERSION_TEXT = st.one_of(
    st.text(alphabet="0123456789.-+vabcXYZ", max_size=40),
    st.builds(lambda a, n, b: f"1.{a * n}.{b}", st.text(alphabet="0123456789", min_size=1, max_size=2),
              st.integers(1, 3000), st.text(alphabet="0123456789-.a", min_size=1, max_size=30)),
)


@FUZZ
@given(VERSION_TEXT, st.booleans())
@example("1.2." + "1" * 5000, False)
def test_versions_parse_or_give_a_semver_error(text, normalize):
    try:
        version = parse_semver(text, normalize)
    except SemverError:
        return
    assert parse_semver(str(version)) == version


# ----- values handed to CEL ----------------------------------------------------------------------------------
ATTRIBUTE = st.one_of(
    st.builds(lambda v: {"int": v}, st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: {"string": v}, st.text(max_size=64)),
    st.builds(lambda v: {"version": v}, VERSION_TEXT),
    st.builds(lambda v: {"bool": v}, st.booleans()),
    st.just({}),
)
SELECTORS = [
    'device.attributes["gpu.nvidia.com"].a == device.attributes["gpu.nvidia.com"].a',
    '"a" in device.attributes["gpu.nvidia.com"] && string(device.attributes["gpu.nvidia.com"].a) != ""',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("1Gi")) >= 0',
    'isQuantity(string(device.attributes["gpu.nvidia.com"].a))',
    'isSemver(string(device.attributes["gpu.nvidia.com"].a), true)',
]


@FUZZ
@given(ATTRIBUTE, QUANTITY_TEXT)
def test_device_values_give_a_result_or_a_cel_runtime_error(attribute, memory):
    device = device_input("gpu.nvidia.com", {"name": "d", "attributes": {"a": attribute},
                                             "capacity": {"memory": {"value": memory}}})
    for expression in SELECTORS:
        try:
            assert compile_selector(expression).evaluate(device) in (True, False)
        except CELRuntimeError as error:
            assert error.message
