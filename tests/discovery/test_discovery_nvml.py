"""The NVML backend running the real `pynvml` wrappers on a fake of the NVML C library.

`fake_libnvml` replaces only libnvidia-ml.so's functions, so each call goes through
nvidia-ml-py 13's own argument handling and error classes. The fake behaves like the driver
where the old fake did not: privilege errors, MIG mode switches that stay pending, stale handles
after a switch, profiles only while MIG is on, index != minor, and failures at any call.
"""

from __future__ import annotations

import ctypes
import json

import pynvml
import pytest
from click.testing import CliRunner
from support.fake_libnvml import FakeGpu, FakeLibNvml, from_simulated, install

from gpudra.cli import cli
from gpudra.discovery import DiscoveryError, MigError, open_backend
from gpudra.discovery.nvml import ARCHITECTURES, NvmlBackend, fabric_clique, mig_profile_name, normalize_pci_bus_id
from gpudra.gpuplugin.slices import build_resource_slices


def _backend(monkeypatch, profile: str = "dgx-h100", **kw) -> tuple[FakeLibNvml, NvmlBackend]:
    lib = install(monkeypatch, from_simulated(profile, **kw))
    return lib, NvmlBackend(node_name="n")


def _comparable(inventory):
    data = inventory.to_dict()
    data.pop("profile", None)
    data.pop("backend")
    for g in data["gpus"]:
        for key in ("pcieRoot", "nvlinkDomain", "model"):
            g.pop(key, None)
    return data


@pytest.mark.parametrize("profile", ["dgx-h100", "hgx-a100-mig", "a30-mig", "l4-node", "dgx-b200", "t4-node"])
def test_nvml_backend_reports_what_the_hardware_has(monkeypatch, profile):
    _, nvml = _backend(monkeypatch, profile)
    sim = open_backend("simulated", profile=profile, node_name="n")
    inventory = nvml.inventory()
    assert inventory.problems == []
    assert _comparable(inventory) == _comparable(sim.inventory())
    # NVML's profiles (MIG on) and the catalog's (MIG off) give the same names, ids, placements and sizes
    for gpu in sim.inventory().gpus:
        assert sorted((p.name, p.gi_profile_id, p.placement_starts, p.memory_slices)
                      for p in nvml.mig_profiles(gpu.minor)) == sorted(
            (p.name, p.gi_profile_id, p.placement_starts, p.memory_slices) for p in sim.mig_profiles(gpu.minor))


def test_index_and_minor_differ(monkeypatch):
    lib, nvml = _backend(monkeypatch, "hgx-a100-mig", minors=[7, 6, 5, 4, 3, 2, 1, 0])
    inventory = nvml.inventory()
    assert [(g.index, g.minor) for g in inventory.gpus] == [(i, 7 - i) for i in range(8)]
    # index 0 (all-1g.10gb) is minor 7: its MIG devices carry the parent's minor, not its index
    assert {m.name.split("-mig-")[0] for m in inventory.gpus[0].mig_devices} == {"gpu-7"}
    # minor 5 is index 2 (all-balanced): free its 1g at slice 2, then create one there again
    one_g = next(m for m in inventory.gpus[2].mig_devices if m.placement_start == 2)
    assert one_g.parent_minor == 5 and lib.gpu(5).index == 2
    assert nvml.destroy_mig_device(5, one_g.gi_id) is True
    assert [gi.start for gi in lib.gpu(5).gis.values()] == [0, 3, 4]
    created = nvml.create_mig_device(5, 19, 2)
    assert created.name == "gpu-5-mig-1g10gb-19-2"
    assert ("createGpuInstance", 5, 19, 2, 1, created.gi_id) in lib.calls


def test_mig_create_on_a_hopper_gpu_with_mig_off_switches_it_on_and_reads_profiles_afterwards(monkeypatch):
    # Old defects: profiles read while MIG was off (none) were cached, and the pre-switch handle was reused.
    lib, nvml = _backend(monkeypatch)
    assert nvml.inventory().gpus[5].mig_enabled is False
    created = nvml.create_mig_device(5, 15, 2)
    assert created.name == "gpu-5-mig-1g20gb-15-2" and created.placement_size == 2
    assert ("nvmlDeviceSetMigMode", 5, 1) in lib.calls and ("createGpuInstance", 5, 15, 2, 2, created.gi_id) in lib.calls
    assert [m.uuid for m in nvml.inventory().gpus[5].mig_devices] == [created.uuid]
    with pytest.raises(MigError, match="creating 2g.20gb at 2 on GPU 5.*Insufficient resources"):
        nvml.create_mig_device(5, 14, 2)
    assert nvml.destroy_mig_device(5, created.gi_id) is True
    assert ("destroyComputeInstance", 5, created.gi_id, 0) in lib.calls
    assert nvml.destroy_mig_device(5, created.gi_id) is False  # already gone is fine
    assert lib.gpu(5).gis == {}


