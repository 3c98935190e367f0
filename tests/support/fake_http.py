"""Pieces shared by the tests' loopback fake API servers (driver publishing, live reader, MIG manager)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet request handler that answers JSON."""

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def write_kubeconfig(path: str, server_address: tuple) -> str:
    """A kubeconfig whose current context talks to the fake server at `server_address` with a token."""
    host, port = server_address[:2]
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                   "clusters": [{"name": "fake", "cluster": {"server": f"http://{host}:{port}"}}],
                   "users": [{"name": "fake", "user": {"token": "t"}}],
                   "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}, fh)
    return path
