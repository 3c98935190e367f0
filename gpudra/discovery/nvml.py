"""Discovery on real NVIDIA GPUs through NVML (nvidia-ml-py, `import pynvml`).

Every NVML failure a user can hit (no library, no kernel driver, no permission) becomes a
`DiscoveryError` with a plain-language message; the CLI prints it without a traceback.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
from typing import Any

from .backend import GpuBackend, MigError
from .catalog import model_for_product_name
from .model import DiscoveryError, Gpu, Inventory, MigDevice, MigProfileInfo

ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada Lovelace",
                 9: "Hopper", 10: "Blackwell", 11: "Rubin"}
BRANDS = ["Unknown", "Quadro", "Tesla", "NVS", "Grid", "GeForce", "Titan", "NvidiaVApps", "NvidiaVPC", "NvidiaVCS",
          "NvidiaVWS", "NvidiaCloudGaming", "QuadroRTX", "NvidiaRTX", "Nvidia", "GeForceRTX", "TitanRTX"]
# GPU-instance profile index constant -> (compute slices G, name suffix)
_GI_INDEX = {0: (1, ""), 1: (2, ""), 2: (3, ""), 3: (4, ""), 4: (7, ""), 5: (8, ""), 6: (6, ""), 7: (1, "+me"),
             8: (2, "+me"), 9: (1, ""), 10: (1, "+gfx"), 11: (2, "+gfx"), 12: (4, "+gfx"), 13: (1, "-me"),
             14: (2, "-me"), 15: (1, "+me.all"), 16: (2, "+me.all"), 17: (3, "+gfx")}
_NVML_ERRORS = {
    12: "the NVML library (libnvidia-ml.so.1) was not found: is the NVIDIA driver installed, and is its library "
        "directory on the loader path?",
    9: "the NVIDIA kernel driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED)",
    4: "no permission to talk to the NVIDIA driver (run as root or check /dev/nvidia* permissions)",
    18: "the NVIDIA driver and the NVML library have different versions (NVML_ERROR_LIB_RM_VERSION_MISMATCH); reboot "
        "or reload the driver",
}


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def normalize_pci_bus_id(bus_id: str) -> str:
    """NVML `00000000:3B:00.0` -> `0000:3b:00.0` (the form `resource.kubernetes.io/pciBusID` wants)."""
    bus_id = _s(bus_id).strip().lower()
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id


def pcie_root_of(pci_bus_id: str, sysfs: str = "/sys") -> str | None:
    try:
        real = os.path.realpath(os.path.join(sysfs, "bus/pci/devices", pci_bus_id))
    except OSError:
        return None
    parts = real.split(os.sep)
    if "devices" in parts:
        after = parts[parts.index("devices") + 1:]
        if after and after[0].startswith("pci"):
            return after[0]
    return None


def mig_profile_name(gi_index: int, memory_mib: int, total_memory_bytes: int) -> str:
    """go-nvlib naming: `<G>g.<GB>gb` + suffix, GB rounded to eighths of the GPU's memory."""
    g, suffix = _GI_INDEX.get(gi_index, (1, ""))
    eighths = math.ceil(memory_mib * 1024 * 1024 / total_memory_bytes * 8)
    gb = math.floor(eighths / 8 * math.ceil(total_memory_bytes / 1024**3) + 0.5)  # Go math.Round, not banker's
    return f"{g}g.{gb}gb{suffix}"


