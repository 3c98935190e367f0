"""The GPU catalog: one table of NVIDIA datacenter GPU models, read by discovery (simulated GPUs, naming
real ones), the driver and MIG.

Each `GpuModel` row holds a model's identity (NVML product names, aliases, PCI device IDs), memory,
architecture, CUDA compute capability and, for MIG-capable parts, its GPU-instance profiles and
placements. Adding a GPU model is one `_model(...)` row in `_build_catalog()`.

This is data, not discovery. On real hardware NVML (`GetGpuInstanceProfileInfo`,
`GetGpuInstancePossiblePlacements`) is the authority and wins over this table; the catalog
serves the simulated backend, config generation without hardware, validation and planning.

Sources (noted per model and, where it differs, per profile):
* memory sizes are what NVML reports as `nvmlDeviceGetMemoryInfo().total` (MiB); product names are
  `nvmlDeviceGetName` strings; PCI device IDs are the ones mig-parted uses in its device filters;
* profile names and max counts: NVIDIA mig-parted `deployments/systemd/config-default.yaml`
  (the table the GPU Operator ships as `default-mig-parted-config`);
* placements: `nvidia-smi mig -lgipp` geometry (A100, verified), the same geometry in
  NVIDIA k8s-test-infra nvml-mock tables for H100/GB200/GB300, and the DRA driver's note
  that a 3g profile takes 4 of 8 memory slices on B200;
* memory, SM and engine counts: `nvidia-smi mig -lgip` outputs quoted in the MIG user
  guide and in mig-parted / gpu-operator / dra-driver issues. Values we could not find are
  `None` ("unknown"); memory sizes marked *estimated* were chosen to agree with the
  profile name (go-nvlib's naming rule) and with the other profiles of the GPU, and are
  the first thing real hardware will correct.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable

from gpudra.errors import GpudraError

MIB = 1024 * 1024

# A MIG device's engines as the NVIDIA DRA driver publishes them: capacity name -> the MigProfile (and
# gpudra.discovery MigDevice) field that counts them. Memory is published apart, as a quantity.
MIG_ENGINE_CAPACITIES: dict[str, str] = {
    "multiprocessors": "multiprocessors",
    "copyEngines": "copy_engines",
    "decoders": "decoders",
    "encoders": "encoders",
    "jpegEngines": "jpeg_engines",
    "ofaEngines": "ofa_engines",
}

SOURCE_CONFIG_DEFAULT = "mig-parted config-default.yaml (names, max counts)"
SOURCE_LGIPP = "nvidia-smi mig -lgipp geometry (A100 verified; H100/GB200/GB300 nvml-mock tables)"
SOURCE_MIG_GUIDE = "NVIDIA MIG user guide nvidia-smi mig -lgip tables"
ESTIMATED = "estimated: memory chosen to match the profile name; verify on hardware"
INFERRED_ME = "inferred: +me variant present on every Hopper/Blackwell part; not in config-default"


class UnknownGpuModel(GpudraError, LookupError):
    """No catalog entry (or, for the MIG lookups, no MIG-capable one) for a GPU name, alias or PCI device ID."""


class UnknownMigProfile(GpudraError, LookupError):
    """A profile name that the GPU model does not offer."""


@dataclass(frozen=True, order=True)
class Placement:
    """Where a GPU instance sits, in memory-slice units: slices [start, start + size)."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def memory_slices(self) -> range:
        return range(self.start, self.end)

    def overlaps(self, other: "Placement") -> bool:
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile (with its full-size compute instance, C == G)."""

    name: str  # e.g. "1g.10gb", "1g.10gb+me"
    profile_id: int  # nvmlGpuInstanceProfileInfo.id (19 for 1g on A100/H100), used in device names
    nvml_index: int  # NVML_GPU_INSTANCE_PROFILE_* constant passed to GetGpuInstanceProfileInfo
    compute_slices: int  # G
    memory_slices: int  # placement size
    memory_mib: int
    max_instances: int
    placements: tuple[Placement, ...]
    multiprocessors: int | None = None
    copy_engines: int | None = None
    decoders: int | None = None
    encoders: int | None = None
    jpeg_engines: int | None = None
    ofa_engines: int | None = None
    source: str = ""

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    @property
    def media_extensions(self) -> bool:
        """`+me` profiles own the GPU's media engines: at most one such instance per GPU."""
        return self.name.endswith("+me") or "+me." in self.name

    @property
    def config_name(self) -> str:
        """Name of the mig-parted `all-<profile>` config (`+` becomes `.`)."""
        return "all-" + self.name.replace("+", ".")

    @property
    def engine_counts(self) -> dict[str, int | None]:
        """Capacity name -> count, as the NVIDIA DRA driver publishes them (memory excluded)."""
        return {name: getattr(self, attribute) for name, attribute in MIG_ENGINE_CAPACITIES.items()}

    def placement_at(self, start: int) -> Placement:
        for placement in self.placements:
            if placement.start == start:
                return placement
        raise ValueError(f"profile {self.name} has no placement starting at memory slice {start}")


