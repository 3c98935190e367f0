"""The node agent against a loopback API server through the official Kubernetes client (real HTTP).

Covers: ResourceSlices created with the Node owner reference, no duplicates after a restart,
generation bump when devices change, claims read from the API server for prepare.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from support.fake_http import JsonHandler, write_kubeconfig

from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim

NODE = "api-node"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class ReadWriteApiServer:
    """Just enough of the API server: Nodes (get), ResourceSlices (CRUD + fieldSelector), ResourceClaims (get)."""

    def __init__(self):
        self.slices: dict[str, dict] = {}
        self.claims: dict[tuple[str, str], dict] = {}
        self.nodes = {NODE: {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid-7"}}}
        self.requests: list[tuple[str, str]] = []
        self.version = 0
        self.fail_next: list[int] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def kubeconfig(self, path: str) -> str:
        return write_kubeconfig(path, self._server.server_address)

    def _handler(self):
        server = self

        class Handler(JsonHandler):

            def _status(self, code: int, reason: str) -> None:
                self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                                  "code": code, "message": reason})

            def _body(self) -> dict:
                return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                server.requests.append((method, url.path))
                with server._lock:
                    if server.fail_next:
                        return self._status(server.fail_next.pop(0), "InternalError")
                    parts = url.path.rstrip("/").split("/")
                    if url.path.startswith("/api/v1/nodes/") and method == "GET":
                        node = server.nodes.get(parts[-1])
                        return self._send(200, node) if node else self._status(404, "NotFound")
                    if "/resourceclaims/" in url.path and method == "GET":
                        claim = server.claims.get((parts[-3], parts[-1]))
                        return self._send(200, claim) if claim else self._status(404, "NotFound")
                    if url.path == SLICES and method == "GET":
                        selectors = dict(s.split("=", 1) for s in
                                         parse_qs(url.query).get("fieldSelector", [""])[0].split(",") if s)
                        items = [s for s in server.slices.values()
                                 if all(_field(s, k) == v for k, v in selectors.items())]
                        return self._send(200, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
                                                "metadata": {"resourceVersion": str(server.version)}, "items": items})
                    if url.path == SLICES and method == "POST":
                        body = self._body()
                        if body["metadata"]["name"] in server.slices:
                            return self._status(409, "AlreadyExists")
                        return self._send(201, server._store(body))
                    if url.path.startswith(SLICES + "/"):
                        name = parts[-1]
                        if name not in server.slices:
                            return self._status(404, "NotFound")
                        if method == "PUT":
                            body = self._body()
                            if body["metadata"].get("resourceVersion") != server.slices[name]["metadata"]["resourceVersion"]:
                                return self._status(409, "Conflict")
                            return self._send(200, server._store(body))
                        if method == "DELETE":
                            del server.slices[name]
                            return self._send(200, {"kind": "Status", "status": "Success"})
                    return self._status(405, "MethodNotAllowed")

            def do_GET(self):  # noqa: N802
                self._handle("GET")

            def do_POST(self):  # noqa: N802
                self._handle("POST")

            def do_PUT(self):  # noqa: N802
                self._handle("PUT")

            def do_DELETE(self):  # noqa: N802
                self._handle("DELETE")

        return Handler

    def _store(self, body: dict) -> dict:
        self.version += 1
        body.setdefault("apiVersion", "resource.k8s.io/v1")
        body.setdefault("kind", "ResourceSlice")
        body["metadata"]["resourceVersion"] = str(self.version)
        self.slices[body["metadata"]["name"]] = body
        return body


def _field(obj: dict, path: str) -> Any:
    for key in path.split("."):
        obj = (obj or {}).get(key)
    return obj


@pytest.fixture(params=["loopback-fake", pytest.param("kube-apiserver", marks=pytest.mark.timeout(3600))])
def cluster(request):
    """The loopback fake above, and the real kube-apiserver 1.34 (built from Go modules, which may take a cold
    build's minutes; skipped without Go)."""
    if request.param == "kube-apiserver":
        from support.realkube import RealApiServer

        with RealApiServer() as api:
            api.add_node(NODE)
            yield api
        return
    with ReadWriteApiServer() as api:
        yield api


def _agent(root: str, kubeconfig: str, profile: str) -> DriverAgent:
    agent = DriverAgent(AgentOptions(node_name=NODE, profile=profile, root=root, kubeconfig=kubeconfig, fsync=False))
    agent.start()
    return agent


def test_agent_publishes_slices_and_prepares_claims_from_the_api_server(cluster):
    root = tempfile.mkdtemp(prefix="gda", dir="/tmp")
    try:
        kubeconfig = cluster.kubeconfig(os.path.join(root, "kubeconfig"))
        agent = _agent(root, kubeconfig, "hgx-a100-mig")
        assert agent.publish_summary["created"] == 1
        [published] = cluster.slices.values()
        assert published["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
        assert published["metadata"]["ownerReferences"][0]["uid"] == cluster.nodes[NODE]["metadata"]["uid"]
        assert len(published["spec"]["devices"]) == 26

        claim = allocated_claim("from-api", [{"request": "gpu", "device": "gpu-0-mig-1g10gb-19-0"}], node_name=NODE,
                                namespace="team")
        cluster.claims[("team", "from-api")] = claim
        kubelet = KubeletClient(agent.paths.registration_socket)
        kubelet.register()
        ref = ("team", "from-api", claim["metadata"]["uid"])
        answer = kubelet.prepare([ref]).claims[ref[2]]
        assert answer.error == "" and answer.devices[0].device_name == "gpu-0-mig-1g10gb-19-0"
        gone_uid = "5d0c1f7e-2a3b-4c5d-8e9f-0a1b2c3d4e5f"
        assert "not found" in kubelet.prepare([("team", "gone", gone_uid)]).claims[gone_uid].error
        kubelet.close()
        agent.stop()

        # a restart with the same devices changes nothing; new devices bump the generation
        again = _agent(root, kubeconfig, "hgx-a100-mig")
        assert again.publish_summary == {"generation": 1, "created": 0, "updated": 0, "deleted": 0, "unchanged": 1}
        again.stop()
        assert len(cluster.slices) == 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_changed_devices_bump_generation_and_transient_errors_are_retried(cluster):
    root = tempfile.mkdtemp(prefix="gda", dir="/tmp")
    try:
        kubeconfig = cluster.kubeconfig(os.path.join(root, "kubeconfig"))
        _agent(root, kubeconfig, "l4-node").stop()
        shutil.rmtree(os.path.join(root, "var"))  # different "hardware" on the same node
        cluster.fail_next = [503, 500]
        agent = _agent(root, kubeconfig, "t4-node")
        assert agent.publish_summary["generation"] == 2 and agent.publish_summary["updated"] == 1
        [published] = cluster.slices.values()
        assert [d["name"] for d in published["spec"]["devices"]] == ["gpu-0"]
        assert published["spec"]["devices"][0]["attributes"]["productName"] == {"string": "Tesla T4"}
        agent.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
