"""The local cluster's control-plane process: `python -m gpudra.cluster.controlplane DIR`.

The `gpudra` commands run the control loop themselves after their own writes, so their output shows what those
writes caused. This process covers everything else, as kube-controller-manager, kube-scheduler and the kubelet keep
running between kubectl calls: a store change that no gpudra command follows with a reconcile (a driver
republishing its ResourceSlices, say after a health event; an object written by another tool), the periodic resync
that retries pending pods and pods whose prepare failed while a driver was down, and the event TTL. It never
restarts drivers: `gpudra cluster up` does that (the DaemonSet's part), so a crash stays visible.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time

from gpudra.regularfile import read_regular_file

from .controller import reconcile
from .layout import ClusterDir, ClusterSetupError
from .processes import process_alive, spawn, stop_process

MODULE = "gpudra.cluster.controlplane"
WATCH_INTERVAL_S = 0.2  # how often the store's resourceVersion is looked at (one small file read)
RESYNC_INTERVAL_S = 5.0  # a full round even when nothing changed: pending pods, failed prepares, event TTL
START_TIMEOUT_S = 30.0

log = logging.getLogger("gpudra.controlplane")


def alive(cluster: ClusterDir) -> int | None:
    return process_alive(cluster.control_plane_pid_file(), MODULE, cluster.path)


def start(cluster: ClusterDir) -> bool:
    """Start the control plane unless it runs; True when it was started. Waits until it has said it is ready."""
    if alive(cluster) is not None:
        return False
    process = spawn(cluster, [MODULE, cluster.path], cluster.control_plane_pid_file(), cluster.control_plane_log())
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _ready(cluster):
        if process.poll() is not None:
            raise ClusterSetupError(f"the control plane exited ({process.returncode}); see {cluster.control_plane_log()}")
        if time.monotonic() > deadline:
            raise ClusterSetupError(f"the control plane did not start within {START_TIMEOUT_S:.0f}s; "
                                    f"see {cluster.control_plane_log()}")
        time.sleep(0.02)
    return True


def _ready(cluster: ClusterDir) -> bool:
    try:  # the line comes first thing after start-up: a log this large, or no file at all, is not ready
        raw = read_regular_file(cluster.control_plane_log(), 16 << 20)
    except OSError:
        return False
    return raw is not None and b"control plane ready" in raw


def stop(cluster: ClusterDir) -> bool:
    return stop_process(cluster.control_plane_pid_file(), MODULE, cluster.path)


def serve(cluster: ClusterDir, stopping: threading.Event, watch_s: float = WATCH_INTERVAL_S,
          resync_s: float = RESYNC_INTERVAL_S) -> int:
    """Reconcile on every outside change and every `resync_s` until `stopping` is set; returns the rounds run."""
    rounds = 0
    seen = -1
    last = 0.0
    while not stopping.is_set():
        version = cluster.store.version()
        if version != seen or time.monotonic() - last >= resync_s:
            try:
                reconcile(cluster)
            except Exception:  # noqa: BLE001 - one bad object or a dying driver must not stop the control plane
                log.exception("control loop round failed; retried at the next change or resync")
            rounds += 1
            last = time.monotonic()
            seen = cluster.store.version()  # our own writes are not news
        stopping.wait(watch_s)
    return rounds


def main(argv: list[str]) -> int:
    (directory,) = argv
    cluster = ClusterDir(directory)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    print(f"control plane ready: {cluster.path}", file=sys.stderr, flush=True)
    serve(cluster, stopping)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
