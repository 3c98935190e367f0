"""Kubernetes 1.34 as a 1.34 cluster behaves, and what changed in 1.35.

- ResourceSlice layout of partitionable devices (kubernetes/kubernetes#134189): up to 1.34 counter sets sit in
  the slice of the devices that consume them ("combined"), from 1.35 in slices of their own ("split"); validate,
  the allocator, the driver and the generators follow the release. The allocator's 1.34 mode is checked against
  the upstream allocator's answers (tests/data/conformance, Kubernetes 1.36.2): every conformance case with
  partitionable devices that can be rewritten losslessly into the combined layout must get upstream's answer.
- resource.k8s.io versions served per release, with kube-apiserver's --runtime-config opt-in
  (kubernetes/kubernetes#132000 removed the v1alpha3 DRA kinds in 1.34).
- Patch releases with known DRA issues (CHANGELOG-1.34, v1.34.2).
- --kubernetes-version on the commands whose answer depends on the release.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpudra.allocator import Allocator, Features, build_report
from gpudra.api.load import Document
from gpudra.api.validate import validate_documents
from gpudra.cli import cli
from gpudra.cli.options import _checked_version
from gpudra.gpuplugin.slices import build_resource_slices, device_classes
from gpudra.discovery import open_backend
from gpudra.versions import KNOWN_PATCH_ISSUES, partitionable_layout

sys.path.insert(0, str(Path(__file__).parent.parent))
from support.conformance import CASES, compare_reports, parse_args  # noqa: E402

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _errors(objects: list[dict], version: str) -> list[str]:
    docs = [Document(o, "t.yaml", i) for i, o in enumerate(objects, start=1)]
    return [f"{p.path}: {p.message}" for p in validate_documents(docs, version) if p.severity == "error"]


def _slice(name: str, body: dict, count: int = 1) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1", "resourceSliceCount": count},
                     **body}}


COUNTER_SET = {"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}
DEVICE = {"name": "d1", "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "10Gi"}}}]}


# ----- validate ------------------------------------------------------------------------------------------
def test_layouts_per_release():
    assert [partitionable_layout(v) for v in ("1.33", "1.34", "1.35", "1.36")] == \
        ["combined", "combined", "split", "split"]


def test_combined_slice_is_valid_up_to_1_34_and_refused_from_1_35():
    combined = [_slice("s", {"sharedCounters": [COUNTER_SET], "devices": [DEVICE]})]
    assert _errors(combined, "1.34") == []
    assert _errors(combined, "1.33") == []
    for version in ("1.35", "1.36"):
        (error,) = _errors(combined, version)
        assert error.startswith("spec: only one of devices and sharedCounters may be set")


def test_split_layout_is_refused_by_1_34():
    split = [_slice("s0", {"sharedCounters": [COUNTER_SET]}, 2), _slice("s1", {"devices": [DEVICE]}, 2)]
    assert _errors(split, "1.35") == []
    (error,) = _errors(split, "1.34")
    assert error.startswith("spec.devices[0].consumesCounters[0].counterSet: must reference a counter set in this "
                            "ResourceSlice's sharedCounters")
    unknown_counter = copy.deepcopy(DEVICE)
    unknown_counter["consumesCounters"][0]["counters"] = {"cores": {"value": "1"}}
    (error,) = _errors([_slice("s", {"sharedCounters": [COUNTER_SET], "devices": [unknown_counter]})], "1.34")
    assert "counter 'cores' is not in counter set 'gpu-0'" in error


def test_validate_cli_follows_the_release(tmp_path):
    path = tmp_path / "slice.yaml"
    path.write_text(yaml.safe_dump(_slice("s", {"sharedCounters": [COUNTER_SET], "devices": [DEVICE]})))
    old = CliRunner().invoke(cli, ["validate", "-f", str(path), "--kubernetes-version", "1.34"])
    assert old.exit_code == 0, old.output
    new = CliRunner().invoke(cli, ["validate", "-f", str(path), "--kubernetes-version", "1.35",
                                   "--features", "default,+DRAPartitionableDevices"])
    assert new.exit_code == 1 and "only one of devices and sharedCounters" in new.output
    # with the gate at 1.35's default (off) the API server drops the fields before it validates, and accepts
    gate_off = CliRunner().invoke(cli, ["validate", "-f", str(path), "--kubernetes-version", "1.35"])
    assert gate_off.exit_code == 0 and "DRAPartitionableDevices" in gate_off.output


# ----- the allocator's 1.34 mode against upstream's answers ------------------------------------------------
def _combined(objects: list[dict]) -> list[dict] | None:
    """The split-layout input rewritten in the combined layout: each device slice gets the counter sets its
    devices consume and the counter-set slices go. None where that changes the meaning: a counter set consumed
    from two slices (1.34 cannot share one across slices), a reference to a missing set, an incomplete pool."""
    slices = [o for o in objects if o.get("kind") == "ResourceSlice"]
    out = [o for o in objects if o.get("kind") != "ResourceSlice"]
    pools: dict[tuple, list[dict]] = {}
    for s in slices:
        spec = s["spec"]
        pools.setdefault((spec["driver"], spec["pool"]["name"], spec["pool"].get("generation", 0)), []).append(s)
    for group in pools.values():
        sets = {c["name"]: c for s in group for c in s["spec"].get("sharedCounters") or []}
        if not sets:
            out += group
            continue
        if {s["spec"]["pool"]["resourceSliceCount"] for s in group} != {len(group)}:
            return None
        device_slices = [s for s in group if not s["spec"].get("sharedCounters")]
        users: dict[str, set[str]] = {}
        rewritten = []
        for s in device_slices:
            wanted = sorted({c["counterSet"] for d in s["spec"].get("devices") or []
                             for c in d.get("consumesCounters") or []})
            for name in wanted:
                users.setdefault(name, set()).add(s["metadata"]["name"])
            if any(name not in sets for name in wanted):
                return None
            s = copy.deepcopy(s)
            if wanted:
                s["spec"]["sharedCounters"] = [sets[name] for name in wanted]
            rewritten.append(s)
        if any(len(names) > 1 for names in users.values()):
            return None
        for s in rewritten:
            s["spec"]["pool"]["resourceSliceCount"] = len(rewritten)
        out += rewritten
    return out


def _partitionable_cases() -> list[Path]:
    found = []
    for case in CASES:
        text = (case / "input.yaml").read_text()
        if "sharedCounters" in text and Features.parse(parse_args((case / "args").read_text()).features) \
                .partitionable_devices:
            found.append(case)
    return found


PARTITIONABLE = _partitionable_cases()
# The one upstream case whose answer 1.35 changed: counter-set names became pool-wide, so two slices with a
# counter set of the same name make the pool invalid (upstream: error); in 1.34 each slice's sets are its own.
CHANGED_IN_1_35 = {"partitionable-devices-same-counter-set-name-in-different-resource-slices"}


def _report_1_34(case: Path) -> tuple[dict, dict] | None:
    args = parse_args((case / "args").read_text())
    objects = _combined([d for d in yaml.load_all((case / "input.yaml").read_text(), Loader=Loader) if d])
    if objects is None:
        return None
    features = dataclasses.replace(Features.parse(args.features).with_variant(args.allocator),
                                   slice_layout="combined")
    report = build_report(objects, mode=args.mode, nodes=args.node.split(",") if args.node else None,
                          claims=args.claims.split(",") if args.claims else None, features=features, timeout=None)
    return report, yaml.load((case / "expected.yaml").read_text(), Loader=Loader)


# Those the combined layout can express (the others share a counter set across slices, or have incomplete pools)
CONVERTIBLE = [case for case in PARTITIONABLE if _combined(
    [d for d in yaml.load_all((case / "input.yaml").read_text(), Loader=Loader) if d]) is not None]


def test_enough_partitionable_cases_convert():
    assert len(PARTITIONABLE) >= 60 and len(CONVERTIBLE) >= 50
    assert CHANGED_IN_1_35 <= {case.name for case in CONVERTIBLE}


@pytest.mark.parametrize("case", CONVERTIBLE, ids=[f"{c.parent.name}/{c.name}" for c in CONVERTIBLE])
def test_combined_layout_gets_upstreams_answer(case: Path):
    found = _report_1_34(case)
    assert found is not None
    report, expected = found
    if case.name in CHANGED_IN_1_35:
        assert [r["outcome"] for r in expected["results"]] == ["error"]
        assert [r["outcome"] for r in report["results"]] == ["allocated"]  # 1.34: the sets are per slice
        return
    compare_reports(report, expected)


def test_combined_slices_are_ignored_by_the_1_35_allocator():
    """The same combined input under 1.35's rules: the combined slices are counter-set slices, their devices
    are not offered, so what 1.34 allocates is unallocatable there (why the driver must publish per release)."""
    node = {"metadata": {"name": "n1"}}
    classes = [{"metadata": {"name": "c"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}]
    claim = {"metadata": {"name": "claim", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}}}
    slices = [_slice("s", {"sharedCounters": [COUNTER_SET], "devices": [DEVICE]})]
    old = Allocator(classes, slices, [], Features.parse("default,+PartitionableDevices", "1.34")).allocate(node, [claim])
    new = Allocator(classes, slices, [], Features.parse("default,+PartitionableDevices", "1.35")).allocate(node, [claim])
    assert old.outcome == "allocated" and new.outcome != "allocated"


# ----- the driver publishes the release's layout, and it allocates dynamic MIG --------------------------
def _driver_slices(version: str, *extra: str) -> list[dict]:
    result = CliRunner().invoke(cli, ["driver", "slices", "--backend", "simulated", "--profile", "dgx-h100",
                                      "--node-name", "n1", "--dynamic-mig", "--kubernetes-version", version,
                                      "-o", "yaml", *extra])
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _mig_claims(count: int, profile: str) -> list[dict]:
    selector = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
    return [{"metadata": {"name": f"c{i}", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "mig", "exactly": {
                 "deviceClassName": "mig.nvidia.com", "selectors": [{"cel": {"expression": selector}}]}}]}}}
            for i in range(count)]


def _allocate_one_by_one(slices: list[dict], features: Features, claims: list[dict]) -> list[str | None]:
    """Each claim on its own, the earlier ones allocated: the device each gets (None: unallocatable)."""
    node = {"metadata": {"name": "n1"}}
    allocated: list[dict] = []
    got: list[str | None] = []
    for claim in claims:
        outcome = Allocator(device_classes(), slices, allocated, features).allocate(node, [claim])
        if outcome.outcome != "allocated":
            got.append(None)
            continue
        allocation = outcome.allocations[0]
        got.append(allocation["devices"]["results"][0]["device"])
        allocated.append({**claim, "status": {"allocation": allocation}})
    return got


def test_driver_publishes_the_1_34_combined_layout_with_the_gate_on():
    slices = _driver_slices("1.34", "--features", "default,+DRAPartitionableDevices")
    assert len(slices) == 8  # one per GPU, as NVIDIA's generateCombinedResourceSlices
    for s in slices:
        (counter_set,) = s["spec"]["sharedCounters"]
        consumed = {c["counterSet"] for d in s["spec"]["devices"] for c in d.get("consumesCounters") or []}
        assert consumed == {counter_set["name"]}
        assert s["spec"]["pool"]["resourceSliceCount"] == 8
    assert _errors(slices, "1.34") == []
    assert _errors(slices, "1.35")  # what 1.35 refuses
    split = _driver_slices("1.35", "--features", "default,+DRAPartitionableDevices")
    assert len(split) == 9 and "devices" not in split[0]["spec"]


def test_1_34_combined_layout_allocates_dynamic_mig_like_the_1_35_split_layout():
    """Differential: the same claims, one after another, on the 1.34 layout with 1.34's allocator and on the 1.35
    layout with 1.35's, get the same devices; an H100 holds seven 1g.10gb and then its counters are spent."""
    combined = _driver_slices("1.34", "--features", "default,+DRAPartitionableDevices")
    split = _driver_slices("1.35", "--features", "default,+DRAPartitionableDevices")
    claims = _mig_claims(8 * 7 + 2, "1g.10gb")
    old = _allocate_one_by_one(combined, Features.parse("default,+PartitionableDevices", "1.34"), claims)
    new = _allocate_one_by_one(split, Features.parse("default,+PartitionableDevices", "1.35"), claims)
    assert old == new
    assert sum(device is not None for device in old) == 8 * 7 and old[-2:] == [None, None]
    assert len(set(filter(None, old))) == 8 * 7


