"""GPU discovery: one interface (`GpuBackend`), two backends (`nvml`, `simulated`), a GPU model
catalog and simulated node profiles."""

from .backend import BACKENDS, GpuBackend, MigError, open_backend, read_inventory
from .catalog import GPU_MODELS, GpuModel, gpu_model
from .model import (DiscoveryError, Gpu, Inventory, MigDevice, MigProfileInfo, mig_canonical_name,
                    parse_mig_canonical_name)
from .profiles import PROFILES, NodeProfile, node_profile

__all__ = [
    "BACKENDS", "GPU_MODELS", "PROFILES", "DiscoveryError", "Gpu", "GpuBackend", "GpuModel", "Inventory",
    "MigDevice", "MigError", "MigProfileInfo", "NodeProfile", "gpu_model", "mig_canonical_name", "node_profile",
    "open_backend", "parse_mig_canonical_name", "read_inventory",
]
