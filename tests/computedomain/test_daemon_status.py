"""The IMEX daemons' own writes (#34): each daemon lists its node in its own ComputeDomain's status.nodes (the
ComputeDomainCliques gate off) or in its clique's ComputeDomainClique (on), with a stable index per clique, and
never writes another domain's; the controller's status.nodes from them; the DNS-style names and hosts file.

NVIDIA has no unit tests for these (cmd/compute-domain-daemon has no _test.go at commit 95932046): the outside
checks are NVIDIA's CRDs, which the real kube-apiserver applies to every object written here (status.nodes and
daemons[] are list maps keyed by node name; the status enum and required fields), and the facts quoted from
cmd/compute-domain-daemon/{cdstatus,cdclique,dnsnames}.go in gpudra/computedomain/daemonstatus.py and dnsnames.py.
"""

from __future__ import annotations

import copy
import logging
import uuid

import pytest

from gpudra.computedomain.daemonstatus import (CLIQUE_LABEL, DaemonIdentity, DaemonInfo, ForeignDomain, NoFreeIndex,
                                               cleanup_clique, controller_status_nodes, new_clique,
                                               next_available_index, remove_node_from_status, set_node_status,
                                               sync_daemon_into_clique, sync_node_into_status)
from gpudra.computedomain.dnsnames import DNSNameError, dns_mappings, dns_name, hosts_file, static_nodes_config

CLIQUE = "4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f.1"
UID = "0b0e2d4c-1111-4a2b-9c3d-5e6f7a8b9c0d"


def domain(uid: str = UID, name: str = "train", namespace: str = "team-a", nodes: list | None = None) -> dict:
    obj = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
           "metadata": {"name": name, "namespace": namespace, "uid": uid},
           "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "train-channel"}}},
           "status": {"status": "NotReady"}}
    if nodes is not None:
        obj["status"]["nodes"] = nodes
    return obj


def daemon(node: str, ip: str, clique: str = CLIQUE, uid: str = UID, pod_uid: str = "") -> DaemonIdentity:
    return DaemonIdentity(domain_uid=uid, domain_name="train", domain_namespace="team-a", node_name=node,
                          pod_ip=ip, clique_id=clique, pod_name=f"daemon-{node}", pod_uid=pod_uid)


def join(obj: dict, me: DaemonIdentity) -> dict:
    updated = sync_node_into_status(obj, me)
    assert updated is not None
    return updated


# -- indexes --------------------------------------------------------------------------------------------------------
def test_indexes_fill_gaps_and_are_bounded_by_max_nodes_per_imex_domain():
    assert next_available_index([], 18) == 0
    assert next_available_index([0, 2, 3], 18) == 1  # a gap is filled: the others keep their names
    assert next_available_index(range(17), 18) == 17
    with pytest.raises(NoFreeIndex, match=r"^no available indices within maxNodesPerIMEXDomain \(18\)$"):
        next_available_index(range(18), 18)
    assert next_available_index(range(18), 18, bounded=False) == 18  # cdstatus.go: no bound without a clique


