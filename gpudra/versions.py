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
ResourceSlice layout the driver publishes (gpudra.driver.slices).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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

# The resource.k8s.io version each release serves by default (v1 is GA in 1.34).
SERVED_RESOURCE_API = {"1.33": "resource.k8s.io/v1beta2", "1.34": "resource.k8s.io/v1",
                       "1.35": "resource.k8s.io/v1", "1.36": "resource.k8s.io/v1"}


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


def server_version(info: dict) -> str:
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
