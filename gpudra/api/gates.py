"""Fields behind a DRA feature gate that is off (or absent) in the user's Kubernetes release.

The API server of such a release drops a gated field when the object is written (upstream's
dropDisabledFields in pkg/registry/resource/*/strategy.go), or does not serve the kind at all, so the
object the cluster keeps is not the one in the file. Each such field is a warning naming the gate, its
stage and the release: "needs the DRAExtendedResource feature gate (alpha, off by default in 1.34)".
Which release turns which gate on comes from gpudra.versions (one table).
"""

from __future__ import annotations

from typing import Any, Iterator

from gpudra.plain import as_dict, as_list
from gpudra.resourcelimits import LIST_ATTRIBUTE_KINDS
from gpudra.versions import DRA_API_REMOVED, DRA_API_VERSIONS, SERVED_RESOURCE_API, dra_api_problem, gate_state

DRA_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
KNOWN_DRA_API_VERSIONS = frozenset(v for served in DRA_API_VERSIONS.values() for v in served) | set(DRA_API_REMOVED)

_DEVICE_FIELDS = (
    ("consumesCounters", "DRAPartitionableDevices"),
    ("nodeName", "DRAPartitionableDevices"),
    ("nodeSelector", "DRAPartitionableDevices"),
    ("allNodes", "DRAPartitionableDevices"),
    ("taints", "DRADeviceTaints"),
    ("bindingConditions", "DRADeviceBindingConditions"),
    ("bindingFailureConditions", "DRADeviceBindingConditions"),
    ("bindsToNode", "DRADeviceBindingConditions"),
    ("allowMultipleAllocations", "DRAConsumableCapacity"),
)
_DEVICE_FIELD_NAMES = frozenset(name for name, _ in _DEVICE_FIELDS)
_LIST_KINDS = frozenset(LIST_ATTRIBUTE_KINDS)
_REQUEST_FIELDS = (
    ("adminAccess", "DRAAdminAccess"),
    ("tolerations", "DRADeviceTaints"),
    ("capacity", "DRAConsumableCapacity"),
)




def _set(value: Any) -> bool:
    return value is not None and value is not False and value != [] and value != {}


Path = tuple[str | int, ...]  # keys from the object's root: ("spec", "devices", 0, "taints")


def field_path(keys: Path) -> str:
    """("spec", "devices", 0, "taints") → "spec.devices[0].taints" (the form validation messages use)."""
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


