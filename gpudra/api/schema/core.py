"""The DRA-relevant parts of core v1 Node and Pod and of the workload kinds that carry a pod template.

These kinds have hundreds of fields that have nothing to do with devices, so their structs are open: unknown
fields are tolerated and only the fields the scheduler and DRA read are checked.
"""

from __future__ import annotations

from typing import Any

from gpudra.api.schema import names, workload
from gpudra.api.schema.meta import NODE_SELECTOR, object_meta, toleration_check, top_level
from gpudra.api.schema.types import (
    as_list,
    Bool, Context, F, Int, ListOf, MapOf, QuantityType, Str, Struct, child, index,
)

RESOURCE_LIST = MapOf(QuantityType(non_negative=True), key_check=names.qualified_name)

TAINT = Struct(
    "Taint",
    {
        "key": F(Str(validators=(names.qualified_name,)), required=True),
        "value": F(Str(validators=(names.label_value,))),
        "effect": F(Str(enum=("NoSchedule", "PreferNoSchedule", "NoExecute")), required=True),
        "timeAdded": F(Str()),
    },
)


TOLERATION = Struct(
    "Toleration",
    {
        "key": F(Str(validators=(names.qualified_name,))),
        "operator": F(Str(enum=("Exists", "Equal"))),
        "value": F(Str()),
        "effect": F(Str(enum=("NoSchedule", "PreferNoSchedule", "NoExecute"))),
        "tolerationSeconds": F(Int()),
    },
    checks=(toleration_check,),
)

CONTAINER_CLAIM = Struct(
    "ResourceClaim",
    {"name": F(Str(validators=(names.dns_label,)), required=True), "request": F(Str())},
)

RESOURCES = Struct(
    "ResourceRequirements",
    {
        "requests": F(RESOURCE_LIST),
        "limits": F(RESOURCE_LIST),
        "claims": F(ListOf(CONTAINER_CLAIM)),
    },
    open=True,
)

CONTAINER = Struct(
    "Container",
    {"name": F(Str(validators=(names.dns_label,)), required=True), "resources": F(RESOURCES)},
    open=True,
)


def _container_claim_refs(spec: dict[str, Any], path: str, ctx: Context) -> None:
    declared = {c["name"] for c in as_list(spec.get("resourceClaims"))
                if isinstance(c, dict) and isinstance(c.get("name"), str)}
    for section in ("initContainers", "containers"):
        containers = spec.get(section)
        if not isinstance(containers, list):
            continue
        for position, container in enumerate(containers):
            resources = container.get("resources") if isinstance(container, dict) else None
            claims = resources.get("claims") if isinstance(resources, dict) else None
            if not isinstance(claims, list):
                continue
            seen: set[tuple[Any, Any]] = set()
            for claim_position, claim in enumerate(claims):
                if not isinstance(claim, dict):
                    continue
                claim_path = index(child(child(index(child(path, section), position), "resources"), "claims"),
                                   claim_position)
                name = claim.get("name")
                if isinstance(name, str) and name not in declared:
                    listed = ", ".join(sorted(n for n in declared if isinstance(n, str))) or "none declared"
                    ctx.error(child(claim_path, "name"),
                              f"{name!r} must be one of the names in spec.resourceClaims ({listed})")
                marker = (str(name), str(claim.get("request") or ""))
                if marker in seen:
                    ctx.error(claim_path, "duplicate entry")
                seen.add(marker)
    if isinstance(spec.get("containers"), list) and not spec["containers"]:
        ctx.error(child(path, "containers"), "must have at least one container")


POD_RESOURCE_CLAIM = Struct(
    "PodResourceClaim",
    {
        "name": F(Str(validators=(names.dns_label,), allow_empty=False), required=True),
        "resourceClaimName": F(Str(validators=(names.dns_subdomain,))),
        "resourceClaimTemplateName": F(Str(validators=(names.dns_subdomain,))),
    },
    one_of=((("resourceClaimName", "resourceClaimTemplateName"), True),),
    unknown_hints=(lambda n, v, p, c: _pod_claim_hint(n, v, p, c),),
)


def _pod_claim_hint(name: str, value: dict[str, Any], path: str, ctx: Context) -> bool:
    if name == "source" and isinstance(value.get("source"), dict):
        ctx.error(child(path, name), "the `source` wrapper was removed in Kubernetes 1.31: put "
                  "resourceClaimName or resourceClaimTemplateName directly on the entry")
        return True
    return False


NODE_AFFINITY = Struct(
    "NodeAffinity",
    {
        "requiredDuringSchedulingIgnoredDuringExecution": F(NODE_SELECTOR),
        "preferredDuringSchedulingIgnoredDuringExecution": F(ListOf(Struct("PreferredSchedulingTerm", {
            "weight": F(Int(minimum=1, maximum=100), required=True),
            "preference": F(Struct("NodeSelectorTerm", {}, open=True), required=True),
        }))),
    },
)

