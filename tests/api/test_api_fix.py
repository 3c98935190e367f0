"""`--fix` repairs: each mechanical rewrite, and that it leaves correct manifests alone."""

import copy
import os

import pytest

from gpudra.fix import fix_documents
from gpudra.api.load import Document, load_paths
from gpudra.api.schema.cel_check import rewrite_lookup
from gpudra.api.validate import has_errors, validate_documents

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fixed(*objs):
    result = fix_documents([Document(copy.deepcopy(o), "f.yaml", i) for i, o in enumerate(objs, start=1)])
    return [d.obj for d in result.documents], result


@pytest.mark.parametrize("expression, expected", [
    ('device.attributes["memory"].isGreaterThan(quantity("16Gi"))',
     'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("16Gi"))'),
    ('device.capacity["memory"].compareTo(quantity("1Gi")) > 0',
     'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("1Gi")) > 0'),
    ('device.attributes["productName"] == "x"', 'device.attributes["gpu.nvidia.com"].productName == "x"'),
    ("device.attributes['gpu.nvidia.com/product-name'] == 'a'", 'device.attributes["gpu.nvidia.com"].productName == \'a\''),
    ("device.attributes['example.com/model'] == 'a'", 'device.attributes["example.com"].model == \'a\''),
    # correct or ambiguous lookups are left alone
    ('device.capacity["driver-a"].cap.compareTo(quantity("1")) > 0', None),
    ('device.attributes["gpu"].x == 1', None),
    ('device.attributes["memory"]["x"] == 1', None),
    ('"gpu.nvidia.com" in device.attributes', None),
])
def test_rewrite_lookup(expression, expected):
    new, changes = rewrite_lookup(expression)
    assert new == (expected or expression)
    assert bool(changes) == (expected is not None)


def test_correct_manifests_are_unchanged():
    docs = load_paths([os.path.join(ROOT, "examples", d) for d in ("cluster", "workloads", "article-fixed")])
    result = fix_documents(docs)
    assert [d.obj for d in result.documents] == [d.obj for d in docs]
    assert result.changes == [] and result.cautions == []


def test_slice_repairs():
    slice_ = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
              "spec": {"driver": "gpu.nvidia.com", "nodeName": "n", "pool": {"name": "n", "resourceSliceCount": 1},
                       "devices": [{"name": "gpu-0", "basic": {
                           "attributes": {"memory": {"string": "80Gi"}, "model": "H100", "cores": {"quantity": "132"},
                                          "ecc": True},
                           "capacity": {"power": "700"}}}]}}
    (obj,), result = fixed(slice_)
    device = obj["spec"]["devices"][0]
    assert device == {"name": "gpu-0",
                      "attributes": {"model": {"string": "H100"}, "ecc": {"bool": True}},
                      "capacity": {"power": {"value": "700"}, "memory": {"value": "80Gi"}, "cores": {"value": "132"}}}
    assert not has_errors(validate_documents([Document(obj, "f.yaml", 1)]))
    assert len(result.changes) >= 4


def test_class_rename_follows_references_and_claim_level_cel_constraints_become_selectors():
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "example.com/gpu"},
           "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
             "spec": {"devices": {
                 "requests": [{"name": "a", "exactly": {"deviceClassName": "example.com/gpu"}},
                              {"name": "b", "exactly": {"deviceClassName": "example.com-gpu"}}],
                 "constraints": [{"requests": ["b"], "cel": 'device.attributes["memory"].isGreaterThan(quantity("1Gi"))'},
                                 {"matchAttribute": "gpu.example.com/numa"}]}}}
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t"},
                "spec": {"devices": {"requests": [{"name": "a", "deviceClassName": "example.com/gpu"}]}}}
    (new_class, new_claim, new_template), result = fixed(cls, claim, template)
    assert new_class["metadata"]["name"] == "gpu.example.com"
    assert new_class["spec"]["extendedResourceName"] == "example.com/gpu"
    requests = new_claim["spec"]["devices"]["requests"]
    assert [r["exactly"]["deviceClassName"] for r in requests] == ["gpu.example.com", "gpu.example.com"]
    # the class's own driver is used as the capacity domain
    assert requests[1]["exactly"]["selectors"] == [
        {"cel": {"expression": 'device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("1Gi"))'}}]
    assert new_claim["spec"]["devices"]["constraints"] == [{"matchAttribute": "gpu.example.com/numa"}]
    assert new_template["spec"] == {"spec": {"devices": {"requests": [
        {"name": "a", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}
    docs = [Document(o, "f.yaml", i) for i, o in enumerate((new_class, new_claim, new_template), start=1)]
    assert not has_errors(validate_documents(docs))


def test_malformed_documents_are_left_unchanged_with_a_caution():
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
             "spec": {"devices": {"requests": [{"name": "a", "deviceClassName": "x", "constraints": [{"cel": "true"}],
                                                "selectors": "oops"}]}}}
    (obj,), result = fixed(claim)
    assert obj == claim or result.changes
