"""Opaque device configuration for gpudra's drivers (`resource.nvidia.com/v1beta1`): the GPU driver's GpuConfig /
MigDeviceConfig and the compute-domain driver's ComputeDomainChannelConfig / ComputeDomainDaemonConfig.

Below gpudra.api and the kubelet plugins (gpudra.gpuplugin, gpudra.computedomain): the driver decodes and applies it, and `gpudra validate` checks it as the
driver's admission webhook does (`opaque_config_problems`, the one copy both use).

Decoding is strict: unknown apiVersion, kind or field is an error, as in the NVIDIA driver.
Class configs come before claim configs; the last matching config wins.

A claim's configs are hostile input to a root process, so size and value limits are checked
before anything is built from them: the API server's limits on opaque parameters (10 KiB
serialized, 64 configs per allocation), and this driver's own on what a config may say
(a memory limit is a short quantity text of at most 1 PiB, at most 64 per-device entries).
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from gpudra.errors import GpudraError
from gpudra.quantity import Quantity, QuantityError
from gpudra.vocabulary import COMPUTE_DOMAIN_DRIVER_NAME, DRIVER_NAME

# The API server's limits on opaque configs (resource/v1/types.go, Kubernetes 1.36); gpudra.api.schema.resource's
# limit table takes them from here.
ALLOCATION_CONFIGS_MAX = 64  # configs in one allocation result
OPAQUE_PARAMETERS_MAX = 10 * 1024  # serialized opaque parameters, bytes

API_VERSION = "resource.nvidia.com/v1beta1"
GPU_CONFIG = "GpuConfig"
MIG_CONFIG = "MigDeviceConfig"
VFIO_CONFIG = "VfioDeviceConfig"  # NVIDIA's PassthroughSupport (vfiodeviceconfig.go, iommu.go)
IOMMU_BACKEND_POLICIES = ("LegacyOnly", "PreferIommuFD")
# The compute-domain driver's kinds (k8s-dra-driver-gpu api/nvidia.com/resource/v1beta1/computedomainconfig.go)
CHANNEL_CONFIG = "ComputeDomainChannelConfig"
DAEMON_CONFIG = "ComputeDomainDaemonConfig"
GPU_FAMILY, COMPUTE_DOMAIN_FAMILY = "gpu", "compute-domain"  # which driver's kinds a config may be
FAMILY_KINDS = {GPU_FAMILY: (GPU_CONFIG, MIG_CONFIG, VFIO_CONFIG),
                COMPUTE_DOMAIN_FAMILY: (CHANNEL_CONFIG, DAEMON_CONFIG)}
KIND_FOR_TYPE = {"gpu": GPU_CONFIG, "mig": MIG_CONFIG, "vfio": VFIO_CONFIG, "channel": CHANNEL_CONFIG,
                 "daemon": DAEMON_CONFIG}
# computedomain.go: ComputeDomainChannelAllocationModeSingle / ...All; the CRD's enum for spec.channel.allocationMode
ALLOCATION_MODES = ("Single", "All")
DOMAIN_ID_MAX = 36  # a ComputeDomain's metadata.uid (the controller writes it into the claim templates)
TIME_SLICE_INTERVALS = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}
MIB = 1024 * 1024
# Limits of this driver on what a config may say, checked before any number is built.
QUANTITY_TEXT_MAX = 64
QUANTITY_EXPONENT_MAX = 30  # 1e30 bytes is far beyond any memory; 1e-30 far below a byte
PINNED_MEMORY_MAX_MIB = 1024**3  # 1 PiB
PER_DEVICE_ENTRIES_MAX = 64  # more than the GPUs of any node
DEVICE_KEY_MAX = 64  # an index or a GPU UUID
_EXPONENT_TAIL = re.compile(r"[eE]([+-]?[0-9]+)\Z")


class ConfigError(GpudraError):
    """An opaque config this driver cannot accept."""


@dataclass
class Sharing:
    strategy: str  # "TimeSlicing" | "MPS"
    time_slice_interval: str | None = None
    mps_active_thread_percentage: int | None = None
    mps_pinned_memory_limit_mib: int | None = None
    mps_per_device_pinned_memory_mib: dict[str, int] = field(default_factory=dict)
    mps_multi_user: bool | None = None  # NVIDIA's MpsConfig.MultiUser: `nvidia-cuda-mps-control -d -M`

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
        if self.mps_multi_user is not None:
            out["mpsMultiUser"] = self.mps_multi_user
        return out


@dataclass(frozen=True)
class DomainConfig:
    """A ComputeDomainChannelConfig or ComputeDomainDaemonConfig: the domain (its UID) and, for a channel, how
    many IMEX channels the container gets ("Single": channel 0, "All": every channel of the node)."""
    domain_id: str
    allocation_mode: str = "Single"


@dataclass(frozen=True)
class IommuConfig:
    """A VfioDeviceConfig's `iommu`, normalized as NVIDIA's VfioDeviceConfig.Normalize leaves it."""
    backend_policy: str = "LegacyOnly"
    enable_api_device: bool = False


@dataclass
class DeviceConfig:
    kind: str
    sharing: Sharing | None
    requests: list[str]
    source: str  # FromClass | FromClaim
    domain: DomainConfig | None = None  # the compute-domain kinds
    iommu: IommuConfig | None = None  # VfioDeviceConfig (always set for that kind: the defaults)


def _strict(obj: Any, allowed: set[str], what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ConfigError(f"{what}: expected an object")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ConfigError(f"{what}: unknown field(s) {', '.join(unknown)}")
    return obj


def _bounded_quantity_text(value: Any, what: str) -> str:
    """The quantity's text, refused when it is too long or its exponent too large to be a memory size
    (so parsing never has to build a huge number)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"{what}: must be a quantity string such as \"16Gi\"")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{what}: must be a finite quantity")
    text = value if isinstance(value, str) else repr(value)
    if len(text) > QUANTITY_TEXT_MAX:
        raise ConfigError(f"{what}: must be at most {QUANTITY_TEXT_MAX} characters (has {len(text)})")
    exponent = _EXPONENT_TAIL.search(text)
    if exponent and abs(int(exponent.group(1))) > QUANTITY_EXPONENT_MAX:
        raise ConfigError(f"{what}: exponent {exponent.group(1)} of {text!r} is out of range "
                          f"(at most {QUANTITY_EXPONENT_MAX} either way)")
    return text


