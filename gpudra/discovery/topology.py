"""NVLink domains from the far ends of each GPU's active NVLinks.

A GPU's NVLink ends at a peer GPU (NVLink bridge pairs, older direct meshes) or at an NVSwitch
(HGX/DGX baseboards). GPUs joined through any chain of such ends can talk over NVLink, so a domain
is a connected component of the graph whose vertices are PCI bus IDs and whose edges are links.
"""

from __future__ import annotations


def nvlink_domains(gpu_bus_ids: list[str], links: dict[str, list[str]], node_name: str) -> dict[str, str]:
    """GPU bus ID -> `<node>-nvlink-<n>` for every GPU with an active NVLink; domains are numbered in
    the order of their first GPU in `gpu_bus_ids` (NVML index order)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for gpu, remotes in links.items():
        for remote in remotes:
            parent[find(gpu)] = find(remote)
    names: dict[str, str] = {}
    out = {}
    for gpu in gpu_bus_ids:
        if not links.get(gpu):
            continue
        root = find(gpu)
        if root not in names:
            names[root] = f"{node_name}-nvlink-{len(names)}"
        out[gpu] = names[root]
    return out
