"""mig-parted configs: generation, validation, placement feasibility."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections import Counter

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.cli.mig import command as mig_command
from gpudra.catalog import mig_models, gpu_model
from gpudra.mig.config import balanced_layout, generate_config, validate_config
from gpudra.mig.placement import feasible_multisets, find_placement

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "mig")
MODEL_IDS = [m.key for m in mig_models()]


@pytest.mark.parametrize("key", MODEL_IDS)
def test_generated_config_validates_on_its_gpu(key):
    model = gpu_model(key)
    config = generate_config([model])
    report = validate_config(yaml.safe_load(yaml.safe_dump(config)), [model])
    assert report.valid, report.findings
    names = set(config["mig-configs"])
    assert {"all-disabled", "all-enabled", "all-balanced"} <= names
    assert {p.config_name for p in model.profiles} <= names
    # one placement per mig-enabled entry that asks for devices
    asked = sum(1 for entries in config["mig-configs"].values() for e in entries if e.get("mig-devices"))
    assert len(report.checked) == asked


@pytest.mark.parametrize("key", MODEL_IDS)
def test_all_balanced_uses_the_smallest_profile_per_size(key):
    model = gpu_model(key)
    balanced = balanced_layout(model)
    g_counts = Counter()
    for name, count in balanced.items():
        profile = model.profile(name)
        assert "+" not in name
        g_counts[profile.compute_slices] += count
        # the smallest-memory profile of its compute size
        same_g = [p for p in model.profiles if p.compute_slices == profile.compute_slices and "+" not in p.name]
        assert profile.memory_mib == min(p.memory_mib for p in same_g)
    expected = {1: 2, 2: 1, 3: 1} if model.compute_slices == 7 else {1: 2, 2: 1}
    assert dict(g_counts) == expected
    assert find_placement(model, balanced).feasible


def test_all_balanced_names_match_mig_parted_defaults():
    assert balanced_layout(gpu_model("a100-40gb")) == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert balanced_layout(gpu_model("h100")) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert balanced_layout(gpu_model("NVIDIA H200")) == {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
    assert balanced_layout(gpu_model("gb300")) == {"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1}
    assert balanced_layout(gpu_model("NVIDIA A30")) == {"1g.6gb": 2, "2g.12gb": 1}


def test_mixed_node_gets_device_filters_and_validates():
    models = [gpu_model("a100-40gb"), gpu_model("h100")]
    config = generate_config(models)
    entries = config["mig-configs"]["all-1g.10gb"]
    # 1g.10gb exists on both: 4 of them on the A100-40GB, 7 on the H100
    by_filter = {tuple(e["device-filter"]): e["mig-devices"]["1g.10gb"] for e in entries}
    assert by_filter == {tuple(f"0x{d:04X}10DE" for d in models[0].pci_device_ids): 4,
                         tuple(f"0x{d:04X}10DE" for d in models[1].pci_device_ids): 7}
    assert "device-filter" not in config["mig-configs"]["all-disabled"][0]
    assert validate_config(config, models).valid
    assert validate_config(config).valid  # the filters alone say which GPU each entry is for


def test_validator_explains_too_many_memory_slices():
    doc = {"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True,
                                                   "mig-devices": {"3g.40gb": 2, "1g.10gb": 1}}]}}
    report = validate_config(doc, [gpu_model("a100-80gb")])
    assert not report.valid
    assert [f.message for f in report.findings] == [
        "3g.40gb ×2 + 1g.10gb needs 9 memory slices; an A100-80GB has 8"]


@pytest.mark.parametrize("devices, fragment", [
    ({"4g.40gb": 1, "1g.10gb": 4}, "needs 8 compute slices"),
    ({"1g.10gb": 8}, "exceeds the maximum of 7"),
    ({"1g.10gb+me": 1, "1g.10gb": 7}, "needs 8 compute slices"),
    ({"1g.10gb+me": 1, "4g.40gb+me": 1}, "has no MIG profile"),
    ({"2g.20gb": 3, "1g.20gb": 1, "1g.10gb": 1}, "needs 9 memory slices"),
    ({"1g.5gb": 1}, "has no MIG profile 1g.5gb"),
    ({"1c.2g.20gb": 1}, "compute-instance profiles"),
])
def test_validator_rejects_infeasible_or_unknown(devices, fragment):
    doc = {"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True, "mig-devices": devices}]}}
    report = validate_config(doc, [gpu_model("h100")])
    assert not report.valid
    assert any(fragment in f.message for f in report.findings), report.findings


def test_catalog_geometry_makes_the_slice_counts_exact():
    """With the standard placements, counts + memory + compute slices decide feasibility; the
    search still finds the placement (3g must go to 4:4 so four 1g fit at 0..3)."""
    model = gpu_model("h100")
    result = find_placement(model, {"3g.40gb": 1, "1g.10gb": 4})
    assert result.feasible
    assert {(i.profile.name, i.placement.start) for i in result.instances} == {
        ("3g.40gb", 4), ("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("1g.10gb", 3)}


def test_search_rejects_an_overlap_the_slice_counts_cannot_see():
    # hardware may report fewer placements than the catalog; then only the search can tell
    import dataclasses

    h100 = gpu_model("h100")
    narrow_1g = dataclasses.replace(h100.profile("1g.10gb"), placements=tuple(
        p for p in h100.profile("1g.10gb").placements if p.start < 4))
    model = dataclasses.replace(h100, profiles=tuple(narrow_1g if p.name == "1g.10gb" else p for p in h100.profiles))
    result = find_placement(model, {"4g.40gb": 1, "1g.10gb": 1})
    assert not result.feasible
    assert "no non-overlapping placement" in result.reason and "4g.40gb at 0:4" in result.reason


@pytest.mark.parametrize("doc, fragment", [
    ({"version": "v2", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}}, "must be \"v1\""),
    ({"version": "v1", "mig-configs": {"a": []}}, "non-empty list"),
    ({"version": "v1", "extra": 1, "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}},
     "unexpected field 'extra'"),
    ({"version": "v1", "mig-configs": {"a": [{"mig-enabled": False}]}}, "devices is required"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "some", "mig-enabled": False}]}}, "devices must be"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": "yes"}]}}, "mig-enabled"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True}]}}, "mig-devices is required"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False,
                                              "mig-devices": {"1g.10gb": 1}}]}}, "must be absent or empty"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True,
                                              "mig-devices": {"1g.10gb": 0}}]}}, "every count"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True,
                                              "mig-devices": {"big": 1}}]}}, "not a MIG profile name"),
    ({"version": "v1", "mig-configs": {"a": [{"device-filter": "H100", "devices": "all", "mig-enabled": True,
                                              "mig-devices": {}}]}}, "device-filter"),
])
def test_validator_checks_the_format(doc, fragment):
    report = validate_config(doc)
    assert not report.valid
    assert any(fragment in f.message for f in report.findings), report.findings


def test_shipped_example_configs():
    with open(os.path.join(DATA, "valid.yaml")) as fh:
        assert validate_config(yaml.safe_load(fh)).valid
    with open(os.path.join(DATA, "infeasible.yaml")) as fh:
        report = validate_config(yaml.safe_load(fh))
    assert not report.valid


def test_cli_configs_and_validate_round_trip(tmp_path):
    runner = CliRunner()
    result = runner.invoke(mig_command, ["configs", "--gpu", "NVIDIA H100 80GB HBM3", "--gpu", "NVIDIA A30"])
    assert result.exit_code == 0, result.output
    path = tmp_path / "cfg.yaml"
    path.write_text(result.output)
    assert yaml.safe_load(result.output)["version"] == "v1"
    ok = runner.invoke(mig_command, ["validate", "-f", str(path), "--gpu", "h100", "--gpu", "a30"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(mig_command, ["validate", "-f", os.path.join(DATA, "infeasible.yaml"), "--gpu", "a100-80gb"])
    assert bad.exit_code == 1
    assert "needs 9 memory slices; an A100-80GB has 8" in bad.output
    unknown = runner.invoke(mig_command, ["configs", "--gpu", "NVIDIA L4"])
    assert unknown.exit_code == 2 and "Traceback" not in unknown.output


def test_cli_configs_from_a_simulated_node_profile():
    result = CliRunner().invoke(mig_command, ["configs", "--backend", "simulated", "--profile", "dgx-h100"])
    assert result.exit_code == 0, result.output
    config = yaml.safe_load(result.output)
    assert config["mig-configs"]["all-balanced"][0]["mig-devices"] == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


# --- placement search versus brute force -------------------------------------------------------------


def _brute_force(model, counts) -> bool:
    wanted = [model.profile(name) for name, n in counts.items() for _ in range(n)]
    if any(n > model.profile(name).max_instances for name, n in counts.items()):
        return False
    if sum(p.compute_slices for p in wanted) > model.compute_slices:
        return False
    if sum(1 for p in wanted if p.media_extensions) > 1:
        return False
    # identical instances are interchangeable: pick a set of placements per profile
    per_profile = [itertools.combinations(model.profile(name).placements, n) for name, n in counts.items() if n]
    for choice in itertools.product(*per_profile):
        flat = [placement for group in choice for placement in group]
        if all(not a.overlaps(b) for a, b in itertools.combinations(flat, 2)):
            return True
    return False


@st.composite
def _layouts(draw):
    model = draw(st.sampled_from(mig_models()))
    names = [p.name for p in model.profiles]
    counts = draw(st.dictionaries(st.sampled_from(names), st.integers(min_value=1, max_value=4), max_size=4))
    return model, counts


@settings(max_examples=300, deadline=None)
@given(_layouts())
def test_placement_search_agrees_with_brute_force(case):
    model, counts = case
    result = find_placement(model, counts)
    assert result.feasible == _brute_force(model, counts)
    if result.feasible:
        placed = Counter(i.profile.name for i in result.instances)
        assert placed == Counter({k: v for k, v in counts.items() if v})
        for a, b in itertools.combinations(result.instances, 2):
            assert not a.placement.overlaps(b.placement)
        for instance in result.instances:
            assert instance.placement in instance.profile.placements


@pytest.mark.parametrize("key", ["h100-80gb", "a30"])
def test_enumerated_layouts_are_exactly_the_feasible_ones(key):
    model = gpu_model(key)
    feasible = feasible_multisets(model)
    names = [p.name for p in model.profiles]
    # every multiset with small counts: enumeration and search agree
    for counts in itertools.product(range(3), repeat=len(names)):
        layout = {n: c for n, c in zip(names, counts) if c}
        key_ = tuple(sorted(layout.items()))
        assert (key_ in feasible) == find_placement(model, layout).feasible, layout


def test_validate_reads_the_gpu_operators_configmap(tmp_path):
    config = {"version": "v1", "mig-configs": {
        "ok": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2, "1g.10gb": 1}}]}}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
                 "data": {"config.yaml": yaml.safe_dump(config), "README": "not a config"}}
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump(configmap))
    result = CliRunner().invoke(mig_command, ["validate", "-f", str(path), "--gpu", "a100-80gb"])
    assert result.exit_code == 1, result.output
    assert f"error: {path}:doc 1 (ConfigMap/default-mig-parted-config): data['config.yaml'].mig-configs.too-big" \
        in result.output
    assert "needs 9 memory slices" in result.output
    config["mig-configs"].pop("too-big")
    configmap["data"]["config.yaml"] = yaml.safe_dump(config)
    path.write_text(yaml.safe_dump(configmap))
    assert CliRunner().invoke(mig_command, ["validate", "-f", str(path), "--gpu", "a100-80gb"]).exit_code == 0
    configmap["data"] = {"README": "nothing here"}
    path.write_text(yaml.safe_dump(configmap))
    empty = CliRunner().invoke(mig_command, ["validate", "-f", str(path)])
    assert empty.exit_code == 1 and "holds no mig-parted config" in empty.output


def test_validate_prints_its_problems_as_gpudra_validate_does(tmp_path):
    """`-o table|wide|yaml|json`: the same problem rendering (gpudra.cli.output.report_problems) as `gpudra
    validate`: error lines on stdout, the summary on stderr; yaml/json the problem records."""
    infeasible = os.path.join(DATA, "infeasible.yaml")
    runner = CliRunner()
    table = runner.invoke(mig_command, ["validate", "-f", infeasible, "--gpu", "a100-80gb", "-o", "table"])
    assert table.exit_code == 1
    lines = table.stdout.splitlines()
    assert lines and all(line.startswith(f"error: {infeasible}: mig-configs.") for line in lines), table.stdout
    assert re.fullmatch(r"\d+ MIG configs? in .*infeasible\.yaml: \d+ errors?, \d+ warnings?",
                        table.stderr.splitlines()[-1]), table.stderr
    assert runner.invoke(mig_command, ["validate", "-f", infeasible, "--gpu", "a100-80gb", "-o", "wide"]).stdout \
        == table.stdout
    as_json = runner.invoke(mig_command, ["validate", "-f", infeasible, "--gpu", "a100-80gb", "-o", "json"])
    as_yaml = runner.invoke(mig_command, ["validate", "-f", infeasible, "--gpu", "a100-80gb", "-o", "yaml"])
    assert as_json.exit_code == as_yaml.exit_code == 1
    records = json.loads(as_json.stdout)
    assert records == yaml.safe_load(as_yaml.stdout)
    assert len(records) == len(lines)
    assert {r["source"] for r in records} == {infeasible} and {r["severity"] for r in records} == {"error"}
    assert any("needs 9 memory slices" in r["message"] for r in records)
    assert all(r["path"].startswith("mig-configs.") for r in records)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"version": "v1", "mig-configs": {
        "a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "b": [{"devices": "all", "mig-enabled": False}]}}))
    ok = runner.invoke(mig_command, ["validate", "-f", str(good), "--gpu", "a100-80gb"])
    assert ok.exit_code == 0 and ok.stdout == ""
    assert ok.stderr.splitlines()[-1] == f"2 MIG configs in {good} are valid"
    ok_json = runner.invoke(mig_command, ["validate", "-f", str(good), "--gpu", "a100-80gb", "-o", "json", "-v"])
    assert ok_json.exit_code == 0 and json.loads(ok_json.stdout) == []


def test_cli_configs_prints_json_too():
    runner = CliRunner()
    args = ["configs", "--gpu", "NVIDIA H100 80GB HBM3", "--gpu", "a30"]
    as_yaml = runner.invoke(mig_command, args)
    as_json = runner.invoke(mig_command, [*args, "-o", "json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == yaml.safe_load(as_yaml.stdout)
    assert validate_config(json.loads(as_json.stdout), [gpu_model("h100"), gpu_model("a30")]).valid
    configmap = yaml.safe_load(runner.invoke(mig_command, [*args, "-o", "configmap"]).stdout)
    assert yaml.safe_load(configmap["data"]["config.yaml"]) == json.loads(as_json.stdout)
