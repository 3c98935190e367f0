"""Attacks on the local cluster (issue 20): manifests and store files that try to reach outside the state
directory, borrow another object's identity, stop the control loop, or drive the terminal. Each must fail with a
message (exit 1 or 2, no traceback) and leave everything outside the cluster's directory as it was.

Most tests need no driver process: a cluster directory with a config and a Node object is enough for the store,
`apply`/`get`/`delete` and the control loop (a pod without claims starts without any driver call). The umask test
brings a real one-node cluster up.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra.cli import cli
from gpudra.cluster.controller import reconcile
from gpudra.cluster.kubelet import record_path
from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_nodes
from gpudra.cluster.nodes import node_object
from gpudra.cluster.store import StoreError
from gpudra.kubeletplugin.claimpaths import ClaimPathError

POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {namespace}
spec:
  containers:
  - name: main
    image: {image}
"""


@pytest.fixture
def env(tmp_path):
    """(cluster, base): a cluster directory `base/c` with one configured node (and its Node object, no driver),
    beside a victim directory `base/victim` holding files an attack would overwrite or delete."""
    base = tmp_path / "world"
    victim = base / "victim"
    victim.mkdir(parents=True)
    (victim / "keep.json").write_text('{"mine": true}')
    (victim / "pwned.json").write_text("original")
    cluster = ClusterDir(str(base / "c"))
    config = ClusterConfig(nodes=parse_nodes("l4-node"))
    cluster.save_config(config)
    cluster.store.create(node_object(config.nodes[0], config.kubernetes_version))
    return cluster, base


KILL_AT = str(Path(__file__).resolve().parent.parent / "support" / "kill_at.py")  # the CLI with a kill point


def outside(base, cluster: ClusterDir) -> dict[str, tuple[int, str]]:
    """Every path under `base` but outside the cluster directory, with its mode and content digest."""
    found = {}
    for directory, subdirs, files in os.walk(base):
        subdirs[:] = [d for d in subdirs if os.path.join(directory, d) != cluster.path]
        for name in files + subdirs:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            digest = hashlib.sha256(open(path, "rb").read()).hexdigest() if stat.S_ISREG(info.st_mode) else ""
            found[path] = (info.st_mode, digest)
    return found


def run(*args: str, stdin: str | None = None):
    return CliRunner().invoke(cli, list(args), input=stdin)


def refused(result, *expected: str) -> None:
    """Exit 1 or 2 with an `error:` message naming what was wrong, never a traceback or an internal error."""
    assert result.exit_code in (1, 2), (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    assert "error:" in result.stderr, result.output
    for text in expected:
        assert text in result.stderr, result.stderr


def manifest(base, text: str, name: str = "attack.yaml") -> str:
    """The manifest in `base`'s parent: outside the world the tests watch."""
    path = base.parent / name
    path.write_text(text)
    return str(path)


def stored_files(cluster: ClusterDir) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), cluster.store.root)
                  for d, _, files in os.walk(cluster.store.root) for f in files)


# ----- 1. store paths from unchecked fields ---------------------------------------------------------------------


@pytest.mark.parametrize("namespace", ["../../../victim", "../../victim", "/ABS", "..", ".", "../pods"])
def test_a_namespace_that_is_a_path_is_refused_for_an_unchecked_kind(env, namespace):
    cluster, base = env
    namespace = namespace.replace("/ABS", str(base / "victim"))
    before, files = outside(base, cluster), stored_files(cluster)
    path = manifest(base, f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: pwned, namespace: '{namespace}'}}\n"
                          "data: {a: b}\n")
    refused(run("apply", "-f", path, "--dir", cluster.path), "metadata.namespace", "DNS label")
    assert outside(base, cluster) == before
    assert stored_files(cluster) == files  # nothing applied, not even inside the store


def test_a_kind_that_is_a_path_is_refused(env):
    cluster, base = env
    before, files = outside(base, cluster), stored_files(cluster)
    path = manifest(base, "apiVersion: v1\nkind: ../../../victim/k\nmetadata: {name: pwned}\n")
    refused(run("apply", "-f", path, "--dir", cluster.path), "no matches for kind")
    assert outside(base, cluster) == before and stored_files(cluster) == files


