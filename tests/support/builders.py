"""Builders for test objects, one set for every test (like upstream's allocatortesting package): small
DeviceClasses, ResourceSlices, claims, templates, pods and Nodes whose every field is spelled out once here.

Scheduler tests use the `gpu.example.com` driver (DRIVER); node-driver tests build claims the way the
allocator would have written them (`allocated_claim`, driver `gpu.nvidia.com`)."""

from __future__ import annotations

import uuid
from typing import Any

DRIVER = "gpu.example.com"


def device_class(name: str = "gpu", driver: str = DRIVER, extended: str | None = None, expression: str | None = None,
                 created: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression or f'device.driver == "{driver}"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    meta: dict[str, Any] = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta, "spec": spec}


def devices(count: int, prefix: str = "gpu", **attributes: Any) -> list[dict[str, Any]]:
    result = []
    for index in range(count):
        device: dict[str, Any] = {"name": f"{prefix}-{index}"}
        attrs = {"index": {"int": index}}
        for key, value in attributes.items():
            attrs[key] = {"string": value} if isinstance(value, str) else {"int": value}
        device["attributes"] = attrs
        result.append(device)
    return result


def resource_slice(node: str, device_list: list[dict[str, Any]], driver: str = DRIVER,
                   counters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "nodeName": node,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": device_list,
    }
    if counters:
        spec["sharedCounters"] = counters
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{driver}"},
            "spec": spec}


def node(name: str, cpu: str | None = "8", memory: str | None = "32Gi", pods: str | None = "110",
         labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
         unschedulable: bool = False, extra: dict[str, str] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})}}
    allocatable = {k: v for k, v in (("cpu", cpu), ("memory", memory), ("pods", pods)) if v is not None}
    allocatable.update(extra or {})
    if allocatable:
        obj["status"] = {"allocatable": allocatable, "capacity": dict(allocatable)}
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    if spec:
        obj["spec"] = spec
    return obj


def claim_spec(count: int = 1, device_class_name: str = "gpu", request: str = "gpu",
               selectors: list[str] | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class_name, "allocationMode": "ExactCount", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"devices": {"requests": [{"name": request, "exactly": exactly}]}}


def template(name: str, count: int = 1, device_class_name: str = "gpu", namespace: str = "default",
             spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    inner: dict[str, Any] = {"spec": spec or claim_spec(count, device_class_name)}
    meta = {}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    if meta:
        inner["metadata"] = meta
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": inner}


def claim(name: str, count: int = 1, device_class_name: str = "gpu", namespace: str = "default",
          spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec or claim_spec(count, device_class_name)}


def pod_spec(templates: dict[str, str] | None = None, claims: dict[str, str] | None = None,
             cpu: str | None = None, memory: str | None = None, extended: dict[str, Any] | None = None,
             **spec_fields: Any) -> dict[str, Any]:
    requests: dict[str, Any] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    requests.update(extended or {})
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    resource_claims = [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    resource_claims += [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if resource_claims:
        resources["claims"] = [{"name": c["name"]} for c in resource_claims]
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {"containers": [container]}
    if resource_claims:
        spec["resourceClaims"] = resource_claims
    spec.update(spec_fields)
    return spec


def pod(name: str, namespace: str = "default", **kwargs: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": pod_spec(**kwargs)}


def gpu_cluster(node_devices: dict[str, int], **node_kwargs: Any) -> list[dict[str, Any]]:
    """A DeviceClass `gpu` and, per node, a slice with that many devices."""
    objects: list[dict[str, Any]] = [device_class()]
    for name, count in node_devices.items():
        objects.append(node(name, **node_kwargs))
        if count:
            objects.append(resource_slice(name, devices(count)))
    return objects


def allocated_claim(name: str, results: list[dict[str, Any]], *, namespace: str = "default", uid: str | None = None,
                    node_name: str = "node", driver_name: str = "gpu.nvidia.com",
                    config: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An allocated ResourceClaim; each result needs `request` and `device` (pool defaults to the node)."""
    full_results = [{"driver": driver_name, "pool": node_name, **r} for r in results]
    requests = sorted({r["request"].split("/", 1)[0] for r in full_results})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "spec": {"devices": {"requests": [{"name": r, "exactly": {"deviceClassName": "gpu.nvidia.com"}}
                                          for r in requests]}},
        "status": {"allocation": {
            "devices": {"results": full_results, "config": config or []},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]},
        }},
    }
