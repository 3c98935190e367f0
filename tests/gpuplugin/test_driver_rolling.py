"""Rolling update of the driver pod: a second driver process registers beside the first (per-pod socket names),
the kubelet moves to it, the first one stops, and no prepare or unprepare fails in between, including claims
prepared by the old process and unprepared by the new one."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import pytest
import yaml

from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim
from gpudra.kubeletplugin.paths import DriverPaths, dra_socket_name, registration_socket_name

NODE = "node-r"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _start(root: str, uid: str, kubeconfig: str | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    source = (["--kubeconfig", kubeconfig, "--backend", "simulated"] if kubeconfig
              else ["--claims", os.path.join(root, "claims")])
    return subprocess.Popen([sys.executable, "-m", "gpudra", "driver", "run", "--node-name", NODE, "--root", root,
                             *source, "--rolling-update-pod-uid", uid, "--no-device-health", "--no-fsync"],
                            env=env, stderr=subprocess.PIPE, text=True)


def _wait_ready(proc: subprocess.Popen) -> None:
    for line in proc.stderr:  # the driver says "ready: <socket>" once the kubelet may call it
        if line.startswith("ready:"):
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep draining
            return
    raise AssertionError(f"driver exited with {proc.wait()} before it was ready")


class Kubelet:
    """The kubelet's side: each call goes to the most recently registered instance that answers GetInfo."""

    def __init__(self, paths: DriverPaths, root: str, api=None):
        self.paths = paths
        self.root = root
        self.api = api  # the real API server the drivers read claims from, or None: the claims directory
        self.calls: list[tuple[str, str, str, str]] = []  # (socket, op, claim name, error)
        self.stop = threading.Event()

    def _client(self) -> KubeletClient:
        for socket in self.paths.registration_sockets():
            client = KubeletClient(socket)
            try:
                client.register()
                return client
            except (grpc.RpcError, RuntimeError):
                client.close()  # not connected (an instance going away): the kubelet takes another one
        raise AssertionError("no driver instance registered")

    def call(self, op: str, name: str, uid: str) -> None:
        client = self._client()
        try:
            reply = (client.prepare if op == "prepare" else client.unprepare)([("default", name, uid)])
            error = reply.claims[uid].error
        except grpc.RpcError as exc:
            error = f"rpc: {exc.code()} {exc.details()}"
        finally:
            client.close()
        self.calls.append((os.path.basename(client.registration_socket), op, name, error))

    def run(self) -> None:
        previous = None
        index = 0
        while not self.stop.is_set():
            name = f"c{index}"
            claim = allocated_claim(name, [{"request": "gpu", "device": f"gpu-{index % 4}"}], node_name=NODE)
            if self.api is not None:
                self.api.claims[("default", name)] = claim
            else:
                with open(os.path.join(self.root, "claims", f"default_{name}.yaml"), "w", encoding="utf-8") as fh:
                    yaml.safe_dump(claim, fh)
            if previous is not None:
                self.call("unprepare", *previous)  # frees the device before it comes round again
            self.call("prepare", name, claim["metadata"]["uid"])
            previous = (name, claim["metadata"]["uid"])
            index += 1
        if previous is not None:
            self.call("unprepare", *previous)

    def served_by(self, uid: str) -> int:
        return sum(1 for socket, *_ in self.calls if uid in socket)


def _until(predicate, what: str, attempts: int = 1200) -> None:
    for _ in range(attempts):
        if predicate():
            return
        time.sleep(0.025)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(params=["claims-directory", pytest.param("kube-apiserver", marks=pytest.mark.timeout(3600))])
def api(request):
    """Where the drivers read claims and publish slices: a claims directory, or the real kube-apiserver 1.34
    (built from Go modules; skipped without Go)."""
    if request.param == "claims-directory":
        yield None
        return
    from support.realkube import RealApiServer

    with RealApiServer() as server:
        server.add_node(NODE)
        yield server


