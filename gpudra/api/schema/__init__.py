"""Declarative schemas of the kinds gpudra reads, keyed by (apiVersion, kind)."""

from __future__ import annotations

import functools
from typing import Callable

from gpudra.api.schema import claim, computedomain, core, names, taint_rule, workload
from gpudra.api.schema.meta import metadata_only
from gpudra.api.schema.types import Context, Struct

RESOURCE_V1 = "resource.k8s.io/v1"

SCHEMAS: dict[tuple[str, str], Struct] = {
    **{(RESOURCE_V1, kind): schema for kind, schema in claim.KINDS.items()},
    **{(version, "DeviceTaintRule"): taint_rule.DEVICE_TAINT_RULE for version in taint_rule.VERSIONS},
    **core.KINDS,
    **computedomain.KINDS,
    **workload.KINDS,
}
CLUSTER_SCOPED: set[str] = claim.CLUSTER_SCOPED | core.CLUSTER_SCOPED | {"DeviceTaintRule"}


def schema_for(api_version: str, kind: str) -> Struct | None:
    return SCHEMAS.get((api_version, kind))


# Kinds gpudra does not model whose names the API server checks as DNS subdomains (NameIsDNSSubdomain in their
# validation); any other kind it does not know gets the loosest rule there is (ValidatePathSegmentName), since
# some kinds' names are not DNS names (RBAC roles named `system:…`).
SUBDOMAIN_NAMED = frozenset({"ConfigMap", "Event", "PriorityClass", "Secret", "ServiceAccount"})

NameRule = Callable[[str], list[str]]


@functools.cache
def name_rule(kind: str) -> NameRule:
    """The syntax the API server requires of a `kind` object's metadata.name: the one its schema here checks."""
    for (_, known), schema in SCHEMAS.items():
        if known == kind:
            meta = schema.fields["metadata"].type
            validators = getattr(meta.fields["name"].type, "validators", ()) if isinstance(meta, Struct) else ()
            return validators[0] if validators else names.dns_subdomain
    return names.dns_subdomain if kind in SUBDOMAIN_NAMED else names.path_segment_name


def metadata_schema(kind: str) -> Struct:
    """A kind gpudra does not model, checked as far as every object is: its metadata (ObjectMeta's rules)."""
    return metadata_only(kind, name_rule(kind))


__all__ = ["SCHEMAS", "CLUSTER_SCOPED", "Context", "schema_for", "RESOURCE_V1", "name_rule", "metadata_schema"]
