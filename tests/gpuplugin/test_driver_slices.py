"""ResourceSlices/DeviceClasses as the NVIDIA driver publishes them, and publishing through the client."""

from __future__ import annotations

import re
from unittest import mock

import pytest
import yaml
from click.testing import CliRunner

from gpudra.api.load import load_text
from gpudra.api.validate import has_errors, validate_documents
from gpudra.cli import cli
from gpudra.discovery import PROFILES, open_backend
from gpudra.kubeletplugin.publisher import KubeSliceClient, PublishError, SlicePublisher
from gpudra.gpuplugin.slices import build_resource_slices, device_classes, pool_devices, semver, slice_name

NODE = "node-1"


def _slices(profile: str, **kw):
    return build_resource_slices(open_backend("simulated", profile=profile, node_name=NODE).inventory(), NODE, **kw)


def _api_problems(objs):
    docs = load_text(yaml.safe_dump_all(objs), "slices.yaml")
    return [p for p in validate_documents(docs) if p.severity == "error"]


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("dynamic", [False, True])
def test_slices_are_valid_api_objects(profile, dynamic):
    slices = _slices(profile, dynamic_mig=dynamic)
    assert not has_errors(_api_problems(slices)), _api_problems(slices)
    pools = {(s["spec"]["pool"]["name"], s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"])
             for s in slices}
    assert pools == {(NODE, 1, len(slices))}
    names = [d["name"] for d in pool_devices(slices)]
    assert len(names) == len(set(names))


def test_full_gpu_attributes_like_the_nvidia_driver():
    [slice_] = _slices("dgx-h100")
    assert slice_["spec"]["driver"] == "gpu.nvidia.com" and slice_["spec"]["nodeName"] == NODE
    devices = slice_["spec"]["devices"]
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
    attrs = devices[0]["attributes"]
    assert attrs["type"] == {"string": "gpu"}
    assert attrs["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert attrs["brand"] == {"string": "Nvidia"} and attrs["architecture"] == {"string": "Hopper"}
    assert attrs["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attrs["driverVersion"] == {"version": "580.95.5"} and attrs["cudaDriverVersion"] == {"version": "13.0.0"}
    assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]",
                        attrs["resource.kubernetes.io/pciBusID"]["string"])
    assert attrs["resource.kubernetes.io/pcieRoot"]["string"].startswith("pci")
    # NUMA under KEP-6072's standard name, as NVIDIA's driver publishes it since it dropped gpu.nvidia.com/numa
    # (cmd/gpu-kubelet-plugin/deviceinfo.go addNumaNodeAttribute, v0.5.0-dev)
    numa = "resource.kubernetes.io/numaNode"
    assert "numa" not in attrs
    assert attrs[numa] == {"int": 0} and devices[7]["attributes"][numa] == {"int": 1}
    assert attrs["uuid"]["string"].startswith("GPU-")
    assert devices[0]["capacity"] == {"memory": {"value": "81559Mi"}}


def test_static_mig_devices_and_memory_slices():
    devices = pool_devices(_slices("hgx-a100-mig"))
    names = [d["name"] for d in devices]
    assert "gpu-0" not in names and "gpu-4" in names  # a GPU in MIG mode is published as its MIG devices
    mig = next(d for d in devices if d["name"] == "gpu-2-mig-3g40gb-9-4")
    assert mig["attributes"]["type"] == {"string": "mig"} and mig["attributes"]["profile"] == {"string": "3g.40gb"}
    assert mig["attributes"]["uuid"]["string"].startswith("MIG-")
    assert mig["attributes"]["parentUUID"] == next(d for d in devices if d["name"] == "gpu-2-mig-2g20gb-14-0")[
        "attributes"]["parentUUID"]
    cap = mig["capacity"]
    assert {k for k in cap if k.startswith("memorySlice")} == {"memorySlice4", "memorySlice5", "memorySlice6",
                                                                "memorySlice7"}
    assert cap["multiprocessors"] == {"value": "42"} and cap["memory"]["value"].endswith("Mi")


def test_dynamic_mig_layout_counters_first():
    slices = _slices("dgx-h100", dynamic_mig=True)
    assert "sharedCounters" in slices[0]["spec"] and "devices" not in slices[0]["spec"]
    assert [c["name"] for c in slices[0]["spec"]["sharedCounters"]] == [f"gpu-{i}-counter-set" for i in range(8)]
    for s in slices[1:]:
        assert len(s["spec"]["devices"]) <= 64 and "sharedCounters" not in s["spec"]
    gpu0 = [d["name"] for d in slices[1]["spec"]["devices"]]
    assert gpu0[0] == "gpu-0" and "gpu-0-mig-1g10gb-19-6" in gpu0 and len(gpu0) == 26


def test_splitting_keeps_order_and_pool_consistency():
    whole = pool_devices(_slices("hgx-a100-mig"))
    split = _slices("hgx-a100-mig", max_devices_per_slice=5)
    assert [len(s["spec"]["devices"]) for s in split] == [5, 5, 5, 5, 5, 1]
    assert pool_devices(split) == whole
    assert len({s["metadata"]["name"] for s in split}) == len(split)
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in split} == {6}
    assert not has_errors(_api_problems(split))


