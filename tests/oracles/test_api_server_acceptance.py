"""gpudra validate accepts the manifests the API server accepts (none may be rejected)."""

import copy
import math

import pytest

from gpudra.api.load import Document
from gpudra.api.quantity import Quantity, QuantityError
from gpudra.api.validate import validate_document

SLICE = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
    "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
             "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
             "devices": [{"name": "gpu-0", "capacity": {"memory": {"value": "80Gi"}}}]},
}


def errors_for(obj):
    return [p for p in validate_document(Document(obj, "t.yaml", 1)) if p.severity == "error"]


# resource.Quantity.UnmarshalJSON parses a JSON number's text, so `value: 1.5` in YAML (a float after
# YAML -> JSON) is accepted by the API server.
@pytest.mark.parametrize("number, text", [(1.5, "1.5"), (0.5, "500m"), (8.0, "8"), (1e-07, "100n")])
def test_float_quantity_is_the_json_number(number, text):
    assert Quantity.parse(number) == Quantity.parse(text)
    obj = copy.deepcopy(SLICE)
    obj["spec"]["devices"][0]["capacity"]["memory"]["value"] = number
    assert errors_for(obj) == []


@pytest.mark.parametrize("number", [math.inf, -math.inf, math.nan])
def test_non_finite_float_quantity_is_refused(number):
    with pytest.raises(QuantityError):
        Quantity.parse(number)


# kubectl's YAMLOrJSONDecoder reads a stream of JSON objects (e.g. `jq -c '.items[]'` output).
def test_concatenated_json_objects_are_a_stream():
    from gpudra.api.load import LoadError, load_text

    slice2 = copy.deepcopy(SLICE)
    slice2["metadata"]["name"] = "s2"
    import json

    text = json.dumps(SLICE) + "\n" + json.dumps(slice2, indent=2) + "\n"
    docs = load_text(text, "stream.json")
    assert [d.obj["metadata"]["name"] for d in docs] == ["s", "s2"]
    assert [d.index for d in docs] == [1, 2]
    with pytest.raises(LoadError):
        load_text(json.dumps(SLICE) + "\n{\"kind\": ", "broken.json")


# DeviceTaintRule is a known kind served at other versions: the message must say which, not "did you mean
# 'DeviceTaintRule'?".
def test_device_taint_rule_at_an_unserved_version_names_the_served_versions():
    rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "r"},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com"},
                     "taint": {"key": "k", "effect": "NoSchedule"}}}
    (problem,) = errors_for(rule)
    assert problem.path == "apiVersion"
    assert "did you mean" not in problem.message
    assert "resource.k8s.io/v1beta2" in problem.message and "resource.k8s.io/v1alpha3" in problem.message
    assert "v1beta1" not in problem.message
    del rule["apiVersion"]
    (missing,) = errors_for(rule)
    assert "resource.k8s.io/v1beta2" in missing.message


# Kubernetes measures string limits with Go's len(): UTF-8 bytes, not characters.
def test_string_limits_count_utf8_bytes():
    obj = copy.deepcopy(SLICE)
    device = obj["spec"]["devices"][0]
    device["attributes"] = {"model": {"string": "é" * 33}}  # 33 characters, 66 bytes
    (problem,) = errors_for(obj)
    assert problem.path == "spec.devices[0].attributes[model].string" and "66" in problem.message
    device["attributes"] = {"model": {"string": "é" * 32}}  # 64 bytes
    assert errors_for(obj) == []


def test_selector_expression_limit_counts_utf8_bytes():
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
    prefix = "device.driver == '"
    fits = prefix + "é" * ((10240 - len(prefix) - 1) // 2) + "'"
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": fits}}]
    assert len(fits.encode()) <= 10240 and errors_for(claim) == []
    too_long = fits[:-1] + "éé'"
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": too_long}}]
    (problem,) = errors_for(claim)
    assert problem.path.endswith("cel.expression") and "10240" in problem.message


# `-f dir -f dir/file.yaml` (or the same file twice) must not make every object a duplicate of itself.
def test_a_file_named_twice_is_read_once(tmp_path):
    import json

    from gpudra.api.load import load_paths

    manifest = tmp_path / "slice.json"
    manifest.write_text(json.dumps(SLICE))
    docs = load_paths([str(tmp_path), str(manifest), str(tmp_path / "." / "slice.json")])
    assert len(docs) == 1


def test_empty_selector_expression_is_one_clear_error():
    device_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "x"},
                    "spec": {"selectors": [{"cel": {"expression": ""}}]}}
    (problem,) = errors_for(device_class)
    assert problem.path == "spec.selectors[0].cel.expression" and "empty" in problem.message


# v1beta2 has v1's layout: the v1beta1 flat request and `basic` device are unknown fields there.
def test_v1beta1_layout_in_a_v1beta2_object_is_reported():
    claim = {"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com"}]}}}
    assert "spec.devices.requests[0].deviceClassName" in [p.path for p in errors_for(claim)]
    device_slice = copy.deepcopy(SLICE)
    device_slice["apiVersion"] = "resource.k8s.io/v1beta2"
    device_slice["spec"]["devices"] = [{"name": "gpu-0", "basic": {"capacity": {"memory": {"value": "1Gi"}}}}]
    assert "spec.devices[0].basic" in [p.path for p in errors_for(device_slice)]
    good = copy.deepcopy(claim)
    good["spec"]["devices"]["requests"][0] = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    assert errors_for(good) == []


def test_fix_repairs_the_v1beta1_layout_in_a_v1beta2_object():
    from gpudra.fix import fix_documents

    claim = {"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com"}]}}}
    (doc,) = fix_documents([Document(copy.deepcopy(claim), "f.yaml", 1)]).documents
    assert doc.obj["apiVersion"] == "resource.k8s.io/v1beta2"
    assert doc.obj["spec"]["devices"]["requests"][0] == {"name": "gpu",
                                                         "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    assert errors_for(doc.obj) == []


def test_byte_order_mark_before_a_json_stream():
    import json

    from gpudra.api.load import load_text

    text = "\ufeff" + json.dumps(SLICE) + "\n" + json.dumps(SLICE) + "\n"
    assert len(load_text(text, "bom.json")) == 2
