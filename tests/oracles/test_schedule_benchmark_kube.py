"""benchmarks/schedule.py beside the real kube-scheduler: the same objects (one generator) scheduled by gpudra's
scheduler and by kube-scheduler v1.34.4 with its API server and resourceclaim controller, and both bind every pod.
Without Go the benchmark times gpudra alone and says why. No verdict on speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.realkube import BUILD_TIMEOUT_S, ROOT, require_go

from gpudra.kubecluster.controlplane import with_flags

BENCHMARK = ROOT / "benchmarks" / "schedule.py"


def run_benchmark(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], dict]:
    environment = dict(env or os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, str(BENCHMARK), *args, "--json"], capture_output=True, text=True,
                            cwd=ROOT, timeout=BUILD_TIMEOUT_S, env=environment)
    return result, json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(BUILD_TIMEOUT_S)  # the binary may need a cold build (minutes)
def test_the_real_kube_scheduler_binds_every_pod_gpudra_binds():
    require_go()
    # 3 nodes x 2 devices, 6 pods: the cluster fills exactly, so any pod either scheduler failed would show
    result, answer = run_benchmark("--nodes", "3", "--devices", "2", "--pods", "6", "--init-pods", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    kube = answer["kube"]
    assert kube is not None, answer.get("kube_skipped")
    assert kube["release"] == "v1.34.4"
    assert answer["scheduled"] == kube["scheduled"] == 6
    assert kube["measured_pods"] == kube["measured_scheduled"] == answer["measured_pods"] == 3
    assert "real kube-scheduler" in result.stdout and "gpudra / kube-scheduler" in result.stdout


def test_without_go_gpudra_is_timed_alone_and_the_reason_is_given(tmp_path):
    result, answer = run_benchmark("--nodes", "3", "--devices", "2", "--pods", "6", "--init-pods", "3",
                                   env=dict(os.environ, PATH=str(tmp_path)))  # an empty PATH: no go
    assert result.returncode == 0, result.stderr[-3000:]
    assert answer["kube"] is None and "needs Go" in answer["kube_skipped"]
    assert answer["scheduled"] == 6
    assert "gpudra timed alone" in result.stderr and "Traceback" not in result.stderr


def test_an_extra_flag_replaces_the_components_own_rather_than_adding_to_it():
    args = ["--disable-admission-plugins=ServiceAccount", "--bind-address=127.0.0.1"]
    extra = ("--disable-admission-plugins=ServiceAccount,TaintNodesByCondition", "--kube-api-qps=5000")
    assert with_flags(args, extra) == ["--bind-address=127.0.0.1", *extra]


def test_the_workload_is_upstreams_shape():
    sys.path.insert(0, str(Path(BENCHMARK).parent))
    try:
        import schedule
    finally:
        sys.path.pop(0)
    objects = schedule.build_objects(2, 3, 5, 2)
    kinds = [o["kind"] for o in objects]
    assert kinds.count("Node") == kinds.count("ResourceSlice") == 2
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert [p["metadata"]["namespace"] for p in pods] == ["init"] * 2 + ["test"] * 3
    templates = {o["metadata"]["namespace"] for o in objects if o["kind"] == "ResourceClaimTemplate"}
    assert templates == {"init", "test"}  # each createPods op of upstream's workload has its own namespace
    node = next(o for o in objects if o["kind"] == "Node")
    slice_ = next(o for o in objects if o["kind"] == "ResourceSlice")
    assert slice_["metadata"]["name"] == slice_["spec"]["pool"]["name"] == node["metadata"]["name"]
    assert [d["name"] for d in slice_["spec"]["devices"]] == ["instance-0", "instance-1", "instance-2"]
    assert {"type": "Ready", "status": "True"} in node["status"]["conditions"]
