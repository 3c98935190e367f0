"""Layout planner."""

from __future__ import annotations

import os
from collections import Counter

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli.mig import command as mig_command
from gpudra.catalog import gpu_model
from gpudra.mig.config import validate_config
from gpudra.mig.dynamic import resolve_mig_device
from gpudra.mig.placement import find_placement
from gpudra.mig.planner import FULL_GPU, PlanError, demands_from_objects, plan, render_plan

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "mig")


def _claim(name, expression, count=1, device_class="mig.nvidia.com"):
    exactly = {"deviceClassName": device_class, "count": count}
    if expression:
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}}}


def _load(name):
    with open(os.path.join(DATA, name)) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


H100 = gpu_model("h100")


def test_demands_pick_profiles_from_selectors():
    demands = demands_from_objects(_load("claims-mix.yaml"), H100)
    assert len(demands) == 7
    by_label = {d.label: d for d in demands}
    assert [p.name for p in by_label["ml/embeddings/mig"].options[0].profiles][:2] == ["1g.20gb", "2g.20gb"]
    finetune = by_label["ml/finetune/mig"].options[0].profiles
    assert [p.name for p in finetune] == ["3g.40gb", "4g.40gb", "7g.80gb"]
    video = by_label["ml/video/mig"]
    assert [o.request for o in video.options] == ["mig/with-media", "mig/any-small"]
    assert [p.name for p in video.options[0].profiles] == ["1g.10gb+me"]


def test_static_plan_is_feasible_and_serves_the_mix():
    demands = demands_from_objects(_load("claims-mix.yaml"), H100)
    result = plan(H100, 2, demands)
    assert result.static_usage.served == 7 and not result.static_usage.unserved
    for gpu in result.static:
        assert find_placement(H100, gpu.counts()).feasible
    assert Counter(result.static_profiles.values()) == Counter(
        {"1g.10gb": 3, "1g.20gb": 1, "3g.40gb": 2, "1g.10gb+me": 1})
    assert validate_config(result.mig_parted_config(), [H100]).valid
    # the dynamic simulation never puts overlapping instances on a GPU
    for gpu_index, gpu in enumerate(result.dynamic):
        refs = [resolve_mig_device(name, {gpu_index: H100}) for _, name in gpu]
        for i, a in enumerate(refs):
            for b in refs[i + 1:]:
                assert not a.placement.overlaps(b.placement), (a, b)


def test_plan_reports_what_cannot_be_served():
    demands = demands_from_objects([_claim("big", "device.attributes['gpu.nvidia.com'].profile == '4g.40gb'",
                                           count=3)], H100)
    result = plan(H100, 2, demands)
    # a claim is allocated all or nothing: three 4g.40gb on two GPUs serve nobody, in both modes
    assert (result.static_usage.claims_served, result.static_usage.claims_total) == (0, 1)
    assert result.static_usage.served == 0 and result.static_usage.unserved == ["ns/big/r"] * 3
    assert result.dynamic_usage.served == 0
    assert all(not gpu.assigned for gpu in result.static)
    # the report names each unserved request once, with its count
    assert "  unserved: ns/big/r ×3" in render_plan(result).splitlines()


def test_plan_prefers_serving_more_claims_over_packing_big_ones_first():
    # one claim wants two whole-GPU-sized instances, another three small ones: on one A100-40GB only the
    # small one can be served, and the plan must not waste the GPU on half of the big claim
    a100 = gpu_model("a100-40gb")
    demands = demands_from_objects([
        _claim("big", "device.attributes['gpu.nvidia.com'].profile == '7g.40gb'", count=2),
        _claim("small", "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'", count=3),
    ], a100)
    result = plan(a100, 1, demands)
    assert result.static_profiles == {2: "1g.5gb", 3: "1g.5gb", 4: "1g.5gb"}
    assert result.static_usage.claims_served == 1


def test_plan_counts_stranded_slices():
    # two 3g.40gb use all 8 memory slices but only 6 of 7 compute slices: one compute slice is stranded
    demands = demands_from_objects([_claim("half", "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'",
                                           count=2)], H100)
    usage = plan(H100, 1, demands).static_usage
    assert (usage.memory_slices_stranded, usage.compute_slices_stranded) == (0, 1)


def test_first_fit_by_name_can_pick_a_larger_profile_than_the_plan():
    # on an A100-40GB "1g.10gb" sorts before "1g.5gb": one 1g request gets the double-memory profile
    a100 = gpu_model("a100-40gb")
    demands = demands_from_objects([_claim("one", "device.capacity['gpu.nvidia.com'].multiprocessors"
                                                  ".compareTo(quantity('14')) == 0")], a100)
    result = plan(a100, 1, demands)
    assert result.static_profiles == {0: "1g.5gb"}
    assert result.dynamic_profiles == {0: "1g.10gb"}


