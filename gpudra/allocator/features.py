"""Feature gates that change what the allocator does.

Tokens follow the conformance `args` files: `default` (the Kubernetes release's defaults, 1.36 unless
`parse(..., version=)` names another; gpudra.versions has the table), `all`, `none`,
`Name` / `+Name` (enable) and `-Name` (disable), comma-separated and applied left to right. Names may
carry the `DRA` prefix of the real gate (`DRAAdminAccess`), and `DeviceBindingAndStatus` also answers to
its two gates `DRADeviceBindingConditions` / `DRAResourceClaimDeviceStatus`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

FEATURE_NAMES = (
    "AdminAccess",
    "ConsumableCapacity",
    "DeviceBindingAndStatus",
    "DeviceTaints",
    "ListTypeAttributes",
    "PartitionableDevices",
    "PrioritizedList",
)

VARIANTS = ("stable", "incubating", "experimental")


# The features each upstream allocator variant supports, most stable first. kube-scheduler runs the
# first variant that supports every enabled feature (k8s.io/dynamic-resource-allocation v0.36.2,
# structured/allocator.go NewAllocator; SupportedFeatures in structured/internal/<variant>/allocator_*.go).
VARIANT_SUPPORT = {
    "stable": frozenset({"AdminAccess", "PrioritizedList", "PartitionableDevices", "DeviceTaints"}),
    "incubating": frozenset(
        {"AdminAccess", "PrioritizedList", "PartitionableDevices", "DeviceTaints", "DeviceBindingAndStatus",
         "ConsumableCapacity"}
    ),
    "experimental": frozenset(FEATURE_NAMES),
}
assert tuple(VARIANT_SUPPORT) == VARIANTS

_ALIASES = {name.lower(): name for name in FEATURE_NAMES}
_ALIASES.update({("dra" + name).lower(): name for name in FEATURE_NAMES})
_ALIASES["dradevicebindingconditions"] = "DeviceBindingAndStatus"
_ALIASES["draresourceclaimdevicestatus"] = "DeviceBindingAndStatus"
_ALIASES["devicebinding"] = "DeviceBindingAndStatus"


def _attr(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


@dataclass(frozen=True)
class Features:
    admin_access: bool = True
    consumable_capacity: bool = True
    device_binding_and_status: bool = True
    device_taints: bool = True
    list_type_attributes: bool = False
    partitionable_devices: bool = True
    prioritized_list: bool = True
    # Upstream implementation variant forced by `--allocator NAME` (stable | incubating |
    # experimental); None = the one kube-scheduler would pick for these gates.
    variant: str | None = None
    # Where a pool's counter sets live (gpudra.versions.partitionable_layout): "split" (1.35 on: slices of their
    # own, consumed pool-wide) or "combined" (1.33, 1.34: each slice's counter sets serve its own devices). A
    # property of the release, not a gate: `none`/`all` keep it.
    slice_layout: str = "split"
    # Kubernetes feature gates outside the allocator's features that `--features` named (gate, on), such as
    # DRAExtendedResource: the API server and scheduler follow them (gate_enabled), the allocator does not
    other_gates: tuple[tuple[str, bool], ...] = ()
    # Whether a device that a taint, a constraint or capacity rejects gives back the shared counters it reserved,
    # and undoing a multi-allocatable device gives back its counters: Kubernetes 1.36.3 on
    # (gpudra.versions.allocator_fixes, kubernetes/kubernetes#140663). Off: 1.36.2 and older keep them for the
    # rest of the allocate() call. A property of the patch release, not a gate: `none`/`all` keep it.
    rollback_rejected_devices: bool = False

    @classmethod
    def default(cls, version: str | None = None) -> "Features":
        """The release's default gates (gpudra.versions); the field defaults above are 1.36's (1.36.2's for the
        patch-release fixes). `version` may name a patch release ('1.36.3'), whose allocator fixes it turns on."""
        if version is None:
            return cls()
        from gpudra.versions import allocator_feature_defaults, allocator_fixes, parse_version, partitionable_layout

        release = parse_version(version)
        gates: dict[str, Any] = {_attr(n): on for n, on in allocator_feature_defaults(release).items()}
        fixes: dict[str, Any] = {name: True for name in allocator_fixes(version)}
        return cls(**gates, **fixes, slice_layout=partitionable_layout(release))

    def _with_release_facts_of(self, other: "Features") -> "Features":
        """These gates with `other`'s release facts (counter layout, patch-release fixes), which `all` and `none`
        keep."""
        return replace(self, slice_layout=other.slice_layout, rollback_rejected_devices=other.rollback_rejected_devices)

    @classmethod
    def all(cls) -> "Features":
        gates: dict[str, Any] = {_attr(n): True for n in FEATURE_NAMES}
        return cls(**gates)

    @classmethod
    def none(cls) -> "Features":
        gates: dict[str, Any] = {_attr(n): False for n in FEATURE_NAMES}
        return cls(**gates)

    @classmethod
    def parse(cls, text: "str | Features | None", version: str | None = None) -> "Features":
        """Parse a token list such as ``none,PrioritizedList`` or ``default,-DeviceTaints``; `default`
        (and the starting point) is `version`'s defaults."""
        if isinstance(text, Features):
            return text
        features = cls.default(version)
        if text is None:
            return features
        for raw in str(text).split(","):
            token = raw.strip()
            if not token:
                continue
            lowered = token.lower()
            if lowered == "default":
                features = cls.default(version)
                continue
            if lowered == "all":
                features = cls.all()._with_release_facts_of(features)
                continue
            if lowered == "none":
                features = cls.none()._with_release_facts_of(features)
                continue
            enable = True
            name = token
            if token[0] in "+-":
                enable = token[0] == "+"
                name = token[1:].strip()
            canonical = _ALIASES.get(name.lower())
            other = _other_gate(name)
            if canonical is None and other is not None:
                kept = tuple((g, on) for g, on in features.other_gates if g != other)
                features = replace(features, other_gates=kept + ((other, enable),))
                continue
            if canonical is None:
                raise ValueError(
                    f"unknown feature {name!r} in --features {text!r}; known: default, all, none, "
                    + ", ".join(FEATURE_NAMES) + ", or a DRA feature gate (" + ", ".join(_other_gate_names()) + ")"
                )
            gate: dict[str, Any] = {_attr(canonical): enable}
            features = replace(features, **gate)
        return features

    @cached_property  # read on every allocate() call; the dataclass is frozen, so computing it once is exact
    def variant_name(self) -> str:
        """The upstream allocator variant that runs for these gates: the forced one, or the first
        (most stable) variant that supports every enabled feature, as kube-scheduler picks it."""
        if self.variant:
            return self.variant
        enabled = set(self.enabled())
        return next(name for name, supported in VARIANT_SUPPORT.items() if enabled <= supported)

    def gate_enabled(self, gate: str) -> bool | None:
        """Whether the Kubernetes feature gate `gate` (DRAPartitionableDevices, …) is on here; None for a gate
        these features do not model (the release's default then applies)."""
        canonical = _ALIASES.get(gate.lower())
        if canonical is None:
            return next((on for name, on in self.other_gates if name.lower() == gate.lower()), None)
        return bool(getattr(self, _attr(canonical)))

    @property
    def combined_slices(self) -> bool:
        """Counter sets are per slice (1.33, 1.34) and only matter with partitionable devices on."""
        return self.partitionable_devices and self.slice_layout == "combined"

    @cached_property
    def stable_variant(self) -> bool:
        """Whether upstream's `stable` variant runs (what differs: tests/allocator/test_allocator_variants.py)."""
        return self.variant_name == "stable"

    def with_variant(self, name: str | None) -> "Features":
        """These gates with upstream's `--allocator NAME` choice (EnableAllocators in upstream)."""
        if name and name not in VARIANTS:
            raise ValueError(f"unknown allocator {name!r}; known: {', '.join(VARIANTS)}")
        if name:
            unsupported = sorted(set(self.enabled()) - VARIANT_SUPPORT[name])
            if unsupported:
                # Upstream: "internal error: no allocator available for feature set ...".
                raise ValueError(
                    f"allocator {name} does not support the enabled feature(s) {', '.join(unsupported)}"
                )
        return replace(self, variant=name or None)

    def enabled(self) -> list[str]:
        """Enabled feature names in canonical spelling, sorted."""
        return [n for n in FEATURE_NAMES if getattr(self, _attr(n))]

    def __str__(self) -> str:
        names = self.enabled()
        text = "none," + ",".join(names) if names else "none"
        return text + "".join(f",{'+' if on else '-'}{gate}" for gate, on in self.other_gates)


def _other_gate_names() -> list[str]:
    """The DRA gates gpudra.versions knows that no allocator feature stands for (DRAExtendedResource, …)."""
    from gpudra.versions import non_allocator_gates

    return non_allocator_gates()


def _other_gate(name: str) -> str | None:
    return next((gate for gate in _other_gate_names() if gate.lower() == name.lower()), None)


assert [f.name for f in fields(Features)][: len(FEATURE_NAMES)] == [_attr(n) for n in FEATURE_NAMES]
