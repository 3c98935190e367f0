"""Where the node driver keeps its sockets, checkpoint and CDI specs.

With `root` set (development, tests, `gpudra driver run --root DIR`) every absolute path
is placed under it with its usual layout, so the whole agent runs without privileges.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import sys
import time
from dataclasses import dataclass

from gpudra.atomicfile import ensure_dir, remove_stale_temps, write_atomic
from gpudra.cdi.writer import SPEC_DIR_MODE
from gpudra.vocabulary import DRIVER_NAME

from .cdispec import claim_spec_file_name

PRIVATE_DIR_MODE = 0o700  # the plugin's own directory (checkpoint, DRA socket) and state directories
# sun_path holds 108 bytes with the terminating NUL on Linux, but gRPC (1.6x, add_port) refuses paths of more than
# 105 bytes; tests/gpuplugin/test_durability.py binds one of exactly this length. macOS' sun_path holds 104 with the NUL.
SOCKET_PATH_MAX = 103 if sys.platform == "darwin" else 105
SOCKET_NAME_MAX = 105 - 1 - len("/var/lib/kubelet/plugins_registry")  # what gRPC accepts under the usual dir


def check_socket_path(path: str) -> None:
    size = len(os.fsencode(path))
    if size > SOCKET_PATH_MAX:
        raise ValueError(f"unix socket path {path} is {size} bytes; gRPC allows at most {SOCKET_PATH_MAX}: "
                         "use a shorter --root or directory")


def _short_uid(uid: str, *parts: str) -> str:
    digest = hashlib.sha256("\0".join((*parts, uid)).encode()).digest()
    return base64.urlsafe_b64encode(digest[:8]).decode().rstrip("=")


def registration_socket_name(driver_name: str, instance_uid: str | None = None) -> str:
    """`<driver>-reg.sock`, or with rolling updates (kubeletplugin.RollingUpdate(podUID), dynamic-resource-allocation
    `draplugin.go`) `<driver>-<pod UID>-reg.sock`, so two driver pods of one node register side by side; a name too
    long for a unix socket uses a hash of the UID instead (as newer kubeletplugin releases do)."""
    if not instance_uid:
        return f"{driver_name}-reg.sock"
    name = f"{driver_name}-{instance_uid}-reg.sock"
    if len(name) > SOCKET_NAME_MAX:
        name = f"{driver_name}-{_short_uid(instance_uid)}-reg.sock"
    if len(name) > SOCKET_NAME_MAX:
        name = f"dra-{_short_uid(instance_uid, driver_name)}-reg.sock"
    return name


def dra_socket_name(instance_uid: str | None = None) -> str:
    """`dra.sock`, with rolling updates `dra-<pod UID>.sock` (the plugin directory is the driver's already)."""
    if not instance_uid:
        return "dra.sock"
    name = f"dra-{instance_uid}.sock"
    return name if len(name) <= 60 else f"dra-{_short_uid(instance_uid)}.sock"


@dataclass(frozen=True)
class DriverPaths:
    driver_name: str = DRIVER_NAME
    root: str = "/"
    registry_dir: str = "/var/lib/kubelet/plugins_registry"
    plugins_dir: str = "/var/lib/kubelet/plugins"
    cdi_dir: str = "/var/run/cdi"
    static_cdi_dir: str = "/etc/cdi"
    sim_state_dir: str = "/var/lib/gpudra-sim"
    instance_uid: str | None = None  # the driver pod's UID with rolling updates (per-pod socket names)

    def _under_root(self, path: str) -> str:
        if self.root in ("", "/"):
            return path
        return os.path.join(self.root, path.lstrip("/"))

    @property
    def registration_socket(self) -> str:
        return os.path.join(self._under_root(self.registry_dir),
                            registration_socket_name(self.driver_name, self.instance_uid))

    def registration_sockets(self) -> list[str]:
        """Every registration socket of this driver in the registry directory (rolling updates: one per driver
        pod), the most recently created first: the one the kubelet prefers while it answers."""
        registry = self._under_root(self.registry_dir)
        found = set(glob.glob(os.path.join(glob.escape(registry), glob.escape(self.driver_name) + "-*reg.sock")))

        def created(path: str) -> int:
            try:
                return os.stat(path).st_mtime_ns
            except FileNotFoundError:
                return -1
        return sorted((p for p in found if created(p) >= 0), key=created, reverse=True)

    @property
    def serialize_lock(self) -> str:
        """With rolling updates: held around each prepare/unprepare by whichever driver pod runs it."""
        return os.path.join(self.plugin_dir, "serialize.lock")

    @property
    def plugin_dir(self) -> str:
        return os.path.join(self._under_root(self.plugins_dir), self.driver_name)

    @property
    def dra_socket(self) -> str:
        return os.path.join(self.plugin_dir, dra_socket_name(self.instance_uid))

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.plugin_dir, "checkpoint.json")

    def newer_checkpoint(self, version: int) -> str:
        """Where start-up keeps a checkpoint of a newer format, byte for byte, before starting a fresh one."""
        return os.path.join(self.plugin_dir, f"checkpoint-version-{version}.json")

    @property
    def quarantine(self) -> str:
        """Checkpoint entries set aside for the operator (see quarantine.py)."""
        return os.path.join(self.plugin_dir, "quarantine.json")

    @property
    def republish_request(self) -> str:
        """Touched by `gpudra mig apply`/`mig manager` after repartitioning: the running driver rediscovers
        its GPUs and republishes its ResourceSlices when this file's content changes."""
        return os.path.join(self.plugin_dir, "republish-request")

    def request_republish(self) -> None:
        ensure_dir(self.plugin_dir, PRIVATE_DIR_MODE)
        write_atomic(self.republish_request, f"{time.time_ns()}\n".encode(), mode=0o600,
                     label="republish-request", fsync=False)

    @property
    def cdi_spec_dir(self) -> str:
        return self._under_root(self.cdi_dir)

    @property
    def cdi_spec_dirs(self) -> tuple[str, str]:
        """Directories a container runtime on this node reads, lowest priority first."""
        return self._under_root(self.static_cdi_dir), self._under_root(self.cdi_dir)

    @property
    def simulated_state(self) -> str:
        return os.path.join(self._under_root(self.sim_state_dir), "gpus.json")

    @property
    def simulated_sharing_log(self) -> str:
        """The simulated GPUs' record of time-slicing and MPS steps (sharing.py), beside their state."""
        return os.path.join(self._under_root(self.sim_state_dir), "sharing.log")

    def make_dirs(self) -> None:
        """Create what is missing with explicit modes, whatever the umask. The kubelet's registry
        directory keeps the mode it has (the kubelet owns it)."""
        os.makedirs(os.path.dirname(self.registration_socket), mode=PRIVATE_DIR_MODE, exist_ok=True)
        ensure_dir(self.plugin_dir, PRIVATE_DIR_MODE)
        ensure_dir(self.cdi_spec_dir, SPEC_DIR_MODE)

    def remove_stale_temps(self) -> list[str]:
        """Temp files that interrupted writes of this driver's files left behind (start-up only)."""
        removed = remove_stale_temps(self.plugin_dir, "checkpoint.json")
        removed += remove_stale_temps(self.cdi_spec_dir, claim_spec_file_name(self.driver_name, ""))
        removed += remove_stale_temps(os.path.dirname(self.simulated_state), os.path.basename(self.simulated_state))
        return removed
