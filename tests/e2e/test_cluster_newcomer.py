"""A newcomer's stumbles on the local cluster (issue 35, point 5): each test fails on the code before its fix."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.layout import ClusterDir
from gpudra.kubeletplugin.checkpoint import PREPARE_COMPLETED, load_checkpoint

from test_cluster_flow import cdi_specs, kubelet_records

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"


def gpudra(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.stdout


def get(directory: str, *args: str) -> dict:
    return json.loads(gpudra("get", *args, "-o", "json", "--dir", directory))


EXTENDED_POD = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "legacy", "namespace": "default"},
    "spec": {"containers": [
        {"name": "one", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 1}}},
        {"name": "none", "image": "sidecar"},
        {"name": "two", "image": "cuda", "resources": {"requests": {"nvidia.com/gpu": 2},
                                                       "limits": {"nvidia.com/gpu": 2}}},
    ]},
}


def test_an_extended_resource_pod_is_prepared_shows_its_gpus_and_is_unprepared(cluster_state, tmp_path):
    """KEP-5004: the scheduler allocates a claim for `nvidia.com/gpu` limits (status.extendedResourceClaimStatus);
    the kubelet prepares it like the pod's own claims and gives each container the devices of its request
    (pkg/kubelet/cm/dra/manager.go: PrepareResources appends the claim, GetResources maps container + resource to
    the request). Before the fix the pod ran with no GPU and the driver never heard of the claim."""
    cluster = ClusterDir(cluster_state)
    gpudra("cluster", "up", "--dir", cluster_state, "--nodes", "dgx-h100", "--no-control-plane")  # with the classes
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(EXTENDED_POD))
    gpudra("apply", "-f", str(manifest), "--dir", cluster_state)

    pod = get(cluster_state, "pods", "legacy")
    assert pod["status"]["phase"] == "Running"
    extended = pod["status"]["extendedResourceClaimStatus"]
    claim = get(cluster_state, "resourceclaims", extended["resourceClaimName"])
    uid = claim["metadata"]["uid"]
    results = claim["status"]["allocation"]["devices"]["results"]
    by_request = {m["containerName"]: {r["device"] for r in results if r["request"] == m["requestName"]}
                  for m in extended["requestMappings"]}
    assert {name: len(devices) for name, devices in by_request.items()} == {"one": 1, "two": 2}

    # prepared by the node's driver: its checkpoint holds the claim, its CDI spec is written
    node = pod["spec"]["nodeName"]
    checkpoint = load_checkpoint(cluster.driver_paths(node).checkpoint)  # the driver's own reader
    assert checkpoint is not None and checkpoint["claims"][uid]["state"] == PREPARE_COMPLETED
    assert f"k8s.gpu.nvidia.com-claim_{uid}.yaml" in cdi_specs(cluster, node)

    # each container sees the devices of its own request, the sidecar none
    [record] = [r for r in kubelet_records(cluster, node) if r["uid"] == pod["metadata"]["uid"]]
    views = {v["name"]: v for v in record["containers"]}
    for name in ("one", "two"):
        assert views[name]["cdiDevices"] == [f"k8s.gpu.nvidia.com/claim={uid}-{d}" for d in sorted(by_request[name])]
        assert len([d for d in views[name]["deviceNodes"] if re.fullmatch(r"/dev/nvidia\d+", d)]) == len(
            by_request[name])
    assert views["none"]["cdiDevices"] == []

    text = gpudra("describe", "pod", "legacy", "--dir", cluster_state)
    one = text.split("  one:\n", 1)[1].split("  none:\n", 1)[0]
    assert "    Limits:\n      nvidia.com/gpu:  1\n    Requests:\n      nvidia.com/gpu:  1\n" in one
    assert f"k8s.gpu.nvidia.com/claim={uid}-" in one
    devices = ", ".join(f"{r['pool']}/{r['device']}" for r in results)
    assert re.search(rf"^  nvidia.com/gpu\s+{extended['resourceClaimName']}\s+extended resources\s+"
                     rf"{re.escape(devices)}$", text, re.M)

    # deleting the pod unprepares the claim on the node (the garbage collector then deletes the claim)
    gpudra("delete", "pod", "legacy", "--dir", cluster_state)
    assert uid not in (load_checkpoint(cluster.driver_paths(node).checkpoint) or {"claims": {}})["claims"]
    assert f"k8s.gpu.nvidia.com-claim_{uid}.yaml" not in cdi_specs(cluster, node)
    assert get(cluster_state, "resourceclaims")["items"] == []


def _deployment(replicas: int) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}


def test_a_deployment_has_the_replica_set_its_pods_name_and_both_count_their_replicas(cluster_state, tmp_path):
    """kube-controller-manager's deployment and replicaset controllers (pkg/controller/deployment/sync.go
    getNewReplicaSet and calculateStatus, pkg/controller/replicaset/replica_set_utils.go calculateStatus). Before
    the fix `get deploy` read 0/4 with four pods running, and the ReplicaSet the pods named did not exist."""
    gpudra("cluster", "up", "--dir", cluster_state, "--nodes", "l4-node", "--no-control-plane")
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(yaml.safe_dump(_deployment(4)))
    gpudra("apply", "-f", str(manifest), "--dir", cluster_state)

    deployment = get(cluster_state, "deployments", "web")
    [rs] = get(cluster_state, "replicasets")["items"]
    pods = get(cluster_state, "pods")["items"]
    hash_value = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"web-{hash_value}"
    assert rs["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": deployment["metadata"]["uid"],
         "controller": True, "blockOwnerDeletion": True}]
    assert rs["spec"]["replicas"] == 4
    assert rs["spec"]["selector"] == {"matchLabels": {"app": "web", "pod-template-hash": hash_value}}
    assert rs["metadata"]["annotations"] == {"deployment.kubernetes.io/desired-replicas": "4",
                                             "deployment.kubernetes.io/max-replicas": "5",  # 25% surge, rounded up
                                             "deployment.kubernetes.io/revision": "1"}
    # every pod is controlled by the ReplicaSet the store holds, by uid
    assert len(pods) == 4 and {p["status"]["phase"] for p in pods} == {"Running"}
    assert {p["metadata"]["ownerReferences"][0]["uid"] for p in pods} == {rs["metadata"]["uid"]}
    assert rs["status"] == {"replicas": 4, "fullyLabeledReplicas": 4, "readyReplicas": 4, "availableReplicas": 4,
                            "observedGeneration": 1}
    assert deployment["status"] == {"observedGeneration": 1, "replicas": 4, "updatedReplicas": 4,
                                    "readyReplicas": 4, "availableReplicas": 4}
    assert gpudra("get", "deploy", "--dir", cluster_state).splitlines()[1].split()[:4] == ["web", "4/4", "4", "4"]
    assert gpudra("get", "rs", "--dir", cluster_state).splitlines()[1].split()[:4] == [f"web-{hash_value}", "4", "4",
                                                                                       "4"]

    # scaled down: the ReplicaSet follows; the counts follow the pods
    manifest.write_text(yaml.safe_dump(_deployment(2)))
    gpudra("apply", "-f", str(manifest), "--dir", cluster_state)
    [rs] = get(cluster_state, "replicasets")["items"]
    assert rs["spec"]["replicas"] == 2 and rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] == "2"
    deployment = get(cluster_state, "deployments", "web")
    assert deployment["status"]["replicas"] == len(get(cluster_state, "pods")["items"])

    # deleted: its ReplicaSet and pods are collected; created again, it gets a ReplicaSet of its own
    gpudra("delete", "deploy", "web", "--dir", cluster_state)
    assert get(cluster_state, "replicasets")["items"] == [] and get(cluster_state, "pods")["items"] == []
    manifest.write_text(yaml.safe_dump(_deployment(1)))
    gpudra("apply", "-f", str(manifest), "--dir", cluster_state)
    [rs] = get(cluster_state, "replicasets")["items"]
    assert rs["metadata"]["ownerReferences"][0]["uid"] == get(cluster_state, "deployments", "web")["metadata"]["uid"]
    assert get(cluster_state, "deployments", "web")["status"]["readyReplicas"] == 1


def test_the_default_cluster_directory_works_under_a_long_home(monkeypatch, tmp_path):
    """`cluster up --racks 2x2` under the default directory failed for any $HOME of 16+ characters: the nodes'
    sockets (`…/.local/state/gpudra/cluster/nodes/rack0-tray0/registry/compute-domain.nvidia.com-reg.sock`) passed
    gRPC's 105 bytes. They are bound and dialled through /tmp/gpudra-<uid>/<digest>, a link to the state
    directory; macOS' shorter limit (103) is met too."""
    from gpudra.cluster.nodes import down
    from gpudra.kubeletplugin.paths import SOCKET_PATH_MAX

    from gpudra.cluster.layout import socket_link as link_of

    stale = link_of(str(tmp_path / "gone"))  # a cluster removed without `cluster down`: its link is pruned
    os.makedirs(os.path.dirname(stale), mode=0o700, exist_ok=True)
    if not os.path.lexists(stale):
        os.symlink(str(tmp_path / "gone"), stale)
    home = tmp_path / ("a-home-directory-long-enough-" * 3).rstrip("-")
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    state = str(home / ".local" / "state" / "gpudra" / "cluster")
    try:
        assert gpudra("cluster", "up", "--racks", "2x2", "--no-control-plane").strip() == state
        from gpudra.cluster.layout import socket_link
        cluster = ClusterDir(state)
        link = socket_link(state)
        assert os.readlink(link) == state and stat.S_IMODE(os.stat(os.path.dirname(link)).st_mode) == 0o700
        for node in ("rack0-tray0", "rack1-tray1"):
            for driver in ("gpu.nvidia.com", "compute-domain.nvidia.com"):
                paths = cluster.driver_paths(node, driver)
                for socket in (paths.registration_socket, paths.dra_socket):
                    assert socket.startswith(link + "/") and len(os.fsencode(socket)) <= min(SOCKET_PATH_MAX, 103)
                    # the socket file itself lives in the state directory, beside the node's other files
                    assert stat.S_ISSOCK(os.stat(os.path.join(state, os.path.relpath(socket, link))).st_mode)
        # a pod's claim is prepared over those sockets
        gpudra("apply", "-f", str(EXAMPLES / "computedomain"))
        pods = get(state, "pods", "-A")["items"]
        assert pods and {p["status"]["phase"] for p in pods} == {"Running"}
    finally:
        down(ClusterDir(state))
    assert not os.path.lexists(socket_link(state))  # `cluster down` removes the link too
    assert not os.path.lexists(stale)