class NvmlBackend(GpuBackend):
    name = "nvml"

    def __init__(self, module: Any | None = None):
        if module is None:
            try:
                import pynvml as module  # noqa: PLC0415 - optional at import time of gpudra
            except ImportError:
                raise DiscoveryError("the nvidia-ml-py package (module pynvml) is not installed") from None
        self.nvml = module
        self._lock = threading.RLock()
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise DiscoveryError(self._explain(exc, "initialising NVML")) from None
        self._profiles: dict[int, tuple[MigProfileInfo, ...]] = {}
        self._profile_index: dict[tuple[int, int], int] = {}  # (minor, gi profile id) -> NVML index constant

    def _explain(self, exc: Exception, doing: str) -> str:
        code = getattr(exc, "value", None)
        return f"NVML error while {doing}: " + _NVML_ERRORS.get(code, str(exc))

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def _call(self, fn: str, *args: Any, default: Any = DiscoveryError) -> Any:
        try:
            return getattr(self.nvml, fn)(*args)
        except self.nvml.NVMLError as exc:
            if default is DiscoveryError:
                raise DiscoveryError(self._explain(exc, fn)) from None
            return default

    # -- inventory --------------------------------------------------------------------------------
    def inventory(self) -> Inventory:
        with self._lock:
            driver = _s(self._call("nvmlSystemGetDriverVersion"))
            cuda = int(self._call("nvmlSystemGetCudaDriverVersion", default=0))
            gpus = [self._gpu(i) for i in range(int(self._call("nvmlDeviceGetCount")))]
        return Inventory(backend=self.name, driver_version=driver,
                         cuda_driver_version=f"{cuda // 1000}.{(cuda % 1000) // 10}", gpus=gpus)

    def _handle_by_minor(self, minor: int) -> Any:
        for i in range(int(self._call("nvmlDeviceGetCount"))):
            handle = self._call("nvmlDeviceGetHandleByIndex", i)
            if int(self._call("nvmlDeviceGetMinorNumber", handle)) == minor:
                return handle
        raise MigError(f"no GPU with minor {minor}")

    def _gpu(self, index: int) -> Gpu:
        h = self._call("nvmlDeviceGetHandleByIndex", index)
        name = _s(self._call("nvmlDeviceGetName", h))
        memory = self._call("nvmlDeviceGetMemoryInfo", h, default=None)
        memory_bytes = int(memory.total) if memory is not None else None
        major, minor_cc = self._call("nvmlDeviceGetCudaComputeCapability", h)
        pci_bus_id = normalize_pci_bus_id(self._call("nvmlDeviceGetPciInfo", h).busId)
        numa = self._call("nvmlDeviceGetNumaNodeId", h, default=None)
        mig_mode = self._call("nvmlDeviceGetMigMode", h, default=None)
        brand = int(self._call("nvmlDeviceGetBrand", h, default=0))
        model = model_for_product_name(name, memory_bytes // 2**20 if memory_bytes else None)
        gpu = Gpu(
            index=index,
            minor=int(self._call("nvmlDeviceGetMinorNumber", h)),
            uuid=_s(self._call("nvmlDeviceGetUUID", h)),
            product_name=name,
            brand=BRANDS[brand] if 0 <= brand < len(BRANDS) else "Unknown",
            architecture=ARCHITECTURES.get(int(self._call("nvmlDeviceGetArchitecture", h, default=-1)), "Unknown"),
            cuda_compute_capability=f"{major}.{minor_cc}",
            memory_bytes=memory_bytes,
            pci_bus_id=pci_bus_id,
            pcie_root=pcie_root_of(pci_bus_id),
            numa_node=int(numa) if numa is not None and int(numa) >= 0 else None,
            mig_capable=mig_mode is not None,
            mig_enabled=bool(mig_mode and int(mig_mode[0]) == 1),
            model=model.key if model else None,
        )
        if gpu.mig_enabled:
            gpu.mig_devices = self._mig_devices(h, gpu)
        return gpu

    def _gi_profiles(self, h: Any, minor: int, total_bytes: int | None) -> tuple[MigProfileInfo, ...]:
        if minor in self._profiles:
            return self._profiles[minor]
        profiles = []
        for index in range(int(getattr(self.nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 18))):
            info = self._call("nvmlDeviceGetGpuInstanceProfileInfo", h, index, default=None)
            if info is None:
                continue
            placements = self._possible_placements(h, int(info.id))
            starts = tuple(int(p.start) for p in placements)
            size = int(placements[0].size) if placements else int(info.sliceCount)
            memory_mib = int(info.memorySizeMB)
            profiles.append(MigProfileInfo(
                name=mig_profile_name(index, memory_mib, total_bytes or memory_mib * 2**20),
                gi_profile_id=int(info.id), compute_slices=int(info.sliceCount), memory_slices=size,
                memory_mib=memory_mib, multiprocessors=int(info.multiprocessorCount),
                copy_engines=int(info.copyEngineCount), decoders=int(info.decoderCount),
                encoders=int(info.encoderCount), jpeg_engines=int(info.jpegCount), ofa_engines=int(info.ofaCount),
                placement_starts=starts,
            ))
            self._profile_index[(minor, int(info.id))] = index
        self._profiles[minor] = tuple(profiles)
        return self._profiles[minor]

    def _possible_placements(self, h: Any, profile_id: int) -> list[Any]:
        buffer = (self.nvml.c_nvmlGpuInstancePlacement_t * 32)()
        count = ctypes.c_uint(32)
        try:
            self.nvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, buffer, ctypes.byref(count))
        except self.nvml.NVMLError:
            return []
        return [buffer[i] for i in range(count.value)]

    def _mig_devices(self, h: Any, gpu: Gpu) -> list[MigDevice]:
        profiles = {p.gi_profile_id: p for p in self._gi_profiles(h, gpu.minor, gpu.memory_bytes)}
        out = []
        for i in range(int(self._call("nvmlDeviceGetMaxMigDeviceCount", h, default=0))):
            mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", h, i, default=None)
            if mig is None:
                continue  # empty slot
            gi_id = int(self._call("nvmlDeviceGetGpuInstanceId", mig))
            gi_info = self._call("nvmlGpuInstanceGetInfo", self._call("nvmlDeviceGetGpuInstanceById", h, gi_id))
            profile = profiles.get(int(gi_info.profileId))
            if profile is None:
                continue
            out.append(MigDevice(
                parent_minor=gpu.minor, parent_uuid=gpu.uuid, uuid=_s(self._call("nvmlDeviceGetUUID", mig)),
                profile=profile.name, gi_profile_id=profile.gi_profile_id,
                placement_start=int(gi_info.placement.start), placement_size=int(gi_info.placement.size),
                gi_id=gi_id, ci_id=int(self._call("nvmlDeviceGetComputeInstanceId", mig)),
                memory_bytes=profile.memory_bytes, multiprocessors=profile.multiprocessors,
                copy_engines=profile.copy_engines, decoders=profile.decoders, encoders=profile.encoders,
                jpeg_engines=profile.jpeg_engines, ofa_engines=profile.ofa_engines,
            ))
        out.sort(key=lambda m: m.placement_start)
        return out

    # -- MIG changes ---------------------------------------------------------------------------------
    def mig_profiles(self, minor: int) -> tuple[MigProfileInfo, ...]:
        with self._lock:
            h = self._handle_by_minor(minor)
            if self._call("nvmlDeviceGetMigMode", h, default=None) is None:
                return ()
            memory = self._call("nvmlDeviceGetMemoryInfo", h, default=None)
            return self._gi_profiles(h, minor, int(memory.total) if memory else None)

    def set_mig_mode(self, minor: int, enabled: bool) -> None:
        with self._lock:
            h = self._handle_by_minor(minor)
            try:
                self.nvml.nvmlDeviceSetMigMode(h, 1 if enabled else 0)
            except self.nvml.NVMLError as exc:
                raise MigError(self._explain(exc, f"setting MIG mode on GPU {minor}")) from None
            current, pending = self._call("nvmlDeviceGetMigMode", h)
            if int(current) != int(bool(enabled)):
                raise MigError(f"GPU {minor}: MIG mode change is pending a GPU reset (current={current}, pending={pending})")

    def create_mig_device(self, minor: int, gi_profile_id: int, placement_start: int) -> MigDevice:
        with self._lock:
            h = self._handle_by_minor(minor)
            profiles = {p.gi_profile_id: p for p in self.mig_profiles(minor)}
            profile = profiles.get(gi_profile_id)
            if profile is None:
                raise MigError(f"GPU {minor} has no GPU instance profile id {gi_profile_id}")
            mode = self._call("nvmlDeviceGetMigMode", h)
            if int(mode[0]) != 1:
                self.set_mig_mode(minor, True)
            placement = self.nvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = placement_start, profile.memory_slices
            try:
                gi = self.nvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, gi_profile_id, ctypes.byref(placement))
                ci_index = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}.get(profile.compute_slices, 0)
                ci_info = self.nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_index, 0)
                self.nvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
            except self.nvml.NVMLError as exc:
                raise MigError(self._explain(exc, f"creating {profile.name} at {placement_start} on GPU {minor}")) from None
            self._profiles.pop(minor, None)
        found = self.find_mig_device(minor, gi_profile_id, placement_start)
        if found is None:
            raise MigError(f"GPU {minor}: created {profile.name} at {placement_start} but NVML does not list it")
        return found

    def destroy_mig_device(self, minor: int, gi_id: int) -> bool:
        with self._lock:
            h = self._handle_by_minor(minor)
            try:
                gi = self.nvml.nvmlDeviceGetGpuInstanceById(h, gi_id)
            except self.nvml.NVMLError as exc:
                if getattr(exc, "value", None) in (3, 6):  # NOT_SUPPORTED (MIG off) / NOT_FOUND: already gone
                    return False
                raise MigError(self._explain(exc, f"looking up GPU instance {gi_id} on GPU {minor}")) from None
            try:
                for ci_id in range(8):  # compute instance ids are small; NOT_FOUND means none there
                    ci = self._call("nvmlGpuInstanceGetComputeInstanceById", gi, ci_id, default=None)
                    if ci is not None:
                        self.nvml.nvmlComputeInstanceDestroy(ci)
                self.nvml.nvmlGpuInstanceDestroy(gi)
            except self.nvml.NVMLError as exc:
                raise MigError(self._explain(exc, f"destroying GPU instance {gi_id} on GPU {minor}")) from None
            return True
