"""Simulated node profiles: which catalog GPUs a node has, where they sit, static MIG layout."""

from __future__ import annotations

import os
from dataclasses import dataclass


from gpudra.catalog import GpuModel, UnknownGpuModel, catalog_model

from .model import DiscoveryError

# The simulated GB200 rack's fabric clique: a fixed cluster UUID (what the fabric manager assigns) and clique 1.
GB200_RACK_CLIQUE = "4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f.1"
# A GB200 NVL72 rack: 18 compute trays of 4 GPUs, each tray a node running the `gb200-nvl72` profile, all 72
# GPUs in one NVLink domain (`gpudra cluster up --racks`, `gpudra simulate --workload nvl72`).
RACK_PROFILE = "gb200-nvl72"
TRAYS_PER_RACK_MAX = 18

def rack_clique(rack: int) -> str:
    """The fabric clique of simulated GB200 NVL72 rack number `rack` (`gpudra cluster up --racks`): rack 0 is
    GB200_RACK_CLIQUE, every other rack its own fabric (its own cluster UUID, as each rack's fabric manager
    assigns), clique 1 in each."""
    if rack == 0:
        return GB200_RACK_CLIQUE
    import uuid

    return f"{uuid.uuid5(uuid.UUID(GB200_RACK_CLIQUE.split('.')[0]), f'rack-{rack}')}.1"


# PCI buses of the eight GPUs on a DGX/HGX baseboard (NUMA node 0 for the first four).
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def gpu_model(key: str) -> GpuModel:
    """The catalog row for a GPU a node profile names (key, alias or product name)."""
    try:
        return catalog_model(key)
    except UnknownGpuModel as exc:
        raise DiscoveryError(str(exc)) from None


@dataclass(frozen=True)
class GpuSlot:
    model: str
    pci_bus: int
    numa_node: int | None
    # static MIG layout created at "boot" (mig-parted style): (profile name, placement start)
    mig: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True)
class NodeProfile:
    name: str
    description: str
    gpus: tuple[GpuSlot, ...]
    driver_version: str = "580.95.05"
    cuda_driver_version: str = "13.0"
    nvlink_domain: bool = False
    # multi-node NVLink (GB200 NVL): the fabric clique every node of this profile joins, "<clusterUuid>.<cliqueId>"
    # as NVML's nvmlDeviceGetGpuFabricInfoV reports it once the fabric manager has set the rack up
    nvlink_clique: str | None = None


def _hgx(model: str, migs: dict[int, tuple[tuple[str, int], ...]] | None = None) -> tuple[GpuSlot, ...]:
    migs = migs or {}
    return tuple(GpuSlot(model, bus, 0 if i < 4 else 1, migs.get(i)) for i, bus in enumerate(_HGX_BUSES))