def test_a_bad_document_is_refused_and_only_the_others_are_applied(env):
    # as kubectl goes on past an object the API server refuses (tests/e2e/test_cluster_newcomer.py)
    cluster, base = env
    before, files = outside(base, cluster), stored_files(cluster)
    path = manifest(base, POD.format(name="fine", namespace="default", image="x") + "---\n"
                    + "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: '../x'}\n")
    refused(run("apply", "-f", path, "--dir", cluster.path), "doc 2")
    assert outside(base, cluster) == before
    added = set(stored_files(cluster)) - set(files)
    assert {f for f in added if not f.startswith(("events/", "."))} == {"pods/default/fine.json"}


def test_delete_from_a_file_checks_namespace_and_name_before_unlinking(env):
    cluster, base = env
    before = outside(base, cluster)
    victim = str(base / "victim")
    for namespace, name in ((victim, "keep"), ("default", "../../../victim/keep"), (".", "keep")):
        path = manifest(base, POD.format(name=name, namespace=namespace, image="x"))
        refused(run("delete", "-f", path, "--dir", cluster.path), "is invalid")
    assert outside(base, cluster) == before


def test_delete_and_get_by_name_check_names_and_namespaces(env):
    cluster, base = env
    before = outside(base, cluster)
    # a name with a slash is kubectl's KIND/NAME form mixed with a KIND argument: refused before any path exists
    refused(run("delete", "pod", "../../../victim/keep", "--dir", cluster.path), "KIND/NAME")
    refused(run("delete", "pod", "..", "--dir", cluster.path), "metadata.name")
    refused(run("delete", "pod", "keep", "-n", str(base / "victim"), "--dir", cluster.path), "--namespace")
    refused(run("get", "pods", "../../../victim/keep", "--dir", cluster.path), "KIND/NAME")
    refused(run("get", "pods", "..", "--dir", cluster.path), "metadata.name")
    refused(run("get", "configmaps", "-n", "../../victim", "--dir", cluster.path), "--namespace")
    refused(run("describe", "pod", "../x", "--dir", cluster.path), "KIND/NAME")
    refused(run("describe", "pod", "..", "--dir", cluster.path), "metadata.name")
    assert outside(base, cluster) == before


def test_every_store_path_is_checked_even_when_called_directly(env):
    cluster, base = env
    store = cluster.store
    for kind, namespace, name in (("Pod", "../../victim", "keep"), ("Pod", "default", "../../../victim/keep"),
                                  ("../x", None, "keep"), ("ConfigMap", "/tmp", "keep"), ("Pod", "default", "a\0b"),
                                  ("Pod", "default", "x" * 300)):
        with pytest.raises(StoreError):
            store.delete(kind, namespace, name, graceful=False)
        with pytest.raises(StoreError):
            store.get(kind, namespace, name)
    with pytest.raises(StoreError, match="metadata.namespace"):
        store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "../pods"}})
    assert (base / "victim" / "keep.json").exists()


def test_a_symlink_planted_in_the_store_leads_nowhere(env):
    cluster, base = env
    store = cluster.store
    folder = os.path.join(store.root, "pods", "default")
    os.makedirs(folder, exist_ok=True)
    os.symlink(str(base / "victim" / "keep.json"), os.path.join(folder, "keep.json"))
    os.symlink(str(base / "victim"), os.path.join(store.root, "pods", "evil"))
    before = outside(base, cluster)
    with pytest.raises(StoreError, match="outside"):
        store.delete("Pod", "default", "keep", graceful=False)
    assert store.list("Pod") == []  # neither the file link nor the folder link is followed
    assert outside(base, cluster) == before


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["Pod", "ConfigMap", "Node", "DeviceClass", "../x", "Foo"]),
       namespace=st.one_of(st.none(), st.text(alphabet="ab./\\0-_%~ \x1b", max_size=12)),
       name=st.text(alphabet="ab./\\0-_%~ \x1b", max_size=12))
def test_any_identity_is_refused_or_names_a_file_inside_the_store(env, kind, namespace, name):
    cluster, _ = env
    root = os.path.realpath(cluster.store.root)
    try:
        path = cluster.store._path(kind, namespace, name)
    except StoreError:
        return
    assert path.startswith(root + os.sep) and path.endswith(".json")
    assert os.path.dirname(os.path.dirname(os.path.dirname(path))) == root  # store/<kind>/<namespace|_>/<name>.json


# ----- 2. client-chosen uids ------------------------------------------------------------------------------------


