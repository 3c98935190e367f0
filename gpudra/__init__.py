"""gpudra: Kubernetes Dynamic Resource Allocation (resource.k8s.io/v1) for GPUs."""

__version__ = "0.1.0"