@dataclass(frozen=True)
class GpuModel:
    """A GPU model: identity, memory, architecture and (MIG-capable parts) its MIG profiles."""

    key: str  # short alias, e.g. "h100-80gb"
    display_name: str  # e.g. "H100-80GB": what discovery reports as the GPU's `model`
    product_names: tuple[str, ...]  # NVML nvmlDeviceGetName values, the first is the simulated one
    aliases: tuple[str, ...]
    pci_device_ids: tuple[int, ...]  # PCI device IDs (vendor 0x10de)
    architecture: str  # as the DRA driver's `architecture` attribute: Ampere, Hopper, Blackwell
    compute_capability: str  # CUDA "major.minor"
    compute_slices: int  # 0 without MIG
    memory_slices: int  # 0 without MIG
    total_memory_mib: int  # nvmlDeviceGetMemoryInfo().total in MiB
    profiles: tuple[MigProfile, ...]  # empty without MIG
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    brand: str = "Nvidia"  # go-nvlib brand string; datacenter parts report "Nvidia"

    @property
    def product_name(self) -> str:
        return self.product_names[0]

    @property
    def memory_bytes(self) -> int:
        return self.total_memory_mib * MIB

    @property
    def mig_capable(self) -> bool:
        return bool(self.profiles)

    @cached_property
    def _by_name(self) -> dict[str, MigProfile]:
        return {profile.name.lower(): profile for profile in self.profiles}

    def profile(self, name: str) -> MigProfile:
        try:
            return self._by_name[name.strip().lower()]
        except KeyError:
            known = ", ".join(p.name for p in self.profiles)
            raise UnknownMigProfile(f"{self.display_name} has no MIG profile {name!r} (known: {known})") from None

    def has_profile(self, name: str) -> bool:
        return name.strip().lower() in self._by_name

    def profile_by_id(self, profile_id: int) -> MigProfile:
        for profile in self.profiles:
            if profile.profile_id == profile_id:
                return profile
        raise UnknownMigProfile(f"{self.display_name} has no MIG profile with ID {profile_id}")

    @property
    def dynamic_mig_capable(self) -> bool:
        """Hopper and later toggle MIG mode without a GPU reset (what DynamicMIG relies on)."""
        return self.mig_capable and self.architecture != "Ampere"

    @property
    def device_filters(self) -> tuple[str, ...]:
        """mig-parted `device-filter` values: PCI `<device><vendor>` as `0xDDDD10DE`."""
        return tuple(f"0x{device_id:04X}10DE" for device_id in self.pci_device_ids)

    @property
    def smallest_profiles_by_g(self) -> dict[int, MigProfile]:
        """For each compute-slice count the base profile mig-parted's all-balanced uses.

        mig-parted picks, per G, the profile without attributes that has the highest max count;
        ties go to the smaller memory (the plain 1g over the double-memory 1g).
        """
        chosen: dict[int, MigProfile] = {}
        for profile in self.profiles:
            if "+" in profile.name or "-" in profile.name:
                continue
            best = chosen.get(profile.compute_slices)
            if best is None or (profile.max_instances, -profile.memory_mib) > (best.max_instances, -best.memory_mib):
                chosen[profile.compute_slices] = profile
        return chosen


# --- building blocks -------------------------------------------------------------------------------


def _placements(starts: Iterable[int], size: int) -> tuple[Placement, ...]:
    return tuple(Placement(start, size) for start in starts)


@dataclass(frozen=True)
class _Engines:
    sm: int | None = None
    ce: int | None = None
    dec: int | None = None
    enc: int | None = None
    jpeg: int | None = None
    ofa: int | None = None