_ALL_1G_A100_80 = tuple(("1g.10gb", s) for s in range(7))
_BALANCED_A100_80 = (("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4))

PROFILES: dict[str, NodeProfile] = {
    p.name: p
    for p in [
        NodeProfile("dgx-h100", "DGX H100: 8x H100 80GB HBM3 on one NVLink domain", _hgx("H100-80GB"), nvlink_domain=True),
        NodeProfile("dgx-h200", "DGX H200: 8x H200 141GB on one NVLink domain", _hgx("H200"), nvlink_domain=True),
        NodeProfile("dgx-b200", "DGX B200: 8x B200 180GB on one NVLink domain", _hgx("B200"), nvlink_domain=True),
        NodeProfile("hgx-a100", "HGX A100: 8x A100 80GB, MIG disabled", _hgx("A100-80GB"), nvlink_domain=True),
        NodeProfile(
            "hgx-a100-mig",
            "HGX A100: 8x A100 80GB; GPUs 0-1 all-1g.10gb, GPUs 2-3 all-balanced, GPUs 4-7 full",
            _hgx("A100-80GB", {0: _ALL_1G_A100_80, 1: _ALL_1G_A100_80, 2: _BALANCED_A100_80, 3: _BALANCED_A100_80}),
            nvlink_domain=True,
        ),
        NodeProfile("h100-nvl-pair", "2x H100 NVL (PCIe, NVLink bridge)",
                    (GpuSlot("H100-NVL", 0x41, 0), GpuSlot("H100-NVL", 0xC1, 1)), nvlink_domain=True),
        NodeProfile("l4-node", "4x L4 (e.g. GKE g2-standard-48)",
                    tuple(GpuSlot("L4", bus, 0) for bus in (0x00 + 4, 0x00 + 5, 0x00 + 6, 0x00 + 7))),
        NodeProfile("t4-node", "1x T4 (cloud inference node)", (GpuSlot("T4", 0x04, 0),),
                    driver_version="550.127.05", cuda_driver_version="12.4"),
        NodeProfile("a10-node", "2x A10", (GpuSlot("A10", 0x17, 0), GpuSlot("A10", 0x65, 0))),
        NodeProfile("a30-mig", "2x A30; GPU 0 all-1g.6gb, GPU 1 full",
                    (GpuSlot("A30", 0x21, 0, tuple(("1g.6gb", s) for s in range(4))), GpuSlot("A30", 0x81, 1))),
        NodeProfile("a100-40gb-node", "4x A100 40GB SXM4", tuple(GpuSlot("A100-40GB", b, 0) for b in _HGX_BUSES[:4])),
        # One GB200 NVL72 compute tray: 2 Grace CPUs with 2 Blackwell GPUs each; all 18 trays of the rack share
        # one NVLink fabric (NVSwitch trays), so every node of this profile is in one clique.
        NodeProfile("gb200-nvl72", "GB200 NVL72 compute tray: 4x GB200, one NVLink clique across the rack's nodes",
                    tuple(GpuSlot("GB200", bus, i // 2) for i, bus in enumerate((0x01, 0x02, 0x81, 0x82))),
                    nvlink_clique=GB200_RACK_CLIQUE),
    ]
}


def _profile_from_file(path: str) -> NodeProfile:
    """A custom profile: `{name, description?, driverVersion?, cudaDriverVersion?, nvlinkDomain?,
    gpus: [{model, count?, numaNode?, mig?: [{profile, start}]}]}`."""
    from gpudra.api.yaml_files import LoadError, read_yaml  # the manifest loader's limits and wording

    try:
        data = read_yaml(path) or {}
    except LoadError as exc:
        raise DiscoveryError(f"node profile {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list) or not data["gpus"]:
        raise DiscoveryError(f"node profile {path}: expected a mapping with a non-empty 'gpus' list")
    slots: list[GpuSlot] = []
    for entry in data["gpus"]:
        if not isinstance(entry, dict) or "model" not in entry:
            raise DiscoveryError(f"node profile {path}: every gpus[] entry needs a 'model'")
        gpu_model(str(entry["model"]))
        mig = entry.get("mig")
        if mig and (not isinstance(mig, list) or not all(
                isinstance(m, dict) and "profile" in m and _is_int(m.get("start")) for m in mig)):
            raise DiscoveryError(f"node profile {path}: gpus[].mig must be a list of {{profile, start}} "
                                 f"with an integer start, e.g. [{{profile: 1g.10gb, start: 0}}]")
        mig_layout = tuple((str(m["profile"]), int(m["start"])) for m in mig) if mig else None
        count, numa_node = entry.get("count", 1), entry.get("numaNode")
        if not _is_int(count) or (numa_node is not None and not _is_int(numa_node)):
            raise DiscoveryError(f"node profile {path}: gpus[].count and gpus[].numaNode must be integers")
        for _ in range(count):
            bus = 0x10 + 0x10 * len(slots)
            if bus > 0xFF:
                raise DiscoveryError(f"node profile {path}: too many GPUs")
            slots.append(GpuSlot(str(entry["model"]), bus, numa_node, mig_layout))
    return NodeProfile(
        name=str(data.get("name") or os.path.splitext(os.path.basename(path))[0]),
        description=str(data.get("description", "custom profile")),
        gpus=tuple(slots),
        driver_version=str(data.get("driverVersion", "580.95.05")),
        cuda_driver_version=str(data.get("cudaDriverVersion", "13.0")),
        nvlink_domain=bool(data.get("nvlinkDomain", False)),
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def node_profile(name: str) -> NodeProfile:
    """A built-in profile by name, or a custom one from a YAML file path."""
    if name in PROFILES:
        return PROFILES[name]
    if name.endswith((".yaml", ".yml", ".json")) or os.path.sep in name:
        return _profile_from_file(name)
    raise DiscoveryError(f"unknown node profile {name!r}; known: {', '.join(PROFILES)} (or a YAML file path)")