def test_a_second_driver_takes_over_without_a_failed_prepare(api):
    root = tempfile.mkdtemp(prefix="gdr", dir="/tmp")  # short: unix socket paths
    os.makedirs(os.path.join(root, "claims"))
    kubeconfig = api.kubeconfig(os.path.join(root, "kubeconfig")) if api is not None else None
    old = new = None
    paths = DriverPaths(root=root)
    kubelet = Kubelet(paths, root, api)
    worker = threading.Thread(target=kubelet.run, daemon=True)
    try:
        old = _start(root, "pod-old", kubeconfig)
        _wait_ready(old)
        worker.start()
        _until(lambda: kubelet.served_by("pod-old") >= 6, "calls served by the old driver")
        held = allocated_claim("held", [{"request": "gpu", "device": "gpu-7"}], node_name=NODE)
        if api is not None:
            api.claims[("default", "held")] = held  # the server's uid written back into `held`
            published = {name: s["spec"]["pool"] for name, s in api.slices.items()}
        else:
            with open(os.path.join(root, "claims", "default_held.yaml"), "w", encoding="utf-8") as fh:
                yaml.safe_dump(held, fh)
        kubelet.call("prepare", "held", held["metadata"]["uid"])  # by the old driver: the only one registered
        new = _start(root, "pod-new", kubeconfig)
        _wait_ready(new)
        names = {os.path.basename(p) for p in paths.registration_sockets()}
        assert names == {"gpu.nvidia.com-pod-old-reg.sock", "gpu.nvidia.com-pod-new-reg.sock"}
        _until(lambda: kubelet.served_by("pod-new") >= 6, "calls served by the new driver")
        old.send_signal(signal.SIGTERM)
        assert old.wait(timeout=30) == 0
        served = len(kubelet.calls)
        _until(lambda: len(kubelet.calls) >= served + 6, "calls after the old driver stopped")
        kubelet.stop.set()
        worker.join(timeout=30)
        kubelet.call("unprepare", "held", held["metadata"]["uid"])
        failed = [c for c in kubelet.calls if c[3]]
        assert not failed, failed
        if api is not None:  # the new driver found the old one's slices current: nothing republished or removed
            assert {name: s["spec"]["pool"] for name, s in api.slices.items()} == published
        # a claim prepared by the old driver was unprepared by the new one
        assert [c[0] for c in kubelet.calls if c[2] == "held"] == ["gpu.nvidia.com-pod-old-reg.sock",
                                                                   "gpu.nvidia.com-pod-new-reg.sock"]
        assert [os.path.basename(p) for p in paths.registration_sockets()] == ["gpu.nvidia.com-pod-new-reg.sock"]
        assert not os.path.exists(os.path.join(paths.plugin_dir, "dra-pod-old.sock")), "the old pod removed its own"
        assert os.path.exists(os.path.join(paths.plugin_dir, "dra-pod-new.sock"))
        status = subprocess.run([sys.executable, "-m", "gpudra", "driver", "status", "--root", root, "-o", "json"],
                                capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO), check=True)
        assert '"claims": []' in status.stdout, "every claim was unprepared, whichever driver prepared it"
    finally:
        kubelet.stop.set()
        for proc in (old, new):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def test_socket_names_follow_kubeletplugin():
    assert registration_socket_name("gpu.nvidia.com") == "gpu.nvidia.com-reg.sock"
    assert registration_socket_name("gpu.nvidia.com", "5c6f") == "gpu.nvidia.com-5c6f-reg.sock"
    assert dra_socket_name() == "dra.sock" and dra_socket_name("5c6f") == "dra-5c6f.sock"
    long_uid = "u" * 80
    name = registration_socket_name("gpu.nvidia.com", long_uid)
    assert name.startswith("gpu.nvidia.com-") and name.endswith("-reg.sock") and long_uid not in name
    assert registration_socket_name("gpu.nvidia.com", long_uid) == name, "stable"
    assert registration_socket_name("gpu.nvidia.com", "v" * 80) != name
