"""`gpudra simulate -f`: any cluster and workload given as manifests, replayed through the scheduler in queue order."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from gpudra.simulate.manifests import Manifests, run_manifests
from gpudra.simulate.objects import cluster_objects, pod_objects
from gpudra.simulate.trace import Task, TraceNode

NODES = [TraceNode("node-a", 32000, 131072, 1, "T4"), TraceNode("node-b", 32000, 131072, 2, "G2")]


def _write(tmp_path, tasks: list[Task], created: list[str | None]) -> list[str]:
    """A cluster directory and a workload file; returns the -f arguments."""
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "nodes.yaml").write_text(yaml.safe_dump_all(cluster_objects(NODES, "dra")))
    objects = []
    for task, timestamp in zip(tasks, created):
        pod, *claims = pod_objects(task, task.name, "dra")
        if timestamp:
            pod["metadata"]["creationTimestamp"] = timestamp
        objects += [pod, *claims]
    (tmp_path / "workload.yaml").write_text(yaml.safe_dump_all(objects))
    return ["-f", str(tmp_path / "cluster"), "-f", str(tmp_path / "workload.yaml")]


def _simulate(*args: str):
    from gpudra.cli.simulate import command

    return CliRunner().invoke(command, list(args))


WHOLE = [Task(f"whole-{i}", 1000, 1024, 1, 1000) for i in range(4)]


def test_pods_queue_by_creation_timestamp_then_file_order(tmp_path):
    # three GPUs for four one-GPU pods: the last one in the queue stays pending
    args = _write(tmp_path, WHOLE, ["2026-01-01T00:00:03Z", None, "2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"])
    done = _simulate(*args, "--policies", "kube,fragmentation", "-o", "json")
    assert done.exit_code == 0, done.output
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["policy"] for r in results] == ["kube", "fragmentation"]
    for result in results:
        assert (result["trace"], result["mode"], result["gpus"], result["tasks"]) == ("workload", "manifests", 3, 4)
        assert result["scheduled"] == 3 and result["allocation_ratio"] == 100.0 and result["unallocated_gpus"] == 0
        # timestamped pods first, oldest first; the pod without one comes last
        assert [p["pod"] for p in result["unschedulable"]] == ["sim/whole-1"]
        assert result["series"]["pods_percent"][-1] == 100


def test_without_timestamps_the_file_order_decides(tmp_path):
    args = _write(tmp_path, WHOLE, [None] * 4)
    done = _simulate(*args, "-o", "json")
    assert done.exit_code == 0, done.output
    (result,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert result["policy"] == "kube" and [p["pod"] for p in result["unschedulable"]] == ["sim/whole-3"]


def test_shares_and_whole_gpus_place_by_binpack_as_derived_by_hand(tmp_path):
    """node-a: one T4; node-b: two G2; each GPU offers compute 1000, a request without an amount takes all of it.
    In queue order, with binpack (scoring.py: the node left with the fewest untouched GPUs, then the most
    allocated cpu/memory):
    share-a (500): node-a is left with 0 untouched GPUs, node-b with 1: the T4.
    share-b (700, G2 only): node-b, one G2 (300 left on it).
    pair (two whole GPUs on one node): node-a has one GPU, node-b one untouched: unschedulable under any policy.
    cpu-only: no device; node-a.
    share-c (500): the T4 (500 left) or node-b's untouched G2 both leave 0 untouched GPUs; node-a has more cpu
    allocated: the T4.
    Scheduled 4 of 5, pair pending; GPUs in use: the T4 and one G2, 2 of 3."""
    tasks = [Task("share-a", 1000, 1024, 1, 500), Task("share-b", 1000, 1024, 1, 700, ("G2",)),
             Task("pair", 2000, 2048, 2, 1000), Task("cpu-only", 500, 512, 0, 0), Task("share-c", 1000, 1024, 1, 500)]
    _write(tmp_path, tasks, [None] * len(tasks))
    objects = [doc for path in (tmp_path / "cluster" / "nodes.yaml", tmp_path / "workload.yaml")
               for doc in yaml.safe_load_all(path.read_text())]
    result = run_manifests(Manifests("w", objects), "binpack")
    assert result.scheduled == 4
    assert [p.pod for p in result.unschedulable] == ["sim/pair"]
    # a GPU any claim uses counts as allocated, shared or not
    assert result.allocation_ratio == round(100 * 2 / 3, 4) and result.unallocated_gpus == 1


def test_manifest_usage_errors_exit_2(tmp_path):
    args = _write(tmp_path, WHOLE[:1], [None])
    for extra, message in ((["--policy", "fgd"], "the paper's policies need a trace"),
                           (["--trace", "default"], "use either -f"),
                           (["--mode", "device-plugin"], "manifests are replayed as given")):
        done = _simulate(*args, *extra)
        assert done.exit_code == 2 and message in done.stderr, (extra, done.output)
    done = _simulate("-f", str(tmp_path / "missing.yaml"))
    assert done.exit_code == 2 and "missing.yaml" in done.stderr
    (tmp_path / "bad.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: 3}\n")
    done = _simulate("-f", str(tmp_path / "bad.yaml"))  # invalid: refused as by gpudra schedule
    assert done.exit_code == 1 and done.stderr.startswith("error: ") and "bad.yaml" in done.stderr


def test_manifests_without_gpus_or_without_pending_pods_are_usage_errors(tmp_path):
    args = _write(tmp_path, WHOLE, [None] * 4)
    cluster_only = _simulate(args[0], args[1])
    assert cluster_only.exit_code == 2 and "no pending pods" in cluster_only.output, cluster_only.output
    workload_only = _simulate(args[2], args[3])
    assert workload_only.exit_code == 2 and "no GPUs" in workload_only.output, workload_only.output
