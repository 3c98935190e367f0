"""benchmarks/allocate.py beside the real Go allocator: the harness (k8s/cmd/allocate-bench over
k8s.io/dynamic-resource-allocation/structured at each release gpudra's Go module pins: k8s/go.mod's 1.34 and
k8s/releases/v1.36.mod's, --kubernetes-version 1.36) builds, answers exactly as gpudra's allocator with that
release's gates on a generated cluster, and without Go the benchmark times gpudra alone and says so. No verdict on
speed."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
try:
    import gen_cluster
    import go_allocator
finally:
    sys.path.pop(0)

GO = go_allocator.find_go()
needs_go = pytest.mark.skipif(GO is None, reason="the Go toolchain (go) is not on PATH: the upstream allocator "
                                                  "harness k8s/cmd/allocate-bench cannot be built")


def allocated_claim(node: str, devices: list[str]) -> dict[str, Any]:
    """A claim already holding `devices` of `node`, as the API server stores it after kube-scheduler's binding."""
    claim = gen_cluster.gpu_claim("running", len(devices))
    claim["metadata"]["uid"] = "running-uid"
    claim["status"] = {"allocation": {
        "devices": {"results": [{"request": "gpus", "driver": gen_cluster.DRIVER, "pool": node, "device": device}
                                for device in devices]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
    }}
    return claim


# each release gpudra's Go module pins: None is k8s/go.mod's own (1.34), "1.36" is k8s/releases/v1.36.mod
RELEASES = [None, "1.36"]


def run_benchmark(path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / "allocate.py"), str(path), "--seconds", "0.01", "--json", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=1800, env=env,
    )


def cluster_file(tmp_path: Path, extra: list[dict[str, Any]]) -> Path:
    # two NVLink domains of four GPUs per node; gpu-0..gpu-3 of the chosen node are held by a running claim
    objects = gen_cluster.generate_cluster(3, nvlink_domains=2) + extra
    path = tmp_path / "cluster.json"
    with open(path, "w", encoding="utf-8") as stream:
        gen_cluster.dump_json(objects, stream)
    return path


@needs_go
@pytest.mark.timeout(go_allocator.BUILD_TIMEOUT_S + 300)  # a cold build compiles client-go and CEL: minutes on 2 cores
@pytest.mark.parametrize("release", RELEASES, ids=["go.mod", "1.36"])
def test_the_go_harness_builds_and_gives_gpudras_answers(tmp_path, release):
    """Each release's Go allocator beside gpudra's allocator with that release's gates (--kubernetes-version)."""
    node = gen_cluster.node_name(1)
    held = allocated_claim(node, ["gpu-0", "gpu-1", "gpu-2", "gpu-3"])
    pending = [gen_cluster.gpu_claim("train", 3, match_nvlink=True), gen_cluster.gpu_claim("serve", 1)]
    version = ("--kubernetes-version", release) if release else ()
    completed = run_benchmark(cluster_file(tmp_path, [held, *pending]), "--node", node, *version)
    assert completed.returncode == 0, completed.stderr
    summary = json.loads(completed.stdout.strip().splitlines()[-1])
    assert summary["go_allocator"]["module"] == "k8s.io/dynamic-resource-allocation"
    assert summary["go_allocator"]["version"] == go_allocator.allocator_release(release)
    assert summary["go_allocator"]["version"].startswith("v0.36." if release == "1.36" else "v0.34.")
    assert summary["kubernetes"] == (release or "1.34")
    (row,) = summary["scenarios"]
    assert row["same_answer"] is True and row["outcome"] == row["go_outcome"] == "allocated"
    # upstream's own answer, not only agreement: the three GPUs of the free NVLink domain, then the fourth
    go_devices = [[r["device"] for r in allocation["devices"]["results"]] for allocation in row["go_allocations"]]
    assert go_devices == [["gpu-4", "gpu-5", "gpu-6"], ["gpu-7"]]
    for measure in ("go_allocate_per_cpu_s", "go_per_pod_per_cpu_s", "allocate_vs_go", "per_pod_vs_go"):
        assert row[measure] > 0

    # the built-in scenarios on the same node: 1 GPU fits, 8 on one NVLink domain cannot (four are held)
    completed = run_benchmark(cluster_file(tmp_path, [held]), "--node", node, "--scenario", "builtin", *version)
    assert completed.returncode == 0, completed.stderr
    assert "reused" in completed.stderr  # the first run's build is in the cache
    rows = json.loads(completed.stdout.strip().splitlines()[-1])["scenarios"]
    assert [(r["scenario"], r["outcome"], r["go_outcome"], r["same_answer"]) for r in rows] == [
        ("1 GPU", "allocated", "allocated", True),
        ("8 GPUs matchAttribute", "unallocatable", "unallocatable", True),
    ]
    assert [r["device"] for r in rows[0]["go_allocations"][0]["devices"]["results"]] == ["gpu-4"]


