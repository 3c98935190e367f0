"""Deleting a ComputeDomain removes its DaemonSet and templates even when its finalizer was taken off by hand:
the workload template (the domain's namespace) through its owner reference and the garbage collector, the
driver-namespace objects through the controller's cleanup of objects labelled for a domain that is gone (NVIDIA's
cleanup.go CleanupManager; no cross-namespace owner references exist). On the embedded cluster and on the real
Kubernetes 1.34 control plane with its real garbage collector."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from gpudra.cluster.computedomains import reconcile_compute_domains
from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_nodes
from gpudra.cluster.nodes import node_object
from gpudra.computedomain.controller import DOMAIN_LABEL

from support.realkube import BUILD_TIMEOUT_S, built, gpudra, short_dir

DOMAIN = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
          "metadata": {"name": "train", "namespace": "team-a"},
          "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "train-channel"}}}}


def _owned(objects: list[dict], uid: str) -> list[str]:
    return sorted(f"{o['kind']} {o['metadata']['namespace']}/{o['metadata']['name']}" for o in objects
                  if (o["metadata"].get("labels") or {}).get(DOMAIN_LABEL) == uid)


def test_a_domain_deleted_without_its_finalizer_leaves_nothing_on_the_embedded_cluster(tmp_path):
    cluster = ClusterDir(str(tmp_path / "c"))
    config = ClusterConfig(nodes=parse_nodes("l4-node"))
    cluster.save_config(config)
    store = cluster.store
    store.create(node_object(config.nodes[0], config.kubernetes_version))
    for namespace in ("team-a", "nvidia-dra-driver-gpu"):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    uid = store.create(json.loads(json.dumps(DOMAIN)))["metadata"]["uid"]
    reconcile_compute_domains(store, lambda *a: None, lambda *a: None)
    objects = store.list("DaemonSet") + store.list("ResourceClaimTemplate")
    assert len(_owned(objects, uid)) == 3
    domain = store.get("ComputeDomain", "team-a", "train")
    domain["metadata"]["finalizers"] = []  # taken off by hand: the controller's teardown never runs
    store.replace(domain)
    store.delete("ComputeDomain", "team-a", "train")
    assert store.get("ComputeDomain", "team-a", "train") is None
    for _ in range(2):  # delete (terminating: the objects' own finalizer), then release
        reconcile_compute_domains(store, lambda *a: None, lambda *a: None)
    assert _owned(store.list("DaemonSet") + store.list("ResourceClaimTemplate"), uid) == []


@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_a_domain_deleted_without_its_finalizer_leaves_nothing_on_the_real_control_plane():
    built()
    directory = short_dir("co")
    kubectl = [os.path.join(directory, "kube", "bin", "kubectl"), "--kubeconfig", os.path.join(directory, "kubeconfig")]

    def get(*args: str) -> dict:
        return json.loads(subprocess.run([*kubectl, "get", *args, "-o", "json"], capture_output=True, text=True,
                                         check=True, timeout=120).stdout)

    def wait(what: str, predicate, timeout: float = 180.0):
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.5)
        return value

    try:
        gpudra("cluster", "up", "--dir", directory, "--api-server", "kubernetes", "--racks", "2x2")
        subprocess.run([*kubectl, "create", "namespace", "team-a"], check=True, capture_output=True, timeout=120)
        subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(DOMAIN), text=True, check=True,
                       capture_output=True, timeout=120)
        uid = get("computedomain", "train", "-n", "team-a")["metadata"]["uid"]

        def everything() -> list[dict]:
            return get("daemonsets", "-A")["items"] + get("resourceclaimtemplates", "-A")["items"]

        wait("the domain's DaemonSet and both templates", lambda: len(_owned(everything(), uid)) == 3)
        template = get("resourceclaimtemplate", "train-channel", "-n", "team-a")
        assert template["metadata"]["ownerReferences"] == [{
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "name": "train", "uid": uid,
            "controller": True, "blockOwnerDeletion": True}]  # the API server took it as written
        subprocess.run([*kubectl, "patch", "computedomain", "train", "-n", "team-a", "--type=merge", "-p",
                        '{"metadata":{"finalizers":null}}'], check=True, capture_output=True, timeout=120)
        subprocess.run([*kubectl, "delete", "computedomain", "train", "-n", "team-a", "--wait=false"], check=True,
                       capture_output=True, timeout=120)
        wait("nothing of the domain left", lambda: _owned(everything(), uid) == [])
    finally:
        gpudra("cluster", "down", "--dir", directory, check=False)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_the_controller_command_reconciles_a_real_api_server(tmp_path):
    """`gpudra driver compute-domain-controller --kubeconfig` as its own process against the real kube-apiserver
    (RBAC on, no other controller runs), signed in as the service account deploy/kubernetes/compute-domains.yaml
    makes, with only that file's RBAC: it creates the domain's DaemonSet and templates, adds the finalizer and
    writes status; deleting the domain tears all of it down and lets the domain go; SIGTERM stops it with 0."""
    from gpudra.kubecluster.lifecycle import install_compute_domain_api
    from gpudra.kubecluster.rest import ApiError

    from support.realkube import ROOT, RealApiServer

    with RealApiServer() as server:
        install_compute_domain_api(server.cluster, lambda _line: None)
        rest = server.rest
        rest.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": "team-a"}})
        domains = "/apis/resource.nvidia.com/v1beta1/namespaces/team-a/computedomains"
        uid = rest.call("POST", domains, DOMAIN)["metadata"]["uid"]
        kubeconfig = _service_account_kubeconfig(server, ROOT / "deploy" / "kubernetes" / "compute-domains.yaml",
                                                 "gpudra-compute-domain-controller", str(tmp_path / "kubeconfig"))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        controller = subprocess.Popen([sys.executable, "-m", "gpudra", "driver", "compute-domain-controller",
                                       "--kubeconfig", kubeconfig, "--interval", "0.5", "-v"],
                                      env=env, stderr=subprocess.PIPE, text=True)
        try:
            def owned() -> list[str]:
                return _owned([dict(o, kind="DaemonSet") for o in rest.get("/apis/apps/v1/daemonsets")["items"]]
                              + [dict(o, kind="ResourceClaimTemplate") for o in
                                 rest.get("/apis/resource.k8s.io/v1/resourceclaimtemplates")["items"]], uid)

            _wait("the DaemonSet and both templates", lambda: len(owned()) == 3)
            domain = _wait("status written", lambda: (lambda d: d if (d.get("status") or {}).get("status")
                                                      else None)(rest.get(f"{domains}/train")))
            assert domain["status"] == {"status": "NotReady"}  # numNodes 1, no daemon yet
            assert "resource.nvidia.com/computeDomain" in domain["metadata"]["finalizers"]
            rest.call("DELETE", f"{domains}/train")

            def gone() -> bool:
                try:
                    rest.get(f"{domains}/train")
                except ApiError as exc:
                    return exc.status == 404
                return False

            _wait("the domain torn down and gone", lambda: gone() and owned() == [])
        except AssertionError as exc:
            controller.terminate()
            raise AssertionError(f"{exc}; controller log:\n{controller.communicate(timeout=60)[1][-3000:]}") from None
        finally:
            if controller.returncode is None:
                controller.terminate()
            _, errors = controller.communicate(timeout=60)
        assert controller.returncode == 0, errors[-2000:]


@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_the_deployed_rbac_carries_the_clique_path_on_a_real_api_server(tmp_path):
    """deploy/kubernetes/compute-domains.yaml's RBAC (NVIDIA's verbs) on the real kube-apiserver with RBAC on: the
    controller (its service account, the manifest's args: --status-from-daemons) and an IMEX daemon (the daemons'
    service account, the environment the controller's DaemonSet gives it plus its claim's CDI environment) carry
    the ComputeDomainClique path: the daemon writes its clique, the controller turns it into status.nodes and the
    domain Ready once the daemon's pod is Ready."""
    import yaml

    from gpudra.computedomain.controller import DAEMON_SERVICE_ACCOUNT
    from gpudra.computedomain.devices import DRIVER_NAMESPACE
    from gpudra.kubecluster.lifecycle import install_compute_domain_api

    from support.realkube import ROOT, RealApiServer

    manifest = ROOT / "deploy" / "kubernetes" / "compute-domains.yaml"
    with open(manifest, encoding="utf-8") as fh:
        deployment = next(d for d in yaml.safe_load_all(fh) if d and d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["driver", "compute-domain-controller", "--in-cluster"]
    with RealApiServer() as server:
        install_compute_domain_api(server.cluster, lambda _line: None)
        rest = server.rest
        rest.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": "team-a"}})
        domains = "/apis/resource.nvidia.com/v1beta1/namespaces/team-a/computedomains"
        uid = rest.call("POST", domains, DOMAIN)["metadata"]["uid"]
        controller_config = _service_account_kubeconfig(server, manifest, "gpudra-compute-domain-controller",
                                                        str(tmp_path / "controller"))
        daemon_config = _service_account_kubeconfig(server, manifest, DAEMON_SERVICE_ACCOUNT,
                                                    str(tmp_path / "daemon"), namespace=DRIVER_NAMESPACE)
        pod = rest.call("POST", f"/api/v1/namespaces/{DRIVER_NAMESPACE}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "daemon-tray-0"},
            "spec": {"nodeName": "tray-0", "automountServiceAccountToken": False,
                     "serviceAccountName": DAEMON_SERVICE_ACCOUNT,
                     "containers": [{"name": "compute-domain-daemon", "image": "gpudra"}]}})
        base = dict(os.environ, PYTHONPATH=str(ROOT))
        base.pop("FEATURE_GATES", None)
        controller = subprocess.Popen([sys.executable, "-m", "gpudra", *args[:2], "--kubeconfig", controller_config,
                                       *args[3:], "--interval", "0.3", "-v"],
                                      env=base, stderr=subprocess.PIPE, text=True)
        daemon_env = dict(base, COMPUTE_DOMAIN_UUID=uid, COMPUTE_DOMAIN_NAME="train", COMPUTE_DOMAIN_NAMESPACE="team-a",
                          CLIQUE_ID="c0ffee00-0000-4000-8000-000000000001.1", NODE_NAME="tray-0", POD_IP="10.0.0.1",
                          POD_NAME="daemon-tray-0", POD_UID=pod["metadata"]["uid"], POD_NAMESPACE=DRIVER_NAMESPACE,
                          MAX_NODES_PER_IMEX_DOMAIN="18")
        daemon = subprocess.Popen([sys.executable, "-m", "gpudra", "driver", "compute-domain-daemon", "--kubeconfig",
                                   daemon_config, "--interval", "0.3", "-v"],
                                  env=daemon_env, stderr=subprocess.PIPE, text=True)
        try:
            def nodes() -> list[tuple]:
                status = rest.get(f"{domains}/train").get("status") or {}
                return [(n["name"], n["ipAddress"], n["status"]) for n in status.get("nodes") or []] + [
                    status.get("status")]

            _wait("the daemon in status.nodes", lambda: nodes() == [("tray-0", "10.0.0.1", "NotReady"), "NotReady"])
            live = rest.get(f"/api/v1/namespaces/{DRIVER_NAMESPACE}/pods/daemon-tray-0")
            live["status"] = {"phase": "Running", "podIP": "10.0.0.1",
                              "conditions": [{"type": "Ready", "status": "True"}]}
            rest.call("PUT", f"/api/v1/namespaces/{DRIVER_NAMESPACE}/pods/daemon-tray-0/status", live)
            _wait("the domain Ready", lambda: nodes() == [("tray-0", "10.0.0.1", "Ready"), "Ready"])
        except AssertionError as exc:
            logs = []
            for name, proc in (("controller", controller), ("daemon", daemon)):
                proc.terminate()
                logs.append(f"{name} log:\n{proc.communicate(timeout=60)[1][-2000:]}")
            raise AssertionError(f"{exc}; " + "\n".join(logs)) from None
        finally:
            for proc in (daemon, controller):
                if proc.returncode is None:
                    proc.terminate()
                errors = proc.communicate(timeout=60)[1]
                assert proc.returncode == 0, errors[-2000:]
                assert "403" not in errors and "forbidden" not in errors.lower(), errors[-2000:]


