"""A local cluster's feature gates (`cluster up --features`, kube-apiserver's and kube-scheduler's
--feature-gates): a 1.34 cluster with DRAPartitionableDevices on runs dynamic MIG on 1.34's combined slice layout
(issue 22: NVIDIA's driver publishes combined slices for exactly this case), and one without the gate publishes
what 1.34 can allocate. Real driver processes, the store, the control loop."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_nodes
from gpudra.versions import partitionable_layout

GATE_ON = "default,+DRAPartitionableDevices"

MIG_WORKLOAD = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-1g}
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '1g.6gb'"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: small}
spec:
  replicas: 4
  selector: {matchLabels: {app: small}}
  template:
    metadata: {labels: {app: small}}
    spec:
      containers: [{name: main, image: cuda, resources: {claims: [{name: mig}]}}]
      resourceClaims: [{name: mig, resourceClaimTemplateName: one-1g}]
"""


def run(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    return result.stdout


def test_a_1_34_cluster_with_partitionable_devices_on_runs_dynamic_mig_on_combined_slices(cluster_state, tmp_path):
    run("cluster", "up", "--dir", cluster_state, "--nodes", "a30-mig+dynamic-mig", "--kubernetes-version", "1.34",
        "--features", GATE_ON, "--no-control-plane")
    assert ClusterDir(cluster_state).load_config().features == GATE_ON
    slices = json.loads(run("get", "resourceslices", "-o", "json", "--dir", cluster_state))["items"]
    assert partitionable_layout("1.34") == "combined"
    combined = [s for s in slices if s["spec"].get("sharedCounters")]
    assert combined, "the gate on: counter sets published, kept by the 1.34 API server"
    for s in combined:  # 1.34's layout: each slice's counter sets serve its own devices
        assert s["spec"].get("devices")
        names = {c["name"] for c in s["spec"]["sharedCounters"]}
        assert {c["counterSet"] for d in s["spec"]["devices"] for c in d.get("consumesCounters") or []} <= names
    manifest = tmp_path / "mig.yaml"
    manifest.write_text(MIG_WORKLOAD)
    run("apply", "-f", str(manifest), "--dir", cluster_state)
    pods = json.loads(run("get", "pods", "-o", "json", "--dir", cluster_state))["items"]
    assert len(pods) == 4 and all(p["status"]["phase"] == "Running" for p in pods), [p["status"] for p in pods]
    claims = json.loads(run("get", "resourceclaims", "-o", "json", "--dir", cluster_state))["items"]
    devices = [r["device"] for c in claims for r in c["status"]["allocation"]["devices"]["results"]]
    dynamic = {d["name"] for s in combined for d in s["spec"]["devices"] if d.get("consumesCounters")}
    assert len(set(devices)) == 4 and set(devices) <= dynamic  # carved on demand from one GPU's counters
    # the cluster's gates are fixed when it is created, as its release is
    run("cluster", "up", "--dir", cluster_state, "--features", "default", "--no-control-plane", code=2)


def test_without_the_gate_a_1_34_cluster_publishes_no_counter_sets_and_says_why(cluster_state):
    result = CliRunner().invoke(cli, ["cluster", "up", "--dir", cluster_state, "--nodes", "a30-mig+dynamic-mig",
                                      "--kubernetes-version", "1.34", "--no-control-plane"])
    assert result.exit_code == 0, result.output
    assert "no dynamic MIG in Kubernetes 1.34" in result.stderr and "DRAPartitionableDevices" in result.stderr
    slices = json.loads(run("get", "resourceslices", "-o", "json", "--dir", cluster_state))["items"]
    assert slices and not any(s["spec"].get("sharedCounters") for s in slices)


def test_an_unknown_gate_is_a_usage_error_and_creates_nothing(cluster_state):
    result = CliRunner().invoke(cli, ["cluster", "up", "--dir", cluster_state, "--nodes", "l4-node",
                                      "--features", "default,+NoSuchGate", "--no-control-plane"])
    assert result.exit_code == 2 and "NoSuchGate" in result.output
    assert not ClusterDir(cluster_state).exists()


def test_the_store_keeps_gated_fields_the_cluster_turned_on(cluster_state):
    """dropDisabledFields with the cluster's gates: a 1.34 API server drops sharedCounters unless
    DRAPartitionableDevices is on."""
    from gpudra.discovery import read_inventory
    from gpudra.gpuplugin.slices import build_resource_slices

    cluster = ClusterDir(cluster_state)
    inventory = read_inventory("simulated", profile="a30-mig", node_name="a30")
    (first, *_) = build_resource_slices(inventory, "a30", dynamic_mig=True, slice_layout="combined")
    for features, kept in (("default", False), (GATE_ON, True)):
        cluster.save_config(ClusterConfig(nodes=parse_nodes("a30-mig"), kubernetes_version="1.34",
                                          features=features))
        stored = cluster.store.create(json.loads(json.dumps(first)))
        assert ("sharedCounters" in stored["spec"]) is kept
        cluster.store.delete("ResourceSlice", None, stored["metadata"]["name"], graceful=False)