def _profile(name: str, pid: int, index: int, g: int, size: int, mem_mib: int, count: int,
             placements: tuple[Placement, ...], eng: _Engines, source: str) -> MigProfile:
    return MigProfile(
        name=name, profile_id=pid, nvml_index=index, compute_slices=g, memory_slices=size, memory_mib=mem_mib,
        max_instances=count, placements=placements, multiprocessors=eng.sm, copy_engines=eng.ce,
        decoders=eng.dec, encoders=eng.enc, jpeg_engines=eng.jpeg, ofa_engines=eng.ofa, source=source,
    )


def _gib(gib: float) -> int:
    return round(gib * 1024)


@dataclass(frozen=True)
class _SevenSliceRow:
    """Per-GPU numbers of the standard 7-compute / 8-memory-slice geometry."""

    one: tuple[str, float, _Engines]  # 1g (ID 19)
    one_me: tuple[str, float, _Engines] | None  # 1g+me (ID 20)
    one_double: tuple[str, float, _Engines]  # 1g with two memory slices (ID 15)
    two: tuple[str, float, _Engines]  # 2g (ID 14)
    three: tuple[str, float, _Engines]  # 3g (ID 9)
    four: tuple[str, float, _Engines]  # 4g (ID 5)
    seven: tuple[str, float, _Engines]  # 7g (ID 0)
    estimated: frozenset[str] = frozenset()  # profile names whose memory is estimated
    me_source: str = ""


def _seven_slice_profiles(row: _SevenSliceRow, source: str) -> tuple[MigProfile, ...]:
    # (row field, profile ID, NVML index constant, G, placement size, max count, placement starts)
    geometry = [
        (row.one, 19, 0, 1, 1, 7, range(0, 7)),
        (row.one_me, 20, 7, 1, 1, 1, range(0, 7)),
        (row.one_double, 15, 9, 1, 2, 4, range(0, 8, 2)),
        (row.two, 14, 1, 2, 2, 3, range(0, 6, 2)),
        (row.three, 9, 2, 3, 4, 2, [0, 4]),
        (row.four, 5, 3, 4, 4, 1, [0]),
        (row.seven, 0, 4, 7, 8, 1, [0]),
    ]
    profiles = []
    for entry, pid, index, g, size, count, starts in geometry:
        if entry is None:
            continue
        name, gib, engines = entry
        note = source
        if name in row.estimated:
            note = f"{source}; {ESTIMATED}"
        if pid == 20 and row.me_source:
            note = f"{note}; {row.me_source}"
        profiles.append(_profile(name, pid, index, g, size, _gib(gib), count, _placements(starts, size), engines, note))
    return tuple(profiles)


def _model(key: str, display: str, products: tuple[str, ...], aliases: tuple[str, ...], pci: tuple[int, ...],
           arch: str, cc: str, total_mib: int, profiles: tuple[MigProfile, ...] = (), source: str = "",
           compute_slices: int = 7, memory_slices: int = 8, notes: tuple[str, ...] = ()) -> GpuModel:
    mig = bool(profiles)
    return GpuModel(key=key, display_name=display, product_names=products, aliases=aliases,
                    pci_device_ids=pci, architecture=arch, compute_capability=cc,
                    compute_slices=compute_slices if mig else 0, memory_slices=memory_slices if mig else 0,
                    total_memory_mib=total_mib, profiles=profiles, source=source, notes=notes)


_SRC = f"{SOURCE_CONFIG_DEFAULT}; {SOURCE_LGIPP}"
_UNKNOWN = _Engines()

# Ampere engine pattern (MIG user guide): only the 7g and +me instances get JPEG/OFA.
_A100_1G = _Engines(sm=14, ce=1, dec=0, enc=0, jpeg=0, ofa=0)
_A100_1G_ME = _Engines(sm=14, ce=1, dec=1, enc=0, jpeg=1, ofa=1)
_A100_1G_DOUBLE = _Engines(sm=14, ce=1, dec=1, enc=0, jpeg=0, ofa=0)
_A100_2G = _Engines(sm=28, ce=2, dec=1, enc=0, jpeg=0, ofa=0)
_A100_3G = _Engines(sm=42, ce=3, dec=2, enc=0, jpeg=0, ofa=0)
_A100_4G = _Engines(sm=56, ce=4, dec=2, enc=0, jpeg=0, ofa=0)
_A100_7G = _Engines(sm=98, ce=7, dec=5, enc=0, jpeg=1, ofa=1)