def test_the_store_assigns_uids_and_ignores_the_clients(env):
    cluster, base = env
    chosen = "../../../../victim/poduid"
    path = manifest(base, POD.format(name="p", namespace="default", image="x").replace(
        "  namespace: default\n", f"  namespace: default\n  uid: '{chosen}'\n"))
    result = run("apply", "-f", path, "--dir", cluster.path)
    assert result.exit_code == 0, result.output
    pod = cluster.store.get("Pod", "default", "p")
    assert pod["metadata"]["uid"] != chosen
    assert len(pod["metadata"]["uid"]) == 36
    twin = cluster.store.create({"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": "q", "uid": pod["metadata"]["uid"]},
                                 "spec": {"containers": [{"name": "c", "image": "x"}]}})
    assert twin["metadata"]["uid"] != pod["metadata"]["uid"]  # no two objects share one
    assert outside(base, cluster)[str(base / "victim" / "pwned.json")][1] == hashlib.sha256(b"original").hexdigest()


def test_the_kubelet_names_no_file_after_a_uid_that_is_not_one(env):
    cluster, _ = env
    for uid in ("../../../../x/poduid", "/etc/passwd", "", None):
        with pytest.raises(ClaimPathError):
            record_path(cluster, "l4-0", {"metadata": {"uid": uid}})


def test_the_driver_refuses_a_claim_uid_it_holds_for_another_claim(tmp_path):
    """A claim applied with another claim's uid got another GPU allocated, yet the driver answered with the first
    claim's prepared device: one pod got another pod's GPU. The driver now refuses the second."""
    import yaml

    from gpudra.discovery import open_backend
    from gpudra.kubeletplugin.claims import LocalClaimStore
    from gpudra.kubeletplugin.paths import DriverPaths
    from gpudra.gpuplugin.state import ClaimRef, DeviceState, PrepareError
    from tests.support.builders import allocated_claim

    paths = DriverPaths(root=str(tmp_path))
    claims_dir = tmp_path / "claims"
    claims_dir.mkdir()
    backend = open_backend("simulated", profile="dgx-h100", node_name="n1", state_path=paths.simulated_state)
    state = DeviceState(driver_name="gpu.nvidia.com", node_name="n1", backend=backend, paths=paths,
                        claims=LocalClaimStore(str(claims_dir)), fsync=False, boot_id="b")
    state.reconcile()
    first = allocated_claim("a", [{"request": "r0", "device": "gpu-0"}], node_name="n1")
    uid = first["metadata"]["uid"]
    second = allocated_claim("b", [{"request": "r0", "device": "gpu-1"}], node_name="n1", uid=uid)
    for claim in (first, second):
        (claims_dir / f"default_{claim['metadata']['name']}.yaml").write_text(yaml.safe_dump(claim))
    devices = state.prepare(ClaimRef("default", "a", uid))
    assert [d["deviceName"] for d in devices] == ["gpu-0"]
    with pytest.raises(PrepareError, match="already prepared for ResourceClaim default/a"):
        state.prepare(ClaimRef("default", "b", uid))
    with pytest.raises(PrepareError, match="already prepared for ResourceClaim default/a"):
        state.unprepare(ClaimRef("default", "b", uid))  # nor does a forged reference free claim a's GPU
    assert list(state.checkpoint_snapshot()["claims"]) == [uid]


# ----- 3. one object cannot stop the control loop ---------------------------------------------------------------


def test_corrupt_store_files_are_reported_and_skipped_and_the_loop_goes_on(env, caplog):
    cluster, base = env
    store = cluster.store
    pods = os.path.join(store.root, "pods")
    os.makedirs(os.path.join(pods, "default"), exist_ok=True)
    open(os.path.join(pods, "poison.json"), "w").write("{}")  # a file where namespaces are folders
    open(os.path.join(pods, "default", "garbage.json"), "w").write("{not json")
    open(os.path.join(pods, "default", "list.json"), "w").write("[1, 2]")
    open(os.path.join(pods, "default", "cm.json"), "w").write(json.dumps(  # another kind stored as a Pod
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}}))
    open(os.path.join(pods, "default", "liar.json"), "w").write(json.dumps(  # names another pod than its file
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "default",
                                                         "uid": "not-a-uid"}, "spec": {"containers": []}}))
    open(os.path.join(pods, "default", "badspec.json"), "w").write(json.dumps(  # its identity fine, its spec not
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "badspec", "namespace": "default",
                                                         "uid": "0b9a4a4e-1b9f-4d6e-9a57-4c1d0e2f3a4b"},
         "spec": {"containers": "all of them", "nodeName": 7}}))
    os.makedirs(os.path.join(store.root, "configmaps", "default"), exist_ok=True)
    with caplog.at_level(logging.WARNING, logger="gpudra.store"):
        path = manifest(base, POD.format(name="good", namespace="default", image="x"))
        result = run("apply", "-f", path, "--dir", cluster.path)
        assert result.exit_code == 0, result.output
        assert [p["metadata"]["name"] for p in store.list("Pod")] == ["good"]
        reconcile(cluster)  # again: still no exception
    assert store.get("Pod", "default", "good")["status"]["phase"] == "Running"
    skipped = " ".join(r.getMessage() for r in caplog.records)
    for name in ("garbage.json", "list.json", "cm.json", "liar.json", "badspec.json"):
        assert name in skipped
    get = run("get", "pods", "--dir", cluster.path)
    assert get.exit_code == 0 and "good" in get.stdout


