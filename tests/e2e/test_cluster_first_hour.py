"""An operator's first hour on the local cluster (issue 21): `cluster up` without --dir, DeviceClasses, KIND/NAME,
why a pod is pending, the view's tainted and dynamic-MIG GPUs, commands pointed at a directory without a cluster."""

from __future__ import annotations

import json
import os
import re

from click.testing import CliRunner

from gpudra.catalog import gpu_model
from gpudra.cli import cli
from gpudra.cluster.layout import ClusterConfig, ClusterDir, current_pointer, parse_nodes, remember
from gpudra.cluster.nodes import down
from gpudra.cluster.view import render_page
from gpudra.discovery import read_inventory
from gpudra.gpuplugin.slices import build_resource_slices

from test_cluster_flow import ARTICLE


NVIDIA_CHART_CLASSES = [
    ("compute-domain-daemon.nvidia.com", "device.driver == 'compute-domain.nvidia.com' && "
     "device.attributes['compute-domain.nvidia.com'].type == 'daemon'", None),
    ("compute-domain-default-channel.nvidia.com", "device.driver == 'compute-domain.nvidia.com' && "
     "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
     "device.attributes['compute-domain.nvidia.com'].id == 0", None),
    ("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
     "nvidia.com/gpu"),
    ("mig.nvidia.com", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
     None),
    ("vfio.gpu.nvidia.com", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'",
     None),
]


def run(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, (args, result.output)
    return result


def test_first_hour_on_the_default_cluster(cluster_state, monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    default = os.path.join(os.environ["XDG_STATE_HOME"], "gpudra", "cluster")
    # the cluster brought up last is another one (a 1.34 cluster elsewhere): `cluster up` must not attach to it
    other = ClusterDir(str(tmp_path / "other"))
    other.save_config(ClusterConfig(nodes=parse_nodes("l4-node"), kubernetes_version="1.34"))
    remember(other.path)
    try:
        first = run("cluster", "up", "--nodes", "l4-node", "--no-control-plane")
        assert first.stdout.strip() == default
        assert f"creating a local cluster in {default}: Kubernetes 1.36, 1 node (l4-0)" in first.stderr
        assert ("DeviceClasses gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com, compute-domain-daemon.nvidia.com, "
                "compute-domain-default-channel.nvidia.com created") in first.stderr
        assert other.load_config().kubernetes_version == "1.34" and not os.path.exists(other.store.root)
        assert open(current_pointer()).read().strip() == default  # later commands follow the new cluster

        # the classes NVIDIA's Helm chart installs with its driver (NVIDIA/k8s-dra-driver-gpu,
        # deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-{gpu,mig,vfio}.yaml and
        # deviceclass-compute-domain-{daemon,default-channel}.yaml: computeDomains are enabled by default)
        classes = json.loads(run("get", "deviceclasses", "-o", "json").stdout)["items"]
        assert [(c["metadata"]["name"], c["spec"]["selectors"][0]["cel"]["expression"],
                 c["spec"].get("extendedResourceName")) for c in classes] == NVIDIA_CHART_CLASSES

        again = run("cluster", "up", "--no-control-plane")
        assert f"reusing the local cluster in {default}: Kubernetes 1.36, 1 node (l4-0), policy kube" in again.stderr
        assert "DeviceClasses" not in again.stderr
        changed = run("cluster", "up", "--kubernetes-version", "1.34", code=2)
        assert "already holds a Kubernetes 1.36 cluster; its release cannot change" in changed.stderr

        # a template and a Deployment run without applying a DeviceClass first
        run("apply", "-f", str(ARTICLE / "00-namespaces.yaml"), "-f", str(ARTICLE / "04-resourceclaimtemplate.yaml"), "-f", str(ARTICLE / "06-deployment.yaml"))
        pods = json.loads(run("get", "pods", "-n", "ai-serving", "-o", "json").stdout)["items"]
        assert len(pods) == 2 and {p["status"]["phase"] for p in pods} == {"Running"}
        node_root = os.path.join(default, "nodes", "l4-0")
        status = run("driver", "status", "--root", node_root, "--kubelet-plugins-directory-path", "/plugins",
                     "-o", "json")
        assert len(json.loads(status.stdout)["claims"]) == 2  # the node's driver prepared both pods' claims
        assert "no gpu.nvidia.com driver under" in run("driver", "status", "--root", node_root, code=2).stderr

        # KIND/NAME as `get -o name` prints it, taken back by get, describe and delete (kubectl's two spellings)
        names = run("get", "pods", "-n", "ai-serving", "-o", "name").stdout.split()
        assert names == [f"pod/{p['metadata']['name']}" for p in pods]
        one = pods[0]["metadata"]["name"]
        assert run("get", "-n", "ai-serving", f"pod/{one}", "-o", "json").stdout == \
            run("get", "-n", "ai-serving", "pod", one, "-o", "json").stdout
        assert run("describe", "-n", "ai-serving", f"pods/{one}").stdout.startswith(f"Name:             {one}\n")
        mixed = run("get", "deviceclass/gpu.nvidia.com", "node/l4-0").stdout
        assert "gpu.nvidia.com" in mixed and "l4-0" in mixed
        workload = run("get", "deployments", "-n", "ai-serving", "-o", "name").stdout.split()
        assert workload == ["deployment.apps/inference"]
        deleted = run("delete", "-n", "ai-serving", *workload)
        assert deleted.stdout == 'deployment "inference" deleted\n'
        assert run("get", "pods", "-n", "ai-serving", "-o", "name").stdout == ""
        assert "resource/name form" in run("get", "pod/a", "pods", code=2).stderr

        # a pending pod: explain reads the local cluster by default, describe shows explain's per-node summary
        run("apply", "-f", str(ARTICLE / "00-namespaces.yaml"), "-f", str(ARTICLE / "03-resourceclaim-nvlink.yaml"), "-f", str(ARTICLE / "07-pod-nvlink.yaml"))
        explained = run("explain", "pod/nvlink-training", "-n", "ai-training", "--no-fixes", code=1)
        assert f"reading the local cluster in {default}" in explained.stderr
        assert "node l4-0:" in explained.stdout and "NVIDIA L4 ×4" in explained.stdout
        assert run("explain", "pod", "nvlink-training", "-n", "ai-training", "--no-fixes", "--dir", default,
                   code=1).stdout == explained.stdout
        described = run("describe", "pod/nvlink-training", "-n", "ai-training").stdout
        why = described.split("Why Pending:", 1)[1].split("\nEvents:", 1)[0]
        report = explained.stdout.split("\n", 1)[1].split("\nNo single change", 1)[0].strip("\n")
        assert [line.strip() for line in report.splitlines()] == [line.strip() for line in why.splitlines()[1:]]
        assert re.search(r"Warning\s+FailedScheduling\s+\S+\s+default-scheduler\s+0/1 nodes are available: "
                         r"1 cannot allocate all claims\.", described)  # kube-scheduler's own message stays
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))  # names a live cluster: not local
        assert "reading the local cluster" not in run("explain", "pod/nvlink-training", code=2).stderr
        monkeypatch.delenv("KUBECONFIG")

        # a --root or --dir without a driver or cluster: exit 2, nothing created
        wrong = os.path.join(default, "nodes", "no-such-node")
        injected = run("driver", "inject-event", "--root", wrong, "--gpu", "0", "--xid", "79", code=2)
        assert "no simulated GPUs under" in injected.stderr and not os.path.exists(wrong)
        run("driver", "inject-event", "--root", os.path.join(default, "nodes", "l4-0"), "--gpu", "0", "--xid", "79")
        assert "no local cluster in" in run("get", "pods", "--dir", str(tmp_path / "empty"), code=2).stderr
        assert not os.path.exists(tmp_path / "empty")
    finally:
        if ClusterDir(default).exists():
            down(ClusterDir(default))


