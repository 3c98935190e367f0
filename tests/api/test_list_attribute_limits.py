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
from gpudra.api.validate import gate_problems, validate_document
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


@pytest.mark.parametrize("version,expected", [("1.36", "alpha, off by default in 1.36"),
                                              ("1.35", "which Kubernetes 1.35 does not have"),
                                              ("1.34", "which Kubernetes 1.34 does not have")])
def test_a_list_attribute_is_a_warning_naming_the_gate_where_it_is_off(version, expected):
    """DRAListTypeAttributes is alpha in 1.36 (kube_features.go), off by default; earlier releases have no such
    fields: the API server drops or does not know them, so the cluster keeps a different slice than the file."""
    obj = _slice([{"name": "gpu-0", "attributes": {"numa": {"ints": [0, 1]}, "model": {"string": "a"}}}])
    warnings = [f"{p.path}: {p.message}" for p in gate_problems(Document(obj, "<test>", 1), version)
                if p.severity == "warning"]
    assert len(warnings) == 1 and "spec.devices[0].attributes" in warnings[0] and "ints" in warnings[0]
    assert "DRAListTypeAttributes" in warnings[0] and expected in warnings[0]
