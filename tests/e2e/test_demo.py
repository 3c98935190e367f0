"""`gpudra demo`: bundled data, allocations that respect the claims, rejected originals, offline runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.quantity_semver_reference import quantity_value

from gpudra.cli.demo import command  # noqa: E402
from gpudra.demo import run_demo  # noqa: E402
from gpudra.demo.scenario import CLUSTER_DIR, _load, index_devices  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent

@pytest.fixture(scope="module")
def demo():
    return run_demo()


@pytest.fixture(scope="module")
def cluster_devices():
    slices = [d.obj for d in _load(CLUSTER_DIR) if d.obj.get("kind") == "ResourceSlice"]
    node_of = {}
    for item in slices:
        spec = item["spec"]
        for device in spec.get("devices") or []:
            node_of[(spec["driver"], spec["pool"]["name"], device["name"])] = spec.get("nodeName")
    return index_devices(slices), node_of


def attribute(device, name):
    value = device["attributes"][name]
    return next(iter(value.values()))


def chosen(row, cluster_devices):
    devices, node_of = cluster_devices
    picked = []
    for result in row.allocation["devices"]["results"]:
        key = (result["driver"], result["pool"], result["device"])
        assert key in devices, f"{row.claim}: {key} is not in the cluster"
        assert node_of[key] == row.node, f"{row.claim}: {key} is not on {row.node}"
        picked.append((key, devices[key]))
    return picked


def test_every_corrected_claim_is_allocated(demo):
    assert sorted(row.claim for row in demo.rows) == [
        "ai-serving/prod-gpu-template-claim",
        "ai-training/nvlink-h100-claim",
        "default/gpu-claim",
    ]
    assert [row.claim for row in demo.rows if row.outcome != "allocated"] == []


def test_allocations_satisfy_what_the_claims_ask_for(demo, cluster_devices):
    rows = {row.claim: row for row in demo.rows}
    (_, gpu), = chosen(rows["default/gpu-claim"], cluster_devices)
    assert quantity_value(gpu["capacity"]["memory"]["value"]) >= quantity_value("16Gi")  # 02-resourceclaim-gpu.yaml asks for >= 16Gi

    pair = chosen(rows["ai-training/nvlink-h100-claim"], cluster_devices)
    assert len(pair) == 2
    assert {attribute(d, "productName") for _, d in pair} == {"NVIDIA H100 80GB HBM3"}
    assert len({attribute(d, "nvlinkDomain") for _, d in pair}) == 1  # one NVLink mesh

    (_, single), = chosen(rows["ai-serving/prod-gpu-template-claim"], cluster_devices)
    assert attribute(single, "type") == "gpu"


def test_no_device_is_given_to_two_claims(demo, cluster_devices):
    seen = {}
    for row in demo.rows:
        for key, _ in chosen(row, cluster_devices):
            assert key not in seen, f"{key} given to {seen.get(key)} and {row.claim}"
            seen[key] = row.claim


def test_the_article_originals_are_rejected_with_reasons(demo):
    verdicts = {r.what: r.problems for r in demo.rejections}
    for what in (
        "DeviceClass nvidia.com/gpu",
        "ResourceClaim default/gpu-claim",
        "ResourceClaim ai-training/nvlink-h100-claim",
        "ResourceClaimTemplate ai-serving/prod-gpu-template",
    ):
        assert verdicts[what], f"{what} should be rejected"
    assert any("exactly" in problem for problem in verdicts["ResourceClaim default/gpu-claim"])
    assert verdicts["Pod default/gpu-training"] == []
    assert not any(what.startswith("ConfigMap") for what in verdicts)


def test_cli_prints_the_table_and_exits_zero():
    result = CliRunner().invoke(command, ["--allocate-only"])
    assert result.exit_code == 0, result.output
    for text in ("h100-node-1", "a100-node-1", "l4-node-1", "ai-training/nvlink-h100-claim", "3 of 3 claims allocated",
                 "DeviceClass nvidia.com/gpu: rejected"):
        assert text in result.output


def test_cli_allocate_only_runs_from_any_directory(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    completed = subprocess.run([sys.executable, "-m", "gpudra", "demo", "--allocate-only"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert "claims allocated" in completed.stdout


def test_other_claims_can_be_placed_on_the_bundled_cluster():
    workloads = ROOT / "examples" / "workloads"
    report = run_demo(claims=[str(workloads)])
    assert report.rows and all(row.outcome == "allocated" for row in report.rows)
    assert report.claims_title.startswith("Claims,")


def test_bad_paths_are_a_clean_error(tmp_path):
    result = CliRunner().invoke(command, ["--claims", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2
    assert "missing.yaml" in result.stderr and "Traceback" not in result.output


def test_allocator_only_options_say_that_they_switch_to_the_allocator_only_demo():
    result = CliRunner().invoke(command, ["--features", "default,-DRADeviceTaints"])
    assert result.exit_code == 0, result.output
    assert "--features: the local-cluster flow runs with the release's default gates" in result.stderr
    assert "kube-scheduler's DRA allocator, offline" in result.stdout
    quiet = CliRunner().invoke(command, ["--allocate-only"])
    assert "warning" not in quiet.stderr


def test_demo_keep_refuses_a_directory_that_holds_a_cluster(cluster_state):
    from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_nodes

    cluster = ClusterDir(cluster_state)
    cluster.save_config(ClusterConfig(nodes=parse_nodes("l4-node")))
    cluster.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mine", "namespace": "default"},
                          "spec": {"containers": [{"name": "c", "image": "x"}]}})
    result = CliRunner().invoke(command, ["--keep", cluster_state])
    assert result.exit_code == 2 and "already holds a local cluster" in result.stderr
    assert cluster.store.get("Pod", "default", "mine") is not None and cluster.exists()
