"""Crash test: SIGKILL the driver at named places while concurrent kubelet callers prepare and
unprepare claims (dynamic MIG included).

Each round the driver kills itself just before step S of its Nth write of kind K
(a kill point `K:S:N`, see tests/support/killpoint.py, installed in the forked driver by the test's zygote): checkpoint, CDI spec or simulated GPU
state, and write, fsync, rename or directory fsync; K, S and N come from a seeded generator, so
the places are the same on every run (which call is in flight when it fires depends on the
callers' interleaving). N = 1 kills start-up itself. A round whose kill point is not reached
within a number of calls ends with a SIGKILL from the test. No step waits for wall-clock time.

After every restart the driver's start-up reconcile must leave checkpoint, CDI specs and
(dynamic) MIG devices in agreement, never hand one device to two claims, and never lose a
claim the kubelet was told is prepared. `GPUDRA_CRASH_KILLS` (default 200) sets the number of
kills, `GPUDRA_CRASH_SEED` the seed.
"""

from __future__ import annotations

import os
import json
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
from tests.support.killpoint import KILL_ENV
from gpudra.discovery import open_backend
from gpudra.kubeletplugin.checkpoint import PREPARE_COMPLETED, load_checkpoint
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim
from gpudra.kubeletplugin.paths import DriverPaths
from gpudra.gpuplugin.state import _conflicts
from gpudra.kubeletplugin.prepared import PreparedDevice

NODE = "crash-node"
PROFILE = "dgx-h100"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILLS = int(os.environ.get("GPUDRA_CRASH_KILLS", "200"))
MIN_CALLS = 400
CALLERS = 4
CALLS_PER_ROUND = 40  # a kill point not reached by then: the test kills the driver itself
# (kind, steps its writes have, the largest N): CDI specs and simulated GPU state are not fsynced
KILL_KINDS = [("checkpoint", ("write", "fsync", "rename", "dirsync"), 12),
              ("cdi", ("write", "rename"), 6), ("simulated-gpus", ("write", "rename"), 6)]


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


class Zygote:
    """tests/support/driver_zygote.py: forks drivers from an interpreter that has imported them once."""

    def __init__(self, stderr: str):
        env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env.pop(KILL_ENV, None)
        self.stderr = stderr
        with open(stderr, "a") as log:
            self.proc = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "support", "driver_zygote.py")], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO)

    def _ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"driver zygote died: {self.log_tail()}")
        return json.loads(line)

    def spawn(self, root: str, claims_dir: str, kill_at: str | None) -> int:
        args = ["driver", "run", "--backend", "simulated", "--profile", PROFILE, "--node-name", NODE,
                "--root", root, "--claims", claims_dir, "--dynamic-mig"]
        return self._ask({"spawn": args, "env": {KILL_ENV: kill_at} if kill_at else {}, "stderr": self.stderr})["pid"]

    def poll(self, pid: int) -> int | None:
        return self._ask({"poll": pid})["status"]

    def wait(self, pid: int) -> int:
        return self._ask({"wait": pid})["status"]

    def log_tail(self) -> str:
        try:
            with open(self.stderr, errors="replace") as fh:
                return fh.read()[-3000:]
        except OSError:
            return ""

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _start(zygote: Zygote, root: str, claims_dir: str, kill_at: str | None) -> tuple[int, KubeletClient | None]:
    """Fork a driver; its client once it has registered, or None when it died first (a start-up kill)."""
    pid = zygote.spawn(root, claims_dir, kill_at)
    paths = DriverPaths(root=root)
    deadline = time.monotonic() + 120  # only a guard against a hang, never reached when things work
    while time.monotonic() < deadline:
        status = zygote.poll(pid)
        if status is not None:
            assert status == -signal.SIGKILL, f"driver exited with {status}: {zygote.log_tail()}"
            return pid, None
        if os.path.exists(paths.registration_socket):
            client = KubeletClient(paths.registration_socket)
            try:
                client.register()
                return pid, client
            except grpc.RpcError:
                client.close()
        time.sleep(0.005)  # waiting for the socket to appear, not for time to pass
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"driver did not come up: {zygote.log_tail()}")


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
                assert not _conflicts(PreparedDevice.from_json(a), PreparedDevice.from_json(b)), f"{a['device']} ({uid_a}) conflicts with {b['device']} ({uid_b})"
    # nothing the kubelet was told is lost, nothing it released lingers
    for uid, state in believed.items():
        if state == "prepared":
            assert uid in entries, f"claim {claims[uid][1]} was acknowledged as prepared but is gone"
        elif state == "unprepared":
            assert uid not in entries, f"claim {claims[uid][1]} was acknowledged as unprepared but is still held"


