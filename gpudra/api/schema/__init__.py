"""Declarative schemas of the kinds gpudra reads, keyed by (apiVersion, kind)."""

from __future__ import annotations

from gpudra.api.schema import claim, core, taint_rule
from gpudra.api.schema.types import Context, Struct

RESOURCE_V1 = "resource.k8s.io/v1"

SCHEMAS: dict[tuple[str, str], Struct] = {
    **{(RESOURCE_V1, kind): schema for kind, schema in claim.KINDS.items()},
    **{(version, "DeviceTaintRule"): taint_rule.DEVICE_TAINT_RULE for version in taint_rule.VERSIONS},
    **core.KINDS,
}
CLUSTER_SCOPED: set[str] = claim.CLUSTER_SCOPED | core.CLUSTER_SCOPED | {"DeviceTaintRule"}


def schema_for(api_version: str, kind: str) -> Struct | None:
    return SCHEMAS.get((api_version, kind))


__all__ = ["SCHEMAS", "CLUSTER_SCOPED", "Context", "schema_for", "RESOURCE_V1"]