def test_the_store_writes_no_object_the_api_server_would_refuse(env):
    cluster, _ = env
    store = cluster.store
    with pytest.raises(StoreError, match="is invalid: spec.containers"):
        store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": "x"}})
    good = store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}})
    good["spec"]["nodeName"] = 7
    with pytest.raises(StoreError, match="is invalid: spec.nodeName"):
        store.replace(good)
    # the spec as created, with what the Priority admission plugin added (no PriorityClass: 0, PreemptLowerPriority)
    assert store.get("Pod", "default", "p")["spec"] == {"containers": [{"name": "c", "image": "x"}], "priority": 0,
                                                        "preemptionPolicy": "PreemptLowerPriority"}


def test_an_unwritable_store_is_an_error_message_not_an_internal_error(env):
    cluster, base = env
    os.makedirs(os.path.join(cluster.store.root, "configmaps"), exist_ok=True)
    open(os.path.join(cluster.store.root, "configmaps", "default"), "w").write("")  # a file, not a folder
    path = manifest(base, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n")
    refused(run("apply", "-f", path, "--dir", cluster.path), "cannot")


# ----- 7. metadata the API server refuses, terminal control, re-apply ---------------------------------------------


@pytest.mark.parametrize("metadata, expected", [
    ("{name: big, annotations: {a: '%s'}}" % ("x" * (256 * 1024)), "Too long: must have at most 262144 bytes"),
    ("{name: l, labels: {'bad key!': v}}", "metadata.labels"),
    ("{name: l, labels: {k: 'bad value!'}}", "metadata.labels"),
    ('{name: "a\\0b"}', "metadata.name"),
    ("{name: %s}" % ("a" * 300), "must be no more than 253 characters"),
    ("{name: 5}", "metadata.name: must be a string"),
    ("{name: x, namespace: [a]}", "metadata.namespace: must be a string"),
    ("{generateName: '../x-'}", "metadata.generateName"),
], ids=["annotations-256KiB", "label-key", "label-value", "nul", "300-chars", "name-int", "namespace-list",
        "generateName"])
def test_metadata_is_checked_as_the_api_server_does_for_every_kind(env, metadata, expected):
    cluster, base = env
    files = stored_files(cluster)
    for kind in ("ConfigMap", "Pod"):
        body = "spec: {containers: [{name: c, image: x}]}\n" if kind == "Pod" else "data: {a: b}\n"
        path = manifest(base, f"apiVersion: v1\nkind: {kind}\nmetadata: {metadata}\n{body}")
        refused(run("apply", "-f", path, "--dir", cluster.path), expected)
    assert stored_files(cluster) == files


def test_annotations_up_to_the_limit_are_kept():
    from gpudra.api.load import Document
    from gpudra.api.validate import validate_document

    # 262144 bytes of keys and values together is the API server's limit, not one byte more
    at_limit = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "annotations": {"k": "v" * 262143}}}
    assert not [p for p in validate_document(Document(at_limit, "f", 1)) if p.severity == "error"]
    at_limit["metadata"]["annotations"]["k"] += "v"
    assert [p.path for p in validate_document(Document(at_limit, "f", 1))
            if p.severity == "error"] == ["metadata.annotations"]


def test_control_characters_in_names_are_printed_escaped(env):
    cluster, base = env
    path = manifest(base, 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "a\\e[31mb\\a"}\n')
    result = run("apply", "-f", path, "--dir", cluster.path)
    refused(result, "\\x1b[31mb\\x07")
    assert "\x1b" not in result.output and "\x07" not in result.output
    labels = manifest(base, 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, labels: {"k\\e]0;t\\a": v}}\n',
                      "labels.yaml")
    result = run("validate", "-f", labels)
    assert result.exit_code == 1 and "\\x1b]0;t\\x07" in result.output, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    for args in (("get", "pods", "\x1b]0;owned\x07"), ("delete", "pod", "\x1b[2J")):
        result = run(*args, "--dir", cluster.path)
        refused(result)
        assert "\x1b" not in result.output and "\x07" not in result.output, result.output


