"""`gpudra simulate --dask-scheduler`: a sweep on a local Dask distributed cluster gives what the local cores give."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from distributed import LocalCluster  # the test extra installs gpudra[distributed]

from gpudra.simulate import distributed as dask_sweeps
from gpudra.simulate.sweep import Experiment, TraceSource

from support.traces import NODES_CSV, PODS_CSV


def _simulate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpudra", "simulate", *args], capture_output=True, text=True,
                          timeout=300)


def _without_timings(lines: str) -> list[dict]:
    results = [json.loads(line) for line in lines.splitlines()]
    for result in results:
        del result["seconds"], result["cpu_seconds"]
    return results


@pytest.fixture(scope="module")
def dask_cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                      dashboard_address=None) as cluster:
        yield cluster


def test_sweep_on_a_dask_cluster_equals_the_local_sweep(tmp_path, dask_cluster):
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    common = ["--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--policies",
              "fgd,kube", "--seeds", "2", "--tune", "3", "-o", "json"]
    local = _simulate(*common, "-j", "1")
    remote = _simulate(*common, "--dask-scheduler", dask_cluster.scheduler_address)
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    results = _without_timings(remote.stdout)
    assert [(r["policy"], r["seed"]) for r in results] == [("fgd", 42), ("fgd", 43), ("kube", 42),
                                                          ("kube", 43)]
    assert results == _without_timings(local.stdout)
    assert all(r["scheduled"] > 0 for r in results)
    # the experiments ran on the cluster's workers, not in the client
    assert sum(len(w.data) + w.state.executed_count for w in dask_cluster.workers.values()) >= len(results)


def test_unreachable_dask_scheduler_is_a_message(monkeypatch):
    monkeypatch.setattr(dask_sweeps, "CONNECT_TIMEOUT_S", 1)
    with pytest.raises(dask_sweeps.DistributedError, match="cannot connect to the Dask scheduler at tcp://127.0.0.1:9"):
        dask_sweeps.run_on_dask([Experiment(TraceSource("default"), "fgd", 1)], "tcp://127.0.0.1:9", {}, [None])
