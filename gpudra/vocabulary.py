"""The attribute names gpudra's GPU driver publishes, and the names people write for them.

One vocabulary for everything that suggests an attribute (validation hints, `validate --fix`): the names
`gpudra.gpuplugin.slices` publishes under the driver's domain. A name written some other way (the article's
`nvlink-mesh-id`, a camel-cased guess such as `nvlinkMeshId`) is mapped onto the published one here, and only here.
A module of its own below gpudra.api and gpudra.gpuplugin: the API's validation hints use it, and the driver builds on
the API.
"""

from __future__ import annotations

import re

DRIVER_NAME = "gpu.nvidia.com"  # the driver's name, also the domain of the attributes and capacities it publishes
# The second kubelet plugin: IMEX channels and daemons of ComputeDomains (multi-node NVLink), as NVIDIA names it
COMPUTE_DOMAIN_DRIVER_NAME = "compute-domain.nvidia.com"
# the device plugin's resource name, which the chart's GPU class (named DRIVER_NAME) serves through DRA
# (DeviceClass spec.extendedResourceName)
GPU_EXTENDED_RESOURCE = "nvidia.com/gpu"

# Topology: attributes whose value names a group of GPUs that work well together. A claim that wants its GPUs in
# one group says so with `matchAttribute: <domain>/<name>`; comparing it with a literal pins one node's group.
NVLINK_DOMAIN_ATTRIBUTE = "nvlinkDomain"  # GPUs joined by NVLink on one node (an HGX board, a bridged pair)
NVLINK_CLIQUE_ATTRIBUTE = "cliqueID"  # NVLink fabric clique across nodes (GB200 NVL)
PARENT_UUID_ATTRIBUTE = "parentUUID"  # a MIG device's (or partition's) physical GPU, as NVIDIA's driver names it

# Standard attributes (any driver may publish them; `matchAttribute` across drivers aligns a GPU with, say, a NIC).
# pcieRoot is k8s.io/dynamic-resource-allocation's deviceattribute.StandardDeviceAttributePCIeRoot (v0.34 on),
# pciBusID its StandardDeviceAttributePCIBusID (v0.36 on), numaNode KEP-6072's name as NVIDIA's driver spells it
# (cmd/gpu-kubelet-plugin/deviceinfo.go standardNumaNodeAttribute, v0.5.0-dev; it replaced gpu.nvidia.com/numa).
# NVIDIA publishes all three whatever the cluster's release: to any release they are ordinary qualified names.
STANDARD_ATTRIBUTE_DOMAIN = "resource.kubernetes.io"
PCIE_ROOT_ATTRIBUTE = f"{STANDARD_ATTRIBUTE_DOMAIN}/pcieRoot"
PCI_BUS_ID_ATTRIBUTE = f"{STANDARD_ATTRIBUTE_DOMAIN}/pciBusID"
NUMA_NODE_ATTRIBUTE = f"{STANDARD_ATTRIBUTE_DOMAIN}/numaNode"
STANDARD_ATTRIBUTES = (PCIE_ROOT_ATTRIBUTE, PCI_BUS_ID_ATTRIBUTE, NUMA_NODE_ATTRIBUTE)

# Names (in their own domain) whose value names one node's group of devices: a selector comparing one with a
# literal pins one group, where `matchAttribute` asks for any one group.
TOPOLOGY_ATTRIBUTES = (NVLINK_DOMAIN_ATTRIBUTE, NVLINK_CLIQUE_ATTRIBUTE, "numaNode", "pcieRoot")

# Every name a device of the driver's domain may carry (full GPUs, MIG devices, partitions).
PUBLISHED_ATTRIBUTES = (
    "type", "uuid", PARENT_UUID_ATTRIBUTE, "profile", "productName", "brand", "architecture", "cudaComputeCapability",
    "driverVersion", "cudaDriverVersion", NVLINK_DOMAIN_ATTRIBUTE, NVLINK_CLIQUE_ATTRIBUTE,
)

# Words people use for a published attribute, compared without case and punctuation ("nvlink-mesh-id").
_SYNONYMS = {
    NVLINK_DOMAIN_ATTRIBUTE: ("nvlinkmeshid", "nvlinkmesh", "meshid", "mesh", "nvlinkid", "nvlinkdomainid",
                              "nvlinkgroup", "nvswitchdomain", "nvlink"),
    NVLINK_CLIQUE_ATTRIBUTE: ("clique", "cliqueid", "nvlinkclique", "nvlinkcliqueid", "fabricclique"),
    "productName": ("product", "productname", "model", "modelname", "gpuproduct", "gpumodel"),
    "cudaComputeCapability": ("computecapability", "cudacc", "cc"),
    "driverVersion": ("driver",),
    "profile": ("migprofile",),
}


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_BY_SQUASHED = {_squash(name): name for name in PUBLISHED_ATTRIBUTES}
for _published, _words in _SYNONYMS.items():
    for _word in _words:
        _BY_SQUASHED.setdefault(_word, _published)


def published_name(name: str, published: set[str] | None = None) -> str | None:
    """The driver's name for an attribute written as `name` ("nvlink-mesh-id" -> "nvlinkDomain"), or None.

    `published`: the names the devices at hand actually carry (from ResourceSlices); a name is only suggested
    when it is among them, and a near spelling of one of them counts too."""
    squashed = _squash(name)
    if published is not None:
        for candidate in published:
            if _squash(candidate) == squashed:
                return candidate
    known = _BY_SQUASHED.get(squashed)
    if known is not None and (published is None or known in published):
        return known
    return None


def same_value(written: str, published: str) -> bool:
    """Whether a hand-written string value means a published one: `NVIDIA-H100-80GB-HBM3` and
    `NVIDIA H100 80GB HBM3` differ only in case and punctuation (the device plugin's label vs NVML's name)."""
    return _squash(written) == _squash(published) and bool(_squash(written))
