"""The per-claim MPS control daemon as NVIDIA's driver runs it: its ID, its devices' order and limits, multi-user.

Expected values are kubernetes-sigs/dra-driver-nvidia-gpu at commit 95932046, copied as data:
* api/nvidia.com/resource/v1beta1/sharing_test.go `TestMpsPerDevicePinnedMemoryLimitNormalize` (the rows that reach
  the driver: gpudra's decoder already refuses a limit under 1Mi, see test_driver_sharing / validate);
* cmd/gpu-kubelet-plugin/mps_capability_test.go `TestEnsureCapability` (multi-user needs Volta, CC >= 7.0);
* cmd/gpu-kubelet-plugin/sharing.go `GetMpsControlDaemonID` and templates/mps-control-daemon.tmpl.yaml
  (`nvidia-cuda-mps-control -d{{ if .MultiUser }} -M{{ end }}`).
"""

from __future__ import annotations

import hashlib
import os
import stat

import pytest
import yaml

from gpudra.device_config import ConfigError, decode_config
from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.gpuplugin.sharing import (NvidiaSmiSharing, SharingError, mps_daemon_id, multi_user_problem,
                                      pinned_limits, read_sharing_log)
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from gpudra.gpuplugin.records import SharingRecord
from tests.support.builders import allocated_claim

MIB_1G, MIB_2G = 1024, 2048

# TestMpsPerDevicePinnedMemoryLimitNormalize: (uuids, default MiB, per-device MiB, expected MiB or error text)
NORMALIZE = [
    ("empty input", [], None, {}, {}),
    ("no uuids, invalid device index", [], None, {"0": MIB_1G}, "invalid device: invalid device index: 0"),
    ("no uuids, default is overridden", [], MIB_2G, {"0": MIB_1G}, "invalid device: invalid device index: 0"),
    ("uuids, default is set", ["UUID0"], MIB_2G, {}, {"UUID0": 2048}),
    ("uuids, default is overridden", ["UUID0"], MIB_2G, {"0": MIB_1G}, {"UUID0": 1024}),
    ("uuids, default is overridden by uuid", ["UUID0"], MIB_2G, {"UUID0": MIB_1G}, {"UUID0": 1024}),
    ("uuids, default is overridden, invalid UUID", ["UUID0"], MIB_2G, {"UUID1": MIB_1G},
     "invalid device: unable to parse key as an integer: UUID1"),
    ("uuids, default is overridden, invalid index", ["UUID0"], MIB_2G, {"1": MIB_1G},
     "invalid device: invalid device index: 1"),
    ("unit conversion Mi to M", ["UUID0"], 10, {}, {"UUID0": 10}),
    ("unit conversion Gi to M", ["UUID0"], 1024, {}, {"UUID0": 1024}),
]


@pytest.mark.parametrize("name, uuids, default, per_device, expected", NORMALIZE, ids=[r[0] for r in NORMALIZE])
def test_pinned_limits_normalize_as_nvidia(name, uuids, default, per_device, expected):
    sharing = SharingRecord(strategy="MPS", mps_pinned_memory_limit_mib=default,
                            mps_per_device_pinned_memory_mib=tuple(per_device.items()))
    if isinstance(expected, str):
        with pytest.raises(SharingError) as err:
            pinned_limits(sharing, uuids)
        assert str(err.value) == f"error transforming DefaultPerDevicePinnedMemoryLimit into string: {expected}"
    else:
        assert pinned_limits(sharing, uuids) == expected


