"""Fabric Manager partitions (NVIDIA's FabricManagerPartitioning) on a simulated NVSwitch node.

The lookups are checked with kubernetes-sigs/dra-driver-nvidia-gpu's own data (commit 95932046):
pkg/fabricmanager/manager_test.go `designDocPartitions` and its expectations (TestFindPartitionByModuleIDs,
TestGetPartitionsBySizeByModuleID, TestGetPartitionsBySizeAmbiguous, TestDiscoverFM*); the plugin's behaviour
against device_state.go `activateFabricPartition`/`deactivateFabricPartition` and deviceinfo.go
`addFabricManagerAttributes`. No NVSwitch system was used.
"""

from __future__ import annotations

import os

import pytest
import yaml

from gpudra.allocator import Allocator, Features
from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.gpuplugin.fabricpartitions import (FabricManagerError, Partition, check_partitions, default_partitions,
                                               find_partition, partitions_by_size)
from gpudra.gpuplugin.slices import device_classes
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim

# designDocPartitions()
DESIGN_DOC = [Partition(1, (1, 2, 3, 4, 5, 6, 7, 8)), Partition(2, (1, 2, 5, 6)), Partition(3, (3, 4, 7, 8)),
              Partition(4, (1, 3)), Partition(8, (1,))]
NODE = "node-fm"


def test_lookups_are_nvidias():
    assert find_partition(DESIGN_DOC, [6, 1, 5, 2]) == 2  # exact match, any order
    assert find_partition(DESIGN_DOC, [1]) == 8
    assert find_partition(DESIGN_DOC, [1, 2]) is None  # a subset of a partition does not match
    assert find_partition(DESIGN_DOC, []) is None
    assert partitions_by_size(DESIGN_DOC, 1) == {8: 1, 4: 2, 2: 4, 1: 8}
    assert partitions_by_size(DESIGN_DOC, 99) == {}
    with pytest.raises(FabricManagerError, match="gpuModuleID 1 appears in two partitions of size 2 \\(10 and 11\\)"):
        partitions_by_size([Partition(10, (1, 2)), Partition(11, (1, 3))], 1)


@pytest.mark.parametrize("partitions, message", [
    ([Partition(1, (1,)), Partition(1, (2,))], "fabricmanager: FM returned duplicate partitionId 1"),
    ([Partition(1, ())], "fabricmanager: partition 1 has no GPUs"),
    ([Partition(1, (1, 2, 1))], "fabricmanager: partition 1 references gpuModuleID 1 twice"),
])
def test_bad_tables_are_refused_as_nvidia_refuses_them(partitions, message):
    with pytest.raises(FabricManagerError, match=message):
        check_partitions(partitions)
    check_partitions([Partition(1, (1, 2, 99))])  # members the node lacks are recorded as reported


def test_the_simulated_table_is_a_halving_hgx_board():
    table = default_partitions(8)
    assert [(p.id, p.module_ids) for p in table[:7]] == [
        (0, (1, 2, 3, 4, 5, 6, 7, 8)), (1, (1, 2, 3, 4)), (2, (5, 6, 7, 8)),
        (3, (1, 2)), (4, (3, 4)), (5, (5, 6)), (6, (7, 8))]
    assert [p.module_ids for p in table[7:]] == [(m,) for m in range(1, 9)]


def _agent(root: str, passthrough: bool = False) -> DriverAgent:
    agent = DriverAgent(AgentOptions(node_name=NODE, profile="dgx-h100", root=root,
                                     claims_dir=os.path.join(root, "claims"), fsync=False, health_events=False,
                                     fabric_partitions=True, passthrough=passthrough))
    agent.start()
    return agent


