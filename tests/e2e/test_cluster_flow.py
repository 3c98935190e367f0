"""The local cluster end to end: real driver processes, the store, the control loop, CDI, teardown."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_nodes
from gpudra.cluster.nodes import down, driver_alive, up
from gpudra.kubeletplugin.checkpoint import PREPARE_COMPLETED, load_checkpoint

ROOT = Path(__file__).resolve().parent.parent.parent
ARTICLE = ROOT / "gpudra" / "demo" / "data" / "article-fixed"
SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"
POLL_S = 0.02


@pytest.fixture
def state(cluster_state):
    return cluster_state


def gpudra(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def get(directory: str, *args: str) -> dict:
    return json.loads(gpudra("get", *args, "-o", "json", "--dir", directory))


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if text.encode() in fh.read():
                        found.append(int(entry))
            except OSError:
                continue
    return [pid for pid in found if pid != os.getpid()]


def assert_nothing_left(directory: str) -> None:
    assert not os.path.exists(directory)
    assert processes_mentioning(directory) == []


def cdi_specs(cluster: ClusterDir, node: str) -> set[str]:
    return {os.path.basename(p) for p in glob.glob(os.path.join(cluster.node_dir(node), "var/run/cdi/*"))}


def kubelet_records(cluster: ClusterDir, node: str) -> list[dict]:
    return [json.load(open(p)) for p in sorted(glob.glob(os.path.join(cluster.kubelet_dir(node), "*.json")))]


def test_article_flow_from_slices_to_containers_and_back(state):
    cluster = ClusterDir(state)
    up(cluster, ClusterConfig(nodes=parse_nodes("dgx-h100:2,l4-node")))
    nodes = ["h100-0", "h100-1", "l4-0"]

    # slices come from the driver processes, one device per GPU, owned by the Node: a DGX H100 has 8 GPUs, the
    # l4-node profile 4 (`gpudra cluster profiles`); NVIDIA's DRA driver names a full GPU "gpu-<minor>"
    # (dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin deviceinfo.go CanonicalName)
    slices = get(state, "resourceslices")["items"]
    gpus = {"h100-0": 8, "h100-1": 8, "l4-0": 4}
    for node in nodes:
        published = [s for s in slices if s["spec"]["nodeName"] == node]
        assert [d["name"] for s in published for d in s["spec"]["devices"]] == [f"gpu-{i}" for i in range(gpus[node])]
        node_uid = get(state, "nodes", node)["metadata"]["uid"]
        assert all(s["metadata"]["ownerReferences"][0]["uid"] == node_uid for s in published)

    out = gpudra("apply", "-f", str(ARTICLE), "--dir", state)
    assert "deployment.apps/inference created" in out and "resourceclaim.resource.k8s.io/gpu-claim created" in out

    pods = {p["metadata"]["name"]: p for p in get(state, "pods", "-A")["items"]}
    claims = {c["metadata"]["name"]: c for c in get(state, "resourceclaims", "-A")["items"]}
    assert len(pods) == 4 and all(p["status"]["phase"] == "Running" and p["spec"]["nodeName"] for p in pods.values())
    replicas = [p for p in pods.values() if p["metadata"]["namespace"] == "ai-serving"]
    for pod in replicas:
        assert re.fullmatch(rf"inference-[a-z0-9]+-{SUFFIX}", pod["metadata"]["name"])
        claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        assert re.fullmatch(re.escape(pod["metadata"]["name"]) + rf"-gpu-{SUFFIX}", claim_name)
        claim = claims[claim_name]
        assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    for claim in claims.values():  # every claim allocated and reserved for the pods using it
        assert claim["status"]["allocation"]["devices"]["results"]
        assert {e["uid"] for e in claim["status"]["reservedFor"]} <= {p["metadata"]["uid"] for p in pods.values()}

    # the NVLink pair: two H100s of one NVLink domain, on the node the pod runs on
    pair = claims["nvlink-h100-claim"]["status"]["allocation"]["devices"]["results"]
    node_of_pair = pods["nvlink-training"]["spec"]["nodeName"]
    devices = {d["name"]: d for s in slices if s["spec"]["nodeName"] == node_of_pair for d in s["spec"]["devices"]}
    assert len(pair) == 2 and {r["pool"] for r in pair} == {node_of_pair}
    assert len({devices[r["device"]]["attributes"]["nvlinkDomain"]["string"] for r in pair}) == 1

    # prepare: one CDI spec per claim on its node, each container sees its GPUs' device nodes
    for claim in claims.values():
        node = claim["status"]["allocation"]["devices"]["results"][0]["pool"]
        assert f"k8s.gpu.nvidia.com-claim_{claim['metadata']['uid']}.yaml" in cdi_specs(cluster, node)
    for node in nodes:
        for record in kubelet_records(cluster, node):
            view = record["containers"][0]
            minors = sorted(int(d["device"].split("-")[1]) for c in record["claims"] for d in c["devices"])
            assert [d for d in view["deviceNodes"] if re.fullmatch(r"/dev/nvidia\d+", d)] == \
                [f"/dev/nvidia{m}" for m in minors]
            assert view["cdiDevices"] == [i for c in record["claims"] for d in c["devices"] for i in d["cdiDeviceIDs"]]

    # deleting a replica: unprepared, its CDI spec removed, its claim deallocated and deleted; a new replica runs
    victim = replicas[0]
    victim_claim = claims[victim["status"]["resourceClaimStatuses"][0]["resourceClaimName"]]
    node = victim["spec"]["nodeName"]
    gpudra("delete", "pod", victim["metadata"]["name"], "-n", "ai-serving", "--dir", state)
    assert f"k8s.gpu.nvidia.com-claim_{victim_claim['metadata']['uid']}.yaml" not in cdi_specs(cluster, node)
    assert victim["metadata"]["uid"] not in {r["uid"] for r in kubelet_records(cluster, node)}
    claims_after = {c["metadata"]["name"] for c in get(state, "resourceclaims", "-A")["items"]}
    assert victim_claim["metadata"]["name"] not in claims_after
    serving = get(state, "pods", "-n", "ai-serving")["items"]
    assert len(serving) == 2 and all(p["status"]["phase"] == "Running" for p in serving)
    events = gpudra("get", "events", "-n", "ai-serving", "--dir", state)
    assert "Stopping container server" in events

    # deleting the pod of a standalone claim deallocates the claim but keeps it
    gpudra("delete", "pod", "gpu-training", "--dir", state)
    gpu_claim = get(state, "resourceclaims", "gpu-claim")
    assert "allocation" not in gpu_claim.get("status", {}) and "reservedFor" not in gpu_claim.get("status", {})
    all_specs = set().union(*(cdi_specs(cluster, n) for n in nodes))
    assert f"k8s.gpu.nvidia.com-claim_{gpu_claim['metadata']['uid']}.yaml" not in all_specs

    result = CliRunner().invoke(cli, ["cluster", "down", "--dir", state])
    assert result.exit_code == 0, result.output
    assert_nothing_left(state)


def test_unschedulable_pod_gets_kube_schedulers_message(state):
    up(ClusterDir(state), ClusterConfig(nodes=parse_nodes("l4-node")))
    gpudra("apply", "-f", str(ARTICLE / "00-namespaces.yaml"), "-f", str(ARTICLE / "01-deviceclass.yaml"),
           "-f", str(ARTICLE / "03-resourceclaim-nvlink.yaml"), "-f", str(ARTICLE / "07-pod-nvlink.yaml"), "--dir", state)
    pod = get(state, "pods", "nvlink-training", "-n", "ai-training")
    condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert condition["status"] == "False" and condition["message"].startswith("0/1 nodes are available:")
    assert "cannot allocate all claims" in condition["message"]
    described = gpudra("describe", "pod", "nvlink-training", "-n", "ai-training", "--dir", state)
    assert "FailedScheduling" in described and condition["message"] in described
    # asking again does not repeat the event: one FailedScheduling with count 1
    gpudra("apply", "-f", str(ARTICLE / "07-pod-nvlink.yaml"), "--dir", state)
    failed = [e for e in get(state, "events", "-n", "ai-training")["items"] if e["reason"] == "FailedScheduling"]
    assert len(failed) == 1 and failed[0]["count"] == 1


DEPLOYMENT = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec:
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: burst}
spec:
  replicas: 8
  selector: {matchLabels: {app: burst}}
  template:
    metadata: {labels: {app: burst}}
    spec:
      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
      containers: [{name: c, image: busybox, resources: {claims: [{name: gpu}]}}]
"""