def test_unit_conversion_m_to_m_is_nvidias():
    """NVIDIA's row "unit conversion M to M": 10M is 9 MiB once whole MiB are counted (9M)."""
    config = decode_config({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {
        "strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "10M"}}}, "config")
    sharing = SharingRecord.from_json(config.sharing.to_dict(), "gpu-0")  # as prepare records it
    assert pinned_limits(sharing, ["UUID0"]) == {"UUID0": 9}


# TestEnsureCapability's GPUs and cases
CAPABILITIES = {
    "3fee046f-55d0-4b6a-ac23-b80f6af87123": "10.0",
    "025f9375-cd42-40ec-aa2f-7719143654c5": "8.5",
    "04d8ce42-b7f6-4bd8-9eb8-7bc8d2af4111": "7.0",
    "4af11389-15b5-4fcd-9524-97d4a13ed838": "6.2",
    "ffcb7875-4980-4c6b-8bac-55f8278e0ea6": "0.0",
    "43ce870d-cc46-41ba-b818-8211db9f95b8": "",
}
GOOD = ["3fee046f-55d0-4b6a-ac23-b80f6af87123", "025f9375-cd42-40ec-aa2f-7719143654c5",
        "04d8ce42-b7f6-4bd8-9eb8-7bc8d2af4111"]
ENSURE = [
    ("all GPUs meet capability", GOOD, None),
    ("single insufficient capability", GOOD + ["4af11389-15b5-4fcd-9524-97d4a13ed838"],
     '4af11389-15b5-4fcd-9524-97d4a13ed838 has insufficient cudaComputeCapability "6.2", wanted >= "7.0"'),
    ("multiple insufficient capabilities",
     GOOD + ["4af11389-15b5-4fcd-9524-97d4a13ed838", "ffcb7875-4980-4c6b-8bac-55f8278e0ea6"],
     'ffcb7875-4980-4c6b-8bac-55f8278e0ea6 has insufficient cudaComputeCapability "0.0", wanted >= "7.0"\n'
     '4af11389-15b5-4fcd-9524-97d4a13ed838 has insufficient cudaComputeCapability "6.2", wanted >= "7.0"'),
    ("parse failure", GOOD + ["43ce870d-cc46-41ba-b818-8211db9f95b8"],
     'gpu 43ce870d-cc46-41ba-b818-8211db9f95b8 has invalid cudaComputeCapability "": Invalid Semantic Version'),
    ("gpu info not found", GOOD + ["e72a9f56-04d3-4360-9923-5d0cd2b226bc"],
     'could not check gpu e72a9f56-04d3-4360-9923-5d0cd2b226bc: missing gpu info (required >= "7.0")'),
]


@pytest.mark.parametrize("name, gpus, expected", ENSURE, ids=[r[0] for r in ENSURE])
def test_multi_user_needs_volta_as_nvidia_checks_it(name, gpus, expected):
    assert multi_user_problem(CAPABILITIES, gpus) == expected


def test_the_daemon_id_is_nvidias():
    uid = "2c8c7bd5-6d0e-4b57-9d2f-3a1f4f1d3a11"
    uuids = ["GPU-a", "GPU-b"]
    assert mps_daemon_id(uid, uuids) == f"{uid}-{hashlib.sha256(b'GPU-a,GPU-b').hexdigest()[:5]}"


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_multi_user_is_a_bool(value):
    config = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
              "sharing": {"strategy": "MPS", "mpsConfig": {"multiUser": value}}}
    if value is None:
        assert decode_config(config, "config").sharing.to_dict() == {"strategy": "MPS"}
        return
    with pytest.raises(ConfigError, match="multiUser: must be true or false"):
        decode_config(config, "config")


def test_multi_user_starts_the_daemon_with_dash_m(driver_root):
    bindir = os.path.join(driver_root, "driver", "usr", "bin")
    os.makedirs(bindir)
    record = os.path.join(driver_root, "calls.txt")
    tool = os.path.join(bindir, "nvidia-cuda-mps-control")
    with open(tool, "w", encoding="utf-8") as fh:  # a stand-in that writes down its arguments and environment
        fh.write('#!/bin/sh\necho "nvidia-cuda-mps-control $* | pipe=$CUDA_MPS_PIPE_DIRECTORY '
                 f'log=$CUDA_MPS_LOG_DIRECTORY visible=$CUDA_VISIBLE_DEVICES" >> "{record}"\n')
    os.chmod(tool, stat.S_IRWXU)
    pipe, log = os.path.join(driver_root, "mps", "pipe"), os.path.join(driver_root, "mps", "log")
    NvidiaSmiSharing(os.path.join(driver_root, "driver")).start_mps("c", ["GPU-a"], pipe, log, multi_user=True)
    with open(record, encoding="utf-8") as fh:
        assert fh.read().splitlines() == [f"nvidia-cuda-mps-control -d -M | pipe={pipe} log={log} visible=GPU-a"]


def _mps_claim(root: str, name: str, devices: list[str], mps_config: dict) -> tuple[str, str, str]:
    config = [{"source": "FromClaim", "requests": ["gpus"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": mps_config}}}}]
    obj = allocated_claim(name, [{"request": "gpus", "device": d} for d in devices], node_name="node-m",
                          config=config)
    with open(os.path.join(root, "claims", f"default_{name}.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(obj, fh)
    return "default", name, obj["metadata"]["uid"]


def test_a_multi_user_claim_on_simulated_h100s(driver_root):
    agent = DriverAgent(AgentOptions(node_name="node-m", profile="dgx-h100", root=driver_root,
                                     claims_dir=os.path.join(driver_root, "claims"), fsync=False,
                                     health_events=False))
    agent.start()
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        uuids = {g.name: g.uuid for g in agent.backend.inventory().gpus}
        claim = _mps_claim(driver_root, "multi", ["gpu-3", "gpu-1"], {
            "multiUser": True, "defaultPinnedDeviceMemoryLimit": "2Gi", "defaultPerDevicePinnedMemoryLimit": {"0": "1Gi"}})
        assert not kubelet.prepare([claim]).claims[claim[2]].error
        steps = read_sharing_log(agent.paths.simulated_sharing_log)
        start = next(s for s in steps if s["op"] == "mps-start")
        devices = sorted([uuids["gpu-3"], uuids["gpu-1"]])
        assert start["multiUser"] is True and start["devices"] == devices
        assert start["id"] == mps_daemon_id(claim[2], devices)
        assert [s["command"] for s in steps[-2:]] == [f"set_default_device_pinned_mem_limit {devices[0]} 1024M",
                                                      f"set_default_device_pinned_mem_limit {devices[1]} 2048M"], \
            "index 0 is the first UUID in sorted order, not the claim's first device"
        spec_file = next(n for n in os.listdir(agent.paths.cdi_spec_dir) if claim[2] in n)
        with open(os.path.join(agent.paths.cdi_spec_dir, spec_file), encoding="utf-8") as fh:
            env = [e for d in yaml.safe_load(fh)["devices"] for e in d["containerEdits"].get("env") or []]
        assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in env
        assert not [e for e in env if e.startswith("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")], \
            "a client-side limit on ordinal 0 could contradict the daemon's per-device limit"
    finally:
        kubelet.close()
        agent.stop()
