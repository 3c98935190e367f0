"""The admission webhook against hostile clients (issue 35): slow clients, many connections, big reviews.

With `failurePolicy: Fail` a webhook that stops answering blocks every claim write, so each bound of
gpudra.webhook.server.Limits is attacked here over loopback, with loops that stop by themselves: one deadline per
request (not per read), the connection limit, the memory estimate that gates decoding (checked against what
json.loads and the check really allocate, by tracemalloc), and all of it at once against the `gpudra driver webhook`
process: 500 slow connections and 20 concurrent 3 MiB reviews, while /readyz must keep answering within 1 s and the
process's own peak RSS (VmHWM) stay under 200 MB.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import multiprocessing
import os
import re
import select
import signal
import ssl
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from gpudra.webhook.server import READY_PATH, VALIDATE_PATH, Limits, WebhookServer, decoded_cost, start_in_thread

from test_driver_webhook import certificate as certificate  # noqa: F401 - the fixture

MIB = 1024 * 1024


def _review(obj_extra: dict, configs: list) -> dict:
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "d"},
           "spec": {"devices": {"requests": [], "config": configs}}, **obj_extra}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "operation": "CREATE", "object": obj,
        "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"}}}


def _filled(size: int, unit: object, where: str = "junk") -> bytes:
    """A review of about `size` bytes, mostly `unit` repeated (in the object's `junk` field or as its configs)."""
    skeleton = len(json.dumps(_review({}, [])))
    count = max(1, (size - skeleton) // (len(json.dumps(unit, separators=(",", ":"))) + 1))
    review = _review({"junk": [unit] * count}, []) if where == "junk" else _review({}, [unit] * count)
    return json.dumps(review, separators=(",", ":")).encode()


_BAD_GPU = {"opaque": {"driver": "gpu.nvidia.com", "parameters": {"apiVersion": "resource.nvidia.com/v1beta1",
                                                                   "kind": "GpuConfig", "x" * 40: 0}}}
SHAPES = {  # what costs json.loads and the check most per byte, and configs that each make a problem message
    "empty dicts": ({}, "configs"), "empty lists": ([], "junk"), "dicts in lists": ([{}], "junk"),
    "lists in lists": ([[]], "junk"), "one-key dicts of dicts": ({"a": {}}, "junk"),
    "empty-key dicts of dicts": ({"": {}}, "junk"), "two-letter strings": ("ab", "junk"), "floats": (1.5, "junk"),
    "large ints": (123456789, "junk"), "refused GPU configs": (_BAD_GPU, "configs"),
    "refused channel configs": ({"opaque": {"driver": "compute-domain.nvidia.com", "parameters": {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig",
        "domainID": "Z" * 70}}}, "configs"),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_decoding_estimate_bounds_what_decoding_takes(certificate, shape):  # noqa: F811
    """`decoded_cost` gates the workers; it must not be below what decoding, checking and encoding the answer
    really allocate (tracemalloc's peak), or the memory budget would not bound memory."""
    unit, where = SHAPES[shape]
    body = _filled(512 * 1024, unit, where)
    server = WebhookServer(("127.0.0.1", 0), *certificate)
    try:
        tracemalloc.start()
        status, _, _ = server._answer(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        server.server_close()
    assert status in (200, 400)
    assert peak <= decoded_cost(body), f"{shape}: {peak / len(body):.1f} bytes per byte, estimated " \
                                       f"{decoded_cost(body) / len(body):.1f}"


# ----- one server in this process, small limits -------------------------------------------------------------
def _client_context(cert_file: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cert_file)


async def _get_ready(port: int, context: ssl.SSLContext) -> float:
    """Seconds for a fresh connection's GET /readyz to be answered "ok"."""
    start = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    try:
        writer.write(f"GET {READY_PATH} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        answer = await reader.read()
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\nok"), answer
    return time.monotonic() - start


@pytest.fixture
def small_server(certificate):  # noqa: F811
    server = WebhookServer(("127.0.0.1", 0), *certificate,
                           limits=Limits(max_connections=8, request_timeout_s=1.5))
    start_in_thread(server)
    yield server
    server.shutdown()
    server.server_close()


def test_a_request_has_one_deadline_not_one_per_read(small_server, certificate):  # noqa: F811
    """A byte every 0.2 s never lets a per-read timeout expire; the request's deadline (1.5 s here) closes the
    connection all the same. The untrickled control is answered on a connection that stayed open 1 s idle."""
    async def attack() -> tuple[float, int, bool]:
        context = _client_context(certificate[0])
        reader, writer = await asyncio.open_connection("127.0.0.1", small_server.port, ssl=context,
                                                       server_hostname="localhost")
        start, sent, closed = time.monotonic(), 0, False
        request = f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: x\r\n" + "X-Slow: 1\r\n" * 100
        for byte in request.encode():  # 1,100 bytes at 0.2 s each: 220 s, unless the server closes first
            try:
                writer.write(bytes([byte]))
                await writer.drain()
                if await asyncio.wait_for(reader.read(1), 0.2) == b"":
                    closed = True  # closed by the server
                    break
            except asyncio.TimeoutError:
                sent += 1
                continue
            except (ConnectionError, ssl.SSLError):
                closed = True
                break
        writer.close()
        return time.monotonic() - start, sent, closed

    elapsed, sent, closed = asyncio.run(attack())
    # the server closed it, after the request's deadline (not on the first quiet read), long before the trickle
    # would have ended: what is asserted is which limit acted, not how fast the machine was
    assert closed and elapsed > 1.0 and sent < 100, (elapsed, sent)


def test_connections_beyond_the_limit_evict_the_oldest_waiting_one(small_server, certificate):  # noqa: F811
    """Eight idle connections fill the server; a ninth (a probe) is answered, and the oldest idle one was closed
    to make room."""
    async def scenario() -> tuple[float, bytes, list[bytes]]:
        context = _client_context(certificate[0])
        idle = []
        for _ in range(8):
            idle.append(await asyncio.open_connection("127.0.0.1", small_server.port, ssl=context,
                                                      server_hostname="localhost"))
            await asyncio.sleep(0.02)
        latency = await asyncio.wait_for(_get_ready(small_server.port, context), 30)  # answered, not stalled
        oldest = await asyncio.wait_for(idle[0][0].read(), 1.0)  # b"": closed by the server
        others = []
        for reader, writer in idle[1:]:
            try:
                others.append(await asyncio.wait_for(reader.read(1), 0.05))
            except asyncio.TimeoutError:
                others.append(b"open")
            writer.close()
        idle[0][1].close()
        return latency, oldest, others

    latency, oldest, others = asyncio.run(scenario())
    assert latency > 0 and oldest == b""
    assert others.count(b"open") == 7


def test_a_review_too_costly_to_decode_is_refused_undecoded(small_server, certificate):  # noqa: F811
    """A million empty configs in 3 MiB would take ~75 MB to decode: refused with 413 before json.loads runs."""
    import http.client

    body = _filled(3 * MIB - 1024, {}, "configs")
    connection = http.client.HTTPSConnection("localhost", small_server.port, context=_client_context(certificate[0]),
                                             timeout=10)
    try:
        connection.request("POST", VALIDATE_PATH, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 413 and b"estimate" in response.read()
    finally:
        connection.close()


# ----- all at once, against the `gpudra driver webhook` process ------------------------------------------------
SLOW_TLS, SLOW_HANDSHAKE, BIG_REVIEWS = 250, 250, 20
ATTACK_S = 14.0  # longer than the 10 s request deadline, so every slow connection meets it


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        return int(re.search(rf"^{field}:\s+(\d+) kB", fh.read(), re.M).group(1))


async def _trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, stop: float) -> str:
    """`data` a byte a second until the server closes the connection ("closed") or the attack ends ("held")."""
    try:
        for byte in data:
            if time.monotonic() > stop:
                return "held"
            writer.write(bytes([byte]))
            try:
                if await asyncio.wait_for(reader.read(1), 1.0) == b"":
                    return "closed"
            except asyncio.TimeoutError:
                continue
        return "held"
    except (OSError, ssl.SSLError):
        return "closed"
    finally:
        writer.close()


async def _slow_tls_client(port: int, context: ssl.SSLContext, stop: float) -> str:
    """TLS done, then a request head a byte a second."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    except (OSError, ssl.SSLError):
        return "refused"
    return await _trickle(reader, writer, f"POST {VALIDATE_PATH} HTTP/1.1\r\n".encode() * 4, stop)


async def _slow_handshake_client(port: int, hello: bytes, stop: float) -> str:
    """A real ClientHello, a byte a second: the handshake never completes."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return "refused"
    return await _trickle(reader, writer, hello, stop)


def _client_hello() -> bytes:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(),
                                                            server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def _big_review(port: int, context: ssl.SSLContext, body: bytes) -> str:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        writer.write(f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        answer = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        return answer.split(b" ", 2)[1].decode() if answer else "closed"
    except (OSError, ssl.SSLError, asyncio.TimeoutError) as exc:
        return type(exc).__name__


async def _attack(port: int, cert_file: str) -> tuple[list[str], list[str]]:
    context = _client_context(cert_file)
    hello = _client_hello()
    # half cost too much to decode (refused undecoded), half are decoded (a string-heavy object, allowed)
    bodies = [_filled(3 * MIB - 1024, {}, "configs") if i % 2 else _filled(3 * MIB - 1024, "ab")
              for i in range(BIG_REVIEWS)]
    assert all(2.9 * MIB < len(b) <= 3 * MIB for b in bodies)
    stop = time.monotonic() + ATTACK_S
    slow = []
    for i in range(max(SLOW_TLS, SLOW_HANDSHAKE)):  # interleaved, so both kinds meet the connection limit
        if i < SLOW_TLS:
            slow.append(asyncio.create_task(_slow_tls_client(port, context, stop)))
        if i < SLOW_HANDSHAKE:
            slow.append(asyncio.create_task(_slow_handshake_client(port, hello, stop)))
    big = [asyncio.create_task(_big_review(port, context, body)) for body in bodies]
    return list(await asyncio.gather(*slow)), list(await asyncio.gather(*big))


def _attacker(port: int, cert_file: str, results: multiprocessing.Queue) -> None:
    results.put(asyncio.run(_attack(port, cert_file)))


def _probe(port: int, cert_file: str) -> float:
    """Seconds for GET /readyz on a fresh connection (5.0: no answer within 5 s, the webhook stalled)."""
    start = time.monotonic()
    connection = http.client.HTTPSConnection("localhost", port, context=_client_context(cert_file), timeout=5)
    try:
        connection.request("GET", READY_PATH)
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, b"ok")
    except (OSError, ssl.SSLError):
        return 5.0
    finally:
        connection.close()
    return time.monotonic() - start


def test_slow_clients_and_big_reviews_leave_the_webhook_answering(certificate):  # noqa: F811
    """500 slow connections (half trickling a ClientHello, half a request head after TLS, a byte a second each) and
    20 concurrent 3 MiB reviews from another process, while this one probes /readyz every 0.25 s."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent.parent.parent),
                                                                      os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, "-m", "gpudra", "driver", "webhook", "--tls-cert-file", certificate[0],
                                "--tls-private-key-file", certificate[1], "--port", "0", "--bind-address", "127.0.0.1"],
                               stderr=subprocess.PIPE, text=True, env=env)
    attacker = None
    try:
        assert process.stderr is not None
        line = ""
        while "ready:" not in line:
            assert select.select([process.stderr], [], [], 60)[0], "the webhook did not start"
            line = process.stderr.readline()
            assert line, f"the webhook exited: {process.wait()}"
        port = int(re.search(r":(\d+)\s*$", line).group(1))
        context = multiprocessing.get_context("fork")
        results: multiprocessing.Queue = context.Queue()
        attacker = context.Process(target=_attacker, args=(port, certificate[0], results), daemon=True)
        attacker.start()
        probes, rss, files = [], [], []
        stop = time.monotonic() + ATTACK_S + 1
        while time.monotonic() < stop:  # bounded: ATTACK_S + 1 s of probes, each at most 5 s
            rss.append(_status_kib(process.pid, "VmRSS"))
            files.append(len(os.listdir(f"/proc/{process.pid}/fd")))
            probes.append(_probe(port, certificate[0]))
            if os.environ.get("WEBHOOK_ATTACK_TRACE"):
                print(f"{ATTACK_S + 1 - (stop - time.monotonic()):5.2f} s: readyz {probes[-1]:.3f} s, "
                      f"RSS {rss[-1] >> 10} MiB, {files[-1]} open files")
            time.sleep(0.25)
        slow, reviews = results.get(timeout=60)
        peak_kib = _status_kib(process.pid, "VmHWM")
        assert process.poll() is None, "the webhook died"
    finally:
        if attacker is not None:
            attacker.join(timeout=30)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    print(f"readyz: {len(probes)} probes, max {max(probes):.3f} s; RSS peak {peak_kib / 1024:.0f} MiB (sampled max "
          f"{max(rss) / 1024:.0f} MiB); at most {max(files)} open files; slow clients "
          f"{ {r: slow.count(r) for r in set(slow)} }; reviews { {r: reviews.count(r) for r in set(reviews)} }")
    assert code == 0
    # every probe answered (a stalled webhook leaves one unanswered for 5 s); how fast is the machine's business
    assert len(probes) >= 10 and max(probes) < 5.0, probes
    assert peak_kib < 200 * 1024, f"{peak_kib} KiB"
    assert slow.count("held") == 0, "a slow client outlived the request deadline"
    assert set(reviews) <= {"200", "413", "503"} and reviews.count("413") == BIG_REVIEWS // 2, reviews
    assert "200" in reviews
