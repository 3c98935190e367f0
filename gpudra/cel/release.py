"""Which DRA CEL environment a Kubernetes release offers: libraries and the DRA gates' CEL features.

Kubernetes builds two environments from one list of versioned options (k8s.io/apiserver
pkg/cel/environment/environment.go, `EnvSet.Extend`):

- NewExpressions (the API server validating a new selector): the options introduced at or before the
  release's *compatibility version*, one minor release back (`DefaultCompatibilityVersion` is the
  effective version's `MinCompatibilityVersion`), plus every option whose feature gate is on;
- StoredExpressions (kube-scheduler evaluating a stored selector): every option of the release that
  was not removed, whatever its feature gate says.

The options that differ between 1.33 and 1.36 (apiserver pkg/cel/environment/base.go at v0.33.0 to
v0.36.2, dynamic-resource-allocation cel/compile.go at v0.33.0 to v0.36.2):

| option | introduced | where |
|---|---|---|
| cel-go ext.Lists v3 (`lists.range`, `sort`, `distinct`, `flatten`, `first`, …) | 1.34 | base.go |
| SemverLib v1 (`semver(s, normalize)`, `isSemver(s, normalize)`); v0 (one argument) before | 1.33 | base.go; DRA's v0 option 1.31–1.33 |
| `device.allowMultipleAllocations` (DRADeviceTypeV134ConsumableCapacity) | 1.34, gate DRAConsumableCapacity | compile.go |
| `includes` | 1.36, gate DRAListTypeAttributes | compile.go |
| attribute values typed `dyn` (list attributes iterable); `any` otherwise | 1.36, gate DRAListTypeAttributes | compile.go `attributeType` |

Everything else the DRA environment uses (strings v2, sets, two-variable comprehensions, optional
types, cel.bind, quantity, regex, URL, IP, CIDR, format, Kubernetes lists) was introduced by 1.32, so
every modelled release has it in both environments.

In v0.36.2 the attribute type follows the gate in *both* environments (the compiler is built per gate
setting), so with DRAListTypeAttributes off kube-scheduler too types attribute values `any`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudra.versions import DEFAULT_KUBERNETES_VERSION, gate_state, parse_version


@dataclass(frozen=True)
class CelEnvironment:
    """The DRA CEL features one reading of one release offers (see the module docstring)."""

    ext_lists: bool = True
    semver_normalize: bool = True
    multiple_allocations: bool = True
    includes: bool = True
    list_attributes: bool = True  # attribute values `dyn`; False: `any` (no comprehension over them)


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def cel_environment(version: str | None = None, *, stored: bool = False, consumable_capacity: bool | None = None,
                    list_type_attributes: bool | None = None) -> CelEnvironment:
    """The environment of release `version` (default: gpudra.versions' default) in the API server's reading
    (`stored=False`: NewExpressions) or kube-scheduler's (`stored=True`: StoredExpressions). A gate the release
    does not have is off. Left None, DRAConsumableCapacity has its default in that release and
    DRAListTypeAttributes is on where the release has it (every attribute visible; `gpudra validate` passes the
    release's default, see gpudra.api.schema.cel_check)."""
    version = parse_version(version or DEFAULT_KUBERNETES_VERSION)
    minor = _minor(version)
    # NewExpressions sees options introduced up to the compatibility version (one release back).
    available = minor if stored else minor - 1

    def gate(name: str, value: bool | None) -> bool:
        state = gate_state(name, version)
        if state.stage is None:
            return False
        return state.default if value is None else bool(value)

    consumable = gate("DRAConsumableCapacity", consumable_capacity)
    list_attributes = gate("DRAListTypeAttributes", True if list_type_attributes is None else list_type_attributes)
    return CelEnvironment(
        ext_lists=available >= 34,
        semver_normalize=available >= 33,
        # FeatureEnabled options: NewExpressions follows the gate; StoredExpressions has them once introduced.
        multiple_allocations=minor >= 34 and (stored or consumable),
        includes=minor >= 36 and (stored or list_attributes),
        list_attributes=list_attributes,
    )
