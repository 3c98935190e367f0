"""Sharing that is applied: a prepared claim's time-slicing interval is set and its MPS control daemon started with
its limits, in NVIDIA's order; unprepare stops the daemon and resets the GPUs; the checkpoint records the daemon so a
restarted driver still stops it; on the NVML backend the steps are real nvidia-smi / nvidia-cuda-mps-control runs."""

from __future__ import annotations

import json
import os
import stat

import pytest
import yaml

from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim
from gpudra.gpuplugin.sharing import (NvidiaSmiSharing, RecordingSharing, SharingError, mps_daemon_id,
                                     read_sharing_log)

NODE = "node-s"
DRIVER = "gpu.nvidia.com"


@pytest.fixture
def root(driver_root):
    return driver_root


def _agent(root: str) -> DriverAgent:
    agent = DriverAgent(AgentOptions(node_name=NODE, profile="dgx-h100", root=root,
                                     claims_dir=os.path.join(root, "claims"), fsync=False, health_events=False))
    agent.start()
    return agent


def _config(requests: list[str], sharing: dict) -> dict:
    return {"source": "FromClaim", "requests": requests,
            "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "resource.nvidia.com/v1beta1",
                                                        "kind": "GpuConfig", "sharing": sharing}}}


def _write_claim(root: str, name: str, devices: list[str], sharing: dict) -> tuple[str, str, str]:
    obj = allocated_claim(name, [{"request": "gpus", "device": d} for d in devices], node_name=NODE,
                          config=[_config(["gpus"], sharing)])
    with open(os.path.join(root, "claims", f"default_{name}.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(obj, fh)
    return "default", name, obj["metadata"]["uid"]


MPS = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "1Gi",
                                        "defaultPerDevicePinnedMemoryLimit": {"1": "2Gi"}}}
TIME_SLICING = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}


def _uuids(agent: DriverAgent) -> dict[str, str]:
    return {g.name: g.uuid for g in agent.backend.inventory().gpus}


def test_time_slicing_and_mps_steps_in_order_and_undone_on_unprepare(root):
    agent = _agent(root)
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        uuid = _uuids(agent)
        sliced = _write_claim(root, "sliced", ["gpu-0"], TIME_SLICING)
        mps = _write_claim(root, "mps", ["gpu-1", "gpu-2"], MPS)
        answers = kubelet.prepare([sliced]).claims
        assert not answers[sliced[2]].error, answers[sliced[2]].error
        assert not kubelet.prepare([mps]).claims[mps[2]].error
        log = read_sharing_log(agent.paths.simulated_sharing_log)
        mps_dir = os.path.join(agent.paths.plugin_dir, "mps", mps[2])
        devices = sorted([uuid["gpu-1"], uuid["gpu-2"]])  # NVIDIA's UUIDs(): sorted, indices count in that order
        daemon = mps_daemon_id(mps[2], devices)
        assert log == [
            {"op": "compute-mode", "gpu": uuid["gpu-0"], "mode": "DEFAULT"},
            {"op": "time-slice", "gpu": uuid["gpu-0"], "interval": 3},
            {"op": "compute-mode", "gpu": uuid["gpu-1"], "mode": "EXCLUSIVE_PROCESS"},
            {"op": "compute-mode", "gpu": uuid["gpu-2"], "mode": "EXCLUSIVE_PROCESS"},
            {"op": "mps-start", "id": daemon, "devices": devices,
             "pipe": f"{mps_dir}/pipe", "log": f"{mps_dir}/log"},
            {"op": "mps-command", "id": daemon, "command": "set_default_active_thread_percentage 50"},
            {"op": "mps-command", "id": daemon, "command": f"set_default_device_pinned_mem_limit {devices[0]} 1024M"},
            {"op": "mps-command", "id": daemon, "command": f"set_default_device_pinned_mem_limit {devices[1]} 2048M"},
        ]
        entry = agent.state.checkpoint_snapshot()["claims"][mps[2]]
        assert entry["mpsDaemon"]["pipe"] == f"{mps_dir}/pipe", "the checkpoint records the started daemon"
        spec_file = next(n for n in os.listdir(agent.paths.cdi_spec_dir) if mps[2] in n)
        with open(os.path.join(agent.paths.cdi_spec_dir, spec_file), encoding="utf-8") as fh:
            spec = yaml.safe_load(fh)
        edits = spec["devices"][0]["containerEdits"]
        assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in edits["env"]
        assert {m["hostPath"]: m["containerPath"] for m in edits["mounts"]} == {
            f"{mps_dir}/pipe": "/tmp/nvidia-mps", f"{mps_dir}/shm": "/dev/shm", f"{mps_dir}/log": "/var/log/nvidia-mps"}

        assert not kubelet.unprepare([mps, sliced]).claims[mps[2]].error
        tail = read_sharing_log(agent.paths.simulated_sharing_log)[len(log):]
        assert sorted(map(json.dumps, tail)) == sorted(map(json.dumps, [
            {"op": "mps-stop", "id": daemon},
            {"op": "compute-mode", "gpu": uuid["gpu-1"], "mode": "DEFAULT"},
            {"op": "compute-mode", "gpu": uuid["gpu-2"], "mode": "DEFAULT"},
            {"op": "time-slice", "gpu": uuid["gpu-0"], "interval": 0},
        ]))
        stop = tail.index({"op": "mps-stop", "id": daemon})
        assert all(step["op"] != "compute-mode" or step["gpu"] == uuid["gpu-0"] or i > stop
                   for i, step in enumerate(tail)), "the daemon stops before its GPUs leave EXCLUSIVE_PROCESS"
    finally:
        kubelet.close()
        agent.stop()