def _kill_points(rng: random.Random, n: int) -> list[str]:
    points = []
    for _ in range(n):
        kind, steps, largest = rng.choice(KILL_KINDS)
        points.append(f"{kind}:{rng.choice(steps)}:{rng.randint(1, largest)}")
    return points


def test_sigkill_at_named_places_loses_and_leaks_nothing():
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
    calls = {"prepare": 0, "unprepare": 0, "killed_in_flight": 0, "kills": 0, "killed_at_start": 0,
             "killed_by_test": 0}
    lock = threading.Lock()
    zygote = Zygote(os.path.join(root, "driver.log"))
    pid = None
    try:
        for kill_at in _kill_points(rng, KILLS):
            pid, kubelet = _start(zygote, root, claims_dir, kill_at)
            if kubelet is None:
                calls["kills"] += 1
                calls["killed_at_start"] += 1
                pid = None
                continue
            _check_agreement(root, claims, believed)
            round_calls = [0]

            def caller(mine: list[str], seed: int) -> None:
                local = random.Random(seed)
                while True:
                    with lock:
                        if round_calls[0] >= CALLS_PER_ROUND:
                            return
                        round_calls[0] += 1
                    uid = local.choice(mine)
                    op = "unprepare" if believed.get(uid) == "prepared" and local.random() < 0.7 else "prepare"
                    try:
                        reply = (kubelet.prepare if op == "prepare" else kubelet.unprepare)([claims[uid]], timeout=30)
                    except grpc.RpcError:
                        with lock:
                            believed[uid] = "unknown"
                            calls["killed_in_flight"] += 1
                            round_calls[0] = CALLS_PER_ROUND  # the driver is gone: the others stop too
                        return
                    with lock:
                        calls[op] += 1
                        if reply.claims[uid].error == "":
                            believed[uid] = "prepared" if op == "prepare" else "unprepared"

            threads = [threading.Thread(target=caller, args=(uids[i::CALLERS], rng.random()), daemon=True)
                       for i in range(CALLERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if zygote.poll(pid) is None:  # the kill point was not reached in this round's calls
                os.kill(pid, signal.SIGKILL)
                calls["killed_by_test"] += 1
            status = zygote.wait(pid)
            pid = None
            assert status == -signal.SIGKILL, f"driver exited with {status}: {zygote.log_tail()}"
            calls["kills"] += 1
            kubelet.close()
        pid, kubelet = _start(zygote, root, claims_dir, None)
        assert kubelet is not None
        try:
            _check_agreement(root, claims, believed)
            # the kubelet retries what was cut off; afterwards it can release everything cleanly
            reply = kubelet.unprepare(list(claims.values()))
            assert all(r.error == "" for r in reply.claims.values())
            _check_agreement(root, claims, {u: "unprepared" for u in uids})
        finally:
            kubelet.close()
            os.kill(pid, signal.SIGTERM)
            assert zygote.wait(pid) == 0, zygote.log_tail()
            pid = None
        assert calls["kills"] >= KILLS and calls["prepare"] + calls["unprepare"] >= min(MIN_CALLS, 2 * KILLS), calls
        # the kill points fire inside the driver, not from outside: most rounds end at one
        assert calls["killed_by_test"] < KILLS // 2, calls
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            zygote.wait(pid)
        zygote.close()
        shutil.rmtree(root, ignore_errors=True)
    print(f"crash test: {calls}")