def test_every_name_the_api_server_accepts_is_stored_read_listed_and_deleted(tmp_path):
    """A valid 253-character name (a DNS subdomain: four 63-character labels) failed with `File name too long`:
    `NAME.json` passes NAME_MAX (255 bytes). Names past 250 are kept under their hash; a file whose object names
    another object than its file stands for is still refused."""
    from gpudra.api.schema import names
    from gpudra.cluster.store import Store, StoreError, object_file_name

    longest = ".".join(["a" * 63] * 3 + ["b" * 61])
    assert len(longest) == 253 and not names.field_problems("n", longest, names.dns_subdomain, 253)
    store = Store(str(tmp_path))
    for name in (longest, "c" * 250, "c" * 251):
        created = store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                                "data": {"k": "v"}})
        assert store.get("ConfigMap", "default", name)["metadata"]["uid"] == created["metadata"]["uid"]
        store.replace({**created, "data": {"k": "w"}})
        assert store.get("ConfigMap", "default", name)["data"] == {"k": "w"}
    assert sorted(o["metadata"]["name"] for o in store.list("ConfigMap")) == sorted([longest, "c" * 250, "c" * 251])
    assert object_file_name("c" * 250) == "c" * 250 + ".json"  # names that fit keep their plain file
    # a hashed file that holds another object is skipped, as any misplaced file is
    folder = tmp_path / "store" / "configmaps" / "default"
    (folder / object_file_name("d" * 252)).write_text((folder / object_file_name(longest)).read_text())
    assert store.get("ConfigMap", "default", "d" * 252) is None
    assert len(store.list("ConfigMap")) == 3
    for name in (longest, "c" * 250, "c" * 251):
        assert store.delete("ConfigMap", "default", name) == "deleted"
    with pytest.raises(StoreError, match="must be no more than 253 characters"):  # as the API server says
        store.get("ConfigMap", "default", "x" * 254)


