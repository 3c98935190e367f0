"""A fake of the NVML C library (libnvidia-ml.so.1) for the real `pynvml` wrappers to call.

`install(monkeypatch, lib)` points pynvml's function-pointer lookup at a `FakeLibNvml`, so every
`pynvml.nvml*` call runs nvidia-ml-py's own code (argument conversion, ctypes structures, out
pointers, versioned structs, `_nvmlCheckReturn` raising the right `NVMLError_*` subclass) and only
the C functions underneath are Python. Each fake C function takes the ctypes arguments the real
one would and returns an `nvmlReturn_t` code.

What the fake does the way the driver does (from nvml.h's documentation of each call):
* MIG mode: `nvmlDeviceSetMigMode` returns SUCCESS with an activation status; a GPU that needs a
  reset (Ampere) or has processes (`in_use`) keeps the new mode *pending* (RESET_REQUIRED / IN_USE)
  until `reset(minor)`; a switch that activates invalidates the GPU's old handles.
* GPU-instance profiles and placements answer NOT_SUPPORTED while MIG mode is off, and for
  profiles the GPU does not offer.
* GPU-instance creation checks the placement against the profile and the instances already
  there (INSUFFICIENT_RESOURCES when taken), and instances stay until destroyed.
* Privileged calls (`nvmlDeviceGetGpuInstanceById`, creation, destruction) answer NO_PERMISSION
  when `privileged` is False.
* Index and minor differ (`minors=`), and any call can be made to fail: `fail(fn, code, gpu=minor)`.
* Events: `nvmlEventSetCreate` / `nvmlDeviceRegisterEvents` (limited to the GPU's supported types:
  `supported_events`) / `nvmlEventSetWait_v2` deliver what `emit(minor, type, data, gi, ci)` queued, for
  registered GPUs and types only; `lose_gpu()` makes the next wait answer GPU_IS_LOST; a wait with
  nothing queued answers TIMEOUT after its timeout.
"""

from __future__ import annotations

import ctypes
import threading
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gpudra import catalog as gpu_catalog

SUCCESS = pynvml.NVML_SUCCESS
ARCH_CODES = {"Kepler": 2, "Maxwell": 3, "Pascal": 4, "Volta": 5, "Turing": 6, "Ampere": 7, "Ada Lovelace": 8,
              "Hopper": 9, "Blackwell": 10, "Rubin": 13}
_NEEDS_RESET = ("Ampere",)  # MIG mode switches on Ampere need a GPU reset; Hopper+ switch at once
_PRIVILEGED = {"nvmlDeviceGetGpuInstanceById", "nvmlDeviceCreateGpuInstanceWithPlacement",
               "nvmlGpuInstanceCreateComputeInstance", "nvmlGpuInstanceDestroy", "nvmlComputeInstanceDestroy",
               "nvmlDeviceSetMigMode", "nvmlGpuInstanceGetComputeInstanceById"}


@dataclass
class FakeCi:
    ci_id: int
    profile_id: int
    uuid: str


@dataclass
class FakeGi:
    gi_id: int
    profile: gpu_catalog.MigProfile
    start: int
    size: int
    cis: dict[int, FakeCi] = field(default_factory=dict)


@dataclass
class FakeGpu:
    index: int
    minor: int
    uuid: str
    name: str
    memory_bytes: int
    architecture: str | int  # a name, or a raw nvmlDeviceArchitecture_t code
    compute_capability: tuple[int, int]
    bus_id: str  # NVML form, "00000000:18:00.0"
    numa_node: int
    model: gpu_catalog.GpuModel | None
    mig_current: int = 0
    mig_pending: int = 0
    in_use: bool = False  # processes running: a MIG switch stays pending (IN_USE)
    epoch: int = 0  # bumped when the device is re-initialised (MIG switch): old handles go stale
    gis: dict[int, FakeGi] = field(default_factory=dict)
    nvlinks: list[str | None] = field(default_factory=list)  # remote PCI bus id per link, None = inactive
    fabric: tuple[bytes, int, int] | None = None  # (clusterUuid 16 bytes, cliqueId, state)
    supported_events: int = (pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
                             | pynvml.nvmlEventTypeSingleBitEccError)

    @property
    def mig_capable(self) -> bool:
        return self.model is not None


