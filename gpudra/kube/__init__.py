"""Read-only access to a live Kubernetes cluster through the official client.

`read_cluster(kubeconfig=..., context=...)` returns the objects gpudra needs (DeviceClasses,
ResourceSlices, ResourceClaims, ResourceClaimTemplates, DeviceTaintRules, Pods, Nodes) as plain
dicts in their API shape, the same shape the file loader produces, so every command can work on
a cluster exactly as on manifests. `load_inputs(paths, kubeconfig, context)` is the one call a
command needs: manifests when paths are given, else the cluster.
"""

from gpudra.errors import InputError
from gpudra.kube.inputs import default_namespace, kubernetes_version, load_inputs, load_manifests
from gpudra.kube.reader import (
    CLUSTER_KINDS,
    ClusterReadError,
    ResourceKind,
    connect,
    context_namespace,
    kubeconfig_path,
    read_cluster,
    read_kind,
)

__all__ = ["CLUSTER_KINDS", "ClusterReadError", "InputError", "ResourceKind", "connect", "context_namespace",
           "default_namespace", "kubeconfig_path", "kubernetes_version", "load_inputs", "load_manifests", "read_cluster", "read_kind"]
