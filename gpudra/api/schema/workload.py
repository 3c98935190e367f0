"""The Workload API of gang scheduling (KEP-4671): scheduling.k8s.io/v1alpha1 Workload (Kubernetes 1.35) and
scheduling.k8s.io/v1alpha2 Workload and PodGroup (1.36), each as its release's API server validates it.

1.35 (k8s.io/api v0.35.0 scheduling/v1alpha1/types.go; kubernetes v1.35.0 pkg/apis/scheduling/validation/
validation.go ValidateWorkload): a Workload lists at most 8 `podGroups`, each a DNS-label name and a `policy` with
exactly one of `basic`, `gang` (gang.minCount > 0); pods join with `spec.workloadRef`.
1.36 (k8s.io/api v0.36.0 scheduling/v1alpha2/types.go; its declarative validation, kubernetes v1.36.0
pkg/apis/scheduling/v1alpha2/zz_generated.validations.go): a Workload holds at most 8 `podGroupTemplates`; the
runtime PodGroup carries `schedulingPolicy` (union of `basic`, `gang`; gang.minCount >= 1), at most 4
`resourceClaims` (DRAWorkloadResourceClaims) and status; pods join with `spec.schedulingGroup.podGroupName`.
Fields behind TopologyAwareWorkloadScheduling and WorkloadAwarePreemption are forbidden while the gate is off.
"""

from __future__ import annotations

from typing import Any

from gpudra.api.schema import names
from gpudra.api.schema.meta import CONDITION, object_meta, top_level
from gpudra.api.schema.types import Check, Context, F, Int, ListOf, Str, Struct, child

V1ALPHA1 = "scheduling.k8s.io/v1alpha1"
V1ALPHA2 = "scheduling.k8s.io/v1alpha2"
# the release that serves each version (neither is served by any other: v1alpha1 went with 1.36)
SERVED_IN = {V1ALPHA1: "1.35", V1ALPHA2: "1.36"}
WORKLOAD_MAX_POD_GROUPS = 8  # WorkloadMaxPodGroups (1.35), WorkloadMaxPodGroupTemplates (1.36)
MAX_POD_GROUP_RESOURCE_CLAIMS = 4  # MaxPodGroupResourceClaims (1.36)
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000

def _empty_or_dns_subdomain(value: str) -> list[str]:
    """apiGroup: empty names the core group; anything else is a DNS subdomain."""
    return names.dns_subdomain(value) if value else []


CONTROLLER_REF = Struct(
    "TypedLocalObjectReference",
    {
        "apiGroup": F(Str(validators=(_empty_or_dns_subdomain,))),
        "kind": F(Str(validators=(names.path_segment_name,), allow_empty=False), required=True),
        "name": F(Str(validators=(names.path_segment_name,), allow_empty=False), required=True),
    },
)

BASIC = Struct("BasicSchedulingPolicy", {})
GANG = Struct("GangSchedulingPolicy", {"minCount": F(Int(minimum=1), required=True)})


def _policy(name: str) -> Struct:
    return Struct(name, {"basic": F(BASIC), "gang": F(GANG)}, one_of=((("basic", "gang"), True),),
                  empty_is_set=True)


# ----- 1.35: scheduling.k8s.io/v1alpha1 ---------------------------------------------------------------
POD_GROUP_V1ALPHA1 = Struct(
    "PodGroup",
    {"name": F(Str(validators=(names.dns_label,)), required=True),
     "policy": F(_policy("PodGroupPolicy"), required=True)},
)
WORKLOAD_V1ALPHA1 = top_level(
    "Workload", object_meta(),
    Struct("WorkloadSpec", {
        "controllerRef": F(CONTROLLER_REF),
        "podGroups": F(ListOf(POD_GROUP_V1ALPHA1, max_items=WORKLOAD_MAX_POD_GROUPS, min_items=1, unique_by="name"),
                       required=True),
    }),
    None,
)


# ----- 1.36: scheduling.k8s.io/v1alpha2 ---------------------------------------------------------------
def _gated(gate: str, *fields: str) -> Check:
    """`+k8s:ifDisabled(gate)=+k8s:forbidden`: the field is refused while `gate` is off."""
    def check(value: dict[str, Any], path: str, ctx: Context) -> None:
        from gpudra.api.gates import gate_on
        from gpudra.versions import parse_version

        if gate_on(gate, parse_version(ctx.facts.get("release")), ctx.facts.get("features")):
            return
        for name in fields:
            if value.get(name) not in (None, ""):
                ctx.error(child(path, name), f"Forbidden: may not be specified while the {gate} feature gate is off")
    return check


