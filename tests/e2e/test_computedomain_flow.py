"""ComputeDomains in the local cluster, end to end: two simulated GB200 NVL72 racks (each its own NVLink clique), the
ComputeDomain controller, both kubelet plugins of every tray (gpu.nvidia.com and compute-domain.nvidia.com, real
driver processes over their gRPC sockets), the IMEX daemons' readiness gating the workload's channel, and teardown.
No GB200 hardware: the trays are simulated (gpudra.discovery's gb200-nvl72 profile)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.controller import reconcile
from gpudra.cluster.layout import ClusterConfig, ClusterDir, current_dir, parse_racks
from gpudra.cluster.nodes import down, install_device_classes, up
from gpudra.cluster.kubelet import read_record
from gpudra.computedomain.controller import DOMAIN_LABEL, channel_domain
from gpudra.discovery.profiles import rack_clique
from support.doc_blocks import computedomain_commands

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "computedomain" / "computedomain.yaml"


def gpudra(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def items(directory: str, kind: str) -> list[dict]:
    return json.loads(gpudra("get", kind, "-A", "-o", "json", "--dir", directory))["items"]


def settle(cluster: ClusterDir, done, rounds: int = 6) -> None:
    """The control loop until `done()` (the control plane's resyncs, run by hand: this cluster has none)."""
    for _ in range(rounds):
        if done():
            return
        reconcile(cluster)
    assert done()


def test_a_job_on_one_clique_shares_an_imex_channel_and_tears_down(cluster_state, tmp_path):
    directory = cluster_state
    cluster = ClusterDir(directory)
    up(cluster, ClusterConfig(nodes=parse_racks("2x2")))
    install_device_classes(cluster)
    nodes = {n["metadata"]["name"]: n for n in items(directory, "nodes")}
    assert {n: o["metadata"]["labels"]["nvidia.com/gpu.clique"] for n, o in nodes.items()} == {
        "rack0-tray0": rack_clique(0), "rack0-tray1": rack_clique(0),
        "rack1-tray0": rack_clique(1), "rack1-tray1": rack_clique(1)}
    assert rack_clique(0) != rack_clique(1)

    gpudra("apply", "-f", str(EXAMPLE), "--dir", directory)
    (domain,) = items(directory, "computedomains")
    uid = domain["metadata"]["uid"]

    def workers() -> list[dict]:
        return [p for p in items(directory, "pods") if p["metadata"]["namespace"] == "default"]

    def running() -> bool:
        pods = workers()
        return len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)

    settle(cluster, running)
    # one pod per tray, both in rack 0's clique (the job's nodeSelector)
    placed = sorted(p["spec"]["nodeName"] for p in workers())
    assert placed == ["rack0-tray0", "rack0-tray1"]
    # each container: its tray's four GPUs and the domain's IMEX channel 0, from the compute-domain driver
    claims = {c["metadata"]["name"]: c for c in items(directory, "resourceclaims")}
    for pod in workers():
        record = read_record(cluster, pod["spec"]["nodeName"], pod)
        assert record is not None
        (worker,) = record["containers"]
        assert sorted(worker["deviceNodes"]) == sorted(
            ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1",
             "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia-caps-imex-channels/channel0"])
        channel = next(claims[c["name"]] for c in record["claims"] if "channel" in c["name"])
        assert channel_domain(channel) == uid  # the same domain's channel in every pod
        assert [r["driver"] for r in channel["status"]["allocation"]["devices"]["results"]] == [
            "compute-domain.nvidia.com"]
    # the IMEX daemons: one per tray of the job, joined the domain, which is Ready
    daemons = [p for p in items(directory, "pods") if p["metadata"]["namespace"] == "nvidia-dra-driver-gpu"]
    assert sorted(p["spec"]["nodeName"] for p in daemons) == placed
    (domain,) = items(directory, "computedomains")
    assert domain["status"]["status"] == "Ready"
    assert [(n["name"], n["cliqueID"], n["index"], n["status"]) for n in domain["status"]["nodes"]] == [
        ("rack0-tray0", rack_clique(0), 0, "Ready"), ("rack0-tray1", rack_clique(0), 1, "Ready")]
    labelled = {n["metadata"]["name"] for n in items(directory, "nodes")
                if n["metadata"].get("labels", {}).get(DOMAIN_LABEL) == uid}
    assert labelled == set(placed)

    # the domain's spec cannot change (its CRD's rule)
    changed = tmp_path / "changed.yaml"
    changed.write_text(EXAMPLE.read_text().replace("numNodes: 2", "numNodes: 3"))
    assert "A computeDomain.spec is immutable" in gpudra("apply", "-f", str(changed), "--dir", directory, code=1)

    # the job goes: its channels are unprepared, the nodes unlabelled, the daemons and their claims go
    gpudra("delete", "job", "train", "--dir", directory)
    settle(cluster, lambda: not items(directory, "pods"))
    assert items(directory, "resourceclaims") == []
    assert not any(DOMAIN_LABEL in n["metadata"].get("labels", {}) for n in items(directory, "nodes"))
    (domain,) = items(directory, "computedomains")
    assert domain["status"] == {"status": "NotReady"}  # numNodes 2, none joined

    # the domain goes: its templates and DaemonSet first, then the domain itself
    gpudra("delete", "computedomain", "train", "--dir", directory)
    settle(cluster, lambda: not items(directory, "computedomains"))
    assert [t["metadata"]["name"] for t in items(directory, "resourceclaimtemplates")] == ["tray-gpus"]
    assert items(directory, "daemonsets") == []


def test_readme_computedomain_commands_run(cluster_state, monkeypatch):
    """docs/driver.md's ComputeDomains block, as written, in order (its cluster in the private state home)."""
    commands = computedomain_commands()
    assert commands[0].startswith("gpudra cluster up --racks") and commands[-1] == "gpudra cluster down"
    monkeypatch.chdir(Path(__file__).resolve().parent.parent.parent)
    outputs: dict[str, str] = {}
    try:
        for command in commands:
            args = shlex.split(command)
            done = CliRunner().invoke(cli, args[1:])
            assert done.exit_code == 0 and "warning" not in done.stderr, (command, done.output)
            outputs[command] = done.stdout
            if command.startswith("gpudra apply"):
                directory = ClusterDir(current_dir() or "")
                settle(directory, lambda: '"Ready"' in gpudra("get", "computedomain", "train", "-o", "json"))
    finally:
        if current_dir() and ClusterDir(current_dir() or "").exists():
            down(ClusterDir(current_dir() or ""))
    pods = outputs["gpudra get pods -A -o wide"]
    assert "rack0-tray0" in pods and "rack0-tray1" in pods and "computedomain-daemon-" in pods
    assert "status: Ready" in outputs["gpudra get computedomain train -o yaml"]
