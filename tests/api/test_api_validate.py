"""Validation of every kind: valid manifests pass; each rule reports the right field with a useful message."""

import copy
import os

import pytest

from gpudra.api.defaults import apply_defaults
from gpudra.api.load import Document, load_paths
from gpudra.api.validate import validate_document, validate_documents

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "api")

SLICE = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
    "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1", "generation": 1,
                                                                        "resourceSliceCount": 1},
             "devices": [{"name": "gpu-0", "attributes": {"productName": {"string": "H100"},
                                                          "driverVersion": {"version": "580.95.5"}},
                          "capacity": {"memory": {"value": "80Gi"}}}]},
}
CLAIM = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "default"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
}
CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
         "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
       "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}],
                "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}]}}


def problems_for(obj):
    return validate_document(Document(obj, "t.yaml", 1))


def errors_for(obj):
    return [p for p in problems_for(obj) if p.severity == "error"]


@pytest.mark.parametrize("paths", [["examples/cluster"], ["examples/workloads"], ["examples/article-fixed"],
                                   [os.path.join(DATA, "v1beta1.yaml")]])
def test_bundled_manifests_are_valid(paths):
    docs = load_paths([os.path.join(ROOT, p) if not os.path.isabs(p) else p for p in paths])
    assert docs
    assert [str(p) for p in validate_documents(docs) if p.severity == "error"] == []


def test_every_kind_validates_and_defaults():
    docs = load_paths([os.path.join(ROOT, "examples", d) for d in ("cluster", "workloads")])
    kinds = {d.kind for d in docs}
    assert {"DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "Node", "Pod",
            "Deployment"} <= kinds
    for doc in docs:
        defaulted = apply_defaults(doc.obj)
        assert validate_document(Document(defaulted, doc.source, doc.index)) == validate_document(doc)


def mutate(base, path, value):
    obj = copy.deepcopy(base)
    target = obj
    for part in path[:-1]:
        target = target[part]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return obj


DELETE = object()
REQ = ("spec", "devices", "requests", 0)
DEV = ("spec", "devices", 0)