def test_a_daemon_joins_its_own_domain_once_with_a_stable_index():
    obj = join(domain(), daemon("tray-0", "10.0.0.1"))
    obj = join(obj, daemon("tray-1", "10.0.0.2"))
    obj = join(obj, daemon("other-rack", "10.9.0.1", clique=CLIQUE[:-1] + "2"))  # its own clique: index 0 again
    assert obj["status"]["nodes"] == [
        {"name": "tray-0", "ipAddress": "10.0.0.1", "cliqueID": CLIQUE, "index": 0, "status": "NotReady"},
        {"name": "tray-1", "ipAddress": "10.0.0.2", "cliqueID": CLIQUE, "index": 1, "status": "NotReady"},
        {"name": "other-rack", "ipAddress": "10.9.0.1", "cliqueID": CLIQUE[:-1] + "2", "index": 0,
         "status": "NotReady"}]
    assert sync_node_into_status(obj, daemon("tray-0", "10.0.0.1")) is None  # nothing to write
    restarted = join(obj, daemon("tray-0", "10.0.0.7"))  # the daemon's pod recreated: a new IP, the same index
    assert restarted["status"]["nodes"][0] == dict(obj["status"]["nodes"][0], ipAddress="10.0.0.7")
    ready = set_node_status(restarted, daemon("tray-0", "10.0.0.7"), True)
    assert ready is not None and ready["status"]["nodes"][0]["status"] == "Ready"
    assert set_node_status(ready, daemon("tray-0", "10.0.0.7"), True) is None
    left = remove_node_from_status(ready, daemon("tray-0", "10.0.0.7"))
    assert left is not None and [n["name"] for n in left["status"]["nodes"]] == ["tray-1", "other-rack"]
    back = join(left, daemon("tray-2", "10.0.0.3"))  # index 0 is free again: the gap is filled, tray-1 keeps 1
    assert [(n["name"], n["index"]) for n in back["status"]["nodes"]] == [
        ("tray-1", 1), ("other-rack", 0), ("tray-2", 0)]


@pytest.mark.parametrize("other", [
    domain(uid=str(uuid.UUID(int=1))),  # the same name recreated, or a tenant's copy: another UID
    domain(namespace="team-b"), domain(name="someone-else"),
    dict(domain(), kind="ResourceClaim"),
])
def test_a_daemon_never_writes_another_domain(other):
    with pytest.raises(ForeignDomain, match="does not write"):
        sync_node_into_status(other, daemon("tray-0", "10.0.0.1"))
    with pytest.raises(ForeignDomain):
        set_node_status(other, daemon("tray-0", "10.0.0.1"), True)
    with pytest.raises(ForeignDomain):
        remove_node_from_status(other, daemon("tray-0", "10.0.0.1"))


def test_a_daemon_writes_only_its_own_clique():
    me = daemon("tray-0", "10.0.0.1", pod_uid="pod-uid-0")
    clique = sync_daemon_into_clique(new_clique(me), me)
    assert clique is not None
    assert clique["metadata"]["name"] == f"{UID}.{CLIQUE}" and clique["metadata"]["namespace"] == "nvidia-dra-driver-gpu"
    assert clique["metadata"]["labels"] == {"resource.nvidia.com/computeDomain": UID, CLIQUE_LABEL: CLIQUE}
    assert clique["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "daemon-tray-0", "uid": "pod-uid-0"}]
    assert clique["daemons"] == [{"nodeName": "tray-0", "ipAddress": "10.0.0.1", "cliqueID": CLIQUE, "index": 0,
                                  "status": "NotReady"}]
    foreign = copy.deepcopy(clique)
    foreign["metadata"]["labels"]["resource.nvidia.com/computeDomain"] = str(uuid.UUID(int=2))
    with pytest.raises(ForeignDomain):
        sync_daemon_into_clique(foreign, daemon("tray-1", "10.0.0.2"))


def test_the_controller_builds_status_nodes_from_cliques_or_fresh_entries_and_non_fabric_pods():
    def pod(node: str, ip: str, clique: str | None, ready: bool = True) -> dict:
        labels = {} if clique is None else {CLIQUE_LABEL: clique}
        return {"metadata": {"labels": labels}, "spec": {"nodeName": node},
                "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": str(ready)}]}}

    a, b = daemon("tray-0", "10.0.0.1"), daemon("tray-1", "10.0.0.2")
    clique = sync_daemon_into_clique(new_clique(a), a)
    clique = sync_daemon_into_clique(clique, b)
    pods = [pod("tray-0", "10.0.0.1", CLIQUE), pod("cpu-0", "10.1.0.1", "", ready=False)]
    with_cliques = controller_status_nodes(domain(), [clique], pods, cliques_gate=True)
    assert with_cliques == [DaemonInfo("tray-0", "10.0.0.1", CLIQUE, 0), DaemonInfo("tray-1", "10.0.0.2", CLIQUE, 1),
                            DaemonInfo("cpu-0", "10.1.0.1", "", -1, "NotReady")]
    written = join(join(domain(), a), b)  # gate off: what the daemons wrote, kept while their pod's IP lives
    assert controller_status_nodes(written, [], pods, cliques_gate=False) == [
        DaemonInfo("tray-0", "10.0.0.1", CLIQUE, 0), DaemonInfo("cpu-0", "10.1.0.1", "", -1, "NotReady")]
    cleaned = cleanup_clique(clique, pods)  # tray-1 runs no daemon pod now
    assert cleaned is not None and [d["nodeName"] for d in cleaned["daemons"]] == ["tray-0"]
    assert cleanup_clique(cleaned, pods) is None