def test_versions_and_names():
    assert semver("580.95.05") == "580.95.5" and semver("13.0") == "13.0.0" and semver("10") == "10.0.0"
    long_node = "n" * 250
    assert len(slice_name(long_node, "gpu.nvidia.com", 3)) <= 253


def test_device_classes():
    gpu_class, mig_class, vfio_class = device_classes()
    assert gpu_class["metadata"]["name"] == "gpu.nvidia.com" and mig_class["metadata"]["name"] == "mig.nvidia.com"
    assert gpu_class["spec"]["selectors"][0]["cel"]["expression"] == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'")
    assert gpu_class["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "'mig'" in mig_class["spec"]["selectors"][0]["cel"]["expression"]
    # NVIDIA's deviceclass-vfio-gpu.yaml, name and selector as its chart writes them
    assert vfio_class["metadata"]["name"] == "vfio.gpu.nvidia.com" and vfio_class["spec"] == {"selectors": [{"cel": {
        "expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'"}}]}
    assert not has_errors(_api_problems([gpu_class, mig_class, vfio_class]))


def test_slices_cli():
    out = CliRunner().invoke(cli, ["driver", "slices", "--profile", "hgx-a100-mig", "--node-name", "n9",
                                   "--generation", "4"])
    assert out.exit_code == 0
    docs = list(yaml.safe_load_all(out.output))
    assert docs[0]["spec"]["pool"] == {"name": "n9", "generation": 4, "resourceSliceCount": 1}
    classes = CliRunner().invoke(cli, ["driver", "deviceclasses", "--driver", "gpu"])
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(classes.output)] == ["gpu.nvidia.com", "mig.nvidia.com",
                                                                              "vfio.gpu.nvidia.com"]


# -- publishing ------------------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status, reason=""):
        super().__init__(f"{status} {reason}")
        self.status, self.reason = status, reason


class FakeSliceApi:
    """An in-memory API server for ResourceSlices with injectable failures."""

    def __init__(self):
        self.objects: dict[str, dict] = {}
        self.version = 0
        self.failures: list[tuple[str, int]] = []  # (operation, status) consumed in order
        self.calls: list[str] = []

    def _maybe_fail(self, op):
        self.calls.append(op)
        if self.failures and self.failures[0][0] == op:
            raise ApiError(self.failures.pop(0)[1])

    def node_uid(self, node):
        self._maybe_fail("node")
        return "node-uid-1"

    def list(self, node, driver):
        self._maybe_fail("list")
        return [yaml.safe_load(yaml.safe_dump(o)) for o in self.objects.values()
                if o["spec"]["nodeName"] == node and o["spec"]["driver"] == driver]

    def _store(self, body):
        self.version += 1
        obj = yaml.safe_load(yaml.safe_dump(body))
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.objects[obj["metadata"]["name"]] = obj
        return obj

    def create(self, body):
        self._maybe_fail("create")
        if body["metadata"]["name"] in self.objects:
            raise ApiError(409, "AlreadyExists")
        return self._store(body)

    def replace(self, name, body):
        self._maybe_fail("replace")
        if self.objects[name]["metadata"]["resourceVersion"] != body["metadata"].get("resourceVersion"):
            raise ApiError(409, "Conflict")
        return self._store(body)

    def delete(self, name):
        self._maybe_fail("delete")
        if name not in self.objects:
            raise ApiError(404)
        del self.objects[name]


def _publisher(api, **kw):
    return SlicePublisher(api, node_name=NODE, driver_name="gpu.nvidia.com", backoff_s=0.001, **kw)


