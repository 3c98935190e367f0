"""Crash test: SIGKILL the driver at random points while the kubelet prepares and unprepares claims.

After every restart the driver's start-up reconcile must leave checkpoint, CDI specs and
(dynamic) MIG devices in agreement, never hand one device to two claims, and never lose a
claim the kubelet was told is prepared.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import yaml

from gpudra.cdi import load_spec_file
from gpudra.discovery import open_backend
from gpudra.driver.checkpoint import PREPARE_COMPLETED, load_checkpoint
from gpudra.driver.kubelet_client import KubeletClient, allocated_claim
from gpudra.driver.paths import DriverPaths
from gpudra.driver.state import _conflicts

NODE = "crash-node"
PROFILE = "dgx-h100"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIME_BUDGET_S = 20.0
MIN_CALLS = 200
HARD_LIMIT_S = 150.0  # a loaded CI runner is slow: keep going until enough calls were made, within reason
CALLERS = 4


def _claim_devices(rng: random.Random) -> list[dict]:
    """Mostly single devices, some pairs; MIG placements overlap on purpose so conflicts happen."""
    pool = ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4-mig-1g10gb-19-0", "gpu-4-mig-1g10gb-19-1",
            "gpu-4-mig-2g20gb-14-0", "gpu-4-mig-3g40gb-9-4", "gpu-5-mig-1g20gb-15-2", "gpu-5-mig-7g80gb-0-0",
            "gpu-6", "gpu-6-mig-4g40gb-5-0", "gpu-7"]
    picks = rng.sample(pool, rng.choice([1, 1, 1, 2]))
    results = [{"request": f"r{i}", "device": d} for i, d in enumerate(picks)]
    if rng.random() < 0.1:
        results[0]["adminAccess"] = True
    return results


def _spawn(root: str, claims_dir: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "gpudra", "driver", "run", "--backend", "simulated", "--profile",
                             PROFILE, "--node-name", NODE, "--root", root, "--claims", claims_dir, "--dynamic-mig"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)


def _start(root: str, claims_dir: str) -> tuple[subprocess.Popen, KubeletClient]:
    proc = _spawn(root, claims_dir)
    paths = DriverPaths(root=root)
    deadline = time.monotonic() + 60  # start-up imports are slow on a loaded machine
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"driver exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        if os.path.exists(paths.registration_socket):
            client = KubeletClient(paths.registration_socket)
            try:
                client.register()
                return proc, client
            except grpc.RpcError:
                client.close()
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("driver did not come up")


def _check_agreement(root: str, claims: dict, believed: dict) -> None:
    paths = DriverPaths(root=root)
    checkpoint = load_checkpoint(paths.checkpoint)
    assert checkpoint is not None
    entries = checkpoint["claims"]
    assert all(e["state"] == PREPARE_COMPLETED for e in entries.values()), "reconcile left unfinished entries"
    # CDI specs <-> completed entries, device for device
    prefix = "k8s.gpu.nvidia.com-claim_"
    files = {f[len(prefix):-len(".yaml")] for f in os.listdir(paths.cdi_spec_dir) if f.startswith(prefix)}
    assert not [f for f in os.listdir(paths.cdi_spec_dir) if f.endswith(".tmp")]
    assert files == set(entries)
    for uid, entry in entries.items():
        spec = load_spec_file(os.path.join(paths.cdi_spec_dir, f"{prefix}{uid}.yaml"))
        assert sorted(d.name for d in spec.devices) == sorted({f"{uid}-{d['device']}" for d in entry["devices"]})
    # MIG devices on the (simulated) hardware <-> MIG devices owned by completed claims
    hardware = open_backend("simulated", profile=PROFILE, node_name=NODE, state_path=paths.simulated_state).inventory()
    live = {(g.minor, m.gi_profile_id, m.placement_start, m.uuid) for g in hardware.gpus for m in g.mig_devices}
    owned = {(d["gpuMinor"], d["mig"]["giProfileId"], d["mig"]["start"], d["mig"]["uuid"])
             for e in entries.values() for d in e["devices"] if d.get("mig")}
    assert live == owned
    # no device (or overlapping MIG placement) held by two claims
    records = [(uid, d) for uid, e in entries.items() for d in e["devices"]]
    for i, (uid_a, a) in enumerate(records):
        for uid_b, b in records[i + 1:]:
            if uid_a != uid_b:
                assert not _conflicts(a, b), f"{a['device']} ({uid_a}) conflicts with {b['device']} ({uid_b})"
    # nothing the kubelet was told is lost, nothing it released lingers
    for uid, state in believed.items():
        if state == "prepared":
            assert uid in entries, f"claim {claims[uid][1]} was acknowledged as prepared but is gone"
        elif state == "unprepared":
            assert uid not in entries, f"claim {claims[uid][1]} was acknowledged as unprepared but is still held"


def test_sigkill_during_prepare_and_unprepare_loses_and_leaks_nothing():
    rng = random.Random(int(os.environ.get("GPUDRA_CRASH_SEED", "5")))
    root = tempfile.mkdtemp(prefix="gdc", dir="/tmp")
    claims_dir = os.path.join(root, "claims")
    os.makedirs(claims_dir)
    claims: dict[str, tuple[str, str, str]] = {}
    for i in range(48):
        obj = allocated_claim(f"c{i}", _claim_devices(rng), node_name=NODE)
        with open(os.path.join(claims_dir, f"default_c{i}.yaml"), "w") as fh:
            yaml.safe_dump(obj, fh)
        claims[obj["metadata"]["uid"]] = ("default", f"c{i}", obj["metadata"]["uid"])
    uids = sorted(claims)
    believed: dict[str, str] = {}  # uid -> "prepared" | "unprepared" | "unknown" (call cut by the kill)
    calls = {"prepare": 0, "unprepare": 0, "killed_in_flight": 0, "rounds": 0}
    lock = threading.Lock()
    started = time.monotonic()
    running: list[subprocess.Popen] = []
    try:
        while (time.monotonic() - started < TIME_BUDGET_S or calls["rounds"] < 3
               or (calls["prepare"] + calls["unprepare"] < MIN_CALLS and time.monotonic() - started < HARD_LIMIT_S)):
            if calls["rounds"] % 4 == 3:  # sometimes die during start-up (imports or reconcile) too
                early = _spawn(root, claims_dir)
                running[:] = [early]
                time.sleep(rng.uniform(0.3, 1.2))
                early.send_signal(signal.SIGKILL)
                early.wait()
                calls["killed_at_start"] = calls.get("killed_at_start", 0) + 1
            proc, kubelet = _start(root, claims_dir)
            running[:] = [proc]
            _check_agreement(root, claims, believed)
            stop = threading.Event()

            def caller(mine: list[str], seed: int) -> None:
                local = random.Random(seed)
                while not stop.is_set():
                    uid = local.choice(mine)
                    op = "unprepare" if believed.get(uid) == "prepared" and local.random() < 0.7 else "prepare"
                    try:
                        reply = (kubelet.prepare if op == "prepare" else kubelet.unprepare)([claims[uid]], timeout=5)
                    except grpc.RpcError:
                        with lock:
                            believed[uid] = "unknown"
                            calls["killed_in_flight"] += 1
                        return
                    with lock:
                        calls[op] += 1
                        if reply.claims[uid].error == "":
                            believed[uid] = "prepared" if op == "prepare" else "unprepared"

            threads = [threading.Thread(target=caller, args=(uids[i::CALLERS], rng.random()), daemon=True)
                       for i in range(CALLERS)]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.02, 0.4))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            stop.set()
            for t in threads:
                t.join(timeout=10)
            kubelet.close()
            calls["rounds"] += 1
        proc, kubelet = _start(root, claims_dir)
        running[:] = [proc]
        try:
            _check_agreement(root, claims, believed)
            # the kubelet retries what was cut off; afterwards it can release everything cleanly
            reply = kubelet.unprepare(list(claims.values()))
            assert all(r.error == "" for r in reply.claims.values())
            _check_agreement(root, claims, {u: "unprepared" for u in uids})
        finally:
            kubelet.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
        assert calls["prepare"] + calls["unprepare"] >= MIN_CALLS, calls
        assert calls["rounds"] >= 3
    finally:
        for proc in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)
    print(f"crash test: {calls}")