def _mib(value: Any, what: str) -> int:
    text = _bounded_quantity_text(value, what)
    try:
        quantity = Quantity.parse(value if isinstance(value, (int, float)) else text)
    except QuantityError as exc:
        raise ConfigError(f"{what}: invalid quantity {value!r}: {exc}") from None
    nanos = quantity.nanos
    if nanos < MIB * 10**9:
        raise ConfigError(f"{what}: must be at least 1Mi, got {value}")
    mib = nanos // (MIB * 10**9)
    if mib > PINNED_MEMORY_MAX_MIB:
        raise ConfigError(f"{what}: must be at most 1Pi, got {text}")
    return mib


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
                                       "defaultPerDevicePinnedMemoryLimit", "multiUser"}, f"{what}.mpsConfig")
        multi_user = mps.get("multiUser")
        if multi_user is not None:
            if not isinstance(multi_user, bool):  # a Go *bool takes JSON true/false only
                raise ConfigError(f"{what}.mpsConfig.multiUser: must be true or false, got {multi_user!r}")
            sharing.mps_multi_user = multi_user
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
        if len(per_device) > PER_DEVICE_ENTRIES_MAX:
            raise ConfigError(f"{what}.mpsConfig.defaultPerDevicePinnedMemoryLimit: at most "
                              f"{PER_DEVICE_ENTRIES_MAX} devices (has {len(per_device)})")
        for key, value in per_device.items():
            if len(str(key)) > DEVICE_KEY_MAX:
                raise ConfigError(f"{what}.mpsConfig.defaultPerDevicePinnedMemoryLimit: device keys must be at "
                                  f"most {DEVICE_KEY_MAX} characters")
            sharing.mps_per_device_pinned_memory_mib[str(key)] = _mib(
                value, f"{what}.mpsConfig.defaultPerDevicePinnedMemoryLimit[{key}]")
    return sharing


def _check_size(parameters: Any, what: str) -> None:
    """The API server's limit on opaque parameters (OpaqueParametersMaxLength), checked on the
    serialized form; a nesting too deep to serialize is refused as well."""
    if isinstance(parameters, (str, bytes)):
        size = len(parameters)
    else:
        try:
            size = len(json.dumps(parameters, separators=(",", ":"), default=str))
        except (RecursionError, ValueError, TypeError) as exc:
            raise ConfigError(f"{what}: parameters cannot be serialized: {type(exc).__name__}") from None
    if size > OPAQUE_PARAMETERS_MAX:
        raise ConfigError(f"{what}: parameters must be at most {OPAQUE_PARAMETERS_MAX} bytes when serialized "
                          f"(are {size})")