# Hopper pattern (H100 SXM / H200 lgip outputs): one decoder and JPEG engine per compute slice.
_H_1G = _Engines(sm=16, ce=1, dec=1, enc=0, jpeg=1, ofa=0)
_H_1G_ME = _Engines(sm=16, ce=1, dec=1, enc=0, jpeg=1, ofa=1)
_H_1G_DOUBLE = _Engines(sm=26, ce=1, dec=1, enc=0, jpeg=1, ofa=0)
_H_2G = _Engines(sm=32, ce=2, dec=2, enc=0, jpeg=2, ofa=0)
_H_3G = _Engines(sm=60, ce=3, dec=3, enc=0, jpeg=3, ofa=0)
_H_4G = _Engines(sm=64, ce=4, dec=4, enc=0, jpeg=4, ofa=0)
_H_7G = _Engines(sm=132, ce=8, dec=7, enc=0, jpeg=7, ofa=1)


def _hopper_row(one: str, one_gib: float, double: str, double_gib: float, two: str, three: str, three_gib: float,
                four: str, seven: str, seven_gib: float, *, me: bool = True, estimated: frozenset[str] = frozenset(),
                me_source: str = "") -> _SevenSliceRow:
    return _SevenSliceRow(
        one=(one, one_gib, _H_1G),
        one_me=(one + "+me", one_gib, _H_1G_ME) if me else None,
        one_double=(double, double_gib, _H_1G_DOUBLE),
        two=(two, double_gib, _H_2G),
        three=(three, three_gib, _H_3G),
        four=(four, three_gib, _H_4G),
        seven=(seven, seven_gib, _H_7G),
        estimated=estimated,
        me_source=me_source,
    )


def _blackwell_row(one: str, one_gib: float, one_eng: _Engines, double: str, double_gib: float, double_eng: _Engines,
                   two: str, two_eng: _Engines, three: str, three_gib: float, four: str, seven: str,
                   seven_gib: float, estimated: frozenset[str]) -> _SevenSliceRow:
    one_me = _Engines(sm=one_eng.sm, ce=one_eng.ce, dec=one_eng.dec, enc=one_eng.enc, jpeg=one_eng.jpeg,
                      ofa=1 if one_eng.sm is not None else None)
    return _SevenSliceRow(
        one=(one, one_gib, one_eng), one_me=(one + "+me", one_gib, one_me),
        one_double=(double, double_gib, double_eng), two=(two, double_gib, two_eng),
        three=(three, three_gib, _UNKNOWN), four=(four, three_gib, _UNKNOWN), seven=(seven, seven_gib, _UNKNOWN),
        estimated=estimated,
    )


def _a30_profiles() -> tuple[MigProfile, ...]:
    src = f"{SOURCE_CONFIG_DEFAULT}; {SOURCE_MIG_GUIDE} (A30); profile IDs: verify on hardware"
    return (
        _profile("1g.6gb", 14, 0, 1, 1, _gib(5.8125), 4, _placements(range(4), 1),
                 _Engines(sm=14, ce=1, dec=0, enc=0, jpeg=0, ofa=0), src),
        _profile("1g.6gb+me", 21, 7, 1, 1, _gib(5.8125), 1, _placements(range(4), 1),
                 _Engines(sm=14, ce=1, dec=1, enc=0, jpeg=1, ofa=1), src),
        _profile("2g.12gb", 5, 1, 2, 2, _gib(11.6875), 2, _placements([0, 2], 2),
                 _Engines(sm=28, ce=2, dec=2, enc=0, jpeg=0, ofa=0), src),
        _profile("2g.12gb+me", 6, 8, 2, 2, _gib(11.6875), 1, _placements([0, 2], 2),
                 _Engines(sm=28, ce=2, dec=2, enc=0, jpeg=1, ofa=1), src),
        _profile("4g.24gb", 0, 3, 4, 4, _gib(23.4375), 1, _placements([0], 4),
                 _Engines(sm=56, ce=4, dec=4, enc=0, jpeg=1, ofa=1), src),
    )