def path_without_go() -> str:
    kept = [folder for folder in os.environ.get("PATH", "").split(os.pathsep)
            if folder and not os.path.exists(os.path.join(folder, "go"))]
    return os.pathsep.join(kept)


def test_without_go_the_benchmark_times_gpudra_alone_and_says_so(tmp_path):
    env = {**os.environ, "PATH": path_without_go()}
    env.pop("GO", None)
    assert shutil.which("go", path=env["PATH"]) is None
    completed = run_benchmark(cluster_file(tmp_path, []), "--node", gen_cluster.node_name(0), env=env)
    assert completed.returncode == 0, completed.stderr
    assert "go is not on PATH: timing gpudra alone" in completed.stderr
    summary = json.loads(completed.stdout.strip().splitlines()[-1])
    assert summary["go_allocator"] is None
    assert [(r["scenario"], r["outcome"], r["devices_allocated"]) for r in summary["scenarios"]] == [
        ("1 GPU", "allocated", 1), ("8 GPUs matchAttribute", "unallocatable", 0)]  # two NVLink domains of four
    assert all("same_answer" not in r and "allocate_vs_go" not in r for r in summary["scenarios"])


def test_a_different_answer_is_reported_not_hidden():
    """The comparison the benchmark applies: serialisation differences pass, any change of the answer fails."""
    node = gen_cluster.node_name(0)
    ours = [allocated_claim(node, ["gpu-0", "gpu-1"])["status"]["allocation"]]
    theirs = copy.deepcopy(ours)
    theirs[0]["devices"]["config"] = []  # Go's omitempty leaves out what Python may write empty
    assert go_allocator.same_answer("allocated", ours, {"results": theirs})
    moved = copy.deepcopy(ours)
    moved[0]["devices"]["results"][1]["device"] = "gpu-2"
    assert not go_allocator.same_answer("allocated", ours, {"results": moved})
    assert not go_allocator.same_answer("allocated", ours, {"results": None})
    assert not go_allocator.same_answer("unallocatable", None, {"results": ours})
    assert go_allocator.same_answer("error", None, {"results": None, "error": "wording differs"})
    assert not go_allocator.same_answer("allocated", ours, {"results": None, "error": "CEL runtime error"})


@needs_go
@pytest.mark.timeout(go_allocator.BUILD_TIMEOUT_S + 300)
def test_a_gpudra_that_picks_another_device_is_caught_by_the_real_go_allocator(tmp_path, monkeypatch, capsys):
    """A mutant of gpudra's allocator (the last device of every answer moved to the next GPU) against the real Go
    allocator: the benchmark names the scenario and exits 1."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import allocate
    finally:
        sys.path.pop(0)

    class Mutant(allocate.Allocator):
        def allocate(self, node, claims, *args, **kwargs):
            outcome = super().allocate(node, claims, *args, **kwargs)
            allocations = copy.deepcopy(outcome.allocations)
            for allocation in allocations:
                last = allocation["devices"]["results"][-1]
                last["device"] = f"gpu-{int(last['device'].removeprefix('gpu-')) + 1}"
            return dataclasses.replace(outcome, allocations=allocations)

    monkeypatch.setattr(allocate, "Allocator", Mutant)
    path = cluster_file(tmp_path, [])
    assert allocate.main([str(path), "--node", gen_cluster.node_name(0), "--scenario", "one-gpu",
                          "--seconds", "0.01"]) == 1
    err = capsys.readouterr().err
    assert "error: gpudra and the Go allocator disagree on '1 GPU'" in err
    assert '"device": "gpu-1"' in err and '"device": "gpu-0"' in err
