"""`gpudra driver webhook`: the validating admission webhook for opaque configs, over HTTPS.

The API server POSTs an admission.k8s.io/v1 AdmissionReview (Content-Type application/json) to
/validate-resource-claim-parameters and expects one back; /readyz answers "ok" for probes. The paths are
NVIDIA's (k8s-dra-driver-gpu cmd/webhook/main.go), so a ValidatingWebhookConfiguration written for their
webhook fits this one. The answer itself is gpudra.webhook.admission.review_response (shared with
`gpudra validate`).

With `failurePolicy: Fail` a webhook that stops answering blocks every claim write in the cluster, so the server
is built to survive hostile clients, each bound explicit (`Limits`):

- one event loop (asyncio's own server, no thread per connection); TLS runs in memory BIOs on each accepted
  TCP connection (`_Connection`), so a client that never finishes its handshake is counted like any other;
- at most `max_connections` connections: one more evicts the oldest connection still waiting for its request
  (a slow client), never one whose request is being answered;
- one deadline per request, not per read: the request must be complete and answered within `request_timeout_s`
  of the connection being ready for it (accepted, or the previous answer sent), so trickling a byte at a time
  gains nothing;
- memory: bodies being received or answered share `body_budget_bytes`; decoding one costs up to `decoded_cost`
  (an upper bound measured against json.loads and the check, see tests), and what is being decoded at once shares
  `decode_budget_bytes`; a body that alone would exceed it is refused (413) before it is decoded;
- `workers` threads decode and check reviews, so the loop keeps answering /readyz meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from gpudra.webhook.admission import ReviewError, review_response
from gpudra.gpuplugin.slices import DEFAULT_DRIVER_NAME
from gpudra.errors import GpudraError

log = logging.getLogger(__name__)

VALIDATE_PATH = "/validate-resource-claim-parameters"
READY_PATH = "/readyz"
# The API server's own limit on a request body (3 MiB, apiserver's MaxRequestBodyBytes); an AdmissionReview
# holds one object (two for an update, each at most etcd's 1.5 MiB), so anything bigger is not from it.
MAX_BODY_BYTES = 3 * 1024 * 1024
REQUEST_TIMEOUT_S = 10.0  # the API server's default webhook timeout: a client slower than that is not it
# What json.loads and the check take per byte of body, at most (tests/webhook/test_driver_webhook_attacks.py measures it
# with tracemalloc): a scalar-heavy body ~13 bytes per byte ("ab", in a list), and each `{` or `[` (counted in
# strings too, which only overestimates) a container of up to ~190 bytes (a one-key dict and its slot).
DECODED_BYTES_PER_BYTE = 14
DECODED_BYTES_PER_CONTAINER = 200


@dataclass(frozen=True)
class Limits:
    max_connections: int = 128
    workers: int = 2
    request_timeout_s: float = REQUEST_TIMEOUT_S
    max_header_bytes: int = 16 * 1024
    max_body_bytes: int = MAX_BODY_BYTES
    body_budget_bytes: int = 8 * MAX_BODY_BYTES
    decode_budget_bytes: int = 64 * 1024 * 1024


class WebhookError(GpudraError):
    """The server cannot start (certificate files, address in use)."""


class _HTTPError(Exception):
    """An answer that ends the connection: the request could not be read as one."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def decoded_cost(body: bytes | bytearray) -> int:
    """An upper bound of the memory decoding and checking `body` takes (bytes.count runs at memory speed)."""
    return len(body) * DECODED_BYTES_PER_BYTE + (body.count(b"{") + body.count(b"[")) * DECODED_BYTES_PER_CONTAINER