@pytest.mark.parametrize("failing", ["nvmlGpuInstanceCreateComputeInstance",
                                     "nvmlGpuInstanceGetComputeInstanceProfileInfoV"])
def test_a_failed_compute_instance_does_not_leak_its_gpu_instance(monkeypatch, failing):
    lib, nvml = _backend(monkeypatch)
    nvml.set_mig_mode(3, True)
    lib.fail(failing, pynvml.NVML_ERROR_UNKNOWN, gpu=3, times=1)
    with pytest.raises(MigError, match="creating 3g.40gb at 4 on GPU 3"):
        nvml.create_mig_device(3, 9, 4)
    assert lib.gpu(3).gis == {}  # rolled back: the memory slices are free again
    assert nvml.create_mig_device(3, 9, 4).placement_size == 4


def test_rollback_failure_is_reported_too(monkeypatch):
    lib, nvml = _backend(monkeypatch)
    nvml.set_mig_mode(3, True)
    lib.fail("nvmlGpuInstanceCreateComputeInstance", pynvml.NVML_ERROR_UNKNOWN, gpu=3)
    lib.fail("nvmlGpuInstanceDestroy", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=3)
    with pytest.raises(MigError, match="could not be destroyed either"):
        nvml.create_mig_device(3, 19, 0)


def test_no_permission_on_one_gpu_instance_leaves_out_that_device_only(monkeypatch):
    lib, nvml = _backend(monkeypatch, "hgx-a100-mig")
    lib.fail("nvmlDeviceGetGpuInstanceById", pynvml.NVML_ERROR_NO_PERMISSION, gpu=0)
    inventory = nvml.inventory()
    assert len(inventory.gpus) == 8
    assert inventory.gpus[0].mig_devices == [] and len(inventory.gpus[1].mig_devices) == 7
    assert len(inventory.problems) == 7 and all(p.startswith("GPU 0: MIG device") and "no permission" in p
                                                for p in inventory.problems)


def test_unprivileged_process_still_sees_every_gpu(monkeypatch):
    lib, nvml = _backend(monkeypatch, "hgx-a100-mig")
    lib.privileged = False
    inventory = nvml.inventory()
    assert [g.name for g in inventory.gpus] == [f"gpu-{i}" for i in range(8)]
    assert inventory.problems and all("no permission" in p for p in inventory.problems)
    with pytest.raises(MigError, match="no permission"):
        nvml.destroy_mig_device(0, inventory.gpus[0].mig_devices[0].gi_id if inventory.gpus[0].mig_devices else 1)


def test_placement_errors_are_reported_not_swallowed(monkeypatch):
    lib, nvml = _backend(monkeypatch, "hgx-a100-mig")
    lib.fail("nvmlDeviceGetGpuInstancePossiblePlacements_v2", pynvml.NVML_ERROR_UNKNOWN, gpu=2, times=1)
    inventory = nvml.inventory()
    assert inventory.gpus[2].mig_devices == [] and len(inventory.gpus[3].mig_devices) == 4
    assert [p for p in inventory.problems if p.startswith("GPU 2:") and "placements" in p]
    assert len(nvml.inventory().gpus[2].mig_devices) == 4  # nothing wrong was remembered


def test_without_placements_memory_slices_come_from_the_catalog_not_the_compute_slices(monkeypatch):
    lib, nvml = _backend(monkeypatch)
    nvml.set_mig_mode(0, True)
    lib.fail("nvmlDeviceGetGpuInstancePossiblePlacements_v2", pynvml.NVML_ERROR_NOT_SUPPORTED)
    sizes = {p.name: p.memory_slices for p in nvml.mig_profiles(0)}
    assert sizes["3g.40gb"] == 4 and sizes["7g.80gb"] == 8 and sizes["1g.10gb"] == 1


def test_profile_info_errors_are_reported_and_not_cached(monkeypatch):
    lib, nvml = _backend(monkeypatch, "hgx-a100-mig")
    lib.fail("nvmlDeviceGetGpuInstanceProfileInfoV", pynvml.NVML_ERROR_UNKNOWN, gpu=1, times=1)
    inventory = nvml.inventory()
    assert inventory.gpus[1].mig_devices == [] and len(inventory.gpus[0].mig_devices) == 7
    assert any(p.startswith("GPU 1: MIG devices not listed") and "Unknown Error" in p for p in inventory.problems)
    assert len(nvml.inventory().gpus[1].mig_devices) == 7


