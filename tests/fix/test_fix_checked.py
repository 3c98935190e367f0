"""`validate --fix` checked against the devices a cluster publishes (issue 11, "repairs that are checked")."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import yaml

from gpudra.allocator import Allocator, Features
from gpudra.fix import fix_documents
from gpudra.api.load import Document, load_paths
from gpudra.api.validate import validate_documents
from gpudra.discovery import read_inventory
from gpudra.gpuplugin.slices import build_resource_slices, device_classes, pool_devices

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = "gpu.nvidia.com"


def gpudra(*args: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "gpudra", *args], capture_output=True, text=True, cwd=cwd, env=env,
                           timeout=120)


def _examples(*names: str) -> list[Document]:
    return load_paths([os.path.join(ROOT, "examples", n) for n in names])


def _by_name(docs: list[Document], kind: str, name: str) -> dict:
    return next(d.obj for d in docs if d.kind == kind and d.name == name)


def test_article_fixed_with_the_cluster_allocates_every_claim_and_the_pair_on_one_nvlink_domain(tmp_path):
    fixed = gpudra("validate", "-f", "examples/article", "-f", "examples/cluster", "--fix")
    assert fixed.returncode == 0, fixed.stderr
    path = tmp_path / "fixed.yaml"
    path.write_text(fixed.stdout)
    assert "repaired and allocatable on h100-node-1" in fixed.stderr  # the allocator re-ran on the result
    # the printed manifests leave out the cluster's Nodes and slices (issue 21): allocate them with the cluster
    allocated = gpudra("allocate", "-f", "examples/cluster", "-f", str(path), "--mode", "sequential", "-o", "json")
    assert allocated.returncode == 0, allocated.stderr
    claims = {c["metadata"]["name"]: c for c in yaml.safe_load(allocated.stdout)["items"]}
    assert set(claims) == {"gpu-claim", "nvlink-h100-claim"}
    assert all(c.get("status", {}).get("allocation") for c in claims.values()), allocated.stderr
    devices = {(d["spec"]["pool"]["name"], device["name"]): device
               for d in yaml.safe_load_all(open(os.path.join(ROOT, "examples/cluster/resourceslices.yaml")))
               for device in d["spec"]["devices"]}
    pair = claims["nvlink-h100-claim"]["status"]["allocation"]["devices"]["results"]
    attributes = [devices[(r["pool"], r["device"])]["attributes"] for r in pair]
    assert len(pair) == 2 and len({a["nvlinkDomain"]["string"] for a in attributes}) == 1
    assert {a["productName"]["string"] for a in attributes} == {"NVIDIA H100 80GB HBM3"}


def test_the_nvlink_claim_uses_the_published_names_and_values():
    result = fix_documents(_examples("article", "cluster"))
    claim = _by_name(result.documents, "ResourceClaim", "nvlink-h100-claim")
    devices = claim["spec"]["devices"]
    (selector,) = devices["requests"][0]["exactly"]["selectors"]
    expected = 'device.attributes["gpu.nvidia.com"].productName == \'NVIDIA H100 80GB HBM3\''
    assert selector["cel"]["expression"] == expected
    assert devices["constraints"] == [{"requests": ["h100-nvlink-pair"], "matchAttribute": f"{DRIVER}/nvlinkDomain"}]
    everything = yaml.safe_dump([d.obj for d in result.documents]) + "\n".join(result.changes + result.cautions)
    assert "nvlinkMeshId" not in everything and "mesh-0" not in yaml.safe_dump(claim)
    # the pinned mesh was dropped on purpose, and the user is told
    assert any("mesh-0" in line and "matchAttribute" in line for line in result.cautions + result.changes)


def test_one_attribute_vocabulary_in_hints():
    """validate's hints name the attribute gpudra's driver publishes, never a derived `nvlinkMeshId`, and never
    suggest the invalid class name `nvidia.com/gpu`."""
    checked = gpudra("validate", "-f", "examples/article")
    text = checked.stdout + checked.stderr
    assert "nvlinkDomain" in text
    assert "nvlinkMeshId" not in text
    assert "did you mean 'nvidia.com/gpu'" not in text
    assert "did you mean 'gpu.nvidia.com'" in text


def test_the_repaired_class_selects_full_gpus_only():
    result = fix_documents(_examples("article"))
    cls = _by_name(result.documents, "DeviceClass", "gpu.nvidia.com")
    assert cls["spec"]["selectors"] == device_classes(DRIVER)[0]["spec"]["selectors"]
    # against an A100 board with MIG devices: five GPUs of this class do not exist (four are partitioned)
    slices = build_resource_slices(read_inventory("simulated", profile="hgx-a100-mig", node_name="m"), "m")
    assert any(d["attributes"]["type"]["string"] == "mig" for d in pool_devices(slices))
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                          "count": 5}}]}}}
    assert Allocator([cls], slices, [], Features.parse("default")).allocate("m", [claim]).outcome == "unallocatable"
    claim = copy.deepcopy(claim)
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 4
    outcome = Allocator([cls], slices, [], Features.parse("default")).allocate("m", [claim])
    assert outcome.outcome == "allocated"
    chosen = {r["device"] for r in outcome.allocations[0]["devices"]["results"]}
    assert all("mig" not in name for name in chosen)


def test_a_class_given_twice_is_not_compared_with_itself():
    classes = _examples("cluster")
    cls = next(d for d in classes if d.kind == "DeviceClass" and d.name == "gpu.nvidia.com")
    twice = [cls, Document(copy.deepcopy(cls.obj), "other.yaml", 1)]
    messages = [p.message for p in validate_documents(twice)]
    assert any("defined twice" in m for m in messages)
    assert not any("is also claimed by DeviceClass 'gpu.nvidia.com'" in m for m in messages)
    # the repaired article printed with the cluster defines the class once
    fixed = fix_documents(_examples("article", "cluster"))
    assert [d.name for d in fixed.documents if d.kind == "DeviceClass"].count("gpu.nvidia.com") == 1
    assert not any("defined twice" in p.message or "also claimed" in p.message
                   for p in validate_documents(fixed.documents))


def test_a_repair_that_still_does_not_fit_says_what_is_wrong(tmp_path):
    # only the L4 and A100 nodes: the pair of H100s exists nowhere
    cluster = [d.obj for d in _examples("cluster")
               if not (d.kind in ("ResourceSlice", "Node") and d.name.startswith("h100"))]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(cluster))
    fixed = gpudra("validate", "-f", "examples/article", "-f", str(path), "--fix")
    assert fixed.returncode == 1, fixed.stderr
    lines = [line for line in fixed.stderr.splitlines() if "nvlink-h100-claim" in line and "still" in line]
    assert lines, fixed.stderr
    assert "0/2 nodes are available" in lines[0]
    assert "repaired and allocatable on" in fixed.stderr  # the single GPU claim fits the A100 node


def test_a_product_name_nobody_publishes_is_named():
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
             "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                 "deviceClassName": "gpu.nvidia.com",
                 "selectors": [{"cel": {
                     "expression": "device.attributes['gpu.nvidia.com'].productName == 'B300'"}}]}}]}}}
    docs = [Document(claim, "c.yaml", 1)] + _examples("cluster")
    result = fix_documents(docs)
    assert _by_name(result.documents, "ResourceClaim", "c") == claim
    caution = next(line for line in result.cautions if "'B300'" in line)
    assert "NVIDIA H100 80GB HBM3" in caution and "NVIDIA L4" in caution


def test_example_cluster_publishes_the_driver_attributes():
    """examples/cluster is what gpudra's driver publishes: the same attribute names for the same kind of device."""
    driver_names: dict[tuple[str, bool], set[str]] = {}
    for profile in ("dgx-h100", "hgx-a100-mig", "l4-node"):
        for device in pool_devices(build_resource_slices(read_inventory("simulated", profile=profile,
                                                                        node_name="n"), "n")):
            attributes = device["attributes"]
            key = (attributes["type"]["string"], "nvlinkDomain" in attributes)
            driver_names.setdefault(key, set(attributes))
    examples = [d.obj for d in _examples("cluster")]
    for obj in examples:
        if obj["kind"] != "ResourceSlice":
            continue
        for device in obj["spec"]["devices"]:
            attributes = device["attributes"]
            key = (attributes["type"]["string"], "nvlinkDomain" in attributes)
            assert set(attributes) == driver_names[key], (device["name"], set(attributes) ^ driver_names[key])
            domain = attributes.get("nvlinkDomain", {}).get("string")
            assert domain is None or domain.startswith(obj["spec"]["nodeName"] + "-nvlink-")
    assert [c for c in examples if c["kind"] == "DeviceClass"] == device_classes(DRIVER)


