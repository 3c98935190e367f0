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


device_names = st.one_of(st.just("gpu-0"), st.sampled_from(["gpu-1", "", "GPU_0", "x" * 64, 7, None]))
capacity_entries = st.one_of(
    st.builds(lambda v: {"value": v}, st.sampled_from(["80Gi", "-1", "1e3", "bad", "", "0", 5, None])),
    st.sampled_from(["80Gi", {"value": "1Gi", "requestPolicy": {"default": "1Gi"}}, {}, None]),
)
drivers = st.sampled_from(["gpu.nvidia.com", "a", "a/b", "example.com"])
attribute_keys = st.sampled_from(["type", "gpu.nvidia.com/type", "a/type", "a/b/type", "b/type", "Bad Key", ""])
mostly_valid_attributes = st.one_of(st.sampled_from([{"string": "gpu"}, {"int": 1}, {"version": "1.2.3"}]), attributes)


@st.composite
def devices(draw):
    device = {}
    if draw(st.integers(0, 9)):
        device["name"] = draw(device_names)
    if draw(st.integers(0, 4)):
        device["attributes"] = draw(st.dictionaries(attribute_keys, mostly_valid_attributes, max_size=5)
                                    if draw(st.integers(0, 9)) else st.none())
    if draw(st.booleans()):
        device["capacity"] = draw(st.dictionaries(st.sampled_from(["memory", "gpu.nvidia.com/memory", "Bad"]),
                                                  capacity_entries, max_size=3))
    if not draw(st.integers(0, 5)):
        device[draw(st.sampled_from(["allowMultipleAllocations", "taints", "bindingConditions", "nodeName",
                                     "unknownField"]))] = draw(st.sampled_from([True, [], "n", None]))
    return device


@settings(max_examples=400, deadline=None)
@given(devices(), drivers)
def test_a_quick_valid_device_is_one_the_full_walk_finds_nothing_in(device, driver):
    if resource.DEVICE.quick_valid(device):
        ctx = Context("resource.k8s.io/v1", "ResourceSlice", driver=driver)
        resource.DEVICE.check(device, "spec.devices[0]", ctx)
        assert ctx.found == []


@settings(max_examples=150, deadline=None)
@given(st.lists(devices(), max_size=5), drivers)
def test_a_device_list_walk_with_shortcuts_reports_what_the_full_walk_reports(devices_, driver):
    from gpudra.api.schema.types import ListOf, Struct

    slow_item = Struct("Device", resource.DEVICE.fields, checks=resource.DEVICE.checks,
                       unknown_hints=resource.DEVICE.unknown_hints)
    found = []
    for item in (resource.DEVICE, slow_item):
        ctx = Context("resource.k8s.io/v1", "ResourceSlice", driver=driver)
        ListOf(item, unique_by="name").check(devices_, "spec.devices", ctx)
        found.append(ctx.found)
    assert found[0] == found[1]


def test_plain_devices_take_the_shortcut():
    plain = {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "resource.kubernetes.io/pcieRoot":
                                             {"string": "pci0000:18"}}, "capacity": {"memory": {"value": "80Gi"}}}
    assert resource.DEVICE.quick_valid(plain)
    for changed in ({"name": "GPU_0"}, {"capacity": {"memory": {"value": "-1"}}}, {"allowMultipleAllocations": True},
                    {"attributes": {"a/type": {"string": "x"}, "type": {"string": "y"}}}):
        assert not resource.DEVICE.quick_valid({**plain, **changed}), changed
