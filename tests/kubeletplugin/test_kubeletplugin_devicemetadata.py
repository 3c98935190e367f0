"""KEP-5304 device metadata files, as upstream's kubelet-plugin helper writes them (NVIDIA's DeviceMetadata gate).

The layout, names and schema are k8s.io/dynamic-resource-allocation as vendored by
kubernetes-sigs/dra-driver-nvidia-gpu at commit 95932046: kubeletplugin/metadata.go (metadataFilePath,
cdiSpecFilePath, containerFilePath, writeCDISpec, buildDeviceMetadata, cleanupClaim), api/metadata/types.go
(ContainerDir, ResourceClaimsSubDir, ResourceClaimTemplatesSubDir, MetadataFileSuffix) and
api/metadata/v1alpha1 (group metadata.resource.k8s.io, kind DeviceMetadata); device_state.go attaches attributes
to VFIO devices only and driver.go enables version v1alpha1. End to end with the GPU plugin: the last test.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml

from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.kubeletplugin.claimpaths import ClaimPathError
from gpudra.kubeletplugin.devicemetadata import MetadataDevice, MetadataWriter
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim

UID = "0b6f8d5e-3c1a-4e55-9f0e-6a7d2c1b9e10"
DRIVER = "gpu.nvidia.com"


def test_files_and_cdi_specs_as_upstreams_helper_writes_them(tmp_path):
    plugin, cdi = str(tmp_path / "plugin"), str(tmp_path / "cdi")
    writer = MetadataWriter(DRIVER, plugin, cdi)
    attrs = {"uuid": {"string": "u"}, "type": {"string": "vfio"}}
    ids = writer.write_claim("ns", "vm-claim", UID, None, [
        MetadataDevice("gpus/large", "node-a", "gpu-vfio-0", attrs),
        MetadataDevice("gpus/large", "node-a", "gpu-vfio-1"),
        MetadataDevice("nic", "node-a", "gpu-vfio-2"),
    ])
    assert ids == {"gpus": f"{DRIVER}/metadata={UID}_gpus", "nic": f"{DRIVER}/metadata={UID}_nic"}
    host = os.path.join(plugin, "dra-device-metadata", "ns_vm-claim", "gpus", "metadata.json")
    with open(host, encoding="utf-8") as fh:
        text = fh.read()
    assert text.endswith("}\n") and text.count("\n}\n") == 1, "one pretty document, one newline"
    assert json.loads(text) == {
        "kind": "DeviceMetadata", "apiVersion": "metadata.resource.k8s.io/v1alpha1",
        "metadata": {"name": "vm-claim", "namespace": "ns", "uid": UID, "generation": 1, "creationTimestamp": None},
        "requests": [{"name": "gpus/large", "devices": [
            {"driver": DRIVER, "pool": "node-a", "name": "gpu-vfio-0",
             "attributes": {"type": {"string": "vfio"}, "uuid": {"string": "u"}}},
            {"driver": DRIVER, "pool": "node-a", "name": "gpu-vfio-1"}]}],
    }
    assert list(json.loads(text)["requests"][0]["devices"][0]["attributes"]) == ["type", "uuid"], "Go sorts keys"
    with open(os.path.join(cdi, f"{DRIVER}_metadata_{UID}_gpus.json"), encoding="utf-8") as fh:
        assert json.load(fh) == {"cdiVersion": "0.5.0", "kind": f"{DRIVER}/metadata", "devices": [{
            "name": f"{UID}_gpus", "containerEdits": {"mounts": [{
                "hostPath": host, "options": ["ro", "bind"],
                "containerPath": f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/vm-claim/gpus/"
                                 f"{DRIVER}-metadata.json"}]}}]}
    assert os.stat(host).st_mode & 0o777 == 0o644

    writer.cleanup_claim("ns", "vm-claim", UID)
    assert not os.path.exists(os.path.join(plugin, "dra-device-metadata", "ns_vm-claim"))
    assert os.listdir(cdi) == []
    writer.cleanup_claim("ns", "vm-claim", UID)  # idempotent


def test_a_template_claim_is_mounted_under_its_pod_claim_name(tmp_path):
    writer = MetadataWriter(DRIVER, str(tmp_path / "p"), str(tmp_path / "c"))
    writer.write_claim("ns", "pod-gpu-x7k2p", UID, "gpu", [MetadataDevice("vm", "n", "gpu-vfio-0")])
    with open(tmp_path / "c" / f"{DRIVER}_metadata_{UID}_vm.json", encoding="utf-8") as fh:
        mount = json.load(fh)["devices"][0]["containerEdits"]["mounts"][0]
    assert mount["containerPath"] == (f"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/vm/"
                                      f"{DRIVER}-metadata.json")
    with open(mount["hostPath"], encoding="utf-8") as fh:
        assert json.load(fh)["podClaimName"] == "gpu"


@pytest.mark.parametrize("request_name, pod_claim", [("../escape", None), ("ok", "../../etc"), ("Not_A_Label/x", None)])
def test_hostile_names_write_nothing(tmp_path, request_name, pod_claim):
    writer = MetadataWriter(DRIVER, str(tmp_path / "p"), str(tmp_path / "c"))
    with pytest.raises(ClaimPathError):
        writer.write_claim("ns", "c", UID, pod_claim, [MetadataDevice(request_name, "n", "d")])
    assert not os.path.exists(tmp_path / "c") or os.listdir(tmp_path / "c") == []
    assert not any(files for _, _, files in os.walk(tmp_path / "p"))


def test_the_gpu_plugin_mounts_a_vms_device_attributes(driver_root):
    agent = DriverAgent(AgentOptions(node_name="node-md", profile="dgx-h100", root=driver_root,
                                     claims_dir=os.path.join(driver_root, "claims"), fsync=False,
                                     health_events=False, passthrough=True, device_metadata=True))
    agent.start()
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        obj = allocated_claim("vm", [{"request": "vm", "device": "gpu-vfio-0"}, {"request": "vm", "device": "gpu-vfio-1"}],
                              node_name="node-md")
        with open(os.path.join(driver_root, "claims", "default_vm.yaml"), "w", encoding="utf-8") as fh:
            yaml.safe_dump(obj, fh)
        uid = obj["metadata"]["uid"]
        answer = kubelet.prepare([("default", "vm", uid)]).claims[uid]
        assert not answer.error, answer.error
        first, second = (list(d.cdi_device_ids) for d in answer.devices)
        assert first[-1] == f"{DRIVER}/metadata={uid}_vm" and len(second) == 1, "the request's first device only"
        host = os.path.join(agent.paths.plugin_dir, "dra-device-metadata", "default_vm", "vm", "metadata.json")
        with open(host, encoding="utf-8") as fh:
            devices = json.load(fh)["requests"][0]["devices"]
        published = {d["name"]: d for s in agent.build_slices() for d in s["spec"]["devices"]}
        assert devices[0]["attributes"] == published["gpu-vfio-0"]["attributes"]
        assert not kubelet.unprepare([("default", "vm", uid)]).claims[uid].error
        assert not os.path.exists(host)
        assert not [n for n in os.listdir(agent.paths.cdi_spec_dir) if "_metadata_" in n]
    finally:
        kubelet.close()
        agent.stop()
