"""`gpudra explain` and `kubectl gpudra explain` on manifests and `kubectl get -o yaml` dumps."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml
from click.testing import CliRunner

from gpudra.cli import cli

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "explain")
SCENARIO = os.path.join(DATA, "held-and-cpu.yaml")


def run(*args: str):
    return CliRunner().invoke(cli, ["explain", *args])


def test_text_output_summary_funnel_and_fix():
    result = run("-f", SCENARIO, "-n", "ml", "pod/train")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0] == "pod ml/train does not fit."
    assert lines[1].startswith("0/3 nodes are available: 2 nodes: request 'gpu' of claim 'train-gpu-")
    assert lines[1].endswith("needs 2 devices, at most 1 free matches; 1 node: Insufficient cpu.")
    assert "         1 held by claim ml/old-job (pod ml/old-trainer)" in lines
    assert "  - node gpu-1 fits if claim ml/old-job is released (deleting pod ml/old-trainer)" in lines


def test_kubectl_style_target_and_node_filter():
    result = run("-f", SCENARIO, "-n", "ml", "pod", "train", "--node", "gpu-2")
    assert result.exit_code == 1, result.output
    assert "node gpu-2:" in result.output
    assert "node gpu-1:" not in result.output and "node cpu-1:" not in result.output


def test_json_and_yaml_are_the_same_data():
    as_json = run("-f", SCENARIO, "-n", "ml", "pod/train", "-o", "json")
    as_yaml = run("-f", SCENARIO, "-n", "ml", "pod/train", "-o", "yaml")
    assert as_json.exit_code == as_yaml.exit_code == 1  # does not fit: exit 1
    data = json.loads(as_json.output)
    assert data == yaml.safe_load(as_yaml.output)
    assert data["target"] == {"kind": "Pod", "namespace": "ml", "name": "train"}
    assert data["fits"] is False
    gpu1 = next(n for n in data["nodes"] if n["node"] == "gpu-1")
    funnel = gpu1["requests"][0]["funnel"]
    assert [(s["step"], s["count"]) for s in funnel] == [("visible", 2), ("class", 2), ("selector", 2), ("free", 1)]
    assert gpu1["requests"][0]["heldBy"] == [{"claim": "ml/old-job", "devices": 1, "pods": ["ml/old-trainer"]}]
    assert data["fixes"][0]["kind"] == "release-claim"
    assert data["fixes"][0]["nodes"] == ["gpu-1"]


def test_kubectl_get_dump_reads_like_the_manifests(tmp_path):
    with open(SCENARIO, encoding="utf-8") as handle:
        objects = [o for o in yaml.safe_load_all(handle) if o]
    # What `kubectl get … -A -o yaml` prints: one List, server-populated metadata on every item.
    for index, obj in enumerate(objects):
        obj["metadata"].update({"resourceVersion": str(100 + index), "creationTimestamp": "2026-11-29T10:00:00Z",
                                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]})
    dump = tmp_path / "dump.yaml"
    dump.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
                                    "items": objects}))
    from_dump = run("-f", str(dump), "-n", "ml", "pod/train", "-o", "json")
    from_files = run("-f", SCENARIO, "-n", "ml", "pod/train", "-o", "json")
    assert from_dump.exit_code == 1, from_dump.output
    assert json.loads(from_dump.output) == json.loads(from_files.output)


def test_claim_target():
    result = run("-f", SCENARIO, "-n", "ml", "claim/old-job")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("claim ml/old-job fits: already allocated")
    assert "gpu=gpu.example.com/gpu-2/gpu-1" in result.output


def test_user_errors_exit_2_without_traceback(tmp_path):
    missing = run("-f", SCENARIO, "pod/train")  # wrong namespace
    assert missing.exit_code == 2
    assert "pod default/train not found (it exists as ml/train; use -n)" in missing.output
    bad_kind = run("-f", SCENARIO, "deployment/x")
    assert bad_kind.exit_code == 2 and "only pods and ResourceClaims" in bad_kind.output
    no_file = run("-f", str(tmp_path / "absent.yaml"), "pod/x")
    assert no_file.exit_code == 2 and "no such file" in no_file.output
    both = run("-f", SCENARIO, "--kubeconfig", "kc", "pod/x")
    assert both.exit_code == 2 and "not both" in both.output
    for result in (missing, bad_kind, no_file, both):
        assert "Traceback" not in result.output


def test_kubectl_plugin_entry_point():
    """kubectl runs `kubectl-gpudra explain pod/x …` for `kubectl gpudra explain pod/x …`."""
    from importlib.metadata import entry_points

    declared = {e.name: e.value for e in entry_points(group="console_scripts")}
    assert declared.get("kubectl-gpudra") == "gpudra.cli:main"
    code = "import sys; sys.argv[0] = 'kubectl-gpudra'; from gpudra.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", code, "explain", "-f", SCENARIO, "-n", "ml", "pod/train",
                             "-o", "json", "--no-fixes"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["target"]["name"] == "train" and data["fixes"] == []
    usage = subprocess.run([sys.executable, "-c", code, "explain"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2
    assert "kubectl gpudra explain" in usage.stderr


def test_the_issue_example_statefulset_on_twelve_nodes(tmp_path):
    """8 GPU nodes with one of their two GPUs taken, 4 small CPU nodes; a StatefulSet pod needs 2 GPUs."""
    from test_explain_scenarios import claim, device_class, gpu, gpu_slice, node, pod, request, template

    objects = [device_class(), template("two-gpus", [request(count=2)])]
    for i in range(8):
        objects += [node(f"gpu-{i}"), gpu_slice(f"gpu-{i}", [gpu("gpu-0"), gpu("gpu-1")]),
                    claim(f"infer-{i}", [request()], allocated=(f"gpu-{i}", ["gpu-0"]), reserved_for=f"infer-{i}"),
                    pod(f"infer-{i}", {"gpu": f"infer-{i}"}, node_name=f"gpu-{i}")]
    objects += [node(f"cpu-{i}", cpu="2") for i in range(4)]
    pod_template = pod("ignored", templates={"gpu": "two-gpus"}, cpu="8")
    objects.append({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "train", "namespace": "default"},
                    "spec": {"replicas": 1, "serviceName": "train", "selector": {"matchLabels": {"app": "train"}},
                             "template": {"metadata": {"labels": {"app": "train"}}, "spec": pod_template["spec"]}}})
    manifest = tmp_path / "cluster.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))

    result = run("-f", str(manifest), "pod/train-0")
    assert result.exit_code == 1, result.output
    summary = result.output.splitlines()[1]
    assert summary.startswith("0/12 nodes are available: 8 nodes: request 'gpu' of claim 'train-0-gpu-")
    assert summary.endswith("needs 2 devices, 1 free matches; 4 nodes: Insufficient cpu.")
    assert "nodes gpu-0" not in result.output  # each GPU node's holder differs, so each gets its section
    assert "  - node gpu-0 fits if claim default/infer-0 is released (deleting pod default/infer-0)" in result.output


def test_a_pod_that_fits_names_its_node_and_the_feasible_nodes():
    from pathlib import Path

    examples = Path(__file__).resolve().parent.parent.parent / "examples"
    result = CliRunner().invoke(cli, ["explain", "-f", str(examples / "cluster"), "-f", str(examples / "workloads"),
                                      "pod/trainer"])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    # four H100s on one NVLink mesh: only the two H100 nodes can serve the claim
    assert first == "pod default/trainer fits: would be scheduled to node h100-node-1 (best of 2 feasible nodes scored)"


def test_no_nodes_in_the_input_says_so_instead_of_no_single_change(tmp_path):
    """With only a claim and its class given, explain said "No single change that was tried … makes it fit"."""
    manifest = tmp_path / "claim.yaml"
    manifest.write_text(yaml.safe_dump_all([
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "default"},
         "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu"}}]}}}]))
    result = run("-f", str(manifest), "claim/c")
    assert result.exit_code == 1, result.output
    assert "There are no nodes to place it on" in result.output
    assert "No single change" not in result.output