def _domain_config(obj: dict[str, Any], kind: str, what: str) -> DomainConfig:
    """ComputeDomainChannelConfig / ComputeDomainDaemonConfig: strict fields, `Validate()`'s rule (domainID
    cannot be empty), and two of this driver's own. The domain ID names a directory of the node (the daemon's
    IMEX config), so it must be what the controller writes there, a UID, never a path; upstream joins it into a
    path unchecked. An allocationMode other than Single/All is refused: upstream's Validate() lets it through and
    prepare then treats it as Single (a silent downgrade of "all" to one channel); the CRD's enum allows only these
    two, so every claim template the controller writes passes."""
    _strict(obj, {"apiVersion", "kind", "domainID"} | ({"allocationMode"} if kind == CHANNEL_CONFIG else set()), what)
    domain_id = obj.get("domainID")
    if domain_id is None or domain_id == "":
        raise ConfigError(f"{what}: domainID cannot be empty")  # Validate()'s words
    if not isinstance(domain_id, str):
        raise ConfigError(f"{what}.domainID: must be a string (the ComputeDomain's UID)")
    if not _is_uuid(domain_id):
        shown = domain_id if len(domain_id) <= 64 else domain_id[:64] + "…"
        raise ConfigError(f"{what}.domainID: {shown!r} is not a ComputeDomain's UID (a lower-case UUID such as "
                          "'1c3b9a3e-1b9f-4d6e-9a57-4c1d0e2f3a4b')")
    mode = obj.get("allocationMode")
    if mode in (None, ""):
        mode = "Single"
    if mode not in ALLOCATION_MODES:
        raise ConfigError(f"{what}.allocationMode: must be Single or All, got {str(mode)[:64]!r}")
    return DomainConfig(domain_id, mode)


def _is_uuid(text: str) -> bool:
    """A UUID in the 36-character lower-case form the API server assigns as metadata.uid. Upper case is refused:
    prepare looks the domain up by its UID as a string (upstream too: the informer's UID index), so an upper-case
    spelling of a real domain's UID would never match and its prepare would retry forever."""
    if len(text) != DOMAIN_ID_MAX:
        return False
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def decode_config(parameters: Any, what: str, family: str = GPU_FAMILY,
                  requests: list[str] | None = None, source: str = "FromClaim") -> DeviceConfig:
    """One opaque config of a driver of `family`, decoded strictly; ConfigError says what is wrong."""
    _check_size(parameters, what)
    if isinstance(parameters, (str, bytes)):
        try:
            parameters = json.loads(parameters)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"{what}: parameters are not valid JSON: {exc}") from None
    if family == GPU_FAMILY:
        _strict(parameters, {"apiVersion", "kind", "sharing", "iommu"}, what)
    elif not isinstance(parameters, dict):
        raise ConfigError(f"{what}: expected an object")
    if parameters.get("apiVersion") != API_VERSION:
        raise ConfigError(f"{what}: unknown apiVersion {parameters.get('apiVersion')!r} (want {API_VERSION})")
    kind = parameters.get("kind")
    kinds = FAMILY_KINDS[family]
    if kind not in kinds:
        raise ConfigError(f"{what}: unknown kind {kind!r} (want {' or '.join(kinds)})")
    requests = list(requests or [])
    if family == COMPUTE_DOMAIN_FAMILY:
        return DeviceConfig(kind, None, requests, source, domain=_domain_config(parameters, kind, what))
    if kind == VFIO_CONFIG:
        if "sharing" in parameters:
            raise ConfigError(f"{what}: unknown field(s) sharing")
        return DeviceConfig(kind, None, requests, source, iommu=_iommu(parameters.get("iommu"), f"{what}.iommu"))
    if "iommu" in parameters:
        raise ConfigError(f"{what}: unknown field(s) iommu")
    return DeviceConfig(kind, _sharing(parameters.get("sharing"), kind, f"{what}.sharing"), requests, source)


def _iommu(obj: Any, what: str) -> IommuConfig:
    """NVIDIA's IOMMUConfig, defaulted (Normalize) and checked (Validate, with its message)."""
    if obj is None:
        return IommuConfig()
    fields = _strict(obj, {"backendPolicy", "enableAPIDevice"}, what)
    policy = fields.get("backendPolicy") or "LegacyOnly"
    if policy not in IOMMU_BACKEND_POLICIES:
        raise ConfigError(f"{what}.backendPolicy: unknown IOMMU backend policy: {policy}, supported IOMMU backend "
                          f"policies: {', '.join(IOMMU_BACKEND_POLICIES)}")
    enable = fields.get("enableAPIDevice")
    if enable is not None and not isinstance(enable, bool):
        raise ConfigError(f"{what}.enableAPIDevice: must be true or false, got {enable!r}")
    return IommuConfig(policy, bool(enable))


def decode_opaque(parameters: Any, what: str) -> tuple[str, Sharing | None]:
    """A GPU driver config's kind and sharing (see decode_config)."""
    config = decode_config(parameters, what)
    return config.kind, config.sharing