def test_a_restarted_driver_stops_the_daemon_the_checkpoint_recorded(root):
    agent = _agent(root)
    kubelet = KubeletClient(agent.paths.registration_socket)
    kubelet.register()
    mps = _write_claim(root, "mps", ["gpu-4"], {"strategy": "MPS"})
    assert not kubelet.prepare([mps]).claims[mps[2]].error
    kubelet.close()
    agent.stop()  # the plugin restarts (a crash or an upgrade): nothing is unprepared
    started = read_sharing_log(agent.paths.simulated_sharing_log)
    assert [s["op"] for s in started] == ["compute-mode", "mps-start"]

    again = _agent(root)
    kubelet = KubeletClient(again.paths.registration_socket)
    try:
        kubelet.register()
        assert read_sharing_log(again.paths.simulated_sharing_log) == started, "start-up leaves a completed claim be"
        assert not kubelet.unprepare([mps]).claims[mps[2]].error
        tail = read_sharing_log(again.paths.simulated_sharing_log)[len(started):]
        assert [s["op"] for s in tail] == ["mps-stop", "compute-mode"]
        assert tail[0]["id"] == started[1]["id"] == mps_daemon_id(mps[2], [_uuids(again)["gpu-4"]])
    finally:
        kubelet.close()
        again.stop()


class FailingLimits(RecordingSharing):
    def mps_command(self, daemon_id, pipe_dir, command):
        super().mps_command(daemon_id, pipe_dir, command)
        raise SharingError("nvidia-cuda-mps-control exited with 1: invalid limit")


def test_a_failed_limit_rolls_the_daemon_back(root):
    agent = _agent(root)
    recorder = FailingLimits()
    agent.state.sharing = recorder
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        mps = _write_claim(root, "mps", ["gpu-5"], {**MPS, "mpsConfig": {"defaultActiveThreadPercentage": 50}})
        error = kubelet.prepare([mps]).claims[mps[2]].error
        assert "invalid limit" in error
        ops = [c["op"] for c in recorder.calls]
        assert ops == ["compute-mode", "mps-start", "mps-command", "mps-stop", "compute-mode"]
        assert recorder.running == set() and mps[2] not in agent.state.checkpoint_snapshot()["claims"]
    finally:
        kubelet.close()
        agent.stop()