# -- DNS-style names ------------------------------------------------------------------------------------------------
def test_dns_names_nodes_config_and_hosts_file():
    assert dns_name(DaemonInfo("n", "10.0.0.1", CLIQUE, 7)) == "compute-domain-daemon-0007"  # dnsNameFormat %04d
    with pytest.raises(DNSNameError, match="^daemon n has invalid index -1$"):
        dns_name(DaemonInfo("n", "10.0.0.1", "", -1))
    with pytest.raises(DNSNameError, match="^daemon n has invalid index 18, must be less than 18$"):
        dns_name(DaemonInfo("n", "10.0.0.1", CLIQUE, 18))
    assert static_nodes_config(3) == "compute-domain-daemon-0000\ncompute-domain-daemon-0001\n" \
                                     "compute-domain-daemon-0002\n"
    mappings = dns_mappings([DaemonInfo("a", "10.0.0.2", CLIQUE, 1), DaemonInfo("b", "10.0.0.1", CLIQUE, 0),
                             DaemonInfo("c", "10.9.0.1", "other", 0)], CLIQUE)
    assert mappings == {"10.0.0.1": "compute-domain-daemon-0000", "10.0.0.2": "compute-domain-daemon-0001"}
    etc_hosts = "127.0.0.1\tlocalhost\n10.244.0.5\tdaemon-pod\n"
    once = hosts_file(etc_hosts, mappings)
    assert once == etc_hosts + "# Compute Domain Daemon mappings\n10.0.0.1\tcompute-domain-daemon-0000\n" \
                               "10.0.0.2\tcompute-domain-daemon-0001\n"
    assert hosts_file(once, mappings) == once  # rewritten, not grown
    assert hosts_file(once, {"10.0.0.3": "compute-domain-daemon-0000"}) == \
        etc_hosts + "# Compute Domain Daemon mappings\n10.0.0.3\tcompute-domain-daemon-0000\n"


