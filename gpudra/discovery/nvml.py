"""Discovery on real NVIDIA GPUs through NVML (nvidia-ml-py, `import pynvml`).

Every NVML failure a user can hit (no library, no kernel driver, no permission) becomes a
`DiscoveryError` with a plain-language message; the CLI prints it without a traceback. A failure
that concerns one GPU or one MIG device (a GPU fallen off the bus, an unprivileged process that may
not look at GPU instances) leaves that one out and says so in `Inventory.problems`: it never hides
the other GPUs.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
from typing import TYPE_CHECKING, Any

import pynvml

from gpudra.catalog import model_for_product_name

from .backend import GpuBackend, MigError
from .migprofiles import mig_profiles as catalog_mig_profiles
from .model import DiscoveryError, Gpu, Inventory, MigDevice, MigProfileInfo
from .topology import nvlink_domains

if TYPE_CHECKING:
    from .nvml_events import NvmlHealthMonitor

# nvmlDeviceArchitecture_t (nvml.h NVML_DEVICE_ARCH_*): 11 and 12 are DLA engines, 13 is Rubin.
ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada Lovelace",
                 9: "Hopper", 10: "Blackwell", 13: "Rubin"}
BRANDS = ["Unknown", "Quadro", "Tesla", "NVS", "Grid", "GeForce", "Titan", "NvidiaVApps", "NvidiaVPC", "NvidiaVCS",
          "NvidiaVWS", "NvidiaCloudGaming", "QuadroRTX", "NvidiaRTX", "Nvidia", "GeForceRTX", "TitanRTX"]
# GPU-instance profile index constant -> (compute slices G, name suffix)
_GI_INDEX = {0: (1, ""), 1: (2, ""), 2: (3, ""), 3: (4, ""), 4: (7, ""), 5: (8, ""), 6: (6, ""), 7: (1, "+me"),
             8: (2, "+me"), 9: (1, ""), 10: (1, "+gfx"), 11: (2, "+gfx"), 12: (4, "+gfx"), 13: (1, "-me"),
             14: (2, "-me"), 15: (1, "+me.all"), 16: (2, "+me.all"), 17: (3, "+gfx")}
# compute slices -> NVML_COMPUTE_INSTANCE_PROFILE_* index of the compute instance spanning the GPU instance
_CI_INDEX = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}

# nvmlReturn_t codes (nvml.h), named here so the rules below read as what they mean
NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, INVALID_ARGUMENT = 3, 4, 6, 2
FUNCTION_NOT_FOUND, RESET_REQUIRED, IN_USE, GPU_IS_LOST = 13, 16, 19, 15
_FABRIC_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
_NVML_ERRORS: dict[int | None, str] = {
    12: "the NVML library (libnvidia-ml.so.1) was not found: is the NVIDIA driver installed, and is its library "
        "directory on the loader path?",
    9: "the NVIDIA kernel driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED)",
    NO_PERMISSION: "no permission to talk to the NVIDIA driver (run as root or check /dev/nvidia* permissions)",
    18: "the NVIDIA driver and the NVML library have different versions (NVML_ERROR_LIB_RM_VERSION_MISMATCH); reboot "
        "or reload the driver",
    GPU_IS_LOST: "the GPU is lost (fallen off the bus); check `dmesg` for Xid 79 and reset or reboot",
}


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _code(exc: Exception) -> int | None:
    return getattr(exc, "value", None)


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


def fabric_clique(cluster_uuid: bytes, clique_id: int) -> str | None:
    """NVIDIA's clique ID `<clusterUuid>.<cliqueId>` (as the GPU feature discovery / compute-domain driver
    spell it); None when the fabric manager assigned no cluster (all-zero UUID)."""
    if not any(cluster_uuid):
        return None
    h = bytes(cluster_uuid).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}.{clique_id}"


class NvmlBackend(GpuBackend):
    name = "nvml"

    def __init__(self, *, node_name: str = "node"):
        self.nvml = pynvml  # the real binding; tests put a fake C library under it (tests/support/fake_libnvml.py)
        self.node_name = node_name
        self._lock = threading.RLock()
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise DiscoveryError(self._explain(exc, "initialising NVML")) from None
        # GPU UUID -> GPU-instance profiles read while MIG was on; dropped whenever the MIG mode changes
        self._profiles: dict[str, tuple[MigProfileInfo, ...]] = {}
        self._profile_index: dict[tuple[str, int], int] = {}  # (GPU UUID, gi profile id) -> NVML index constant

    def open_health_monitor(self) -> NvmlHealthMonitor:
        from .nvml_events import NvmlHealthMonitor

        try:
            return NvmlHealthMonitor(self.nvml, self._lock)
        except self.nvml.NVMLError as exc:
            raise DiscoveryError(self._explain(exc, "creating the NVML event set")) from None

    def _explain(self, exc: Exception, doing: str) -> str:
        return f"NVML error while {doing}: " + _NVML_ERRORS.get(_code(exc), str(exc))

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def _call(self, fn: str, *args: Any, default: Any = DiscoveryError, absent: tuple[int, ...] = ()) -> Any:
        """Call pynvml.`fn`. Errors raise DiscoveryError unless `default` is given; with `absent`, only
        those codes (the call's way of saying "this GPU has none") give `default`, others still raise."""
        try:
            return getattr(self.nvml, fn)(*args)
        except self.nvml.NVMLError as exc:
            if default is DiscoveryError or (absent and _code(exc) not in absent):
                raise DiscoveryError(self._explain(exc, fn)) from None
            return default

    # -- inventory --------------------------------------------------------------------------------
    def inventory(self) -> Inventory:
        with self._lock:
            driver = _s(self._call("nvmlSystemGetDriverVersion"))
            cuda = int(self._call("nvmlSystemGetCudaDriverVersion", default=0))
            problems: list[str] = []
            gpus, handles = [], {}
            for index in range(int(self._call("nvmlDeviceGetCount"))):
                try:
                    handle = self._call("nvmlDeviceGetHandleByIndex", index)
                    gpu = self._gpu(index, handle, problems)
                except DiscoveryError as exc:
                    problems.append(f"GPU index {index}: left out: {exc}")
                    continue
                gpus.append(gpu)
                handles[gpu.minor] = handle
            self._add_topology(gpus, handles, problems)
        return Inventory(backend=self.name, driver_version=driver,
                         cuda_driver_version=f"{cuda // 1000}.{(cuda % 1000) // 10}", gpus=gpus, problems=problems)

    def _handle_by_minor(self, minor: int) -> Any:
        """A fresh handle (handles go stale when NVML re-initialises a GPU, e.g. after a MIG mode switch)."""
        for i in range(int(self._call("nvmlDeviceGetCount"))):
            handle = self._call("nvmlDeviceGetHandleByIndex", i, default=None)
            if handle is not None and self._call("nvmlDeviceGetMinorNumber", handle, default=None) == minor:
                return handle
        raise MigError(f"no GPU with minor {minor}")

    def _gpu(self, index: int, h: Any, problems: list[str]) -> Gpu:
        name = _s(self._call("nvmlDeviceGetName", h))
        memory = self._call("nvmlDeviceGetMemoryInfo", h, default=None, absent=(NOT_SUPPORTED,))
        memory_bytes = int(memory.total) if memory is not None else None
        major, minor_cc = self._call("nvmlDeviceGetCudaComputeCapability", h)
        pci_bus_id = normalize_pci_bus_id(self._call("nvmlDeviceGetPciInfo", h).busId)
        numa = self._call("nvmlDeviceGetNumaNodeId", h, default=None)
        mig_mode = self._call("nvmlDeviceGetMigMode", h, default=None, absent=(NOT_SUPPORTED,))
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
            model=model.display_name if model else None,
        )
        if gpu.mig_enabled:
            try:
                gpu.mig_devices = self._mig_devices(h, gpu, problems)
            except DiscoveryError as exc:
                problems.append(f"GPU {gpu.minor}: MIG devices not listed: {exc}")
        return gpu

    # -- MIG profiles ------------------------------------------------------------------------------
    def _gi_profiles(self, h: Any, gpu_uuid: str, total_bytes: int | None, model_key: str | None
                     ) -> tuple[MigProfileInfo, ...]:
        """The GPU-instance profiles NVML reports; only valid while MIG mode is on (NVML answers
        NOT_SUPPORTED for every profile otherwise, which must not be remembered as "none")."""
        if gpu_uuid in self._profiles:
            return self._profiles[gpu_uuid]
        catalog = {p.gi_profile_id: p for p in catalog_mig_profiles(model_key or "")}
        profiles = []
        for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            # NOT_SUPPORTED / INVALID_ARGUMENT: this GPU has no such profile; anything else is a real failure
            info = self._call("nvmlDeviceGetGpuInstanceProfileInfo", h, index, default=None,
                              absent=(NOT_SUPPORTED, INVALID_ARGUMENT))
            if info is None:
                continue
            profile_id = int(info.id)
            placements = self._possible_placements(h, profile_id)
            if placements:
                size = int(placements[0].size)
            elif profile_id in catalog:
                size = catalog[profile_id].memory_slices
            else:
                raise DiscoveryError(f"GPU {gpu_uuid}: NVML lists no placements for GPU instance profile "
                                     f"{profile_id} and the catalog does not know its memory-slice count")
            memory_mib = int(info.memorySizeMB)
            profiles.append(MigProfileInfo(
                name=mig_profile_name(index, memory_mib, total_bytes or memory_mib * 2**20),
                gi_profile_id=profile_id, compute_slices=int(info.sliceCount), memory_slices=size,
                memory_mib=memory_mib, multiprocessors=int(info.multiprocessorCount),
                copy_engines=int(info.copyEngineCount), decoders=int(info.decoderCount),
                encoders=int(info.encoderCount), jpeg_engines=int(info.jpegCount), ofa_engines=int(info.ofaCount),
                placement_starts=tuple(int(p.start) for p in placements),
            ))
            self._profile_index[(gpu_uuid, profile_id)] = index
        self._profiles[gpu_uuid] = tuple(profiles)
        return self._profiles[gpu_uuid]

    def _possible_placements(self, h: Any, profile_id: int) -> list[Any]:
        capacity = 32
        while True:
            buffer = (self.nvml.c_nvmlGpuInstancePlacement_t * capacity)()
            count = ctypes.c_uint(capacity)
            try:
                self.nvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, buffer, ctypes.byref(count))
            except self.nvml.NVMLError as exc:
                if _code(exc) == 7 and count.value > capacity:  # INSUFFICIENT_SIZE: count says how many
                    capacity = count.value
                    continue
                if _code(exc) == NOT_SUPPORTED:
                    return []
                raise DiscoveryError(self._explain(exc, f"reading placements of GPU instance profile {profile_id}")
                                     ) from None
            return [buffer[i] for i in range(count.value)]

    def _mig_devices(self, h: Any, gpu: Gpu, problems: list[str]) -> list[MigDevice]:
        profiles = {p.gi_profile_id: p for p in self._gi_profiles(h, gpu.uuid, gpu.memory_bytes, gpu.model)}
        out = []
        for i in range(int(self._call("nvmlDeviceGetMaxMigDeviceCount", h, default=0, absent=(NOT_SUPPORTED,)))):
            mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", h, i, default=None,
                             absent=(NOT_FOUND, INVALID_ARGUMENT))
            if mig is None:
                continue  # empty slot
            try:
                out.append(self._mig_device(h, mig, gpu, profiles))
            except DiscoveryError as exc:
                problems.append(f"GPU {gpu.minor}: MIG device {i} left out: {exc}")
        out.sort(key=lambda m: m.placement_start)
        return out

    def _mig_device(self, h: Any, mig: Any, gpu: Gpu, profiles: dict[int, MigProfileInfo]) -> MigDevice:
        gi_id = int(self._call("nvmlDeviceGetGpuInstanceId", mig))
        # Reading a GPU instance needs privilege (NO_PERMISSION otherwise): only this device is affected
        gi_info = self._call("nvmlGpuInstanceGetInfo", self._call("nvmlDeviceGetGpuInstanceById", h, gi_id))
        profile = profiles.get(int(gi_info.profileId))
        if profile is None:
            raise DiscoveryError(f"GPU instance {gi_id} has profile id {gi_info.profileId}, which NVML did not list")
        return MigDevice(
            parent_minor=gpu.minor, parent_uuid=gpu.uuid, uuid=_s(self._call("nvmlDeviceGetUUID", mig)),
            profile=profile.name, gi_profile_id=profile.gi_profile_id,
            placement_start=int(gi_info.placement.start), placement_size=int(gi_info.placement.size),
            gi_id=gi_id, ci_id=int(self._call("nvmlDeviceGetComputeInstanceId", mig)),
            memory_bytes=profile.memory_bytes, multiprocessors=profile.multiprocessors,
            copy_engines=profile.copy_engines, decoders=profile.decoders, encoders=profile.encoders,
            jpeg_engines=profile.jpeg_engines, ofa_engines=profile.ofa_engines,
        )

    # -- topology ------------------------------------------------------------------------------------
    def _nvlink_remotes(self, h: Any) -> list[str]:
        """PCI bus IDs at the far end of each active NVLink (a peer GPU, or an NVSwitch on HGX boards)."""
        remotes = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                active = self.nvml.nvmlDeviceGetNvLinkState(h, link)
            except self.nvml.NVMLError as exc:
                if _code(exc) in (NOT_SUPPORTED, INVALID_ARGUMENT, FUNCTION_NOT_FOUND):
                    break  # no NVLink, or past the GPU's last link
                raise DiscoveryError(self._explain(exc, f"reading NVLink {link}")) from None
            if active:
                info = self._call("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
                remotes.append(normalize_pci_bus_id(info.busId))
        return remotes

    def _fabric_clique(self, h: Any) -> str | None:
        info = pynvml.c_nvmlGpuFabricInfo_v2_t()
        try:
            self.nvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
        except self.nvml.NVMLError as exc:
            if _code(exc) in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                return None  # no NVLink fabric (everything but NVSwitch-fabric systems such as GB200 NVL)
            raise DiscoveryError(self._explain(exc, "reading the NVLink fabric information")) from None
        if int(info.state) != _FABRIC_COMPLETED or int(info.status) != 0:
            return None
        return fabric_clique(bytes(info.clusterUuid), int(info.cliqueId))

    def _add_topology(self, gpus: list[Gpu], handles: dict[int, Any], problems: list[str]) -> None:
        links: dict[str, list[str]] = {}
        for gpu in gpus:
            try:
                links[gpu.pci_bus_id] = self._nvlink_remotes(handles[gpu.minor])
                gpu.nvlink_clique = self._fabric_clique(handles[gpu.minor])
            except DiscoveryError as exc:
                problems.append(f"GPU {gpu.minor}: topology not read: {exc}")
        domains = nvlink_domains([g.pci_bus_id for g in gpus], links, self.node_name)
        for gpu in gpus:
            # GPUs of one NVLink fabric clique share the multi-node NVLink domain
            gpu.nvlink_domain = gpu.nvlink_clique or domains.get(gpu.pci_bus_id)

    # -- MIG changes ---------------------------------------------------------------------------------
    def mig_profiles(self, minor: int) -> tuple[MigProfileInfo, ...]:
        """NVML's profiles while MIG is on; the catalog's for the model while it is off (NVML lists
        none then), so dynamic MIG can offer a GPU it will switch on when a claim needs it."""
        with self._lock:
            h = self._handle_by_minor(minor)
            mode = self._call("nvmlDeviceGetMigMode", h, default=None, absent=(NOT_SUPPORTED,))
            if mode is None:
                return ()
            gpu_uuid = _s(self._call("nvmlDeviceGetUUID", h))
            memory = self._call("nvmlDeviceGetMemoryInfo", h, default=None, absent=(NOT_SUPPORTED,))
            name = _s(self._call("nvmlDeviceGetName", h))
            model = model_for_product_name(name, int(memory.total) // 2**20 if memory else None)
            if int(mode[0]) != 1:
                return catalog_mig_profiles(model.key) if model else ()
            return self._gi_profiles(h, gpu_uuid, int(memory.total) if memory else None, model.display_name if model else None)

    def set_mig_mode(self, minor: int, enabled: bool) -> None:
        with self._lock:
            h = self._handle_by_minor(minor)
            gpu_uuid = _s(self._call("nvmlDeviceGetUUID", h))
            try:
                status = self.nvml.nvmlDeviceSetMigMode(h, 1 if enabled else 0)
            except self.nvml.NVMLError as exc:
                raise MigError(self._explain(exc, f"setting MIG mode on GPU {minor}")) from None
            finally:
                self._profiles.pop(gpu_uuid, None)
            wanted = "on" if enabled else "off"
            if status == IN_USE:
                raise MigError(f"GPU {minor}: MIG mode {wanted} is pending: the GPU is in use (processes running); "
                               "stop them and set the mode again")
            if status == RESET_REQUIRED:
                raise MigError(f"GPU {minor}: MIG mode {wanted} is pending a GPU reset (nvidia-smi -r, or reboot)")
            if status:
                raise MigError(f"GPU {minor}: MIG mode {wanted} did not activate (NVML status {status})")
            # NVML re-initialises the GPU on a switch: old handles are stale, look it up again
            current, pending = self._call("nvmlDeviceGetMigMode", self._handle_by_minor(minor))
            if int(current) != int(bool(enabled)):
                raise MigError(f"GPU {minor}: MIG mode change did not take effect (current={current}, "
                               f"pending={pending})")

    def create_mig_device(self, minor: int, gi_profile_id: int, placement_start: int) -> MigDevice:
        with self._lock:
            h = self._handle_by_minor(minor)
            if int(self._call("nvmlDeviceGetMigMode", h)[0]) != 1:
                self.set_mig_mode(minor, True)
                h = self._handle_by_minor(minor)
            profile = next((p for p in self.mig_profiles(minor) if p.gi_profile_id == gi_profile_id), None)
            if profile is None:
                raise MigError(f"GPU {minor} has no GPU instance profile id {gi_profile_id}")
            doing = f"creating {profile.name} at {placement_start} on GPU {minor}"
            placement = self.nvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = placement_start, profile.memory_slices
            try:
                gi = self.nvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, gi_profile_id, ctypes.byref(placement))
            except self.nvml.NVMLError as exc:
                raise MigError(self._explain(exc, doing)) from None
            try:
                ci_info = self.nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, _CI_INDEX.get(profile.compute_slices, 0), 0)
                self.nvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
            except self.nvml.NVMLError as exc:
                # Without this the GPU instance (and its memory slices) would stay taken for ever
                message = self._explain(exc, doing)
                try:
                    self.nvml.nvmlGpuInstanceDestroy(gi)
                except self.nvml.NVMLError as undo:
                    message += f"; the GPU instance it left could not be destroyed either: {undo}"
                raise MigError(message) from None
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
                if _code(exc) in (NOT_SUPPORTED, NOT_FOUND):  # MIG off / already gone
                    return False
                raise MigError(self._explain(exc, f"looking up GPU instance {gi_id} on GPU {minor}")) from None
            try:
                for ci_id in range(8):  # compute instance ids are small; NOT_FOUND means none there
                    ci = self._call("nvmlGpuInstanceGetComputeInstanceById", gi, ci_id, default=None,
                                    absent=(NOT_FOUND, INVALID_ARGUMENT))
                    if ci is not None:
                        self.nvml.nvmlComputeInstanceDestroy(ci)
                self.nvml.nvmlGpuInstanceDestroy(gi)
            except self.nvml.NVMLError as exc:
                raise MigError(self._explain(exc, f"destroying GPU instance {gi_id} on GPU {minor}")) from None
            except DiscoveryError as exc:
                raise MigError(f"destroying GPU instance {gi_id} on GPU {minor}: {exc}") from None
            return True