def test_full_gpu_requests_take_a_whole_gpu():
    demands = demands_from_objects([_claim("whole", "", device_class="gpu.nvidia.com"),
                                    _claim("small", "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")], H100)
    result = plan(H100, 2, demands)
    assert result.static_profiles == {0: FULL_GPU, 1: "1g.10gb"}
    assert result.dynamic_profiles == {0: FULL_GPU, 1: "1g.10gb"}
    assert [name for _, name in result.dynamic[0]] == ["gpu-0"]


def test_plan_errors_are_clean():
    with pytest.raises(PlanError, match="unknown DeviceClass"):
        demands_from_objects([_claim("x", "", device_class="nope")], H100)
    with pytest.raises(PlanError, match="does not compile|outside what the planner understands"):
        demands_from_objects([_claim("x", "device.attributes['a'].b ==")], H100)
    with pytest.raises(PlanError, match="no ResourceClaim"):
        demands_from_objects([], H100)


def test_cli_plan(tmp_path):
    runner = CliRunner()
    result = runner.invoke(mig_command, ["plan", "-f", os.path.join(DATA, "claims-mix.yaml"), "--gpu",
                                         "NVIDIA H100 80GB HBM3", "--count", "2"])
    assert result.exit_code == 0, result.output
    assert "Static layout:" in result.output and "Dynamic MIG" in result.output
    as_yaml = runner.invoke(mig_command, ["plan", "-f", os.path.join(DATA, "claims-mix.yaml"), "--gpu", "h100",
                                          "-o", "yaml", "--count", "2"])
    data = yaml.safe_load(as_yaml.output)
    assert data["static"]["usage"]["served"] == 7
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_claim("x", "", device_class="nope")))
    failed = runner.invoke(mig_command, ["plan", "-f", str(bad), "--gpu", "h100"])
    assert failed.exit_code == 2 and "unknown DeviceClass" in failed.output


def test_cli_plan_wide_names_the_request_each_mig_device_serves():
    path = os.path.join(DATA, "claims-mix.yaml")
    runner = CliRunner()
    table = runner.invoke(mig_command, ["plan", "-f", path, "--gpu", "h100", "--count", "2", "-o", "table"])
    wide = runner.invoke(mig_command, ["plan", "-f", path, "--gpu", "h100", "--count", "2", "-o", "wide"])
    assert wide.exit_code == 0, wide.output
    lines = wide.stdout.splitlines()
    report = lines[:lines.index("mig-parted config for the static layout:")]  # then the config, as in table
    added = [line for line in report if line.startswith("    ")]
    assert [line for line in lines if line not in added] == table.stdout.splitlines()
    result = plan(H100, 2, demands_from_objects(_load("claims-mix.yaml"), H100))
    static = [line.split() for line in added[:sum(len(g.instances) for g in result.static)]]
    assert Counter(row[-1] for row in static) == Counter(d.label for g in result.static for d, _ in g.assigned)
    assert all(row[1:3] == [str(H100.profile(row[0].split("@")[0]).memory_mib), "MiB"] for row in static)
    dynamic = [line.split() for line in added[len(static):]]
    assert dynamic == [[name, label] for gpu in result.dynamic for label, name in gpu]


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def _mixes(draw):
    model = draw(st.sampled_from([gpu_model("h100"), gpu_model("a30"), gpu_model("a100-40gb")]))
    names = [p.name for p in model.profiles]
    claims = []
    for i in range(draw(st.integers(1, 5))):
        profile = draw(st.sampled_from(names))
        claims.append(_claim(f"c{i}", f"device.attributes['gpu.nvidia.com'].profile == '{profile}'",
                             count=draw(st.integers(1, 3))))
    return model, draw(st.integers(1, 2)), claims


@settings(max_examples=40, deadline=None)
@given(_mixes())
def test_static_plan_is_feasible_and_never_worse_than_dynamic(case):
    model, count, claims = case
    demands = demands_from_objects(claims, model)
    result = plan(model, count, demands)
    for gpu in result.static:
        counts = gpu.counts()
        assert find_placement(model, counts).feasible
        assert Counter(i.profile.name for i in gpu.instances) == Counter(counts)
    assert result.static_usage.claims_served >= result.dynamic_usage.claims_served
    served = set(result.static_profiles)
    for group in {d.claim for d in demands}:
        members = {i for i, d in enumerate(demands) if d.claim == group}
        assert members <= served or not (members & served)  # all or nothing per claim
    assert validate_config(result.mig_parted_config(), [model]).valid
