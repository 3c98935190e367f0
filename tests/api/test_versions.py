"""--kubernetes-version: each release's default feature gates (gpudra.versions), the API validation of
that release (gated fields are warnings naming the gate), and the ResourceSlice layout the driver
publishes; on a live cluster the release comes from the API server's /version."""

from __future__ import annotations

import tempfile
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from support.fake_http import JsonHandler, write_kubeconfig
from gpudra.allocator import Allocator, Features
from gpudra.api.gates import gate_warnings
from gpudra.cli import cli
from gpudra.discovery import open_backend
from gpudra.gpuplugin.slices import build_resource_slices, device_classes, dynamic_mig_layout
from gpudra.kube.inputs import InputError, kubernetes_version
from gpudra.versions import (ALLOCATOR_FEATURE_GATES, GATE_HISTORY, KUBERNETES_VERSIONS, VersionError, gate_state,
                             parse_version, server_version)

ROOT = Path(__file__).resolve().parent.parent.parent
ARTICLE_FIXED = str(ROOT / "examples" / "article-fixed")


# ----------------------------------------------------------------------------------- the table

def test_the_1_36_defaults_are_the_allocators_defaults():
    assert Features.default("1.36") == Features.default() == Features.parse("default")


@pytest.mark.parametrize("version, enabled, variant", [
    ("1.33", [], "stable"),
    ("1.34", ["AdminAccess", "PrioritizedList"], "stable"),
    ("1.35", ["AdminAccess", "PrioritizedList"], "stable"),
    ("1.36", ["AdminAccess", "ConsumableCapacity", "DeviceBindingAndStatus", "DeviceTaints",
              "PartitionableDevices", "PrioritizedList"], "incubating"),
])
def test_each_release_turns_on_its_beta_and_ga_gates(version, enabled, variant):
    features = Features.default(version)
    assert features.enabled() == enabled
    assert features.variant_name == variant


def test_default_in_a_feature_list_means_the_releases_defaults():
    assert Features.parse("default,+DeviceTaints", "1.34").enabled() == ["AdminAccess", "DeviceTaints",
                                                                          "PrioritizedList"]
    assert Features.parse("-PrioritizedList", "1.35").enabled() == ["AdminAccess"]


def test_every_allocator_feature_has_its_gates_in_the_table():
    assert set(ALLOCATOR_FEATURE_GATES) == set(Features.default().enabled()) | {"ListTypeAttributes"}
    for gates in ALLOCATOR_FEATURE_GATES.values():
        assert set(gates) <= set(GATE_HISTORY)


def test_gate_stages_read_like_upstream():
    assert gate_state("DRAExtendedResource", "1.34").describe() == "alpha, off by default in 1.34"
    assert gate_state("DRAExtendedResource", "1.36").describe() == "beta, on by default in 1.36"
    assert gate_state("DRAPrioritizedList", "1.36").stage == "GA"
    assert gate_state("DRAConsumableCapacity", "1.33").stage is None  # introduced in 1.34
    for gate, history in GATE_HISTORY.items():
        releases = [since for since, _, _ in history]
        assert releases == sorted(releases, key=lambda v: tuple(map(int, v.split(".")))), gate


@pytest.mark.parametrize("text, version", [("1.34", "1.34"), ("v1.35.2", "1.35"), ("1.33+", "1.33"), (None, "1.36")])
def test_versions_are_read_in_the_usual_spellings(text, version):
    assert parse_version(text) == version


@pytest.mark.parametrize("text", ["1.32", "2.0", "latest", "1"])
def test_unknown_versions_are_refused(text):
    with pytest.raises(VersionError):
        parse_version(text)


def test_server_version_from_the_version_endpoint():
    assert server_version({"major": "1", "minor": "34+", "gitVersion": "v1.34.1-gke.1200"}) == "1.34"
    assert server_version({"major": "1", "minor": "35+"}) == "1.35"
    assert server_version({"gitVersion": "v1.37.0"}) == "1.36"  # newer than gpudra knows: the newest model
    with pytest.raises(VersionError):
        server_version({"gitVersion": "v1.29.3"})


# ----------------------------------------------------------------------------------- validation

