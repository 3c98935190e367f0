"""GPU discovery: one interface (`GpuBackend`), two backends (`nvml`, `simulated`) and simulated node
profiles built from the GPU catalog (`gpudra.catalog`)."""

from .backend import GpuBackend, MigError
from .backends import BACKEND_CHOICES, BACKENDS, nvml_available, open_backend, read_inventory, resolve_backend
from .model import (DiscoveryError, Gpu, Inventory, MigDevice, MigProfileInfo, mig_canonical_name,
                    parse_mig_canonical_name)
from .profiles import PROFILES, NodeProfile, gpu_model, node_profile

__all__ = [
    "BACKEND_CHOICES", "BACKENDS", "PROFILES", "DiscoveryError", "Gpu", "GpuBackend", "Inventory",
    "MigDevice", "MigError", "MigProfileInfo", "NodeProfile", "gpu_model", "mig_canonical_name", "node_profile",
    "nvml_available", "open_backend", "parse_mig_canonical_name", "read_inventory", "resolve_backend",
]