CASES = [
    # (base, path, value, expected problem path, message fragment)
    (CLAIM, REQ + ("exactly", "count"), -1, "spec.devices.requests[0].exactly.count", "greater than zero"),
    (CLAIM, REQ + ("exactly", "allocationMode"), "Any", "spec.devices.requests[0].exactly.allocationMode",
     "unsupported value"),
    (CLAIM, REQ + ("exactly",), {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All", "count": 2},
     "spec.devices.requests[0].exactly.count", "must not be specified when allocationMode is 'All'"),
    (CLAIM, REQ + ("name",), "GPU_1", "spec.devices.requests[0].name", "DNS label"),
    (CLAIM, REQ + ("exactly",), DELETE, "spec.devices.requests[0]", "exactly one of exactly, firstAvailable"),
    (CLAIM, REQ + ("firstAvailable",), [{"name": "a", "deviceClassName": "x"}], "spec.devices.requests[0]",
     "only one of exactly, firstAvailable"),
    (CLAIM, ("spec", "devices", "requests"), [{"name": f"r{i}", "exactly": {"deviceClassName": "c"}} for i in range(33)],
     "spec.devices.requests", "at most 32"),
    (CLAIM, ("spec", "devices", "requests"), [{"name": "r", "exactly": {"deviceClassName": "c"}}] * 2,
     "spec.devices.requests[1].name", "duplicate"),
    (CLAIM, REQ, {"name": "r", "firstAvailable": [{"name": f"s{i}", "deviceClassName": "c"} for i in range(9)]},
     "spec.devices.requests[0].firstAvailable", "at most 8"),
    (CLAIM, REQ, {"name": "r", "firstAvailable": [{"name": "s", "deviceClassName": "c", "adminAccess": True}]},
     "spec.devices.requests[0].firstAvailable[0].adminAccess", "subrequests cannot ask for admin access"),
    (CLAIM, REQ + ("exactly", "selectors"), [{"cel": {"expression": "true"}}] * 33,
     "spec.devices.requests[0].exactly.selectors", "at most 32"),
    (CLAIM, REQ + ("exactly", "selectors"), [{"cel": {"expression": "x" * (10 * 1024 + 1)}}],
     "spec.devices.requests[0].exactly.selectors[0].cel.expression", "at most 10240"),
    (CLAIM, REQ + ("exactly", "tolerations"), [{"key": "k", "operator": "Exists"}] * 17,
     "spec.devices.requests[0].exactly.tolerations", "at most 16"),
    (CLAIM, REQ + ("exactly", "tolerations"), [{"key": "k", "operator": "Exists", "value": "v"}],
     "spec.devices.requests[0].exactly.tolerations[0].value", "must be empty when operator is 'Exists'"),
    (CLAIM, REQ + ("exactly", "capacity"), {"requests": {"memory": "lots"}},
     "spec.devices.requests[0].exactly.capacity.requests[memory]", "quantity"),
    (CLAIM, ("spec", "devices", "constraints"), [{"matchAttribute": "nvlinkDomain"}],
     "spec.devices.constraints[0].matchAttribute", "fully qualified"),
    (CLAIM, ("spec", "devices", "constraints"), [{"requests": ["nope"], "matchAttribute": "a.b/c"}],
     "spec.devices.constraints[0].requests[0]", "not a request of this claim"),
    (CLAIM, ("spec", "devices", "constraints"), [{"matchAttribute": "a.b/c", "distinctAttribute": "a.b/d"}],
     "spec.devices.constraints[0]", "only one of matchAttribute, distinctAttribute"),
    (CLAIM, ("spec", "devices", "constraints"), [{"cel": "true"}], "spec.devices.constraints[0].cel",
     "constraints have no cel field"),
    (CLAIM, ("spec", "devices", "config"), [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"x": "y" * 11000}}}],
     "spec.devices.config[0].opaque.parameters", "at most 10240 bytes"),
    (CLAIM, ("status",), {"reservedFor": [{"resource": "pods", "name": "p", "uid": "1"}]}, "status.reservedFor",
     "only be set while the claim is allocated"),
    (CLAIM, ("spec", "resourceClassName"), "gpu", "spec.resourceClassName", "classic-DRA"),
    (CLAIM, ("metadata", "name"), "Bad_Name", "metadata.name", "DNS subdomain"),
    (CLAIM, ("metadata", "labels"), {"bad key!": "v"}, "metadata.labels[bad key!]", "name part"),
    (SLICE, ("spec", "allNodes"), True, "spec", "only one of nodeName, nodeSelector, allNodes"),
    (SLICE, ("spec", "nodeName"), DELETE, "spec", "exactly one of nodeName"),
    (SLICE, ("spec", "driver"), "GPU_Driver", "spec.driver", "DNS subdomain"),
    (SLICE, ("spec", "pool", "resourceSliceCount"), 0, "spec.pool.resourceSliceCount", "greater than or equal to 1"),
    (SLICE, ("spec", "pool", "generation"), "1", "spec.pool.generation", "remove the quotes"),
    (SLICE, ("spec", "devices"), [{"name": f"d{i}"} for i in range(129)], "spec.devices", "at most 128"),
    (SLICE, ("spec", "devices"), [{"name": f"d{i}", "taints": [{"key": "k", "effect": "NoSchedule"}]} for i in range(65)],
     "spec.devices", "at most 64 devices"),
    (SLICE, DEV + ("attributes", "version"), {"version": "1.2"}, "spec.devices[0].attributes[version].version",
     "semantic version"),
    (SLICE, DEV + ("attributes", "model"), {"string": "x" * 65}, "spec.devices[0].attributes[model].string",
     "at most 64"),
    (SLICE, DEV + ("attributes", "product-name"), {"string": "x"}, "spec.devices[0].attributes[product-name]",
     "not a C identifier"),
    (SLICE, DEV + ("attributes", "both"), {"string": "x", "int": 1}, "spec.devices[0].attributes[both]",
     "only one of int, bool, string"),
    (SLICE, DEV + ("attributes", "memory"), {"quantity": "80Gi"}, "spec.devices[0].attributes[memory].quantity",
     "move it to capacity.memory.value"),
    (SLICE, DEV + ("attributes", "memory"), "80Gi", "spec.devices[0].attributes[memory]", "belongs in capacity"),
    (SLICE, DEV + ("attributes", "ids"), {"ints": [1, "2"]}, "spec.devices[0].attributes[ids].ints[1]", "integer"),
    (SLICE, DEV + ("attributes",), {f"a{i}": {"int": i} for i in range(32)}, "spec.devices[0]",
     "at most 32 entries"),
    (SLICE, DEV + ("capacity", "memory"), "80Gi", "spec.devices[0].capacity[memory]", "{value: '80Gi'}"),
    (SLICE, DEV + ("capacity", "memory"), {"value": "80Gi", "requestPolicy": {"default": "1Gi"}},
     "spec.devices[0].capacity[memory].requestPolicy", "allowMultipleAllocations must be true"),
    (SLICE, DEV + ("basic",), {"attributes": {}}, "spec.devices[0].basic", "`basic` wrapper"),
    (SLICE, DEV + ("nodeName",), "n1", "spec.devices[0].nodeName", "perDeviceNodeSelection"),
    (SLICE, DEV + ("taints",), [{"key": "k", "effect": "Sometimes"}], "spec.devices[0].taints[0].effect",
     "unsupported value"),
    (SLICE, DEV + ("bindingConditions",), ["ready"], "spec.devices[0].bindingFailureConditions", "required"),
    (SLICE, ("spec", "sharedCounters"), [{"name": "cs", "counters": {"memory": {"value": "1Gi"}}}], "spec",
     "only one of devices and sharedCounters"),
    (SLICE, ("spec", "nodeSelector"), {"nodeSelectorTerms": [{}, {}]}, "spec.nodeSelector.nodeSelectorTerms",
     "exactly one node selector term"),
    (CLASS, ("metadata", "name"), "nvidia.com/gpu", "metadata.name", "'gpu.nvidia.com'"),
    (CLASS, ("spec", "selectors"), [{"cel": {}}], "spec.selectors[0].cel.expression", "required"),
    (CLASS, ("spec", "extendedResourceName"), "gpu", "spec.extendedResourceName", "extended resource name"),
    (CLASS, ("spec", "selector"), [], "spec.selector", "did you mean 'selectors'"),
    (POD, ("spec", "containers", 0, "resources", "claims", 0, "name"), "other",
     "spec.containers[0].resources.claims[0].name", "must be one of the names in spec.resourceClaims"),
    (POD, ("spec", "resourceClaims", 0, "resourceClaimTemplateName"), "t", "spec.resourceClaims[0]",
     "only one of resourceClaimName, resourceClaimTemplateName"),
    (POD, ("spec", "containers", 0, "resources", "limits"), {"nvidia.com/gpu": "one"},
     "spec.containers[0].resources.limits[nvidia.com/gpu]", "quantity"),
]