def _builder(profile, **kw):
    inventory = open_backend("simulated", profile=profile, node_name=NODE).inventory()
    return lambda generation, uid: build_resource_slices(inventory, NODE, generation=generation, node_uid=uid, **kw)


def test_publish_creates_with_owner_and_restart_adds_no_duplicates():
    api = FakeSliceApi()
    first = _publisher(api).publish(_builder("hgx-a100-mig", max_devices_per_slice=10))
    assert first == {"generation": 1, "created": 3, "updated": 0, "deleted": 0, "unchanged": 0}
    owner = next(iter(api.objects.values()))["metadata"]["ownerReferences"][0]
    assert owner == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid-1", "controller": True}
    again = _publisher(api).publish(_builder("hgx-a100-mig", max_devices_per_slice=10))  # a restarted driver
    assert again["unchanged"] == 3 and again["generation"] == 1 and len(api.objects) == 3
    assert not [c for c in api.calls[len(api.calls) - 2:] if c in ("create", "replace")]


def test_publish_bumps_generation_and_deletes_leftovers_on_change():
    api = FakeSliceApi()
    _publisher(api).publish(_builder("hgx-a100-mig", max_devices_per_slice=10))
    changed = _publisher(api).publish(_builder("hgx-a100-mig", max_devices_per_slice=30))
    assert changed == {"generation": 2, "created": 0, "updated": 1, "deleted": 2, "unchanged": 0}
    assert [o["spec"]["pool"] for o in api.objects.values()] == [
        {"name": NODE, "generation": 2, "resourceSliceCount": 1}]


def test_publish_retries_transient_errors_but_not_invalid_objects():
    api = FakeSliceApi()
    api.failures = [("node", 503), ("list", 500), ("create", 429)]
    summary = _publisher(api).publish(_builder("l4-node"))
    assert summary["created"] == 1 and api.calls.count("create") == 2
    api2 = FakeSliceApi()
    api2.failures = [("create", 422)]
    with pytest.raises(PublishError, match="422"):
        _publisher(api2).publish(_builder("l4-node"))
    assert api2.calls.count("create") == 1
    api3 = FakeSliceApi()
    api3.failures = [("list", 500)] * 5
    with pytest.raises(PublishError, match="listing"):
        _publisher(api3).publish(_builder("l4-node"))


def test_publish_relists_after_a_conflict():
    api = FakeSliceApi()
    _publisher(api).publish(_builder("l4-node"))
    api.failures = [("replace", 409)]
    summary = _publisher(api).publish(_builder("t4-node"))  # different content: update, first try conflicts
    assert summary["updated"] == 1 and api.calls.count("list") == 3


def test_kube_client_adapter_uses_the_official_client_methods():
    resource = mock.Mock()
    resource.list_resource_slice.return_value = {"items": [{"metadata": {"name": "a"}}]}
    resource.create_resource_slice.side_effect = lambda body: body
    core = mock.Mock()
    core.read_node.return_value = {"metadata": {"uid": "u-1"}}
    client = KubeSliceClient(resource, core)
    assert client.list(NODE, "gpu.nvidia.com") == [{"metadata": {"name": "a"}}]
    resource.list_resource_slice.assert_called_with(field_selector=f"spec.nodeName={NODE},spec.driver=gpu.nvidia.com")
    assert client.node_uid(NODE) == "u-1"
    client.create({"metadata": {"name": "x"}})
    client.replace("x", {"metadata": {"name": "x"}})
    client.delete("x")
    resource.replace_resource_slice.assert_called_with("x", {"metadata": {"name": "x"}})
    resource.delete_resource_slice.assert_called_with("x")


def test_kube_client_adapter_converts_client_models():
    from kubernetes import client as k8s

    resource = mock.Mock(spec=["list_resource_slice", "api_client"])
    resource.api_client = k8s.ApiClient()
    resource.list_resource_slice.return_value = k8s.V1ResourceSliceList(items=[k8s.V1ResourceSlice(
        metadata=k8s.V1ObjectMeta(name="s1"),
        spec=k8s.V1ResourceSliceSpec(driver="gpu.nvidia.com", node_name=NODE,
                                     pool=k8s.V1ResourcePool(name=NODE, generation=3, resource_slice_count=1)))])
    [item] = KubeSliceClient(resource).list(NODE, "gpu.nvidia.com")
    assert item["spec"]["nodeName"] == NODE and item["spec"]["pool"]["resourceSliceCount"] == 1