def test_cluster_up_can_leave_the_device_classes_out(cluster_state):
    done = run("cluster", "up", "--dir", cluster_state, "--nodes", "l4-node", "--no-control-plane",
               "--no-device-classes")
    assert "DeviceClasses" not in done.stderr
    assert run("get", "deviceclasses", "--dir", cluster_state, "-o", "name").stdout == ""


def _dynamic_mig_cluster(path: str, taint_gpu: str | None = None) -> tuple[ClusterDir, list[dict]]:
    """A cluster's store without driver processes: an HGX A100 node publishing dynamic MIG and an L4 node."""
    cluster = ClusterDir(path)
    cluster.save_config(ClusterConfig(nodes=[]))  # no drivers to start: the view reads the store
    slices = []
    for node, profile, dynamic in (("a100-0", "hgx-a100-mig", True), ("l4-0", "l4-node", False)):
        cluster.store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        built = build_resource_slices(read_inventory("simulated", profile=profile, node_name=node), node,
                                      dynamic_mig=dynamic)
        for item in built:
            for device in item["spec"].get("devices") or []:
                if node == "l4-0" and device["name"] == taint_gpu:
                    device["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
            cluster.store.create(item)
        slices.extend(built)
    return cluster, slices


def test_the_view_draws_a_tainted_gpu_as_tainted_and_dynamic_mig_as_capacity_and_used(tmp_path):
    cluster, slices = _dynamic_mig_cluster(str(tmp_path / "c"), taint_gpu="gpu-1")
    partition = next(d for s in slices if s["spec"]["nodeName"] == "a100-0" for d in s["spec"].get("devices") or []
                     if d.get("consumesCounters") and d["attributes"]["profile"]["string"] == "3g.40gb")
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "half", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "mig", "driver": "gpu.nvidia.com", "pool": "a100-0", "device": partition["name"]}]}}}}
    cluster.store.create(claim)
    page = render_page(cluster)

    tainted = re.search(r'<div class="device tainted" data-device="l4-0/gpu-1">.*?</div></div>', page).group(0)
    assert "gpu.nvidia.com/xid=79:NoSchedule" in tainted and "free" not in tainted
    assert page.count('class="device"') == 3 + 4  # the other L4s are free; the A100's four full GPUs too
    # dynamic MIG: no box per possible partition, only the allocated one, and the GPU's capacity and use, which
    # the MIG catalog (NVIDIA's profile table) gives independently: A100 80GB, 8 memory slices, 98 SMs in 7g
    a100 = gpu_model("A100-SXM4-80GB")
    full = next(p for p in a100.profiles if p.name == "7g.80gb")
    half = next(p for p in a100.profiles if p.name == "3g.40gb")
    dynamic = re.findall(r'<div class="gpu dynamic">.*?(?=<div class="gpu|</div></section>)', page)
    assert len(dynamic) == 4
    used = [d for d in dynamic if "held" in d]
    assert len(used) == 1 and used[0].count('class="device held"') == 1
    assert (f"memory slices {half.memory_slices}/{a100.memory_slices} used; "
            f"SMs {half.multiprocessors}/{full.multiprocessors} used") in used[0]
    assert all(f"memory slices 0/{a100.memory_slices} used" in d for d in dynamic if d is not used[0])
    assert all('class="device' not in d for d in dynamic if d is not used[0])
