"""Catalog of real NVIDIA datacenter GPU models used by the simulated backend.

Memory sizes are what NVML reports as `nvmlDeviceGetMemoryInfo().total` (in MiB) on
these parts; product names are `nvmlDeviceGetName` strings; PCI device ids are the
ones mig-parted uses in its device filters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .model import DiscoveryError


@dataclass(frozen=True)
class GpuModel:
    key: str
    product_name: str
    memory_mib: int
    architecture: str
    compute_capability: str
    pci_device_id: int
    mig_capable: bool
    brand: str = "Nvidia"  # go-nvlib brand string; datacenter parts report "Nvidia"

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 1024 * 1024

    def to_dict(self) -> dict:
        return {
            "model": self.key,
            "productName": self.product_name,
            "memoryMiB": self.memory_mib,
            "architecture": self.architecture,
            "cudaComputeCapability": self.compute_capability,
            "pciDeviceID": f"0x{self.pci_device_id:04X}",
            "migCapable": self.mig_capable,
            "brand": self.brand,
        }


GPU_MODELS: dict[str, GpuModel] = {
    m.key: m
    for m in [
        GpuModel("T4", "Tesla T4", 15360, "Turing", "7.5", 0x1EB8, False),
        GpuModel("L4", "NVIDIA L4", 23034, "Ada Lovelace", "8.9", 0x27B8, False),
        GpuModel("A10", "NVIDIA A10", 23028, "Ampere", "8.6", 0x2236, False),
        GpuModel("A30", "NVIDIA A30", 24576, "Ampere", "8.0", 0x20B7, True),
        GpuModel("A100-40GB", "NVIDIA A100-SXM4-40GB", 40960, "Ampere", "8.0", 0x20B0, True),
        GpuModel("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, "Ampere", "8.0", 0x20B2, True),
        GpuModel("H100-80GB", "NVIDIA H100 80GB HBM3", 81559, "Hopper", "9.0", 0x2330, True),
        GpuModel("H100-NVL", "NVIDIA H100 NVL", 95830, "Hopper", "9.0", 0x2321, True),
        GpuModel("H200", "NVIDIA H200", 143771, "Hopper", "9.0", 0x2335, True),
        GpuModel("B200", "NVIDIA B200", 183359, "Blackwell", "10.0", 0x2901, True),
    ]
}

_ALIASES = {"H100": "H100-80GB", "A100": "A100-80GB", "H100NVL": "H100-NVL", "H100 NVL": "H100-NVL"}


def gpu_model(key: str) -> GpuModel:
    found = GPU_MODELS.get(key) or GPU_MODELS.get(_ALIASES.get(key, ""))
    if found is None:
        for model in GPU_MODELS.values():
            if model.key.lower() == key.lower() or model.product_name.lower() == key.lower():
                return model
        raise DiscoveryError(f"unknown GPU model {key!r}; known: {', '.join(GPU_MODELS)}")
    return found


def model_for_product_name(product_name: str, memory_mib: int | None = None) -> GpuModel | None:
    """Best catalog match for an NVML product name (used to find MIG profiles for real GPUs)."""
    exact = [m for m in GPU_MODELS.values() if m.product_name == product_name]
    if exact:
        return exact[0]
    lowered = product_name.lower()
    tokens = set(re.split(r"[\s_-]+", lowered))
    candidates = [m for m in GPU_MODELS.values() if m.key.split("-")[0].lower() in tokens]
    candidates.sort(key=lambda m: abs(m.memory_mib - memory_mib) if memory_mib else 0)
    return candidates[0] if candidates else None
