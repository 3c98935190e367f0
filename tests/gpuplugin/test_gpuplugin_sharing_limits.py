"""NVIDIA's consumable shares (`--consumable-shares`, gate ConsumableShares) published and enforced at prepare.

Expected values are kubernetes-sigs/dra-driver-nvidia-gpu at commit 95932046:
* cmd/gpu-kubelet-plugin/consumable_shares_test.go `TestApplyConsumableShares` (its table, copied as data);
* cmd/gpu-kubelet-plugin/main.go `validateFlags` (the option's messages);
* cmd/gpu-kubelet-plugin/device_state.go `applySharingConfig` (MPS refused while shares are on) and
  `validateNoOverlappingPreparedDevices` (two claims on one device need the same normalized config).
NVIDIA applies no per-share memory or compute limit at prepare (no CUDA_MPS_* variable, no MPS daemon for shares):
the last test pins that gpudra adds none either.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml
from click.testing import CliRunner

from gpudra.allocator import Allocator, Features
from gpudra.cli import cli
from gpudra.gpuplugin.agent import AgentError, AgentOptions, DriverAgent
from gpudra.gpuplugin.consumableshares import apply_consumable_shares, check_option
from gpudra.gpuplugin.sharing import read_sharing_log
from gpudra.gpuplugin.slices import device_classes
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim

NODE = "node-cs"
GI16 = "16Gi"

# TestApplyConsumableShares: (gate, flag, input memory, max, default, min, shares); None: device unchanged.
# The unaligned row's input is 1048576*10+500 bytes and its max 1048576*10 (10Mi).
NVIDIA_TABLE = [
    ("feature gate disabled", False, "unlimited", GI16, None),
    ("flag disabled", True, "disabled", GI16, None),
    ("unlimited option", True, "unlimited", GI16, (GI16, "0", "0", None)),
    ("unlimited option with unaligned memory rounds down max", True, "unlimited", str(1048576 * 10 + 500),
     ("10Mi", "0", "0", None)),
    ("memory option", True, "memory", GI16, (GI16, GI16, "1Mi", None)),
    ("integer shares option (e.g. 4)", True, "4", GI16, (GI16, "0", "0", "4")),
]


@pytest.mark.parametrize("name, gate, flag, memory, expected", NVIDIA_TABLE, ids=[r[0] for r in NVIDIA_TABLE])
def test_published_capacity_is_nvidias(name, gate, flag, memory, expected):
    device = {"name": "gpu-0", "capacity": {"memory": {"value": memory}}}
    option = flag if gate else "disabled"  # NVIDIA's isConsumableSharesEnabled: the gate, then the flag
    out = apply_consumable_shares(device, option)
    if expected is None:
        assert out == device and "allowMultipleAllocations" not in out
        return
    maximum, default, minimum, shares = expected
    assert out["allowMultipleAllocations"] is True
    memory_cap = out["capacity"]["memory"]
    assert memory_cap["value"] == maximum
    assert memory_cap["requestPolicy"] == {"default": default,
                                           "validRange": {"min": minimum, "max": maximum, "step": "1Mi"}}
    if shares is None:
        assert "shares" not in out["capacity"]
    else:
        assert out["capacity"]["shares"] == {"value": shares, "requestPolicy": {
            "default": "1", "validRange": {"min": "1", "max": shares, "step": "1"}}}
    assert device == {"name": "gpu-0", "capacity": {"memory": {"value": memory}}}, "input left alone"


@pytest.mark.parametrize("value, gate, message", [
    ("memory", False, "--consumable-shares requires feature gate ConsumableShares to be enabled"),
    ("0", True, "invalid value for --consumable-shares: \"0\" (must be 'disabled', 'memory', 'unlimited', or a "
                "positive integer)"),
    ("four", True, "invalid value for --consumable-shares: \"four\""),
    ("-2", True, "invalid value for --consumable-shares: \"-2\""),
])
def test_the_option_is_checked_as_nvidia_checks_it(value, gate, message):
    with pytest.raises(ValueError) as err:
        check_option(value, gate)
    assert message in str(err.value)
    assert check_option("disabled", False) == "disabled" and check_option("+3", True) == "+3"


def test_driver_run_refuses_the_option_without_the_gate(tmp_path):
    result = CliRunner().invoke(cli, ["driver", "run", "--backend", "simulated", "--node-name", "n",
                                      "--root", str(tmp_path), "--claims", str(tmp_path),
                                      "--consumable-shares", "4"])
    assert result.exit_code == 2, result.output
    assert "error: --consumable-shares requires feature gate ConsumableShares to be enabled" in result.output
    assert not os.listdir(tmp_path)


def test_driver_run_takes_the_gate_and_the_option(monkeypatch):
    seen: list[AgentOptions] = []

    def capture(options):
        seen.append(options)
        raise AgentError("captured")

    monkeypatch.setattr("gpudra.gpuplugin.agent.DriverAgent", capture)
    result = CliRunner().invoke(cli, ["driver", "run", "--backend", "simulated", "--node-name", "n",
                                      "--claims", "/nonexistent", "--feature-gates", "ConsumableShares=true",
                                      "--consumable-shares", "4"])
    assert result.exit_code == 2 and "captured" in result.output, result.output
    assert seen[0].consumable_shares == "4"


# -- prepare -------------------------------------------------------------------------------------------------------

def _agent(root: str, shares: str = "4") -> DriverAgent:
    agent = DriverAgent(AgentOptions(node_name=NODE, profile="dgx-h100", root=root,
                                     claims_dir=os.path.join(root, "claims"), fsync=False, health_events=False,
                                     consumable_shares=shares))
    agent.start()
    return agent


def _claim(root: str, name: str, device: str, share: str | None, sharing: dict | None) -> tuple[str, str, str]:
    result = {"request": "gpu", "device": device}
    if share:
        result.update({"shareID": share, "consumedCapacity": {"memory": "4Gi", "shares": "1"}})
    config = [] if sharing is None else [
        {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}}}]
    obj = allocated_claim(name, [result], node_name=NODE, config=config)
    with open(os.path.join(root, "claims", f"default_{name}.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(obj, fh)
    return "default", name, obj["metadata"]["uid"]


LONG = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
SHORT = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}}
SHARE = ["7a2c1c9e-0000-4000-8000-00000000000{}".format(i) for i in range(4)]


def test_the_driver_publishes_shares_on_every_gpu(driver_root):
    agent = _agent(driver_root)
    try:
        devices = [d for s in agent.build_slices() for d in s["spec"]["devices"]]
        assert devices and all(d["allowMultipleAllocations"] for d in devices)
        assert all(d["capacity"]["shares"]["value"] == "4" for d in devices)
    finally:
        agent.stop()


def test_shares_of_one_gpu_prepare_with_one_config_and_conflicting_ones_are_refused(driver_root):
    agent = _agent(driver_root)
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        first = _claim(driver_root, "first", "gpu-0", SHARE[0], LONG)
        second = _claim(driver_root, "second", "gpu-0", SHARE[1], LONG)
        other = _claim(driver_root, "other", "gpu-0", SHARE[2], SHORT)
        plain = _claim(driver_root, "plain", "gpu-0", SHARE[3], None)
        assert not kubelet.prepare([first]).claims[first[2]].error
        answer = kubelet.prepare([second]).claims[second[2]]
        assert not answer.error and answer.devices[0].share_id == SHARE[1]
        for claim in (other, plain):  # another interval, and no config (not TimeSlicing Default) differ
            assert kubelet.prepare([claim]).claims[claim[2]].error.endswith(
                f"requested device gpu-0 has conflicting configuration with already prepared claim {first[2]}")
        assert not kubelet.unprepare([first]).claims[first[2]].error
        steps = read_sharing_log(agent.paths.simulated_sharing_log)
        assert [s["op"] for s in steps] == ["compute-mode", "time-slice", "compute-mode", "time-slice"], \
            "the GPU's interval stays while the second share holds it"
        assert not kubelet.unprepare([second]).claims[second[2]].error
        assert read_sharing_log(agent.paths.simulated_sharing_log)[-1] == {
            "op": "time-slice", "gpu": steps[0]["gpu"], "interval": 0}
    finally:
        agent.stop()


def test_mps_is_refused_while_shares_are_on(driver_root):
    agent = _agent(driver_root, "memory")
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        whole = _claim(driver_root, "whole", "gpu-1", None, {"strategy": "MPS"})  # even without a share ID
        assert kubelet.prepare([whole]).claims[whole[2]].error.endswith(
            "MPS sharing is not supported when consumable shares is enabled")
        assert read_sharing_log(agent.paths.simulated_sharing_log) == []
    finally:
        agent.stop()


def test_a_share_gets_no_limit_nvidia_does_not_set(driver_root):
    """NVIDIA's prepare of a share writes the same CDI edits as for a whole GPU: no CUDA_MPS_* variable."""
    agent = _agent(driver_root)
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        share = _claim(driver_root, "share", "gpu-2", SHARE[0], None)
        assert not kubelet.prepare([share]).claims[share[2]].error
        spec_dir = agent.paths.cdi_spec_dir
        (name,) = [n for n in os.listdir(spec_dir) if share[2] in n]
        with open(os.path.join(spec_dir, name), encoding="utf-8") as fh:
            text = fh.read()
        spec = yaml.safe_load(text) if name.endswith(".yaml") else json.loads(text)
        env = [e for d in spec["devices"] for e in (d["containerEdits"].get("env") or [])]
        env += spec.get("containerEdits", {}).get("env") or []
        assert not [e for e in env if e.startswith("CUDA_MPS_")]
    finally:
        agent.stop()


