"""NVLink topology in the driver's slices (simulated boards), used by the article's corrected NVLink claim."""

from __future__ import annotations

import pytest

from gpudra.allocator import Allocator, Features
from gpudra.api.load import load_paths
from gpudra.discovery import read_inventory
from gpudra.gpuplugin.slices import NVLINK_DOMAIN_ATTRIBUTE, build_resource_slices, device_classes, pool_devices

ARTICLE_NVLINK_CLAIM = "gpudra/demo/data/article-fixed/03-resourceclaim-nvlink.yaml"


def _slices(profile: str, node: str, **kwargs) -> list[dict]:
    return build_resource_slices(read_inventory("simulated", profile=profile, node_name=node), node, **kwargs)


def _domains(slices: list[dict]) -> list[str | None]:
    return [(d["attributes"].get(NVLINK_DOMAIN_ATTRIBUTE) or {}).get("string") for d in pool_devices(slices)]


@pytest.mark.parametrize("profile", ["dgx-h100", "hgx-a100", "hgx-a100-mig"])
def test_an_hgx_board_is_one_nvlink_domain_of_eight_gpus(profile):
    slices = _slices(profile, "n1")
    domains = _domains(slices)
    assert len(set(domains)) == 1 and domains[0] and "n1" in domains[0]
    gpus = {d["attributes"].get("parentUUID", d["attributes"]["uuid"])["string"] for d in pool_devices(slices)}
    assert len(gpus) == 8


def test_two_boards_are_two_domains_and_pcie_cards_have_none():
    assert set(_domains(_slices("dgx-h100", "a"))).isdisjoint(_domains(_slices("dgx-h100", "b")))
    assert set(_domains(_slices("l4-node", "c"))) == {None}
    assert len(set(_domains(_slices("h100-nvl-pair", "d")))) == 1  # a bridged pair


def test_dynamic_mig_partitions_carry_their_gpus_domain():
    assert len(set(_domains(_slices("hgx-a100-mig", "m", dynamic_mig=True)))) == 1


def test_the_article_nvlink_claim_gets_two_h100s_of_one_domain():
    claim = next(d.obj for d in load_paths([ARTICLE_NVLINK_CLAIM]) if d.kind == "ResourceClaim")
    # two H100 boards with all but one GPU of the first one taken: the pair must come from the second board
    slices = _slices("dgx-h100", "h100-a") + _slices("dgx-h100", "h100-b") + _slices("l4-node", "l4")
    taken = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "taken", "namespace": "default", "uid": "u-taken"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "r", "driver": "gpu.nvidia.com", "pool": "h100-a", "device": f"gpu-{i}"} for i in range(7)]}}},
    }
    allocator = Allocator(device_classes(), slices, [taken], Features.parse("default"))
    by_name = {d["name"]: d for s in slices if s["spec"]["pool"]["name"] == "h100-a" for d in s["spec"]["devices"]}
    assert "gpu-7" in by_name
    outcome_a = allocator.allocate("h100-a", [claim])
    assert outcome_a.outcome == "unallocatable"  # one free GPU on board a
    outcome_b = allocator.allocate("h100-b", [claim])
    assert outcome_b.outcome == "allocated"
    results = outcome_b.allocations[0]["devices"]["results"]
    assert len(results) == 2 and {r["pool"] for r in results} == {"h100-b"}


def _clique_claim(count: int) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"clique-{count}", "namespace": "default", "uid": f"u-clique-{count}"},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                            "count": count}}],
                                 "constraints": [{"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/cliqueID"}]}}}


def test_gb200_nvl_trays_share_one_multi_node_nvlink_clique():
    """GB200 NVL: every compute tray of the rack is in one NVLink fabric clique, published as NVIDIA's cliqueID
    ("<clusterUuid>.<cliqueId>", what the NVML backend reads from nvmlDeviceGetGpuFabricInfoV) and as the
    nvlinkDomain; DRA still allocates one claim's devices on one node, so a clique-matched claim fits a tray's four
    GPUs and not five (NVIDIA's ComputeDomains span the clique with one claim per node)."""
    from gpudra.vocabulary import NVLINK_CLIQUE_ATTRIBUTE

    slices = _slices("gb200-nvl72", "tray-0") + _slices("gb200-nvl72", "tray-1") + _slices("dgx-h100", "h100")
    cliques = {d["attributes"].get(NVLINK_CLIQUE_ATTRIBUTE, {}).get("string") for d in pool_devices(slices)
               if d["attributes"]["productName"]["string"] == "NVIDIA GB200"}
    assert len(cliques) == 1 and None not in cliques and next(iter(cliques)).endswith(".1")
    assert set(_domains(_slices("gb200-nvl72", "tray-0"))) == cliques  # the multi-node domain is the clique
    h100 = {d["attributes"].get(NVLINK_CLIQUE_ATTRIBUTE) for d in pool_devices(_slices("dgx-h100", "h100"))}
    assert h100 == {None}  # an HGX board has no fabric clique
    allocator = Allocator(device_classes(), slices, [], Features.parse("default"))
    four = allocator.allocate("tray-1", [_clique_claim(4)])
    assert four.outcome == "allocated"
    assert {r["pool"] for r in four.allocations[0]["devices"]["results"]} == {"tray-1"}
    assert allocator.allocate("tray-0", [_clique_claim(5)]).outcome == "unallocatable"
