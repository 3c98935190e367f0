"""Read-only access to a live Kubernetes cluster through the official client.

`read_cluster(kubeconfig=..., context=...)` returns the objects gpudra needs (DeviceClasses,
ResourceSlices, ResourceClaims, ResourceClaimTemplates, DeviceTaintRules, Pods, Nodes) as plain
dicts in their API shape, the same shape the file loader produces, so every command can work on
a cluster exactly as on manifests.
"""

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

__all__ = ["CLUSTER_KINDS", "ClusterReadError", "ResourceKind", "connect", "context_namespace", "kubeconfig_path",
           "read_cluster", "read_kind"]