def test_mig_mode_activation_status(monkeypatch):
    lib, nvml = _backend(monkeypatch, "hgx-a100")
    with pytest.raises(MigError, match="pending a GPU reset"):  # Ampere needs a reset
        nvml.set_mig_mode(1, True)
    assert pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(1)) == [0, 1]
    with pytest.raises(MigError, match="pending a GPU reset"):
        nvml.create_mig_device(1, 19, 0)
    lib.reset(1)
    assert nvml.create_mig_device(1, 19, 0).name == "gpu-1-mig-1g10gb-19-0"

    lib, nvml = _backend(monkeypatch, "dgx-h100")
    lib.gpu(2).in_use = True
    with pytest.raises(MigError, match="in use"):
        nvml.set_mig_mode(2, True)
    lib.gpu(2).in_use = False
    nvml.set_mig_mode(2, True)
    assert nvml.inventory().gpus[2].mig_enabled


def test_mig_mode_switch_drops_the_old_profiles(monkeypatch):
    lib, nvml = _backend(monkeypatch)
    nvml.set_mig_mode(4, True)
    assert nvml.mig_profiles(4)
    nvml.set_mig_mode(4, False)
    lib.fail("nvmlDeviceGetGpuInstanceProfileInfoV", pynvml.NVML_ERROR_UNKNOWN, gpu=4)
    nvml.set_mig_mode(4, True)
    with pytest.raises(DiscoveryError, match="Unknown Error"):  # read again, not served from before the switch
        nvml.mig_profiles(4)


def test_architecture_codes(monkeypatch):
    assert ARCHITECTURES[13] == "Rubin" and 11 not in ARCHITECTURES and ARCHITECTURES[10] == "Blackwell"
    lib = from_simulated("t4-node")
    lib.gpus.append(FakeGpu(index=1, minor=1, uuid="GPU-r", name="NVIDIA Rubin", memory_bytes=2**36,
                            architecture=13, compute_capability=(11, 0), bus_id="00000000:05:00.0", numa_node=0,
                            model=None))
    lib.gpus.append(FakeGpu(index=2, minor=2, uuid="GPU-d", name="DLA", memory_bytes=2**30,
                            architecture=11, compute_capability=(8, 7), bus_id="00000000:06:00.0", numa_node=0,
                            model=None))
    install(monkeypatch, lib)
    assert [g.architecture for g in NvmlBackend().inventory().gpus] == ["Turing", "Rubin", "Unknown"]


@pytest.mark.parametrize("fn", ["nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetName", "nvmlDeviceGetUUID",
                                "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
                                "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlGpuInstanceGetInfo"])
def test_one_gpu_failing_never_hides_the_others(monkeypatch, fn):
    lib, nvml = _backend(monkeypatch, "hgx-a100-mig")
    lib.fail(fn, pynvml.NVML_ERROR_GPU_IS_LOST, gpu=1)
    inventory = nvml.inventory()
    others = [g for g in inventory.gpus if g.minor != 1]
    assert [g.minor for g in others] == [0, 2, 3, 4, 5, 6, 7]
    assert len(others[0].mig_devices) == 7 and len(others[1].mig_devices) == 4
    assert inventory.problems and all(p.startswith(("GPU 1:", "GPU index 1:")) and "fallen off the bus" in p
                                      for p in inventory.problems)


def _hgx_nvswitch_links(lib: FakeLibNvml, switches: int = 4) -> None:
    for gpu in lib.gpus:  # HGX H100: 18 links per GPU spread over four NVSwitches
        gpu.nvlinks = [f"00000000:{0x70 + link % switches:02X}:00.0" for link in range(18)]


def test_nvlink_topology_and_fabric_cliques(monkeypatch):
    lib = from_simulated("dgx-h100")
    _hgx_nvswitch_links(lib)
    lib.gpus[7].nvlinks = [None] * 18  # links down: not in the domain
    install(monkeypatch, lib)
    inventory = NvmlBackend(node_name="node-a").inventory()
    assert [g.nvlink_domain for g in inventory.gpus] == ["node-a-nvlink-0"] * 7 + [None]

    lib = from_simulated("l4-node")  # two bridged pairs: 0-1 and 2-3
    buses = [g.bus_id for g in lib.gpus]
    for a, b in ((0, 1), (2, 3)):
        lib.gpus[a].nvlinks, lib.gpus[b].nvlinks = [buses[b]] * 4, [buses[a]] * 4
    install(monkeypatch, lib)
    assert [g.nvlink_domain for g in NvmlBackend(node_name="x").inventory().gpus] == [
        "x-nvlink-0", "x-nvlink-0", "x-nvlink-1", "x-nvlink-1"]

    lib = from_simulated("dgx-b200")  # a multi-node NVLink fabric: the clique is the domain
    _hgx_nvswitch_links(lib)
    cluster = bytes(range(16))
    for gpu in lib.gpus:
        gpu.fabric = (cluster, 7, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED)
    lib.gpus[0].fabric = (cluster, 7, pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS)
    install(monkeypatch, lib)
    inventory = NvmlBackend(node_name="x").inventory()
    clique = "00010203-0405-0607-0809-0a0b0c0d0e0f.7"
    assert fabric_clique(cluster, 7) == clique
    assert [g.nvlink_clique for g in inventory.gpus] == [None] + [clique] * 7
    assert [g.nvlink_domain for g in inventory.gpus] == ["x-nvlink-0"] + [clique] * 7
    attrs = build_resource_slices(inventory, "x")[0]["spec"]["devices"][1]["attributes"]
    assert attrs["nvlinkDomain"] == {"string": clique} and attrs["cliqueID"] == {"string": clique}