def gated_fields(obj: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(field path, gate) for every gated field the v1 object sets."""
    for keys, gate in gated_keys(obj):
        yield field_path(keys), gate


def gated_keys(obj: dict[str, Any]) -> Iterator[tuple[Path, str]]:
    """(keys from the root, gate) for every gated field the v1 object sets."""
    kind, spec = obj.get("kind"), as_dict(obj.get("spec"))
    if kind == "Pod":
        # core/v1 pod fields of the Workload API: pkg/api/pod/util.go drops them while GenericWorkload is off
        for name in ("workloadRef", "schedulingGroup"):
            if _set(spec.get(name)):
                yield ("spec", name), "GenericWorkload"
    elif kind == "PodGroup" and str(obj.get("apiVersion")) == "scheduling.k8s.io/v1alpha2":
        # pkg/registry/scheduling/podgroup/strategy.go (v1.36.0): dropDisabledDRAWorkloadResourceClaimsFields
        if _set(spec.get("resourceClaims")):
            yield ("spec", "resourceClaims"), "DRAWorkloadResourceClaims"
        if _set(as_dict(obj.get("status")).get("resourceClaimStatuses")):
            yield ("status", "resourceClaimStatuses"), "DRAWorkloadResourceClaims"
    elif kind == "Workload" and str(obj.get("apiVersion")) == "scheduling.k8s.io/v1alpha2":
        # pkg/registry/scheduling/workload/strategy.go (v1.36.0): the same for each pod group template
        for i, template in enumerate(as_list(spec.get("podGroupTemplates"))):
            if _set(as_dict(template).get("resourceClaims")):
                yield ("spec", "podGroupTemplates", i, "resourceClaims"), "DRAWorkloadResourceClaims"
    elif kind == "DeviceClass":
        if _set(spec.get("extendedResourceName")):
            yield ("spec", "extendedResourceName"), "DRAExtendedResource"
    elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
        base: Path = ("spec", "spec", "devices") if kind == "ResourceClaimTemplate" else ("spec", "devices")
        devices = as_dict(as_dict(spec.get("spec")).get("devices")) if kind == "ResourceClaimTemplate" else as_dict(spec.get("devices"))
        yield from _claim_fields(devices, base)
    elif kind == "ResourceSlice":
        for name in ("sharedCounters", "perDeviceNodeSelection"):
            if _set(spec.get(name)):
                yield ("spec", name), "DRAPartitionableDevices"
        for i, device in enumerate(as_list(spec.get("devices"))):
            device = as_dict(device)
            if not _DEVICE_FIELD_NAMES.isdisjoint(device):  # most devices have none: one test for thousands
                for name, gate in _DEVICE_FIELDS:
                    if _set(device.get(name)):
                        yield ("spec", "devices", i, name), gate
            for attribute_name, attribute in as_dict(device.get("attributes")).items():
                if type(attribute) is dict and not _LIST_KINDS.isdisjoint(attribute):
                    for list_kind in LIST_ATTRIBUTE_KINDS:
                        if _set(attribute.get(list_kind)):
                            yield ("spec", "devices", i, "attributes", attribute_name, list_kind), "DRAListTypeAttributes"
            for capacity_name, capacity in as_dict(device.get("capacity")).items():
                if _set(as_dict(capacity).get("requestPolicy")):
                    yield ("spec", "devices", i, "capacity", capacity_name, "requestPolicy"), "DRAConsumableCapacity"


def _claim_fields(devices: dict[str, Any], base: Path) -> Iterator[tuple[Path, str]]:
    for i, request in enumerate(as_list(devices.get("requests"))):
        request = as_dict(request)
        exactly = as_dict(request.get("exactly"))
        for name, gate in _REQUEST_FIELDS:
            if _set(exactly.get(name)):
                yield (*base, "requests", i, "exactly", name), gate
        if _set(request.get("firstAvailable")):
            yield (*base, "requests", i, "firstAvailable"), "DRAPrioritizedList"
        for j, sub in enumerate(as_list(request.get("firstAvailable"))):
            for name, gate in _REQUEST_FIELDS[1:]:  # subrequests have no adminAccess
                if _set(as_dict(sub).get(name)):
                    yield (*base, "requests", i, "firstAvailable", j, name), gate
    for k, constraint in enumerate(as_list(devices.get("constraints"))):
        if _set(as_dict(constraint).get("distinctAttribute")):
            yield (*base, "constraints", k, "distinctAttribute"), "DRAConsumableCapacity"


def _lookup(obj: Any, keys: Path) -> Any:
    for key in keys:
        if isinstance(key, int):
            obj = obj[key] if isinstance(obj, list) and key < len(obj) else None
        else:
            obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def gate_on(gate: str, version: str, features: Any = None) -> bool:
    """Whether `version`'s components run with `gate` on: as `features` (gpudra.allocator.Features) sets it, else
    the release's default."""
    chosen = features.gate_enabled(gate) if features is not None else None
    return gate_state(gate, version).default if chosen is None else chosen


def drop_disabled_fields(obj: dict[str, Any], version: str, old: dict[str, Any] | None = None,
                         features: Any = None, keep_gates: frozenset[str] = frozenset()) -> list[str]:
    """Remove, in place, the gated fields that `version`'s API server drops with its gates (upstream's
    dropDisabledFields: a field the stored `old` object already uses is kept on update). Returns their paths.
    A field under a parent that goes too (a firstAvailable entry's tolerations) goes with its parent.
    `features` (gpudra.allocator.Features): the gates the cluster turned on or off; the release's defaults
    for the others."""
    dropped: list[str] = []
    for keys, gate in sorted(gated_keys(obj), key=lambda item: len(item[0])):
        if gate in keep_gates or gate_on(gate, version, features) or (old is not None and _set(_lookup(old, keys))):
            continue
        parent = _lookup(obj, keys[:-1])
        if isinstance(parent, dict) and keys[-1] in parent:
            del parent[keys[-1]]
            dropped.append(field_path(keys))
    return dropped


def served_version_problems(kind: Any, api_version: Any, version: str,
                            runtime_config: dict[str, bool] | None = None) -> list[tuple[str, str]]:
    """(severity, message) when `version`'s API server does not serve a DRA kind at the older resource.k8s.io
    version it is written in (gpudra.versions.DRA_API_VERSIONS): a removed version is an error, a version
    served only with --runtime-config a warning unless `runtime_config` turns it on. resource.k8s.io/v1 is
    gate_warnings' business (a warning on 1.33)."""
    if kind not in DRA_KINDS or not isinstance(api_version, str) or api_version == "resource.k8s.io/v1":
        return []
    if api_version.partition("/")[2] not in KNOWN_DRA_API_VERSIONS:
        return []  # resource.k8s.io/v2: no release has it; validate_document names what is served
    found = dra_api_problem(api_version, version, runtime_config)
    return [found] if found else []


def gate_warnings(obj: dict[str, Any], version: str, api_version: str | None = None,
                  runtime_config: dict[str, bool] | None = None, features: Any = None) -> list[tuple[str, str]]:
    """(field path, message) for what Kubernetes `version` does not keep with its gates: its defaults, or those
    `features` (gpudra.allocator.Features, `--features`) turns on or off.
    `api_version`: the object's apiVersion as written (before any conversion to v1); `runtime_config`:
    the kube-apiserver's --runtime-config (beta versions it serves besides the default)."""
    found: list[tuple[str, str]] = []
    kind = obj.get("kind")
    written = api_version if api_version is not None else obj.get("apiVersion")
    found += [("apiVersion", message) for severity, message
              in served_version_problems(kind, written, version, runtime_config) if severity == "warning"]
    served = SERVED_RESOURCE_API[version]
    if written == "resource.k8s.io/v1" and served != written:
        found.append(("apiVersion", f"resource.k8s.io/v1 is not served by Kubernetes {version} (it serves "
                                    f"{served}; the DynamicResourceAllocation feature gate is "
                                    f"{gate_state('DynamicResourceAllocation', version).describe()})"))
    if kind == "DeviceTaintRule":
        gate = "DRADeviceTaintRules" if gate_state("DRADeviceTaintRules", version).stage else "DRADeviceTaints"
        state = gate_state(gate, version)
        if not gate_on(gate, version, features):
            found.append(("", f"DeviceTaintRule needs the {gate} feature gate ({state.describe()})"))
    if kind in ("Workload", "PodGroup") and isinstance(written, str) and written.startswith("scheduling.k8s.io/"):
        found += workload_api_warnings(kind, written, version, features, runtime_config)
    for path, gate in gated_fields(obj):
        state = gate_state(gate, version)
        if gate_on(gate, version, features):
            continue
        if state.default and state.stage is not None:  # on by default: --features turned it off
            found.append((path, f"needs the {gate} feature gate, which --features turns off: the API server drops "
                                "the field while the gate is off"))
        elif state.stage is None:
            found.append((path, f"needs the {gate} feature gate, which Kubernetes {version} does not have: "
                                "its API server does not know the field"))
        else:
            found.append((path, f"needs the {gate} feature gate ({state.describe()}): the API server drops "
                                "the field while the gate is off"))
    return found


def workload_api_warnings(kind: str, api_version: str, version: str, features: Any = None,
                          runtime_config: dict[str, bool] | None = None) -> list[tuple[str, str]]:
    """A Workload or PodGroup is served only by the release of its version (v1alpha1: 1.35, v1alpha2: 1.36), and
    there only with the GenericWorkload gate on and the version enabled by --runtime-config (alpha APIs are off by
    default; pkg/controlplane/apiserver/options and kube_features.go). Each note is on `apiVersion`: the API
    server answers all three alike, 404 (the real 1.34 and 1.36 servers in tests/oracles/test_kube_validation.py)."""
    from gpudra.api.schema.workload import KINDS, SERVED_IN

    served_in = SERVED_IN.get(api_version)
    if served_in is None:
        return []
    if served_in != version:
        return [("apiVersion", f"{api_version} {kind} is served only by Kubernetes {served_in}, not {version}"
                               + "".join(f"; Kubernetes {version} serves {v}" for v, r in SERVED_IN.items()
                                         if r == version and (v, kind) in KINDS))]
    found = []
    if not (runtime_config or {}).get(api_version):
        found.append(("apiVersion", f"{api_version} is alpha: the API server serves it only with "
                                    f"--runtime-config={api_version}=true"))
    if not gate_on("GenericWorkload", version, features):
        found.append(("apiVersion", f"{kind} needs the GenericWorkload feature gate "
                                    f"({gate_state('GenericWorkload', version).describe()}): without it the API "
                                    f"server does not serve {api_version}"))
    return found