def test_validate_article_fixed_warns_about_the_gated_field_in_1_34():
    result = CliRunner().invoke(cli, ["validate", "--kubernetes-version", "1.34", "-f", ARTICLE_FIXED])
    assert result.exit_code == 0, result.output
    assert "warning: " in result.output
    assert ("(DeviceClass/gpu.nvidia.com): spec.extendedResourceName: needs the DRAExtendedResource "
            "feature gate (alpha, off by default in 1.34)") in result.output
    latest = CliRunner().invoke(cli, ["validate", "-f", ARTICLE_FIXED])
    assert latest.exit_code == 0 and "feature gate" not in latest.output


@pytest.mark.parametrize("command", [["validate", "-f", ARTICLE_FIXED], ["allocate", "-f", ARTICLE_FIXED],
                                     ["schedule", "-f", ARTICLE_FIXED], ["driver", "slices", "--node-name", "n1"]])
def test_an_empty_version_is_a_usage_error_not_the_newest_release(command):
    # `--kubernetes-version "$K8S"` with K8S unset used to run as 1.36 without a word.
    result = CliRunner().invoke(cli, [*command, "--kubernetes-version", ""])
    assert result.exit_code == 2, result.output
    assert "--kubernetes-version" in result.output and "empty" in result.output


def test_validate_refuses_an_unknown_version():
    result = CliRunner().invoke(cli, ["validate", "--kubernetes-version", "1.20", "-f", ARTICLE_FIXED])
    assert result.exit_code == 2 and "--kubernetes-version" in result.output


CLAIM = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
         "spec": {"devices": {
             "requests": [{"name": "a", "exactly": {"deviceClassName": "gpu", "adminAccess": True,
                                                    "tolerations": [{"operator": "Exists"}],
                                                    "capacity": {"requests": {"memory": "1Gi"}}}},
                          {"name": "b", "firstAvailable": [{"name": "x", "deviceClassName": "gpu"}]}],
             "constraints": [{"distinctAttribute": "gpu.example.com/numa"}]}}}
SLICE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
         "spec": {"driver": "d", "nodeName": "n", "pool": {"name": "p", "resourceSliceCount": 1},
                  "sharedCounters": [{"name": "cs", "counters": {"m": {"value": "1"}}}],
                  "devices": [{"name": "g", "taints": [{"key": "k", "effect": "NoSchedule"}],
                               "bindingConditions": ["ready"], "bindingFailureConditions": ["failed"],
                               "allowMultipleAllocations": True,
                               "consumesCounters": [{"counterSet": "cs", "counters": {"m": {"value": "1"}}}]}]}}


@pytest.mark.parametrize("obj", [CLAIM, SLICE], ids=["claim", "slice"])
def test_a_gated_field_is_a_warning_exactly_where_its_gate_is_off(obj):
    for version in KUBERNETES_VERSIONS:
        warnings = gate_warnings(obj, version)
        named = {message.split(" feature gate")[0].rsplit(" ", 1)[-1] for _, message in warnings
                 if "feature gate" in message}
        off = {gate for gate in GATE_HISTORY if not gate_state(gate, version).default}
        assert named <= off, version
        for path, message in warnings:
            if "feature gate" in message:
                assert version in message and path


def test_the_claims_gated_fields_by_release():
    def gates(version):
        return sorted({m.split("needs the ")[1].split(" ")[0] for _, m in gate_warnings(CLAIM, version)
                       if "needs the" in m})

    assert gates("1.36") == []
    assert gates("1.35") == ["DRAConsumableCapacity", "DRADeviceTaints"]
    assert gates("1.33") == ["DRAAdminAccess", "DRAConsumableCapacity", "DRADeviceTaints", "DRAPrioritizedList"]
    paths = dict(gate_warnings(CLAIM, "1.34"))
    assert "spec.devices.constraints[0].distinctAttribute" in paths
    assert "spec.devices.requests[0].exactly.tolerations" in paths
    assert any("resource.k8s.io/v1 is not served" in m for m in dict(gate_warnings(CLAIM, "1.33")).values())


# ----------------------------------------------------------------------------------- the driver

def _inventory():
    return open_backend("simulated", profile="hgx-a100-mig", node_name="n1").inventory()


def test_dynamic_mig_needs_partitionable_devices():
    assert dynamic_mig_layout("1.36") == (True, None)
    dynamic, note = dynamic_mig_layout("1.34")
    assert not dynamic and "DRAPartitionableDevices feature gate (alpha, off by default in 1.34)" in note
    assert dynamic_mig_layout("1.35", "default,+PartitionableDevices") == (True, None)
    # 1.34 with the gate on: the combined layout (tests/gpuplugin/test_release_layouts.py)
    assert dynamic_mig_layout("1.34", "default,+PartitionableDevices") == (True, None)


