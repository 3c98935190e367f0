"""`gpudra schedule`: outputs, determinism, clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from gpudra.cli import cli

DATA = Path(__file__).parent.parent / "data" / "scheduler"


def run(*args: str):
    return CliRunner().invoke(cli, ["schedule", *args], catch_exceptions=False)


def test_table_lists_placements_and_reasons():
    result = run("-f", str(DATA / "training.yaml"))
    assert result.exit_code == 1, result.output  # ml/train-3 is unschedulable: a negative answer
    lines = result.output.splitlines()
    assert lines[0].split() == ["NODE", "POD", "CLAIM", "DEVICES"]
    rows = [line.split() for line in lines[1:] if line and not line.startswith(("UNSCHEDULABLE", "  "))]
    assert {row[1] for row in rows} == {"ml/train-0", "ml/train-1", "ml/train-2", "ml/infer"}
    assert all(row[0] in ("gpu-a", "gpu-b") for row in rows)
    assert "ml/train-3: 0/3 nodes are available:" in result.output


def test_yaml_output_is_every_object_with_allocations():
    result = run("-f", str(DATA / "training.yaml"), "-o", "yaml")
    assert result.exit_code == 1  # ml/train-3 is unschedulable
    documents = [d for d in yaml.safe_load_all(result.stdout) if d]
    kinds = [d["kind"] for d in documents]
    assert kinds.count("Pod") == 5 and kinds.count("Node") == 3 and "StatefulSet" in kinds
    pods = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Pod"}
    claims = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ResourceClaim"}
    assert pods["train-0"]["spec"]["nodeName"] in ("gpu-a", "gpu-b")
    assert "nodeName" not in pods["train-3"]["spec"]
    condition = pods["train-3"]["status"]["conditions"][0]
    assert condition["reason"] == "Unschedulable" and condition["message"].startswith("0/3 nodes are available")
    train0_claim = pods["train-0"]["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    status = claims[train0_claim]["status"]
    assert len(status["allocation"]["devices"]["results"]) == 2
    assert status["reservedFor"][0]["name"] == "train-0"


def test_json_output_is_a_list():
    result = run("-f", str(DATA / "training.yaml"), "-o", "json", "--policy", "binpack")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["kind"] == "List" and any(item["kind"] == "ResourceClaim" for item in document["items"])


def test_same_input_same_output():
    for policy in ("kube", "binpack", "spread", "fragmentation"):
        outputs = {run("-f", str(DATA / "training.yaml"), "-o", "yaml", "--policy", policy).stdout for _ in range(2)}
        assert len(outputs) == 1


def test_input_order_of_files_in_a_directory_is_stable(tmp_path):
    text = (DATA / "training.yaml").read_text()
    (tmp_path / "a.yaml").write_text(text)
    first = run("-f", str(tmp_path), "-o", "yaml").stdout
    assert first == run("-f", str(tmp_path / "a.yaml"), "-o", "yaml").stdout


def test_missing_file_is_a_clean_error():
    result = CliRunner().invoke(cli, ["schedule", "-f", "/no/such/file.yaml"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_unknown_policy_is_rejected():
    result = CliRunner().invoke(cli, ["schedule", "-f", str(DATA / "training.yaml"), "--policy", "random"])
    assert result.exit_code == 2


def test_invalid_input_is_refused_unless_asked(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\n"
        "spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu, count: -1}}]}}}\n"
    )
    refused = CliRunner().invoke(cli, ["schedule", "-f", str(bad)])
    assert refused.exit_code == 1 and "greater than zero" in refused.output
    assert "error: " in refused.output and "--no-validate" in refused.output
    assert CliRunner().invoke(cli, ["schedule", "-f", str(bad), "--no-validate"]).exit_code == 0


def test_scheduling_gates_keep_a_pod_pending(tmp_path):
    manifest = tmp_path / "gated.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
        "spec: {schedulingGates: [{name: example.com/quota}], containers: [{name: c, image: x}]}\n"
    )
    result = run("-f", str(manifest), "-o", "yaml")
    the_pod = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Pod"][0]
    condition = the_pod["status"]["conditions"][0]
    assert condition["reason"] == "SchedulingGated" and "example.com/quota" in condition["message"]