@pytest.mark.parametrize("base, path, value, problem_path, fragment", CASES,
                         ids=[f"{c[0]['kind']}:{c[3]}:{c[4][:30]}" for c in CASES])
def test_rule(base, path, value, problem_path, fragment):
    assert errors_for(base) == []
    found = errors_for(mutate(base, path, value))
    matching = [p for p in found if p.path == problem_path and fragment in p.message]
    assert matching, "\n".join(str(p) for p in found)


def test_all_problems_of_a_document_are_reported_at_once():
    obj = copy.deepcopy(CLAIM)
    obj["metadata"]["name"] = "Bad"
    obj["spec"]["devices"]["requests"][0]["exactly"]["count"] = -3
    obj["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [{"operator": "Maybe"}]
    assert {p.path for p in errors_for(obj)} >= {"metadata.name", "spec.devices.requests[0].exactly.count",
                                                "spec.devices.requests[0].exactly.tolerations[0].operator"}


def test_problem_string_format():
    obj = copy.deepcopy(CLAIM)
    obj["metadata"]["name"] = "gpu-claim"
    request = obj["spec"]["devices"]["requests"][0]
    request.pop("exactly")
    request["deviceClassName"] = "gpu.nvidia.com"
    (problem,) = [p for p in validate_document(Document(obj, "claims.yaml", 2)) if "deviceClassName" in p.path]
    assert str(problem) == ("claims.yaml:doc 2 (ResourceClaim/gpu-claim): spec.devices.requests[0].deviceClassName: "
                            "not a field in resource.k8s.io/v1; move it under spec.devices.requests[0].exactly "
                            "(the flat request layout is resource.k8s.io/v1beta1)")
    assert "exactly:\n  deviceClassName: gpu.nvidia.com" in problem.fix


def test_core_kinds_tolerate_unmodelled_fields():
    pod = copy.deepcopy(POD)
    pod["spec"]["hostNetwork"] = True
    pod["spec"]["containers"][0]["livenessProbe"] = {"exec": {"command": ["true"]}}
    assert problems_for(pod) == []


def test_wrong_api_version_and_unknown_kinds():
    wrong = dict(CLAIM, apiVersion="resource.k8s.io/v1alpha2")
    assert any("served as apiVersion resource.k8s.io/v1" in p.message for p in errors_for(wrong))
    typo = dict(CLAIM, kind="ResourceClam")
    assert any("did you mean 'ResourceClaim'" in p.message for p in errors_for(typo))
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    assert [p.severity for p in problems_for(other)] == ["warning"]


def test_cross_object_checks():
    docs = [Document(o, "all.yaml", i) for i, o in enumerate([CLASS, CLAIM, POD, CLAIM], start=1)]
    claim_typo = copy.deepcopy(CLAIM)
    claim_typo["metadata"]["name"] = "d"
    claim_typo["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nvidia.co"
    pod_missing = copy.deepcopy(POD)
    pod_missing["metadata"]["name"] = "q"
    pod_missing["spec"]["resourceClaims"][0]["resourceClaimName"] = "missing"
    docs += [Document(claim_typo, "all.yaml", 5), Document(pod_missing, "all.yaml", 6)]
    messages = [str(p) for p in validate_documents(docs)]
    assert any("doc 4" in m and "warning: " in m and "defined twice" in m for m in messages)
    assert any("doc 5" in m and "did you mean 'gpu.nvidia.com'" in m for m in messages)
    assert any("doc 6" in m and "no ResourceClaim 'missing'" in m for m in messages)


def test_old_versions_are_validated_after_conversion():
    docs = load_paths([os.path.join(DATA, "v1beta1.yaml")])
    assert [p for p in validate_documents(docs) if p.severity == "error"] == []
    broken = copy.deepcopy(docs[0].obj)
    broken["spec"]["devices"]["requests"][0]["count"] = -1
    (problem,) = errors_for(broken)
    assert "after conversion to resource.k8s.io/v1" in problem.message


def test_admin_access_needs_a_labelled_namespace():
    claim = copy.deepcopy(CLAIM)
    claim["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
    docs = [Document(namespace, "a.yaml", 1), Document(claim, "a.yaml", 2)]
    (problem,) = [p for p in validate_documents(docs) if "adminAccess" in p.path]
    assert problem.severity == "error" and "not labelled resource.kubernetes.io/admin-access" in problem.message
    namespace["metadata"]["labels"] = {"resource.kubernetes.io/admin-access": "true"}
    assert [p for p in validate_documents(docs) if "adminAccess" in p.path] == []


def test_status_must_match_the_claim():
    claim = copy.deepcopy(CLAIM)
    claim["status"] = {
        "allocation": {"devices": {"results": [{"request": "other", "driver": "gpu.nvidia.com", "pool": "n1",
                                                 "device": "gpu-0"}]}},
        "devices": [{"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-9"}],
    }
    paths = {p.path: p.message for p in errors_for(claim)}
    assert "not a request of this claim" in paths["status.allocation.devices.results[0].request"]
    assert "not in status.allocation" in paths["status.devices[0]"]


def test_toleration_seconds_need_no_execute():
    claim = copy.deepcopy(CLAIM)
    claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]
    assert any(p.path.endswith("tolerations[0].effect") for p in errors_for(claim))


def test_cronjob_pod_template_is_checked():
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": copy.deepcopy(POD["spec"])}}}}}
    assert errors_for(cron) == []
    cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["resources"]["claims"][0]["name"] = "x"
    (problem,) = errors_for(cron)
    assert problem.path == "spec.jobTemplate.spec.template.spec.containers[0].resources.claims[0].name"


def test_request_policy_rules():
    slice_ = copy.deepcopy(SLICE)
    device = slice_["spec"]["devices"][0]
    device["allowMultipleAllocations"] = True
    device["capacity"]["memory"]["requestPolicy"] = {"default": "8Gi", "validValues": ["8Gi", "4Gi", "100Gi"]}
    paths = {p.path: p.message for p in problems_for(slice_)}
    assert "ascending" in paths["spec.devices[0].capacity[memory].requestPolicy.validValues"]
    assert "exceeds the capacity value" in paths["spec.devices[0].capacity[memory].requestPolicy.validValues[2]"]
    device["capacity"]["memory"]["requestPolicy"] = {"default": "3Gi", "validRange": {"min": "2Gi", "step": "2Gi"}}
    paths = {p.path: p.message for p in errors_for(slice_)}
    assert "multiple of step" in paths["spec.devices[0].capacity[memory].requestPolicy.default"]
    device["capacity"]["memory"]["requestPolicy"] = {"default": "4Gi", "validRange": {"min": "2Gi", "step": "2Gi"}}
    assert errors_for(slice_) == []


def test_specs_of_classes_and_claims_may_be_empty():
    assert errors_for({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}}) == []
    assert errors_for({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c"}}) == []
    (problem,) = errors_for({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"}})
    assert problem.path == "spec"


def test_v1_layout_inside_an_old_version_is_reported():
    claim = copy.deepcopy(CLAIM)
    claim["apiVersion"] = "resource.k8s.io/v1beta1"
    (problem,) = errors_for(claim)
    assert problem.path == "spec.devices.requests[0].exactly"
    assert "not a field in resource.k8s.io/v1beta1" in problem.message
    claim["apiVersion"] = "resource.k8s.io/v1beta2"  # shares the v1 layout
    assert errors_for(claim) == []


def test_device_taint_rules():
    rule = {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule", "metadata": {"name": "drain-gpu-0"},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"},
                     "taint": {"key": "example.com/maintenance", "value": "true", "effect": "NoExecute"}}}
    assert problems_for(rule) == []
    rule["spec"]["taint"]["effect"] = "Evict"
    rule["spec"]["deviceSelector"]["device"] = "GPU 0"
    assert {p.path for p in errors_for(rule)} == {"spec.taint.effect", "spec.deviceSelector.device"}
