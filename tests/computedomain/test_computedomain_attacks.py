"""Attacks on ComputeDomains from another tenant (issue 35): pods labelled with someone else's domain UID, a daemon
claim naming another namespace's domain, and a status the store refuses. None may change another tenant's domain,
reach its IMEX files, or stop the local cluster's control loop.

The rule for which pods are a domain's IMEX daemons is NVIDIA's (k8s-dra-driver-gpu
cmd/compute-domain-controller/daemonsetpods.go: an informer on the driver's namespace only, selecting the domain
label) plus the controller reference to the domain's DaemonSet; everything else labelled alike is a tenant's pod.
"""

from __future__ import annotations

import copy
import logging
import uuid
from typing import Any

import pytest
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.computedomains import reconcile_compute_domains
from gpudra.cluster.controller import reconcile
from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_nodes
from gpudra.cluster.nodes import node_object
from gpudra.cluster.store import StoreError
from gpudra.computedomain.controller import CLIQUE_NODE_LABEL, DOMAIN_LABEL, DRIVER_NAMESPACE, World, plan

from test_driver_computedomain import NODE, compute_domain, daemon_config, status_node
from test_driver_computedomain import node as node  # noqa: F401 - the fixture

UID = "6f0c2b9e-3d4a-4e5b-8c7d-9e0f1a2b3c4d"
DAEMONSET = f"computedomain-daemon-{UID}"


def _domain() -> dict[str, Any]:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
            "metadata": {"name": "train", "namespace": "team-a", "uid": UID},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "train-channel"}}}}


def _node(name: str, labelled: bool) -> dict[str, Any]:
    labels = {CLIQUE_NODE_LABEL: "c.1", **({DOMAIN_LABEL: UID} if labelled else {})}
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}}


def _pod(name: str, namespace: str, node_name: str, ip: str, owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                            "labels": {DOMAIN_LABEL: UID}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner,
                                    "uid": "ds-uid", "controller": True}]
    return {"kind": "Pod", "metadata": meta, "spec": {"nodeName": node_name},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}}


def test_labelled_pods_of_a_tenant_are_not_the_domains_daemons():
    """Only the DaemonSet's pods in the driver's namespace count: a Ready spoof pod neither enters status.nodes (the
    IMEX peer list every daemon of the domain writes into nodes.cfg) nor gives its node a second entry, and no
    tenant pod is deleted, not even on a node without the domain's label or when the domain goes."""
    real = _pod("d-t0", DRIVER_NAMESPACE, "t0", "10.0.0.1", owner=DAEMONSET)
    spoofs = [_pod("spoof-same-node", "evil", "t0", "6.6.6.6", owner=DAEMONSET),
              _pod("spoof-unlabelled-node", "evil", "t1", "6.6.6.7"),
              _pod("spoof-no-owner", DRIVER_NAMESPACE, "t0", "6.6.6.8"),
              _pod("spoof-other-owner", DRIVER_NAMESPACE, "t0", "6.6.6.9", owner="someone-elses")]
    world = World(nodes=[_node("t0", True), _node("t1", False)], pods=[real, *spoofs])
    result = plan(_domain(), world)
    assert result.delete == []
    assert result.domain is not None
    assert result.domain["status"] == {"status": "Ready", "nodes": [
        {"name": "t0", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0, "status": "Ready"}]}
    gone = copy.deepcopy(_domain())
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    gone["metadata"]["finalizers"] = ["resource.nvidia.com/computeDomain"]
    assert plan(gone, world).delete == [("Pod", DRIVER_NAMESPACE, "d-t0")]
    # a DaemonSet known by uid: a pod naming it with another uid is not its
    daemonset = {"kind": "DaemonSet", "metadata": {"name": DAEMONSET, "namespace": DRIVER_NAMESPACE,
                                                   "uid": "other-uid", "labels": {DOMAIN_LABEL: UID}}}
    assert "nodes" not in plan(_domain(), World(nodes=world.nodes, pods=[real],
                                                daemonsets=[daemonset])).domain["status"]


# ----- the local cluster's control loop ---------------------------------------------------------------------------
@pytest.fixture
def cluster(tmp_path) -> ClusterDir:
    cluster = ClusterDir(str(tmp_path / "c"))
    config = ClusterConfig(nodes=parse_nodes("l4-node"))
    cluster.save_config(config)
    cluster.store.create(node_object(config.nodes[0], config.kubernetes_version))
    return cluster


