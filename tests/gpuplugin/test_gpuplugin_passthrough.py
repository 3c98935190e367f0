"""VFIO passthrough (NVIDIA's PassthroughSupport) on simulated GPUs: published siblings, vfio-pci binding, the VM's
CDI view, sibling withdrawal, rollback.

Checked against kubernetes-sigs/dra-driver-nvidia-gpu at commit 95932046: nvlib.go `getVfioDeviceInfo` and
deviceinfo.go `VfioDeviceInfo.GetDevice` (the device), vfio-cdi.go `GetCommonEdits`/`GetDeviceSpecsByPCIBusID`
(the edits), vfio-device.go `Configure`/`Unconfigure` (the binding), device_state.go `RemoveSiblingDevices`
(the sibling), api/.../vfiodeviceconfig.go and iommu.go (the config, its defaults and its message).
No VFIO hardware was used: the PCI functions are a sysfs-shaped tree beside the simulated GPU state.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
import yaml

from gpudra.device_config import ConfigError, decode_config, opaque_config_problems
from gpudra.gpuplugin.agent import AgentError, AgentOptions, DriverAgent
from gpudra.gpuplugin.passthrough import SIMULATED_IOMMU_GROUP_BASE
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim

NODE = "node-p"


def _agent(root: str) -> DriverAgent:
    agent = DriverAgent(AgentOptions(node_name=NODE, profile="dgx-h100", root=root,
                                     claims_dir=os.path.join(root, "claims"), fsync=False, health_events=False,
                                     passthrough=True))
    agent.start()
    return agent


def _claim(root: str, name: str, devices: list[str], iommu: dict | None = None) -> tuple[str, str, str]:
    config = [] if iommu is None else [{"source": "FromClaim", "requests": ["vm"], "opaque": {
        "driver": "gpu.nvidia.com", "parameters": {"apiVersion": "resource.nvidia.com/v1beta1",
                                                   "kind": "VfioDeviceConfig", "iommu": iommu}}}]
    obj = allocated_claim(name, [{"request": "vm", "device": d} for d in devices], node_name=NODE, config=config)
    with open(os.path.join(root, "claims", f"default_{name}.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(obj, fh)
    return "default", name, obj["metadata"]["uid"]


def _published(root: str) -> dict[str, dict]:
    path = os.path.join(root, "var/lib/kubelet/plugins/gpu.nvidia.com/resourceslices.yaml")
    with open(path, encoding="utf-8") as fh:
        slices = [s for s in yaml.safe_load_all(fh) if s]
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


def _spec(agent: DriverAgent, uid: str) -> dict:
    (name,) = [n for n in os.listdir(agent.paths.cdi_spec_dir) if uid in n]
    with open(os.path.join(agent.paths.cdi_spec_dir, name), encoding="utf-8") as fh:
        return yaml.safe_load(fh) if name.endswith(".yaml") else json.load(fh)


def _bound(agent: DriverAgent, address: str) -> str:
    pci = os.path.join(os.path.dirname(agent.paths.simulated_state), "pci")
    return os.path.basename(os.readlink(os.path.join(pci, "devices", address, "driver")))


def test_each_gpu_gets_nvidias_vfio_sibling(driver_root):
    agent = _agent(driver_root)
    try:
        devices = _published(driver_root)
        gpus = sorted(agent.backend.inventory().gpus, key=lambda g: g.pci_bus_id)
        for index, gpu in enumerate(gpus):
            vfio = devices[f"gpu-vfio-{index}"]
            assert vfio["attributes"] == {
                "type": {"string": "vfio"},
                "uuid": {"string": str(uuid.uuid5(uuid.NAMESPACE_DNS, gpu.pci_bus_id))},  # Go's uuid.NewSHA1
                "deviceID": {"string": "0x2330"},  # H100 SXM5 80GB
                "vendorID": {"string": "0x10de"},
                "productName": {"string": gpu.product_name},
                "iommuFDEnabled": {"bool": False},
                "resource.kubernetes.io/pciBusID": {"string": gpu.pci_bus_id},
                "resource.kubernetes.io/pcieRoot": {"string": gpu.pcie_root},
                "resource.kubernetes.io/numaNode": {"int": gpu.numa_node},
            }
            assert vfio["capacity"] == {"addressableMemory": {"value": "81559Mi"}}  # simulated: the memory
            assert gpu.name in devices, "the GPU stays published beside its sibling"
            assert _bound(agent, gpu.pci_bus_id) == "nvidia"
    finally:
        agent.stop()


def test_a_vm_claim_binds_vfio_pci_and_sees_only_its_iommu_group(driver_root):
    agent = _agent(driver_root)
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        gpus = sorted(agent.backend.inventory().gpus, key=lambda g: g.pci_bus_id)
        vm = _claim(driver_root, "vm", ["gpu-vfio-1"], {"backendPolicy": "LegacyOnly", "enableAPIDevice": True})
        assert not kubelet.prepare([vm]).claims[vm[2]].error
        assert _bound(agent, gpus[1].pci_bus_id) == "vfio-pci"
        assert _bound(agent, gpus[0].pci_bus_id) == "nvidia"
        spec = _spec(agent, vm[2])
        assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
        assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == ["/dev/vfio/vfio"]  # enableAPIDevice
        (device,) = spec["devices"]
        assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == [
            f"/dev/vfio/{SIMULATED_IOMMU_GROUP_BASE + 1}"]
        assert "nvidia" not in json.dumps(spec).replace("NVIDIA_VISIBLE_DEVICES", "").replace("nvidia.com", ""), \
            "no /dev/nvidia* node and no driver library reach the VM launcher"

        published = _published(driver_root)
        assert gpus[1].name not in published and "gpu-vfio-1" in published, "the bound GPU is withdrawn"
        taken = _claim(driver_root, "taken", [gpus[1].name], None)
        assert "already allocated to a different claim" in kubelet.prepare([taken]).claims[taken[2]].error

        assert not kubelet.unprepare([vm]).claims[vm[2]].error
        assert _bound(agent, gpus[1].pci_bus_id) == "nvidia"
        assert gpus[1].name in _published(driver_root)
        with open(os.path.join(os.path.dirname(agent.paths.simulated_state), "pci", "binds.log")) as fh:
            assert fh.read().splitlines() == [f"{gpus[1].pci_bus_id} vfio-pci", f"{gpus[1].pci_bus_id} nvidia"]
    finally:
        kubelet.close()
        agent.stop()


def test_a_gpu_in_use_withdraws_its_vfio_sibling_and_defaults_apply(driver_root):
    agent = _agent(driver_root)
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        gpus = sorted(agent.backend.inventory().gpus, key=lambda g: g.pci_bus_id)
        plain = _claim(driver_root, "plain", [gpus[2].name])
        assert not kubelet.prepare([plain]).claims[plain[2]].error
        assert "gpu-vfio-2" not in _published(driver_root)
        vm = _claim(driver_root, "vm", ["gpu-vfio-3"])  # no config: NVIDIA's DefaultVfioDeviceConfig
        assert not kubelet.prepare([vm]).claims[vm[2]].error
        assert "deviceNodes" not in _spec(agent, vm[2])["containerEdits"], "LegacyOnly, no API device"
        mixed = _claim(driver_root, "mixed", ["gpu-vfio-4", gpus[5].name])
        assert kubelet.prepare([mixed]).claims[mixed[2]].error.endswith(
            "VFIO devices cannot share a claim with other devices of this driver")
        assert _bound(agent, gpus[4].pci_bus_id) == "nvidia"
    finally:
        kubelet.close()
        agent.stop()


def test_a_failed_prepare_rebinds_the_gpu_to_nvidia(driver_root, monkeypatch):
    agent = _agent(driver_root)
    kubelet = KubeletClient(agent.paths.registration_socket)

    def broken(*args, **kwargs):
        raise OSError("CDI directory not writable")

    try:
        kubelet.register()
        monkeypatch.setattr(agent.state.passthrough, "claim_spec", broken)
        vm = _claim(driver_root, "vm", ["gpu-vfio-0"])
        assert "CDI directory not writable" in kubelet.prepare([vm]).claims[vm[2]].error
        address = sorted(g.pci_bus_id for g in agent.backend.inventory().gpus)[0]
        assert _bound(agent, address) == "nvidia" and vm[2] not in agent.state.checkpoint_snapshot()["claims"]
    finally:
        kubelet.close()
        agent.stop()


def test_a_restarted_driver_keeps_the_binding_and_unprepares_it(driver_root):
    agent = _agent(driver_root)
    kubelet = KubeletClient(agent.paths.registration_socket)
    kubelet.register()
    vm = _claim(driver_root, "vm", ["gpu-vfio-6"])
    assert not kubelet.prepare([vm]).claims[vm[2]].error
    kubelet.close()
    agent.stop()
    again = _agent(driver_root)
    kubelet = KubeletClient(again.paths.registration_socket)
    try:
        kubelet.register()
        gpu = sorted(again.backend.inventory().gpus, key=lambda g: g.pci_bus_id)[6]
        assert _bound(again, gpu.pci_bus_id) == "vfio-pci"
        assert gpu.name not in _published(driver_root), "the checkpoint still withholds the bound GPU"
        assert not kubelet.unprepare([vm]).claims[vm[2]].error
        assert _bound(again, gpu.pci_bus_id) == "nvidia" and gpu.name in _published(driver_root)
    finally:
        kubelet.close()
        again.stop()


@pytest.mark.parametrize("iommu, message", [
    ({"backendPolicy": "Bogus"}, "unknown IOMMU backend policy: Bogus, supported IOMMU backend policies: "
                                 "LegacyOnly, PreferIommuFD"),
    ({"enableAPIDevice": "yes"}, "enableAPIDevice: must be true or false"),
    ({"backendPolicy": "LegacyOnly", "extra": 1}, "unknown field(s) extra"),
])
def test_the_config_is_checked_as_nvidia_checks_it(iommu, message):
    params = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig", "iommu": iommu}
    with pytest.raises(ConfigError) as err:
        decode_config(params, "config")
    assert message in str(err.value)
    defaulted = decode_config({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig",
                               "iommu": {"backendPolicy": ""}}, "config")
    assert (defaulted.iommu.backend_policy, defaulted.iommu.enable_api_device) == ("LegacyOnly", False)


def test_the_nvml_backend_refuses_the_gate(driver_root, monkeypatch):
    monkeypatch.setattr("gpudra.gpuplugin.agent.DriverAgent._host_driver_edits", lambda self: None)

    class FakeNvml:
        name = "nvml"

    with pytest.raises(AgentError, match="binds simulated GPUs to vfio-pci only"):
        DriverAgent(AgentOptions(node_name=NODE, root=driver_root, claims_dir=os.path.join(driver_root, "claims"),
                                 fsync=False, health_events=False, passthrough=True), backend=FakeNvml())


def test_validate_and_the_webhook_refuse_a_bad_vfio_config():
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
             "spec": {"devices": {"requests": [{"name": "vm", "exactly": {"deviceClassName": "vfio.gpu.nvidia.com"}}],
                                  "config": [{"requests": ["vm"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
                                      "apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig",
                                      "iommu": {"backendPolicy": "X"}}}}]}}}
    assert opaque_config_problems(claim) == [("spec.devices.config[0].opaque.parameters",
                                              "iommu.backendPolicy: unknown IOMMU backend policy: X, supported IOMMU "
                                              "backend policies: LegacyOnly, PreferIommuFD")]


def test_the_vfio_device_class_selects_the_vfio_siblings_only(driver_root):
    """`gpudra driver deviceclasses`'s vfio.gpu.nvidia.com (NVIDIA's deviceclass-vfio-gpu.yaml selector) takes every
    gpu-vfio-<i> device the gate publishes and none of the GPUs beside them."""
    from gpudra.allocator import Allocator, Features
    from gpudra.gpuplugin.slices import device_classes

    agent = _agent(driver_root)
    try:
        path = os.path.join(driver_root, "var/lib/kubelet/plugins/gpu.nvidia.com/resourceslices.yaml")
        with open(path, encoding="utf-8") as fh:
            slices = [s for s in yaml.safe_load_all(fh) if s]
    finally:
        agent.stop()
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "vm", "namespace": "default", "uid": str(uuid.uuid4())},
             "spec": {"devices": {"requests": [{"name": "vm", "exactly": {"deviceClassName": "vfio.gpu.nvidia.com",
                                                                           "allocationMode": "All"}}]}}}
    outcome = Allocator(device_classes(), slices, [], Features.parse("default")).allocate(NODE, [claim])
    assert outcome.outcome == "allocated"
    picked = sorted(r["device"] for r in outcome.allocations[0]["devices"]["results"])
    assert picked == sorted(n for n in _published(driver_root) if n.startswith("gpu-vfio-")) and len(picked) == 8
