"""kube-controller-manager's controllers: workloads into pods (Deployment, ReplicaSet, StatefulSet, Job, DaemonSet),
the Deployment/ReplicaSet statuses, and ResourceClaims from templates (the resourceclaim controller).

`ManagedCluster` runs them on the scheduler's `ClusterState`; the local cluster runs the same functions against its
store (gpudra.cluster.controller)."""

from .manager import ManagedCluster

__all__ = ["ManagedCluster"]