def _store_domain(cluster: ClusterDir) -> str:
    for namespace in ("team-a", "evil", "nvidia-dra-driver-gpu"):  # namespaces exist before their objects
        if cluster.store.get("Namespace", None, namespace) is None:
            cluster.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    stored = cluster.store.create({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
                                   "metadata": {"name": "train", "namespace": "team-a"},
                                   "spec": {"numNodes": 1,
                                            "channel": {"resourceClaimTemplate": {"name": "train-channel"}}}})
    return str(stored["metadata"]["uid"])


def test_a_tenants_labelled_pods_do_not_stall_the_local_cluster(cluster):
    """Two pods of namespace `evil` labelled with team-a's domain UID on one node: counted as daemons, they gave the
    domain two status.nodes entries for one node, the store refused that status (422) and every later round of the
    control loop failed. Now they run as any pod, the domain does not list them, and `apply` works."""
    uid = _store_domain(cluster)
    node = cluster.store.get("Node", None, "l4-0")
    node["metadata"]["labels"][DOMAIN_LABEL] = uid  # as a channel claim of team-a prepared there would have it
    cluster.store.replace(node)
    for name in ("spoof-1", "spoof-2"):
        cluster.store.create({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": name, "namespace": "evil", "labels": {DOMAIN_LABEL: uid}},
                              "spec": {"nodeName": "l4-0", "containers": [{"name": "c", "image": "x"}]}})
    reconcile(cluster)
    reconcile(cluster)
    manifest = cluster.path + ".pod.yaml"
    with open(manifest, "w") as fh:
        fh.write("apiVersion: v1\nkind: Pod\nmetadata: {name: innocent, namespace: default}\n"
                 "spec: {containers: [{name: c, image: x}]}\n")
    result = CliRunner().invoke(cli, ["apply", "-f", manifest, "--dir", cluster.path])
    assert result.exit_code == 0, result.output
    assert cluster.store.get("Pod", "default", "innocent")["status"]["phase"] == "Running"
    assert {p["metadata"]["name"] for p in cluster.store.list("Pod") if p["metadata"]["namespace"] == "evil"} == {
        "spoof-1", "spoof-2"}
    status = cluster.store.get("ComputeDomain", "team-a", "train").get("status") or {}
    assert not status.get("nodes"), status


def test_a_status_the_store_refuses_is_logged_and_skipped(cluster, monkeypatch, caplog):
    """Whatever the store refuses (here every ComputeDomain write, 422) costs that domain's write, not the loop."""
    _store_domain(cluster)
    store = cluster.store
    original = store.replace

    def refusing(obj, **kwargs):
        if obj.get("kind") == "ComputeDomain":
            raise StoreError('ComputeDomain.resource.nvidia.com "train" is invalid: status.nodes[1]: Duplicate', 422)
        return original(obj, **kwargs)

    monkeypatch.setattr(store, "replace", refusing)
    with caplog.at_level(logging.WARNING, logger="gpudra.cluster.computedomains"):
        reconcile_compute_domains(store, lambda *args: None, lambda *args: None)
    assert any("ComputeDomain team-a/train not written" in r.getMessage() and "Duplicate" in r.getMessage()
               for r in caplog.records)
    assert {o["kind"] for o in store.list("DaemonSet") + store.list("ResourceClaimTemplate")} == {
        "DaemonSet", "ResourceClaimTemplate"}  # the rest of the domain's work was done


# ----- the compute-domain kubelet plugin ------------------------------------------------------------------------
def test_a_daemon_claim_from_another_namespace_is_not_prepared(node):  # noqa: F811 - the fixture
    """A claim of the daemon class in namespace `evil` naming team-a's domain would get team-a's IMEX directory and
    COMPUTE_DOMAIN_* identity; only the driver's namespace (the controller's daemon template) and the domain's own
    may prepare one."""
    uid = str(uuid.uuid4())
    node.domain(compute_domain(uid, name="job-cd", namespace="team-a", nodes=[status_node(NODE)]))
    stolen = node.claim("daemon", "daemon-0", [daemon_config(uid)], namespace="evil")
    answer = node.prepare(stolen)
    assert "namespace is different" in answer.error and not answer.devices
    controllers = node.claim("daemon", "daemon-0", [daemon_config(uid)], namespace=DRIVER_NAMESPACE)
    assert node.prepare(controllers).error == ""