@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_the_real_garbage_collector_takes_the_workload_template_and_the_controller_the_rest(tmp_path):
    """The real kube-controller-manager's garbage collector alone (gpudra's controller stopped): a domain deleted
    with its finalizer taken off by hand has its workload template marked for deletion through the owner
    reference, while the driver-namespace DaemonSet, which has none, is left alone (a cross-namespace reference
    would have had it deleted as an orphan at creation). The controller, started again, releases the template and
    deletes the DaemonSet and the daemons' template (cleanup of objects labelled for a gone domain)."""
    from gpudra.kubecluster import controlplane
    from gpudra.kubecluster.lifecycle import install_compute_domain_api

    from support.realkube import ROOT, RealApiServer

    with RealApiServer() as server:
        controlplane.start(server.cluster, server.config, server.binary,
                           components=("etcd", "kube-apiserver", "kube-controller-manager"))
        install_compute_domain_api(server.cluster, lambda _line: None)
        rest = server.rest
        rest.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": "team-a"}})
        domains = "/apis/resource.nvidia.com/v1beta1/namespaces/team-a/computedomains"
        uid = rest.call("POST", domains, DOMAIN)["metadata"]["uid"]
        kubeconfig = server.kubeconfig(str(tmp_path / "kubeconfig"))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        command = [sys.executable, "-m", "gpudra", "driver", "compute-domain-controller", "--kubeconfig", kubeconfig,
                   "--interval", "0.5"]
        template_path = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates/train-channel"
        daemonset_path = f"/apis/apps/v1/namespaces/nvidia-dra-driver-gpu/daemonsets/computedomain-daemon-{uid}"

        def owned() -> list[str]:
            return _owned([dict(o, kind="DaemonSet") for o in rest.get("/apis/apps/v1/daemonsets")["items"]]
                          + [dict(o, kind="ResourceClaimTemplate") for o in
                             rest.get("/apis/resource.k8s.io/v1/resourceclaimtemplates")["items"]], uid)

        controller = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
        try:
            _wait("the DaemonSet and both templates", lambda: len(owned()) == 3)
        finally:
            controller.terminate()
            controller.wait(timeout=60)
        rest.call("PUT", f"{domains}/train", dict(rest.get(f"{domains}/train"), metadata=dict(
            rest.get(f"{domains}/train")["metadata"], finalizers=[])))
        rest.call("DELETE", f"{domains}/train")
        _wait("the garbage collector deleting the workload template",
              lambda: rest.get(template_path)["metadata"].get("deletionTimestamp"), timeout=60)
        assert not rest.get(daemonset_path)["metadata"].get("deletionTimestamp")
        controller = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
        try:
            _wait("nothing of the domain left", lambda: owned() == [])
        finally:
            controller.terminate()
            controller.wait(timeout=60)


