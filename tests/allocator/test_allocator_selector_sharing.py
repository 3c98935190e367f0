"""Selector outcomes shared between devices alike in what the selector reads (gpudra.cel.reads) are the outcomes of
evaluating on each device: checked on random devices and selectors against an evaluator that shares nothing."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra.allocator.model import SliceInfo
from gpudra.allocator.selection import SelectorEvaluator, compile_expression
from gpudra.cel import compile_selector

DRIVERS = ["gpu.nvidia.com", "example.com"]
EXPRESSIONS = [
    # static reads
    'device.driver == "gpu.nvidia.com"',
    'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"',
    'device.attributes["gpu.nvidia.com"]["type"] == "gpu"',
    'device.attributes["gpu.nvidia.com"].?type.orValue("none") == "gpu"',
    'has(device.attributes["gpu.nvidia.com"].index) && device.attributes["gpu.nvidia.com"].index < 4',
    'device.attributes["example.com"].index >= 2',
    'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.capacity["example.com"].memory.isLessThan(quantity("1Ti"))',
    "device.allowMultipleAllocations",
    'device.attributes["gpu.nvidia.com"].tags.exists(t, t == "a")',
    'device.attributes["gpu.nvidia.com"].type.startsWith("g") || device.attributes["gpu.nvidia.com"].index == 0',
    'device.attributes["gpu.nvidia.com"]["5"] == 1',
    # dynamic: evaluated on every device
    '"gpu.nvidia.com" in device.attributes',
    'device.attributes["gpu.nvidia.com"].exists(k, k == "uuid")',
    'size(device.capacity["gpu.nvidia.com"]) > 0',
    'has(device.attributes.x)',
    'device.attributes["gpu.nvidia.com"].uuid.startsWith("GPU-1")',
]

scalars = st.one_of(
    st.builds(lambda v: {"string": v}, st.sampled_from(["gpu", "mig", "GPU-1", "GPU-2", "", "80Gi"])),
    st.builds(lambda v: {"int": v}, st.sampled_from([0, 1, 3, 7])),
    st.builds(lambda v: {"int": v}, st.sampled_from([True, 1.0, "3"])),  # wrong JSON types (--no-validate)
    st.builds(lambda v: {"bool": v}, st.booleans()),
    st.builds(lambda v: {"version": v}, st.sampled_from(["550.1.0", "535.0.0", "1.2", "x"])),
    st.builds(lambda v: {"strings": v}, st.lists(st.sampled_from(["a", "b"]), max_size=2)),
    st.sampled_from([{}, {"string": None}, "gpu", 5, {"string": "gpu", "int": 2}, {"version": None, "int": 1}]),
)
attribute_names = st.sampled_from(["type", "gpu.nvidia.com/type", "index", "gpu.nvidia.com/index", "uuid",
                                   "driverVersion", "tags", "example.com/index", "other.io/type",
                                   5, "5"])  # YAML reads `5:` as an int key; CEL sees the name "5"
capacities = st.sampled_from([{"value": "80Gi"}, {"value": "1Ti"}, {"value": "40Gi"}, {"value": "bad"}, "16Gi",
                              {"value": 5}, {"value": "80Gi", "requestPolicy": {"default": "1Gi"}}])
capacity_names = st.sampled_from(["memory", "gpu.nvidia.com/memory", "example.com/memory"])


@st.composite
def devices(draw):
    device = {"name": "d", "attributes": draw(st.dictionaries(attribute_names, scalars, max_size=5)),
              "capacity": draw(st.dictionaries(capacity_names, capacities, max_size=2))}
    if draw(st.booleans()):
        device["allowMultipleAllocations"] = draw(st.booleans())
    return device


def _device_infos(drivers_and_devices):
    infos = []
    for index, (driver, device) in enumerate(drivers_and_devices):
        raw = {"spec": {"driver": driver, "pool": {"name": f"p{index}"}, "nodeName": "n",
                        "devices": [dict(device, name=f"d{index}")]}}
        infos.extend(SliceInfo(raw, index).devices)
    return infos


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(DRIVERS), devices()), min_size=1, max_size=12),
       st.lists(st.sampled_from(EXPRESSIONS), min_size=1, max_size=4),
       st.booleans(), st.booleans())
def test_shared_outcomes_are_the_per_device_outcomes(drivers_and_devices, expressions, multiple, lists):
    shared, alone = SelectorEvaluator(multiple, lists), SelectorEvaluator(multiple, lists)
    alone.share = False
    # the same content twice, as distinct devices: the second round is answered from what the first found
    infos = _device_infos(drivers_and_devices + drivers_and_devices)
    for expression in EXPRESSIONS:
        for device in infos:
            assert shared.evaluate(expression, device) == alone.evaluate(expression, device), (expression, device.raw)
    for device in infos:
        assert _status(shared, device, expressions) == _status(alone, device, expressions)


def _status(evaluator, device, expressions):
    found = evaluator.status(device, "c", tuple(expressions[:1]), tuple(expressions[1:]))
    return found if isinstance(found, bool) else (found.owner, found.index, found.kind, found.message)


def test_devices_alike_in_what_a_selector_reads_share_one_evaluation():
    expression = 'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"'
    alike = [{"attributes": {"type": {"string": "gpu"}, "uuid": {"string": f"GPU-{n}"}},
              "capacity": {"memory": {"value": "80Gi"}}} for n in range(50)]
    other = {"attributes": {"type": {"string": "mig"}, "uuid": {"string": "GPU-x"}}}
    broken = {"attributes": {"type": {"string": "gpu"}, "driverVersion": {"version": "x"}}}
    infos = _device_infos([("gpu.nvidia.com", d) for d in [*alike, other, broken]])
    evaluator = SelectorEvaluator(True, False)
    outcomes = [evaluator.evaluate(expression, device) for device in infos]
    assert outcomes[:51] == [True] * 50 + [False]
    assert outcomes[51][0] == "runtime" and "driverVersion" in outcomes[51][1]  # the conversion error, unshared
    assert evaluator.evaluations == 3


def test_reads_of_selectors():
    def reads(expression):
        return compile_selector(expression).reads

    assert reads('device.driver == "a.com" && device.attributes["a.com"].type == "gpu"') == (
        ("attributes", "a.com", "type"), ("device", "driver"))
    assert reads('device.capacity["a.com"]["memory"].isGreaterThan(quantity("1"))') == (("capacity", "a.com", "memory"),)
    assert reads('device.attributes["a.com"].?x.hasValue()') == (("attributes", "a.com", "x"),)
    assert reads("true") == ()
    # cel-go's device maps answer every domain, so this presence test reads nothing of the device
    assert reads("has(device.attributes.x)") == ()
    for dynamic in ('"a.com" in device.attributes', 'device.attributes["a.com"].exists(k, k == "x")',
                    'device.attributes["a/b"].c == 1',
                    'device.attributes["a.com"][device.driver] == 1'):
        assert reads(dynamic) is None, dynamic
    assert compile_expression('device.attributes["a.com"].x == 1', True).reads == (("attributes", "a.com", "x"),)
