"""The kinds a local cluster serves, and the API server's rules for the names that become the store's file paths.

Every kind, namespace and name is checked here before the store builds a path from it: a kind the cluster
serves (else the API server's `no matches for kind`), the kind's name rule and a DNS-label namespace, the same
rules `gpudra validate` applies to metadata (gpudra.api.schema: one copy of each).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudra.api.problems import printable
from gpudra.api.schema import name_rule, names
from gpudra.errors import GpudraError


@dataclass(frozen=True)
class KindInfo:
    kind: str
    plural: str
    api_version: str
    namespaced: bool
    short: tuple[str, ...] = ()
    # The API server sets metadata.generation to 1 on create and adds one whenever the spec changes (the kind's
    # registry strategy: pkg/registry/resource/{deviceclass,resourceslice}/strategy.go, apps and batch likewise);
    # other kinds keep whatever generation they had (rest.BeforeUpdate: a client cannot set it).
    spec_generation: bool = False

    @property
    def resource(self) -> str:
        """kubectl's `kind.group` (`resourceclaim.resource.k8s.io`; `pod` in the core group), as `apply` and
        `-o name` print it."""
        group = self.api_version.split("/")[0] if "/" in self.api_version else ""
        return f"{self.kind.lower()}.{group}" if group else self.kind.lower()


KINDS: tuple[KindInfo, ...] = (
    KindInfo("Pod", "pods", "v1", True, ("po",)),
    KindInfo("Node", "nodes", "v1", False, ("no",)),
    KindInfo("Event", "events", "v1", True, ("ev",)),
    KindInfo("Namespace", "namespaces", "v1", False, ("ns",)),
    KindInfo("DeviceClass", "deviceclasses", "resource.k8s.io/v1", False, spec_generation=True),
    KindInfo("ResourceClaim", "resourceclaims", "resource.k8s.io/v1", True),
    KindInfo("ResourceClaimTemplate", "resourceclaimtemplates", "resource.k8s.io/v1", True),
    KindInfo("ResourceSlice", "resourceslices", "resource.k8s.io/v1", False, spec_generation=True),
    KindInfo("DeviceTaintRule", "devicetaintrules", "resource.k8s.io/v1alpha3", False),
    KindInfo("Deployment", "deployments", "apps/v1", True, ("deploy",), True),
    KindInfo("ReplicaSet", "replicasets", "apps/v1", True, ("rs",), True),
    KindInfo("StatefulSet", "statefulsets", "apps/v1", True, ("sts",), True),
    KindInfo("DaemonSet", "daemonsets", "apps/v1", True, ("ds",), True),
    KindInfo("Job", "jobs", "batch/v1", True, spec_generation=True),
    KindInfo("PriorityClass", "priorityclasses", "scheduling.k8s.io/v1", False, ("pc",)),
    KindInfo("PodDisruptionBudget", "poddisruptionbudgets", "policy/v1", True, ("pdb",), True),
    KindInfo("ConfigMap", "configmaps", "v1", True, ("cm",)),
    KindInfo("CronJob", "cronjobs", "batch/v1", True, ("cj",), True),
    # NVIDIA's CRD (resource.nvidia.com_computedomains.yaml): no short names
    KindInfo("ComputeDomain", "computedomains", "resource.nvidia.com/v1beta1", True),
    # NVIDIA's CRD (resource.nvidia.com_computedomaincliques.yaml): what the IMEX daemons write under the
    # ComputeDomainCliques gate (gpudra.computedomain.daemonstatus), read by the controller with --status-from-daemons
    KindInfo("ComputeDomainClique", "computedomaincliques", "resource.nvidia.com/v1beta1", True),
    # the Workload API (KEP-4671): 1.36 serves v1alpha2, 1.35 v1alpha1 (Workload only); `check_served` says which
    KindInfo("Workload", "workloads", "scheduling.k8s.io/v1alpha2", True),
    KindInfo("PodGroup", "podgroups", "scheduling.k8s.io/v1alpha2", True),
)
_BY_KIND = {k.kind: k for k in KINDS}


class StoreError(GpudraError):
    """An API-server-like failure; `status` is the HTTP code the API server would answer."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status
        self.reason = message


