"""A read-only stand-in for a kube-apiserver's list endpoints (pagination, 401, missing kinds)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from support.fake_http import JsonHandler


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


_PATHS = {
    "Node": "/api/v1/nodes",
    "Pod": "/api/v1/pods",
    "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
    "ResourceSlice": "/apis/resource.k8s.io/v1/resourceslices",
    "ResourceClaim": "/apis/resource.k8s.io/v1/resourceclaims",
    "ResourceClaimTemplate": "/apis/resource.k8s.io/v1/resourceclaimtemplates",
}