# -- on the real kube-apiserver with NVIDIA's CRDs -----------------------------------------------------------------
@pytest.mark.timeout(3600)
def test_daemons_write_their_own_domain_on_the_real_api_server(caplog):
    """Two domains in two namespaces; the daemons of `train` write its status.nodes (gate off) and its
    ComputeDomainClique (gate on) through the API server, which validates them against NVIDIA's CRDs; a daemon of
    `train` handed the other domain is refused and logs it, and that domain's status is untouched."""
    from gpudra.kubecluster.cddaemon import DaemonWriter, Outcome
    from gpudra.kubecluster.lifecycle import install_compute_domain_api

    from support.realkube import RealApiServer

    with RealApiServer() as server:
        install_compute_domain_api(server.cluster, lambda _line: None)
        rest = server.rest
        uids = {}
        for namespace in ("team-a", "team-b"):
            rest.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": namespace}})
            created = rest.call("POST", f"/apis/resource.nvidia.com/v1beta1/namespaces/{namespace}/computedomains",
                                {k: v for k, v in domain(namespace=namespace).items() if k != "status"}
                                | {"metadata": {"name": "train", "namespace": namespace}})
            uids[namespace] = created["metadata"]["uid"]
        path = "/apis/resource.nvidia.com/v1beta1/namespaces/team-a/computedomains/train"

        def me(node: str, ip: str) -> DaemonIdentity:
            return daemon(node, ip, uid=uids["team-a"])

        writers = [DaemonWriter(rest, me("tray-0", "10.0.0.1"), cliques=False),
                   DaemonWriter(rest, me("tray-1", "10.0.0.2"), cliques=False)]
        assert [w.join() for w in writers] == [Outcome.WRITTEN, Outcome.WRITTEN]
        assert writers[0].join() is Outcome.UNCHANGED
        assert writers[1].ready(True) is Outcome.WRITTEN
        restarted = DaemonWriter(rest, me("tray-0", "10.0.0.9"), cliques=False)  # a new pod, a new IP
        assert restarted.join() is Outcome.WRITTEN
        nodes = rest.get(path)["status"]["nodes"]
        assert nodes == [
            {"name": "tray-0", "ipAddress": "10.0.0.9", "cliqueID": CLIQUE, "index": 0, "status": "NotReady"},
            {"name": "tray-1", "ipAddress": "10.0.0.2", "cliqueID": CLIQUE, "index": 1, "status": "Ready"}]

        other = "/apis/resource.nvidia.com/v1beta1/namespaces/team-b/computedomains/train"
        before = rest.get(other)
        with caplog.at_level(logging.WARNING, logger="gpudra.kubecluster.cddaemon"):
            assert writers[1].write_foreign("team-b", "train") is Outcome.REFUSED
        assert rest.get(other) == before
        assert any("refused" in r.getMessage() and uids["team-b"] in r.getMessage() for r in caplog.records)

        # the gate on: ComputeDomainClique objects in the driver's namespace, accepted by NVIDIA's CRD
        clique_writers = [DaemonWriter(rest, me("tray-0", "10.0.0.9")), DaemonWriter(rest, me("tray-1", "10.0.0.2"))]
        assert [w.join() for w in clique_writers] == [Outcome.WRITTEN, Outcome.WRITTEN]
        assert clique_writers[0].ready(True) is Outcome.WRITTEN
        name = f"{uids['team-a']}.{CLIQUE}"
        clique = rest.get(f"/apis/resource.nvidia.com/v1beta1/namespaces/nvidia-dra-driver-gpu/"
                          f"computedomaincliques/{name}")
        assert [(d["nodeName"], d["index"], d["status"]) for d in clique["daemons"]] == [
            ("tray-0", 0, "Ready"), ("tray-1", 1, "NotReady")]
        assert clique_writers[0].leave() is Outcome.WRITTEN
        assert DaemonWriter(rest, me("tray-2", "10.0.0.3")).join() is Outcome.WRITTEN  # takes the free index 0
        clique = rest.get(f"/apis/resource.nvidia.com/v1beta1/namespaces/nvidia-dra-driver-gpu/"
                          f"computedomaincliques/{name}")
        assert [(d["nodeName"], d["index"]) for d in clique["daemons"]] == [("tray-1", 1), ("tray-2", 0)]


