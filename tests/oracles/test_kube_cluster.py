"""gpudra's simulated GPU nodes on the real Kubernetes 1.34 control plane (`cluster up --api-server kubernetes`):
the real kube-scheduler allocates from the slices gpudra's drivers publish, the real resourceclaim controller makes
claims from templates, the real Deployment and ReplicaSet controllers keep status, the real kubectl drives it, and
gpudra's node stand-in prepares each claim through the node's driver over the kubelet plugin gRPC API.

One cluster for the whole walk (bringing one up costs a minute on a loaded machine); each step says what it checks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from support.realkube import BUILD_TIMEOUT_S, ROOT, built, gpudra, short_dir

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)

TOO_BIG = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: sixteen, namespace: default}
spec:
  devices:
    requests:
    - name: g
      exactly: {deviceClassName: gpu.nvidia.com, count: 16}
---
apiVersion: v1
kind: Pod
metadata: {name: too-big, namespace: default}
spec:
  resourceClaims: [{name: c, resourceClaimName: sixteen}]
  containers: [{name: m, image: registry.k8s.io/pause:3.10, resources: {claims: [{name: c}]}}]
"""
NODES = "dgx-h100:2,hgx-a100-mig+dynamic-mig,l4-node"
FEATURES = "default,+DRAPartitionableDevices"  # 1.34: dynamic MIG needs the alpha gate, combined slice layout


class Real:
    def __init__(self, directory: str, kubectl: str):
        self.dir = directory
        self.kubectl_path = kubectl
        self.kubeconfig = os.path.join(directory, "kubeconfig")

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None) -> str:
        result = subprocess.run([self.kubectl_path, "--kubeconfig", self.kubeconfig, *args], capture_output=True,
                                text=True, input=stdin, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def wait(self, what: str, predicate, timeout: float = 120.0):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; node stand-in log:\n"
                                     + _tail(os.path.join(self.dir, "kube", "kubelet.log")))
            time.sleep(0.5)


def _tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _running(real: Real, namespace: str, name: str) -> dict | None:
    pod = real.get("pod", name, "-n", namespace)
    return pod if pod.get("status", {}).get("phase") == "Running" else None