def test_a_prepare_interrupted_after_the_daemon_started_is_rolled_back_at_start(root):
    agent = _agent(root)
    kubelet = KubeletClient(agent.paths.registration_socket)
    kubelet.register()
    mps = _write_claim(root, "mps", ["gpu-6"], {"strategy": "MPS"})
    assert not kubelet.prepare([mps]).claims[mps[2]].error
    kubelet.close()
    agent.stop()
    # make the recorded claim look interrupted mid-prepare (a crash after the daemon started)
    from gpudra.kubeletplugin.checkpoint import PREPARE_STARTED, load_checkpoint, save_checkpoint

    data = load_checkpoint(agent.paths.checkpoint)
    data["claims"][mps[2]]["state"] = PREPARE_STARTED
    save_checkpoint(agent.paths.checkpoint, data, fsync=False)
    before = len(read_sharing_log(agent.paths.simulated_sharing_log))
    again = _agent(root)
    try:
        assert mps[2] in again.reconcile_report["rolledBack"]
        tail = read_sharing_log(again.paths.simulated_sharing_log)[before:]
        assert [s["op"] for s in tail] == ["mps-stop", "compute-mode"]
    finally:
        again.stop()


# -- the NVML backend's steps: the real commands, run as processes ------------------------------------------------


def _fake_tool(directory: str, name: str, record: str) -> None:
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("#!/bin/sh\n"
                 f'{{ printf "%s" "{name}"; for a in "$@"; do printf " %s" "$a"; done; '
                 'printf " | pipe=%s log=%s visible=%s" "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY" '
                 '"$CUDA_VISIBLE_DEVICES"; '
                 'if [ $# -eq 0 ]; then printf " stdin=%s" "$(cat)"; fi; echo; }' + f' >> "{record}"\n'
                 'if [ "$1" = "-d" ]; then mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" && touch "$CUDA_MPS_PIPE_DIRECTORY/control"; fi\n'
                 'case " $* " in *" fail "*) exit 3;; esac\n')
    os.chmod(path, stat.S_IRWXU)


def test_nvidia_smi_and_mps_control_run_with_the_right_arguments_and_environment(root):
    bindir = os.path.join(root, "driver", "usr", "bin")
    os.makedirs(bindir)
    record = os.path.join(root, "calls.txt")
    for tool in ("nvidia-smi", "nvidia-cuda-mps-control"):
        _fake_tool(bindir, tool, record)
    control = NvidiaSmiSharing(os.path.join(root, "driver"))
    pipe, log = os.path.join(root, "mps", "pipe"), os.path.join(root, "mps", "log")
    control.stop_mps("c", pipe)  # nothing listens yet: no command runs
    control.set_compute_mode("GPU-a", "DEFAULT")
    control.set_time_slice("GPU-a", 2)
    control.start_mps("c", ["GPU-a", "GPU-b"], pipe, log)
    control.mps_command("c", pipe, "set_default_active_thread_percentage 25")
    control.stop_mps("c", pipe)
    with open(record, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    assert lines == [
        "nvidia-smi -i GPU-a -c DEFAULT | pipe= log= visible=",
        "nvidia-smi compute-policy -i GPU-a --set-timeslice 2 | pipe= log= visible=",
        f"nvidia-cuda-mps-control -d | pipe={pipe} log={log} visible=GPU-a,GPU-b",
        f"nvidia-cuda-mps-control | pipe={pipe} log= visible= stdin=set_default_active_thread_percentage 25",
        f"nvidia-cuda-mps-control | pipe={pipe} log= visible= stdin=quit",
    ]
    with pytest.raises(SharingError, match="exited with 3"):
        control.set_compute_mode("fail", "x")  # `-i fail`: the tool's exit status becomes the error
