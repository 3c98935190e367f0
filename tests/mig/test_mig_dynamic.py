"""Dynamic-MIG ResourceSlice layout (partitionable devices, k8s >= 1.35)."""

from __future__ import annotations

import re

import pytest

from gpudra.api.quantity import Quantity
from gpudra.catalog import mig_models, gpu_model
from gpudra.mig.dynamic import (
    DynamicMigGpu,
    binary_quantity,
    combined_resource_slices,
    counter_set,
    gpu_devices,
    mig_device_name,
    parse_mig_device_name,
    resolve_mig_device,
    resource_slices,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _gpu(model="h100", minor=0):
    return DynamicMigGpu.of(minor, model, f"GPU-{minor:08d}-aaaa-bbbb-cccc-000000000000",
                            attributes={"productName": {"string": gpu_model(model).product_names[0]},
                                        "driverVersion": {"version": "580.95.5"}})


def test_h100_layout_matches_the_nvidia_driver():
    devices = gpu_devices(_gpu())
    names = [d["name"] for d in devices]
    assert len(devices) == 26
    assert names[0] == "gpu-0"
    assert names == sorted(names)
    assert "gpu-0-mig-1g10gb-me-20-6" in names and "gpu-0-mig-7g80gb-0-0" in names
    assert [n for n in names if "-3g40gb-" in n] == ["gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4"]
    mig = next(d for d in devices if d["name"] == "gpu-0-mig-1g10gb-19-3")
    assert mig["attributes"]["type"] == {"string": "mig"}
    assert mig["attributes"]["profile"] == {"string": "1g.10gb"}
    assert mig["attributes"]["parentUUID"]["string"].startswith("GPU-")
    assert "uuid" not in mig["attributes"]  # the instance does not exist yet
    assert mig["capacity"]["multiprocessors"] == {"value": "16"}
    consumed = mig["consumesCounters"][0]
    assert consumed["counterSet"] == "gpu-0-counter-set"
    assert [k for k in consumed["counters"] if k.startswith("memory-slice-")] == ["memory-slice-3"]


@pytest.mark.parametrize("key", [m.key for m in mig_models()])
def test_counter_set_and_device_shapes_respect_api_limits(key):
    model = gpu_model(key)
    gpu = _gpu(key, minor=3)
    counters = counter_set(model, 3)
    assert counters["name"] == "gpu-3-counter-set"
    assert len(counters["counters"]) <= 32
    assert all(DNS_LABEL.match(name) for name in counters["counters"])
    slices = [name for name in counters["counters"] if name.startswith("memory-slice-")]
    assert len(slices) == model.memory_slices
    devices = gpu_devices(gpu)
    assert len(devices) <= 64  # devices with consumesCounters: at most 64 per slice
    expected = sum(len(p.placements) for p in model.profiles) + (1 if model.dynamic_mig_capable else 0)
    assert len(devices) == expected
    set_values = {k: Quantity.parse(v["value"]) for k, v in counters["counters"].items()}
    for device in devices:
        assert len(device["attributes"]) + len(device["capacity"]) <= 32
        assert all(C_IDENTIFIER.match(name) for name in device["capacity"])
        (consumption,) = device["consumesCounters"]
        for name, value in consumption["counters"].items():
            assert name in set_values
            assert Quantity.parse(value["value"]) <= set_values[name]


def test_full_gpu_consumes_every_counter():
    gpu = _gpu()
    full = gpu_devices(gpu)[0]
    assert full["name"] == "gpu-0" and full["attributes"]["type"] == {"string": "gpu"}
    assert full["consumesCounters"][0]["counters"] == counter_set(gpu.model, 0)["counters"]


def test_ampere_announces_no_full_gpu():
    names = [d["name"] for d in gpu_devices(_gpu("a100-80gb"))]
    assert "gpu-0" not in names and len(names) == 25


def test_mig_names_round_trip():
    model = gpu_model("h100")
    for profile in model.profiles:
        for placement in profile.placements:
            name = mig_device_name(2, profile, None, placement.start)
            parsed = parse_mig_device_name(name)
            assert (parsed.parent_minor, parsed.profile_id, parsed.start) == (2, profile.profile_id, placement.start)
            ref = resolve_mig_device(name, {2: model})
            assert (ref.profile, ref.placement) == (profile, placement)
    assert mig_device_name(0, "1g.10gb+me", 20, 0) == "gpu-0-mig-1g10gb-me-20-0"
    assert parse_mig_device_name("gpu-0") is None


@pytest.mark.parametrize("num_bytes, text", [(9984 * 2**20, "9984Mi"), (80 * 2**30, "80Gi"), (1, "1"), (0, "0")])
def test_binary_quantity(num_bytes, text):
    assert binary_quantity(num_bytes) == text
    assert Quantity.parse(text).as_int() == num_bytes


def test_split_layout_for_a_node():
    gpus = [_gpu(minor=0), _gpu(minor=1)]
    slices = resource_slices("node-a", gpus, node_uid="uid-1")
    assert len(slices) == 3
    assert [len(s["spec"].get("sharedCounters", [])) for s in slices] == [2, 0, 0]
    assert "devices" not in slices[0]["spec"]
    assert all(s["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 3} for s in slices)
    assert slices[2]["spec"]["devices"][0]["name"] == "gpu-1"
    assert slices[0]["metadata"]["ownerReferences"][0]["kind"] == "Node"
    combined = combined_resource_slices("node-a", gpus)
    assert [len(s["spec"]["sharedCounters"]) for s in combined] == [1, 1]


def test_slices_pass_api_validation():
    from gpudra.api import load, validate
    slices = resource_slices("node-a", [_gpu(minor=0), _gpu("h200", minor=1)])
    docs = [load.Document(obj, "generated", i + 1) for i, obj in enumerate(slices)]
    problems = [p for p in validate.validate_documents(docs) if p.severity == "error"]
    assert problems == []


def test_cli_slices_and_profiles():
    import yaml
    from click.testing import CliRunner

    from gpudra.cli.mig import command

    runner = CliRunner()
    result = runner.invoke(command, ["slices", "--gpu", "NVIDIA H200", "--count", "2", "--node", "n1"])
    assert result.exit_code == 0, result.output
    slices = list(yaml.safe_load_all(result.output))
    assert [len(s["spec"].get("devices", [])) for s in slices] == [0, 26, 26]
    assert slices[0]["spec"]["sharedCounters"][1]["name"] == "gpu-1-counter-set"
    listing = runner.invoke(command, ["profiles", "--gpu", "b200"])
    assert listing.exit_code == 0
    assert "3g.90gb" in listing.output and "0:4 4:4" in listing.output
    assert runner.invoke(command, ["profiles", "--gpu", "nope"]).exit_code == 2
