"""Crash test of the compute-domain plugin: SIGKILL `gpudra driver run --driver compute-domain` at each write of a
daemon + channel claim's life (checkpoint, CDI spec, IMEX files, node label), restart it, and check that start-up
leaves checkpoint, CDI specs, the domains' directories and the node label in agreement, and that the kubelet's
retries then finish the work and leave nothing behind.

The kill points are tests/support/killpoint.py's (`LABEL:STEP:N`: just before step STEP of the Nth LABEL write),
installed by tests/support/kill_at.py before the CLI runs; gpudra has no such hook of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import grpc
import pytest
import yaml

from gpudra.computedomain.state import JOINS_KEY
from gpudra.kubeletplugin.checkpoint import PREPARE_COMPLETED, load_checkpoint
from gpudra.computedomain.domains import DirectoryDomainSource
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from gpudra.kubeletplugin.paths import DriverPaths
from tests.support.builders import allocated_claim

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILL_AT = os.path.join(REPO, "tests", "support", "kill_at.py")
NODE = "tray-1"
DRIVER = "compute-domain.nvidia.com"
NV = "resource.nvidia.com/v1beta1"
# every kind of write the claims' life makes; N up to the number of such writes in one life (checkpoint: start-up,
# the channel's join, the two prepares' completions, the two unprepares, the join's removal)
KILL_POINTS = [f"{label}:rename:{n}" for label, most in (("checkpoint", 7), ("cdi", 2), ("imex-config", 1),
                                                          ("imex-nodes", 1), ("node-labels", 2))
               for n in range(1, most + 1)]


class Driver:
    def __init__(self, root: str):
        self.root = root
        self.paths = DriverPaths(driver_name=DRIVER, root=root)
        self.claims_dir = os.path.join(root, "claims")
        self.domains_dir = os.path.join(root, "domains")
        self.proc: subprocess.Popen | None = None

    def start(self, kill_at: str | None) -> None:
        args = ["driver", "run", "--driver", "compute-domain", "--backend", "simulated", "--profile", "gb200-nvl72",
                "--node", NODE, "--root", self.root, "--claims", self.claims_dir, "--domains", self.domains_dir,
                "--domain-ready-wait", "0", "--no-device-health"]
        command = [sys.executable, KILL_AT, kill_at, *args] if kill_at else [sys.executable, "-m", "gpudra", *args]
        env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.log = os.path.join(self.root, f"driver-{time.monotonic_ns()}.log")
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         env=env, cwd=REPO)
        while "ready: " not in self.stderr():  # bound by the process: it serves or it dies
            if self.proc.poll() is not None:
                return
            time.sleep(0.05)

    def stderr(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def _life(driver: Driver, daemon, channel) -> bool:
    """Prepare the daemon's and the workload's claims, then unprepare both, as the kubelet would; False when the
    driver died (or was not serving) on the way."""
    if not driver.alive():
        return False
    kubelet = KubeletClient(driver.paths.registration_socket)
    try:
        kubelet.register()
        for call, ref in ((kubelet.prepare, daemon), (kubelet.prepare, channel), (kubelet.unprepare, channel),
                          (kubelet.unprepare, daemon)):
            answer = call([ref], timeout=20).claims[ref[2]]
            assert answer.error == "", answer.error
    except grpc.RpcError:
        return False
    finally:
        kubelet.close()
    return True


def _check_agreement(driver: Driver, domain_uid: str) -> None:
    data = load_checkpoint(driver.paths.checkpoint)
    assert data is not None
    completed = {uid: e for uid, e in data["claims"].items() if e["state"] == PREPARE_COMPLETED}
    assert set(completed) == set(data["claims"])  # nothing half-done survives start-up
    specs = {name for name in os.listdir(driver.paths.cdi_spec_dir) if name.endswith(".yaml")}
    wanted = {f"k8s.{DRIVER}-claim_{uid}.yaml" for uid, e in completed.items()
              if any(d["cdiDeviceIDs"] for d in e["devices"])}
    assert specs == wanted
    domains_root = os.path.join(driver.paths.plugin_dir, "domains")
    dirs = set(os.listdir(domains_root)) if os.path.isdir(domains_root) else set()
    assert dirs == {d["domainID"] for e in completed.values() for d in e["devices"] if d["type"] == "daemon"}
    label = DirectoryDomainSource(driver.domains_dir).node_domain(NODE)
    assert label is None or label in set((data.get(JOINS_KEY) or {}).values())  # a label is always accounted for


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_kill_anywhere_then_restart_and_retry(kill_at):
    root = tempfile.mkdtemp(prefix="cdk", dir="/tmp")
    driver = Driver(root)
    try:
        os.makedirs(driver.claims_dir)
        os.makedirs(driver.domains_dir)
        domain_uid = str(uuid.uuid4())
        with open(os.path.join(driver.domains_dir, "cd.yaml"), "w") as fh:
            yaml.safe_dump({"apiVersion": NV, "kind": "ComputeDomain",
                            "metadata": {"name": "cd", "namespace": "default", "uid": domain_uid},
                            "status": {"nodes": [{"name": NODE, "ipAddress": "10.0.0.1", "status": "Ready",
                                                  "cliqueID": "4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f.1"}]}}, fh)
        refs = []
        for name, device, kind in (("daemon", "daemon-0", "ComputeDomainDaemonConfig"),
                                   ("workload", "channel-0", "ComputeDomainChannelConfig")):
            request = device.split("-")[0]
            obj = allocated_claim(name, [{"request": request, "device": device}], node_name=NODE, driver_name=DRIVER,
                                  config=[{"source": "FromClaim", "requests": [request], "opaque": {
                                      "driver": DRIVER, "parameters": {"apiVersion": NV, "kind": kind,
                                                                       "domainID": domain_uid}}}])
            with open(os.path.join(driver.claims_dir, f"default_{name}.yaml"), "w") as fh:
                yaml.safe_dump(obj, fh)
            refs.append(("default", name, obj["metadata"]["uid"]))
        driver.start(kill_at)
        finished = _life(driver, *refs)
        if driver.proc is not None:
            driver.proc.wait(timeout=30) if not finished else driver.stop()
        assert finished or driver.proc.returncode == -9, driver.stderr()[-2000:]
        driver.start(None)  # restart: start-up reconcile
        assert driver.alive(), driver.stderr()[-2000:]
        _check_agreement(driver, domain_uid)
        assert _life(driver, *refs)  # the kubelet's retries finish the work
        _check_agreement(driver, domain_uid)
        assert load_checkpoint(driver.paths.checkpoint)["claims"] == {}
        assert DirectoryDomainSource(driver.domains_dir).node_domain(NODE) is None
    finally:
        driver.stop()
        shutil.rmtree(root, ignore_errors=True)
