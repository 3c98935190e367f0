"""The real Kubernetes control plane for tests: built from the repository's Go module (or reused from the cache).

Without Go on PATH the tests that need it skip, naming the missing toolchain; `.ci/run` sets
GPUDRA_REQUIRE_REAL_KUBERNETES=1 on a machine that has Go, so there a missing build fails instead of skipping.
"""

from __future__ import annotations

import json

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRE = "GPUDRA_REQUIRE_REAL_KUBERNETES"
# building Kubernetes cold takes minutes (20+ on a loaded 2-core machine): the tests that build get this long
BUILD_TIMEOUT_S = 3600


def require_go() -> str:
    go = shutil.which("go")
    if go is None:
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 but no `go` on PATH")
        pytest.skip("needs the Go toolchain (`go` on PATH): the real kube-apiserver, kube-scheduler and "
                    "kube-controller-manager are built from Go modules (k8s/)")
    return go


def built(release: str | None = None):
    """The control plane's binary: the module's own release (1.34), or `release` ("1.36", k8s/releases/)."""
    require_go()
    from gpudra.kubecluster.build import build

    return build(str(ROOT / "k8s"), say=lambda text: print(text, file=sys.stderr), release=release)


def short_dir(prefix: str) -> str:
    """A cluster directory short enough for the nodes' unix sockets whatever the test's tmp_path is."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


def gpudra(*args: str, check: bool = True, timeout: float = 600,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GPUDRA_K8S_MODULE=str(ROOT / "k8s"), **(env or {}))
    env = {k: v for k, v in env.items() if v != ""}  # "" unsets a variable
    result = subprocess.run([sys.executable, "-m", "gpudra", *args], capture_output=True, text=True, env=env,
                            timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"gpudra {' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result


class RealApiServer:
    """etcd and the real kube-apiserver alone (no scheduler, no controllers), for tests that write objects and
    read them back: the same surface as tests/gpuplugin/test_driver_apiserver.py's loopback fake (`kubeconfig(path)`,
    `slices`, `claims[...] = claim`, `nodes`), answered by the real thing."""

    def __init__(self, features: str = "default", release: str = "1.34"):
        from gpudra.cluster.layout import ClusterConfig, ClusterDir

        self.binary = built(release)
        self.directory = short_dir("ga")
        self.cluster = ClusterDir(self.directory)
        self.config = ClusterConfig(nodes=[], kubernetes_version=release, features=features)
        self.fail_next: list[int] = []  # a real server fails on its own terms: nothing to inject

    def __enter__(self) -> "RealApiServer":
        from gpudra.kubecluster import controlplane
        from gpudra.kubecluster.rest import Rest

        self.cluster.save_config(self.config)
        controlplane.start(self.cluster, self.config, self.binary, components=("etcd", "kube-apiserver"))
        self.rest = Rest(controlplane.KubePaths(self.cluster).admin_kubeconfig)
        self.claims = _RealClaims(self.rest)
        return self

    def __exit__(self, *exc: object) -> None:
        from gpudra.kubecluster import controlplane

        self.rest.close()
        controlplane.stop(self.cluster)
        shutil.rmtree(self.directory, ignore_errors=True)

    def kubeconfig(self, path: str) -> str:
        from gpudra.kubecluster.controlplane import KubePaths

        shutil.copyfile(KubePaths(self.cluster).admin_kubeconfig, path)
        return path

    def add_node(self, name: str) -> dict:
        return self.rest.call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})

    @property
    def nodes(self) -> dict[str, dict]:
        return {n["metadata"]["name"]: n for n in self.rest.get("/api/v1/nodes")["items"]}

    @property
    def slices(self) -> dict[str, dict]:
        return {s["metadata"]["name"]: s for s in self.rest.get("/apis/resource.k8s.io/v1/resourceslices")["items"]}


class _RealClaims:
    """`claims[(namespace, name)] = claim` creates the claim and writes its status (allocation) as the scheduler
    would; the server's uid is written back into `claim`, since the server assigns it."""

    def __init__(self, rest):
        self.rest = rest

    def __setitem__(self, key: tuple[str, str], claim: dict) -> None:
        from gpudra.kubecluster.rest import ApiError

        namespace, name = key
        try:
            self.rest.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": namespace}})
        except ApiError as exc:
            if exc.status != 409:
                raise
        body = {k: v for k, v in claim.items() if k != "status"}
        body["metadata"] = {"name": name, "namespace": namespace}
        path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
        created = self.rest.call("POST", path, body)
        created["status"] = claim.get("status") or {}
        written = self.rest.call("PUT", f"{path}/{name}/status", created)
        claim["metadata"]["uid"] = written["metadata"]["uid"]


class Kubectl:
    def __init__(self, binary: str, kubeconfig: str):
        self.binary, self.kubeconfig = binary, kubeconfig

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run([self.binary, "--kubeconfig", self.kubeconfig, *args], capture_output=True,
                                text=True, input=stdin, timeout=120)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def json(self, *args: str) -> dict:
        return json.loads(self(*args, "-o", "json"))


def wait_nodes_schedulable(kubectl: Kubectl, timeout: float = 120) -> set[str]:
    """The node names once every node is Ready and carries no node.kubernetes.io/ taint (the node lifecycle
    controller taints a fresh node not-ready until its Ready status is seen): a scheduling comparison that reads the
    state earlier compares against nodes the real scheduler skips, and its pods wait out a backoff."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        nodes = kubectl.json("get", "nodes")["items"]
        waiting = [n["metadata"]["name"] for n in nodes
                   if not any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions") or [])
                   or any(t["key"].startswith("node.kubernetes.io/") for t in n.get("spec", {}).get("taints") or [])]
        if nodes and not waiting:
            return {n["metadata"]["name"] for n in nodes}
        assert time.monotonic() < deadline, f"nodes not schedulable after {timeout} s: {waiting}"
        time.sleep(0.5)


def cluster_state(kubectl: Kubectl) -> list[dict]:
    items = []
    for kind in ("nodes", "deviceclasses", "resourceslices", "resourceclaimtemplates", "resourceclaims", "pods"):
        for obj in kubectl.json("get", kind, "-A")["items"]:
            obj["metadata"].pop("managedFields", None)
            items.append(obj)
    return items
