"""A canned, read-only Kubernetes API server on loopback for tests of the live-cluster reader."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from fake_http import JsonHandler

_PATHS = {
    "Node": "/api/v1/nodes",
    "Pod": "/api/v1/pods",
    "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
    "ResourceSlice": "/apis/resource.k8s.io/v1/resourceslices",
    "ResourceClaim": "/apis/resource.k8s.io/v1/resourceclaims",
    "ResourceClaimTemplate": "/apis/resource.k8s.io/v1/resourceclaimtemplates",
}


class FakeApiServer:
    """Serves `objects` (dicts with kind) as list responses, paged by `page_size`, and /version as a
    `git_version` API server does; records requests."""

    def __init__(self, objects: list[dict[str, Any]], page_size: int | None = None, token: str = "t0ken",
                 git_version: str = "v1.36.0"):
        self.git_version = git_version
        self.by_path: dict[str, list[dict[str, Any]]] = {path: [] for path in _PATHS.values()}
        for obj in objects:
            item = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
            self.by_path[_PATHS[obj["kind"]]].append(item)
        self.page_size = page_size
        self.token = token
        self.requests: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "FakeApiServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def kubeconfig(self, path: str, context: str = "fake", namespace: str | None = None) -> str:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": self.token}}],
            "contexts": [{"name": context, "context": {"cluster": "fake", "user": "fake",
                                                       **({"namespace": namespace} if namespace else {})}}],
            "current-context": context,
        }
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(config, handle)
        return path

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(JsonHandler):

            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                parsed = urlparse(self.path)
                server.requests.append(("GET", self.path))
                if self.headers.get("Authorization") != f"Bearer {server.token}":
                    return self._send(401, {"kind": "Status", "message": "Unauthorized"})
                if parsed.path == "/version":
                    major, minor = server.git_version.lstrip("v").split(".")[:2]
                    return self._send(200, {"major": major, "minor": minor, "gitVersion": server.git_version})
                items = server.by_path.get(parsed.path)
                if items is None:
                    return self._send(404, {"kind": "Status", "message": "the server could not find the requested resource"})
                query = parse_qs(parsed.query)
                start = int(query.get("continue", ["0"])[0])
                size = server.page_size or len(items) or 1
                page = items[start:start + size]
                metadata: dict[str, Any] = {"resourceVersion": "1"}
                if start + size < len(items):
                    metadata["continue"] = str(start + size)
                self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": metadata, "items": page})

            def do_POST(self) -> None:  # noqa: N802
                server.requests.append(("POST", self.path))
                self._send(405, {"kind": "Status", "message": "read-only fake"})

            do_PUT = do_PATCH = do_DELETE = do_POST

        return Handler


# --------------------------------------------------------------------------------------------- tests

import pytest  # noqa: E402

from gpudra.kube import ClusterReadError, read_cluster  # noqa: E402

CLUSTER = [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}"}} for i in range(3)
] + [
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.example.com"},
     "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "node-0-gpu"},
     "spec": {"driver": "gpu.example.com", "nodeName": "node-0",
              "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": 1},
              "devices": [{"name": "gpu-0"}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
     "metadata": {"name": "c", "namespace": "team-a"},
     "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
     "spec": {"containers": [{"name": "c", "image": "x"}]}},
]


def test_reads_every_kind_with_api_version_and_kind(tmp_path):
    with FakeApiServer(CLUSTER) as server:
        objects = read_cluster(kubeconfig=server.kubeconfig(str(tmp_path / "kc")))
    kinds = [obj["kind"] for obj in objects]
    assert kinds == ["Node"] * 3 + ["DeviceClass", "ResourceSlice", "ResourceClaim", "Pod"]
    claim = next(obj for obj in objects if obj["kind"] == "ResourceClaim")
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    assert claim["metadata"] == {"name": "c", "namespace": "team-a"}
    assert objects[0] == {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-0"}}


def test_follows_continue_tokens_and_only_reads(tmp_path):
    with FakeApiServer(CLUSTER, page_size=2) as server:
        objects = read_cluster(kubeconfig=server.kubeconfig(str(tmp_path / "kc")))
        node_requests = [path for method, path in server.requests if path.startswith("/api/v1/nodes")]
        methods = {method for method, _ in server.requests}
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Node"] == ["node-0", "node-1", "node-2"]
    assert len(node_requests) == 2 and "continue=2" in node_requests[1]
    assert methods == {"GET"}


def test_missing_optional_kind_is_skipped_and_reported(tmp_path):
    skipped = []
    with FakeApiServer(CLUSTER) as server:
        read_cluster(kubeconfig=server.kubeconfig(str(tmp_path / "kc")), on_skip=lambda kind, why: skipped.append(kind.kind))
    # The fake server does not serve DeviceTaintRules (an alpha API).
    assert skipped == ["DeviceTaintRule"] * 3


def test_context_selection(tmp_path):
    with FakeApiServer(CLUSTER) as server:
        path = server.kubeconfig(str(tmp_path / "kc"), context="lab")
        assert len(read_cluster(kubeconfig=path, context="lab")) == len(CLUSTER)
        with pytest.raises(ClusterReadError, match="nope"):
            read_cluster(kubeconfig=path, context="nope")


def test_unauthorized_is_a_clean_error(tmp_path):
    with FakeApiServer(CLUSTER, token="other") as server:
        path = server.kubeconfig(str(tmp_path / "kc"))
        server.token = "something-else"
        with pytest.raises(ClusterReadError, match="401 Unauthorized"):
            read_cluster(kubeconfig=path)


def test_unreachable_server_is_a_clean_error(tmp_path):
    with FakeApiServer([]) as server:
        path = server.kubeconfig(str(tmp_path / "kc"))
        url = server.url
    # The server is shut down now: connection refused, said as kubectl says it (no urllib3 internals).
    with pytest.raises(ClusterReadError) as refused:
        read_cluster(kubeconfig=path)
    assert str(refused.value) == f"cannot reach the API server {url} (GET /api/v1/nodes): connection refused"


def test_missing_kubeconfig_file(tmp_path):
    absent = str(tmp_path / "absent")
    with pytest.raises(ClusterReadError) as missing:
        read_cluster(kubeconfig=absent)
    assert str(missing.value) == f"cannot load kubeconfig {absent}: no such file or directory"
