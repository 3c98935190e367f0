"""The local cluster's processes (node agents, the control plane; the real control plane's too): started
detached with a pid file, found again by pid and command-line markers, stopped with a signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from gpudra.atomicfile import write_atomic
from gpudra.regularfile import read_regular_file

from .layout import ClusterDir
from .store import FILE_MODE, open_private, private_dirs

STOP_TIMEOUT_S = 10.0
POLL_S = 0.02


def read_pid(pid_file: str) -> int | None:
    try:
        raw = read_regular_file(pid_file, 64)
        return None if raw is None else int(raw.strip())
    except (OSError, ValueError):
        return None


def process_alive(pid_file: str, *markers: str) -> int | None:
    """The pid in `pid_file` if that process runs and its command line holds every marker (a recycled pid is not
    ours); a dead child of this process is reaped on the way."""
    pid = read_pid(pid_file)
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read().split(b"\0")
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            zombie = fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return None
    if zombie:
        _reap(pid)  # a process this one started and that died (killed): collect it
        return None
    if not all(marker.encode() in args for marker in markers):
        return None
    return pid


def spawn(cluster: ClusterDir, args: list[str], pid_file: str, log_file: str) -> subprocess.Popen[bytes]:
    """A background process of the cluster: own session (a terminal's Ctrl-C does not reach it), log file, pid file."""
    private_dirs(os.path.dirname(pid_file))
    log = open_private(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        # umask 077: whatever the driver and the control plane create (sockets included) is theirs alone
        process = subprocess.Popen([sys.executable, "-m", *args], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True, cwd=cluster.path, umask=0o077)
    finally:
        os.close(log)
    write_atomic(pid_file, f"{process.pid}\n".encode(), mode=FILE_MODE, label="cluster-pid", fsync=False)
    return process


def stop_process(pid_file: str, *markers: str, sig: int = signal.SIGTERM) -> bool:
    pid = process_alive(pid_file, *markers)
    if pid is None:
        return False
    os.kill(pid, sig)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while process_alive(pid_file, *markers) is not None:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + STOP_TIMEOUT_S
        time.sleep(POLL_S)
    _reap(pid)
    return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)  # our own child (started by this process): do not leave a zombie
    except ChildProcessError:
        pass
