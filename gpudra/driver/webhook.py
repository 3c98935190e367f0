"""`gpudra driver webhook`: the validating admission webhook for opaque configs, over HTTPS.

The API server POSTs an admission.k8s.io/v1 AdmissionReview (Content-Type application/json) to
/validate-resource-claim-parameters and expects one back; /readyz answers "ok" for probes. The paths are
NVIDIA's (k8s-dra-driver-gpu cmd/webhook/main.go), so a ValidatingWebhookConfiguration written for their
webhook fits this one. The answer itself is gpudra.driver.admission.review_response (shared with
`gpudra validate`). Served with the standard library's threading HTTP server wrapped in TLS: one small JSON
request per admission needs nothing more.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpudra.driver.admission import ReviewError, review_response
from gpudra.driver.slices import DEFAULT_DRIVER_NAME
from gpudra.errors import GpudraError

log = logging.getLogger(__name__)

VALIDATE_PATH = "/validate-resource-claim-parameters"
READY_PATH = "/readyz"
# The API server's own limit on a request body (3 MiB, apiserver's MaxRequestBodyBytes); an AdmissionReview
# holds one object, so anything bigger is not from it.
MAX_BODY_BYTES = 3 * 1024 * 1024
REQUEST_TIMEOUT_S = 10.0  # the API server's default webhook timeout: a client slower than that is not it


class WebhookError(GpudraError):
    """The server cannot start (certificate files, address in use)."""


class _Handler(BaseHTTPRequestHandler):
    server: "WebhookServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s %s", self.address_string(), format % args)

    def setup(self) -> None:
        self.request.settimeout(REQUEST_TIMEOUT_S)
        super().setup()

    def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == READY_PATH:
            self._send(200, b"ok")
        else:
            self._send(404, b"not found\n")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?", 1)[0] != VALIDATE_PATH:
            self._send(404, b"not found\n")
            return
        content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip()
        if content_type != "application/json":
            self._send(415, f"contentType={content_type}, expected application/json\n".encode())
            return
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self._send(411, b"a Content-Length is required\n")
            return
        if length < 0 or length > MAX_BODY_BYTES:
            self._send(413, f"the body must be at most {MAX_BODY_BYTES} bytes\n".encode())
            self.close_connection = True
            return
        body = self.rfile.read(length)
        try:
            answer = review_response(json.loads(body), self.server.driver_name)
        except (ValueError, RecursionError) as exc:  # ReviewError is a ValueError, and so is bad JSON
            message = str(exc) if isinstance(exc, ReviewError) else f"the body is not JSON: {type(exc).__name__}"
            self._send(400, f"failed to read AdmissionReview from request body: {message}\n".encode())
            return
        response = answer["response"]
        if not response["allowed"]:
            log.info("refused %s: %s", response["uid"], response.get("status", {}).get("message"))
        self._send(200, json.dumps(answer).encode(), "application/json")


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], cert_file: str, key_file: str,
                 driver_name: str = DEFAULT_DRIVER_NAME):
        self.driver_name = driver_name
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise WebhookError(f"cannot load --tls-cert-file {cert_file} / --tls-private-key-file {key_file}: "
                               f"{exc}") from None
        try:
            super().__init__(address, _Handler)
        except OSError as exc:
            raise WebhookError(f"cannot listen on {address[0] or '*'}:{address[1]}: {exc.strerror or exc}") from None
        self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    # do_handshake_on_connect=False: the TLS handshake happens in the request's thread (on its first read, under
    # REQUEST_TIMEOUT_S), so a client that connects and says nothing does not stall the accept loop.

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that fails the handshake or hangs up is its own problem: a log line, not a traceback."""
        import sys

        log.info("connection from %s failed: %s", client_address, sys.exc_info()[1])

    @property
    def port(self) -> int:
        return int(self.server_address[1])


def start_in_thread(server: WebhookServer) -> threading.Thread:
    """Serve in a daemon thread (tests, embedding); `server.shutdown()` stops it."""
    thread = threading.Thread(target=server.serve_forever, name="gpudra-webhook", daemon=True)
    thread.start()
    return thread
