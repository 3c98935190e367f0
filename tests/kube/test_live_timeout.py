"""An API server that accepts connections but never answers: every live-cluster command ends with exit 2 and a
message after --request-timeout, once (no silent retries), instead of hanging (issue 11)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from support.fake_http import write_kubeconfig
from gpudra.kube.reader import ClusterReadError, read_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class SilentServer:
    """Accepts TCP connections, reads what is sent, never writes a byte; counts connections and requests."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.address = self.listener.getsockname()
        self.connections: list[socket.socket] = []
        self.requests = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        self.listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                continue
            self.connections.append(connection)
            threading.Thread(target=self._drain, args=(connection,), daemon=True).start()

    def _drain(self, connection):
        buffered = b""
        while not self._stop.is_set():
            try:
                connection.settimeout(0.1)
                data = connection.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data:
                return
            buffered += data
            while b"\r\n\r\n" in buffered:
                _, buffered = buffered.split(b"\r\n\r\n", 1)
                self.requests += 1

    def close(self):
        self._stop.set()
        self._thread.join()
        for connection in self.connections:
            connection.close()
        self.listener.close()


@pytest.fixture
def silent(tmp_path):
    server = SilentServer()
    yield server, write_kubeconfig(str(tmp_path / "kubeconfig"), server.address)
    server.close()


def test_reading_a_silent_cluster_fails_after_one_request(silent):
    server, kubeconfig = silent
    with pytest.raises(ClusterReadError, match=r"did not answer GET /api/v1/nodes within 0\.5 s"):
        read_cluster(kubeconfig=kubeconfig, request_timeout=0.5)
    assert server.requests == 1  # the timed-out GET is not retried behind the user's back


@pytest.mark.parametrize("command", [["schedule"], ["allocate"], ["explain", "pod/x"],
                                     ["validate", "--fix", "-f", "examples/article"]])
def test_live_commands_end_with_exit_2_and_a_message(silent, command):
    _server, kubeconfig = silent
    done = subprocess.run([sys.executable, "-m", "gpudra", *command, "--kubeconfig", kubeconfig,
                           "--request-timeout", "1"], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)  # a hang fails here
    assert done.returncode == 2, done.stderr
    assert "did not answer" in done.stderr and "--request-timeout" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["schedule", "allocate", "explain", "validate"])
def test_the_default_timeout_is_finite(command):
    from gpudra.cli import cli
    from gpudra.cli.options import DEFAULT_REQUEST_TIMEOUT_S

    assert 0 < DEFAULT_REQUEST_TIMEOUT_S <= 60
    click_command = cli.get_command(None, command)
    extra = {"explain": ["pod/x"], "validate": ["-f", "x"]}.get(command, [])
    context = click_command.make_context(command, ["--kubeconfig", "k", *extra])
    assert context.params["request_timeout"] == DEFAULT_REQUEST_TIMEOUT_S
