"""Feature gates that change what the allocator does.

Tokens follow the conformance `args` files: `default` (kube-scheduler 1.36 defaults), `all`, `none`,
`Name` / `+Name` (enable) and `-Name` (disable), comma-separated and applied left to right. Names may
carry the `DRA` prefix of the real gate (`DRAAdminAccess`), and `DeviceBindingAndStatus` also answers to
its two gates `DRADeviceBindingConditions` / `DRAResourceClaimDeviceStatus`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

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

# Kubernetes 1.36: everything is on by default except the alpha ListTypeAttributes.
_DEFAULT_ON = frozenset(FEATURE_NAMES) - {"ListTypeAttributes"}

# Gates the upstream 1.36 "stable" variant supports (it is chosen when nothing else is enabled).
_STABLE_SUPPORTED = frozenset({"AdminAccess", "PrioritizedList", "PartitionableDevices", "DeviceTaints"})

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

    @classmethod
    def default(cls) -> "Features":
        return cls()

    @classmethod
    def all(cls) -> "Features":
        return cls(**{_attr(n): True for n in FEATURE_NAMES})

    @classmethod
    def none(cls) -> "Features":
        return cls(**{_attr(n): False for n in FEATURE_NAMES})

    @classmethod
    def parse(cls, text: "str | Features | None") -> "Features":
        """Parse a token list such as ``none,PrioritizedList`` or ``default,-DeviceTaints``."""
        if isinstance(text, Features):
            return text
        features = cls.default()
        if text is None:
            return features
        for raw in str(text).split(","):
            token = raw.strip()
            if not token:
                continue
            lowered = token.lower()
            if lowered == "default":
                features = cls.default()
                continue
            if lowered == "all":
                features = cls.all()
                continue
            if lowered == "none":
                features = cls.none()
                continue
            enable = True
            name = token
            if token[0] in "+-":
                enable = token[0] == "+"
                name = token[1:].strip()
            canonical = _ALIASES.get(name.lower())
            if canonical is None:
                raise ValueError(
                    f"unknown feature {name!r} in --features {text!r}; known: default, all, none, "
                    + ", ".join(FEATURE_NAMES)
                )
            features = replace(features, **{_attr(canonical): enable})
        return features

    @property
    def stable_variant(self) -> bool:
        """Whether upstream would pick its "stable" allocator variant for this gate set.

        It differs from the sorted variants in one visible way: without DRAConsumableCapacity it
        silently ignores capacity requests instead of rejecting the claim.
        """
        if self.variant:
            return self.variant == "stable"
        return set(self.enabled()) <= _STABLE_SUPPORTED

    def with_variant(self, name: str | None) -> "Features":
        """These gates with upstream's `--allocator NAME` choice (only matters for `stable`)."""
        if name and name not in VARIANTS:
            raise ValueError(f"unknown allocator {name!r}; known: {', '.join(VARIANTS)}")
        return replace(self, variant=name or None)

    def enabled(self) -> list[str]:
        """Enabled feature names in canonical spelling, sorted."""
        return [n for n in FEATURE_NAMES if getattr(self, _attr(n))]

    def __str__(self) -> str:
        names = self.enabled()
        return "none," + ",".join(names) if names else "none"


assert [f.name for f in fields(Features)][: len(FEATURE_NAMES)] == [_attr(n) for n in FEATURE_NAMES]
