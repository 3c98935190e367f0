"""The MIG profile catalog: names and instance counts as NVIDIA publishes them; placements and engines agree."""

from __future__ import annotations

import itertools

import pytest

from gpudra.catalog import (
    mig_models,
    Placement,
    UnknownGpuModel,
    UnknownMigProfile,
    gpu_model,
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


# Profile names and how many instances of each fit on the GPU, as NVIDIA publishes them (copied as data):
#   GUIDE: the MIG user guide's profile tables, https://docs.nvidia.com/datacenter/tesla/mig-user-guide/
#          supported-mig-profiles.html ("Number of Instances Available"; A30-24GB in full, A100-SXM4-40GB up to
#          3g.20gb, and its note naming the A100-SXM4-80GB profiles 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb,
#          4g.40gb, 7g.80gb);
#   PARTED: NVIDIA mig-parted deployments/systemd/config-default.yaml (commit 1400787269cadb4f91db863a4b9f9af5c8fabcd7),
#          https://github.com/NVIDIA/mig-parted/blob/main/deployments/systemd/config-default.yaml: each `all-<profile>`
#          entry is the largest count of that profile, its comment (or device-filter) names the GPUs; the
#          `all-balanced` entries tie the unnamed 2g/3g profiles to their GPU;
#   HYPERPOD: aws/sagemaker-hyperpod-cli PR 403, the P6-B300 profiles "1g.34gb (x7), 1g.67gb (x4), 2g.67gb (x3),
#          3g.135gb (x2), 4g.135gb (x1), 7g.269gb (x1)" (from GPU Operator v25.3.0, device-filter 0x318210DE).
# Left out: GB200, whose PARTED names (1g.24gb, 2g.47gb, 3g.95gb, 7g.189gb for 0x2941) differ from the nvidia-smi
# -lgip output the catalog follows (1g.23gb, 3g.93gb, 7g.186gb); GH200 144G, GB300, B200's 4g/7g and the +me
# profiles past 1g, which no table here ties to one GPU.
PUBLISHED_PROFILES: dict[str, tuple[str, dict[str, int]]] = {
    "a30": ("GUIDE, PARTED", {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1}),
    "a100-40gb": ("GUIDE, PARTED", {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2,
                                    "4g.20gb": 1, "7g.40gb": 1}),
    "a100-80gb": ("GUIDE (names), PARTED", {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2,
                                            "4g.40gb": 1, "7g.80gb": 1}),
    "h100-80gb": ("PARTED", {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1,
                             "7g.80gb": 1}),
    "h100-nvl": ("PARTED", {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1,
                            "7g.94gb": 1}),
    "h100-96gb": ("PARTED", {"1g.12gb": 7, "1g.12gb+me": 1, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1}),
    "h200": ("PARTED", {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1,
                        "7g.141gb": 1}),
    "b200": ("PARTED", {"1g.23gb": 7, "1g.23gb+me": 1, "2g.45gb": 3, "3g.90gb": 2}),
    "b300": ("HYPERPOD", {"1g.34gb": 7, "1g.67gb": 4, "2g.67gb": 3, "3g.135gb": 2, "4g.135gb": 1, "7g.269gb": 1}),
}
# Where a source gives every profile of the GPU, the catalog has exactly these; elsewhere at least these.
COMPLETE = {"a30", "a100-40gb", "a100-80gb", "h100-80gb", "h100-nvl", "h200"}


@pytest.mark.parametrize("key", sorted(PUBLISHED_PROFILES))
def test_profile_names_and_instance_counts_are_nvidias(key):
    _, published = PUBLISHED_PROFILES[key]
    catalog = {profile.name: profile.max_instances for profile in gpu_model(key).profiles}
    assert {name: catalog.get(name) for name in published} == published
    if key in COMPLETE:
        assert sorted(catalog) == sorted(published)


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