def test_driver_slices_for_1_34_publish_what_1_34_can_allocate():
    result = CliRunner().invoke(cli, ["driver", "slices", "--node-name", "n1", "--profile", "hgx-a100-mig",
                                      "--dynamic-mig", "--kubernetes-version", "1.34"])
    assert result.exit_code == 0, result.output
    assert "dynamic MIG needs the DRAPartitionableDevices feature gate (alpha, off by default in 1.34)" in result.output
    slices = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert not any(s["spec"].get("sharedCounters") for s in slices)
    assert not any(d.get("consumesCounters") for s in slices for d in s["spec"].get("devices") or [])
    assert slices == build_resource_slices(_inventory(), "n1")  # the static layout
    newest = CliRunner().invoke(cli, ["driver", "slices", "--node-name", "n1", "--profile", "hgx-a100-mig",
                                      "--dynamic-mig"])
    assert any(s["spec"].get("sharedCounters") for s in yaml.safe_load_all(newest.stdout) if s)

    # A full GPU and an existing MIG device, allocated with 1.34's features on what 1.34 gets.
    node = {"metadata": {"name": "n1"}}
    claims = [{"metadata": {"name": name, "namespace": "default"},
               "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": cls}}]}}}
              for name, cls in (("full", "gpu.nvidia.com"), ("mig", "mig.nvidia.com"))]
    outcome = Allocator(device_classes(), slices, [], Features.default("1.34")).allocate(node, claims)
    assert outcome.outcome == "allocated", outcome.error
    devices = [a["devices"]["results"][0]["device"] for a in outcome.allocations]
    assert devices[0].startswith("gpu-") and "mig" in devices[1]


@pytest.mark.parametrize("flag", [["--kubernetes-version", "abc"], ["--kubernetes-version", "1.32"],
                                  ["--features", "bogus"]])
@pytest.mark.parametrize("command", [["driver", "slices"], ["driver", "run", "--backend", "simulated"]])
def test_driver_refuses_a_bad_version_or_features_without_dynamic_mig_too(command, flag):
    # A typo must not pass silently only because --dynamic-mig is absent (the flag then decides nothing).
    with tempfile.TemporaryDirectory(dir="/tmp") as root:  # short: a socket path under it must fit gRPC's limit
        where = ["--root", root, "--claims", root] if command[1] == "run" else []
        result = CliRunner().invoke(cli, [*command, "--node-name", "n1", "--profile", "l4-node", *where, *flag])
    assert result.exit_code == 2, result.output
    assert flag[0] in result.output and "Traceback" not in result.output


def test_driver_slices_say_when_the_release_cannot_allocate_consumable_sharing():
    args = ["driver", "slices", "--node-name", "n1", "--profile", "l4-node", "--sharing", "consumable", "-o", "yaml"]
    old = CliRunner().invoke(cli, [*args, "--kubernetes-version", "1.34"])
    assert old.exit_code == 0, old.output
    assert "consumable sharing needs the DRAConsumableCapacity feature gate (alpha, off by default in 1.34)" in \
        old.stderr
    for quiet in ([*args], [*args, "--kubernetes-version", "1.34", "--features", "default,+ConsumableCapacity"]):
        result = CliRunner().invoke(cli, quiet)
        assert result.exit_code == 0 and "DRAConsumableCapacity" not in result.stderr, result.output


# ----------------------------------------------------------------------------------- allocate, schedule, explain

TAINTED = [
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
     "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n1-gpu"},
     "spec": {"driver": "gpu.example.com", "nodeName": "n1", "pool": {"name": "n1", "resourceSliceCount": 1},
              "devices": [{"name": "gpu-0", "taints": [{"key": "broken", "effect": "NoSchedule"}]}]}},
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
     "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "default"},
     "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
     "spec": {"containers": [{"name": "c", "image": "x"}], "resourceClaims": [{"name": "g", "resourceClaimName": "c"}]}},
]


@pytest.fixture
def tainted(tmp_path):
    path = tmp_path / "tainted.yaml"
    path.write_text(yaml.safe_dump_all(TAINTED))
    return str(path)