class _Budget:
    """Bytes shared by requests: `acquire` waits until an amount fits; the first waiter that fits goes (a big
    request waiting does not hold up small ones; the request deadline bounds every wait)."""

    def __init__(self, total: int):
        self.total, self.used = total, 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def acquire(self, amount: int) -> None:
        if self.used + amount <= self.total:
            self.used += amount
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((amount, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(amount)  # granted just as the deadline struck
            raise

    def release(self, amount: int) -> None:
        self.used -= amount
        for entry in list(self._waiters):
            amount_wanted, waiter = entry
            if waiter.done():
                self._waiters.remove(entry)
            elif self.used + amount_wanted <= self.total:
                self._waiters.remove(entry)
                self.used += amount_wanted
                waiter.set_result(None)


PLAIN_BUFFER_BYTES = 64 * 1024  # decrypted bytes a connection holds before its socket is no longer read
TLS_READ_BYTES = 16 * 1024  # one TLS record


class _Connection(asyncio.Protocol):
    """One client: TLS over memory BIOs on the plain TCP transport, read as a stream.

    Not asyncio's own TLS transport (loop.start_tls / create_server(ssl=...)): that one allocates a 256 KiB read
    buffer per connection up front and frees it only when the garbage collector breaks its reference cycles, so
    500 connections churned through the limit took the process past 170 MB. Here a connection costs its TLS state
    and what it has sent: at most PLAIN_BUFFER_BYTES decrypted plus one socket read of ciphertext; past that its
    socket is not read."""

    def __init__(self, server: "WebhookServer"):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = server.context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._handshaken = False
        self._plain = bytearray()
        self._closed = False  # no more bytes will come: the client's close, a TLS error, the connection lost
        self._paused = False
        self._changed = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self.waiting = True  # False while a request is being answered
        self.waiting_since = 0.0  # loop time at which it became ready for its next request

    # -- asyncio.Protocol ---------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server._accepted(self)

    def data_received(self, data: bytes) -> None:
        self._incoming.write(data)
        self._decrypt()

    def eof_received(self) -> bool:
        self._incoming.write_eof()
        self._decrypt()
        self._closed = True
        self._changed.set()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._changed.set()
        self._writable.set()
        self.server._lost(self)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- TLS ------------------------------------------------------------------------------------------------------
    def _decrypt(self) -> None:
        try:
            if not self._handshaken:
                self._tls.do_handshake()
                self._handshaken = True
            while len(self._plain) < PLAIN_BUFFER_BYTES:
                chunk = self._tls.read(TLS_READ_BYTES)
                if not chunk:
                    self._closed = True  # the client's close_notify
                    break
                self._plain += chunk
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as exc:
            log.debug("TLS with %s failed: %s", self.peer, exc)
            self._closed = True
        self._flush()
        if self._closed and not self._plain:
            self.abort()
        elif len(self._plain) >= PLAIN_BUFFER_BYTES and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._changed.set()

    def _flush(self) -> None:
        data = self._outgoing.read()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    @property
    def peer(self) -> Any:
        return self.transport.get_extra_info("peername") if self.transport is not None else None

    def abort(self) -> None:
        self._closed = True
        self._changed.set()
        if self.transport is not None:
            self.transport.abort()

    # -- the stream -----------------------------------------------------------------------------------------------
    async def read(self, limit: int) -> bytes:
        """Up to `limit` decrypted bytes; b"" once the client has closed."""
        while not self._plain:
            if self._closed:
                return b""
            self._changed.clear()
            await self._changed.wait()
        data = bytes(self._plain[:limit])
        del self._plain[:limit]
        if self._paused and len(self._plain) < PLAIN_BUFFER_BYTES and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
            self._decrypt()  # records already received but left encrypted
        return data

    async def read_head(self, limit: int) -> bytes | None:
        """The request head through its blank line; None when closed before a byte of it."""
        while True:
            end = self._plain.find(b"\r\n\r\n")
            if end >= 0 and end + 4 <= limit:
                return await self.read(end + 4)
            if end >= 0 or len(self._plain) >= limit:
                raise _HTTPError(431, f"the request head must be at most {limit} bytes")
            if self._closed:
                if self._plain:
                    raise EOFError("the request head ended early")
                return None
            self._changed.clear()
            await self._changed.wait()

    async def write(self, data: bytes) -> None:
        if self._closed or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the connection is closed")
        self._tls.write(data)
        self._flush()
        await self._writable.wait()

    def close(self) -> None:
        """After the last answer: the socket closes once what is buffered is sent."""
        if self.transport is not None:
            self.transport.close()


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    keep_alive: bool


class WebhookServer:
    """The webhook on one listening socket; `serve_forever` runs it until `shutdown` (from another thread)."""

    def __init__(self, address: tuple[str, int], cert_file: str, key_file: str,
                 driver_name: str = DEFAULT_DRIVER_NAME, limits: Limits = Limits()):
        self.driver_name = driver_name
        self.limits = limits
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            self.context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise WebhookError(f"cannot load --tls-cert-file {cert_file} / --tls-private-key-file {key_file}: "
                               f"{exc}") from None
        try:
            self.socket = socket.create_server(address, backlog=socket.SOMAXCONN)
        except OSError as exc:
            raise WebhookError(f"cannot listen on {address[0] or '*'}:{address[1]}: {exc.strerror or exc}") from None
        self.socket.setblocking(False)
        self._connections: dict[int, _Connection] = {}  # insertion order: the oldest first
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopped = threading.Event()
        self._stopped.set()
        self._shutdown_requested = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._workers: ThreadPoolExecutor | None = None
        self._bodies = _Budget(limits.body_budget_bytes)
        self._decoding = _Budget(limits.decode_budget_bytes)

    @property
    def port(self) -> int:
        return int(self.socket.getsockname()[1])

    # ----- life cycle ------------------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        self._stopped.clear()
        try:
            asyncio.run(self._serve())
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serving and wait until `serve_forever` has returned (callable from any other thread)."""
        self._shutdown_requested = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass  # the loop is already closed
        self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(_log_loop_error)
        self._stop = asyncio.Event()
        self._bodies = _Budget(self.limits.body_budget_bytes)
        self._decoding = _Budget(self.limits.decode_budget_bytes)
        workers = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="gpudra-webhook")
        self._workers = workers
        server = await self._loop.create_server(lambda: _Connection(self), sock=self.socket, backlog=socket.SOMAXCONN)
        try:
            if not self._shutdown_requested:
                await self._stop.wait()
        finally:
            server.close()
            for connection in list(self._connections.values()):
                connection.abort()
            workers.shutdown(wait=False, cancel_futures=True)
            self._loop = None

    # ----- one connection ----------------------------------------------------------------------------------------
    def _accepted(self, connection: _Connection) -> None:
        """Count the connection in (at the limit, the oldest one waiting for its request makes room) and serve it."""
        loop = asyncio.get_running_loop()
        if len(self._connections) >= self.limits.max_connections:
            oldest = min((c for c in self._connections.values() if c.waiting),
                         key=lambda c: c.waiting_since, default=None)
            if oldest is None:  # every connection is being answered: this one waits for none of them
                connection.abort()
                return
            oldest.waiting = False
            self._connections.pop(id(oldest), None)
            oldest.abort()
        connection.waiting_since = loop.time()
        self._connections[id(connection)] = connection
        task = loop.create_task(self._serve_connection(connection))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _lost(self, connection: _Connection) -> None:
        self._connections.pop(id(connection), None)

    async def _serve_connection(self, connection: _Connection) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                async with asyncio.timeout_at(connection.waiting_since + self.limits.request_timeout_s):
                    keep_alive = await self._exchange(connection)
                if not keep_alive:
                    connection.close()
                    return
                connection.waiting, connection.waiting_since = True, loop.time()
        except (OSError, EOFError, TimeoutError) as exc:
            log.debug("connection from %s ended: %s", connection.peer, type(exc).__name__)
            connection.abort()
        except Exception:  # noqa: BLE001 - one client's surprise must not go unnoticed, nor stop the server
            log.exception("connection from %s failed", connection.peer)
            connection.abort()
        finally:
            self._connections.pop(id(connection), None)

    async def _exchange(self, connection: _Connection) -> bool:
        """Read one request and answer it; whether the connection stays open for another."""
        try:
            request = await self._read_head(connection)
            if request is None:
                return False  # closed between requests
            status, body, content_type = await self._handle(request, connection)
            keep_alive = request.keep_alive
        except _HTTPError as exc:
            status, body, content_type, keep_alive = exc.status, f"{exc}\n".encode(), "text/plain", False
        connection.waiting = False
        head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", f"Content-Type: {content_type}",
                f"Content-Length: {len(body)}"]
        if not keep_alive:
            head.append("Connection: close")
        await connection.write(("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body)
        return keep_alive

    async def _read_head(self, connection: _Connection) -> _Request | None:
        raw = await connection.read_head(self.limits.max_header_bytes)
        if raw is None:
            return None
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
            raise _HTTPError(400, "malformed request line")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise _HTTPError(400, "malformed header line")
            headers[name.lower()] = value.strip()
        connection_header = headers.get("connection", "").lower()
        keep_alive = parts[2] == "HTTP/1.1" and "close" not in connection_header
        return _Request(parts[0], parts[1].split("?", 1)[0], headers, keep_alive)

    async def _handle(self, request: _Request, connection: _Connection) -> tuple[int, bytes, str]:
        text = "text/plain; charset=utf-8"
        if "transfer-encoding" in request.headers:
            raise _HTTPError(501, "a chunked body is not read: send a Content-Length")
        length_header = request.headers.get("content-length", "")
        if length_header and not length_header.isdigit():
            raise _HTTPError(400, "Content-Length is not a number")
        length = int(length_header or "0")
        if request.method == "GET" and length == 0:
            return (200, b"ok", text) if request.path == READY_PATH else (404, b"not found\n", text)
        if request.method != "POST" or request.path != VALIDATE_PATH:
            raise _HTTPError(404 if request.method in ("GET", "POST") else 405, "not found")
        content_type = request.headers.get("content-type", "").split(";", 1)[0].strip()
        if content_type != "application/json":
            raise _HTTPError(415, f"contentType={content_type}, expected application/json")
        if not length_header:
            raise _HTTPError(411, "a Content-Length is required")
        if length > self.limits.max_body_bytes:
            raise _HTTPError(413, f"the body must be at most {self.limits.max_body_bytes} bytes")
        return await self._review(connection, length)

    async def _review(self, connection: _Connection, length: int) -> tuple[int, bytes, str]:
        """Receive the body within the body budget, then decode and check it on a worker within the decoding
        budget; both are given back when the worker is done, even if the deadline struck meanwhile."""
        await self._bodies.acquire(length)
        handed_over = False
        try:
            body = await _receive(connection, length)
            connection.waiting = False  # received: from here on, it is no slow client
            cost = decoded_cost(body)
            if cost > self._decoding.total:
                raise _HTTPError(413, f"decoding this review would take more than the webhook's "
                                      f"{self._decoding.total >> 20} MiB (its {cost >> 20} MiB estimate)")
            await self._decoding.acquire(cost)
            future = asyncio.get_running_loop().run_in_executor(self._workers, self._answer, body)

            def done(_: object) -> None:
                self._decoding.release(cost)
                self._bodies.release(length)

            future.add_done_callback(done)
            handed_over = True
            return await asyncio.shield(future)
        finally:
            if not handed_over:
                self._bodies.release(length)

    def _answer(self, body: bytes | bytearray) -> tuple[int, bytes, str]:
        """On a worker: the review's answer (status, body, content type)."""
        try:
            answer = review_response(json.loads(body), self.driver_name)
        except (ValueError, RecursionError) as exc:  # ReviewError is a ValueError, and so is bad JSON
            message = str(exc) if isinstance(exc, ReviewError) else f"the body is not JSON: {type(exc).__name__}"
            return 400, f"failed to read AdmissionReview from request body: {message}\n".encode(), "text/plain"
        response = answer["response"]
        if not response["allowed"]:
            log.info("refused %s: %s", response["uid"], str(response.get("status", {}).get("message"))[:1000])
        return 200, json.dumps(answer).encode(), "application/json"


async def _receive(connection: _Connection, length: int) -> bytearray:
    """`length` bytes into one buffer of that size (the budget counts `length`, not chunks and their joins)."""
    body = bytearray(length)
    view = memoryview(body)
    received = 0
    while received < length:
        chunk = await connection.read(min(length - received, PLAIN_BUFFER_BYTES))
        if not chunk:
            raise asyncio.IncompleteReadError(bytes(view[:received]), length)
        view[received:received + len(chunk)] = chunk
        received += len(chunk)
    return body


def _log_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A client's failure (a reset in the TLS layer, say) is a log line, not a traceback."""
    log.debug("webhook: %s: %s", context.get("message"), context.get("exception"))


def start_in_thread(server: WebhookServer) -> threading.Thread:
    """Serve in a daemon thread (tests, embedding); `server.shutdown()` stops it."""
    thread = threading.Thread(target=server.serve_forever, name="gpudra-webhook", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while server._loop is None and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)  # until the loop runs, so that shutdown() finds it
    return thread