def _claim(root: str, name: str, devices: list[str]) -> tuple[str, str, str]:
    obj = allocated_claim(name, [{"request": "gpus", "device": d} for d in devices], node_name=NODE)
    with open(os.path.join(root, "claims", f"default_{name}.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(obj, fh)
    return "default", name, obj["metadata"]["uid"]


def _log(agent: DriverAgent) -> list[str]:
    path = os.path.join(os.path.dirname(agent.paths.simulated_state), "fabric-partitions.json.log")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return fh.read().splitlines()


def test_gpus_carry_partition_attributes_and_a_claim_activates_its_partition(driver_root):
    agent = _agent(driver_root)
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        gpus = sorted(agent.backend.inventory().gpus, key=lambda g: g.pci_bus_id)
        published = {d["name"]: d for s in agent.build_slices() for d in s["spec"]["devices"]}
        third = published[gpus[2].name]["attributes"]  # module 3
        assert {k: v for k, v in third.items() if k == "gpuModuleID" or k.startswith("partition")} == {
            "gpuModuleID": {"int": 3}, "partition8": {"int": 0}, "partition4": {"int": 1},
            "partition2": {"int": 4}, "partition1": {"int": 9}}

        pair = _claim(driver_root, "pair", [gpus[3].name, gpus[2].name])  # modules 3 and 4: partition 4
        assert not kubelet.prepare([pair]).claims[pair[2]].error
        assert _log(agent) == ["activate 4"]
        split = _claim(driver_root, "split", [gpus[0].name, gpus[5].name])  # modules 1 and 6: no partition
        assert kubelet.prepare([split]).claims[split[2]].error.endswith(
            "fabric manager: GPU module set [1 6] does not match any FM partition; refusing partition activation")
        assert _log(agent) == ["activate 4"] and split[2] not in agent.state.checkpoint_snapshot()["claims"]
        assert not kubelet.unprepare([pair]).claims[pair[2]].error
        assert _log(agent) == ["activate 4", "deactivate 4"]
    finally:
        kubelet.close()
        agent.stop()


def test_a_passthrough_claim_is_partitioned_too(driver_root):
    agent = _agent(driver_root, passthrough=True)
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        published = {d["name"]: d for s in agent.build_slices() for d in s["spec"]["devices"]}
        assert published["gpu-vfio-7"]["attributes"]["partition1"] == {"int": 14}
        vm = _claim(driver_root, "vm", [f"gpu-vfio-{i}" for i in range(4, 8)])  # modules 5..8: partition 2
        assert not kubelet.prepare([vm]).claims[vm[2]].error
        assert _log(agent) == ["activate 2"]
        assert not kubelet.unprepare([vm]).claims[vm[2]].error
        assert _log(agent) == ["activate 2", "deactivate 2"]
    finally:
        kubelet.close()
        agent.stop()


def test_a_claim_matching_on_partition2_is_allocated_and_prepared(driver_root):
    """Published slices -> the allocator (kube-scheduler's semantics) -> prepare: matchAttribute on partition2
    puts two GPUs in one 2-GPU partition, which prepare then activates."""
    agent = _agent(driver_root)
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "pair", "namespace": "default", "uid": "5d1e7c1a-9f3b-4c2d-8e6f-0a1b2c3d4e5f"},
                 "spec": {"devices": {
                     "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}],
                     "constraints": [{"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/partition2"}]}}}
        allocator = Allocator(device_classes(), agent.build_slices(), [], Features.parse("default"))
        outcome = allocator.allocate({"metadata": {"name": NODE, "labels": {}}}, [claim])
        assert outcome.outcome == "allocated", outcome.error
        claim["status"] = {"allocation": outcome.allocations[0]}
        with open(os.path.join(driver_root, "claims", "default_pair.yaml"), "w", encoding="utf-8") as fh:
            yaml.safe_dump(claim, fh)
        uid = claim["metadata"]["uid"]
        assert not kubelet.prepare([("default", "pair", uid)]).claims[uid].error
        (line,) = _log(agent)
        assert line.split()[0] == "activate" and 3 <= int(line.split()[1]) <= 6, "one of the 2-GPU partitions"
    finally:
        kubelet.close()
        agent.stop()
