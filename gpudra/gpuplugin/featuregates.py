"""NVIDIA's DRA driver feature gates, as `gpudra driver run --feature-gates NAME=true,...` takes them.

The table follows kubernetes-sigs/dra-driver-nvidia-gpu v0.5.0-dev (`pkg/featuregates/featuregates.go`,
`defaultFeatureGates`): each gate's name, default and stage. Parsing follows k8s.io/component-base's
`featureGate.Set` / `unsafeSetFromMap` (its messages: unknown gate, missing or invalid bool, a gate locked to its
default), and the cross-gate rules follow NVIDIA's `ValidateFeatureGates` in the same file, with its messages.

What gpudra does differs from NVIDIA in one way only, and loudly: a gate whose feature gpudra does not implement
may be named only to keep it off. Turning it on is refused with what is missing; a default-on gate gpudra does
not implement is reported by `unimplemented_defaults` (the driver behaves as if it were off).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

ALPHA, BETA = "ALPHA", "BETA"


@dataclass(frozen=True)
class GateSpec:
    name: str
    default: bool
    stage: str  # ALPHA | BETA (component-base's prerelease)
    since: str  # the driver's release that added it (NVIDIA's Version field: driver SemVer major.minor)
    gpudra: str  # what turning it on does in gpudra, or, when `missing`, what gpudra lacks
    missing: bool = False
    locked: bool = False  # component-base's LockToDefault (none of NVIDIA's gates is locked today)


GATES: tuple[GateSpec, ...] = (
    GateSpec("TimeSlicingSettings", False, ALPHA, "0.2",
             "GPU/MIG configs with sharing strategy TimeSlicing are prepared (off: refused at prepare)"),
    GateSpec("MPSSupport", False, ALPHA, "0.2",
             "GPU/MIG configs with sharing strategy MPS are prepared (off: refused at prepare)"),
    GateSpec("IMEXDaemonsWithDNSNames", True, BETA, "0.2",
             "the compute-domain plugin's daemon prepare writes nodes.cfg with the DNS-style names "
             "compute-domain-daemon-NNNN and a hosts file mapping the clique's daemon IPs to them (off: nodes.cfg "
             "lists the IPs)"),
    GateSpec("PassthroughSupport", False, ALPHA, "0.3",
             "gpu-vfio-<i> devices bound to vfio-pci at prepare (simulated GPUs only; passthrough.py)"),
    GateSpec("DynamicMIG", False, ALPHA, "0.3", "dynamic MIG, as --dynamic-mig"),
    GateSpec("NVMLDeviceHealthCheck", False, ALPHA, "0.3",
             "GPU health events taint devices, as --device-health (gpudra's own default: on)"),
    GateSpec("ComputeDomainCliques", True, BETA, "0.3",
             "the IMEX daemons write ComputeDomainClique objects <domain uid>.<clique> (off: their domain's "
             "status.nodes); the compute-domain plugin itself does not read it (gpudra.computedomain.daemonstatus)"),
    GateSpec("CrashOnNVLinkFabricErrors", True, BETA, "0.3",
             "crashing on NVLink fabric errors (gpudra publishes the GPUs without a clique)", missing=True),
    GateSpec("DeviceMetadata", False, ALPHA, "0.4",
             "KEP-5304 device metadata files in containers (attributes of VFIO devices; devicemetadata.py)"),
    GateSpec("DRAListTypeAttributes", False, ALPHA, "0.4",
             "resource.kubernetes.io/numaNode published as a list (needs Kubernetes' DRAListTypeAttributes)"),
    GateSpec("FabricManagerPartitioning", False, ALPHA, "0.5",
             "gpuModuleID/partitionN attributes and partition activation at prepare (a simulated Fabric Manager "
             "only; fabricpartitions.py)"),
    GateSpec("HostManagedIMEXDaemon", False, ALPHA, "0.5", "the hostManaged IMEX deployment mode", missing=True),
    # k8s.io/component-base/logs/api/v1's gates, which NVIDIA registers too (logsapi.AddFeatureGates)
    GateSpec("ContextualLogging", True, BETA, "1.30", "nothing: a Go logging option (gpudra logs with Python's)"),
    GateSpec("LoggingAlphaOptions", False, ALPHA, "1.24", "nothing: a Go logging option (gpudra logs with Python's)"),
    GateSpec("LoggingBetaOptions", True, BETA, "1.24", "nothing: a Go logging option (gpudra logs with Python's)"),
    GateSpec("ConsumableShares", False, ALPHA, "0.5",
             "`--consumable-shares` may be other than disabled: GPUs and MIG devices shared by several claims "
             "(consumableshares.py)"),
)
SPECS: Mapping[str, GateSpec] = MappingProxyType({g.name: g for g in GATES})
# k8s.io/component-base's special gates: they set every unset gate of their stage
ALL_ALPHA, ALL_BETA = "AllAlpha", "AllBeta"


class FeatureGateError(ValueError):
    pass


@dataclass(frozen=True)
class FeatureGates:
    """The explicitly set gates (name -> value); every other gate has NVIDIA's default."""

    set: Mapping[str, bool] = field(default_factory=dict)

    def enabled(self, name: str) -> bool:
        return self.set[name] if name in self.set else SPECS[name].default

    def named(self, name: str) -> bool:
        return name in self.set

    def unimplemented_defaults(self) -> list[GateSpec]:
        """Default-on gates gpudra does not implement and the user left on: the driver behaves as if off."""
        return [g for g in GATES if g.missing and g.default and g.name not in self.set]

    def sharing_strategies(self) -> frozenset[str]:
        """The sharing strategies prepare accepts (NVIDIA's validateSharingStrategy in api/.../validate.go)."""
        return frozenset(s for s, gate in SHARING_GATES.items() if self.enabled(gate))


