"""GPU health events from NVML: an event set with every GPU registered for XID critical errors and
ECC errors, read with `nvmlEventSetWait_v2`.

What NVIDIA's GPU DRA driver does (`cmd/gpu-kubelet-plugin/device_health.go`, kubernetes-sigs/
dra-driver-nvidia-gpu v0.4.0): mask = XidCriticalError | DoubleBitEcc | SingleBitEcc, limited to
`nvmlDeviceGetSupportedEventTypes`; a GPU whose handle, supported types or registration fail is
reported "unmonitored"; a wait that answers GPU_IS_LOST marks every GPU lost. It then drops every
non-XID event; gpudra keeps double-bit ECC events (kind "ecc": the memory holds uncorrectable data)
and still ignores single-bit ones (corrected by the hardware). A GPU instance / compute instance ID
of 0xFFFFFFFF means the whole GPU.
"""

from __future__ import annotations

import threading
from typing import Any

from .health import HealthEvent, HealthMonitor

WHOLE_GPU = 0xFFFFFFFF
_TIMEOUT, _GPU_IS_LOST, _NOT_SUPPORTED = 10, 15, 3


def _code(exc: Exception) -> int | None:
    return getattr(exc, "value", None)


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlHealthMonitor(HealthMonitor):
    def __init__(self, nvml: Any, lock: threading.RLock):
        self.nvml = nvml
        self._lock = lock  # the backend's: NVML handles are looked up by index under it
        self.mask = (nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
                     | nvml.nvmlEventTypeSingleBitEccError)
        self._pending: list[HealthEvent] = []
        self.event_set = nvml.nvmlEventSetCreate()
        with lock:
            for index in range(int(nvml.nvmlDeviceGetCount())):
                self._register(index)

    def _register(self, index: int) -> None:
        nvml = self.nvml
        uuid = None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _s(nvml.nvmlDeviceGetUUID(handle))
            supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
            nvml.nvmlDeviceRegisterEvents(handle, self.mask & supported, self.event_set)
        except nvml.NVMLError as exc:
            reason = "too old for health events" if _code(exc) == _NOT_SUPPORTED else str(exc)
            # without a UUID the GPU cannot be named: NVIDIA's driver then treats it as lost
            self._pending.append(HealthEvent("unmonitored" if uuid else "gpu-lost", gpu=uuid,
                                             detail=f"GPU index {index}: {reason}"))

    def wait(self, timeout_s: float) -> list[HealthEvent]:
        if self._pending:
            events, self._pending = self._pending, []
            return events
        nvml = self.nvml
        try:
            data = nvml.nvmlEventSetWait_v2(self.event_set, max(int(timeout_s * 1000), 0))
        except nvml.NVMLError as exc:
            if _code(exc) == _GPU_IS_LOST:
                return [HealthEvent("gpu-lost", detail="nvmlEventSetWait: GPU is lost")]
            return []  # TIMEOUT, or an error NVML documents no handling for: wait again
        event_type = int(data.eventType)
        if event_type & nvml.nvmlEventTypeXidCriticalError:
            kind = "xid"
        elif event_type & nvml.nvmlEventTypeDoubleBitEccError:
            kind = "ecc"
        else:
            return []  # single-bit ECC: corrected by the hardware
        try:
            uuid = _s(nvml.nvmlDeviceGetUUID(data.device))
        except nvml.NVMLError as exc:
            return [HealthEvent("gpu-lost", detail=f"event for a GPU whose UUID cannot be read: {exc}")]
        gi = int(data.gpuInstanceId)
        ci = int(data.computeInstanceId)
        return [HealthEvent(kind, gpu=uuid, gi_id=None if gi == WHOLE_GPU else gi,
                            ci_id=None if ci == WHOLE_GPU else ci,
                            xid=int(data.eventData) if kind == "xid" else None)]

    def close(self) -> None:
        try:
            self.nvml.nvmlEventSetFree(self.event_set)
        except self.nvml.NVMLError:
            pass