# nvmlErrorString texts of the codes the fake returns (as libnvidia-ml spells them)
_ERROR_TEXT = {
    pynvml.NVML_ERROR_UNINITIALIZED: b"Uninitialized", pynvml.NVML_ERROR_INVALID_ARGUMENT: b"Invalid Argument",
    pynvml.NVML_ERROR_NOT_SUPPORTED: b"Not Supported", pynvml.NVML_ERROR_NO_PERMISSION: b"Insufficient Permissions",
    pynvml.NVML_ERROR_NOT_FOUND: b"Not Found", pynvml.NVML_ERROR_INSUFFICIENT_SIZE: b"Insufficient Size",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: b"Driver Not Loaded", pynvml.NVML_ERROR_GPU_IS_LOST: b"GPU is lost",
    pynvml.NVML_ERROR_RESET_REQUIRED: b"GPU requires reset", pynvml.NVML_ERROR_IN_USE: b"In use by another client",
    pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES: b"Insufficient resources",
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH: b"Argument version mismatch", pynvml.NVML_ERROR_TIMEOUT: b"Timeout", pynvml.NVML_ERROR_UNKNOWN: b"Unknown Error",
}


class _ErrorString:
    """`nvmlErrorString`: pynvml sets `restype` on the function pointer before calling it."""

    restype = None

    def __call__(self, code: int) -> bytes:
        return _ERROR_TEXT.get(code, b"Unknown Error")


