"""The article's manifests: `gpudra validate` explains each mistake and `--fix` repairs what it can."""

import os

import yaml
from click.testing import CliRunner

from gpudra.cli.validate import command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARTICLE = os.path.join(ROOT, "examples", "article")


def run(*args, input=None):
    return CliRunner().invoke(command, list(args), input=input)


def test_article_manifests_are_rejected_with_explanations():
    result = run("-f", ARTICLE)
    assert result.exit_code == 1  # a negative answer: the manifests are invalid (2 is for unreadable input)
    out = result.output
    assert "Traceback" not in out
    # the DeviceClass named like an extended resource
    assert "01-deviceclass.yaml:doc 1 (DeviceClass/nvidia.com/gpu): metadata.name:" in out
    assert "'gpu.nvidia.com'" in out and "extendedResourceName" in out
    # v1beta1 request layout inside v1, with the corrected fragment
    assert ("02-resourceclaim-gpu.yaml:doc 1 (ResourceClaim/gpu-claim): spec.devices.requests[0].deviceClassName: "
            "not a field in resource.k8s.io/v1; move it under spec.devices.requests[0].exactly") in out
    # (naming the class the DeviceClass must be renamed to: a fragment that is valid as pasted)
    assert "    exactly:\n      deviceClassName: gpu.nvidia.com" in out
    # memory read from attributes, by attribute name
    assert 'device.attributes["memory"] is the map of attributes in a domain named \'memory\', not an amount' in out and 'device.capacity["gpu.nvidia.com"].memory' in out
    # invented constraints[].cel inside a request, and attribute lookups that include the name in the domain
    assert "spec.devices.requests[0].constraints: constraints are not part of a request" in out
    assert "matchAttribute" in out
    assert "looks up a domain named 'gpu.nvidia.com/product-name'" in out
    # the template has the same v1beta1 layout
    assert "04-resourceclaimtemplate.yaml:doc 1 (ResourceClaimTemplate/prod-gpu-template): spec.spec.devices" in out
    # the Pod is fine
    assert "05-pod.yaml" not in out


def test_fix_repairs_the_article_and_the_result_is_valid(tmp_path):
    result = run("-f", ARTICLE, "--fix")
    assert result.exit_code == 0, result.output
    fixed_text = result.stdout
    docs = list(yaml.safe_load_all(fixed_text))
    by_name = {d["metadata"]["name"]: d for d in docs}
    assert by_name["gpu.nvidia.com"]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    request = by_name["gpu-claim"]["spec"]["devices"]["requests"][0]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert request["exactly"]["selectors"][0]["cel"]["expression"] == (
        'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("16Gi"))')
    nvlink = by_name["nvlink-h100-claim"]["spec"]["devices"]["requests"][0]
    assert "constraints" not in nvlink and nvlink["exactly"]["count"] == 2
    assert 'device.attributes["gpu.nvidia.com"].productName' in nvlink["exactly"]["selectors"][0]["cel"]["expression"]
    template = by_name["prod-gpu-template"]["spec"]["spec"]["devices"]["requests"][0]
    assert template["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    # guesses are flagged for the user to check
    assert "check:" in result.stderr and "productName" in result.stderr
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(fixed_text)
    again = run("-f", str(fixed))
    assert again.exit_code == 0, again.output


def test_fix_explains_what_it_cannot_fix():
    manifest = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c, namespace: default}
spec:
  devices:
    requests:
      - name: gpu
        deviceClassName: gpu.nvidia.com
        count: -2
"""
    result = run("-f", "-", "--fix", input=manifest)
    assert result.exit_code == 1
    assert "cannot fix automatically" in result.stderr
    assert "spec.devices.requests[0].exactly.count: must be greater than zero" in result.stderr
    assert "exactly:" in result.stdout


def test_fixed_article_examples_are_valid_and_json_output():
    result = run("-f", os.path.join(ROOT, "examples", "article-fixed"), "-o", "json")
    assert result.exit_code == 0 and result.stdout.strip() == "[]"
    bad = run("-f", os.path.join(ARTICLE, "02-resourceclaim-gpu.yaml"), "-o", "json")
    assert bad.exit_code == 1
    import json

    problems = json.loads(bad.stdout)
    assert {p["kind"] for p in problems} == {"ResourceClaim"} and all(p["doc"] == 1 for p in problems)


def test_load_errors_exit_2_without_traceback():
    result = run("-f", "-", input="a: [1\n")
    assert result.exit_code == 2 and "invalid YAML" in result.stderr and "Traceback" not in result.output
    missing = run("-f", "/no/such/file.yaml")
    assert missing.exit_code == 2 and "no such file" in missing.stderr


def test_fix_prints_json_when_asked():
    import json

    result = run("-f", os.path.join(ARTICLE, "02-resourceclaim-gpu.yaml"), "--fix", "-o", "json")
    assert result.exit_code == 0
    fixed = json.loads(result.stdout)
    assert fixed["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.nvidia.com"


def test_documents_are_numbered_per_file(tmp_path):
    manifest = tmp_path / "claims.yaml"
    manifest.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.nvidia.com}\n---\n"
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: gpu-claim}\n"
        "spec:\n  devices:\n    requests:\n      - name: gpu\n        deviceClassName: gpu.nvidia.com\n")
    result = run("-f", str(manifest))
    assert result.exit_code == 1
    assert (f"error: {manifest}:doc 2 (ResourceClaim/gpu-claim): spec.devices.requests[0].deviceClassName: not a field in "
            "resource.k8s.io/v1; move it under spec.devices.requests[0].exactly") in result.stdout
    assert ":doc 1" not in result.stdout