RBAC_PATHS = {"ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts", "Namespace": "/api/v1/namespaces",
              "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
              "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
              "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
              "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"}


def _service_account_kubeconfig(server, manifest, account: str, path: str,  # type: ignore[no-untyped-def]
                                namespace: str = "gpudra-system") -> str:
    """The manifest's namespaces, service accounts and RBAC applied (again: a 409 is taken as there already); a
    kubeconfig holding a token of `account` in `namespace` (TokenRequest), for the API server's address and CA."""
    import yaml

    from gpudra.kubecluster.rest import ApiError

    rest = server.rest
    with open(manifest, encoding="utf-8") as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    try:
        rest.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": "gpudra-system"}})
    except ApiError as exc:
        assert exc.status == 409, exc
    for doc in docs:
        if doc["kind"] in RBAC_PATHS:
            try:
                rest.call("POST", RBAC_PATHS[doc["kind"]].format(ns=doc["metadata"].get("namespace")), doc)
            except ApiError as exc:
                assert exc.status == 409, exc  # the driver's namespace (or a second account's call): there already
    token = rest.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
    with open(server.kubeconfig(path), encoding="utf-8") as fh:
        config = yaml.safe_load(fh)
    config["users"] = [{"name": u["name"], "user": {"token": token["status"]["token"]}} for u in config["users"]]
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(config, fh)
    return path


