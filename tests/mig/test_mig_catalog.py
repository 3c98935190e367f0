"""The MIG profile catalog agrees with itself: placements, counts, names, engines."""

from __future__ import annotations

import itertools

import pytest

from gpudra.catalog import (
    mig_models,
    Placement,
    UnknownGpuModel,
    UnknownMigProfile,
    gpu_model,
    profile_name_for_memory,
)
from gpudra.mig.placement import enumerate_layouts, max_packing

REQUIRED = ["a30", "a100-40gb", "a100-80gb", "h100-80gb", "h100-nvl", "h100-96gb", "h200", "gh200", "b200", "gb200",
            "b300", "gb300"]
MODEL_IDS = [m.key for m in mig_models()]


def test_catalog_covers_every_required_gpu():
    assert sorted(m.key for m in mig_models()) == sorted(REQUIRED)


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "h100-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100 80GB PCIe", "a100-80gb"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA A30", "a30"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA GH200 144G HBM3e", "gh200"),
    ("h100-80gb", "h100-80gb"),
    ("a100", "a100-80gb"),  # as in discovery: the bare name means the 80GB part
    ("H100-80GB", "h100-80gb"),
    ("0x233010DE", "h100-80gb"),
    ("0x2901", "b200"),
])
def test_lookup_by_nvml_name_alias_and_pci_id(name, key):
    assert gpu_model(name).key == key


@pytest.mark.parametrize("name", ["NVIDIA L4", "Tesla T4", "", "0x1234"])
def test_lookup_of_gpus_without_mig_fails_cleanly(name):
    with pytest.raises(UnknownGpuModel):
        gpu_model(name)


@pytest.mark.parametrize("key", MODEL_IDS)
def test_every_placement_lies_within_the_memory_slices(key):
    model = gpu_model(key)
    for profile in model.profiles:
        assert profile.placements, profile.name
        for placement in profile.placements:
            assert placement.size == profile.memory_slices, (profile.name, placement)
            assert 0 <= placement.start and placement.end <= model.memory_slices, (profile.name, placement)
        assert len(set(profile.placements)) == len(profile.placements)
        assert 1 <= profile.compute_slices <= model.compute_slices


@pytest.mark.parametrize("key", MODEL_IDS)
def test_max_instances_agree_with_placements(key):
    model = gpu_model(key)
    for profile in model.profiles:
        packing = max_packing(model, profile)
        by_compute = model.compute_slices // profile.compute_slices
        if profile.media_extensions:
            # the media engines exist once per GPU: +me profiles are limited to one instance
            assert profile.max_instances == 1, profile.name
        else:
            assert profile.max_instances == min(packing, by_compute), profile.name


@pytest.mark.parametrize("key", MODEL_IDS)
def test_max_packing_matches_brute_force(key):
    model = gpu_model(key)
    for profile in model.profiles:
        best = 0
        for r in range(len(profile.placements) + 1):
            for combo in itertools.combinations(profile.placements, r):
                if all(not a.overlaps(b) for a, b in itertools.combinations(combo, 2)):
                    best = max(best, r)
        assert max_packing(model, profile) == best


@pytest.mark.parametrize("key", MODEL_IDS)
def test_profile_names_follow_nvlib_naming_from_memory(key):
    model = gpu_model(key)
    for profile in model.profiles:
        base, plus, suffix = profile.name.partition("+")
        expected = profile_name_for_memory(profile.memory_mib, profile.compute_slices, model.total_memory_mib,
                                           plus + suffix)
        assert expected == profile.name


@pytest.mark.parametrize("key", MODEL_IDS)
def test_profile_ids_unique_and_full_gpu_profile_spans_the_gpu(key):
    model = gpu_model(key)
    ids = [p.profile_id for p in model.profiles]
    assert len(set(ids)) == len(ids)
    biggest = max(model.profiles, key=lambda p: p.memory_slices)
    assert biggest.placements == (Placement(0, model.memory_slices),)
    assert biggest.compute_slices == model.compute_slices
    assert all(p.memory_mib <= model.total_memory_mib for p in model.profiles)


@pytest.mark.parametrize("key", MODEL_IDS)
def test_every_packing_fits_the_engines_and_memory_of_the_whole_gpu(key):
    """What the counter set of dynamic MIG relies on: any set of coexisting instances stays within
    the largest profile's engine counts and memory."""
    model = gpu_model(key)
    dims = ["multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines"]
    known = [d for d in dims if all(p.engine_counts[d] is not None for p in model.profiles)]
    limit = {d: max(p.engine_counts[d] for p in model.profiles) for d in known}
    memory_limit = max(p.memory_mib for p in model.profiles)
    for layout in enumerate_layouts(model):
        for d in known:
            assert sum(i.profile.engine_counts[d] for i in layout) <= limit[d], (d, layout)
        assert sum(i.profile.memory_mib for i in layout) <= memory_limit


def test_hopper_engine_counts_as_published():
    h100 = gpu_model("NVIDIA H100 80GB HBM3")
    one = h100.profile("1g.10gb")
    assert (one.profile_id, one.multiprocessors, one.memory_mib) == (19, 16, 9984)
    assert h100.profile("1g.10gb+me").ofa_engines == 1
    assert h100.profile("7g.80gb").copy_engines == 8
    assert [p.name for p in h100.profiles] == ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
                                              "7g.80gb"]


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(UnknownMigProfile, match="1g.10gb"):
        gpu_model("h100").profile("1g.5gb")


def test_a30_geometry():
    a30 = gpu_model("NVIDIA A30")
    assert (a30.compute_slices, a30.memory_slices) == (4, 4)
    assert {p.name: p.max_instances for p in a30.profiles} == {
        "1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1}


def test_only_ampere_lacks_dynamic_mig_full_gpu():
    assert not gpu_model("a100-80gb").dynamic_mig_capable
    assert gpu_model("h100").dynamic_mig_capable and gpu_model("b200").dynamic_mig_capable


def test_mig_profiles_prints_every_output_format_of_the_cli_contract():
    import json

    import yaml
    from click.testing import CliRunner

    from gpudra.cli.mig import command

    runner = CliRunner()
    as_json = json.loads(runner.invoke(command, ["profiles", "--gpu", "h100-80gb", "-o", "json"]).stdout)
    as_yaml = yaml.safe_load(runner.invoke(command, ["profiles", "--gpu", "h100-80gb", "-o", "yaml"]).stdout)
    assert as_json == as_yaml
    (model,) = as_json
    catalog = gpu_model("h100-80gb")
    assert model["key"] == "h100-80gb" and model["computeSlices"] == catalog.compute_slices
    assert [p["name"] for p in model["profiles"]] == [p.name for p in catalog.profiles]
    first = catalog.profiles[0]
    assert model["profiles"][0]["placements"] == [{"start": pl.start, "size": pl.size} for pl in first.placements]
    table = runner.invoke(command, ["profiles", "--gpu", "h100-80gb", "-o", "table"]).stdout
    wide = runner.invoke(command, ["profiles", "--gpu", "h100-80gb", "-o", "wide"]).stdout
    assert "PLACEMENTS" in table and " SM " not in table and " SM " in wide