POD_SPEC = Struct(
    "PodSpec",
    {
        "resourceClaims": F(ListOf(POD_RESOURCE_CLAIM, unique_by="name")),
        "containers": F(ListOf(CONTAINER, unique_by="name"), required=True),
        "initContainers": F(ListOf(CONTAINER, unique_by="name")),
        "nodeName": F(Str(validators=(names.dns_subdomain,))),
        "nodeSelector": F(MapOf(Str(validators=(names.label_value,)), key_check=names.qualified_name)),
        "affinity": F(Struct("Affinity", {"nodeAffinity": F(NODE_AFFINITY)}, open=True)),
        "tolerations": F(ListOf(TOLERATION)),
        "schedulerName": F(Str()),
        "priority": F(Int()),
        "workloadRef": F(workload.WORKLOAD_REFERENCE),
        "schedulingGroup": F(workload.SCHEDULING_GROUP),
    },
    checks=(_container_claim_refs, workload.pod_group_field_check),
    open=True,
)

POD_STATUS = Struct(
    "PodStatus",
    {
        "phase": F(Str(enum=("Pending", "Running", "Succeeded", "Failed", "Unknown"))),
        "resourceClaimStatuses": F(ListOf(Struct("PodResourceClaimStatus", {
            "name": F(Str(validators=(names.dns_label,)), required=True),
            "resourceClaimName": F(Str(validators=(names.dns_subdomain,))),
        }), unique_by="name")),
        "extendedResourceClaimStatus": F(Struct("PodExtendedResourceClaimStatus", {
            "requestMappings": F(ListOf(Struct("ContainerExtendedResourceRequest", {
                "containerName": F(Str(), required=True),
                "resourceName": F(Str(), required=True),
                "requestName": F(Str(), required=True),
            })), required=True),
            "resourceClaimName": F(Str(validators=(names.dns_subdomain,)), required=True),
        })),
        "nominatedNodeName": F(Str()),
    },
    open=True,
)

POD = top_level("Pod", object_meta(), POD_SPEC, POD_STATUS)
POD_TEMPLATE = Struct("PodTemplateSpec", {
    "metadata": F(Struct("ObjectMeta", {}, open=True)),
    "spec": F(POD_SPEC, required=True),
}, open=True)

NODE = top_level(
    "Node",
    object_meta(),
    Struct("NodeSpec", {"taints": F(ListOf(TAINT)), "unschedulable": F(Bool())}, open=True),
    Struct("NodeStatus", {"capacity": F(RESOURCE_LIST), "allocatable": F(RESOURCE_LIST)}, open=True),
    spec_required=False,
)


def _workload(kind: str, spec_fields: dict[str, F]) -> Struct:
    spec = Struct(f"{kind}Spec", {"replicas": F(Int(minimum=0)), **spec_fields,
                                  "template": F(POD_TEMPLATE, required=True)}, open=True)
    return top_level(kind, object_meta(), spec, Struct(f"{kind}Status", {}, open=True))


DEPLOYMENT = _workload("Deployment", {})
REPLICA_SET = _workload("ReplicaSet", {})
STATEFUL_SET = _workload("StatefulSet", {})
DAEMON_SET = _workload("DaemonSet", {})
JOB_SPEC = Struct("JobSpec", {"parallelism": F(Int(minimum=0)), "completions": F(Int(minimum=0)),
                              "template": F(POD_TEMPLATE, required=True)}, open=True)
JOB = top_level("Job", object_meta(), JOB_SPEC, Struct("JobStatus", {}, open=True))
CRON_JOB = top_level(
    "CronJob", object_meta(),
    Struct("CronJobSpec", {"schedule": F(Str(allow_empty=False), required=True),
                           "jobTemplate": F(Struct("JobTemplateSpec", {"metadata": F(Struct("ObjectMeta", {}, open=True)),
                                                                       "spec": F(JOB_SPEC, required=True)},
                                                   open=True), required=True)}, open=True),
    Struct("CronJobStatus", {}, open=True),
)
NAMESPACE = top_level("Namespace", object_meta(names.dns_label), Struct("NamespaceSpec", {}, open=True),
                      Struct("NamespaceStatus", {}, open=True), spec_required=False)

# Where each workload kind keeps its pod template (the scheduler expands workloads into pods).
POD_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"), "ReplicaSet": ("spec", "template"), "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"), "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}

KINDS: dict[tuple[str, str], Struct] = {
    ("v1", "Pod"): POD,
    ("v1", "Node"): NODE,
    ("apps/v1", "Deployment"): DEPLOYMENT,
    ("apps/v1", "ReplicaSet"): REPLICA_SET,
    ("apps/v1", "StatefulSet"): STATEFUL_SET,
    ("apps/v1", "DaemonSet"): DAEMON_SET,
    ("batch/v1", "Job"): JOB,
    ("batch/v1", "CronJob"): CRON_JOB,
    ("v1", "Namespace"): NAMESPACE,
}
CLUSTER_SCOPED = {"Node", "Namespace"}