def test_same_mesh_becomes_match_attribute_without_a_cluster_too():
    """The driver's vocabulary alone says nvlinkDomain is topology; the product value stays as written (nothing to
    match it against) and is flagged for checking."""
    result = fix_documents(_examples("article"))
    devices = _by_name(result.documents, "ResourceClaim", "nvlink-h100-claim")["spec"]["devices"]
    assert devices["constraints"] == [{"requests": ["h100-nvlink-pair"], "matchAttribute": f"{DRIVER}/nvlinkDomain"}]
    (selector,) = devices["requests"][0]["exactly"]["selectors"]
    assert "nvlinkDomain" not in selector["cel"]["expression"]
    assert "NVIDIA-H100-80GB-HBM3" in selector["cel"]["expression"]
    assert any("productName" in line for line in result.cautions)


def test_a_claim_that_needed_no_repair_is_not_called_repaired(tmp_path):
    fixed = gpudra("validate", "-f", "examples/article", "-f", "examples/cluster", "--fix")
    path = tmp_path / "fixed.yaml"
    path.write_text(fixed.stdout)
    again = gpudra("validate", "-f", str(path), "-f", "examples/cluster", "--fix")  # repaired: nothing to change
    assert again.returncode == 0, again.stderr
    assert "0 repair(s)" in again.stderr and "repaired" not in again.stderr.replace("0 repair(s)", "")
    assert "default/gpu-claim: allocatable on h100-node-1" in again.stderr
