"""The schema walk's shortcuts agree with the full walk: a map entry skipped as valid (`Type.quick_valid`) is one
on which the full check reports nothing, and a map with some entries skipped reports exactly what the full walk
reports."""

from hypothesis import given, settings, strategies as st

from gpudra.api.schema import resource
from gpudra.api.schema.names import dra_qualified_name
from gpudra.api.schema.types import Context, MapOf

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=False),
    st.text(max_size=70), st.sampled_from(["80Gi", "16G", "1.2.3", "v1.2", "9.0.0", "12.8.0-rc.1", "1e3", "gpu",
                                           "x" * 64, "x" * 65, "é" * 32, "é" * 33, "+5Mi", "0.5"]),
    st.lists(st.integers(0, 3), max_size=2),
)
kinds = st.sampled_from(["string", "int", "bool", "version", "ints", "strings", "quantity", "value", "other"])
attributes = st.one_of(
    scalars,
    st.dictionaries(kinds, scalars, max_size=3),
    st.builds(lambda kind, item: {kind: item}, kinds, scalars),
)
names = st.one_of(st.sampled_from(["type", "memory", "gpu.nvidia.com/uuid", "Bad Name", "", "a/", "/b", "x" * 70]),
                  st.text(max_size=12))


def full_walk(value, path="spec.devices[0].attributes[memory]"):
    ctx = Context("resource.k8s.io/v1", "ResourceSlice", driver="gpu.nvidia.com")
    resource.AttributeType.check(resource.AttributeType(), value, path, ctx)
    return ctx.found


@settings(max_examples=400, deadline=None)
@given(attributes)
def test_a_quick_valid_attribute_is_one_the_full_check_finds_nothing_in(value):
    if resource.AttributeType.quick_valid(value):
        assert full_walk(value) == []


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(names, attributes, max_size=6))
def test_a_map_walk_with_shortcuts_reports_what_the_full_walk_reports(value):
    fast = MapOf(resource.AttributeType(), key_check=dra_qualified_name)
    slow_type = resource.AttributeType()
    slow_type.quick_valid = None  # the instance attribute hides the class's shortcut
    slow = MapOf(slow_type, key_check=dra_qualified_name)
    found = []
    for walker in (fast, slow):
        ctx = Context("resource.k8s.io/v1", "ResourceSlice", driver="gpu.nvidia.com")
        walker.check(value, "spec.devices[0].attributes", ctx)
        found.append(ctx.found)
    assert found[0] == found[1]


def test_common_attributes_take_the_shortcut():
    """The shortcut is taken where it matters (otherwise the tests above pass vacuously)."""
    for value in ({"string": "gpu"}, {"int": 7}, {"bool": False}, {"version": "12.8.0"}):
        assert resource.AttributeType.quick_valid(value), value
    for value in ({"string": "80Gi"}, {"string": "x" * 65}, {"version": "12.8"}, {"int": 2**63}, {"int": True},
                  {"string": "a", "int": 1}, "gpu", {"strings": ["a"]}):
        assert not resource.AttributeType.quick_valid(value), value