def test_topology_errors_degrade_to_no_domain(monkeypatch):
    lib = from_simulated("dgx-h100")
    _hgx_nvswitch_links(lib)
    lib.fail("nvmlDeviceGetNvLinkState", pynvml.NVML_ERROR_UNKNOWN, gpu=3)
    install(monkeypatch, lib)
    inventory = NvmlBackend(node_name="n").inventory()
    assert len(inventory.gpus) == 8 and inventory.gpus[3].nvlink_domain is None
    assert inventory.gpus[2].nvlink_domain == "n-nvlink-0"
    assert [p for p in inventory.problems if p.startswith("GPU 3: topology")]


@pytest.mark.parametrize("code, fragment", [(12, "libnvidia-ml.so.1"), (9, "kernel driver is not loaded"),
                                            (4, "no permission")])
def test_missing_library_or_driver_is_a_clear_error(monkeypatch, code, fragment):
    lib = install(monkeypatch, from_simulated("t4-node"))
    lib.init_error = code
    with pytest.raises(DiscoveryError, match=fragment):
        open_backend("nvml")
    result = CliRunner().invoke(cli, ["discover", "--backend", "nvml"])
    assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["driver", "slices", "--backend", "nvml", "--node-name", "n"])
    assert result.exit_code == 2 and fragment in result.output


def test_cli_with_fake_nvml(monkeypatch):
    lib = install(monkeypatch, from_simulated("hgx-a100-mig"))
    lib.fail("nvmlDeviceGetName", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=6)
    result = CliRunner().invoke(cli, ["discover", "--backend", "nvml", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["backend"] == "nvml" and len(data["gpus"]) == 7 and "GPU index 6" in data["problems"][0]
    assert "warning: GPU index 6: left out" in result.stderr
    slices = CliRunner().invoke(cli, ["driver", "slices", "--backend", "nvml", "--node-name", "n", "-o", "json"])
    names = [d["name"] for s in json.loads(slices.stdout)["items"] for d in s["spec"]["devices"]]
    assert "gpu-0-mig-1g10gb-19-6" in names and "gpu-7" in names and "gpu-0" not in names and "gpu-6" not in names


def test_helpers():
    assert normalize_pci_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalize_pci_bus_id(b"00000001:AB:00.0") == "0001:ab:00.0"
    assert mig_profile_name(0, 9984, 81559 * 2**20) == "1g.10gb"
    assert mig_profile_name(7, 9984, 81559 * 2**20) == "1g.10gb+me"
    assert mig_profile_name(4, 80896, 81559 * 2**20) == "7g.80gb"
    assert fabric_clique(bytes(16), 3) is None


def _real_nvml_or_skip() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVIDIA GPU/driver here (NVML: {exc}); real-GPU discovery not exercised")
    count = pynvml.nvmlDeviceGetCount()
    pynvml.nvmlShutdown()
    if count == 0:
        pytest.skip("NVML works but reports no GPUs")


def test_real_gpu_discovery_and_slices():
    _real_nvml_or_skip()
    runner = CliRunner()
    result = runner.invoke(cli, ["discover", "--backend", "nvml", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["gpus"] and all(g["uuid"].startswith("GPU-") for g in data["gpus"])
    assert all(g["memoryBytes"] and g["pciBusID"] for g in data["gpus"])
    slices = runner.invoke(cli, ["driver", "slices", "--backend", "nvml", "--node-name", "gpu-node", "-o", "json"])
    assert slices.exit_code == 0, slices.output
    devices = [d for s in json.loads(slices.output)["items"] for d in s["spec"]["devices"]]
    assert devices and all(d["attributes"]["uuid"]["string"].startswith(("GPU-", "MIG-")) for d in devices)
    assert ctypes.sizeof(pynvml.c_nvmlGpuInstancePlacement_t) == 8
