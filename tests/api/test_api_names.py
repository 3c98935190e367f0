"""Name syntaxes and semantic versions as the API server checks them."""

import re

import pytest
from hypothesis import given, settings, strategies as st

from gpudra.api.schema import names
from gpudra.api.schema.types import Context
from gpudra.api.schema.resource import ATTRIBUTE_STRUCT
from gpudra.api.semver import parse_semver


@pytest.mark.parametrize("value, ok", [("gpu-0", True), ("a", True), ("0", True), ("-a", False), ("a-", False),
                                       ("A", False), ("a.b", False), ("a" * 63, True), ("a" * 64, False)])
def test_dns_label(value, ok):
    assert (names.dns_label(value) == []) is ok


@pytest.mark.parametrize("value, ok", [("gpu.nvidia.com", True), ("nvidia.com-gpu", True), ("nvidia.com/gpu", False),
                                       ("a..b", False), (".a", False), ("a" * 254, False)])
def test_dns_subdomain(value, ok):
    assert (names.dns_subdomain(value) == []) is ok


@pytest.mark.parametrize("value, ok", [
    ("memory", True), ("productName", True), ("gpu.nvidia.com/productName", True), ("_x1", True),
    ("product-name", False), ("1abc", False), ("gpu.nvidia.com/", False), ("/x", False),
    ("x" * 33, False), ("Bad.Domain/x", False), ("a" * 64 + "/x", False),
])
def test_dra_qualified_name(value, ok):
    assert (names.dra_qualified_name(value) == []) is ok


@pytest.mark.parametrize("value, ok", [("example.com/gpu", True), ("nvidia.com/gpu", True), ("gpu", False),
                                       ("kubernetes.io/gpu", False), ("requests.a/b", False)])
def test_extended_resource_name(value, ok):
    assert (names.extended_resource_name(value) == []) is ok


def test_suggestions_are_valid_names():
    assert names.suggest_dns_name("nvidia.com/gpu") == "gpu.nvidia.com"
    assert names.suggest_dns_name("My_GPU") == "my-gpu"
    assert names.camel_identifier("nvlink-mesh-id") == "nvlinkMeshId"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcz09-._/A", min_size=1, max_size=20))
def test_suggested_dns_names_are_valid_or_empty(text):
    suggestion = names.suggest_dns_name(text)
    assert suggestion == "" or names.dns_subdomain(suggestion) == []


numbers = st.integers(min_value=0, max_value=10**6)
identifiers = st.from_regex(r"\A(0|[1-9][0-9]{0,3}|[0-9]*[A-Za-z-][0-9A-Za-z-]{0,5})\Z")
builds = st.from_regex(r"\A[0-9A-Za-z-]{1,6}\Z")


@st.composite
def semvers(draw):
    text = f"{draw(numbers)}.{draw(numbers)}.{draw(numbers)}"
    pre = draw(st.lists(identifiers, max_size=3))
    build = draw(st.lists(builds, max_size=2))
    if pre:
        text += "-" + ".".join(pre)
    if build:
        text += "+" + ".".join(build)
    return text


def attribute_problems(value):
    ctx = Context()
    ATTRIBUTE_STRUCT.check(value, "a", ctx)
    return ctx.found


@settings(max_examples=300, deadline=None)
@given(semvers())
def test_valid_semvers_are_accepted_and_round_trip(text):
    version = parse_semver(text)
    assert str(version) == text
    assert parse_semver(str(version)) == version
    if len(text) <= 64:
        assert attribute_problems({"version": text}) == []


@settings(max_examples=200, deadline=None)
@given(semvers(), semvers())
def test_semver_order_ignores_build_and_is_total(a, b):
    va, vb = parse_semver(a), parse_semver(b)
    assert (va < vb) + (va == vb) + (va > vb) == 1
    assert parse_semver(a.split("+")[0]) == va


@pytest.mark.parametrize("text", ["1.2", "v1.2.3", "01.2.3", "1.2.3-", "1.2.3-01", "1.2.3+", "", "1.2.3.4"])
def test_invalid_versions_are_rejected(text):
    found = attribute_problems({"version": text})
    assert found and any("semantic version" in message for _, _, message, _ in found)


def test_version_list_attribute_checks_each_item():
    found = attribute_problems({"versions": ["1.0.0", "2.0"]})
    assert [path for _, path, _, _ in found] == ["a.versions[1]"]
    assert re.search("semantic version", found[0][2])
