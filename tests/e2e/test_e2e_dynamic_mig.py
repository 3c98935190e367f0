"""The dynamic-MIG flow end to end on the simulated backend: the driver publishes its slices, the allocator
carves "one MIG slice with at least 20Gi on an H100" out of them, the kubelet prepares the claim (the MIG
instance is created and handed out through CDI), and unpreparing it destroys the instance again."""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import uuid

import yaml

from gpudra.allocator import Allocator, Features
from gpudra.cdi import apply_devices, default_oci_spec, load_spec_file
from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from gpudra.gpuplugin.slices import device_classes

NODE = "h100-node"
SELECTOR = ('device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100") && '
            'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0')


def _claim(name: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
            "spec": {"devices": {"requests": [{"name": "mig", "exactly": {
                "deviceClassName": "mig.nvidia.com", "selectors": [{"cel": {"expression": SELECTOR}}]}}]}}}


def test_allocate_prepare_cdi_unprepare():
    root = tempfile.mkdtemp(prefix="gde", dir="/tmp")  # unix socket paths must stay short
    claims_dir = os.path.join(root, "claims")
    os.makedirs(claims_dir)
    agent = DriverAgent(AgentOptions(node_name=NODE, profile="dgx-h100", root=root, claims_dir=claims_dir,
                                     dynamic_mig=True, fsync=False))
    agent.start()
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        slices = agent.build_slices()
        allocator = Allocator(device_classes(), slices, [], Features.parse("default"))
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}

        prepared = []
        for name in ("first", "second"):
            claim = _claim(name)
            outcome = allocator.allocate(node, [claim])
            assert outcome.outcome == "allocated", outcome.error
            claim = copy.deepcopy(claim)
            claim["status"] = {"allocation": outcome.allocations[0]}
            allocator.add_allocated_claim(claim)
            [result] = claim["status"]["allocation"]["devices"]["results"]
            assert "-mig-" in result["device"], result  # a MIG slice, not a whole GPU
            with open(os.path.join(claims_dir, f"default_{name}.yaml"), "w", encoding="utf-8") as handle:
                yaml.safe_dump(claim, handle)
            ref = ("default", name, claim["metadata"]["uid"])
            answer = kubelet.prepare([ref]).claims[ref[2]]
            assert answer.error == "", answer.error
            prepared.append((ref, result["device"], list(answer.devices[0].cdi_device_ids)))

        # both instances exist on the (simulated) hardware, on non-overlapping memory slices
        live = {m.name: m for g in agent.backend.inventory().gpus for m in g.mig_devices}
        assert sorted(live) == sorted(device for _, device, _ in prepared)
        spans = [set(range(m.placement_start, m.placement_start + m.placement_size)) for m in live.values()]
        same_gpu = len({name.split("-mig-")[0] for name in live}) == 1
        assert not (same_gpu and spans[0] & spans[1])
        for ref, _device, cdi_ids in prepared:
            spec = load_spec_file(os.path.join(agent.paths.cdi_spec_dir, f"k8s.gpu.nvidia.com-claim_{ref[2]}.yaml"))
            assert spec.devices
            container = apply_devices(default_oci_spec(), cdi_ids, agent.paths.cdi_spec_dirs)
            paths = {d["path"] for d in container["linux"]["devices"]}
            assert any("nvidia-caps" in p for p in paths) and "/dev/nvidiactl" in paths

        for ref, _device, _ids in prepared:
            assert kubelet.unprepare([ref]).claims[ref[2]].error == ""
        assert all(not g.mig_devices for g in agent.backend.inventory().gpus)
    finally:
        kubelet.close()
        agent.stop()
        shutil.rmtree(root, ignore_errors=True)
