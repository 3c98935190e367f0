"""A trace as Kubernetes objects: Nodes with the ResourceSlices gpudra's driver publishes, Pods and their
ResourceClaims (`--mode dra`), or Pods asking for `nvidia.com/gpu` from a device plugin (`--mode device-plugin`;
`--mode time-slicing`: the plugin with time-slicing replicas, `timeslicing.py`).

DRA: every GPU of a node is a device of the driver's pool for that node, published the way
`gpudra.gpuplugin.slices` does in its consumable-capacity sharing mode (`allowMultipleAllocations`, a `compute`
capacity of 1000 per GPU). The trace's model code (G1, T4, …) is the device's opaque `productName`. A task asking for
k whole GPUs gets one claim with an ExactCount-k request; a task asking for a share (`gpu_milli` < 1000) asks for
one device with `capacity.requests.compute` = the share; `gpu_spec` becomes a CEL selector on productName;
CPU and memory stay pod requests.

Device plugin: the node's allocatable carries `nvidia.com/gpu: <count>` and nothing describes the GPUs; every
task asks for whole GPUs (a share becomes a whole GPU). A model constraint becomes node affinity on the
`nvidia.com/gpu.product` label (what GPU feature discovery sets), since requests cannot say it. With
time-slicing the node advertises N replicas per GPU and a share asks for one replica.
"""

from __future__ import annotations

import json
from typing import Any

from gpudra.discovery.model import Gpu, Inventory
from gpudra.gpuplugin.slices import COMPUTE_CAPACITY, COMPUTE_UNITS, DEFAULT_DRIVER_NAME, build_resource_slices, device_classes

from .timeslicing import DEFAULT_REPLICAS, replicas_asked
from .trace import MILLI, Task, TraceNode

MODES = ("dra", "device-plugin", "time-slicing")
DEVICE_PLUGIN_MODES = ("device-plugin", "time-slicing")  # count-only nvidia.com/gpu
NAMESPACE = "sim"
GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_CLASS = DEFAULT_DRIVER_NAME  # the driver's DeviceClass for full GPUs
POD_CLAIM = "gpu"
MAX_PODS = "1001"  # as the artifact's node YAML (openb prepare_input)


def gpu_device_id(node: str, index: int) -> tuple[str, str, str]:
    """The (driver, pool, device) gpudra's driver gives GPU `index` of `node` (pool = node name)."""
    return (DEFAULT_DRIVER_NAME, node, f"gpu-{index}")


def node_inventory(node: TraceNode) -> Inventory:
    gpus = [
        Gpu(index=i, minor=i, uuid=f"GPU-{node.name}-{i}", product_name=node.model, brand="Nvidia",
            architecture="unknown", cuda_compute_capability="0.0", memory_bytes=None,
            pci_bus_id=f"0000:{i + 1:02x}:00.0")
        for i in range(node.gpus)
    ]
    return Inventory(backend="trace", driver_version="0.0.0", cuda_driver_version="0.0", gpus=gpus)


def node_objects(node: TraceNode, mode: str, replicas: int = DEFAULT_REPLICAS) -> list[dict[str, Any]]:
    allocatable = {"cpu": f"{node.cpu_milli}m", "memory": f"{node.memory_mib}Mi", "pods": MAX_PODS}
    labels = {"kubernetes.io/hostname": node.name}
    if node.model:
        labels[PRODUCT_LABEL] = node.model
    if mode == "device-plugin" and node.gpus:
        allocatable[GPU_RESOURCE] = str(node.gpus)
    elif mode == "time-slicing" and node.gpus:
        allocatable[GPU_RESOURCE] = str(node.gpus * replicas)
    objects: list[dict[str, Any]] = [{
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "status": {"allocatable": dict(allocatable), "capacity": dict(allocatable)},
    }]
    if mode == "dra" and node.gpus:
        objects.extend(build_resource_slices(node_inventory(node), node.name, sharing="consumable"))
    return objects


def cluster_objects(nodes: list[TraceNode], mode: str, replicas: int = DEFAULT_REPLICAS) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    if mode == "dra":
        objects.extend(c for c in device_classes() if c["metadata"]["name"] == GPU_CLASS)
    for node in nodes:
        objects.extend(node_objects(node, mode, replicas))
    return objects


def _share(milli: int) -> str:
    return str(milli * COMPUTE_UNITS // MILLI)  # the driver counts compute in thousandths of a GPU


def gpu_request(task: Task) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": GPU_CLASS, "allocationMode": "ExactCount", "count": task.num_gpu}
    if task.gpu_spec:
        models = json.dumps(list(task.gpu_spec))
        exactly["selectors"] = [{"cel": {"expression": f"device.attributes['{DEFAULT_DRIVER_NAME}'].productName "
                                                       f"in {models}"}}]
    if task.gpu_milli < MILLI:
        exactly["capacity"] = {"requests": {COMPUTE_CAPACITY: _share(task.gpu_milli)}}
    return {"name": "gpu", "exactly": exactly}


def pod_objects(task: Task, pod_name: str, mode: str) -> list[dict[str, Any]]:
    """The Pod (and in DRA mode its ResourceClaim) for one task."""
    requests: dict[str, Any] = {"cpu": f"{task.cpu_milli}m", "memory": f"{task.memory_mib}Mi"}
    container: dict[str, Any] = {"name": "task", "image": "registry.k8s.io/pause:3.10", "resources": {}}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": NAMESPACE},
        "spec": {"containers": [container]},
    }
    objects = [pod]
    if task.num_gpu and mode in DEVICE_PLUGIN_MODES:
        # device-plugin: a share is a whole GPU; time-slicing: a share is one replica, k GPUs are k replicas
        requests[GPU_RESOURCE] = str(task.num_gpu if mode == "device-plugin" else replicas_asked(task))
        if task.gpu_spec:
            pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": PRODUCT_LABEL, "operator": "In", "values": list(task.gpu_spec)}]}]}}}
    elif task.num_gpu:
        claim_name = f"{pod_name}-gpu"
        container["resources"]["claims"] = [{"name": POD_CLAIM}]
        pod["spec"]["resourceClaims"] = [{"name": POD_CLAIM, "resourceClaimName": claim_name}]
        objects.append({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": claim_name, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [gpu_request(task)]}},
        })
    container["resources"]["requests"] = requests
    return objects