def kind_info(kind: object) -> KindInfo:
    """The kind as the local cluster serves it; StoreError (404) for any other, as an API server without that
    resource answers (`no matches for kind`): the store keeps no kind it does not know."""
    info = _BY_KIND.get(kind) if isinstance(kind, str) else None
    if info is None:
        shown = printable(kind[:64]) if isinstance(kind, str) else repr(kind)
        raise StoreError(f'no matches for kind "{shown}": the local cluster serves '
                         f'{", ".join(k.kind for k in KINDS)}', 404)
    return info


def check_api_version(info: KindInfo, api_version: object) -> None:
    """The object's apiVersion must be of the kind's group (any version the store converts: resource.k8s.io/*)."""
    group = info.api_version.rpartition("/")[0]
    if not isinstance(api_version, str) or api_version.rpartition("/")[0] != group:
        shown = printable(api_version[:64]) if isinstance(api_version, str) else repr(api_version)
        raise StoreError(f'no matches for kind "{info.kind}" in version "{shown}" (it is served as '
                         f'{info.api_version})', 404)


def check_served(info: KindInfo, api_version: str, release: str | None, features: object = None) -> None:
    """StoreError (404, the API server's `no matches for kind`) for a Workload or PodGroup the cluster's release
    does not serve: each version only by its release (v1alpha1: 1.35, v1alpha2: 1.36) and there only with the
    GenericWorkload gate on: the facts `gpudra validate` warns with (gpudra.api.gates.workload_api_warnings). A local
    cluster has no --runtime-config: the gate on stands for the alpha version enabled as well."""
    from gpudra.api.gates import gate_on
    from gpudra.api.schema.workload import KINDS as WORKLOAD_KINDS, SERVED_IN

    if info.kind not in ("Workload", "PodGroup") or release is None:
        return
    served_in = SERVED_IN.get(api_version)
    if (api_version, info.kind) not in WORKLOAD_KINDS or served_in != release:
        versions = [v for v, r in SERVED_IN.items() if r == release and (v, info.kind) in WORKLOAD_KINDS]
        raise StoreError(f'no matches for kind "{info.kind}" in version "{printable(api_version[:64])}": '
                         f'Kubernetes {release} serves ' + (" or ".join(versions) or f"no {info.kind}"), 404)
    if not gate_on("GenericWorkload", release, features):
        raise StoreError(f'no matches for kind "{info.kind}" in version "{api_version}": the cluster runs with '
                         "the GenericWorkload feature gate off (gpudra cluster up --features "
                         "default,+GenericWorkload,+GangScheduling)", 404)


def identity_problems(info: KindInfo, namespace: object, name: object) -> list[str]:
    """What is wrong with an object's namespace and name by the API server's rules for its kind ([] when
    nothing): the same rules `gpudra validate` applies to metadata (gpudra.api.schema)."""
    problems = names.field_problems("metadata.namespace", namespace, names.dns_label, 63) if info.namespaced else []
    return problems + names.field_problems("metadata.name", name, name_rule(info.kind), 253)


def check_identity(info: KindInfo, namespace: object, name: object) -> None:
    """StoreError (422, as the API server's `is invalid`) unless namespace and name are valid for the kind."""
    problems = identity_problems(info, namespace, name)
    if problems:
        shown = printable(name[:64]) if isinstance(name, str) else repr(name)
        raise StoreError(f'{info.kind} "{shown}" is invalid: {"; ".join(problems)}', 422)


def resolve_kind(word: str) -> KindInfo | None:
    """`pods`, `pod`, `po`, `Pod`, `resourceclaims.resource.k8s.io` → the kind, as kubectl resolves them."""
    text = word.split(".", 1)[0].lower()
    for info in KINDS:
        if text in (info.plural, info.kind.lower(), *info.short):
            return info
    return None