@pytest.mark.timeout(3600)
def test_the_daemon_command_follows_its_pod_and_leaves_at_sigterm(tmp_path):
    """`gpudra driver compute-domain-daemon` as its own process with NVIDIA's environment, against the real
    kube-apiserver: it lists itself in its clique (NVIDIA's default gates), turns Ready when its pod is, keeps the
    hosts file's compute-domain-daemon-NNNN lines for its clique's daemons, and at SIGTERM takes itself off and
    exits 0."""
    import os
    import subprocess
    import sys
    import time

    from gpudra.kubecluster.cddaemon import DaemonWriter, Outcome
    from gpudra.kubecluster.lifecycle import install_compute_domain_api

    from support.realkube import ROOT, RealApiServer

    with RealApiServer() as server:
        install_compute_domain_api(server.cluster, lambda _line: None)
        rest = server.rest
        rest.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": "team-a"}})
        uid = rest.call("POST", "/apis/resource.nvidia.com/v1beta1/namespaces/team-a/computedomains",
                        {k: v for k, v in domain().items() if k != "status"} | {
                            "metadata": {"name": "train", "namespace": "team-a"}})["metadata"]["uid"]
        ns = "nvidia-dra-driver-gpu"
        rest.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
        pod = rest.call("POST", f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "daemon-tray-0"},
            "spec": {"nodeName": "tray-0", "automountServiceAccountToken": False,
                     "containers": [{"name": "compute-domain-daemon", "image": "compute-domain-daemon"}]}})
        assert DaemonWriter(rest, daemon("tray-1", "10.0.0.2", uid=uid)).join() is Outcome.WRITTEN  # index 0
        hosts = tmp_path / "hosts"
        hosts.write_text("127.0.0.1\tlocalhost\n")
        env = dict(os.environ, PYTHONPATH=str(ROOT), COMPUTE_DOMAIN_UUID=uid, COMPUTE_DOMAIN_NAME="train",
                   COMPUTE_DOMAIN_NAMESPACE="team-a", CLIQUE_ID=CLIQUE, NODE_NAME="tray-0", POD_IP="10.0.0.1",
                   POD_NAME="daemon-tray-0", POD_UID=pod["metadata"]["uid"], POD_NAMESPACE=ns)
        proc = subprocess.Popen([sys.executable, "-m", "gpudra", "driver", "compute-domain-daemon", "--kubeconfig",
                                 server.kubeconfig(str(tmp_path / "kubeconfig")), "--hosts-file", str(hosts),
                                 "--interval", "0.3", "-v"], env=env, stderr=subprocess.PIPE, text=True)
        clique_path = f"/apis/resource.nvidia.com/v1beta1/namespaces/{ns}/computedomaincliques/{uid}.{CLIQUE}"

        def wait(what: str, predicate, timeout: float = 60.0):
            deadline = time.monotonic() + timeout
            while not (value := predicate()):
                assert proc.poll() is None, proc.communicate()[1][-2000:]
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                time.sleep(0.2)
            return value

        try:
            def daemons() -> list[tuple[str, int, str]]:
                return [(d["nodeName"], d["index"], d["status"]) for d in rest.get(clique_path).get("daemons") or []]

            wait("the daemon listed", lambda: ("tray-0", 1, "NotReady") in daemons())
            wait("the hosts file", lambda: hosts.read_text() == (
                "127.0.0.1\tlocalhost\n# Compute Domain Daemon mappings\n10.0.0.2\tcompute-domain-daemon-0000\n"
                "10.0.0.1\tcompute-domain-daemon-0001\n"))
            live = rest.get(f"/api/v1/namespaces/{ns}/pods/daemon-tray-0")
            live["status"] = {"phase": "Running", "podIP": "10.0.0.1",
                              "conditions": [{"type": "Ready", "status": "True"}]}
            rest.call("PUT", f"/api/v1/namespaces/{ns}/pods/daemon-tray-0/status", live)
            wait("the daemon Ready", lambda: ("tray-0", 1, "Ready") in daemons())
            clique = rest.get(clique_path)
            assert {"apiVersion": "v1", "kind": "Pod", "name": "daemon-tray-0", "uid": pod["metadata"]["uid"]} \
                in clique["metadata"]["ownerReferences"]
            proc.terminate()
            assert proc.wait(timeout=60) == 0
            assert daemons() == [("tray-1", 0, "NotReady")]
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=60)