def _build_catalog() -> tuple[GpuModel, ...]:
    a100_40 = _SevenSliceRow(
        one=("1g.5gb", 4.75, _A100_1G), one_me=("1g.5gb+me", 4.75, _A100_1G_ME),
        one_double=("1g.10gb", 9.625, _A100_1G_DOUBLE), two=("2g.10gb", 9.625, _A100_2G),
        three=("3g.20gb", 19.5, _A100_3G), four=("4g.20gb", 19.5, _A100_4G), seven=("7g.40gb", 39.25, _A100_7G),
    )
    a100_80 = _SevenSliceRow(
        one=("1g.10gb", 9.5, _A100_1G), one_me=("1g.10gb+me", 9.5, _A100_1G_ME),
        one_double=("1g.20gb", 19.5, _A100_1G_DOUBLE), two=("2g.20gb", 19.5, _A100_2G),
        three=("3g.40gb", 39.25, _A100_3G), four=("4g.40gb", 39.25, _A100_4G), seven=("7g.80gb", 78.75, _A100_7G),
    )
    h100_80 = _hopper_row("1g.10gb", 9.75, "1g.20gb", 19.625, "2g.20gb", "3g.40gb", 39.5, "4g.40gb", "7g.80gb", 79.25)
    h100_nvl = _hopper_row("1g.12gb", 10.75, "1g.24gb", 21.625, "2g.24gb", "3g.47gb", 46.375, "4g.47gb", "7g.94gb",
                           93.125)
    h100_96 = _hopper_row("1g.12gb", 11.0, "1g.24gb", 22.0, "2g.24gb", "3g.48gb", 47.0, "4g.48gb", "7g.96gb", 94.0,
                          estimated=frozenset({"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb",
                                               "7g.96gb"}),
                          me_source=INFERRED_ME)
    h200 = _hopper_row("1g.18gb", 16.0, "1g.35gb", 32.25, "2g.35gb", "3g.71gb", 69.5, "4g.71gb", "7g.141gb", 139.75,
                       estimated=frozenset({"7g.141gb"}))
    gh200 = _hopper_row("1g.18gb", 17.5, "1g.36gb", 35.25, "2g.36gb", "3g.72gb", 71.0, "4g.72gb", "7g.144gb", 142.5,
                        estimated=frozenset({"3g.72gb", "4g.72gb", "7g.144gb"}))
    b200 = _blackwell_row(
        "1g.23gb", 22.0, _Engines(sm=18, ce=2, dec=1, jpeg=1), "1g.45gb", 44.25, _Engines(sm=30),
        "2g.45gb", _Engines(sm=36, ce=4, dec=2, jpeg=2), "3g.90gb", 89.25, "4g.90gb", "7g.180gb", 178.75,
        estimated=frozenset({"3g.90gb", "4g.90gb", "7g.180gb"}),
    )
    gb200 = _blackwell_row(
        "1g.23gb", 22.0, _Engines(sm=18, ce=2), "1g.47gb", 45.5, _Engines(sm=32),
        "2g.47gb", _Engines(sm=38, ce=4, dec=2, jpeg=2), "3g.93gb", 91.75, "4g.93gb", "7g.186gb", 184.0,
        estimated=frozenset({"3g.93gb", "4g.93gb", "7g.186gb"}),
    )
    b300 = _blackwell_row(
        "1g.34gb", 33.0, _UNKNOWN, "1g.67gb", 66.25, _UNKNOWN, "2g.67gb", _UNKNOWN,
        "3g.135gb", 133.5, "4g.135gb", "7g.269gb", 267.5,
        estimated=frozenset({"1g.34gb", "1g.34gb+me", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb"}),
    )
    gb300 = _blackwell_row(
        "1g.35gb", 34.0, _UNKNOWN, "1g.70gb", 68.5, _UNKNOWN, "2g.70gb", _UNKNOWN,
        "3g.139gb", 138.0, "4g.139gb", "7g.278gb", 276.5,
        estimated=frozenset({"1g.35gb", "1g.35gb+me", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb"}),
    )
    return (
        _model("t4", "T4", ("Tesla T4",), ("t4", "tesla-t4"), (0x1EB8,), "Turing", "7.5", 15360),
        _model("l4", "L4", ("NVIDIA L4",), ("l4",), (0x27B8,), "Ada Lovelace", "8.9", 23034),
        _model("a10", "A10", ("NVIDIA A10",), ("a10",), (0x2236,), "Ampere", "8.6", 23028),
        _model("a30", "A30", ("NVIDIA A30",), ("a30", "a30-24gb"), (0x20B7,), "Ampere", "8.0", 24576,
               _a30_profiles(), f"{SOURCE_CONFIG_DEFAULT}; {SOURCE_MIG_GUIDE}", compute_slices=4, memory_slices=4,
               notes=("mig-parted hard-codes A30 counts because NVML reports wrong ones",)),
        _model("a100-40gb", "A100-40GB", ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A800-SXM4-40GB",
                                          "NVIDIA A800-PCIE-40GB"),
               ("a100-40gb", "a100-sxm4-40gb", "a800-40gb"), (0x20B0, 0x20B1, 0x20F1, 0x20F6), "Ampere", "8.0",
               40960, _seven_slice_profiles(a100_40, f"{_SRC}; {SOURCE_MIG_GUIDE}"), _SRC),
        _model("a100-80gb", "A100-80GB", ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB",
                                          "NVIDIA A800 80GB PCIe"),
               ("a100", "a100-80gb", "a100-sxm4-80gb", "a800-80gb"), (0x20B2, 0x20B5, 0x20F3, 0x20F5), "Ampere", "8.0", 81920,
               _seven_slice_profiles(a100_80, f"{_SRC}; {SOURCE_MIG_GUIDE}; dra-driver-nvidia-gpu#719"), _SRC),
        _model("h100-80gb", "H100-80GB", ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H800",
                                          "NVIDIA H800 PCIe"),
               ("h100", "h100-80gb", "h100-sxm", "h800"), (0x2330, 0x2331, 0x2322, 0x2324), "Hopper", "9.0", 81559,
               _seven_slice_profiles(h100_80, f"{_SRC}; H100 SXM lgip (PCIe parts have fewer SMs)"), _SRC),
        _model("h100-nvl", "H100-NVL", ("NVIDIA H100 NVL", "NVIDIA H800 NVL"), ("h100-nvl", "h100-94gb", "h800-nvl"),
               (0x2321, 0x233A), "Hopper", "9.0", 95830,
               _seven_slice_profiles(h100_nvl, f"{_SRC}; gpu-operator #900/#101 lgip"), _SRC),
        _model("h100-96gb", "H100-96GB", ("NVIDIA H100 96GB HBM3", "NVIDIA GH200 96GB HBM3", "NVIDIA GH200 480GB",
                                          "NVIDIA H20"),
               ("h100-96gb", "gh200-96gb", "h20"), (0x2342, 0x233D, 0x20B6, 0x2329), "Hopper", "9.0", 97871,
               _seven_slice_profiles(h100_96, _SRC), _SRC),
        _model("h200", "H200", ("NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA H200 141GB HBM3e"),
               ("h200", "h200-141gb", "h200-nvl"), (0x2335, 0x233B), "Hopper", "9.0", 143771,
               _seven_slice_profiles(h200, f"{_SRC}; mig-parted #120 lgip"), _SRC),
        _model("gh200", "GH200-144GB", ("NVIDIA GH200 144G HBM3e",), ("gh200", "gh200-144gb"), (0x2348,), "Hopper", "9.0",
               146944, _seven_slice_profiles(gh200, f"{_SRC}; mig-parted #139 lgip"), _SRC),
        _model("b200", "B200", ("NVIDIA B200",), ("b200", "b200-180gb"), (0x2901,), "Blackwell", "10.0", 183359,
               _seven_slice_profiles(b200, f"{_SRC}; mig-parted #166/#187 lgip"), _SRC),
        _model("gb200", "GB200", ("NVIDIA GB200",), ("gb200", "gb200-186gb"), (0x2941,), "Blackwell", "10.0", 189471,
               _seven_slice_profiles(gb200, f"{_SRC}; gpu-operator #1303, mig-parted #227 lgip"), _SRC),
        _model("b300", "B300", ("NVIDIA B300 SXM6 AC", "NVIDIA B300"), ("b300", "b300-288gb"), (0x3182,), "Blackwell", "10.3",
               275040, _seven_slice_profiles(b300, _SRC), _SRC),
        _model("gb300", "GB300", ("NVIDIA GB300",), ("gb300", "gb300-288gb"), (0x31C2,), "Blackwell", "10.3", 284160,
               _seven_slice_profiles(gb300, _SRC), _SRC),
    )


CATALOG: tuple[GpuModel, ...] = _build_catalog()


def mig_models() -> tuple[GpuModel, ...]:
    """The MIG-capable rows of the catalog."""
    return tuple(model for model in CATALOG if model.mig_capable)


def _normalise(name: str) -> str:
    text = name.strip().lower()
    text = re.sub(r"^nvidia[\s_-]+", "", text)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def _pci_id(text: str) -> int | None:
    """Accept `0x2330`, `2330`, `0x233010DE` (mig-parted device-filter), `0x233010de:0x...`."""
    match = re.fullmatch(r"(?:0x)?([0-9a-f]{4})(10de)?(?::.*)?", text.strip().lower())
    if match and (match.group(2) or text.strip().lower().startswith("0x")):
        return int(match.group(1), 16)
    return None


_indexed: dict[str, object] = {}


def _indexes() -> tuple[dict[str, GpuModel], dict[int, GpuModel]]:
    """Name and PCI-ID indexes of `CATALOG`, rebuilt when the table object changes (a test adding a row)."""
    if _indexed.get("catalog") is not CATALOG:
        index: dict[str, GpuModel] = {}
        for model in CATALOG:
            for name in (model.key, model.display_name, *model.aliases, *model.product_names):
                key = _normalise(name)
                if key in index and index[key] is not model:
                    raise AssertionError(f"catalog name {name!r} is ambiguous")
                index[key] = model
        by_pci = {device_id: model for model in CATALOG for device_id in model.pci_device_ids}
        _indexed.update(catalog=CATALOG, names=index, pci=by_pci)
    return _indexed["names"], _indexed["pci"]  # type: ignore[return-value]


def find_model(name_or_alias: str) -> GpuModel | None:
    """Any catalog GPU by NVML product name, short alias, display name or PCI device ID; None if unknown."""
    names, by_pci = _indexes()
    model = names.get(_normalise(name_or_alias))
    if model is None:
        device_id = _pci_id(name_or_alias)
        model = by_pci.get(device_id) if device_id is not None else None
    return model


def catalog_model(name_or_alias: str) -> GpuModel:
    """Like `find_model`, raising UnknownGpuModel for names the catalog does not know."""
    model = find_model(name_or_alias)
    if model is None:
        known = ", ".join(m.display_name for m in CATALOG)
        raise UnknownGpuModel(f"unknown GPU model {name_or_alias!r}; known: {known}")
    return model


def gpu_model(name_or_alias: str) -> GpuModel:
    """A MIG-capable GPU model by NVML product name, short alias, display name or PCI device ID."""
    model = find_model(name_or_alias)
    if model is None or not model.mig_capable:
        known = ", ".join(m.key for m in mig_models())
        raise UnknownGpuModel(f"no MIG-capable GPU model named {name_or_alias!r} (known: {known})")
    return model


def find_gpu_model(name_or_alias: str) -> GpuModel | None:
    """Like `gpu_model` but returns None for GPUs without MIG (or unknown to the catalog)."""
    model = find_model(name_or_alias)
    return model if model is not None and model.mig_capable else None


def gpu_model_for_pci_id(device_id: int) -> GpuModel | None:
    model = _indexes()[1].get(device_id)
    return model if model is not None and model.mig_capable else None


def model_for_product_name(product_name: str, memory_mib: int | None = None) -> GpuModel | None:
    """Best catalog match for an NVML product name a real GPU reports: the exact name, else the model whose
    family (display name before the first `-`) is a word of the name, closest in memory."""
    exact = find_model(product_name)
    if exact is not None:
        return exact
    tokens = set(re.split(r"[\s_-]+", product_name.lower()))
    candidates = [m for m in CATALOG if m.display_name.split("-")[0].lower() in tokens]
    candidates.sort(key=lambda m: abs(m.total_memory_mib - memory_mib) if memory_mib else 0)
    return candidates[0] if candidates else None


def profiles_for(name_or_alias: str) -> tuple[MigProfile, ...]:
    """The GPU instance profiles of a model (raises UnknownGpuModel for GPUs without MIG)."""
    return gpu_model(name_or_alias).profiles