def _our_processes(directory: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if directory in args or cwd.startswith(directory):
            found.append(f"{pid}: {args.replace(chr(0), ' ')[:200]}")
    return found


def test_gpu_nodes_on_the_real_control_plane():
    binary = built()
    directory = short_dir("gk")
    try:
        up = gpudra("cluster", "up", "--dir", directory, "--api-server", "kubernetes", "--nodes", NODES,
                    "--features", FEATURES)
        assert "export KUBECONFIG=" in up.stderr
        real = Real(directory, binary.kubectl)

        # nodes joined as real Node objects, Ready, with leases renewed by the stand-in
        nodes = real.wait("4 Ready nodes", lambda: [
            n for n in real.get("nodes")["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
        ] if len(real.get("nodes")["items"]) == 4 else None)
        assert sorted(n["metadata"]["name"] for n in nodes) == ["a100-0", "h100-0", "h100-1", "l4-0"]
        leases = real.get("leases", "-n", "kube-node-lease")["items"]
        assert {lease["metadata"]["name"] for lease in leases} == {n["metadata"]["name"] for n in nodes}

        # the drivers published their slices through the official client; the A100 node's dynamic MIG in 1.34's
        # combined layout (counter sets and the devices that consume them in one slice)
        slices = real.wait("slices of every node", lambda: (lambda items: items if {
            s["spec"].get("nodeName") for s in items} == {n["metadata"]["name"] for n in nodes} else None)(
            real.get("resourceslices")["items"]))
        mig = [s for s in slices if s["spec"]["nodeName"] == "a100-0" and s["spec"].get("sharedCounters")]
        assert mig and any(d.get("consumesCounters") for d in mig[0]["spec"]["devices"])
        for s in slices:  # owned by their Node, as the driver's slices are in a real cluster
            assert s["metadata"]["ownerReferences"][0]["kind"] == "Node"

        # the article's corrected manifests with the real kubectl
        for namespace in ("ai-training", "ai-serving"):
            real.kubectl("create", "namespace", namespace)
        real.kubectl("apply", "-f", str(ROOT / "examples" / "article-fixed") + "/")  # a symlink: walked with the slash
        training = real.wait("gpu-training Running", lambda: _running(real, "default", "gpu-training"))
        nvlink = real.wait("nvlink-training Running", lambda: _running(real, "ai-training", "nvlink-training"))
        assert nvlink["spec"]["nodeName"] in ("h100-0", "h100-1")
        claim = real.get("resourceclaim", "nvlink-h100-claim", "-n", "ai-training")
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 2 and {r["pool"] for r in results} == {nvlink["spec"]["nodeName"]}
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [nvlink["metadata"]["uid"]]

        # the node stand-in prepared the claim through the driver: the container sees the CDI devices
        record_path = os.path.join(directory, "nodes", nvlink["spec"]["nodeName"], "kubelet", "pods",
                                   nvlink["metadata"]["uid"] + ".json")
        with open(record_path, encoding="utf-8") as f:
            record = json.load(f)
        cdi = record["containers"][0]["cdiDevices"]
        assert len(cdi) == 2 and all(i.startswith("k8s.gpu.nvidia.com/") for i in cdi)
        assert len(record["containers"][0]["deviceNodes"]) >= 2

        # a node restart: the driver killed and started again (`cluster up`) publishes nothing new, and its
        # checkpoint still knows the claim it prepared (unprepared below when the pod goes)
        node = nvlink["spec"]["nodeName"]
        before = {s["metadata"]["name"]: s["spec"]["pool"] for s in real.get("resourceslices")["items"]}
        from gpudra.cluster.layout import ClusterDir
        from gpudra.cluster.nodes import stop_driver

        assert stop_driver(ClusterDir(directory), node, sig=signal.SIGKILL)
        gpudra("cluster", "up", "--dir", directory)
        assert {s["metadata"]["name"]: s["spec"]["pool"] for s in real.get("resourceslices")["items"]} == before
        status = gpudra("driver", "status", "--root", os.path.join(directory, "nodes", node),
                        "--kubelet-plugins-directory-path", "/plugins", "-o", "json")
        assert claim["metadata"]["uid"] in status.stdout

        # the real Deployment and ReplicaSet controllers, claims from the template by the real resourceclaim
        # controller (named <pod>-<podClaim>-<5 random characters>)
        deployment = real.wait("inference 2/2 ready", lambda: (lambda d: d if d["status"].get("readyReplicas") == 2
                                                               else None)(real.get("deploy", "inference", "-n",
                                                                                   "ai-serving")))
        assert deployment["status"]["availableReplicas"] == 2
        replicasets = real.get("rs", "-n", "ai-serving", "-l", "app=inference")["items"]
        assert len(replicasets) == 1 and replicasets[0]["status"]["readyReplicas"] == 2
        pods = real.get("pods", "-n", "ai-serving", "-l", "app=inference")["items"]
        claims = real.get("resourceclaims", "-n", "ai-serving")["items"]
        assert len(pods) == 2 and len(claims) == 2
        for pod in pods:
            generated = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
            assert re.fullmatch(re.escape(pod["metadata"]["name"]) + r"-gpu-[a-z0-9]{5}", generated)
            claim = next(c for c in claims if c["metadata"]["name"] == generated)
            assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]

        # explain reads the real cluster (directly, and as a kubectl plugin through the real kubectl) and says
        # what it says on the same objects offline; the real scheduler agrees that the pod does not fit
        real.kubectl("apply", "-f", "-", stdin=TOO_BIG)
        real.wait("FailedScheduling from kube-scheduler", lambda: [
            e for e in real.get("events", "--field-selector", "involvedObject.name=too-big")["items"]
            if e["reason"] == "FailedScheduling" and "cannot allocate all claims" in e["message"]])
        live = gpudra("explain", "pod/too-big", "--kubeconfig", real.kubeconfig, "-o", "json", check=False)
        assert live.returncode == 1, live.stderr
        dump = os.path.join(directory, "dump.yaml")
        with open(dump, "w", encoding="utf-8") as f:
            f.write(real.kubectl("get", "nodes,deviceclasses,resourceslices,resourceclaims,resourceclaimtemplates,pods",
                                 "-A", "-o", "yaml"))
        offline = gpudra("explain", "pod/too-big", "-f", dump, "--kubernetes-version", "1.34", "--features", FEATURES,
                         "-o", "json", check=False)
        assert json.loads(offline.stdout) == json.loads(live.stdout)
        plugin_dir = os.path.join(directory, "plugin")
        os.makedirs(plugin_dir)
        with open(os.path.join(plugin_dir, "kubectl-gpudra"), "w", encoding="utf-8") as f:
            f.write(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m gpudra \"$@\"\n")
        os.chmod(os.path.join(plugin_dir, "kubectl-gpudra"), 0o755)
        plugin = subprocess.run([real.kubectl_path, "gpudra", "explain", "pod/too-big", "-o", "json"],
                                capture_output=True, text=True, timeout=120,
                                env=dict(os.environ, KUBECONFIG=real.kubeconfig,
                                         PATH=plugin_dir + os.pathsep + os.environ["PATH"]))
        assert json.loads(plugin.stdout) == json.loads(live.stdout), plugin.stderr
        assert json.loads(live.stdout)["summary"].startswith("0/4 nodes are available")
        real.kubectl("delete", "pod", "too-big", "--wait=true", "--timeout=60s")
        real.kubectl("delete", "pod", "nvlink-training", "-n", "ai-training", "--wait=true", "--timeout=60s")
        assert not os.path.exists(record_path)  # unprepared by the restarted driver

        # deleting a pod: the stand-in unprepares, the pod goes, the real controllers deallocate and replace
        victim = pods[0]
        victim_claim = victim["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        real.kubectl("delete", "pod", victim["metadata"]["name"], "-n", "ai-serving", "--wait=true", "--timeout=60s")
        real.wait("the template claim removed", lambda: victim_claim not in {
            c["metadata"]["name"] for c in real.get("resourceclaims", "-n", "ai-serving")["items"]})
        victim_record = os.path.join(directory, "nodes", victim["spec"]["nodeName"], "kubelet", "pods",
                                     victim["metadata"]["uid"] + ".json")
        assert not os.path.exists(victim_record)
        real.wait("a replacement pod", lambda: (lambda d: d if d["status"].get("readyReplicas") == 2 else None)(
            real.get("deploy", "inference", "-n", "ai-serving")))

        # a user-made claim is deallocated once no pod uses it (the real resourceclaim controller)
        real.kubectl("delete", "pod", "gpu-training", "--wait=true", "--timeout=60s")
        real.wait("gpu-claim deallocated", lambda: not real.get("resourceclaim", "gpu-claim").get(
            "status", {}).get("allocation"))
        del training
    finally:
        gpudra("cluster", "down", "--dir", directory, check=False)
        left = _our_processes(directory)
        shutil.rmtree(directory, ignore_errors=True)
    assert not left, f"cluster down left processes running: {left}"
    assert not os.path.exists(directory)


def _walkthrough(commands: list[str], up_flags: str, check_step=None) -> dict[str, str]:
    """README commands, as written, with `cluster up` on the real API server, in a private home (the Go and gpudra
    build caches kept where they are: a home without them would build Kubernetes anew); their outputs."""
    from gpudra.kubecluster.build import cache_root

    home = short_dir("gh")
    paths = subprocess.run(["go", "env", "GOPATH", "GOCACHE", "GOMODCACHE"], capture_output=True, text=True,
                           check=True).stdout.split()
    env = {"HOME": home, "XDG_STATE_HOME": "", "XDG_CACHE_HOME": os.path.dirname(os.path.dirname(cache_root())),
           "GOPATH": paths[0], "GOCACHE": paths[1], "GOMODCACHE": paths[2]}
    assert commands[0].startswith("gpudra cluster up")
    commands = [commands[0] + up_flags, *commands[1:]]
    outputs = {}
    state = os.path.join(home, ".local", "state", "gpudra", "cluster")
    try:
        for command in commands:
            args = [a.replace("~", home, 1) if a.startswith("~") else a for a in command.split()[1:]]
            done = gpudra(*args, check=False, env=env)
            assert done.returncode == 0, (command, done.stderr[-2000:])
            outputs[command.replace(up_flags, "")] = done.stdout
            if check_step is not None:
                check_step(args, Real(state, os.path.join(state, "kube", "bin", "kubectl")))
    finally:
        gpudra("cluster", "down", check=False, env=env)
        left = _our_processes(home)
        shutil.rmtree(home, ignore_errors=True)
    assert not left, left
    return outputs


def test_the_computedomain_walkthrough_runs_on_the_real_control_plane():
    """The README's ComputeDomains block on the real API server with NVIDIA's CRD: gpudra's ComputeDomain
    controller makes the IMEX daemons' DaemonSet, the real DaemonSet controller its pods on the labelled trays, the
    real Job controller the indexed workers, both plugins of each tray prepare the claims, and the domain goes
    Ready with both trays; deleting the Job and then the domain tears everything down."""
    from support.doc_blocks import computedomain_commands

    built()

    def check(args: list[str], real: Real) -> None:
        if args[:2] == ["apply", "-f"]:
            domain = real.wait("the domain Ready", lambda: (lambda d: d if d.get("status", {}).get("status") == "Ready"
                                                            else None)(real.get("computedomain", "train")))
            assert sorted(n["name"] for n in domain["status"]["nodes"]) == ["rack0-tray0", "rack0-tray1"]
            real.wait("both workers Running", lambda: len([
                p for p in real.get("pods", "-l", "job-name=train")["items"]
                if p.get("status", {}).get("phase") == "Running"]) == 2)
            daemons = real.get("pods", "-n", "nvidia-dra-driver-gpu")["items"]
            assert sorted(p["spec"]["nodeName"] for p in daemons) == ["rack0-tray0", "rack0-tray1"]
            assert all(p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet" for p in daemons)
        if args[:2] == ["delete", "computedomain"]:
            real.wait("the domain's DaemonSet and templates gone", lambda: not real.get(
                "daemonsets", "-A")["items"] and "train-channel" not in real.kubectl("get", "resourceclaimtemplates"))

    outputs = _walkthrough(computedomain_commands(), " --api-server kubernetes", check)
    assert "status: Ready" in outputs["gpudra get computedomain train -o yaml"]


def test_the_readme_walkthrough_runs_on_the_real_control_plane(tmp_path):
    """The README's "Local cluster" commands, as written, on a cluster brought up with --api-server kubernetes:
    `get`, `apply`, `describe` and `delete` become the release's kubectl, `explain` reads the cluster through its
    kubeconfig, the driver's health event taints the device in the slice the real API server holds."""
    from support.doc_blocks import readme_commands

    built()

    def check(args: list[str], real: Real) -> None:
        if args[:2] == ["driver", "inject-event"]:
            real.wait("the tainted L4", lambda: [
                d for s in real.get("resourceslices")["items"] if s["spec"]["nodeName"] == "l4-0"
                for d in s["spec"]["devices"] if d["name"] == "gpu-0" and d.get("taints")])

    outputs = _walkthrough(readme_commands(), f" --api-server kubernetes --features {FEATURES},+DRADeviceTaints", check)
    assert "nvlink-training" in outputs["gpudra get pods -A -o wide"]
    assert "NOMINATED NODE" in outputs["gpudra get pods -A -o wide"]  # kubectl's own wide columns
    described = outputs["gpudra describe pod nvlink-training -n ai-training"]
    assert "Successfully assigned ai-training/nvlink-training" in described
    assert "Started container trainer" in described
    assert outputs["gpudra cluster view"].strip().endswith("view.html")
