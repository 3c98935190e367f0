"""Prepare/unprepare latency and throughput of the node driver, measured the way the kubelet sees it.

Starts `gpudra driver run` (simulated GPUs) as a separate process, registers over the
registration socket, then N concurrent callers each prepare and unprepare their share of
the claims over the DRA unix socket (one claim per call, like a pod start/stop).

    python benchmarks/prepare.py [--claims 1000] [--concurrency 16] [--profile hgx-a100-mig]
                                 [--dynamic-mig] [--no-fsync] [--json]

With --json the last line is a JSON object with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from gpudra.discovery import open_backend  # noqa: E402
from gpudra.kubeletplugin.kubelet_client import KubeletClient  # noqa: E402
from tests.support.builders import allocated_claim  # noqa: E402
from gpudra.kubeletplugin.paths import DriverPaths  # noqa: E402
from gpudra.gpuplugin.slices import build_resource_slices, pool_devices  # noqa: E402

NODE = "bench-node"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def devices_for(profile: str, dynamic_mig: bool, count: int) -> list[str]:
    """`count` devices that can all be held at once (one per caller)."""
    inventory = open_backend("simulated", profile=profile, node_name=NODE).inventory()
    if dynamic_mig:
        names = [f"gpu-{g.minor}-mig-{p.name.replace('.', '')}-{p.gi_profile_id}-{start}"
                 for g in inventory.gpus if g.mig_capable
                 for p in open_backend("simulated", profile=profile, node_name=NODE).mig_profiles(g.minor)
                 if p.name.startswith("1g.") and p.memory_slices == 1 and "+" not in p.name
                 for start in p.placement_starts]
    else:
        names = [d["name"] for d in pool_devices(build_resource_slices(inventory, NODE))]
    if len(names) < count:
        raise SystemExit(f"profile {profile} has {len(names)} independent devices, fewer than {count} callers")
    return names[:count]


def start_driver(root: str, claims_dir: str, profile: str, dynamic_mig: bool, fsync: bool) -> subprocess.Popen:
    if os.environ.get("GPUDRA_BENCH_DRIVER"):  # e.g. a profiling wrapper: CMD ROOT CLAIMS
        return subprocess.Popen([sys.executable, os.environ["GPUDRA_BENCH_DRIVER"], root, claims_dir], cwd=REPO,
                                stdout=sys.stderr, stderr=subprocess.PIPE)
    cmd = [sys.executable, "-m", "gpudra", "driver", "run", "--backend", "simulated", "--profile", profile,
           "--node-name", NODE, "--root", root, "--claims", claims_dir]
    if dynamic_mig:
        cmd.append("--dynamic-mig")
    if not fsync:
        cmd.append("--no-fsync")
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_ready(proc: subprocess.Popen, paths: DriverPaths) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"driver exited: {proc.stderr.read().decode()[-2000:]}")
        if os.path.exists(paths.registration_socket) and os.path.exists(paths.dra_socket):
            return
        time.sleep(0.02)
    raise SystemExit("driver did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--profile", default="hgx-a100-mig")
    parser.add_argument("--dynamic-mig", action="store_true", help="create/destroy a MIG device per claim")
    parser.add_argument("--no-fsync", action="store_true", help="skip fsync of checkpoint and CDI files")
    parser.add_argument("--dir", default="/tmp", help="where to put the driver's root (a disk path, or a tmpfs)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON on the last line")
    args = parser.parse_args()

    devices = devices_for(args.profile, args.dynamic_mig, args.concurrency)
    root = tempfile.mkdtemp(prefix="gdb", dir=args.dir)
    claims_dir = os.path.join(root, "claims")
    os.makedirs(claims_dir)
    work: list[list[tuple[str, str, str]]] = [[] for _ in range(args.concurrency)]
    for i in range(args.claims):
        caller = i % args.concurrency
        claim = allocated_claim(f"claim-{i}", [{"request": "gpu", "device": devices[caller]}], node_name=NODE)
        with open(os.path.join(claims_dir, f"default_claim-{i}.yaml"), "w", encoding="utf-8") as fh:
            yaml.safe_dump(claim, fh)
        work[caller].append(("default", f"claim-{i}", claim["metadata"]["uid"]))

    paths = DriverPaths(root=root)
    proc = start_driver(root, claims_dir, args.profile, args.dynamic_mig, not args.no_fsync)
    prepare_ms: list[float] = []
    unprepare_ms: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    try:
        wait_ready(proc, paths)
        clients = [KubeletClient(paths.registration_socket) for _ in range(args.concurrency)]
        for client in clients:
            client.register()
        for client in clients[:1]:  # warm-up: first call pays for lazy imports and caches
            ref = ("default", "claim-0", work[0][0][2])
            client.prepare([ref])
            client.unprepare([ref])
        barrier = threading.Barrier(args.concurrency + 1)

        def caller(index: int) -> None:
            client = clients[index]
            mine_p, mine_u, mine_e = [], [], []
            barrier.wait()
            for ref in work[index]:
                t0 = time.perf_counter()
                reply = client.prepare([ref])
                t1 = time.perf_counter()
                if reply.claims[ref[2]].error:
                    mine_e.append(reply.claims[ref[2]].error)
                reply = client.unprepare([ref])
                t2 = time.perf_counter()
                if reply.claims[ref[2]].error:
                    mine_e.append(reply.claims[ref[2]].error)
                mine_p.append((t1 - t0) * 1000)
                mine_u.append((t2 - t1) * 1000)
            with lock:
                prepare_ms.extend(mine_p)
                unprepare_ms.extend(mine_u)
                errors.extend(mine_e)

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(args.concurrency)]
        for t in threads:
            t.start()
        barrier.wait()
        started = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        for client in clients:
            client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    driver_cpu_s = children.ru_utime + children.ru_stime  # includes start-up (imports, reconcile)

    result = {
        "claims": args.claims,
        "concurrency": args.concurrency,
        "profile": args.profile,
        "dynamic_mig": args.dynamic_mig,
        "fsync": not args.no_fsync,
        "dir": args.dir,
        "errors": len(errors),
        "prepare_p50_ms": round(statistics.median(prepare_ms), 2),
        "prepare_p99_ms": round(percentile(prepare_ms, 99), 2),
        "unprepare_p50_ms": round(statistics.median(unprepare_ms), 2),
        "unprepare_p99_ms": round(percentile(unprepare_ms, 99), 2),
        "wall_s": round(wall, 2),
        "claims_per_s": round(args.claims / wall, 1),
        "calls_per_s": round(2 * args.claims / wall, 1),
        "driver_cpu_ms_per_claim": round(driver_cpu_s * 1000 / args.claims, 2),
        "cpus": os.cpu_count(),
    }
    rows = [("operation", "p50 ms", "p99 ms"),
            ("NodePrepareResources", f"{result['prepare_p50_ms']:.2f}", f"{result['prepare_p99_ms']:.2f}"),
            ("NodeUnprepareResources", f"{result['unprepare_p50_ms']:.2f}", f"{result['unprepare_p99_ms']:.2f}")]
    print(f"{args.claims} claims, {args.concurrency} concurrent callers, profile {args.profile}"
          f"{' (dynamic MIG)' if args.dynamic_mig else ''}, fsync {'on' if not args.no_fsync else 'off'}, root in {args.dir}")
    for row in rows:
        print(f"  {row[0]:<24}{row[1]:>10}{row[2]:>10}")
    print(f"  throughput: {result['claims_per_s']} claims/s (prepare+unprepare), {result['calls_per_s']} calls/s;"
          f" wall {result['wall_s']} s; errors {result['errors']}")
    print(f"  driver process CPU: {result['driver_cpu_ms_per_claim']} ms per claim incl. start-up"
          f" ({result['cpus']} CPUs on this machine)")
    if errors:
        print(f"  first error: {errors[0]}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
