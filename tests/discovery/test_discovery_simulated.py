"""Simulated discovery: GPU catalog, node profiles and the MIG state API."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.catalog import model_for_product_name
from gpudra.discovery import PROFILES, DiscoveryError, MigError, gpu_model, open_backend
from gpudra.discovery.model import mig_canonical_name, parse_mig_canonical_name
from gpudra import catalog as gpu_catalog


def test_catalog_has_the_required_models_with_true_specs():
    required = {"T4", "L4", "A10", "A30", "A100-40GB", "A100-80GB", "H100-80GB", "H100-NVL", "H200", "B200"}
    assert required <= {m.display_name for m in gpu_catalog.CATALOG}
    h100 = gpu_model("H100-80GB")
    assert (h100.product_name, h100.architecture, h100.compute_capability, h100.total_memory_mib) == (
        "NVIDIA H100 80GB HBM3", "Hopper", "9.0", 81559)
    assert gpu_model("B200").compute_capability == "10.0" and gpu_model("L4").architecture == "Ada Lovelace"
    assert gpu_model("T4").compute_capability == "7.5" and not gpu_model("T4").mig_capable
    assert gpu_model("H100-80GB").mig_capable and gpu_model("H100-80GB").profiles
    with pytest.raises(DiscoveryError, match="unknown GPU model"):
        gpu_model("Z9000")


def test_product_name_matching():
    assert model_for_product_name("NVIDIA A100 80GB PCIe", 81920).display_name == "A100-80GB"
    assert model_for_product_name("NVIDIA A10", 23028).display_name == "A10"
    assert model_for_product_name("NVIDIA H100 NVL", 95830).display_name == "H100-NVL"
    assert model_for_product_name("NVIDIA A100-PCIE-80GB-LP", 81920).display_name == "A100-80GB"  # by family
    assert model_for_product_name("Quadro RTX 8000") is None


def test_adding_a_gpu_model_is_one_row(monkeypatch, tmp_path):
    """One new catalog row and every reader knows the GPU: node profiles, simulated discovery, its MIG
    profiles, mig-parted configs, NVML name matching and the driver's slices."""
    h100 = gpu_catalog.gpu_model("h100")
    row = gpu_catalog._model("h100-64gb", "H100-64GB", ("NVIDIA H100 64GB HBM3",), ("h100-64gb",), (0x2337,),
                             "Hopper", "9.0", 65536, h100.profiles)
    monkeypatch.setattr(gpu_catalog, "CATALOG", gpu_catalog.CATALOG + (row,))
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump({"name": "h64", "gpus": [{"model": "H100-64GB", "count": 2,
                                                              "mig": [{"profile": "3g.40gb", "start": 4}]}]}))
    inventory = open_backend("simulated", profile=str(path), node_name="n").inventory()
    assert [(g.model, g.product_name, g.memory_bytes) for g in inventory.gpus] == [
        ("H100-64GB", "NVIDIA H100 64GB HBM3", 65536 * 2**20)] * 2
    assert [m.name for m in inventory.gpus[0].mig_devices] == ["gpu-0-mig-3g40gb-9-4"]
    assert model_for_product_name("NVIDIA H100 64GB HBM3").key == "h100-64gb"
    configs = CliRunner().invoke(cli, ["mig", "configs", "--gpu", "NVIDIA H100 64GB HBM3"])
    assert configs.exit_code == 0 and "all-3g.40gb" in configs.output  # an unknown GPU exits 2
    from gpudra.gpuplugin.slices import build_resource_slices

    names = [d["name"] for s in build_resource_slices(inventory, "n", dynamic_mig=True)
             for d in s["spec"].get("devices", [])]
    assert "gpu-1-mig-1g10gb-19-0" in names


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_profile_builds(profile):
    inv = open_backend("simulated", profile=profile, node_name="n").inventory()
    assert inv.gpus and inv.driver_version
    assert len({g.uuid for g in inv.gpus}) == len(inv.gpus)
    assert len({g.pci_bus_id for g in inv.gpus}) == len(inv.gpus)
    for gpu in inv.gpus:
        assert gpu.mig_enabled == bool(gpu.mig_devices) or gpu.mig_enabled
        assert gpu.memory_bytes == gpu_model(gpu.model).memory_bytes


def test_dgx_h100_and_hgx_a100_mig_profiles():
    dgx = open_backend("simulated", profile="dgx-h100", node_name="n").inventory()
    assert [g.product_name for g in dgx.gpus] == ["NVIDIA H100 80GB HBM3"] * 8
    assert len({g.nvlink_domain for g in dgx.gpus}) == 1 and dgx.gpus[0].nvlink_domain
    hgx = open_backend("simulated", profile="hgx-a100-mig", node_name="n").inventory()
    assert [g.mig_enabled for g in hgx.gpus] == [True] * 4 + [False] * 4
    assert [m.profile for m in hgx.gpus[2].mig_devices] == ["2g.20gb", "1g.10gb", "1g.10gb", "3g.40gb"]
    assert hgx.gpus[0].mig_devices[3].name == "gpu-0-mig-1g10gb-19-3"


def test_uuids_are_stable_per_node_and_differ_between_nodes():
    a1 = open_backend("simulated", profile="l4-node", node_name="a").inventory()
    a2 = open_backend("simulated", profile="l4-node", node_name="a").inventory()
    b = open_backend("simulated", profile="l4-node", node_name="b").inventory()
    assert [g.uuid for g in a1.gpus] == [g.uuid for g in a2.gpus]
    assert not {g.uuid for g in a1.gpus} & {g.uuid for g in b.gpus}


