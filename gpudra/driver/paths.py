"""Where the node driver keeps its sockets, checkpoint and CDI specs.

With `root` set (development, tests, `gpudra driver run --root DIR`) every absolute path
is placed under it with its usual layout, so the whole agent runs without privileges.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DriverPaths:
    driver_name: str = "gpu.nvidia.com"
    root: str = "/"
    registry_dir: str = "/var/lib/kubelet/plugins_registry"
    plugins_dir: str = "/var/lib/kubelet/plugins"
    cdi_dir: str = "/var/run/cdi"
    static_cdi_dir: str = "/etc/cdi"
    sim_state_dir: str = "/var/lib/gpudra-sim"

    def _under_root(self, path: str) -> str:
        if self.root in ("", "/"):
            return path
        return os.path.join(self.root, path.lstrip("/"))

    @property
    def registration_socket(self) -> str:
        return os.path.join(self._under_root(self.registry_dir), f"{self.driver_name}-reg.sock")

    @property
    def plugin_dir(self) -> str:
        return os.path.join(self._under_root(self.plugins_dir), self.driver_name)

    @property
    def dra_socket(self) -> str:
        return os.path.join(self.plugin_dir, "dra.sock")

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.plugin_dir, "checkpoint.json")

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

    def make_dirs(self) -> None:
        for directory in (os.path.dirname(self.registration_socket), self.plugin_dir, self.cdi_spec_dir):
            os.makedirs(directory, exist_ok=True)
