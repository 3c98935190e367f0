"""DeviceTaintRules taint devices from outside the driver: the allocator (and so allocate/schedule) must see
their taints exactly like taints the driver published."""

from __future__ import annotations

import copy

from gpudra.allocator import Allocator, Features, build_report
from gpudra.allocator.taintrules import apply_device_taint_rules
from gpudra.scheduler import Scheduler
from gpudra.controllers import ManagedCluster

CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}}
SLICE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n1-gpus"},
         "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                  "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                  "devices": [{"name": "gpu-0", "attributes": {"model": {"string": "a"}}},
                              {"name": "gpu-1", "attributes": {"model": {"string": "b"}}}]}}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}


def _rule(name: str, selector: dict, effect: str = "NoSchedule") -> dict:
    return {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule", "metadata": {"name": name},
            "spec": {"deviceSelector": selector, "taint": {"key": "drain", "value": "yes", "effect": effect}}}


def _claim(name: str, count: int, tolerate: bool = False) -> dict:
    exactly = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": count}
    if tolerate:
        exactly["tolerations"] = [{"key": "drain", "operator": "Exists"}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def _devices(outcome) -> list[str]:
    return [r["device"] for a in outcome.allocations for r in a["devices"]["results"]]


def test_a_rule_taints_only_the_devices_its_selector_names():
    slices = apply_device_taint_rules([SLICE], [_rule("drain-gpu-0", {"driver": "gpu.example.com", "device": "gpu-0"})])
    devices = slices[0]["spec"]["devices"]
    assert devices[0]["taints"] == [{"key": "drain", "value": "yes", "effect": "NoSchedule"}]
    assert "taints" not in devices[1]
    assert "taints" not in SLICE["spec"]["devices"][0], "the input object is not modified"


def test_untouched_slices_stay_the_same_objects():
    assert apply_device_taint_rules([SLICE], [_rule("other", {"pool": "elsewhere"})])[0] is SLICE
    assert apply_device_taint_rules([SLICE], [])[0] is SLICE


def test_cel_selectors_of_a_rule_must_hold():
    rule = _rule("model-b", {"selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "b"'}}]})
    devices = apply_device_taint_rules([SLICE], [rule])[0]["spec"]["devices"]
    assert "taints" not in devices[0] and devices[1]["taints"][0]["key"] == "drain"


def test_the_allocator_avoids_tainted_devices_unless_tolerated():
    rules = [_rule("drain-gpu-0", {"device": "gpu-0"})]
    alloc = Allocator([CLASS], [SLICE], [], Features.parse("default"), device_taint_rules=rules)
    assert _devices(alloc.allocate(NODE, [_claim("one", 1)])) == ["gpu-1"]
    assert alloc.allocate(NODE, [_claim("two", 2)]).outcome == "unallocatable"
    assert _devices(alloc.allocate(NODE, [_claim("two", 2, tolerate=True)])) == ["gpu-0", "gpu-1"]
    # with the feature off, taints (and so taint rules) are ignored
    off = Allocator([CLASS], [SLICE], [], Features.parse("default,-DeviceTaints"), device_taint_rules=rules)
    assert _devices(off.allocate(NODE, [_claim("two", 2)])) == ["gpu-0", "gpu-1"]


def test_effect_none_does_not_block():
    alloc = Allocator([CLASS], [SLICE], [], Features.parse("default"),
                      device_taint_rules=[_rule("note", {"device": "gpu-0"}, effect="None")])
    assert _devices(alloc.allocate(NODE, [_claim("two", 2)])) == ["gpu-0", "gpu-1"]


def test_allocate_report_and_scheduler_apply_rules_from_the_input():
    objects = [CLASS, SLICE, NODE, _rule("drain-gpu-0", {"device": "gpu-0"}), _claim("one", 1)]
    report = build_report(copy.deepcopy(objects), "together", None, None, Features.parse("default"))
    assert [r["device"] for r in report["results"][0]["allocations"]["default/one"]["devices"]["results"]] == ["gpu-1"]

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "resources": {"claims": [{"name": "gpus"}]}}],
                    "resourceClaims": [{"name": "gpus", "resourceClaimName": "two"}]}}
    cluster = ManagedCluster(copy.deepcopy([CLASS, SLICE, NODE, _rule("drain-gpu-0", {"device": "gpu-0"}), _claim("two", 2), pod]))
    results = Scheduler(cluster).run()
    assert not results[0].scheduled


def test_allocate_cli_reads_rules(tmp_path):
    import yaml
    from click.testing import CliRunner

    from gpudra.cli import cli

    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all([CLASS, SLICE, NODE, _rule("drain-gpu-0", {"device": "gpu-0"}), _claim("one", 1)]))
    result = CliRunner().invoke(cli, ["allocate", "--brief", "-f", str(path)])
    assert result.exit_code == 0, result.output
    report = yaml.safe_load(result.stdout)
    assert [r["device"] for r in report["results"][0]["allocations"]["default/one"]["devices"]["results"]] == ["gpu-1"]
