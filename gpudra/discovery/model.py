"""What GPU discovery reports, independent of the backend that found it.

Plain dataclasses with `to_dict()` so the CLI can print them as YAML/JSON and the
driver can turn them into ResourceSlice devices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpudra.catalog import MIG_ENGINE_CAPACITIES
from gpudra.errors import GpudraError

MIG_NAME_RE = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")


class DiscoveryError(GpudraError):
    """A problem a user can hit (no driver, no library, unknown profile…); printed without a traceback."""


def rfc1123_compliant(text: str) -> str:
    out = re.sub(r"[^a-z0-9.-]", "-", text.lower()).strip("-").rstrip(".")
    return out[:253]


def mig_canonical_name(parent_minor: int, profile: str, gi_profile_id: int, placement_start: int) -> str:
    """`gpu-<parentMinor>-mig-<profile without dots>-<GI profile ID>-<placement start>` (NVIDIA driver naming)."""
    pname = rfc1123_compliant(profile.replace(".", ""))
    return f"gpu-{parent_minor}-mig-{pname}-{gi_profile_id}-{placement_start}"


def parse_mig_canonical_name(name: str) -> tuple[int, str, int, int] | None:
    """Inverse of `mig_canonical_name`: (parent minor, profile w/o dots, GI profile id, start) or None."""
    match = MIG_NAME_RE.match(name)
    if not match:
        return None
    return int(match.group(1)), match.group(2), int(match.group(3)), int(match.group(4))


@dataclass(frozen=True)
class MigProfileInfo:
    """One GPU-instance profile of a GPU model (C == G profiles only) and where it may be placed."""

    name: str  # go-nvlib style, e.g. "1g.10gb", "1g.10gb+me"
    gi_profile_id: int  # nvmlGpuInstanceProfileInfo.id (19 for 1g), not the NVML index constant
    compute_slices: int
    memory_slices: int  # placement size in memory-slice units
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    placement_starts: tuple[int, ...]

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 1024 * 1024


@dataclass
class MigDevice:
    """A MIG device (GPU instance + one compute instance spanning it) that exists on a GPU."""

    parent_minor: int
    parent_uuid: str
    uuid: str
    profile: str
    gi_profile_id: int
    placement_start: int
    placement_size: int
    gi_id: int
    ci_id: int
    memory_bytes: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int

    @property
    def name(self) -> str:
        return mig_canonical_name(self.parent_minor, self.profile, self.gi_profile_id, self.placement_start)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "uuid": self.uuid,
            "profile": self.profile,
            "giProfileId": self.gi_profile_id,
            "placement": {"start": self.placement_start, "size": self.placement_size},
            "giId": self.gi_id,
            "ciId": self.ci_id,
            "memoryBytes": self.memory_bytes,
            **{name: getattr(self, attribute) for name, attribute in MIG_ENGINE_CAPACITIES.items()},
        }


@dataclass
class Gpu:
    index: int
    minor: int
    uuid: str
    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: str  # "major.minor"
    memory_bytes: int | None
    pci_bus_id: str  # lower-case extended BDF, "0000:3b:00.0"
    pcie_root: str | None = None  # "pci0000:00"
    numa_node: int | None = None
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_devices: list[MigDevice] = field(default_factory=list)
    model: str | None = None  # catalog key when known ("H100-80GB")
    nvlink_domain: str | None = None
    nvlink_clique: str | None = None  # NVLink fabric "<clusterUuid>.<cliqueId>" (multi-node NVLink, GB200 NVL)

    @property
    def name(self) -> str:
        return f"gpu-{self.minor}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "index": self.index,
            "minor": self.minor,
            "uuid": self.uuid,
            "productName": self.product_name,
            "brand": self.brand,
            "architecture": self.architecture,
            "cudaComputeCapability": self.cuda_compute_capability,
            "memoryBytes": self.memory_bytes,
            "pciBusID": self.pci_bus_id,
            "pcieRoot": self.pcie_root,
            "numaNode": self.numa_node,
            "migCapable": self.mig_capable,
            "migEnabled": self.mig_enabled,
        }
        if self.model:
            out["model"] = self.model
        if self.nvlink_domain:
            out["nvlinkDomain"] = self.nvlink_domain
        if self.nvlink_clique:
            out["cliqueID"] = self.nvlink_clique
        if self.mig_devices:
            out["migDevices"] = [m.to_dict() for m in self.mig_devices]
        return out


@dataclass
class Inventory:
    """Everything discovery found on one node."""

    backend: str
    driver_version: str  # "580.95.05" as NVML reports it
    cuda_driver_version: str  # "13.0"
    gpus: list[Gpu]
    profile: str | None = None
    # What could not be read, one line each ("GPU 3: ..."); the rest of the inventory is still valid.
    problems: list[str] = field(default_factory=list)

    def gpu_by_minor(self, minor: int) -> Gpu | None:
        for gpu in self.gpus:
            if gpu.minor == minor:
                return gpu
        return None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": self.backend,
            "driverVersion": self.driver_version,
            "cudaDriverVersion": self.cuda_driver_version,
            "gpus": [g.to_dict() for g in self.gpus],
        }
        if self.profile:
            out["profile"] = self.profile
        if self.problems:
            out["problems"] = list(self.problems)
        return out