def test_driver_agent_publishes_the_layout_it_is_given(tmp_path):
    """`driver run` and the local cluster's node agents hand the release's layout to the agent."""
    from gpudra.gpuplugin.agent import AgentOptions, DriverAgent

    inventory = open_backend("simulated", profile="dgx-h100", node_name="n1").inventory()
    for version in ("1.34", "1.35"):
        layout = partitionable_layout(version)
        agent = DriverAgent(AgentOptions(node_name="n1", profile="dgx-h100", root=str(tmp_path / version),
                                         claims_dir=str(tmp_path), dynamic_mig=True, slice_layout=layout, fsync=False))
        slices = agent.build_slices()
        assert slices == build_resource_slices(inventory, "n1", dynamic_mig=True, slice_layout=layout)
        assert _errors(slices, version) == []
    assert AgentOptions(node_name="n1").slice_layout == "split"


# ----- API versions per release ---------------------------------------------------------------------------
def _claim(api_version: str, name: str = "c") -> dict:
    request = {"name": "gpu", "deviceClassName": "gpu.nvidia.com"}
    if api_version.endswith("/v1") or api_version.endswith("v1beta2"):
        request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    return {"apiVersion": api_version, "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [request]}}}


def _validate(tmp_path: Path, objects: list[dict], *args: str):
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return CliRunner().invoke(cli, ["validate", "-f", str(path), *args])


@pytest.mark.parametrize("beta", ["v1beta1", "v1beta2"])
def test_beta_versions_need_runtime_config_from_1_34(tmp_path, beta):
    api_version = f"resource.k8s.io/{beta}"
    # the real 1.34 API server answers 404 (tests/oracles/test_kube_validation.py): an error, naming the flag that serves it
    result = _validate(tmp_path, [_claim(api_version)], "--kubernetes-version", "1.34")
    assert result.exit_code == 1, result.output
    assert f"--runtime-config={api_version}=true" in result.output
    for config in (f"{api_version}=true", "api/beta=true", f"{api_version}"):
        quiet = _validate(tmp_path, [_claim(api_version)], "--kubernetes-version", "1.34", "--runtime-config", config)
        assert quiet.exit_code == 0 and "runtime-config" not in quiet.output, (config, quiet.output)
    off = _validate(tmp_path, [_claim(api_version)], "--kubernetes-version", "1.34", "--runtime-config",
                    f"api/beta=true,{api_version}=false")
    assert "runtime-config" in off.output
    v1 = _validate(tmp_path, [_claim("resource.k8s.io/v1")], "--kubernetes-version", "1.34")
    assert v1.exit_code == 0 and "warning" not in v1.output


def test_v1alpha3_claims_are_refused_with_the_release_that_removed_them(tmp_path):
    result = _validate(tmp_path, [_claim("resource.k8s.io/v1alpha3")], "--kubernetes-version", "1.34")
    assert result.exit_code == 1
    assert "removed in Kubernetes 1.34" in result.output and "kubernetes/kubernetes#132000" in result.output
    older = _validate(tmp_path, [_claim("resource.k8s.io/v1alpha3")], "--kubernetes-version", "1.33")
    assert older.exit_code == 1 and "--runtime-config=resource.k8s.io/v1alpha3=true" in older.output
    # DeviceTaintRule is what v1alpha3 still serves
    rule = {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule", "metadata": {"name": "r"},
            "spec": {"taint": {"key": "k", "effect": "NoSchedule"}}}
    assert "removed" not in _validate(tmp_path, [rule], "--kubernetes-version", "1.35").output


def test_unknown_version_error_names_the_served_ones(tmp_path):
    result = _validate(tmp_path, [_claim("resource.k8s.io/v2")])
    assert result.exit_code == 1
    assert "--runtime-config" in result.output and "v1alpha3" in result.output
    assert result.output.count("error:") == 1


def test_bad_runtime_config_is_a_usage_error(tmp_path):
    result = _validate(tmp_path, [_claim("resource.k8s.io/v1")], "--runtime-config", "resource.k8s.io/v1beta1=maybe")
    assert result.exit_code == 2 and "true or false" in result.output


def test_allocate_validates_with_the_release_rules(tmp_path):
    objects = [*device_classes(), *_driver_slices("1.34", "--features", "default,+DRAPartitionableDevices"),
               {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
               *[{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", **c} for c in _mig_claims(1, "2g.20gb")]]
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    args = ["allocate", "-f", str(path), "--node", "n1", "--features", "default,+PartitionableDevices"]
    old = CliRunner().invoke(cli, [*args, "--kubernetes-version", "1.34"])
    assert old.exit_code == 0, old.output
    new = CliRunner().invoke(cli, [*args, "--kubernetes-version", "1.35"])
    assert new.exit_code == 1 and "only one of devices and sharedCounters" in new.output


# ----- patch releases -------------------------------------------------------------------------------------
@pytest.mark.parametrize("version, warned", [("1.34.0", True), ("v1.34.1", True), ("1.34.2", False),
                                             ("1.34", False), ("1.35.0", False)])
def test_patch_releases_with_known_dra_issues_are_warned_about(tmp_path, version, warned):
    result = _validate(tmp_path, [_claim("resource.k8s.io/v1")], "--kubernetes-version", version)
    assert result.exit_code == 0, result.output
    assert ("kubernetes/kubernetes#133934" in result.output) == warned
    if warned:
        assert "fixed in 1.34.2" in result.output


@pytest.mark.parametrize("version, warned", [("1.36.2", True), ("1.36.0", True), ("1.36.3", False), ("1.36", False)])
def test_the_136_counter_leak_is_named_to_its_patch_releases(tmp_path, version, warned):
    result = _validate(tmp_path, [_claim("resource.k8s.io/v1")], "--kubernetes-version", version)
    assert result.exit_code == 0, result.output
    assert ("kubernetes/kubernetes#140663" in result.output) == warned


def test_every_known_issue_cites_its_upstream_fix():
    assert KNOWN_PATCH_ISSUES
    for issue in KNOWN_PATCH_ISSUES:
        assert re.search(r"kubernetes/kubernetes#\d+", issue.source) and "CHANGELOG-" in issue.source


# ----- --kubernetes-version where the answer depends on the release ---------------------------------------
@pytest.mark.parametrize("path", [["simulate"], ["mig", "slices"], ["driver", "deviceclasses"], ["driver", "slices"],
                                  ["validate"], ["allocate"]])
def test_commands_take_the_shared_release_option(path):
    import click

    command = cli
    for name in path:
        command = command.get_command(click.Context(command), name)
    option = next(p for p in command.params if p.name == "kubernetes_version")
    assert option.callback is _checked_version


def test_mig_slices_follow_the_release():
    def run(version: str) -> list[dict]:
        result = CliRunner().invoke(cli, ["mig", "slices", "--gpu", "h100-80gb", "--count", "2",
                                          "--kubernetes-version", version, "-o", "yaml"])
        assert result.exit_code == 0, result.output
        return [d for d in yaml.safe_load_all(result.stdout) if d]

    old, new = run("1.34"), run("1.36")
    assert [bool(s["spec"].get("sharedCounters")) and bool(s["spec"].get("devices")) for s in old] == [True, True]
    assert len(new) == 3 and "devices" not in new[0]["spec"]


def test_driver_deviceclasses_follow_the_release():
    def run(version: str):
        return CliRunner().invoke(cli, ["driver", "deviceclasses", "--kubernetes-version", version, "-o", "yaml"])

    old, new = run("1.34"), run("1.36")
    assert old.exit_code == new.exit_code == 0
    assert "extendedResourceName" not in old.stdout and "DRAExtendedResource" in old.output
    assert "extendedResourceName: nvidia.com/gpu" in new.stdout


def test_simulate_needs_consumable_capacity_for_dra_mode_on_1_34():
    result = CliRunner().invoke(cli, ["simulate", "--kubernetes-version", "1.34"])
    assert result.exit_code == 2
    assert "DRAConsumableCapacity" in result.output and "alpha, off by default in 1.34" in result.output


def test_simulated_release_reaches_the_scheduler():
    from support.traces import small_trace

    from gpudra.simulate.engine import start

    trace = small_trace(copies=1)
    workload = [(f"p{i}", task) for i, task in enumerate(trace.tasks[:3])]
    run = start(trace, workload, "fgd", 1, "dra", release=("1.34", "default,+DRAConsumableCapacity"))
    assert run.scheduler.cluster.features == Features.parse("default,+DRAConsumableCapacity", "1.34")
    assert start(trace, workload, "fgd", 1, "dra").scheduler.cluster.features == Features()


def test_live_cluster_patch_release_is_warned_about(monkeypatch, capsys):
    import gpudra.kube.inputs as inputs

    monkeypatch.setattr(inputs, "read_server_version", lambda *a, **k: {"major": "1", "minor": "34",
                                                                         "gitVersion": "v1.34.0-eks-1234"})
    assert inputs.kubernetes_version(None) == "1.34"
    assert "the API server's 1.34.0 has a known DRA issue" in capsys.readouterr().err
    monkeypatch.setattr(inputs, "read_server_version", lambda *a, **k: {"gitVersion": "v1.34.3"})
    assert inputs.kubernetes_version(None) == "1.34"
    assert capsys.readouterr().err == ""