def test_allocate_uses_the_releases_gates(tainted):
    # DRADeviceTaints is off by default before 1.36: the taint does not keep the device from the claim.
    old = CliRunner().invoke(cli, ["allocate", "-f", tainted, "--kubernetes-version", "1.34", "--brief"])
    new = CliRunner().invoke(cli, ["allocate", "-f", tainted, "--brief"])
    assert yaml.safe_load(old.stdout)["results"][0]["outcome"] == "allocated"
    assert yaml.safe_load(new.stdout)["results"][0]["outcome"] == "unallocatable"
    forced = CliRunner().invoke(cli, ["allocate", "-f", tainted, "--kubernetes-version", "1.34",
                                      "--features", "default,+DeviceTaints", "--brief"])
    assert yaml.safe_load(forced.stdout)["results"][0]["outcome"] == "unallocatable"


def test_schedule_and_explain_take_the_version_and_features(tainted):
    def scheduled(*args):
        result = CliRunner().invoke(cli, ["schedule", "-f", tainted, "-o", "json", *args])
        assert result.exit_code in (0, 1), result.output
        pods = [o for o in yaml.safe_load(result.stdout)["items"] if o["kind"] == "Pod"]
        return pods[0]["spec"].get("nodeName")

    assert scheduled("--kubernetes-version", "1.34") == "n1"
    assert scheduled() is None
    assert scheduled("--features", "default,-DeviceTaints") == "n1"

    def explained(*args):
        result = CliRunner().invoke(cli, ["explain", "pod/p", "-f", tainted, "-o", "json", "--no-fixes", *args])
        return yaml.safe_load(result.stdout)

    assert explained("--kubernetes-version", "1.35")["fits"] is True
    assert explained()["fits"] is False


# ----------------------------------------------------------------------------------- a live cluster

class _VersionServer(JsonHandler):
    asked = 0

    def do_GET(self):
        if self.path.split("?")[0] == "/version":
            type(self).asked += 1
            self._send(200, {"major": "1", "minor": "34", "gitVersion": "v1.34.2"})
        else:
            self._send(404, {"kind": "Status", "code": 404})


def test_a_live_cluster_reports_its_version_unless_the_flag_overrides_it(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VersionServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), server.server_address)
        assert kubernetes_version(None, (), kubeconfig) == "1.34"
        assert _VersionServer.asked == 1
        assert kubernetes_version("1.35", (), kubeconfig) == "1.35"
        assert kubernetes_version(None, ["manifests.yaml"]) == "1.36"
        assert _VersionServer.asked == 1  # neither asked the server
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(InputError) as gone:
        kubernetes_version(None, (), kubeconfig)
    # the server is gone: the flag would not help (the objects come from that server too), so no hint
    assert "cannot reach the API server" in str(gone.value) and "--kubernetes-version" not in str(gone.value)


class _NoVersionServer(JsonHandler):
    def do_GET(self):
        self._send(403, {"kind": "Status", "code": 403, "message": "forbidden: /version"})


def test_a_server_that_refuses_version_is_told_how_to_do_without_it(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoVersionServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), server.server_address)
        with pytest.raises(InputError, match=r"403 forbidden: /version \(pass --kubernetes-version"):
            kubernetes_version(None, (), kubeconfig)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("git_version, outcome", [("v1.34.2", "allocated"), ("v1.36.0", "unallocatable")])
def test_allocate_on_a_live_cluster_follows_its_release(tmp_path, git_version, outcome):
    from support.fake_apiserver import FakeApiServer

    with FakeApiServer(TAINTED, git_version=git_version) as server:
        kubeconfig = server.kubeconfig(str(tmp_path / "kubeconfig"))
        result = CliRunner().invoke(cli, ["allocate", "--kubeconfig", kubeconfig, "--brief", "-o", "yaml"])
        assert yaml.safe_load(result.stdout)["results"][0]["outcome"] == outcome, result.output
        assert ("GET", "/version") in server.requests
        # --kubernetes-version wins over the server's answer (and the server is not asked)
        server.requests.clear()
        flagged = CliRunner().invoke(cli, ["allocate", "--kubeconfig", kubeconfig, "--brief", "-o", "yaml",
                                           "--kubernetes-version", "1.35"])
        assert yaml.safe_load(flagged.stdout)["results"][0]["outcome"] == "allocated"
        assert ("GET", "/version") not in server.requests


# ----------------------------------------------------------------------------------- the local cluster

MIG_POD = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one-mig, namespace: default}
spec:
  devices:
    requests: [{name: mig, exactly: {deviceClassName: mig.nvidia.com}}]
