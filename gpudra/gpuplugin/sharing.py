"""Sharing that is applied: time-slicing intervals and per-claim MPS control daemons.

What NVIDIA's GPU DRA driver does (`cmd/gpu-kubelet-plugin/sharing.go`, `nvlib.go`, `templates/
mps-control-daemon.tmpl.yaml`, v0.4.0), and so what `NvidiaSmiSharing` runs:
* TimeSlicing (full GPUs): `nvidia-smi -i <uuid> -c DEFAULT`, then `nvidia-smi compute-policy -i <uuid>
  --set-timeslice <0..3>` (Default/Short/Medium/Long). gpudra sets the interval back to Default on unprepare.
* MPS: compute mode EXCLUSIVE_PROCESS on the GPUs, then `nvidia-cuda-mps-control -d` with
  CUDA_VISIBLE_DEVICES=<the claim's device UUIDs>, CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY set to the
  claim's directories, then `set_default_active_thread_percentage N` and `set_default_device_pinned_mem_limit
  <uuid> <N>M` sent to the control daemon; containers get the pipe directory (CUDA_MPS_PIPE_DIRECTORY) and the
  shm directory mounted (`cdiedits.py`). NVIDIA runs the daemon as a Deployment; gpudra runs it from the plugin
  itself (the daemon forks and detaches), stops it with `quit` on unprepare and sets the compute mode back to
  DEFAULT. The checkpoint records each started daemon so an unprepare after a plugin restart still stops it.

On the simulated backend `RecordingSharing` performs the same steps against a log (JSON lines beside the
simulated GPU state), so tests check the sequence across driver processes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import threading
from typing import Any, Callable, Sequence

from gpudra.atomicfile import ensure_dir

from gpudra.regularfile import read_regular_file
from gpudra.errors import GpudraError

from gpudra.device_config import TIME_SLICE_INTERVALS
from .records import GPU_TYPE, GpuClaimEntry, GpuDevice, MpsDaemon, SharingRecord, mps_daemon_of

log = logging.getLogger("gpudra.driver.sharing")
COMMAND_TIMEOUT_S = 30.0


class SharingError(GpudraError):
    """A sharing step failed (nvidia-smi or the MPS control daemon answered an error)."""


class SharingControl:
    """The steps; each is idempotent (an unprepare after a crash may repeat any of them)."""

    def set_compute_mode(self, gpu_uuid: str, mode: str) -> None:
        raise NotImplementedError

    def set_time_slice(self, gpu_uuid: str, interval: int) -> None:
        raise NotImplementedError

    def start_mps(self, daemon_id: str, device_uuids: list[str], pipe_dir: str, log_dir: str, *,
                  multi_user: bool = False) -> None:
        """`nvidia-cuda-mps-control -d` (`-d -M`: multi-user, clients of any UID, as NVIDIA's template)."""
        raise NotImplementedError

    def mps_command(self, daemon_id: str, pipe_dir: str, command: str) -> None:
        """One command to a running control daemon (`set_default_active_thread_percentage 50`, …)."""
        raise NotImplementedError

    def stop_mps(self, daemon_id: str, pipe_dir: str) -> None:
        raise NotImplementedError


class RecordingSharing(SharingControl):
    """The simulated GPUs' side: each step appended to `log_path` (one JSON object a line) and to `calls`."""

    def __init__(self, log_path: str | None = None):
        self.log_path = log_path
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.running: set[str] = set()

    def _record(self, step: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append(step)
            if self.log_path is not None:
                ensure_dir(os.path.dirname(self.log_path), 0o700)
                # never through a planted symlink, never readable by others
                fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o600)
                with os.fdopen(fd, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(step) + "\n")

    def set_compute_mode(self, gpu_uuid: str, mode: str) -> None:
        self._record({"op": "compute-mode", "gpu": gpu_uuid, "mode": mode})

    def set_time_slice(self, gpu_uuid: str, interval: int) -> None:
        self._record({"op": "time-slice", "gpu": gpu_uuid, "interval": interval})

    def start_mps(self, daemon_id: str, device_uuids: list[str], pipe_dir: str, log_dir: str, *,
                  multi_user: bool = False) -> None:
        self.running.add(daemon_id)
        step: dict[str, Any] = {"op": "mps-start", "id": daemon_id, "devices": device_uuids, "pipe": pipe_dir,
                                "log": log_dir}
        if multi_user:
            step["multiUser"] = True
        self._record(step)

    def mps_command(self, daemon_id: str, pipe_dir: str, command: str) -> None:
        self._record({"op": "mps-command", "id": daemon_id, "command": command})

    def stop_mps(self, daemon_id: str, pipe_dir: str) -> None:
        self.running.discard(daemon_id)
        self._record({"op": "mps-stop", "id": daemon_id})


MAX_SHARING_LOG_BYTES = 64 << 20


def read_sharing_log(path: str) -> list[dict[str, Any]]:
    """The simulated GPUs' sharing steps, one JSON object a line ([] before the first)."""
    raw = read_regular_file(path, MAX_SHARING_LOG_BYTES)
    return [] if raw is None else [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


class NvidiaSmiSharing(SharingControl):
    """Runs nvidia-smi and nvidia-cuda-mps-control from the driver root (LD_LIBRARY_PATH set to the driver's
    library directory so the tools find libnvidia-ml from there, as NVIDIA's LD_PRELOAD does)."""

    def __init__(self, driver_root: str = "/", library_dir: str | None = None):
        self.driver_root = driver_root
        self.library_dir = library_dir

    def _binary(self, name: str) -> str:
        for directory in ("usr/bin", "bin", "usr/local/bin", "usr/sbin"):
            path = os.path.join(self.driver_root, directory, name)
            if os.access(path, os.X_OK):
                return path
        found = shutil.which(name)
        if found is None:
            raise SharingError(f"{name} not found under the driver root {self.driver_root} or on PATH")
        return found

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        if self.library_dir:
            env["LD_LIBRARY_PATH"] = ":".join(p for p in (self.library_dir, env.get("LD_LIBRARY_PATH")) if p)
        env.update(extra or {})
        return env

    def _run(self, argv: list[str], *, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
        try:
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=self._env(env),
                                  timeout=COMMAND_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SharingError(f"{' '.join(argv)}: {exc}") from None
        if done.returncode != 0:
            raise SharingError(f"{' '.join(argv)} exited with {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[:500]}")
        return done.stdout

    def set_compute_mode(self, gpu_uuid: str, mode: str) -> None:
        self._run([self._binary("nvidia-smi"), "-i", gpu_uuid, "-c", mode])

    def set_time_slice(self, gpu_uuid: str, interval: int) -> None:
        self._run([self._binary("nvidia-smi"), "compute-policy", "-i", gpu_uuid, "--set-timeslice", str(interval)])

    @staticmethod
    def _mps_env(pipe_dir: str, log_dir: str | None = None, devices: list[str] | None = None) -> dict[str, str]:
        env = {"CUDA_MPS_PIPE_DIRECTORY": pipe_dir}
        if log_dir is not None:
            env["CUDA_MPS_LOG_DIRECTORY"] = log_dir
        if devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
        return env

    def start_mps(self, daemon_id: str, device_uuids: list[str], pipe_dir: str, log_dir: str, *,
                  multi_user: bool = False) -> None:
        flags = ["-d", "-M"] if multi_user else ["-d"]
        self._run([self._binary("nvidia-cuda-mps-control"), *flags], env=self._mps_env(pipe_dir, log_dir, device_uuids))

    def mps_command(self, daemon_id: str, pipe_dir: str, command: str) -> None:
        self._run([self._binary("nvidia-cuda-mps-control")], env=self._mps_env(pipe_dir), stdin=command + "\n")

    def stop_mps(self, daemon_id: str, pipe_dir: str) -> None:
        if not os.path.exists(os.path.join(pipe_dir, "control")):
            return  # no daemon listens there (never started, or already quit)
        self._run([self._binary("nvidia-cuda-mps-control")], env=self._mps_env(pipe_dir), stdin="quit\n")


def interval_number(name: str | None) -> int:
    return TIME_SLICE_INTERVALS.get(name or "Default", 0)


MULTI_USER_MIN_CAPABILITY = (7, 0)  # NVIDIA's voltaCudaComputeCapability (mps_capability.go)


def _go_int(text: str) -> int | None:
    """Go's strconv.Atoi: an optional sign and ASCII digits, else None."""
    body = text[1:] if text[:1] in "+-" else text
    return int(text) if body.isascii() and body.isdigit() else None


def pinned_limits(sharing: SharingRecord, device_uuids: Sequence[str]) -> dict[str, int]:
    """MiB per device UUID, as NVIDIA's `MpsPerDevicePinnedMemoryLimit.Normalize` (api/nvidia.com/resource/v1beta1/
    sharing.go): the default limit on every device, overridden per device by UUID or by index into `device_uuids`
    (the daemon's UUIDs, sorted as NVIDIA's `UUIDs()` sorts them). A key naming no device of the daemon is an
    error with NVIDIA's message (its ErrInvalidDeviceSelector, "invalid device")."""
    default = sharing.mps_pinned_memory_limit_mib
    limits = {uuid: int(default) for uuid in device_uuids} if default is not None else {}
    for key, mib in sharing.mps_per_device_pinned_memory_mib:
        if key in device_uuids:
            limits[key] = int(mib)
            continue
        index = _go_int(key)
        if index is None:
            raise SharingError(f"{LIMITS_ERROR}: invalid device: unable to parse key as an integer: {key}")
        if not 0 <= index < len(device_uuids):
            raise SharingError(f"{LIMITS_ERROR}: invalid device: invalid device index: {index}")
        limits[device_uuids[index]] = int(mib)
    return dict(sorted(limits.items()))  # a Go template ranges over a map in key order


LIMITS_ERROR = "error transforming DefaultPerDevicePinnedMemoryLimit into string"


def _capability(text: str) -> tuple[int, ...] | None:
    """A CUDA compute capability as Masterminds/semver reads "major.minor[.patch]" (None: not a version)."""
    parts = text.strip().lstrip("v").split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts))


def multi_user_problem(capabilities: dict[str, str], gpus: Sequence[str]) -> str | None:
    """Why multi-user MPS cannot run on `gpus` (UUID -> CUDA compute capability), with NVIDIA's messages
    (cmd/gpu-kubelet-plugin/mps_capability.go `ensureCapability`: errors.Join, newest first), or None."""
    wanted = ".".join(map(str, MULTI_USER_MIN_CAPABILITY))
    problems: list[str] = []
    for uuid in gpus:
        if uuid not in capabilities:  # NVIDIA returns at the first GPU it has no facts for
            return f'could not check gpu {uuid}: missing gpu info (required >= "{wanted}")'
        have = capabilities[uuid]
        parsed = _capability(have)
        if parsed is None:
            problems.insert(0, f'gpu {uuid} has invalid cudaComputeCapability "{have}": Invalid Semantic Version')
        elif parsed < MULTI_USER_MIN_CAPABILITY + (0,):
            problems.insert(0, f'{uuid} has insufficient cudaComputeCapability "{have}", wanted >= "{wanted}"')
    return "\n".join(problems) or None


def _mps_devices(devices: Sequence[GpuDevice]) -> list[GpuDevice]:
    return [r for r in devices if r.sharing is not None and r.sharing.is_mps]


def mps_daemon_id(uid: str, device_uuids: Sequence[str]) -> str:
    """NVIDIA's GetMpsControlDaemonID (sharing.go): the claim UID and the first 5 hex digits of the SHA-256 of its
    devices' sorted UUIDs joined by commas; it names the daemon (NVIDIA: its Deployment `mps-control-daemon-<id>`)."""
    return f"{uid}-{hashlib.sha256(','.join(device_uuids).encode()).hexdigest()[:5]}"


def mps_daemon(uid: str, devices: Sequence[GpuDevice], mps_dir: str) -> MpsDaemon | None:
    """The claim's MPS control daemon (one per claim, for all its MPS devices), or None. Its devices are sorted by
    UUID, as NVIDIA's CUDA_VISIBLE_DEVICES and per-device indices are."""
    mps = _mps_devices(devices)
    if not mps:
        return None
    uuids = tuple(sorted({u for u in (r.device_uuid for r in mps) if u is not None}))
    return MpsDaemon(id=mps_daemon_id(uid, uuids), pipe=os.path.join(mps_dir, "pipe"),
                     log=os.path.join(mps_dir, "log"),
                     gpus=tuple(sorted({r.gpu_uuid for r in mps if r.gpu_uuid is not None})), devices=uuids)


def apply_claim_sharing(control: SharingControl, uid: str, devices: Sequence[GpuDevice], mps_dir: str,
                        record: Callable[[MpsDaemon], None],
                        capabilities: Callable[[], dict[str, str]] = dict) -> None:
    """Time-slicing intervals on full GPUs, then the claim's MPS daemon with its limits (the first MPS config's).
    `record(daemon)` is called before the daemon starts, for the checkpoint. `capabilities()`: GPU UUID -> CUDA
    compute capability, asked only for multi-user MPS. As NVIDIA's MpsControlDaemon.Start, the limits and the
    multi-user check are settled before any GPU changes compute mode."""
    for device in devices:
        sharing = device.sharing
        if sharing is not None and sharing.is_time_slicing and device.type == GPU_TYPE and device.gpu_uuid:
            control.set_compute_mode(device.gpu_uuid, "DEFAULT")
            control.set_time_slice(device.gpu_uuid, interval_number(sharing.time_slice_interval))
    daemon = mps_daemon(uid, devices, mps_dir)
    if daemon is None:
        return
    config = _mps_devices(devices)[0].sharing
    assert config is not None  # an MPS device has its sharing config
    limits = pinned_limits(config, daemon.devices)
    multi_user = bool(config.mps_multi_user)
    if multi_user:
        problem = multi_user_problem(capabilities(), daemon.gpus)
        if problem is not None:
            raise SharingError(f"multiuser mode was requested but is not supported: {problem}")
    for gpu in daemon.gpus:
        control.set_compute_mode(gpu, "EXCLUSIVE_PROCESS")
    record(daemon)
    control.start_mps(daemon.id, list(daemon.devices), daemon.pipe, daemon.log, multi_user=multi_user)
    if config.mps_active_thread_percentage is not None:
        control.mps_command(daemon.id, daemon.pipe,
                            f"set_default_active_thread_percentage {config.mps_active_thread_percentage}")
    for device_uuid, mib in limits.items():
        control.mps_command(daemon.id, daemon.pipe, f"set_default_device_pinned_mem_limit {device_uuid} {mib}M")


def undo_claim_sharing(control: SharingControl, uid: str, entry: GpuClaimEntry, mps_dir: str,
                       held_gpus: set[str]) -> None:
    """Stop the claim's MPS daemon (recorded in the checkpoint, or implied by its MPS devices after a crash before
    it was recorded), then compute mode DEFAULT; time slices back to Default on GPUs no other claim holds."""
    daemon = mps_daemon_of(entry) or mps_daemon(uid, entry.devices, mps_dir)
    if daemon is not None:
        control.stop_mps(daemon.id, daemon.pipe)  # the recorded ID: an older driver's daemon was named by the UID
        for gpu in daemon.gpus:
            control.set_compute_mode(gpu, "DEFAULT")
    for device in entry.devices:
        sharing = device.sharing
        if (sharing is not None and sharing.is_time_slicing and device.type == GPU_TYPE and device.gpu_uuid
                and device.gpu_uuid not in held_gpus):
            control.set_time_slice(device.gpu_uuid, interval_number("Default"))