def claim_configs(allocation: dict[str, Any], driver_name: str, family: str = GPU_FAMILY) -> list[DeviceConfig]:
    """This driver's opaque configs from `status.allocation.devices.config`, class configs first."""
    entries = (allocation.get("devices") or {}).get("config") or []
    if not isinstance(entries, list):
        raise ConfigError("status.allocation.devices.config: expected a list")
    if len(entries) > ALLOCATION_CONFIGS_MAX:
        raise ConfigError(f"status.allocation.devices.config: at most {ALLOCATION_CONFIGS_MAX} entries "
                          f"(has {len(entries)})")
    decoded: list[DeviceConfig] = []
    for index, entry in enumerate(entries):
        opaque = (entry or {}).get("opaque") if isinstance(entry, dict) else None
        if not isinstance(opaque, dict) or opaque.get("driver") != driver_name:
            continue
        decoded.append(decode_config(opaque.get("parameters"), f"config[{index}]", family,
                                     list(entry.get("requests") or []), entry.get("source", "FromClaim")))
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


# ----- what the driver's admission webhook refuses (gpudra.webhook.admission serves it; gpudra validate checks it)

# resource (plural) -> where the device configs are in the object, as the webhook registers for them
CONFIG_PATHS = {"resourceclaims": ("spec",), "resourceclaimtemplates": ("spec", "spec"), "deviceclasses": ("spec",)}
KIND_RESOURCES = {"ResourceClaim": "resourceclaims", "ResourceClaimTemplate": "resourceclaimtemplates",
                  "DeviceClass": "deviceclasses"}


def _configs(obj: dict[str, Any], resource: str) -> tuple[str, list[Any]]:
    """(path of the config list, the list) of a v1 object; DeviceClass configs sit in spec.config."""
    node: Any = obj
    for key in CONFIG_PATHS[resource]:
        node = node.get(key) if isinstance(node, dict) else None
    base = ".".join(CONFIG_PATHS[resource])
    if resource == "deviceclasses":
        entries = node.get("config") if isinstance(node, dict) else None
        return f"{base}.config", entries if isinstance(entries, list) else []
    devices = node.get("devices") if isinstance(node, dict) else None
    entries = devices.get("config") if isinstance(devices, dict) else None
    return f"{base}.devices.config", entries if isinstance(entries, list) else []


def opaque_config_problems(obj: dict[str, Any], driver_name: str = DRIVER_NAME,
                           family: str = GPU_FAMILY) -> list[tuple[str, str]]:
    """(field path, message) for each of `driver_name`'s opaque configs in a v1 ResourceClaim,
    ResourceClaimTemplate or DeviceClass that the driver would refuse; other drivers' configs are theirs.
    The path is the config's `…opaque.parameters`, as NVIDIA's webhook names it; the message starts with the
    field inside the parameters where there is one (`sharing.strategy: must be TimeSlicing or MPS, …`)."""
    resource = KIND_RESOURCES.get(str(obj.get("kind")))
    if resource is None:
        return []
    base, entries = _configs(obj, resource)
    problems: list[tuple[str, str]] = []
    for position, entry in enumerate(entries):
        opaque = entry.get("opaque") if isinstance(entry, dict) else None
        if not isinstance(opaque, dict) or opaque.get("driver") != driver_name:
            continue
        path = f"{base}[{position}].opaque.parameters"
        try:
            decode_config(opaque.get("parameters"), "parameters", family)
        except ConfigError as exc:
            message = str(exc)
            for prefix in ("parameters: ", "parameters."):  # the path says where the parameters are
                if message.startswith(prefix):
                    message = message[len(prefix):]
            problems.append((path, message))
    return problems


def drivers_config_problems(obj: dict[str, Any], driver_name: str = DRIVER_NAME,
                            compute_domain_driver: str | None = COMPUTE_DOMAIN_DRIVER_NAME
                            ) -> list[tuple[str, str, str]]:
    """(driver, field path, message) for the configs either of gpudra's drivers would refuse: the GPU driver's
    (`driver_name`) and the compute-domain driver's (None: not checked)."""
    found = [(driver_name, path, message) for path, message in opaque_config_problems(obj, driver_name)]
    if compute_domain_driver and compute_domain_driver != driver_name:
        found += [(compute_domain_driver, path, message) for path, message in
                  opaque_config_problems(obj, compute_domain_driver, COMPUTE_DOMAIN_FAMILY)]
    return sorted(found, key=lambda item: item[1])


# ----- AdmissionReview (admission.k8s.io/v1) ----------------------------------------------------------------
