"""Limits of list-type attributes (DRAListTypeAttributes), from sources gpudra did not write:

- kubernetes.io, DRA API concepts, "Details for DRA Driver Authors": "The total number of individual attribute
  values per device (scalar fields plus all list elements combined) is limited to 48. When any device in a
  ResourceSlice uses this feature or other advanced features such as taints, the ResourceSlice will be limited to
  at most 64 devices."
- k8s.io/dynamic-resource-allocation cel/compile.go `includesFunc`: a list of more than
  ResourceSliceMaxAttributeValuesPerDevice values is a runtime error "'includes' function cannot be applied to lists
  longer than %d values"; cel/compile_test.go expects that message for 48 + 1 values and an estimated cost of
  `4 + 48` for `includes` ("cost of includes is max list length").
"""

from __future__ import annotations

import pytest

from gpudra.api.load import Document
from gpudra.api.validate import validate_document
from gpudra.cel import CELRuntimeError, compile_selector, device_input

DOC_VALUES_PER_DEVICE = 48  # the concepts page's number, written here rather than imported
DOC_DEVICES_WITH_ADVANCED = 64


def _slice(devices: list[dict]) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
            "spec": {"driver": "dra.example.com", "nodeName": "n", "devices": devices,
                     "pool": {"name": "p", "resourceSliceCount": 1, "generation": 1}}}


def _errors(obj: dict) -> list[str]:
    return [f"{p.path}: {p.message}" for p in validate_document(Document(obj, "<test>", 1)) if p.severity == "error"]


@pytest.mark.parametrize("scalars,listed", [(0, DOC_VALUES_PER_DEVICE), (8, DOC_VALUES_PER_DEVICE - 8),
                                            (0, DOC_VALUES_PER_DEVICE + 1), (9, DOC_VALUES_PER_DEVICE - 8),
                                            (31, 18)])
def test_a_device_holds_at_most_48_attribute_values_scalars_included(scalars, listed):
    attributes: dict = {f"s{i}": {"int": i} for i in range(scalars)}
    attributes["models"] = {"strings": [f"model-{i}" for i in range(listed)]}
    errors = _errors(_slice([{"name": "gpu-0", "attributes": attributes}]))
    over = scalars + listed > DOC_VALUES_PER_DEVICE
    assert bool([e for e in errors if "values in all" in e]) == over, errors


def test_values_of_several_list_attributes_count_together():
    attributes = {"a": {"ints": list(range(20))}, "b": {"bools": [True] * 20}, "c": {"versions": ["1.0.0"] * 9}}
    errors = _errors(_slice([{"name": "gpu-0", "attributes": attributes}]))
    assert any("has 49" in e for e in errors), errors
    attributes["c"] = {"versions": ["1.0.0"] * 8}
    assert not _errors(_slice([{"name": "gpu-0", "attributes": attributes}]))


@pytest.mark.parametrize("devices", [DOC_DEVICES_WITH_ADVANCED, DOC_DEVICES_WITH_ADVANCED + 1])
def test_a_slice_with_a_list_attribute_holds_at_most_64_devices(devices):
    listed = [{"name": f"gpu-{i}", "attributes": {"models": {"strings": ["a"]}} if i == 0 else {"n": {"int": i}}}
              for i in range(devices)]
    scalar_only = [{"name": f"gpu-{i}", "attributes": {"n": {"int": i}}} for i in range(devices)]
    assert bool(_errors(_slice(listed))) == (devices > DOC_DEVICES_WITH_ADVANCED)
    assert not _errors(_slice(scalar_only))  # 128 without advanced features


def _device(values: int) -> object:
    return device_input("dra.example.com", {"name": "d", "attributes": {
        "name": {"strings": [f"value-{i}" for i in range(values)]}}}, list_type_attributes=True)


def test_includes_refuses_a_list_longer_than_48_values_as_compile_go_does():
    selector = compile_selector(f'device.attributes["dra.example.com"].name.includes("value-{DOC_VALUES_PER_DEVICE}")',
                                list_type_attributes=True)
    with pytest.raises(CELRuntimeError, match=f"cannot be applied to lists longer than {DOC_VALUES_PER_DEVICE} values"):
        selector.evaluate(_device(DOC_VALUES_PER_DEVICE + 1))
    last = compile_selector(f'device.attributes["dra.example.com"].name.includes("value-{DOC_VALUES_PER_DEVICE - 1}")',
                            list_type_attributes=True)
    assert last.evaluate(_device(DOC_VALUES_PER_DEVICE)) is True