def test_mig_create_destroy_and_rules():
    backend = open_backend("simulated", profile="dgx-h100", node_name="n")
    assert not backend.inventory().gpus[0].mig_enabled
    small = backend.create_mig_device(0, 19, 3)
    assert small.name == "gpu-0-mig-1g10gb-19-3" and small.uuid.startswith("MIG-")
    assert backend.inventory().gpus[0].mig_enabled  # Hopper: MIG mode switched on without a reset
    with pytest.raises(MigError, match="insufficient resources"):
        backend.create_mig_device(0, 14, 2)  # 2g at 2:2 overlaps slice 3
    with pytest.raises(MigError, match="not valid"):
        backend.create_mig_device(0, 14, 1)
    with pytest.raises(MigError, match="no GPU instance profile id 77"):
        backend.create_mig_device(0, 77, 0)
    big = backend.create_mig_device(0, 9, 4)
    assert backend.find_mig_device(0, 9, 4).uuid == big.uuid
    with pytest.raises(MigError, match="cannot disable MIG mode"):
        backend.set_mig_mode(0, False)
    assert backend.destroy_mig_device(0, small.gi_id) is True
    assert backend.destroy_mig_device(0, small.gi_id) is False
    backend.destroy_mig_device(0, big.gi_id)
    assert not backend.inventory().gpus[0].mig_enabled and backend.inventory().gpus[0].mig_devices == []


def test_compute_slices_are_limited():
    backend = open_backend("simulated", profile="dgx-h100", node_name="n")
    backend.create_mig_device(1, 9, 0)  # 3g, slices 0-3
    backend.create_mig_device(1, 9, 4)  # 3g, slices 4-7: 6 of 7 compute slices used
    with pytest.raises(MigError):
        backend.create_mig_device(1, 19, 0)


def test_ampere_needs_a_reset_and_non_mig_gpus_refuse():
    a100 = open_backend("simulated", profile="hgx-a100", node_name="n")
    with pytest.raises(MigError, match="reset"):
        a100.create_mig_device(0, 19, 0)
    l4 = open_backend("simulated", profile="l4-node", node_name="n")
    with pytest.raises(MigError, match="not MIG capable"):
        l4.create_mig_device(0, 19, 0)
    assert l4.mig_profiles(0) == ()
    # but an A100 already in MIG mode can be repartitioned
    mig = open_backend("simulated", profile="hgx-a100-mig", node_name="n")
    gpu0 = mig.inventory().gpus[0]
    mig.destroy_mig_device(0, gpu0.mig_devices[0].gi_id)
    assert mig.create_mig_device(0, 19, 0).placement_start == 0


def test_state_file_is_shared_between_processes_like_hardware(tmp_path):
    state = str(tmp_path / "gpus.json")
    first = open_backend("simulated", profile="dgx-h100", node_name="n", state_path=state)
    created = first.create_mig_device(3, 15, 6)
    second = open_backend("simulated", profile="dgx-h100", node_name="n", state_path=state)
    assert [m.uuid for m in second.inventory().gpus[3].mig_devices] == [created.uuid]
    second.destroy_mig_device(3, created.gi_id)
    assert first.inventory().gpus[3].mig_devices == []
    other = open_backend("simulated", profile="dgx-b200", node_name="n", state_path=state)
    with pytest.raises(MigError, match="belongs to profile"):
        other.inventory()


def test_canonical_mig_names_round_trip():
    name = mig_canonical_name(1, "1g.10gb+me", 20, 4)
    assert name == "gpu-1-mig-1g10gb-me-20-4"
    assert parse_mig_canonical_name(name) == (1, "1g10gb-me", 20, 4)
    assert parse_mig_canonical_name("gpu-3") is None


def test_custom_profile_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"name": "mine", "driverVersion": "570.1.2", "gpus": [
        {"model": "H200", "count": 2}, {"model": "A30", "mig": [{"profile": "2g.12gb", "start": 0}]}]}))
    inv = open_backend("simulated", profile=str(path), node_name="n").inventory()
    assert [g.model for g in inv.gpus] == ["H200", "H200", "A30"]
    assert [m.name for m in inv.gpus[2].mig_devices] == ["gpu-2-mig-2g12gb-5-0"]
    path.write_text("gpus: []")
    with pytest.raises(DiscoveryError, match="non-empty 'gpus'"):
        open_backend("simulated", profile=str(path), node_name="n")


def test_discover_cli_outputs():
    runner = CliRunner()
    table = runner.invoke(cli, ["discover", "--profile", "hgx-a100-mig"])
    assert table.exit_code == 0 and "gpu-0-mig-1g10gb-19-0" in table.output and "A100-SXM4-80GB" in table.output
    as_json = runner.invoke(cli, ["discover", "--profile", "l4-node", "-o", "json"])
    data = json.loads(as_json.output)
    assert [g["productName"] for g in data["gpus"]] == ["NVIDIA L4"] * 4
    as_yaml = runner.invoke(cli, ["discover", "--profile", "t4-node", "-o", "yaml"])
    assert yaml.safe_load(as_yaml.output)["gpus"][0]["cudaComputeCapability"] == "7.5"
    bad = runner.invoke(cli, ["discover", "--profile", "nope"])
    assert bad.exit_code == 2 and "unknown node profile" in bad.output and "Traceback" not in bad.output
