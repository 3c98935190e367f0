"""Public API of gpudra.cel: compile once, evaluate on devices, errors as values."""

import pytest

from gpudra.cel import CELCompileError, CELRuntimeError, DeviceInput, Selector, compile_selector, device_input

DRIVER = "gpu.nvidia.com"
H100 = {
    "name": "gpu-0",
    "attributes": {
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "index": {"int": 0},
        "cudaComputeCapability": {"version": "9.0.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:29"},
    },
    "capacity": {"memory": {"value": "80Gi"}},
}


def test_compile_once_and_evaluate():
    selector = compile_selector('device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"')
    assert isinstance(selector, Selector)
    assert compile_selector(selector.expression) is selector
    device = device_input(DRIVER, H100)
    assert isinstance(device, DeviceInput)
    assert selector.evaluate(device) is True


def test_bare_names_belong_to_the_driver_domain_and_qualified_names_to_theirs():
    device = device_input(DRIVER, H100)
    assert device.device["attributes"]["resource.kubernetes.io"]["pcieRoot"] == "pci0000:29"
    assert device.device["attributes"][DRIVER]["index"] == 0
    assert compile_selector('device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:29"').evaluate(device)
    other = device_input("other.example.com", H100)
    assert not compile_selector('has(device.attributes["gpu.nvidia.com"].productName)').evaluate(other)


def test_quantity_and_semver_selectors():
    device = device_input(DRIVER, H100)
    assert compile_selector('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0').evaluate(device)
    assert not compile_selector('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("80Gi"))').evaluate(device)
    assert compile_selector(
        'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))'
    ).evaluate(device)


def test_missing_key_is_a_runtime_error_value():
    selector = compile_selector('device.capacity["gpu.nvidia.com"].bandwidth.isGreaterThan(quantity("1"))')
    with pytest.raises(CELRuntimeError, match="no such key: bandwidth"):
        selector.evaluate(device_input(DRIVER, H100))


def test_compile_errors_name_the_problem_and_column():
    with pytest.raises(CELCompileError) as caught:
        compile_selector("noSuchVar")
    assert "undeclared reference to 'noSuchVar'" in str(caught.value)
    assert caught.value.column == 1
    with pytest.raises(CELCompileError, match="must evaluate to bool or the unknown type, not int"):
        compile_selector("1 + 2")
    with pytest.raises(CELCompileError, match="allowMultipleAllocations"):
        compile_selector("device.allowMultipleAllocations", consumable_capacity=False)
    assert compile_selector("device.allowMultipleAllocations").evaluate(device_input(DRIVER, H100)) is False


def test_bad_device_fails_every_evaluation():
    broken = dict(H100, attributes={"driverVersion": {}, "v": {"version": "1.2"}})
    device = device_input(DRIVER, broken)
    assert device.error == "attribute driverVersion: unsupported attribute value"
    with pytest.raises(CELRuntimeError, match="unsupported attribute value"):
        compile_selector("true").evaluate(device)
    device = device_input(DRIVER, dict(H100, attributes={"v": {"version": "1.2"}}))
    with pytest.raises(CELRuntimeError, match="attribute v: parse semantic version: "):
        compile_selector("true").evaluate(device)


def test_outcomes_are_remembered_per_device_including_errors():
    device = device_input(DRIVER, H100)
    selector = compile_selector('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gi"))')
    assert selector.evaluate(device) is True
    assert device.results[selector._key] is True
    failing = compile_selector('device.attributes["gpu.nvidia.com"].nope == 1')
    for _ in range(2):
        with pytest.raises(CELRuntimeError, match="no such key: nope"):
            failing.evaluate(device)
    assert device.results[failing._key] == "no such key: nope"


def test_compile_failures_are_cached_but_raised_every_time():
    for _ in range(2):
        with pytest.raises(CELCompileError) as caught:
            compile_selector("device.driver == gpu.nvidia.com")
        assert caught.value.column == 18
        assert caught.value.message == "undeclared reference to 'gpu' (in container '')"
