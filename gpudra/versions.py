"""Kubernetes releases gpudra models (1.33 to 1.36): the DRA feature gates each one turns on by default.

One table, GATE_HISTORY, from upstream's versioned feature-gate specs: kubernetes/kubernetes
`defaultVersionedKubernetesFeatureGates` of the 1.37 development branch (the scheduler's feature-gate
list, split out of pkg/features/kube_features.go; each gate keeps its whole history there), checked
against the DRA entries of pkg/features/kube_features.go of the 1.33 release (DRAAdminAccess alpha
1.32; DRADeviceTaints, DRAPartitionableDevices, DRAPrioritizedList alpha 1.33;
DRAResourceClaimDeviceStatus beta 1.33) and kubernetes/website's feature-gate pages. Each entry is
(first release, stage, default) and holds until the next entry. A gate absent in a release does not
exist there (its API fields are unknown to that API server).

From this one table come the allocator's default features per release (`allocator_features`), the
warnings `validate` gives for fields behind a gate that is off (gpudra.api.gates) and the
ResourceSlice layout the driver publishes (gpudra.gpuplugin.slices). Further tables below: where a pool's
counter sets live per release (`partitionable_layout`), the resource.k8s.io versions each release serves
(`dra_api_problem`, with kube-apiserver's --runtime-config) and patch releases with known DRA issues
(`patch_warnings`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpudra.errors import GpudraError

KUBERNETES_VERSIONS = ("1.33", "1.34", "1.35", "1.36")
DEFAULT_KUBERNETES_VERSION = "1.36"

# gate -> ((first release, stage, default), ...), oldest first; kube_features.go.
GATE_HISTORY: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "DynamicResourceAllocation": (("1.32", "beta", False), ("1.34", "GA", True)),
    "DRAAdminAccess": (("1.32", "alpha", False), ("1.34", "beta", True), ("1.36", "GA", True)),
    "DRAConsumableCapacity": (("1.34", "alpha", False), ("1.36", "beta", True)),
    "DRADeviceBindingConditions": (("1.34", "alpha", False), ("1.36", "beta", True)),
    "DRADeviceTaintRules": (("1.35", "alpha", False), ("1.36", "beta", False)),
    "DRADeviceTaints": (("1.33", "alpha", False), ("1.36", "beta", True)),
    "DRAExtendedResource": (("1.34", "alpha", False), ("1.36", "beta", True)),
    "DRAListTypeAttributes": (("1.36", "alpha", False),),
    "DRAPartitionableDevices": (("1.33", "alpha", False), ("1.36", "beta", True)),
    "DRAPrioritizedList": (("1.33", "alpha", False), ("1.34", "beta", True), ("1.36", "GA", True)),
    "DRAResourceClaimDeviceStatus": (("1.32", "alpha", False), ("1.33", "beta", True)),
    "DRAWorkloadResourceClaims": (("1.36", "alpha", False),),
    # device health in Pod status (KEP-4680): kube_features.go; kubernetes/website's ResourceHealthStatus page
    "ResourceHealthStatus": (("1.31", "alpha", False), ("1.36", "beta", True)),
    # the Workload API and gang scheduling (KEP-4671): kube_features.go of v1.35.0 and v1.36.0
    "GangScheduling": (("1.35", "alpha", False),),
    "GenericWorkload": (("1.35", "alpha", False),),
    "TopologyAwareWorkloadScheduling": (("1.36", "alpha", False),),
    "WorkloadAwarePreemption": (("1.36", "alpha", False),),
}

# gpudra.allocator.features names -> the gates that must all be on (upstream kube-scheduler:
# pkg/scheduler/framework/plugins/feature/feature.go feeds the allocator's Features from these).
ALLOCATOR_FEATURE_GATES: dict[str, tuple[str, ...]] = {
    "AdminAccess": ("DRAAdminAccess",),
    "ConsumableCapacity": ("DRAConsumableCapacity",),
    "DeviceBindingAndStatus": ("DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus"),
    "DeviceTaints": ("DRADeviceTaints",),
    "ListTypeAttributes": ("DRAListTypeAttributes",),
    "PartitionableDevices": ("DRAPartitionableDevices",),
    "PrioritizedList": ("DRAPrioritizedList",),
}



@dataclass(frozen=True)
class GateState:
    gate: str
    version: str
    stage: str | None  # alpha | beta | GA; None: the gate does not exist in this release
    default: bool

    def describe(self) -> str:
        """'alpha, off by default in 1.34' / 'not in 1.33'."""
        if self.stage is None:
            return f"not in Kubernetes {self.version}"
        return f"{self.stage}, {'on' if self.default else 'off'} by default in {self.version}"


class VersionError(GpudraError, ValueError):
    pass


def _key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def parse_version(text: str | None) -> str:
    """'1.34', 'v1.34.2', '1.34+' (GKE's minor) -> '1.34'; None -> the default release."""
    if text is None or str(text).strip() == "":
        return DEFAULT_KUBERNETES_VERSION
    match = re.fullmatch(r"v?(\d+)\.(\d+)\+?(?:\.\d+)?(?:[-+].*)?", str(text).strip())
    if not match:
        raise VersionError(f"not a Kubernetes version: {text!r} (use one of {', '.join(KUBERNETES_VERSIONS)})")
    version = f"{int(match.group(1))}.{int(match.group(2))}"
    if version not in KUBERNETES_VERSIONS:
        raise VersionError(f"Kubernetes {version} is not modelled; use one of {', '.join(KUBERNETES_VERSIONS)}")
    return version


def server_version(info: dict[str, Any]) -> str:
    """The release of an API server from its /version answer ({"major": "1", "minor": "34+", "gitVersion": …});
    a release newer than gpudra knows reads as the newest one, an older one is refused."""
    git = str(info.get("gitVersion") or "")
    match = re.match(r"v?(\d+)\.(\d+)", git) or re.match(
        r"(\d+)\.(\d+)", f"{info.get('major', '')}.{str(info.get('minor', '')).rstrip('+')}")
    if not match:
        raise VersionError(f"the API server's /version does not name a release: {info!r}")
    found = (int(match.group(1)), int(match.group(2)))
    if found > _key(KUBERNETES_VERSIONS[-1]):
        return KUBERNETES_VERSIONS[-1]
    return parse_version(f"{found[0]}.{found[1]}")


def gate_state(gate: str, version: str) -> GateState:
    stage, default = None, False
    for since, since_stage, since_default in GATE_HISTORY[gate]:
        if _key(since) <= _key(version):
            stage, default = since_stage, since_default
    return GateState(gate, version, stage, default)


def default_gates(version: str) -> dict[str, bool]:
    return {gate: gate_state(gate, version).default for gate in GATE_HISTORY}


def allocator_feature_defaults(version: str) -> dict[str, bool]:
    """Allocator feature name -> on by default in `version`."""
    gates = default_gates(version)
    return {name: all(gates[g] for g in needed) for name, needed in ALLOCATOR_FEATURE_GATES.items()}


def gate_for_feature(name: str, version: str) -> GateState:
    """The gate that keeps allocator feature `name` off in `version` (the first one that is off)."""
    states = [gate_state(g, version) for g in ALLOCATOR_FEATURE_GATES[name]]
    return next((s for s in states if not s.default), states[0])


def component_feature_gates(version: str, features: dict[str, bool]) -> dict[str, bool]:
    """kube-apiserver's, kube-controller-manager's and kube-scheduler's --feature-gates for `version` with the
    allocator features `features` (name -> on, gpudra.allocator.Features.enabled's names): each gate that exists
    in the release and is not GA (locked), set as the features say; a gate no feature names keeps its default.
    A feature on whose gate the release lacks is a VersionError (no component of that release would start with it)."""
    gates: dict[str, bool] = {}
    for name, on in features.items():
        needed = ALLOCATOR_FEATURE_GATES.get(name, ())
        for gate in needed:
            state = gate_state(gate, version)
            if state.stage is None:
                if on:
                    raise VersionError(f"{name} needs the {gate} feature gate, which Kubernetes {version} does not have")
                continue
            if state.stage == "GA":
                continue
            # a feature of two gates is off when either is: turn off the one that is not on by default
            gates[gate] = on or (len(needed) > 1 and state.default and gate != gate_for_feature(name, version).gate)
    return gates


def non_allocator_gates() -> list[str]:
    """The gates gpudra knows that no allocator feature stands for (DRAExtendedResource, GenericWorkload, …);
    DynamicResourceAllocation itself is GA and locked on."""
    covered = {gate for gates in ALLOCATOR_FEATURE_GATES.values() for gate in gates}
    return sorted(gate for gate in GATE_HISTORY if gate not in covered and gate != "DynamicResourceAllocation")


def features_from_gates(gates: dict[str, bool]) -> str:
    """The `--features` text (over the release's defaults) for a server's gates, gate -> on (its /metrics): an
    allocator feature is on when all its gates are; the other gates gpudra knows (the Workload API's,
    DRAExtendedResource, ...) as the server has them; a feature whose gate the server does not list keeps the
    default."""
    tokens = ["default"]
    for name, needed in ALLOCATOR_FEATURE_GATES.items():
        if all(gate in gates for gate in needed):
            tokens.append(("+" if all(gates[g] for g in needed) else "-") + name)
    tokens += [("+" if gates[gate] else "-") + gate for gate in non_allocator_gates() if gate in gates]
    return ",".join(tokens)


# ----- partitionable devices: where a pool's counter sets live ---------------------------------------
# KEP-4815 (DRAPartitionableDevices) changed its ResourceSlice layout incompatibly between 1.34 and 1.35
# (kubernetes/kubernetes#134189, "Updates to DRA Partitionable Devices feature"; KEP update
# kubernetes/enhancements#5515). Up to 1.34 a device consumes counters only from a counter set of its own
# slice, so devices and sharedCounters share a slice ("combined"; the API server rejects a reference to a
# counter set elsewhere, and the allocator counts each slice on its own). From 1.35 the two are mutually
# exclusive: counter sets sit in slices of their own and devices anywhere in the pool consume them ("split").
# NVIDIA's driver publishes both (cmd/gpu-kubelet-plugin/driver.go: generateCombinedResourceSlices for < 1.35,
# generateSplitResourceSlices from 1.35).
COMBINED_SLICES = "combined"
SPLIT_SLICES = "split"
SPLIT_COUNTER_SETS_SINCE = "1.35"


def partitionable_layout(version: str | None) -> str:
    """'combined' (1.33, 1.34) or 'split' (1.35 on): where counter sets live in `version`'s ResourceSlices."""
    return SPLIT_SLICES if _key(parse_version(version)) >= _key(SPLIT_COUNTER_SETS_SINCE) else COMBINED_SLICES


# ----- resource.k8s.io versions each release serves -----------------------------------------------------
# For the DRA kinds (DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate): "default" = served
# out of the box; "opt-in" = served only when kube-apiserver runs with --runtime-config=<group/version>=true
# (new beta and alpha APIs are off by default, KEP-3136); absent = not served. v1 is GA from 1.34
# (kubernetes/kubernetes#132706). v1alpha3 keeps only DeviceTaintRule from 1.34 (kubernetes/kubernetes#132000,
# CHANGELOG-1.34 v1.34.0: "resource.k8s.io/v1alpha3 now only contains DeviceTaintRule"). In 1.33 DRA as a
# whole is off by default (the DynamicResourceAllocation gate is beta, off), so every version there is opt-in.
RESOURCE_GROUP = "resource.k8s.io"
_OPT_IN, _DEFAULT = "opt-in", "default"
DRA_API_VERSIONS: dict[str, dict[str, str]] = {
    "1.33": {"v1beta2": _OPT_IN, "v1beta1": _OPT_IN, "v1alpha3": _OPT_IN},
    "1.34": {"v1": _DEFAULT, "v1beta2": _OPT_IN, "v1beta1": _OPT_IN},
    "1.35": {"v1": _DEFAULT, "v1beta2": _OPT_IN, "v1beta1": _OPT_IN},
    "1.36": {"v1": _DEFAULT, "v1beta2": _OPT_IN, "v1beta1": _OPT_IN},
}
# The resource.k8s.io version each release prefers (the first of its table; v1 is GA in 1.34).
SERVED_RESOURCE_API = {release: f"{RESOURCE_GROUP}/{next(iter(served))}" for release, served in DRA_API_VERSIONS.items()}
# version -> (the release that stopped serving the DRA kinds in it, the upstream change)
DRA_API_REMOVED = {"v1alpha3": ("1.34", "kubernetes/kubernetes#132000")}


class RuntimeConfigError(GpudraError, ValueError):
    """A --runtime-config text that is malformed or names no DRA API version."""


def parse_runtime_config(text: str | None) -> dict[str, bool]:
    """kube-apiserver's --runtime-config: `resource.k8s.io/v1beta2=true,resource.k8s.io/v1beta1` (a bare entry
    means true), also `api/all`, `api/beta`, `api/alpha`. Returns group/version (or api/…) -> enabled."""
    found: dict[str, bool] = {}
    for raw in (text or "").split(","):
        entry = raw.strip()
        if not entry:
            continue
        key, _, value = entry.partition("=")
        key, value = key.strip(), value.strip().lower() or "true"
        if value not in ("true", "false"):
            raise RuntimeConfigError(f"--runtime-config: {entry!r}: the value must be true or false")
        if key.count("/") != 1 or not all(key.split("/")):
            raise RuntimeConfigError(f"--runtime-config: {entry!r}: expected GROUP/VERSION[=true|false], e.g. "
                                     "resource.k8s.io/v1beta2=true")
        found[key] = value == "true"
    return found


def _enabled_by(runtime_config: dict[str, bool], group_version: str) -> bool:
    version = group_version.split("/", 1)[1]
    level = "alpha" if "alpha" in version else "beta" if "beta" in version else "ga"
    enabled = runtime_config.get("api/all", False)
    if level != "ga" and f"api/{level}" in runtime_config:
        enabled = runtime_config[f"api/{level}"]
    return runtime_config.get(group_version, enabled)


def dra_api_problem(api_version: str, version: str, runtime_config: dict[str, bool] | None = None
                    ) -> tuple[str, str] | None:
    """(severity, message) when Kubernetes `version` does not serve the DRA kinds at `api_version`
    (resource.k8s.io/…) with `runtime_config`; None when it does. Removed versions are errors; a version
    served only on request is a warning naming the --runtime-config that turns it on."""
    group, _, served_as = api_version.partition("/")
    if group != RESOURCE_GROUP:
        return None
    release = parse_version(version)
    state = DRA_API_VERSIONS[release].get(served_as)
    if state == _DEFAULT:
        return None
    if state == _OPT_IN:
        if _enabled_by(runtime_config or {}, api_version):
            return None
        return ("warning", f"Kubernetes {release} serves {api_version} only when kube-apiserver runs with "
                           f"--runtime-config={api_version}=true (gpudra checked it converted to "
                           f"{preferred_dra_api(release)}; pass --runtime-config {api_version}=true if the cluster "
                           "enables it)")
    removed = DRA_API_REMOVED.get(served_as)
    if removed and _key(release) >= _key(removed[0]):
        return ("error", f"{api_version} no longer serves this kind: removed in Kubernetes {removed[0]} "
                         f"({removed[1]}; {served_as} keeps only DeviceTaintRule); use "
                         f"{preferred_dra_api(release)}")
    return ("error", f"Kubernetes {release} does not serve {api_version}; it serves "
                     f"{', '.join(RESOURCE_GROUP + '/' + v for v in DRA_API_VERSIONS[release])}")


def preferred_dra_api(version: str) -> str:
    """The newest resource.k8s.io version `version` serves (the first of its table)."""
    return SERVED_RESOURCE_API[parse_version(version)]


# ----- patch releases with known DRA issues -------------------------------------------------------------
@dataclass(frozen=True)
class PatchIssue:
    release: str  # minor release, e.g. "1.34"
    fixed_in: int  # the first patch release with the fix: 1.34.0 and 1.34.1 are affected when 2
    what: str
    source: str  # upstream PR and the CHANGELOG entry that lists the fix
    # The allocator behaviour the fix turns on (a Features field, gpudra.allocator.features) when gpudra models
    # both sides of it; "" when the fix is outside what gpudra models.
    allocator_fix: str = ""


# The article (Kubernetes 1.34 DRA GPU guide) says: use v1.34.2 or later with a DRA driver; 1.34.0/1.34.1 have
# known issues. CHANGELOG-1.34.md, "Changelog since v1.34.1", lists the DRA fixes 1.34.2 brought:
KNOWN_PATCH_ISSUES: tuple[PatchIssue, ...] = (
    PatchIssue("1.34", 2, "the kubelet's connection to a DRA driver deadlocks after 30 minutes idle, so later "
                          "pods with claims stay in ContainerCreating",
               "kubernetes/kubernetes#133934, CHANGELOG-1.34 v1.34.2"),
    PatchIssue("1.34", 2, "a DeviceClass's config in a ResourceClaim's status (source FromClass) does not name "
                          "the requests it applies to",
               "kubernetes/kubernetes#135098, CHANGELOG-1.34 v1.34.2"),
    # gpudra models both sides: "1.36" and 1.36.0-1.36.2 keep the leak (the release of the conformance cases is
    # 1.36.2), 1.36.3 and later roll back (k8s.io/dynamic-resource-allocation v0.36.3, allocateDevice's
    # rollbackDevice in structured/internal/{stable,incubating,experimental}). Not backported: v0.35.10,
    # v0.34.13 and v0.33.13 (the newest patches of 1.35, 1.34, 1.33 on the module proxy) still leak.
    PatchIssue("1.36", 3, "a device that a taint, a constraint or capacity rejects keeps the shared counters it "
                          "reserved, so a claim that fits the node's partitionable devices can be refused",
               "kubernetes/kubernetes#140663, CHANGELOG-1.36 v1.36.3", allocator_fix="rollback_rejected_devices"),
)


def patch_release(text: str | None) -> tuple[str, int] | None:
    """('1.34', 1) for 'v1.34.1' / '1.34.1-gke.100'; None when the text names no patch release."""
    if text is None:
        return None
    match = re.fullmatch(r"v?(\d+)\.(\d+)\+?\.(\d+)(?:[-+].*)?", str(text).strip())
    if not match:
        return None
    return f"{int(match.group(1))}.{int(match.group(2))}", int(match.group(3))


def allocator_fixes(text: str | None) -> frozenset[str]:
    """The allocator fixes (PatchIssue.allocator_fix) that the patch release `text` names has: '1.36.3' has
    rollback_rejected_devices. A release without a patch ('1.36', None) answers as the patch release of the
    conformance cases, which has none of them."""
    found = patch_release(text)
    if found is None:
        return frozenset()
    release, patch = found
    return frozenset(issue.allocator_fix for issue in KNOWN_PATCH_ISSUES
                     if issue.allocator_fix and issue.release == release and patch >= issue.fixed_in)


def patch_warnings(text: str | None) -> list[str]:
    """Warnings for a Kubernetes patch release with known DRA issues (KNOWN_PATCH_ISSUES), each with its fix."""
    found = patch_release(text)
    if found is None:
        return []
    release, patch = found
    return [f"Kubernetes {release}.{patch} has a known DRA issue, fixed in {release}.{issue.fixed_in}: "
            f"{issue.what} ({issue.source})"
            for issue in KNOWN_PATCH_ISSUES if issue.release == release and patch < issue.fixed_in]