def test_reapplying_a_running_pod_is_unchanged_and_its_spec_is_immutable(env):
    cluster, base = env
    path = manifest(base, POD.format(name="p", namespace="default", image="x"))
    assert run("apply", "-f", path, "--dir", cluster.path).stdout == "pod/p created\n"
    running = cluster.store.get("Pod", "default", "p")
    assert running["spec"]["nodeName"] == "l4-0" and running["status"]["phase"] == "Running"

    again = run("apply", "-f", path, "--dir", cluster.path)
    assert again.stdout == "pod/p unchanged\n", again.output
    assert cluster.store.get("Pod", "default", "p") == running  # not rescheduled, not even rewritten

    labelled = manifest(base, POD.format(name="p", namespace="default", image="x").replace(
        "  namespace: default\n", "  namespace: default\n  labels: {app: web}\n"), "labelled.yaml")
    assert run("apply", "-f", labelled, "--dir", cluster.path).stdout == "pod/p configured\n"
    pod = cluster.store.get("Pod", "default", "p")
    assert pod["metadata"]["labels"] == {"app": "web"} and pod["spec"]["nodeName"] == "l4-0"
    assert pod["metadata"]["uid"] == running["metadata"]["uid"] and pod["status"]["phase"] == "Running"
    # the label dropped from the manifest is dropped from the pod (three-way merge), the binding stays
    assert run("apply", "-f", path, "--dir", cluster.path).stdout == "pod/p configured\n"
    assert "labels" not in cluster.store.get("Pod", "default", "p")["metadata"]

    changed = manifest(base, POD.format(name="p", namespace="default", image="x").replace(
        "    image: x\n", "    image: x\n    resources: {limits: {cpu: '1'}}\n"), "changed.yaml")
    refused(run("apply", "-f", changed, "--dir", cluster.path), "spec: Forbidden: pod updates may not change")
    image = manifest(base, POD.format(name="p", namespace="default", image="y"), "image.yaml")
    assert run("apply", "-f", image, "--dir", cluster.path).stdout == "pod/p configured\n"
    pod = cluster.store.get("Pod", "default", "p")
    assert pod["spec"]["containers"][0]["image"] == "y" and pod["spec"]["nodeName"] == "l4-0"
    shown = run("get", "pod", "p", "-o", "yaml", "--dir", cluster.path).stdout
    assert "gpudra.local/" not in shown  # the store's bookkeeping is not printed


