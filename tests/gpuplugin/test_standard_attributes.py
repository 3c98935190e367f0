"""Standard device attributes across drivers: a GPU aligned with another driver's device (a simulated NIC).

NVIDIA's driver (kubernetes-sigs/dra-driver-nvidia-gpu v0.5.0-dev, cmd/gpu-kubelet-plugin/deviceinfo.go
`GpuInfo.Attributes`, `addNumaNodeAttribute`; nvlib.go `deviceattribute.GetPCIBusIDAttribute`,
`GetPCIeRootAttributeByPCIBusID`) publishes resource.kubernetes.io/pcieRoot, pciBusID and numaNode. A NIC driver
that publishes the same names lets one claim put a GPU and a NIC on one PCIe root or NUMA node with
`matchAttribute` across two requests of different drivers: the alignment that only works when both drivers use the
standard names.
"""

from __future__ import annotations

from typing import Any

import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.discovery import read_inventory
from gpudra.gpuplugin.slices import build_resource_slices, device_classes, pool_devices

NODE = "n1"
NIC = "nic.example.com"
PCIE_ROOT, NUMA_NODE = "resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode"


def _gpu_slices() -> list[dict[str, Any]]:
    return build_resource_slices(read_inventory("simulated", profile="dgx-h100", node_name=NODE), NODE)


def _nic_objects(nics: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A second driver's DeviceClass and ResourceSlice: NICs with the standard attributes only."""
    devices = [{"name": name, "attributes": attrs} for name, attrs in nics.items()]
    return [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": NIC},
         "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{NIC}'"}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{NODE}-nic-0"},
         "spec": {"driver": NIC, "nodeName": NODE, "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                  "devices": devices}},
    ]


def _claim(attribute: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "gpu-nic", "namespace": "default"},
            "spec": {"devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                             {"name": "nic", "exactly": {"deviceClassName": NIC}}],
                "constraints": [{"matchAttribute": attribute}]}}}


def _write(tmp_path, nics: dict[str, dict[str, Any]], attribute: str) -> list[str]:
    objects = [*_gpu_slices(), *device_classes(), *_nic_objects(nics), _claim(attribute),
               {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return ["-f", str(path)]


def _allocated(files: list[str]) -> dict[str, str]:
    result = CliRunner().invoke(cli, ["allocate", *files, "-o", "yaml"])
    assert result.exit_code == 0, result.output
    [claim] = yaml.safe_load(result.stdout)["items"]
    return {r["request"]: r["device"] for r in claim["status"]["allocation"]["devices"]["results"]}


def _attributes_of(device: str) -> dict[str, Any]:
    return next(d["attributes"] for d in pool_devices(_gpu_slices()) if d["name"] == device)


def test_the_gpus_carry_the_standard_names_nvidia_publishes():
    for device in pool_devices(_gpu_slices()):
        attrs = device["attributes"]
        assert {PCIE_ROOT, "resource.kubernetes.io/pciBusID", NUMA_NODE} <= set(attrs), device["name"]
        assert "numa" not in attrs  # NVIDIA dropped gpu.nvidia.com/numa for the standard name


def test_a_gpu_and_a_nic_on_one_pcie_root_allocate(tmp_path):
    """Only gpu-5 shares a root with nic-0; nic-1 sits on a root no GPU has: the allocator has to search."""
    root = _attributes_of("gpu-5")[PCIE_ROOT]
    nics = {"nic-1": {PCIE_ROOT: {"string": "pci0000:f0"}}, "nic-0": {PCIE_ROOT: root}}
    assert _allocated(_write(tmp_path, nics, PCIE_ROOT)) == {"gpu": "gpu-5", "nic": "nic-0"}


def test_a_gpu_and_a_nic_on_one_numa_node_allocate(tmp_path):
    """NUMA alignment across drivers needs the standard name on the GPUs (gpu.nvidia.com/numa matched no NIC)."""
    nics = {"nic-0": {NUMA_NODE: {"int": 1}}}
    allocated = _allocated(_write(tmp_path, nics, NUMA_NODE))
    assert allocated["nic"] == "nic-0" and _attributes_of(allocated["gpu"])[NUMA_NODE] == {"int": 1}


def test_no_common_pcie_root_is_refused_and_explain_says_why(tmp_path):
    files = _write(tmp_path, {"nic-1": {PCIE_ROOT: {"string": "pci0000:f0"}}}, PCIE_ROOT)
    assert CliRunner().invoke(cli, ["allocate", *files]).exit_code == 1
    explained = CliRunner().invoke(cli, ["explain", "claim/gpu-nic", *files])
    assert explained.exit_code == 1, explained.output
    assert (f"constraint #0 matchAttribute {PCIE_ROOT}: " in explained.stdout
            and "pci0000:f0: 1 free" in explained.stdout and "need 2 with the same pcieRoot" in explained.stdout)


def test_numa_node_as_a_list_behind_the_list_gate():
    """NVIDIA's DRAListTypeAttributes gate: a one-element list (deviceinfo_test.go
    TestGpuInfoAttributesIncludeStandardNumaNodeListWhenEnabled), for MIG devices too."""
    inventory = read_inventory("simulated", profile="hgx-a100-mig", node_name=NODE)
    devices = pool_devices(build_resource_slices(inventory, NODE, numa_list=True))
    assert devices and all(d["attributes"][NUMA_NODE] in ({"ints": [0]}, {"ints": [1]}) for d in devices)
    assert any(d["attributes"]["type"] == {"string": "mig"} for d in devices)


def test_a_list_numa_node_aligns_with_a_scalar_one_only_where_the_cluster_has_list_attributes(tmp_path):
    """NVIDIA's comment on DRAListTypeAttributes: the cluster needs Kubernetes' gate of that name first. With it a
    GPU's [1] matches a NIC's 1 (a scalar is a one-element set); without it the list is invisible to matchAttribute."""
    objects = [*build_resource_slices(read_inventory("simulated", profile="dgx-h100", node_name=NODE), NODE,
                                      numa_list=True),
               *device_classes(), *_nic_objects({"nic-0": {NUMA_NODE: {"int": 1}}}), _claim(NUMA_NODE)]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    on = CliRunner().invoke(cli, ["allocate", "-f", str(path), "--features", "default,+DRAListTypeAttributes",
                                  "-o", "yaml"])
    assert on.exit_code == 0, on.output
    [claim] = yaml.safe_load(on.stdout)["items"]
    gpu = next(r["device"] for r in claim["status"]["allocation"]["devices"]["results"] if r["request"] == "gpu")
    assert _attributes_of(gpu)[NUMA_NODE] == {"int": 1}
    assert CliRunner().invoke(cli, ["allocate", "-f", str(path)]).exit_code == 1
