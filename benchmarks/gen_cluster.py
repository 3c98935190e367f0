#!/usr/bin/env python3
"""Generate a synthetic GPU cluster the way the NVIDIA DRA driver would publish it.

Every node gets one ResourceSlice (driver `gpu.nvidia.com`, pool = node name) with
`--gpus` full GPUs carrying the driver's attribute names (productName, uuid,
cudaComputeCapability, nvlinkDomain, pcieRoot, ...), a Node object, and the cluster
gets the `gpu.nvidia.com` DeviceClass. GPUs of a node are spread over
`--nvlink-domains` NVLink domains (an HGX board has one NVSwitch fabric: 1 domain).

Usable as a script (`gen_cluster.py --nodes 1000 -o cluster.yaml`) and as a module
(`generate_cluster(nodes=1000)` returns the objects as dicts), e.g. from tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

import yaml

DRIVER = "gpu.nvidia.com"
CLASS_NAME = "gpu.nvidia.com"
CLASS_SELECTOR = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'

GPU_MODELS: dict[str, dict[str, Any]] = {
    "H100": {
        "productName": "NVIDIA H100 80GB HBM3",
        "architecture": "Hopper",
        "cudaComputeCapability": "9.0.0",
        "memory": "81559Mi",
    },
    "A100": {
        "productName": "NVIDIA A100-SXM4-80GB",
        "architecture": "Ampere",
        "cudaComputeCapability": "8.0.0",
        "memory": "81920Mi",
    },
    "L4": {
        "productName": "NVIDIA L4",
        "architecture": "Ada Lovelace",
        "cudaComputeCapability": "8.9.0",
        "memory": "23034Mi",
    },
}


def node_name(index: int) -> str:
    return f"gpu-node-{index:04d}"


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": CLASS_NAME},
        "spec": {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}]},
    }


def node_object(name: str, model: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": GPU_MODELS[model]["productName"].replace(" ", "-"),
            },
        },
    }


def gpu_device(node: str, index: int, model: str, gpus: int, nvlink_domains: int, uid: uuid.UUID) -> dict[str, Any]:
    spec = GPU_MODELS[model]
    per_domain = max(1, gpus // max(1, nvlink_domains))
    numa = 0 if index < gpus // 2 else 1
    bus = 0x18 + 0x10 * index
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{uid}"},
            "productName": {"string": spec["productName"]},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": spec["architecture"]},
            "cudaComputeCapability": {"version": spec["cudaComputeCapability"]},
            "driverVersion": {"version": "570.133.20"},
            "cudaDriverVersion": {"version": "12.8.0"},
            "index": {"int": index},
            "numaNode": {"int": numa},
            "nvlinkDomain": {"string": f"{node}-nvl-{min(index // per_domain, nvlink_domains - 1)}"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{bus:02x}"},
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{bus + 1:02x}:00.0"},
        },
        "capacity": {"memory": {"value": spec["memory"]}},
    }


def resource_slice(node: str, model: str, gpus: int, nvlink_domains: int, seed: int) -> dict[str, Any]:
    # uuid derived from (seed, node, index) keeps the output reproducible
    devices = [
        gpu_device(node, i, model, gpus, nvlink_domains, uuid.uuid5(uuid.NAMESPACE_DNS, f"{seed}.{node}.{i}"))
        for i in range(gpus)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}-slice"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def generate_cluster(
    nodes: int,
    gpus: int = 8,
    model: str = "H100",
    nvlink_domains: int = 1,
    with_nodes: bool = True,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The DeviceClass, then for each node its Node object (optional) and ResourceSlice."""
    if model not in GPU_MODELS:
        raise ValueError(f"unknown GPU model {model!r} (known: {', '.join(GPU_MODELS)})")
    objects: list[dict[str, Any]] = [device_class()]
    for i in range(nodes):
        name = node_name(i)
        if with_nodes:
            objects.append(node_object(name, model))
        objects.append(resource_slice(name, model, gpus, nvlink_domains, seed))
    return objects


def gpu_claim(name: str, count: int, match_nvlink: bool = False, namespace: str = "default") -> dict[str, Any]:
    """A pending claim for `count` GPUs of the generated class, optionally all on one NVLink domain."""
    spec: dict[str, Any] = {
        "requests": [{"name": "gpus", "exactly": {"deviceClassName": CLASS_NAME, "count": count}}],
    }
    if match_nvlink:
        spec["constraints"] = [{"requests": ["gpus"], "matchAttribute": f"{DRIVER}/nvlinkDomain"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": spec},
    }


def dump_yaml(objects: list[dict[str, Any]], stream) -> None:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    yaml.dump_all(objects, stream, Dumper=dumper, sort_keys=False, default_flow_style=False)


def dump_json(objects: list[dict[str, Any]], stream) -> None:
    """One `kind: List`: much faster to write and to read back than YAML for large clusters."""
    json.dump({"apiVersion": "v1", "kind": "List", "items": objects}, stream)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1, help="number of GPU nodes (default 1)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument("--model", default="H100", choices=sorted(GPU_MODELS), help="GPU model (default H100)")
    parser.add_argument("--nvlink-domains", type=int, default=1, help="NVLink domains per node (default 1)")
    parser.add_argument("--no-nodes", action="store_true", help="omit Node objects (nodes come from slices)")
    parser.add_argument(
        "--claim",
        action="append",
        default=[],
        metavar="NAME=COUNT[,nvlink]",
        help="also emit a pending claim, e.g. one=1 or eight=8,nvlink (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", default="-", help="output file, YAML or (*.json) a JSON List (default: YAML on stdout)")
    args = parser.parse_args(argv)
    if args.nodes < 0 or args.gpus < 1 or args.nvlink_domains < 1:
        parser.error("--nodes must be >= 0, --gpus and --nvlink-domains >= 1")

    objects = generate_cluster(
        args.nodes, args.gpus, args.model, args.nvlink_domains, with_nodes=not args.no_nodes, seed=args.seed
    )
    for text in args.claim:
        name, _, rest = text.partition("=")
        count_text, _, flag = rest.partition(",")
        if not name or not count_text.isdigit() or flag not in ("", "nvlink"):
            parser.error(f"--claim {text!r}: expected NAME=COUNT or NAME=COUNT,nvlink")
        objects.append(gpu_claim(name, int(count_text), match_nvlink=flag == "nvlink"))

    dump = dump_json if args.output.endswith(".json") else dump_yaml
    if args.output == "-":
        dump(objects, sys.stdout)
    else:
        with open(args.output, "w", encoding="utf-8") as stream:
            dump(objects, stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