POD_GROUP_RESOURCE_CLAIM = Struct(
    "PodGroupResourceClaim",
    {
        "name": F(Str(validators=(names.dns_label,), allow_empty=False), required=True),
        "resourceClaimName": F(Str(validators=(names.dns_subdomain,))),
        "resourceClaimTemplateName": F(Str(validators=(names.dns_subdomain,))),
    },
    one_of=((("resourceClaimName", "resourceClaimTemplateName"), True),),
)
SCHEDULING_CONSTRAINTS = Struct(
    "PodGroupSchedulingConstraints",
    {"topology": F(ListOf(Struct("TopologyConstraint", {
        "key": F(Str(validators=(names.qualified_name,), allow_empty=False), required=True)}), max_items=1))},
)
_PREEMPTION_FIELDS = {
    "disruptionMode": F(Str(enum=("Pod", "PodGroup"))),
    "priorityClassName": F(Str(validators=(names.dns_subdomain,))),
    "priority": F(Int(minimum=-2147483648, maximum=HIGHEST_USER_DEFINABLE_PRIORITY)),
}
_GROUP_CHECKS = (_gated("TopologyAwareWorkloadScheduling", "schedulingConstraints"),
                 _gated("WorkloadAwarePreemption", *_PREEMPTION_FIELDS))


def _group_fields() -> dict[str, F]:
    return {
        "schedulingPolicy": F(_policy("PodGroupSchedulingPolicy"), required=True),
        "schedulingConstraints": F(SCHEDULING_CONSTRAINTS),
        "resourceClaims": F(ListOf(POD_GROUP_RESOURCE_CLAIM, max_items=MAX_POD_GROUP_RESOURCE_CLAIMS, unique_by="name")),
        **_PREEMPTION_FIELDS,
    }


POD_GROUP_TEMPLATE = Struct(
    "PodGroupTemplate",
    {"name": F(Str(validators=(names.dns_label,), allow_empty=False), required=True), **_group_fields()},
    checks=_GROUP_CHECKS,
)
WORKLOAD_V1ALPHA2 = top_level(
    "Workload", object_meta(),
    Struct("WorkloadSpec", {
        "controllerRef": F(CONTROLLER_REF),
        "podGroupTemplates": F(ListOf(POD_GROUP_TEMPLATE, max_items=WORKLOAD_MAX_POD_GROUPS, unique_by="name"),
                               required=True),
    }),
    None,
)

TEMPLATE_REFERENCE = Struct(
    "PodGroupTemplateReference",
    {"workload": F(Struct("WorkloadPodGroupTemplateReference", {
        "workloadName": F(Str(validators=(names.dns_subdomain,), allow_empty=False), required=True),
        "podGroupTemplateName": F(Str(validators=(names.dns_label,), allow_empty=False), required=True),
    }))},
    one_of=((("workload",), True),),
)
POD_GROUP_V1ALPHA2 = top_level(
    "PodGroup", object_meta(),
    Struct("PodGroupSpec", {"podGroupTemplateRef": F(TEMPLATE_REFERENCE), **_group_fields()}, checks=_GROUP_CHECKS),
    Struct("PodGroupStatus", {
        "conditions": F(ListOf(CONDITION, unique_by="type")),
        "resourceClaimStatuses": F(ListOf(Struct("PodGroupResourceClaimStatus", {
            "name": F(Str(validators=(names.dns_label,), allow_empty=False), required=True),
            "resourceClaimName": F(Str(validators=(names.dns_subdomain,))),
        }), max_items=MAX_POD_GROUP_RESOURCE_CLAIMS, unique_by="name")),
    }),
)

KINDS: dict[tuple[str, str], Struct] = {
    (V1ALPHA1, "Workload"): WORKLOAD_V1ALPHA1,
    (V1ALPHA2, "Workload"): WORKLOAD_V1ALPHA2,
    (V1ALPHA2, "PodGroup"): POD_GROUP_V1ALPHA2,
}

# ----- the pod's side -----------------------------------------------------------------------------
# 1.35 core/v1 WorkloadReference (validateWorkloadReference): name a DNS subdomain, podGroup and
# podGroupReplicaKey DNS labels. 1.36 core/v1 PodSchedulingGroup (validateSchedulingGroup): podGroupName, a
# DNS subdomain (ValidatePodGroupName), is the one member of a one-of and so required.
WORKLOAD_REFERENCE = Struct(
    "WorkloadReference",
    {
        "name": F(Str(validators=(names.dns_subdomain,)), required=True),
        "podGroup": F(Str(validators=(names.dns_label,)), required=True),
        "podGroupReplicaKey": F(Str(validators=(names.dns_label,))),
    },
)
SCHEDULING_GROUP = Struct(
    "PodSchedulingGroup",
    {"podGroupName": F(Str(validators=(names.dns_subdomain,)))},
    one_of=((("podGroupName",), True),),
)
# the release whose core/v1 knows each pod field, and the gate without which the API server drops it
POD_FIELD_RELEASE = {"workloadRef": "1.35", "schedulingGroup": "1.36"}


def pod_group_field_check(spec: Any, path: str, ctx: Context) -> None:
    """A pod field of another release's Workload API is unknown to this release's API server (1.36's core/v1
    has no workloadRef; 1.35's no schedulingGroup; 1.34's neither: the real 1.34 and 1.36 servers' strict
    decoding in tests/oracles/test_kube_validation.py)."""
    from gpudra.versions import parse_version

    release = parse_version(ctx.facts.get("release"))
    for name, since in POD_FIELD_RELEASE.items():
        if spec.get(name) is not None and since != release:
            ctx.error(child(path, name), f"unknown field in PodSpec: Kubernetes {release}'s Pod has no {name} "
                      f"(it is Kubernetes {since}'s field of the Workload API)")
