"""The ComputeDomain custom resource (resource.nvidia.com/v1beta1) of NVIDIA's GPU DRA driver: its schema, its
defaults and its update rule, as the API server applies the driver's CRD to it.

A ComputeDomain asks for a set of nodes that share GPU memory over multi-node NVLink (GB200 NVL72 racks). Its
controller (gpudra.computedomain) creates the ResourceClaimTemplate named in spec.channel for the workload's pods,
and one IMEX daemon on every node where such a pod runs. The facts below are the CRD's (NVIDIA/k8s-dra-driver-gpu
deployments/helm/dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml, generated from
api/nvidia.com/resource/v1beta1/computedomain.go): a structural schema, so anything it does not list is an unknown
field, and its defaults are applied where the enclosing object is present.

What the CRD accepts but the controller cannot use (no spec at all, a template name that is no object name) is a
warning: the API server stores it, the controller then fails to create the template.
"""

from __future__ import annotations

import copy
from typing import Any

from gpudra.api.schema import names
from gpudra.device_config import ALLOCATION_MODES
from gpudra.device_config import API_VERSION as API_VERSION  # re-exported: the kind's apiVersion
from gpudra.api.schema.meta import object_meta, top_level
from gpudra.api.schema.types import Context, F, Int, ListOf, Str, Struct, child

# the group of NVIDIA's driver API: its opaque configs' (gpudra.device_config) and this CRD's
GROUP, _, VERSION = API_VERSION.partition("/")
KIND = "ComputeDomain"
PLURAL = "computedomains"

# the CRD's enum of allocationMode is the channel config's (gpudra.device_config); Single its default
ALLOCATION_MODE_SINGLE = "Single"
assert ALLOCATION_MODE_SINGLE in ALLOCATION_MODES
# computedomain.go: ComputeDomainStatusReady/NotReady; the enum and default of status.status and nodes[].status
READY, NOT_READY = "Ready", "NotReady"
STATUSES = (READY, NOT_READY)
# the CRD's x-kubernetes-validations rule on spec (`self == oldSelf`), with its message
IMMUTABLE_SPEC_MESSAGE = "A computeDomain.spec is immutable"


def _template_name_check(value: dict[str, Any], path: str, ctx: Context) -> None:
    """The CRD types the name as any string; the controller creates a ResourceClaimTemplate of that name in the
    domain's namespace, which the API server refuses unless it is a DNS subdomain."""
    name = value.get("name")
    if isinstance(name, str):
        problems = names.dns_subdomain(name) if name else ["is empty"]
        for problem in problems:
            ctx.warning(child(path, "name"), f"the API server accepts it, but the controller cannot create a "
                        f"ResourceClaimTemplate of this name: {problem}")


RESOURCE_CLAIM_TEMPLATE = Struct("ComputeDomainResourceClaimTemplate", {"name": F(Str(), required=True)},
                                 checks=(_template_name_check,))
CHANNEL = Struct("ComputeDomainChannelSpec", {
    "resourceClaimTemplate": F(RESOURCE_CLAIM_TEMPLATE, required=True),
    "allocationMode": F(Str(enum=ALLOCATION_MODES)),
})
SPEC = Struct("ComputeDomainSpec", {
    # `type: integer` with no format: any integer the API server's JSON decoder reads (int64)
    "numNodes": F(Int(minimum=0)),
    "channel": F(CHANNEL, required=True),
})
NODE = Struct("ComputeDomainNode", {
    "name": F(Str(), required=True),
    "ipAddress": F(Str(), required=True),
    "cliqueID": F(Str(), required=True),
    "index": F(Int()),
    "status": F(Str(enum=STATUSES)),
})
STATUS = Struct("ComputeDomainStatus", {
    # required by the CRD, but defaulted (NotReady) before the API server validates: never missing
    "status": F(Str(enum=STATUSES)),
    # x-kubernetes-list-type: map keyed by name
    "nodes": F(ListOf(NODE, unique_by="name")),
})


def _spec_present(value: dict[str, Any], path: str, ctx: Context) -> None:
    if value.get("spec") is None:
        ctx.warning(child(path, "spec"), "the API server accepts a ComputeDomain without spec (the CRD does not "
                    "require it), but the controller has no channel to create a ResourceClaimTemplate for")


COMPUTE_DOMAIN = top_level(KIND, object_meta(), SPEC, STATUS, spec_required=False, checks=(_spec_present,))

# The ComputeDomainClique CRD (resource.nvidia.com_computedomaincliques.yaml, from computedomainclique.go): what
# the IMEX daemons write under the ComputeDomainCliques gate. No spec or status: `daemons` at the top level, a map
# list keyed by nodeName, each daemon's status defaulted NotReady.
CLIQUE_KIND, CLIQUE_PLURAL = "ComputeDomainClique", "computedomaincliques"
CLIQUE_DAEMON = Struct("ComputeDomainDaemonInfo", {
    "nodeName": F(Str(), required=True),
    "ipAddress": F(Str(), required=True),
    "cliqueID": F(Str(), required=True),
    "index": F(Int()),
    "status": F(Str(enum=STATUSES)),
})
COMPUTE_DOMAIN_CLIQUE = top_level(CLIQUE_KIND, object_meta(), None, None,
                                  extra={"daemons": F(ListOf(CLIQUE_DAEMON, unique_by="nodeName"))})

KINDS: dict[tuple[str, str], Struct] = {(API_VERSION, KIND): COMPUTE_DOMAIN,
                                        (API_VERSION, CLIQUE_KIND): COMPUTE_DOMAIN_CLIQUE}


def is_compute_domain(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == KIND and obj.get("apiVersion") == API_VERSION


def apply_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """The CRD's defaults, each where its enclosing object is present (structural-schema defaulting): spec.numNodes
    0, spec.channel.allocationMode Single, status.status and status.nodes[].status NotReady; a null in spec or
    status is dropped first, as the API server prunes nulls of fields its schema does not make nullable. A copy."""
    out = {k: _without_nulls(v) if k in ("spec", "status") else copy.deepcopy(v)
           for k, v in obj.items() if v is not None or k not in ("spec", "status")}
    spec = out.get("spec")
    if isinstance(spec, dict):
        _default(spec, "numNodes", 0)
        channel = spec.get("channel")
        if isinstance(channel, dict):
            _default(channel, "allocationMode", ALLOCATION_MODE_SINGLE)
    status = out.get("status")
    if isinstance(status, dict):
        _default(status, "status", NOT_READY)
        nodes = status.get("nodes")
        for node in nodes if isinstance(nodes, list) else []:
            if isinstance(node, dict):
                _default(node, "status", NOT_READY)
    return out


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _default(value: dict[str, Any], field: str, default: Any) -> None:
    """Absent or null (the API server prunes a null of a non-nullable field, then defaults it)."""
    if value.get(field) is None:
        value[field] = default


def spec_update_problem(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The CRD's transition rule on spec (`self == oldSelf`), compared after defaulting as the API server does."""
    if apply_defaults(old).get("spec") != apply_defaults(new).get("spec"):
        return f"spec: Invalid value: \"object\": {IMMUTABLE_SPEC_MESSAGE}"
    return None
