"""The NVML backend against a fake `pynvml` module backed by simulated GPUs, plus a real-GPU check.

The fake answers NVML calls from a `SimulatedBackend`, so the NVML backend must report the
very same inventory the simulation has (names, UUIDs, memory, PCI ids, MIG devices) and its
MIG create/destroy calls must land on the simulated hardware.
"""

from __future__ import annotations

import ctypes
import json
import sys
import types

import pynvml
import pytest
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.discovery import DiscoveryError, MigError, open_backend
from gpudra.discovery.nvml import ARCHITECTURES, NvmlBackend, mig_profile_name, normalize_pci_bus_id
from gpudra.mig import catalog as mig_catalog


class FakeNvmlError(Exception):
    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class _Gi:
    def __init__(self, minor: int, gi_id: int):
        self.minor, self.gi_id = minor, gi_id


class _Mig:
    def __init__(self, minor: int, gi_id: int, ci_id: int, uuid: str):
        self.minor, self.gi_id, self.ci_id, self.uuid = minor, gi_id, ci_id, uuid


def fake_pynvml(sim, *, init_error: int | None = None) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNvmlError
    m.NVML_GPU_INSTANCE_PROFILE_COUNT = 18
    m.c_nvmlGpuInstancePlacement_t = pynvml.c_nvmlGpuInstancePlacement_t
    m.calls = []
    arch_codes = {v: k for k, v in ARCHITECTURES.items()}

    def gpu(h):
        return sim.inventory().gpus[h]

    def mig_model(h):
        return mig_catalog.find_gpu_model(gpu(h).product_name)

    def init():
        if init_error is not None:
            raise FakeNvmlError(init_error)

    def not_supported(*_):
        raise FakeNvmlError(3)

    def mig_mode(h):
        if not gpu(h).mig_capable:
            raise FakeNvmlError(3)
        on = int(gpu(h).mig_enabled)
        return [on, on]

    def profile_info(h, index):
        model = mig_model(h)
        for p in model.profiles if model else ():
            if p.nvml_index == index:
                return types.SimpleNamespace(id=p.profile_id, sliceCount=p.compute_slices, memorySizeMB=p.memory_mib,
                                             multiprocessorCount=p.multiprocessors or 0,
                                             copyEngineCount=p.copy_engines or 0, decoderCount=p.decoders or 0,
                                             encoderCount=p.encoders or 0, jpegCount=p.jpeg_engines or 0,
                                             ofaCount=p.ofa_engines or 0)
        raise FakeNvmlError(3)

    def placements(h, profile_id, buffer, count_ref):
        profile = mig_model(h).profile_by_id(profile_id)
        for i, pl in enumerate(profile.placements):
            buffer[i].start, buffer[i].size = pl.start, pl.size
        count_ref._obj.value = len(profile.placements)

    def mig_handle(h, index):
        migs = gpu(h).mig_devices
        if index >= len(migs):
            raise FakeNvmlError(6)
        d = migs[index]
        return _Mig(h, d.gi_id, d.ci_id, d.uuid)

    def gi_by_id(h, gi_id):
        if not any(d.gi_id == gi_id for d in gpu(h).mig_devices):
            raise FakeNvmlError(6)
        return _Gi(h, gi_id)

    def gi_info(gi):
        d = next(d for d in gpu(gi.minor).mig_devices if d.gi_id == gi.gi_id)
        return types.SimpleNamespace(profileId=d.gi_profile_id,
                                     placement=types.SimpleNamespace(start=d.placement_start, size=d.placement_size))

    def set_mig_mode(h, mode):
        m.calls.append(("set_mig_mode", h, mode))
        sim.set_mig_mode(h, bool(mode))
        return 0

    def create_gi(h, profile_id, placement_ref):
        placement = placement_ref._obj
        m.calls.append(("create_gi", h, profile_id, placement.start, placement.size))
        try:
            created = sim.create_mig_device(h, profile_id, placement.start)
        except MigError:
            raise FakeNvmlError(23) from None  # INSUFFICIENT_RESOURCES
        return _Gi(h, created.gi_id)

    def ci_by_id(gi, ci_id):
        if ci_id != 0 or not any(d.gi_id == gi.gi_id for d in gpu(gi.minor).mig_devices):
            raise FakeNvmlError(6)
        return ("ci", gi.minor, gi.gi_id, ci_id)

    def destroy_gi(gi):
        m.calls.append(("destroy_gi", gi.minor, gi.gi_id))
        sim.destroy_mig_device(gi.minor, gi.gi_id)

    inv = sim.inventory()
    m.__dict__.update(
        nvmlInit=init, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: inv.driver_version,
        nvmlSystemGetCudaDriverVersion=lambda: int(inv.cuda_driver_version.split(".")[0]) * 1000
        + int(inv.cuda_driver_version.split(".")[1]) * 10,
        nvmlDeviceGetCount=lambda: len(inv.gpus),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: gpu(h).product_name,
        nvmlDeviceGetUUID=lambda h: h.uuid if isinstance(h, _Mig) else gpu(h).uuid,
        nvmlDeviceGetMinorNumber=lambda h: gpu(h).minor,
        nvmlDeviceGetBrand=lambda h: 14,
        nvmlDeviceGetArchitecture=lambda h: arch_codes[gpu(h).architecture],
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=gpu(h).memory_bytes),
        nvmlDeviceGetCudaComputeCapability=lambda h: tuple(int(x) for x in gpu(h).cuda_compute_capability.split(".")),
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(
            busId=("0000" + gpu(h).pci_bus_id).upper().encode()),
        nvmlDeviceGetNumaNodeId=lambda h: gpu(h).numa_node,
        nvmlDeviceGetMigMode=mig_mode,
        nvmlDeviceGetGpuInstanceProfileInfo=profile_info,
        nvmlDeviceGetGpuInstancePossiblePlacements=placements,
        nvmlDeviceGetMaxMigDeviceCount=lambda h: 7 if gpu(h).mig_capable else not_supported(),
        nvmlDeviceGetMigDeviceHandleByIndex=mig_handle,
        nvmlDeviceGetGpuInstanceId=lambda mig: mig.gi_id,
        nvmlDeviceGetComputeInstanceId=lambda mig: mig.ci_id,
        nvmlDeviceGetGpuInstanceById=gi_by_id,
        nvmlGpuInstanceGetInfo=gi_info,
        nvmlDeviceSetMigMode=set_mig_mode,
        nvmlDeviceCreateGpuInstanceWithPlacement=create_gi,
        nvmlGpuInstanceGetComputeInstanceProfileInfo=lambda gi, idx, eng: types.SimpleNamespace(id=idx),
        nvmlGpuInstanceCreateComputeInstance=lambda gi, pid: m.calls.append(("create_ci", gi.minor, gi.gi_id, pid)),
        nvmlGpuInstanceGetComputeInstanceById=ci_by_id,
        nvmlComputeInstanceDestroy=lambda ci: m.calls.append(("destroy_ci",) + ci[1:]),
        nvmlGpuInstanceDestroy=destroy_gi,
    )
    return m