@pytest.mark.timeout(3600)
def test_the_controller_takes_status_from_the_daemons_cliques_on_the_real_api_server(tmp_path):
    """`gpudra driver compute-domain-controller --status-from-daemons` (NVIDIA's default gates) against the real
    kube-apiserver: status.nodes is what the domain's daemon wrote into its ComputeDomainClique (a clique labelled
    for the domain outside the driver's namespace, as a tenant could write one, does not count); the domain turns
    Ready with numNodes daemons Ready; when the daemon's pod goes, cleanupClique takes it off the clique and the
    domain is NotReady again."""
    import os
    import subprocess
    import sys
    import time

    from gpudra.kubecluster.cddaemon import DaemonWriter, Outcome
    from gpudra.kubecluster.lifecycle import install_compute_domain_api

    from support.realkube import ROOT, RealApiServer

    with RealApiServer() as server:
        install_compute_domain_api(server.cluster, lambda _line: None)
        rest = server.rest
        rest.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": "team-a"}})
        cd = {k: v for k, v in domain().items() if k != "status"} | {"metadata": {"name": "train",
                                                                                 "namespace": "team-a"}}
        cd["spec"] = dict(cd["spec"], numNodes=1)
        uid = rest.call("POST", "/apis/resource.nvidia.com/v1beta1/namespaces/team-a/computedomains",
                        cd)["metadata"]["uid"]
        path = "/apis/resource.nvidia.com/v1beta1/namespaces/team-a/computedomains/train"
        ns = "nvidia-dra-driver-gpu"
        proc = subprocess.Popen([sys.executable, "-m", "gpudra", "driver", "compute-domain-controller",
                                 "--kubeconfig", server.kubeconfig(str(tmp_path / "kubeconfig")),
                                 "--status-from-daemons", "--interval", "0.3", "-v"],
                                env=dict(os.environ, PYTHONPATH=str(ROOT)), stderr=subprocess.PIPE, text=True)

        def wait(what: str, predicate, timeout: float = 60.0):
            deadline = time.monotonic() + timeout
            while not (value := predicate()):
                assert proc.poll() is None, proc.communicate()[1][-2000:]
                assert time.monotonic() < deadline, f"timed out waiting for {what}: {rest.get(path).get('status')}"
                time.sleep(0.2)
            return value

        try:
            daemonset = wait("the DaemonSet", lambda: rest.get_or_none(
                f"/apis/apps/v1/namespaces/{ns}/daemonsets/computedomain-daemon-{uid}"))
            rest.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                      {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
            pod = rest.call("POST", f"/api/v1/namespaces/{ns}/pods", {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "daemon-tray-0", "labels": {"resource.nvidia.com/computeDomain": uid},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                                  "name": daemonset["metadata"]["name"],
                                                  "uid": daemonset["metadata"]["uid"], "controller": True}]},
                "spec": {"nodeName": "tray-0", "automountServiceAccountToken": False,
                         "containers": [{"name": "compute-domain-daemon", "image": "compute-domain-daemon"}]}})
            pod["status"] = {"phase": "Running", "podIP": "10.0.0.1",
                             "conditions": [{"type": "Ready", "status": "True"}]}
            rest.call("PUT", f"/api/v1/namespaces/{ns}/pods/daemon-tray-0/status", pod)
            tenant = DaemonIdentity(domain_uid=uid, domain_name="train", domain_namespace="team-a",
                                    node_name="evil", pod_ip="10.6.6.6", clique_id=CLIQUE, pod_namespace="team-a")
            assert DaemonWriter(rest, tenant).join() is Outcome.WRITTEN  # labelled for the domain, wrong namespace
            writer = DaemonWriter(rest, daemon("tray-0", "10.0.0.1", uid=uid, pod_uid=pod["metadata"]["uid"]))
            assert writer.join() is Outcome.WRITTEN
            assert writer.ready(True) is Outcome.WRITTEN
            wait("the domain Ready from the clique", lambda: rest.get(path).get("status") == {
                "status": "Ready", "nodes": [{"name": "tray-0", "ipAddress": "10.0.0.1", "cliqueID": CLIQUE,
                                              "index": 0, "status": "Ready"}]})
            rest.call("DELETE", f"/api/v1/namespaces/{ns}/pods/daemon-tray-0", {"gracePeriodSeconds": 0})
            wait("the stale daemon taken off", lambda: rest.get(path).get("status") == {"status": "NotReady"}
                 and not rest.get(f"/apis/resource.nvidia.com/v1beta1/namespaces/{ns}/computedomaincliques/"
                                  f"{uid}.{CLIQUE}").get("daemons"))
        finally:
            proc.terminate()
            _, errors = proc.communicate(timeout=60)
        assert proc.returncode == 0, errors[-2000:]