def test_a_claims_spec_is_immutable_as_the_api_server_keeps_it(env):
    cluster, base = env
    claim = ("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec:\n  devices:\n"
             "    requests:\n    - name: g\n      exactly: {deviceClassName: gpu.nvidia.com, count: %d}\n")
    first = manifest(base, claim % 1, "claim.yaml")
    assert run("apply", "-f", first, "--dir", cluster.path).stdout == "resourceclaim.resource.k8s.io/c created\n"
    assert run("apply", "-f", first, "--dir", cluster.path).stdout == "resourceclaim.resource.k8s.io/c unchanged\n"
    refused(run("apply", "-f", manifest(base, claim % 2, "claim2.yaml"), "--dir", cluster.path),
            "spec: Invalid value: field is immutable")
    stored = cluster.store.get("ResourceClaim", "default", "c")
    assert stored["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1


# ----- 5. modes, and crash leftovers -------------------------------------------------------------------------------


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_cluster_up_removes_temp_files_of_crashed_writes(env):
    cluster, _ = env
    folder = os.path.join(cluster.store.root, "pods", "default")
    os.makedirs(folder, exist_ok=True)
    dead = _dead_pid()
    leftovers = [os.path.join(folder, f".p{i}.json.{dead}-1{i}.tmp") for i in range(21)]
    leftovers.append(os.path.join(cluster.path, f".cluster.yaml.{dead}-7.tmp"))
    for path in leftovers:
        open(path, "w").write("half")
    removed = cluster.remove_crash_leftovers()
    assert sorted(removed) == sorted(leftovers)
    assert not any(os.path.exists(p) for p in leftovers)


def test_temp_files_of_killed_applies_are_removed_at_cluster_up(env):
    """`gpudra apply` killed between writing an object's temp file and renaming it, three times over: the temp
    files stay (nothing else could know they are dead), and what `cluster up` runs removes every one of them."""
    cluster, base = env
    for index in range(3):
        path = manifest(base, POD.format(name=f"p{index}", namespace="default", image="x"), f"p{index}.yaml")
        killed = subprocess.run([sys.executable, KILL_AT, "store:rename:2", "apply", "-f", path, "--dir",
                                 cluster.path], capture_output=True, timeout=120)
        assert killed.returncode == -9, killed.stderr
    temps = [os.path.join(d, f) for d, _, files in os.walk(cluster.path) for f in files if f.endswith(".tmp")]
    assert len(temps) == 3, temps
    assert sorted(cluster.remove_crash_leftovers()) == sorted(temps)
    assert not any(os.path.exists(t) for t in temps)


def test_every_file_of_a_cluster_is_private_whatever_the_umask(cluster_state, tmp_path):
    """Under umask 000 the cluster's directories were 0777 and its files 0666: another local user could rewrite
    what a root control plane acts on. Now: 0700 directories, 0600 files (the drivers' own files below a 0700
    node directory keep the modes the driver gives them, none writable by others)."""
    old = os.umask(0)
    try:
        leftover = None
        result = run("cluster", "up", "--dir", cluster_state, "--nodes", "l4-node")
        assert result.exit_code == 0, result.output
        path = manifest(tmp_path, POD.format(name="p", namespace="default", image="x"))
        assert run("apply", "-f", path, "--dir", cluster_state).exit_code == 0
        assert run("cluster", "view", "--dir", cluster_state).exit_code == 0
        leftover = os.path.join(cluster_state, "store", "pods", "default", f".p.json.{_dead_pid()}-1.tmp")
        open(leftover, "w").write("half")
        result = run("cluster", "up", "--dir", cluster_state)
        assert result.exit_code == 0, result.output
    finally:
        os.umask(old)
    assert leftover is not None and not os.path.exists(leftover)
    assert "a write interrupted by a crash" in result.stderr

    def mode(path: str) -> int:
        return stat.S_IMODE(os.lstat(path).st_mode)

    assert mode(cluster_state) == 0o700
    for entry in ClusterDir.OWN_ENTRIES:
        path = os.path.join(cluster_state, entry)
        if os.path.exists(path):
            assert mode(path) == (0o700 if os.path.isdir(path) else 0o600), (entry, oct(mode(path)))
    pointer = os.path.join(os.environ["XDG_STATE_HOME"], "gpudra")
    assert mode(pointer) == 0o700 and mode(os.path.join(pointer, "current-cluster")) == 0o600
    for directory, subdirs, files in os.walk(cluster_state):
        for name in subdirs + files:
            path = os.path.join(directory, name)
            assert not mode(path) & 0o022, (path, oct(mode(path)))  # writable by no one else, anywhere
            rel = os.path.relpath(path, cluster_state).split(os.sep)
            driver_owned = rel[0] == "nodes" and len(rel) > 2 and rel[2] not in ("kubelet", "driver.pid", "driver.log")
            if not driver_owned and not os.path.islink(path):
                wanted = 0o700 if os.path.isdir(path) else 0o600
                assert mode(path) == wanted, (path, oct(mode(path)))


def test_the_store_sets_creation_timestamps_so_no_client_jumps_the_queue(env):
    """FillObjectMetaSystemFields: creationTimestamp is the server's, as the uid is; the scheduling queue orders
    pods of one priority by it, so a client's 1970 timestamp must not put its pod first."""
    cluster, _ = env
    early = cluster.store.create({"apiVersion": "v1", "kind": "Pod",
                                  "metadata": {"name": "early", "creationTimestamp": "1970-01-01T00:00:00Z"},
                                  "spec": {"containers": [{"name": "c", "image": "x"}]}})
    assert early["metadata"]["creationTimestamp"] != "1970-01-01T00:00:00Z"
    assert cluster.store.get("Pod", "default", "early")["metadata"]["creationTimestamp"].startswith("20")


@pytest.mark.parametrize("option,value", [("--nodes", "l4-node:100000000"), ("--nodes", "l4-node:200,t4-node:57"),
                                          ("--racks", "1000000x18")])
def test_a_node_count_no_machine_could_run_is_refused_before_anything_starts(cluster_state, option, value):
    result = run("cluster", "up", "--dir", cluster_state, option, value, "--no-control-plane")
    assert result.exit_code == 2 and "at most 256" in result.output and "Traceback" not in result.output
    assert not os.path.exists(cluster_state)
