#!/usr/bin/env python3
"""Regenerate the bundled example cluster (run from the repository root: python examples/cluster/generate.py).

Two H100 nodes (8 GPUs each, two NVLink meshes of four GPUs per node), one A100-80GB node with four full GPUs
and four GPUs statically partitioned into MIG devices, and one L4 node. Attributes follow the NVIDIA DRA driver
(gpu.nvidia.com); `nvlinkDomain` is this example's own attribute naming the NVLink mesh a GPU belongs to.
"""

from __future__ import annotations

import os
import uuid

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = "gpu.nvidia.com"
DRIVER_VERSION = "580.95.5"
CUDA_VERSION = "13.0.0"

GPU_MODELS = {
    "h100": {"productName": "NVIDIA H100 80GB HBM3", "architecture": "Hopper", "cc": "9.0.0", "memory": "81559Mi"},
    "a100": {"productName": "NVIDIA A100-SXM4-80GB", "architecture": "Ampere", "cc": "8.0.0", "memory": "81920Mi"},
    "l4": {"productName": "NVIDIA L4", "architecture": "Ada Lovelace", "cc": "8.9.0", "memory": "23034Mi"},
}

# A100-80GB MIG profiles: GI profile id, memory slices, capacities.
MIG_PROFILES = {
    "1g.10gb": {"id": 19, "size": 1, "multiprocessors": 14, "copyEngines": 1, "decoders": 0, "memory": "9728Mi"},
    "2g.20gb": {"id": 14, "size": 2, "multiprocessors": 28, "copyEngines": 2, "decoders": 1, "memory": "19968Mi"},
    "3g.40gb": {"id": 9, "size": 4, "multiprocessors": 42, "copyEngines": 3, "decoders": 2, "memory": "40192Mi"},
    "4g.40gb": {"id": 5, "size": 4, "multiprocessors": 56, "copyEngines": 4, "decoders": 2, "memory": "40192Mi"},
}
# Static MIG layout per partitioned A100: (profile, placement start)
MIG_LAYOUTS = {
    4: [("1g.10gb", start) for start in range(7)],
    5: [("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4)],
    6: [("3g.40gb", 0), ("4g.40gb", 4)],
    7: [("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4)],
}


def _uuid(prefix: str, *parts: object) -> str:
    return f"{prefix}-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, "/".join(map(str, parts))))


def _common(model: str, node: str, minor: int) -> dict:
    info = GPU_MODELS[model]
    bus = 0x18 + 0x10 * minor
    return {
        "productName": {"string": info["productName"]},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": info["architecture"]},
        "cudaComputeCapability": {"version": info["cc"]},
        "driverVersion": {"version": DRIVER_VERSION},
        "cudaDriverVersion": {"version": CUDA_VERSION},
        "resource.kubernetes.io/pciBusID": {"string": f"0000:{bus:02x}:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{(bus & 0xf0):02x}"},
    }


def full_gpu(model: str, node: str, minor: int, nvlink_domain: str | None) -> dict:
    attributes = {"type": {"string": "gpu"}, "uuid": {"string": _uuid("GPU", node, minor)}}
    attributes.update(_common(model, node, minor))
    if nvlink_domain:
        attributes["nvlinkDomain"] = {"string": nvlink_domain}
    return {"name": f"gpu-{minor}", "attributes": attributes,
            "capacity": {"memory": {"value": GPU_MODELS[model]["memory"]}}}


def mig_device(node: str, minor: int, profile: str, start: int) -> dict:
    spec = MIG_PROFILES[profile]
    attributes = {
        "type": {"string": "mig"},
        "uuid": {"string": _uuid("MIG", node, minor, profile, start)},
        "parentUUID": {"string": _uuid("GPU", node, minor)},
        "profile": {"string": profile},
    }
    attributes.update(_common("a100", node, minor))
    capacity = {name: {"value": str(spec[name])} for name in ("multiprocessors", "copyEngines", "decoders")}
    capacity.update({"encoders": {"value": "0"}, "jpegEngines": {"value": "0" if spec["size"] < 4 else "1"},
                     "ofaEngines": {"value": "0"}, "memory": {"value": spec["memory"]}})
    for memory_slice in range(start, start + spec["size"]):
        capacity[f"memorySlice{memory_slice}"] = {"value": "1"}
    name = f"gpu-{minor}-mig-{profile.replace('.', '')}-{spec['id']}-{start}"
    return {"name": name, "attributes": attributes, "capacity": capacity}


def resource_slice(node: str, devices: list[dict]) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}-0"},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices},
    }


def node(name: str, product: str, gpus: int, cpu: str, memory: str) -> dict:
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "nvidia.com/gpu.product": product.replace(" ", "-"), "nvidia.com/gpu.count": str(gpus)}},
        "spec": {},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def device_classes() -> list[dict]:
    def cls(name: str, device_type: str, extended: str | None) -> dict:
        spec: dict = {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}' && "
                                             f"device.attributes['{DRIVER}'].type == '{device_type}'"}}]}
        if extended:
            spec["extendedResourceName"] = extended
        return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}

    return [cls("gpu.nvidia.com", "gpu", "nvidia.com/gpu"), cls("mig.nvidia.com", "mig", None)]


def build() -> dict[str, list[dict]]:
    nodes, slices = [], []
    for name in ("h100-node-1", "h100-node-2"):
        nodes.append(node(name, GPU_MODELS["h100"]["productName"], 8, "192", "2Ti"))
        slices.append(resource_slice(name, [full_gpu("h100", name, m, f"mesh-{m // 4}") for m in range(8)]))
    name = "a100-node-1"
    nodes.append(node(name, GPU_MODELS["a100"]["productName"], 8, "128", "1Ti"))
    devices = [full_gpu("a100", name, m, None) for m in range(4)]
    for minor, layout in MIG_LAYOUTS.items():
        devices += [mig_device(name, minor, profile, start) for profile, start in layout]
    slices.append(resource_slice(name, devices))
    name = "l4-node-1"
    nodes.append(node(name, GPU_MODELS["l4"]["productName"], 1, "32", "128Gi"))
    slices.append(resource_slice(name, [full_gpu("l4", name, 0, None)]))
    return {"deviceclasses.yaml": device_classes(), "nodes.yaml": nodes, "resourceslices.yaml": slices}


def main() -> None:
    for file_name, objects in build().items():
        with open(os.path.join(HERE, file_name), "w", encoding="utf-8") as handle:
            handle.write("# Generated by examples/cluster/generate.py; edit that script instead.\n")
            handle.write("---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects))


if __name__ == "__main__":
    main()