def _wait(what: str, predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)
    return value


def test_the_daemons_cliques_give_status_on_the_local_cluster(cluster_state):
    """The local cluster's store serves ComputeDomainClique (NVIDIA's CRD kind): daemons write their cliques there
    as on an API server (daemonstatus.py's writes), and the controller with the ComputeDomainCliques gate builds
    status.nodes from them, one entry per daemon in its clique; a daemon whose pod is gone is taken off its clique
    (cleanupClique) and the domain is NotReady again. A clique in another namespace does not count."""
    from gpudra.cluster.store import StoreError
    from gpudra.computedomain.controller import StatusSource, daemon_name
    from gpudra.computedomain.daemonstatus import (DaemonIdentity, new_clique, set_daemon_status_in_clique,
                                                   sync_daemon_into_clique)
    from gpudra.computedomain.devices import DRIVER_NAMESPACE

    cluster = ClusterDir(cluster_state)
    config = ClusterConfig(nodes=parse_nodes("l4-node:2"))
    cluster.save_config(config)
    store = cluster.store
    for node in config.nodes:
        store.create(node_object(node, config.kubernetes_version))
    for namespace in ("team-a", DRIVER_NAMESPACE):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    domain = json.loads(json.dumps(DOMAIN))
    domain["spec"]["numNodes"] = 2
    uid = store.create(domain)["metadata"]["uid"]
    source = StatusSource(daemons_write=True, cliques_gate=True)

    def reconcile() -> dict:
        reconcile_compute_domains(store, lambda *a: None, lambda *a: None, source)
        return store.get("ComputeDomain", "team-a", "train")["status"]

    assert reconcile() == {"status": "NotReady"}
    daemonset = store.get("DaemonSet", DRIVER_NAMESPACE, daemon_name(uid))
    clique_id = "c0ffee00-0000-4000-8000-000000000001.1"
    names = [n.name for n in config.nodes]
    for i, node in enumerate(names):  # each daemon pod, as the DaemonSet controller makes it, and its writes
        labelled = store.get("Node", None, node)  # the channel's prepare labelled the node for the domain
        labelled["metadata"].setdefault("labels", {})[DOMAIN_LABEL] = uid
        store.replace(labelled)
        pod = store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"daemon-{node}", "namespace": DRIVER_NAMESPACE, "labels": {DOMAIN_LABEL: uid},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": daemonset["metadata"]["name"],
                                 "uid": daemonset["metadata"]["uid"], "controller": True}]},
            "spec": {"nodeName": node, "containers": [{"name": "compute-domain-daemon", "image": "gpudra"}]},
            "status": {"phase": "Running", "podIP": f"10.0.0.{i + 1}",
                       "conditions": [{"type": "Ready", "status": "True"}]}})
        me = DaemonIdentity(domain_uid=uid, domain_name="train", domain_namespace="team-a", node_name=node,
                            pod_ip=f"10.0.0.{i + 1}", clique_id=clique_id, pod_name=pod["metadata"]["name"],
                            pod_uid=pod["metadata"]["uid"], pod_namespace=DRIVER_NAMESPACE)
        clique = store.get("ComputeDomainClique", DRIVER_NAMESPACE, f"{uid}.{clique_id}")
        if clique is None:
            clique = store.create(new_clique(me))
        clique = store.replace(sync_daemon_into_clique(clique, me))
        store.replace(set_daemon_status_in_clique(clique, me, True))
    # a tenant's clique of the same domain outside the driver's namespace: not read
    tenant = dict(new_clique(me), daemons=[{"nodeName": "elsewhere", "ipAddress": "10.9.9.9", "cliqueID": clique_id,
                                            "index": 5, "status": "Ready"}])
    tenant["metadata"] = dict(tenant["metadata"], namespace="team-a", ownerReferences=[])
    store.create(tenant)
    status = reconcile()
    assert status["status"] == "Ready"
    assert [(n["name"], n["ipAddress"], n["index"], n["status"]) for n in status["nodes"]] == [
        (names[0], "10.0.0.1", 0, "Ready"), (names[1], "10.0.0.2", 1, "Ready")]
    store.delete("Pod", DRIVER_NAMESPACE, f"daemon-{names[1]}", graceful=False)  # its kubelet confirmed it gone
    assert store.get("Pod", DRIVER_NAMESPACE, f"daemon-{names[1]}") is None
    status = reconcile()  # the round that takes the daemon off its clique still reads the clique as it was
    assert status["status"] == "Ready"
    status = reconcile()
    assert status["status"] == "NotReady" and [n["name"] for n in status["nodes"]] == [names[0]]
    clique = store.get("ComputeDomainClique", DRIVER_NAMESPACE, f"{uid}.{clique_id}")
    assert [d["nodeName"] for d in clique["daemons"]] == [names[0]]  # cleanupClique wrote it back
    try:
        store.create({"apiVersion": "resource.k8s.io/v1", "kind": "ComputeDomainClique",
                      "metadata": {"name": "x", "namespace": DRIVER_NAMESPACE}})
    except StoreError as exc:
        assert exc.status == 404  # only NVIDIA's group serves the kind
    else:
        raise AssertionError("a ComputeDomainClique of another API group was stored")