class FakeLibNvml:
    """The C library: attributes named like libnvidia-ml's exported symbols."""

    def __init__(self, gpus: list[FakeGpu], *, driver_version: str = "580.95.05", cuda_version: int = 13000):
        self.gpus = gpus
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.privileged = True
        self.init_error: int | None = None
        self.calls: list[tuple] = []
        self._failures: list[tuple[str, int | None, int, int | None]] = []  # fn, minor, code, remaining
        self._handles: dict[int, tuple] = {}
        self._handle_of: dict[tuple, int] = {}
        self.nvmlErrorString = _ErrorString()
        self._event_sets: dict[int, dict[int, int]] = {}  # event set -> {GPU minor: registered mask}
        self._events: list[tuple[int, int, int, int, int]] = []  # (minor, type, data, gi, ci)
        self._gpu_lost = False
        self._event_cond = threading.Condition()

    # -- test controls ------------------------------------------------------------------------
    def fail(self, fn: str, code: int, *, gpu: int | None = None, times: int | None = None) -> None:
        """Make C function `fn` return `code` (for the GPU with minor `gpu`, or any GPU)."""
        self._failures.append((fn, gpu, code, times))

    def emit(self, minor: int, event_type: int, data: int = 0, gi: int = 0xFFFFFFFF, ci: int = 0xFFFFFFFF) -> None:
        """The driver reports an event on GPU `minor` (e.g. Xid 79: `emit(0, nvmlEventTypeXidCriticalError, 79)`)."""
        with self._event_cond:
            self._events.append((minor, event_type, data, gi, ci))
            self._event_cond.notify_all()

    def lose_gpu(self) -> None:
        """The next `nvmlEventSetWait_v2` answers GPU_IS_LOST."""
        with self._event_cond:
            self._gpu_lost = True
            self._event_cond.notify_all()

    def registered_events(self) -> dict[int, int]:
        """GPU minor -> event mask registered, over all event sets."""
        merged: dict[int, int] = {}
        for registrations in self._event_sets.values():
            for minor, mask in registrations.items():
                merged[minor] = merged.get(minor, 0) | mask
        return merged

    def reset(self, minor: int) -> None:
        """A GPU reset: the pending MIG mode becomes current, MIG instances are gone."""
        gpu = self.gpu(minor)
        gpu.mig_current = gpu.mig_pending
        gpu.gis.clear()
        gpu.epoch += 1

    def gpu(self, minor: int) -> FakeGpu:
        return next(g for g in self.gpus if g.minor == minor)

    # -- handles ----------------------------------------------------------------------------
    def _out_handle(self, ref: Any, key: tuple) -> None:
        value = self._handle_of.get(key)
        if value is None:
            value = 0x1000 * (len(self._handles) + 1)
            self._handles[value] = key
            self._handle_of[key] = value
        ctypes.c_void_p.from_buffer(ref._obj).value = value

    def _resolve(self, handle: Any) -> tuple | None:
        value = ctypes.cast(handle, ctypes.c_void_p).value
        key = self._handles.get(value or 0)
        if key is None:
            return None
        gpu = self.gpu(key[1])
        if key[2] != gpu.epoch:
            return None  # a handle from before the device was re-initialised
        return key

    def _device(self, handle: Any) -> tuple[FakeGpu | None, tuple | None]:
        key = self._resolve(handle)
        if key is None or key[0] not in ("gpu", "mig"):
            return None, None
        return self.gpu(key[1]), key

    def _check(self, fn: str, gpu: FakeGpu | None) -> int:
        for i, (name, minor, code, remaining) in enumerate(self._failures):
            if name == fn and (minor is None or (gpu is not None and gpu.minor == minor)):
                if remaining is not None:
                    if remaining <= 1:
                        self._failures.pop(i)
                    else:
                        self._failures[i] = (name, minor, code, remaining - 1)
                return code
        if fn in _PRIVILEGED and not self.privileged:
            return pynvml.NVML_ERROR_NO_PERMISSION
        return SUCCESS

    @staticmethod
    def _put(ref: Any, value: Any) -> None:
        ref._obj.value = value

    # -- system --------------------------------------------------------------------------------
    def nvmlInitWithFlags(self, flags: int) -> int:
        return self.init_error if self.init_error is not None else self._check("nvmlInitWithFlags", None)

    def nvmlShutdown(self) -> int:
        return SUCCESS

    def nvmlSystemGetDriverVersion(self, buffer: Any, size: Any) -> int:
        buffer.value = self.driver_version.encode()
        return self._check("nvmlSystemGetDriverVersion", None)

    def nvmlSystemGetCudaDriverVersion(self, ref: Any) -> int:
        self._put(ref, self.cuda_version)
        return self._check("nvmlSystemGetCudaDriverVersion", None)

    def nvmlDeviceGetCount_v2(self, ref: Any) -> int:
        self._put(ref, len(self.gpus))
        return self._check("nvmlDeviceGetCount_v2", None)

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, ref: Any) -> int:
        if not 0 <= index.value < len(self.gpus):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        gpu = next(g for g in self.gpus if g.index == index.value)
        code = self._check("nvmlDeviceGetHandleByIndex_v2", gpu)
        if code == SUCCESS:
            self._out_handle(ref, ("gpu", gpu.minor, gpu.epoch))
        return code

    # -- per-device queries ----------------------------------------------------------------------
    def _query(self, fn: str, handle: Any, full_gpu_only: bool = True) -> tuple[int, FakeGpu | None, tuple | None]:
        gpu, key = self._device(handle)
        if gpu is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT, None, None
        if full_gpu_only and key[0] == "mig":
            return pynvml.NVML_ERROR_NOT_SUPPORTED, gpu, key
        return self._check(fn, gpu), gpu, key

    def nvmlDeviceGetName(self, handle: Any, buffer: Any, size: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetName", handle)
        if code == SUCCESS:
            buffer.value = gpu.name.encode()
        return code

    def nvmlDeviceGetUUID(self, handle: Any, buffer: Any, size: Any) -> int:
        code, gpu, key = self._query("nvmlDeviceGetUUID", handle, full_gpu_only=False)
        if code == SUCCESS:
            if key[0] == "mig":
                gi = gpu.gis.get(key[3])
                ci = gi.cis.get(key[4]) if gi else None
                if ci is None:
                    return pynvml.NVML_ERROR_INVALID_ARGUMENT
                buffer.value = ci.uuid.encode()
            else:
                buffer.value = gpu.uuid.encode()
        return code

    def nvmlDeviceGetMinorNumber(self, handle: Any, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetMinorNumber", handle)
        if code == SUCCESS:
            self._put(ref, gpu.minor)
        return code

    def nvmlDeviceGetBrand(self, handle: Any, ref: Any) -> int:
        code, _, _ = self._query("nvmlDeviceGetBrand", handle)
        if code == SUCCESS:
            self._put(ref, pynvml.NVML_BRAND_NVIDIA)
        return code

    def nvmlDeviceGetArchitecture(self, handle: Any, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetArchitecture", handle)
        if code == SUCCESS:
            self._put(ref, ARCH_CODES.get(gpu.architecture, gpu.architecture))
        return code

    def nvmlDeviceGetMemoryInfo(self, handle: Any, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetMemoryInfo", handle)
        if code == SUCCESS:
            ref._obj.total, ref._obj.free, ref._obj.used = gpu.memory_bytes, gpu.memory_bytes, 0
        return code

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any, major: Any, minor: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetCudaComputeCapability", handle)
        if code == SUCCESS:
            self._put(major, gpu.compute_capability[0])
            self._put(minor, gpu.compute_capability[1])
        return code

    def nvmlDeviceGetPciInfo_v3(self, handle: Any, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetPciInfo_v3", handle)
        if code == SUCCESS:
            ref._obj.busId = gpu.bus_id.encode()
            ref._obj.busIdLegacy = gpu.bus_id.encode()
        return code

    def nvmlDeviceGetNumaNodeId(self, handle: Any, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetNumaNodeId", handle)
        if code == SUCCESS:
            self._put(ref, gpu.numa_node)
        return code

    # -- topology -------------------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetNvLinkState", handle)
        if code != SUCCESS:
            return code
        if not gpu.nvlinks:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        if not 0 <= link < len(gpu.nvlinks):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        self._put(ref, int(gpu.nvlinks[link] is not None))
        return SUCCESS

    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, handle: Any, link: int, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetNvLinkRemotePciInfo_v2", handle)
        if code != SUCCESS:
            return code
        if not 0 <= link < len(gpu.nvlinks) or gpu.nvlinks[link] is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        ref._obj.busId = gpu.nvlinks[link].encode()
        return SUCCESS

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetGpuFabricInfoV", handle)
        if code != SUCCESS:
            return code
        if gpu.fabric is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        info = ref._obj if hasattr(ref, "_obj") else ref
        cluster, clique, state = gpu.fabric
        ctypes.memmove(info.clusterUuid, cluster, 16)
        info.cliqueId, info.state, info.status = clique, state, SUCCESS
        return SUCCESS

    # -- MIG mode and profiles -------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetMigMode", handle)
        if code != SUCCESS:
            return code
        if not gpu.mig_capable:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        self._put(current, gpu.mig_current)
        self._put(pending, gpu.mig_pending)
        return SUCCESS

    def nvmlDeviceSetMigMode(self, handle: Any, mode: int, status: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceSetMigMode", handle)
        if code != SUCCESS:
            return code
        if not gpu.mig_capable:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        self.calls.append(("nvmlDeviceSetMigMode", gpu.minor, mode))
        if mode == 0 and gpu.gis:
            return pynvml.NVML_ERROR_IN_USE
        gpu.mig_pending = mode
        if gpu.mig_current == mode:
            self._put(status, SUCCESS)
        elif gpu.in_use:
            self._put(status, pynvml.NVML_ERROR_IN_USE)
        elif gpu.architecture in _NEEDS_RESET:
            self._put(status, pynvml.NVML_ERROR_RESET_REQUIRED)
        else:
            gpu.mig_current = mode
            gpu.epoch += 1  # NVML re-initialises the device: callers must look the handle up again
            self._put(status, SUCCESS)
        return SUCCESS

    def _gi_profile(self, gpu: FakeGpu, *, index: int | None = None, profile_id: int | None = None):
        for profile in gpu.model.profiles if gpu.model else ():
            if profile.nvml_index == index or profile.profile_id == profile_id:
                return profile
        return None

    def nvmlDeviceGetGpuInstanceProfileInfoV(self, handle: Any, index: int, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetGpuInstanceProfileInfoV", handle)
        if code != SUCCESS:
            return code
        if ref._obj.version != pynvml.nvmlGpuInstanceProfileInfo_v2:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        profile = self._gi_profile(gpu, index=index) if gpu.mig_current else None
        if profile is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        info = ref._obj
        info.id, info.sliceCount, info.memorySizeMB = profile.profile_id, profile.compute_slices, profile.memory_mib
        info.instanceCount = profile.max_instances
        info.multiprocessorCount = profile.multiprocessors or 0
        info.copyEngineCount, info.decoderCount = profile.copy_engines or 0, profile.decoders or 0
        info.encoderCount, info.jpegCount = profile.encoders or 0, profile.jpeg_engines or 0
        info.ofaCount = profile.ofa_engines or 0
        info.name = f"MIG {profile.name}".encode()
        return SUCCESS

    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(self, handle: Any, profile_id: int, buffer: Any,
                                                       count_ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetGpuInstancePossiblePlacements_v2", handle)
        if code != SUCCESS:
            return code
        profile = self._gi_profile(gpu, profile_id=profile_id) if gpu.mig_current else None
        if profile is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        count = count_ref._obj
        if count.value < len(profile.placements):
            count.value = len(profile.placements)
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        for i, placement in enumerate(profile.placements):
            buffer[i].start, buffer[i].size = placement.start, placement.size
        count.value = len(profile.placements)
        return SUCCESS

    # -- MIG devices ----------------------------------------------------------------------------
    def _mig_slots(self, gpu: FakeGpu) -> list[tuple[int, int]]:
        return [(gi.gi_id, ci.ci_id) for gi in sorted(gpu.gis.values(), key=lambda g: g.gi_id) for ci in
                sorted(gi.cis.values(), key=lambda c: c.ci_id)]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetMaxMigDeviceCount", handle)
        if code != SUCCESS:
            return code
        if not gpu.mig_capable:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        self._put(ref, gpu.model.compute_slices)
        return SUCCESS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if code != SUCCESS:
            return code
        slots = self._mig_slots(gpu) if gpu.mig_current else []
        if index.value >= len(slots):
            return pynvml.NVML_ERROR_NOT_FOUND
        gi_id, ci_id = slots[index.value]
        self._out_handle(ref, ("mig", gpu.minor, gpu.epoch, gi_id, ci_id))
        return SUCCESS

    def nvmlDeviceGetGpuInstanceId(self, handle: Any, ref: Any) -> int:
        gpu, key = self._device(handle)
        if key is None or key[0] != "mig":
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        self._put(ref, key[3])
        return self._check("nvmlDeviceGetGpuInstanceId", gpu)

    def nvmlDeviceGetComputeInstanceId(self, handle: Any, ref: Any) -> int:
        gpu, key = self._device(handle)
        if key is None or key[0] != "mig":
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        self._put(ref, key[4])
        return self._check("nvmlDeviceGetComputeInstanceId", gpu)

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: int, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetGpuInstanceById", handle)
        if code != SUCCESS:
            return code
        if not gpu.mig_current:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        if gi_id not in gpu.gis:
            return pynvml.NVML_ERROR_NOT_FOUND
        self._out_handle(ref, ("gi", gpu.minor, gpu.epoch, gi_id))
        return SUCCESS

    def _gi(self, handle: Any) -> tuple[FakeGpu | None, FakeGi | None]:
        key = self._resolve(handle)
        if key is None or key[0] != "gi":
            return None, None
        gpu = self.gpu(key[1])
        return gpu, gpu.gis.get(key[3])

    def nvmlGpuInstanceGetInfo(self, handle: Any, ref: Any) -> int:
        gpu, gi = self._gi(handle)
        if gi is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        code = self._check("nvmlGpuInstanceGetInfo", gpu)
        if code == SUCCESS:
            info = ref._obj
            info.id, info.profileId = gi.gi_id, gi.profile.profile_id
            info.placement.start, info.placement.size = gi.start, gi.size
        return code

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: Any, profile_id: int, placement_ref: Any,
                                                 ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceCreateGpuInstanceWithPlacement", handle)
        if code != SUCCESS:
            return code
        if not gpu.mig_current:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        profile = self._gi_profile(gpu, profile_id=profile_id)
        if profile is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        placement = placement_ref._obj
        wanted = gpu_catalog.Placement(placement.start, placement.size)
        if wanted not in profile.placements:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        for gi in gpu.gis.values():
            if wanted.overlaps(gpu_catalog.Placement(gi.start, gi.size)):
                return pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
        gi_id = min(set(range(1, 64)) - set(gpu.gis))
        gpu.gis[gi_id] = FakeGi(gi_id, profile, wanted.start, wanted.size)
        self.calls.append(("createGpuInstance", gpu.minor, profile_id, wanted.start, wanted.size, gi_id))
        self._out_handle(ref, ("gi", gpu.minor, gpu.epoch, gi_id))
        return SUCCESS

    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(self, handle: Any, index: int, eng: int, ref: Any) -> int:
        gpu, gi = self._gi(handle)
        if gi is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        code = self._check("nvmlGpuInstanceGetComputeInstanceProfileInfoV", gpu)
        if code != SUCCESS:
            return code
        if ref._obj.version != pynvml.nvmlComputeInstanceProfileInfo_v2:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        slices = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}.get(index)
        if slices is None or slices > gi.profile.compute_slices:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        ref._obj.id, ref._obj.sliceCount = index, slices
        return SUCCESS

    def nvmlGpuInstanceCreateComputeInstance(self, handle: Any, profile_id: int, ref: Any) -> int:
        gpu, gi = self._gi(handle)
        if gi is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        code = self._check("nvmlGpuInstanceCreateComputeInstance", gpu)
        if code != SUCCESS:
            return code
        ci_id = min(set(range(0, 8)) - set(gi.cis))
        mig_uuid = "MIG-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{gpu.uuid}/{gi.gi_id}/{ci_id}/{len(self.calls)}"))
        gi.cis[ci_id] = FakeCi(ci_id, profile_id, mig_uuid)
        self.calls.append(("createComputeInstance", gpu.minor, gi.gi_id, ci_id))
        self._out_handle(ref, ("ci", gpu.minor, gpu.epoch, gi.gi_id, ci_id))
        return SUCCESS

    def nvmlGpuInstanceGetComputeInstanceById(self, handle: Any, ci_id: int, ref: Any) -> int:
        gpu, gi = self._gi(handle)
        if gi is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        code = self._check("nvmlGpuInstanceGetComputeInstanceById", gpu)
        if code != SUCCESS:
            return code
        if ci_id not in gi.cis:
            return pynvml.NVML_ERROR_NOT_FOUND
        self._out_handle(ref, ("ci", gpu.minor, gpu.epoch, gi.gi_id, ci_id))
        return SUCCESS

    def nvmlComputeInstanceDestroy(self, handle: Any) -> int:
        key = self._resolve(handle)
        if key is None or key[0] != "ci":
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        gpu = self.gpu(key[1])
        code = self._check("nvmlComputeInstanceDestroy", gpu)
        if code != SUCCESS:
            return code
        gi = gpu.gis.get(key[3])
        if gi is None or gi.cis.pop(key[4], None) is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        self.calls.append(("destroyComputeInstance", gpu.minor, key[3], key[4]))
        return SUCCESS

    def nvmlGpuInstanceDestroy(self, handle: Any) -> int:
        gpu, gi = self._gi(handle)
        if gi is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        code = self._check("nvmlGpuInstanceDestroy", gpu)
        if code != SUCCESS:
            return code
        if gi.cis:
            return pynvml.NVML_ERROR_IN_USE
        del gpu.gis[gi.gi_id]
        self.calls.append(("destroyGpuInstance", gpu.minor, gi.gi_id))
        return SUCCESS


    # -- events ----------------------------------------------------------------------------------
    def nvmlEventSetCreate(self, ref: Any) -> int:
        code = self._check("nvmlEventSetCreate", None)
        if code == SUCCESS:
            value = 0x900000 + 0x10 * (len(self._event_sets) + 1)
            self._event_sets[value] = {}
            ctypes.c_void_p.from_buffer(ref._obj).value = value
        return code

    def _event_set(self, event_set: Any) -> dict[int, int] | None:
        return self._event_sets.get(ctypes.cast(event_set, ctypes.c_void_p).value or 0)

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any, ref: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceGetSupportedEventTypes", handle)
        if code == SUCCESS:
            self._put(ref, gpu.supported_events)
        return code

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: Any, event_set: Any) -> int:
        code, gpu, _ = self._query("nvmlDeviceRegisterEvents", handle)
        registrations = self._event_set(event_set)
        if registrations is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        if code == SUCCESS:
            mask = event_types.value
            if mask & ~gpu.supported_events:
                return pynvml.NVML_ERROR_NOT_SUPPORTED  # nvml.h: a type the device does not support
            registrations[gpu.minor] = registrations.get(gpu.minor, 0) | mask
        return code

    def nvmlEventSetWait_v2(self, event_set: Any, ref: Any, timeout_ms: Any) -> int:
        registrations = self._event_set(event_set)
        if registrations is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        with self._event_cond:
            def ready() -> bool:
                return self._gpu_lost or any(registrations.get(e[0], 0) & e[1] for e in self._events)

            if not self._event_cond.wait_for(ready, timeout=timeout_ms.value / 1000):
                return pynvml.NVML_ERROR_TIMEOUT
            if self._gpu_lost:
                self._gpu_lost = False
                return pynvml.NVML_ERROR_GPU_IS_LOST
            event = next(e for e in self._events if registrations.get(e[0], 0) & e[1])
            self._events.remove(event)
        minor, event_type, data, gi, ci = event
        gpu = self.gpu(minor)
        out = ref._obj
        handle = pynvml.c_nvmlDevice_t()
        self._out_handle(ctypes.byref(handle), ("gpu", gpu.minor, gpu.epoch))
        out.device = handle
        out.eventType, out.eventData, out.gpuInstanceId, out.computeInstanceId = event_type, data, gi, ci
        return SUCCESS

    def nvmlEventSetFree(self, event_set: Any) -> int:
        value = ctypes.cast(event_set, ctypes.c_void_p).value or 0
        return SUCCESS if self._event_sets.pop(value, None) is not None else pynvml.NVML_ERROR_INVALID_ARGUMENT


def from_simulated(profile: str, *, node_name: str = "n", minors: list[int] | None = None) -> FakeLibNvml:
    """Fake hardware with the GPUs (and static MIG layout) of a simulated node profile."""
    from gpudra.discovery import open_backend

    inventory = open_backend("simulated", profile=profile, node_name=node_name).inventory()
    gpus = []
    for gpu in inventory.gpus:
        model = gpu_catalog.find_gpu_model(gpu.product_name) if gpu.mig_capable else None
        major, minor_cc = (int(x) for x in gpu.cuda_compute_capability.split("."))
        fake = FakeGpu(index=gpu.index, minor=minors[gpu.index] if minors else gpu.minor, uuid=gpu.uuid,
                       name=gpu.product_name, memory_bytes=gpu.memory_bytes, architecture=gpu.architecture,
                       compute_capability=(major, minor_cc), bus_id="0000" + gpu.pci_bus_id.upper(),
                       numa_node=gpu.numa_node if gpu.numa_node is not None else -1, model=model,
                       mig_current=int(gpu.mig_enabled), mig_pending=int(gpu.mig_enabled))
        for mig in gpu.mig_devices:
            profile_ = model.profile_by_id(mig.gi_profile_id)
            gi = FakeGi(mig.gi_id, profile_, mig.placement_start, mig.placement_size)
            gi.cis[mig.ci_id] = FakeCi(mig.ci_id, 0, mig.uuid)
            fake.gis[mig.gi_id] = gi
        gpus.append(fake)
    major, minor_v = (int(x) for x in inventory.cuda_driver_version.split("."))
    return FakeLibNvml(gpus, driver_version=inventory.driver_version, cuda_version=major * 1000 + minor_v * 10)


def install(monkeypatch: Any, lib: FakeLibNvml) -> FakeLibNvml:
    """Put `lib` under the real pynvml: its library handle and (emptied) function-pointer cache."""
    monkeypatch.setattr(pynvml, "nvmlLib", lib)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)
    return lib
