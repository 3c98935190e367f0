"""Choosing and opening a discovery backend: `auto`, `nvml` or `simulated`, by name (what the command line offers).

Above both backends, so that neither the interface (backend.py) nor a backend imports the other."""

from __future__ import annotations

from .backend import GpuBackend
from .model import DiscoveryError, Inventory
from .nvml import NvmlBackend
from .simulated import SimulatedBackend

BACKENDS = ("simulated", "nvml")
# What the command line offers: `auto` (the default) is NVML where it works, simulated GPUs elsewhere, and
# then says so: a real GPU node must never get invented GPUs without being told.
BACKEND_CHOICES = ("auto", *BACKENDS)


def nvml_available() -> bool:
    """Whether NVML initialises here (an NVIDIA driver and libnvidia-ml are present)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - the library is missing, the driver not loaded, no permission: not usable
        return False
    try:
        pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - shutting down a working NVML does not change the answer
        pass
    return True


def resolve_backend(name: str, profile: str | None = None, profile_chosen: bool = False) -> tuple[str, str | None]:
    """(backend, warning): `auto` becomes `nvml` where NVML works, else `simulated` with a loud warning;
    a simulated node profile named on purpose (`profile_chosen`) asks for simulated GPUs, quietly."""
    if name != "auto":
        return name, None
    if profile_chosen:
        return "simulated", None
    if nvml_available():
        return "nvml", None
    return "simulated", (f"no NVIDIA driver (NVML) on this machine: these are SIMULATED GPUs (profile "
                         f"{profile or 'dgx-h100'}), not this node's; pass --backend simulated to say so "
                         "(and silence this), or --backend nvml to require real GPUs")


def open_backend(name: str, *, profile: str | None = None, node_name: str | None = None,
                 state_path: str | None = None) -> GpuBackend:
    """Build a backend by name. `state_path` (simulated only) persists the simulated GPUs'
    MIG state across processes, the way real hardware outlives a driver crash."""
    if name == "simulated":
        return SimulatedBackend(profile or "dgx-h100", node_name=node_name or "node", state_path=state_path)
    if name == "nvml":
        return NvmlBackend(node_name=node_name or "node")
    raise DiscoveryError(f"unknown discovery backend {name!r}; choose one of: {', '.join(BACKENDS)}")


def read_inventory(name: str, *, profile: str | None = None, node_name: str | None = None) -> Inventory:
    """Open a backend, take one inventory, release the backend (what one-shot commands need)."""
    backend = open_backend(name, profile=profile, node_name=node_name)
    try:
        return backend.inventory()
    finally:
        backend.close()
