"""`gpudra explain` on a pending pod of a ComputeDomain workload says why in the domain's terms: the clique its pods
may use has too few trays, or too many of them are busy (another job's GPUs, another domain's IMEX daemon). Two
simulated GB200 NVL72 racks of two trays in a local cluster; the pods select rack 0's clique."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.controller import reconcile
from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_racks
from gpudra.cluster.nodes import install_device_classes, up
from gpudra.computedomain.fit import Tray, domain_notes
from gpudra.discovery.profiles import rack_clique

EXAMPLE = (Path(__file__).resolve().parent.parent.parent / "examples" / "computedomain" / "computedomain.yaml").read_text()


def run(*args: str) -> tuple[int, str]:
    """Exit code and stdout (progress and notices go to stderr)."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout


def pods(directory: str) -> list[dict]:
    code, out = run("get", "pods", "-o", "json", "--dir", directory)
    assert code == 0, out
    return json.loads(out)["items"]


def pending(directory: str, job: str) -> list[str]:
    return [p["metadata"]["name"] for p in pods(directory)
            if p["metadata"]["name"].startswith(job + "-") and not p["spec"].get("nodeName")]


def manifest(name: str, pods_: int) -> str:
    """The example's domain and job, renamed and resized (the GPU template stays `tray-gpus`)."""
    text = EXAMPLE.replace("train-channel", f"{name}-channel").replace("name: train", f"name: {name}")
    return text.replace("completions: 2", f"completions: {pods_}").replace("parallelism: 2", f"parallelism: {pods_}")


def apply(directory: str, tmp_path: Path, name: str, pods_: int) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(manifest(name, pods_))
    code, out = run("apply", "-f", str(path), "--dir", directory)
    assert code == 0, out
    for _ in range(4):  # the control plane's resyncs, by hand: daemons become ready, channels are prepared
        reconcile(ClusterDir(directory))


def test_explain_names_a_clique_too_small_and_busy_trays(cluster_state, tmp_path):
    directory = cluster_state
    cluster = ClusterDir(directory)
    up(cluster, ClusterConfig(nodes=parse_racks("2x2")))
    install_device_classes(cluster)

    apply(directory, tmp_path, "big", 3)  # three pods, rack 0 has two trays
    (waiting,) = pending(directory, "big")
    code, out = run("explain", f"pod/{waiting}", "--dir", directory, "--no-fixes")
    assert code == 1, out
    assert (f"ComputeDomain default/big: clique too small: clique {rack_clique(0)} has 2 trays this pod may use, "
            "the workload needs 3 (one pod per tray)") in out
    assert run("delete", "job", "big", "--dir", directory)[0] == 0
    reconcile(cluster)

    apply(directory, tmp_path, "other", 1)  # one tray of rack 0 taken by another domain's job
    (taken,) = [p["spec"]["nodeName"] for p in pods(directory) if p["metadata"]["name"].startswith("other-")]
    apply(directory, tmp_path, "train", 2)
    (waiting,) = pending(directory, "train")
    code, out = run("explain", f"pod/{waiting}", "--dir", directory, "--no-fixes", "-o", "json")
    assert code == 1, out
    (note,) = [n for n in json.loads(out)["notes"] if n.startswith("ComputeDomain default/train")]
    assert note.startswith(f"ComputeDomain default/train: trays busy: 1 of the 2 trays of clique {rack_clique(0)} "
                           f"are taken, 1 free for a workload of 2: {taken} (")
    assert "another ComputeDomain" in note


def test_no_clique_among_the_nodes_the_pod_may_use() -> None:
    domain = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
              "metadata": {"name": "d", "namespace": "default", "uid": "u"}}
    pod = {"metadata": {"name": "p"}, "spec": {}}
    notes = domain_notes(pod, domain, [pod], [], [Tray("h100-0", "", False, "no GPU")])
    assert notes == ["ComputeDomain default/d: none of the nodes this pod may use is in an NVLink clique (node "
                     "label nvidia.com/gpu.clique): its IMEX channel needs multi-node NVLink trays (GB200 NVL72)"]


def test_a_clique_big_enough_with_free_trays_says_nothing() -> None:
    domain = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
              "metadata": {"name": "d", "namespace": "default", "uid": "u"}}
    owner = [{"uid": "job", "controller": True}]
    job = [{"metadata": {"name": f"p{i}", "ownerReferences": owner}, "spec": {}} for i in range(2)]
    trays = [Tray("t0", "c.1", True), Tray("t1", "c.1", False, "busy"), Tray("t2", "c.1", True)]
    assert domain_notes(job[0], domain, job, [], trays) == []
    assert domain_notes(job[0], domain, job, [], trays[:2])[0].startswith("ComputeDomain default/d: trays busy: 1 of")