---
apiVersion: v1
kind: Pod
metadata: {name: mig-user, namespace: default}
spec:
  resourceClaims: [{name: mig, resourceClaimName: one-mig}]
  containers: [{name: c, image: busybox, resources: {claims: [{name: mig}]}}]
"""


def test_a_1_34_local_cluster_publishes_and_schedules_what_1_34_can(cluster_state, tmp_path):
    import json

    from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_nodes
    from gpudra.cluster.nodes import up

    cluster = ClusterDir(cluster_state)
    said: list[str] = []
    up(cluster, ClusterConfig(nodes=parse_nodes("hgx-a100-mig+dynamic-mig"), kubernetes_version="1.34"),
       say=said.append, control_plane=False)
    slices = cluster.store.list("ResourceSlice")
    assert slices and not any(s["spec"].get("sharedCounters") for s in slices)  # no dynamic MIG in 1.34
    # ... and `cluster up` says so instead of announcing a dynamic-MIG node
    [line] = [s for s in said if s.startswith("node a100-0")]
    assert ", dynamic MIG" not in line and "DRAPartitionableDevices" in line, line
    manifests = tmp_path / "mig.yaml"
    manifests.write_text(yaml.safe_dump_all(device_classes()) + "---\n" + MIG_POD)
    result = CliRunner().invoke(cli, ["apply", "-f", str(manifests), "--dir", cluster_state])
    assert result.exit_code == 0, result.output
    pods = json.loads(CliRunner().invoke(cli, ["get", "pods", "-o", "json", "--dir", cluster_state]).stdout)
    [pod] = pods["items"]
    assert pod["spec"].get("nodeName")  # an existing MIG device, allocated under 1.34's gates
    nodes = json.loads(CliRunner().invoke(cli, ["get", "nodes", "-o", "json", "--dir", cluster_state]).stdout)
    assert nodes["items"][0]["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.34")


def test_validate_fix_says_when_a_repair_needs_a_gate_the_release_leaves_off():
    article = str(ROOT / "examples" / "article")
    result = CliRunner().invoke(cli, ["validate", "--fix", "--kubernetes-version", "1.34", "-f", article])
    checks = [line for line in result.stderr.splitlines() if line.startswith("check:") and "feature gate" in line]
    assert any("extendedResourceName" in line and "DRAExtendedResource" in line and "1.34" in line
               for line in checks), result.stderr
    latest = CliRunner().invoke(cli, ["validate", "--fix", "-f", article])
    assert not any("feature gate" in line for line in latest.stderr.splitlines())


def test_demo_and_cluster_up_take_the_version():
    demo = CliRunner().invoke(cli, ["demo", "--allocate-only", "--kubernetes-version", "1.34"])
    assert demo.exit_code == 0, demo.output
    assert "features: Kubernetes 1.34 defaults" in demo.stdout
    refused = CliRunner().invoke(cli, ["demo", "--allocate-only", "--kubernetes-version", "1.30"])
    assert refused.exit_code == 2 and "--kubernetes-version" in refused.output
    up = CliRunner().invoke(cli, ["cluster", "up", "--kubernetes-version", "1.30", "--dir", "/nonexistent/x"])
    assert up.exit_code == 2 and "--kubernetes-version" in up.output


EXTENDED = [
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
     "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}],
              "extendedResourceName": "example.com/gpu"}},
    TAINTED[1] | {"spec": TAINTED[1]["spec"] | {"devices": [{"name": "gpu-0"}]}},
    TAINTED[2],
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
     "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"example.com/gpu": "1"}}}]}},
]


def test_extended_resources_go_through_dra_only_where_the_gate_is_on(tmp_path):
    path = tmp_path / "extended.yaml"
    path.write_text(yaml.safe_dump_all(EXTENDED))

    def node_of(*args):
        result = CliRunner().invoke(cli, ["schedule", "-f", str(path), "-o", "json", *args])
        pods = [o for o in yaml.safe_load(result.stdout)["items"] if o["kind"] == "Pod"]
        return pods[0]["spec"].get("nodeName")

    assert node_of() == "n1"  # 1.36: DRAExtendedResource beta, on: the class serves example.com/gpu
    assert node_of("--kubernetes-version", "1.35") is None  # alpha, off: only a device plugin could
    explained = CliRunner().invoke(cli, ["explain", "pod/p", "-f", str(path), "-o", "json", "--no-fixes",
                                         "--kubernetes-version", "1.34"])
    assert yaml.safe_load(explained.stdout)["fits"] is False
    assert "example.com/gpu" in explained.stdout
