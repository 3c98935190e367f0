"""Opaque device configuration for this driver (`resource.nvidia.com/v1beta1` GpuConfig / MigDeviceConfig).

Decoding is strict: unknown apiVersion, kind or field is an error, as in the NVIDIA driver.
Class configs come before claim configs; the last matching config wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gpudra.api.quantity import Quantity, QuantityError

API_VERSION = "resource.nvidia.com/v1beta1"
GPU_CONFIG = "GpuConfig"
MIG_CONFIG = "MigDeviceConfig"
KIND_FOR_TYPE = {"gpu": GPU_CONFIG, "mig": MIG_CONFIG}
TIME_SLICE_INTERVALS = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}
MIB = 1024 * 1024


class ConfigError(Exception):
    """An opaque config this driver cannot accept."""


@dataclass
class Sharing:
    strategy: str  # "TimeSlicing" | "MPS"
    time_slice_interval: str | None = None
    mps_active_thread_percentage: int | None = None
    mps_pinned_memory_limit_mib: int | None = None
    mps_per_device_pinned_memory_mib: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"strategy": self.strategy}
        if self.time_slice_interval is not None:
            out["timeSliceInterval"] = self.time_slice_interval
        if self.mps_active_thread_percentage is not None:
            out["mpsActiveThreadPercentage"] = self.mps_active_thread_percentage
        if self.mps_pinned_memory_limit_mib is not None:
            out["mpsPinnedMemoryLimitMiB"] = self.mps_pinned_memory_limit_mib
        if self.mps_per_device_pinned_memory_mib:
            out["mpsPerDevicePinnedMemoryMiB"] = dict(self.mps_per_device_pinned_memory_mib)
        return out


@dataclass
class DeviceConfig:
    kind: str
    sharing: Sharing | None
    requests: list[str]
    source: str  # FromClass | FromClaim


def _strict(obj: Any, allowed: set[str], what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ConfigError(f"{what}: expected an object")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ConfigError(f"{what}: unknown field(s) {', '.join(unknown)}")
    return obj


def _mib(value: Any, what: str) -> int:
    try:
        quantity = Quantity.parse(value)
    except QuantityError as exc:
        raise ConfigError(f"{what}: invalid quantity {value!r}: {exc}") from None
    nanos = quantity.nanos
    if nanos < MIB * 10**9:
        raise ConfigError(f"{what}: must be at least 1Mi, got {value}")
    return nanos // (MIB * 10**9)


def _sharing(obj: Any, kind: str, what: str) -> Sharing | None:
    if obj is None:
        return None
    allowed = {"strategy", "mpsConfig"} | ({"timeSlicingConfig"} if kind == GPU_CONFIG else set())
    s = _strict(obj, allowed, what)
    strategy = s.get("strategy")
    if strategy not in ("TimeSlicing", "MPS"):
        raise ConfigError(f"{what}.strategy: must be TimeSlicing or MPS, got {strategy!r}")
    sharing = Sharing(strategy=strategy)
    if "timeSlicingConfig" in s and s["timeSlicingConfig"] is not None:
        if strategy != "TimeSlicing":
            raise ConfigError(f"{what}.timeSlicingConfig: only allowed with strategy TimeSlicing")
        ts = _strict(s["timeSlicingConfig"], {"interval"}, f"{what}.timeSlicingConfig")
        interval = ts.get("interval", "Default")
        if interval not in TIME_SLICE_INTERVALS:
            raise ConfigError(f"{what}.timeSlicingConfig.interval: must be one of "
                              f"{', '.join(TIME_SLICE_INTERVALS)}, got {interval!r}")
        sharing.time_slice_interval = interval
    elif strategy == "TimeSlicing" and kind == GPU_CONFIG:
        sharing.time_slice_interval = "Default"
    if "mpsConfig" in s and s["mpsConfig"] is not None:
        if strategy != "MPS":
            raise ConfigError(f"{what}.mpsConfig: only allowed with strategy MPS")
        mps = _strict(s["mpsConfig"], {"defaultActiveThreadPercentage", "defaultPinnedDeviceMemoryLimit",
                                       "defaultPerDevicePinnedMemoryLimit"}, f"{what}.mpsConfig")
        pct = mps.get("defaultActiveThreadPercentage")
        if pct is not None:
            if isinstance(pct, bool) or not isinstance(pct, int) or not 0 <= pct <= 100:
                raise ConfigError(f"{what}.mpsConfig.defaultActiveThreadPercentage: must be an integer 0..100")
            sharing.mps_active_thread_percentage = pct
        if mps.get("defaultPinnedDeviceMemoryLimit") is not None:
            sharing.mps_pinned_memory_limit_mib = _mib(mps["defaultPinnedDeviceMemoryLimit"],
                                                       f"{what}.mpsConfig.defaultPinnedDeviceMemoryLimit")
        per_device = mps.get("defaultPerDevicePinnedMemoryLimit") or {}
        if not isinstance(per_device, dict):
            raise ConfigError(f"{what}.mpsConfig.defaultPerDevicePinnedMemoryLimit: expected a map")
        for key, value in per_device.items():
            sharing.mps_per_device_pinned_memory_mib[str(key)] = _mib(
                value, f"{what}.mpsConfig.defaultPerDevicePinnedMemoryLimit[{key}]")
    return sharing


def decode_opaque(parameters: Any, what: str) -> tuple[str, Sharing | None]:
    if isinstance(parameters, (str, bytes)):
        try:
            parameters = json.loads(parameters)
        except ValueError as exc:
            raise ConfigError(f"{what}: parameters are not valid JSON: {exc}") from None
    obj = _strict(parameters, {"apiVersion", "kind", "sharing"}, what)
    if obj.get("apiVersion") != API_VERSION:
        raise ConfigError(f"{what}: unknown apiVersion {obj.get('apiVersion')!r} (want {API_VERSION})")
    kind = obj.get("kind")
    if kind not in (GPU_CONFIG, MIG_CONFIG):
        raise ConfigError(f"{what}: unknown kind {kind!r} (want {GPU_CONFIG} or {MIG_CONFIG})")
    return kind, _sharing(obj.get("sharing"), kind, f"{what}.sharing")


def claim_configs(allocation: dict[str, Any], driver_name: str) -> list[DeviceConfig]:
    """This driver's opaque configs from `status.allocation.devices.config`, class configs first."""
    entries = (allocation.get("devices") or {}).get("config") or []
    decoded: list[DeviceConfig] = []
    for index, entry in enumerate(entries):
        opaque = (entry or {}).get("opaque")
        if not opaque or opaque.get("driver") != driver_name:
            continue
        kind, sharing = decode_opaque(opaque.get("parameters"), f"config[{index}]")
        decoded.append(DeviceConfig(kind, sharing, list(entry.get("requests") or []), entry.get("source", "FromClaim")))
    return sorted(decoded, key=lambda c: 0 if c.source == "FromClass" else 1)


def _request_matches(config_requests: list[str], request: str) -> bool:
    parent = request.split("/", 1)[0]
    return request in config_requests or parent in config_requests


def config_for(configs: list[DeviceConfig], request: str, device_type: str, device: str) -> DeviceConfig | None:
    """The config applying to one allocation result; a config naming the request but of the
    wrong kind for the device is an error (e.g. GpuConfig on a MIG device)."""
    wanted = KIND_FOR_TYPE[device_type]
    for config in reversed(configs):
        if config.requests:
            if _request_matches(config.requests, request):
                if config.kind != wanted:
                    raise ConfigError(f"request {request!r}: {config.kind} cannot configure {device_type} device {device}")
                return config
        elif config.kind == wanted:
            return config
    return None