def test_explain_reads_the_gates_the_local_cluster_runs_with(cluster_state, tmp_path):
    """`explain` on a 1.34 cluster brought up with +DRAPartitionableDevices warned, once per device, that the
    gate is off for the counter sets its own driver published: its gate warnings now follow the cluster's gates
    (and `apply`'s the same)."""
    gpudra("cluster", "up", "--dir", cluster_state, "--nodes", "a30-mig+dynamic-mig", "--kubernetes-version", "1.34",
           "--features", "default,+DRAPartitionableDevices", "--no-control-plane")
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump({**EXTENDED_POD, "spec": {"containers": [
        {"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 9}}}]}}))
    result = CliRunner().invoke(cli, ["apply", "-f", str(manifest), "--dir", cluster_state])
    assert result.exit_code == 0 and "feature gate" not in result.output, result.output
    explained = CliRunner().invoke(cli, ["explain", "pod/legacy", "--dir", cluster_state])
    assert explained.exit_code == 1, explained.output  # nine GPUs fit nowhere
    assert "DRAPartitionableDevices" not in explained.output


MIXED = """apiVersion: v1
kind: ConfigMap
metadata: {name: good}
data: {a: b}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: bad}
spec:
  devices:
    requests:
    - name: r
      exactly: {deviceClassName: gpu.nvidia.com, count: -1}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: Bad_Name}
data: {a: b}
"""


def test_apply_applies_the_valid_objects_and_reports_the_others(cluster_state, tmp_path):
    """kubectl apply goes on past an object the API server refuses (the builder's ContinueOnError) and exits 1
    naming it; gpudra applied nothing when one object of a directory was invalid."""
    gpudra("cluster", "up", "--dir", cluster_state, "--nodes", "l4-node", "--no-control-plane")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.yaml").write_text(MIXED)
    (tmp_path / "dir" / "b.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: also-good}\n")
    result = CliRunner().invoke(cli, ["apply", "-f", str(tmp_path / "dir"), "--dir", cluster_state])
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines() == ["configmap/good created", "configmap/also-good created"]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and "(ResourceClaim/bad): spec.devices.requests[0].exactly.count" in errors[0]
    assert "(ConfigMap/Bad_Name)" in errors[1] and "2 objects not applied" in result.stderr
    assert sorted(o["metadata"]["name"] for o in get(cluster_state, "configmaps")["items"]) == ["also-good", "good"]
    assert get(cluster_state, "resourceclaims")["items"] == []


def test_an_object_in_a_namespace_that_does_not_exist_is_refused_as_the_api_server_does(cluster_state, tmp_path):
    """The NamespaceLifecycle admission plugin refuses a create in a namespace that does not exist
    (`namespaces "x" not found`); the store made the namespace silently. default and the other system namespaces
    exist; the drivers' namespace is made by `cluster up` (as the chart's install creates it)."""
    gpudra("cluster", "up", "--dir", cluster_state, "--nodes", "l4-node", "--no-control-plane")
    config_map = "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, namespace: {}}}\n"
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(config_map.format("team-x"))
    refused = CliRunner().invoke(cli, ["apply", "-f", str(manifest), "--dir", cluster_state])
    assert refused.exit_code == 1 and 'namespaces "team-x" not found' in refused.stderr, refused.output
    assert not os.path.exists(os.path.join(cluster_state, "store", "configmaps", "team-x"))
    # the namespace first, in the same apply: as kubectl, in order
    manifest.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: team-x}\n---\n" + config_map.format("team-x"))
    assert gpudra("apply", "-f", str(manifest), "--dir", cluster_state).splitlines() == [
        "namespace/team-x created", "configmap/c created"]
    for namespace in ("default", "kube-system", "nvidia-dra-driver-gpu"):
        manifest.write_text(config_map.format(namespace))
        gpudra("apply", "-f", str(manifest), "--dir", cluster_state)
