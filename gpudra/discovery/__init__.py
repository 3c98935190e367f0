"""GPU discovery: one interface (`GpuBackend`), two backends (`nvml`, `simulated`) and simulated node
profiles built from the GPU catalog (`gpudra.catalog`)."""

from .backend import BACKENDS, GpuBackend, MigError, open_backend, read_inventory
from .model import (DiscoveryError, Gpu, Inventory, MigDevice, MigProfileInfo, mig_canonical_name,
                    parse_mig_canonical_name)
from .profiles import PROFILES, NodeProfile, gpu_model, node_profile

__all__ = [
    "BACKENDS", "PROFILES", "DiscoveryError", "Gpu", "GpuBackend", "Inventory",
    "MigDevice", "MigError", "MigProfileInfo", "NodeProfile", "gpu_model", "mig_canonical_name", "node_profile",
    "open_backend", "parse_mig_canonical_name", "read_inventory",
]