def _comparable(inventory):
    data = inventory.to_dict()
    data.pop("profile", None)
    data.pop("backend")
    for g in data["gpus"]:
        for key in ("pcieRoot", "nvlinkDomain", "model"):
            g.pop(key, None)
    return data


@pytest.mark.parametrize("profile", ["dgx-h100", "hgx-a100-mig", "a30-mig", "l4-node", "dgx-b200", "t4-node"])
def test_nvml_backend_reports_what_the_hardware_has(profile):
    sim = open_backend("simulated", profile=profile, node_name="n")
    nvml = NvmlBackend(module=fake_pynvml(sim))
    assert _comparable(nvml.inventory()) == _comparable(sim.inventory())
    # MIG profile names derived from NVML memory sizes (go-nvlib rule) match the catalog names
    for gpu in sim.inventory().gpus:
        assert sorted((p.name, p.gi_profile_id, p.placement_starts) for p in nvml.mig_profiles(gpu.minor)) == sorted(
            (p.name, p.gi_profile_id, p.placement_starts) for p in sim.mig_profiles(gpu.minor))


def test_nvml_mig_create_and_destroy_reach_the_hardware():
    sim = open_backend("simulated", profile="dgx-h100", node_name="n")
    module = fake_pynvml(sim)
    nvml = NvmlBackend(module=module)
    created = nvml.create_mig_device(5, 15, 2)
    assert created.name == "gpu-5-mig-1g20gb-15-2"
    assert ("set_mig_mode", 5, 1) in module.calls and ("create_gi", 5, 15, 2, 2) in module.calls
    assert [m.uuid for m in sim.inventory().gpus[5].mig_devices] == [created.uuid]
    with pytest.raises(MigError, match="creating 2g.20gb at 2 on GPU 5"):
        nvml.create_mig_device(5, 14, 2)
    assert nvml.destroy_mig_device(5, created.gi_id) is True
    assert ("destroy_ci", 5, created.gi_id, 0) in module.calls
    assert nvml.destroy_mig_device(5, created.gi_id) is False  # already gone is fine
    assert sim.inventory().gpus[5].mig_devices == []


@pytest.mark.parametrize("code, fragment", [(12, "libnvidia-ml.so.1"), (9, "kernel driver is not loaded"),
                                            (4, "no permission")])
def test_missing_library_or_driver_is_a_clear_error(monkeypatch, code, fragment):
    sim = open_backend("simulated", profile="t4-node", node_name="n")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(sim, init_error=code))
    with pytest.raises(DiscoveryError, match=fragment):
        open_backend("nvml")
    result = CliRunner().invoke(cli, ["discover", "--backend", "nvml"])
    assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["driver", "slices", "--backend", "nvml", "--node-name", "n"])
    assert result.exit_code == 2 and fragment in result.output


def test_cli_with_fake_nvml(monkeypatch):
    sim = open_backend("simulated", profile="hgx-a100-mig", node_name="n")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(sim))
    result = CliRunner().invoke(cli, ["discover", "--backend", "nvml", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["backend"] == "nvml"
    slices = CliRunner().invoke(cli, ["driver", "slices", "--backend", "nvml", "--node-name", "n", "-o", "json"])
    names = [d["name"] for s in json.loads(slices.output)["items"] for d in s["spec"]["devices"]]
    assert "gpu-0-mig-1g10gb-19-6" in names and "gpu-7" in names and "gpu-0" not in names


def test_helpers():
    assert normalize_pci_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalize_pci_bus_id(b"00000001:AB:00.0") == "0001:ab:00.0"
    assert mig_profile_name(0, 9984, 81559 * 2**20) == "1g.10gb"
    assert mig_profile_name(7, 9984, 81559 * 2**20) == "1g.10gb+me"
    assert mig_profile_name(4, 80896, 81559 * 2**20) == "7g.80gb"


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