def test_driver_killed_while_preparing_then_cluster_up_prepares_every_pod_once(state, tmp_path):
    cluster = ClusterDir(state)
    up(cluster, ClusterConfig(nodes=parse_nodes("dgx-h100")))
    gpudra("apply", "-f", str(ARTICLE / "01-deviceclass.yaml"), "--dir", state)
    manifest = tmp_path / "burst.yaml"
    manifest.write_text(DEPLOYMENT)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    apply = subprocess.Popen([sys.executable, "-m", "gpudra", "apply", "-f", str(manifest), "--dir", state],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = driver_alive(cluster, "h100-0")
    # kill the driver as soon as the kubelet stand-in has started the first pod, while the others are prepared
    for _ in range(3000):
        if kubelet_records(cluster, "h100-0") or apply.poll() is not None:
            break
        time.sleep(POLL_S)
    os.kill(pid, signal.SIGKILL)
    _, err = apply.communicate(timeout=120)
    assert apply.returncode == 0, err
    started_before_restart = len(kubelet_records(cluster, "h100-0"))
    assert driver_alive(cluster, "h100-0") is None

    restarted = CliRunner().invoke(cli, ["cluster", "up", "--dir", state])
    assert restarted.exit_code == 0 and "node h100-0 (dgx-h100): driver started" in restarted.stderr
    pods = get(state, "pods")["items"]
    claims = get(state, "resourceclaims")["items"]
    assert len(pods) == 8 and all(p["status"]["phase"] == "Running" for p in pods)
    records = kubelet_records(cluster, "h100-0")
    assert sorted(r["uid"] for r in records) == sorted(p["metadata"]["uid"] for p in pods)
    checkpoint = load_checkpoint(cluster.driver_paths("h100-0").checkpoint)  # the driver's own reader
    assert sorted(checkpoint["claims"]) == sorted(c["metadata"]["uid"] for c in claims)
    assert {entry["state"] for entry in checkpoint["claims"].values()} == {PREPARE_COMPLETED}
    assert cdi_specs(cluster, "h100-0") == {f"k8s.gpu.nvidia.com-claim_{c['metadata']['uid']}.yaml" for c in claims}
    devices = [r["device"] for c in claims for r in c["status"]["allocation"]["devices"]["results"]]
    assert len(devices) == len(set(devices)) == 8
    started = [e for e in get(state, "events")["items"] if e["reason"] == "Started"]
    assert sorted(e["involvedObject"]["uid"] for e in started) == sorted(p["metadata"]["uid"] for p in pods)
    assert all(e["count"] == 1 for e in started)  # every pod started (prepared) exactly once
    assert started_before_restart <= 8

    down(cluster)
    assert_nothing_left(state)


def test_cluster_commands_report_usage_errors_cleanly(state):
    for args, message in ((["get", "pods", "--dir", state], "no local cluster in"),
                          (["cluster", "up", "--dir", state, "--nodes", "no-such-profile"], "unknown node profile"),
                          (["cluster", "up", "--dir", state, "--nodes", "l4-node:x"], "COUNT must be")):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and message in result.stderr and "Traceback" not in result.output
    assert not os.path.exists(os.path.join(state, "cluster.yaml"))
    # a directory too long for unix sockets works: they go through a short link (tests/e2e/test_cluster_newcomer.py)
    long_dir = "/tmp/" + "x" * 100
    result = CliRunner().invoke(cli, ["cluster", "up", "--dir", long_dir, "--nodes", "l4-node", "--no-control-plane"])
    assert result.exit_code == 0, result.output
    down(ClusterDir(long_dir))
    assert_nothing_left(long_dir)


def test_nodes_option_names_nodes_after_their_profiles():
    nodes = parse_nodes("dgx-h100:2,hgx-a100-mig+dynamic-mig,l4-node")
    assert [(n.name, n.profile, n.dynamic_mig) for n in nodes] == [
        ("h100-0", "dgx-h100", False), ("h100-1", "dgx-h100", False), ("a100-0", "hgx-a100-mig", True),
        ("l4-0", "l4-node", False)]


def test_get_yaml_and_json_are_lists_with_items(state):
    up(ClusterDir(state), ClusterConfig(nodes=parse_nodes("l4-node")))
    listed = yaml.safe_load(gpudra("get", "nodes", "-o", "yaml", "--dir", state))
    assert listed["kind"] == "List" and [n["metadata"]["name"] for n in listed["items"]] == ["l4-0"]
    assert "gpudra.local/created-revision" not in json.dumps(listed)
    table = gpudra("get", "resourceslices", "-o", "wide", "--dir", state).splitlines()
    assert table[0].split()[:5] == ["NAME", "NODE", "DRIVER", "POOL", "AGE"] and "l4-0" in table[1]


def test_view_serve_answers_with_the_current_page(state):
    import threading
    import urllib.request

    from gpudra.cluster.view import make_server

    cluster = ClusterDir(state)
    up(cluster, ClusterConfig(nodes=parse_nodes("l4-node")))
    server = make_server(cluster, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        page = urllib.request.urlopen(url, timeout=30).read().decode()
        assert 'data-node="l4-0"' in page and page.count('class="device"') == 4  # four free L4s
        gpudra("apply", "-f", str(ARTICLE / "01-deviceclass.yaml"), "-f", str(ARTICLE / "05-pod.yaml"),
               "-f", str(ARTICLE / "02-resourceclaim-gpu.yaml"), "--dir", state)
        page = urllib.request.urlopen(url, timeout=30).read().decode()  # rendered afresh: gpu-claim holds one
        assert page.count('class="device held"') == 1 and "default/gpu-claim" in page
    finally:
        server.shutdown()
        server.server_close()


def test_down_removes_only_what_the_cluster_created(state):
    # `cluster up --dir .` or `demo --keep DIR` in a directory of the user's: `down` must not take their files.
    os.makedirs(state)
    Path(state, "notes.txt").write_text("mine")
    cluster = ClusterDir(state)
    up(cluster, ClusterConfig(nodes=parse_nodes("t4-node")))
    gpudra("cluster", "view", "--dir", state)
    down(cluster)
    assert sorted(os.listdir(state)) == ["notes.txt"] and Path(state, "notes.txt").read_text() == "mine"
    assert processes_mentioning(state) == []
    os.remove(os.path.join(state, "notes.txt"))
    up(cluster, ClusterConfig(nodes=parse_nodes("t4-node")))
    down(cluster)
    assert_nothing_left(state)  # a directory the cluster made is removed whole


def test_not_found_reads_the_same_for_get_describe_and_delete(state):
    # The CLI contract: every error on stderr reads `error: …` (exit 1 for "not found").
    up(ClusterDir(state), ClusterConfig(nodes=parse_nodes("t4-node")))
    for verb in ("get", "describe", "delete"):
        result = CliRunner().invoke(cli, [verb, "pod", "nope", "--dir", state])
        assert result.exit_code == 1 and result.stderr == 'error: pods "nope" not found\n', (verb, result.stderr)


def test_describe_pod_reads_like_kubectl_and_shows_what_dra_gave_each_container(state):
    up(ClusterDir(state), ClusterConfig(nodes=parse_nodes("l4-node")))
    gpudra("apply", "-f", str(ARTICLE / "01-deviceclass.yaml"), "-f", str(ARTICLE / "02-resourceclaim-gpu.yaml"),
           "-f", str(ARTICLE / "05-pod.yaml"), "--dir", state)
    claim = get(state, "resourceclaims", "gpu-claim")
    device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
    text = gpudra("describe", "pod", "gpu-training", "--dir", state)
    labels = [line.split(":", 1)[0] for line in text.splitlines() if line and not line.startswith(" ")]
    assert labels == ["Name", "Namespace", "Priority", "Service Account", "Node", "Start Time", "Labels",
                      "Annotations", "Status", "Containers", "Conditions", "Resource Claims", "Events"]
    assert re.search(r"^Node:\s+l4-0$", text, re.M) and re.search(r"^Status:\s+Running$", text, re.M)
    conditions = text.split("Conditions:\n", 1)[1].split("Resource Claims:", 1)[0].split()
    assert conditions[2::2] == ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                "PodScheduled"]
    cdi_id = f"k8s.gpu.nvidia.com/claim={claim['metadata']['uid']}-{device}"
    assert re.search(rf"^    CDI Devices:\n      {re.escape(cdi_id)}$", text, re.M)
    assert f"/dev/nvidia{device.rsplit('-', 1)[1]}" in text.split("Device Nodes:", 1)[1].split("Injected Env:")[0]
    assert re.search(rf"^  gpu\s+gpu-claim\s+claim\s+l4-0/{device}$", text, re.M)
    assert re.search(r"Normal\s+Started\s+\S+\s+kubelet\s+Started container", text)


def test_apply_and_delete_take_kubectls_output_formats(tmp_path):
    """`apply -o name|yaml|json` (kubectl apply's) and `delete -o name` (kubectl delete's only one), on a local
    cluster's store without nodes."""
    directory = str(tmp_path / "cluster")
    ClusterDir(directory).save_config(ClusterConfig(nodes=[]))
    manifests = ["-f", str(ARTICLE / "01-deviceclass.yaml"), "-f", str(ARTICLE / "02-resourceclaim-gpu.yaml")]
    names = gpudra("apply", *manifests, "--dir", directory, "-o", "name").splitlines()
    assert names == ["deviceclass.resource.k8s.io/gpu.nvidia.com", "resourceclaim.resource.k8s.io/gpu-claim"]
    assert gpudra("get", "resourceclaims", "--dir", directory, "-o", "name").splitlines() == names[1:]
    applied = json.loads(gpudra("apply", *manifests, "--dir", directory, "-o", "json"))
    assert applied["kind"] == "List" and [o["kind"] for o in applied["items"]] == ["DeviceClass", "ResourceClaim"]
    stored = get(directory, "resourceclaims", "gpu-claim")
    assert applied["items"][1]["metadata"]["uid"] == stored["metadata"]["uid"]
    assert applied["items"][1]["spec"] == stored["spec"]
    one = yaml.safe_load(gpudra("apply", "-f", str(ARTICLE / "01-deviceclass.yaml"), "--dir", directory, "-o", "yaml"))
    assert one == applied["items"][0]  # one object as itself, as kubectl prints it
    assert "created" in gpudra("apply", *manifests[:2], "-f", str(ARTICLE / "00-namespaces.yaml"), "-f",
                               str(ARTICLE / "04-resourceclaimtemplate.yaml"), "--dir", directory)  # kubectl's lines
    deleted = gpudra("delete", "resourceclaim", "gpu-claim", "--dir", directory, "-o", "name")
    assert deleted.splitlines() == ["resourceclaim.resource.k8s.io/gpu-claim"]
    assert gpudra("delete", "deviceclass", "gpu.nvidia.com", "--dir", directory) == \
        'deviceclass "gpu.nvidia.com" deleted\n'