SHARING_GATES = MappingProxyType({"TimeSlicing": "TimeSlicingSettings", "MPS": "MPSSupport"})


def sharing_gate_error(strategy: str) -> str:
    """NVIDIA's gpuSharingFeatureGateError (Go's %q quotes with double quotes)."""
    return f'"{strategy}" is selected as the GPU sharing strategy, but the "{SHARING_GATES[strategy]}" feature gate ' \
           "is not enabled"


_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def _parse_bool(key: str, value: str) -> bool:
    """Go's strconv.ParseBool, with component-base's message."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise FeatureGateError(f'invalid value of {key}={value}, err: strconv.ParseBool: parsing "{value}": '
                           "invalid syntax")


def _go(value: bool) -> str:
    return "true" if value else "false"


def parse_feature_gates(text: str) -> FeatureGates:
    """`NAME=BOOL,...` as component-base's featureGate.Set reads it, then NVIDIA's ValidateFeatureGates and
    gpudra's rule for gates it does not implement. Raises FeatureGateError with the message."""
    pairs: dict[str, bool] = {}
    for item in text.split(","):
        if not item:
            continue
        key, sep, written = item.partition("=")
        key = key.strip()
        if not sep:
            raise FeatureGateError(f"missing bool value for {key}")
        pairs[key] = _parse_bool(key, written.strip())
    chosen: dict[str, bool] = {}
    for key, value in pairs.items():
        if key in (ALL_ALPHA, ALL_BETA):
            continue
        spec = SPECS.get(key)
        if spec is None:
            raise FeatureGateError(f"unrecognized feature gate: {key}")
        if spec.locked and spec.default != value:  # Go's %v prints a bool as true/false
            raise FeatureGateError(f"cannot set feature gate {key} to {_go(value)}, feature is locked to "
                                   f"{_go(spec.default)}")
        chosen[key] = value
    for special, stage in ((ALL_ALPHA, ALPHA), (ALL_BETA, BETA)):  # only gates not named themselves
        if special in pairs:
            for spec in GATES:
                if spec.stage == stage and spec.name not in pairs:
                    chosen[spec.name] = pairs[special]
    gates = FeatureGates(MappingProxyType(chosen))
    validate(gates)
    return gates


def validate(gates: FeatureGates) -> None:
    """NVIDIA's ValidateFeatureGates (pkg/featuregates/featuregates.go), then what gpudra lacks."""
    on = gates.enabled
    for gate, needs in (("ComputeDomainCliques", "IMEXDaemonsWithDNSNames"), ("DeviceMetadata", "PassthroughSupport")):
        if on(gate) and not on(needs):
            raise FeatureGateError(f"feature gate {gate} requires {needs} to also be enabled")
    for first, second in (("DynamicMIG", "PassthroughSupport"), ("DynamicMIG", "NVMLDeviceHealthCheck"),
                          ("DynamicMIG", "MPSSupport"), ("PassthroughSupport", "NVMLDeviceHealthCheck")):
        if on(first) and on(second):
            raise FeatureGateError(f"feature gate {first} is currently mutually exclusive with {second}")
    for spec in GATES:
        if spec.missing and gates.set.get(spec.name):
            raise FeatureGateError(f"feature gate {spec.name}: gpudra does not implement {spec.gpudra}; "
                                   f"only {spec.name}=false is accepted")


def describe() -> str:
    """One line per gate for --help and errors: `Name=true|false (ALPHA - default=false)`, as component-base's
    KnownFeatures lists them, with what gpudra does."""
    return "\n".join(f"{g.name}=true|false ({g.stage} - default={str(g.default).lower()})"
                     f"{' [not in gpudra]' if g.missing else ''}" for g in GATES)