def test_shares_allocated_by_the_allocator_prepare_on_one_gpu(driver_root):
    """Published shares -> the allocator (consumable capacity, kube-scheduler's semantics) -> prepare."""
    agent = _agent(driver_root)
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        allocator = Allocator(device_classes(), agent.build_slices(), [], Features.parse("default,+DRAConsumableCapacity"))
        prepared = []
        for index in range(3):
            claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                     "metadata": {"name": f"share-{index}", "namespace": "default",
                                  "uid": f"5d1e7c1a-9f3b-4c2d-8e6f-0a1b2c3d4e5{index}"},
                     "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                         "deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "20Gi"}}}}]}}}
            outcome = allocator.allocate({"metadata": {"name": NODE, "labels": {}}}, [claim])
            assert outcome.outcome == "allocated", outcome.error
            claim["status"] = {"allocation": outcome.allocations[0]}
            allocator.add_allocated_claim(claim)
            with open(os.path.join(driver_root, "claims", f"default_share-{index}.yaml"), "w", encoding="utf-8") as fh:
                yaml.safe_dump(claim, fh)
            uid = claim["metadata"]["uid"]
            answer = kubelet.prepare([("default", f"share-{index}", uid)]).claims[uid]
            assert not answer.error, answer.error
            prepared.append((answer.devices[0].device_name, answer.devices[0].share_id))
        assert len({device for device, _ in prepared}) == 1, "three 20Gi shares fit one 80GB GPU"
        assert all(share for _, share in prepared) and len({share for _, share in prepared}) == 3
    finally:
        kubelet.close()
        agent.stop()
