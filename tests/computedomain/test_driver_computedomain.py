"""The compute-domain kubelet plugin (compute-domain.nvidia.com), played against as the kubelet plays it.

What it must do is NVIDIA's (k8s-dra-driver-gpu cmd/compute-domain-kubelet-plugin: deviceinfo.go, driver.go,
device_state.go, computedomain.go; deployments/helm templates deviceclass-compute-domain-*.yaml): the facts are
written out here as the upstream text says them (device names and attributes, the DeviceClass CEL expressions
verbatim, the channel device node path and mode) and compared with what the plugin publishes and prepares
through its real gRPC socket. No GB200 hardware was used: the clique comes from the simulated gb200-nvl72 profile
and from a fake libnvidia-ml (tests/support/fake_libnvml.py) behind the real pynvml.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import uuid

import pytest
import yaml

from gpudra.cdi import apply_devices, default_oci_spec, load_spec_file
from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.computedomain.agent import ComputeDomainAgent
from gpudra.kubeletplugin.checkpoint import entry_problem, load_checkpoint
from gpudra.computedomain.devices import (IMEX_CHANNEL_COUNT, CliqueError, compute_domain_device_classes,
                                         compute_domain_slices, node_clique, parse_nvcap)
from gpudra.computedomain.domains import DirectoryDomainSource, domain_from_object
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from gpudra.discovery import open_backend
from tests.support.builders import allocated_claim

NODE = "tray-1"
DRIVER = "compute-domain.nvidia.com"
NV = "resource.nvidia.com/v1beta1"
RACK_CLIQUE = "4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f.1"  # the simulated gb200-nvl72 profile's

# deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-compute-domain-*.yaml, verbatim
UPSTREAM_CLASSES = {
    "compute-domain-daemon.nvidia.com":
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == "
        "'daemon'",
    "compute-domain-default-channel.nvidia.com":
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == "
        "'channel' && device.attributes['compute-domain.nvidia.com'].id == 0",
}


def compute_domain(uid: str, name: str = "cd", namespace: str = "default", nodes: list[dict] | None = None) -> dict:
    return {"apiVersion": NV, "kind": "ComputeDomain", "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
            "status": {"status": "NotReady", "nodes": nodes or []}}


def status_node(name: str, status: str = "Ready", ip: str = "10.0.0.1", clique: str = RACK_CLIQUE) -> dict:
    return {"name": name, "ipAddress": ip, "cliqueID": clique, "index": 0, "status": status}


def channel_config(domain: str, mode: str | None = None, request: str = "channel") -> dict:
    parameters = {"apiVersion": NV, "kind": "ComputeDomainChannelConfig", "domainID": domain}
    if mode is not None:
        parameters["allocationMode"] = mode
    return {"source": "FromClaim", "requests": [request], "opaque": {"driver": DRIVER, "parameters": parameters}}


def daemon_config(domain: str, request: str = "daemon") -> dict:
    return {"source": "FromClaim", "requests": [request],
            "opaque": {"driver": DRIVER, "parameters": {"apiVersion": NV, "kind": "ComputeDomainDaemonConfig",
                                                        "domainID": domain}}}


class Node:
    """One tray: the compute-domain agent on its own sockets, a claim store and a ComputeDomain directory."""

    def __init__(self, profile: str = "gb200-nvl72", backend=None, start: bool = True):
        self.root = tempfile.mkdtemp(prefix="cd", dir="/tmp")  # short: unix socket paths
        self.claims_dir = os.path.join(self.root, "claims")
        self.domains_dir = os.path.join(self.root, "domains")
        os.makedirs(self.claims_dir)
        os.makedirs(self.domains_dir)
        self.options = AgentOptions(node_name=NODE, profile=profile, root=self.root, claims_dir=self.claims_dir,
                                    domains_dir=self.domains_dir, driver_name=DRIVER, fsync=False,
                                    domain_ready_wait_s=0.0)
        self.backend = backend
        self.agent: ComputeDomainAgent | None = None
        self.kubelet: KubeletClient | None = None
        if start:
            self.start()

    def start(self) -> None:
        self.agent = ComputeDomainAgent(self.options, backend=self.backend)
        self.agent.start()
        self.kubelet = KubeletClient(self.agent.paths.registration_socket)
        self.kubelet.register()

    def stop(self) -> None:
        if self.kubelet is not None:
            self.kubelet.close()
        if self.agent is not None:
            self.agent.stop()
        self.kubelet = self.agent = None

    def domain(self, obj: dict) -> None:
        with open(os.path.join(self.domains_dir, f"{obj['metadata']['uid']}.yaml"), "w") as fh:
            yaml.safe_dump(obj, fh)

    def claim(self, name: str, device: str, config: list[dict], namespace: str = "default",
              request: str | None = None) -> tuple[str, str, str]:
        request = request or device.split("-")[0]
        obj = allocated_claim(name, [{"request": request, "device": device}], namespace=namespace, node_name=NODE,
                              driver_name=DRIVER, config=config)
        with open(os.path.join(self.claims_dir, f"{namespace}_{name}.yaml"), "w") as fh:
            yaml.safe_dump(obj, fh)
        return namespace, name, obj["metadata"]["uid"]

    def prepare(self, ref):
        assert self.kubelet is not None
        return self.kubelet.prepare([ref]).claims[ref[2]]

    def unprepare(self, ref):
        assert self.kubelet is not None
        return self.kubelet.unprepare([ref]).claims[ref[2]]

    @property
    def paths(self):
        assert self.agent is not None
        return self.agent.paths

    def cdi_file(self, uid: str) -> str:
        return os.path.join(self.paths.cdi_spec_dir, f"k8s.compute-domain.nvidia.com-claim_{uid}.yaml")

    def labels(self) -> dict:
        return DirectoryDomainSource(self.domains_dir)._labels()

    def checkpoint_claims(self) -> dict:
        return load_checkpoint(self.paths.checkpoint)["claims"]

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def node():
    n = Node()
    yield n
    n.close()


def _device_paths(oci) -> list[str]:
    return sorted(d["path"] for d in oci["linux"].get("devices") or [])


# -- what is published --------------------------------------------------------------------------------------
def test_registers_as_a_second_plugin_beside_the_gpu_plugin(node):
    """Two kubelet plugins with separate registration sockets and plugin directories (helm kubeletplugin.yaml:
    the `compute-domains` and `gpus` containers)."""
    gpu = DriverAgent(AgentOptions(node_name=NODE, profile="gb200-nvl72", root=node.root, claims_dir=node.claims_dir,
                                   fsync=False, health_events=False))
    gpu.start()
    try:
        gpu_kubelet = KubeletClient(gpu.paths.registration_socket)
        assert gpu_kubelet.register().name == "gpu.nvidia.com"
        gpu_kubelet.close()
        assert node.kubelet.info.name == DRIVER
        assert node.paths.registration_socket == os.path.join(
            node.root, "var/lib/kubelet/plugins_registry/compute-domain.nvidia.com-reg.sock")
        assert node.kubelet.info.endpoint == os.path.join(
            node.root, "var/lib/kubelet/plugins/compute-domain.nvidia.com/dra.sock")
        assert gpu.paths.plugin_dir != node.paths.plugin_dir and gpu.paths.checkpoint != node.paths.checkpoint
    finally:
        gpu.stop()


def test_published_devices_are_upstreams_plus_the_clique(node):
    """deviceinfo.go: `channel-<id>` and `daemon-<id>`, attributes type (string) and id (int); driver.go publishes
    channel 0 only. gpudra adds cliqueID (the node's clique), which NVIDIA's plugin does not publish."""
    with open(os.path.join(node.paths.plugin_dir, "resourceslices.yaml"), encoding="utf-8") as fh:
        [published] = list(yaml.safe_load_all(fh))
    assert published["spec"]["driver"] == DRIVER and published["spec"]["pool"]["name"] == NODE
    assert published["spec"]["devices"] == [
        {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0},
                                             "cliqueID": {"string": RACK_CLIQUE}}},
        {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0},
                                            "cliqueID": {"string": RACK_CLIQUE}}}]
    bare = compute_domain_slices("n", "")[0]["spec"]["devices"]
    assert all("cliqueID" not in d["attributes"] for d in bare)  # no fabric: no clique attribute


def test_device_classes_are_upstreams_and_select_the_published_devices():
    from gpudra.allocator import Allocator, Features
    from gpudra.api.validate import validate_documents
    from gpudra.api.load import Document

    classes = compute_domain_device_classes()
    assert {c["metadata"]["name"]: c["spec"]["selectors"][0]["cel"]["expression"] for c in classes} == UPSTREAM_CLASSES
    assert not [p for p in validate_documents([Document(c, "classes", 1) for c in classes]) if p.severity == "error"]
    slices = compute_domain_slices("tray-1", RACK_CLIQUE, channels=3)
    for class_name, wanted in (("compute-domain-default-channel.nvidia.com", "channel-0"),
                               ("compute-domain-daemon.nvidia.com", "daemon-0")):
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "c", "namespace": "default", "uid": str(uuid.uuid4())},
                 "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": class_name,
                                                                              "allocationMode": "All"}}]}}}
        outcome = Allocator(classes, slices, [], Features.parse("default")).allocate("tray-1", [claim])
        assert outcome.outcome == "allocated"
        assert [r["device"] for r in outcome.allocations[0]["devices"]["results"]] == [wanted]  # id == 0 only


def test_deviceclasses_command_prints_both_drivers_classes():
    from click.testing import CliRunner

    from gpudra.cli import cli

    out = CliRunner().invoke(cli, ["driver", "deviceclasses", "-o", "yaml"])
    assert out.exit_code == 0, out.output
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(out.stdout)]
    assert names == ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com", *UPSTREAM_CLASSES]
    only = CliRunner().invoke(cli, ["driver", "deviceclasses", "--driver", "compute-domain", "-o", "json"])
    assert [d["metadata"]["name"] for d in json.loads(only.stdout)["items"]] == list(UPSTREAM_CLASSES)
    slices = CliRunner().invoke(cli, ["driver", "slices", "--driver", "compute-domain", "--profile", "gb200-nvl72",
                                      "--node", "t", "-o", "json"])
    assert slices.exit_code == 0, slices.output
    [obj] = json.loads(slices.stdout)["items"]
    assert [d["name"] for d in obj["spec"]["devices"]] == ["channel-0", "daemon-0"]


# -- channel prepare: readiness gating -------------------------------------------------------------------------
def test_channel_prepare_waits_for_the_daemon_then_injects_channel_0(node):
    uid = str(uuid.uuid4())
    node.domain(compute_domain(uid, nodes=[status_node(NODE, "NotReady")]))
    ref = node.claim("wl", "channel-0", [channel_config(uid)])
    answer = node.prepare(ref)
    assert "not ready" in answer.error and "retrying" in answer.error
    assert list(answer.devices) == []
    assert node.labels() == {NODE: uid}  # the label that brings the domain's daemon here stays while it retries
    assert node.checkpoint_claims() == {} and not os.path.exists(node.cdi_file(ref[2]))
    node.domain(compute_domain(uid, nodes=[status_node(NODE, "Ready")]))
    answer = node.prepare(ref)
    assert answer.error == ""
    [device] = answer.devices
    assert (device.device_name, list(device.cdi_device_ids)) == (
        "channel-0", [f"k8s.compute-domain.nvidia.com/claim={ref[2]}-channel-0"])
    spec = load_spec_file(node.cdi_file(ref[2]))
    assert spec.kind == "k8s.compute-domain.nvidia.com/claim"
    oci = apply_devices(default_oci_spec(), list(device.cdi_device_ids), node.paths.cdi_spec_dirs)
    assert _device_paths(oci) == ["/dev/nvidia-caps-imex-channels/channel0"]  # nvlib.go, mode 0666
    [dev] = oci["linux"]["devices"]
    assert (dev["type"], dev["minor"], dev["fileMode"]) == ("c", 0, 0o666)
    assert node.prepare(ref) == answer  # idempotent
    assert node.unprepare(ref).error == ""
    assert node.labels() == {} and node.checkpoint_claims() == {} and not os.path.exists(node.cdi_file(ref[2]))


def test_allocation_mode_all_injects_every_channel(node):
    uid = str(uuid.uuid4())
    node.domain(compute_domain(uid, nodes=[status_node(NODE)]))
    ref = node.claim("all", "channel-0", [channel_config(uid, "All")])
    answer = node.prepare(ref)
    assert answer.error == ""
    oci = apply_devices(default_oci_spec(), list(answer.devices[0].cdi_device_ids), node.paths.cdi_spec_dirs)
    paths = _device_paths(oci)
    assert len(paths) == IMEX_CHANNEL_COUNT == 2048
    assert set(paths) == {f"/dev/nvidia-caps-imex-channels/channel{n}" for n in range(2048)}


def test_refusals_before_anything_is_labelled(node):
    uid, other = str(uuid.uuid4()), str(uuid.uuid4())
    missing = node.claim("missing", "channel-0", [channel_config(uid)])
    assert "ComputeDomain not found" in node.prepare(missing).error
    node.domain(compute_domain(uid, namespace="team-a", nodes=[status_node(NODE)]))
    wrong_ns = node.claim("elsewhere", "channel-0", [channel_config(uid)])
    assert "namespace is different" in node.prepare(wrong_ns).error
    no_config = node.claim("bare", "channel-0", [])
    assert "domainID cannot be empty" in node.prepare(no_config).error  # upstream's default config fails Validate
    daemon_kind = node.claim("mixed", "channel-0", [daemon_config(uid, request="channel")], namespace="team-a")
    assert "ComputeDomainDaemonConfig cannot configure channel device" in node.prepare(daemon_kind).error
    unknown = node.claim("ghost", "channel-7000", [channel_config(uid)], namespace="team-a", request="channel")
    assert "does not exist" in node.prepare(unknown).error
    assert node.labels() == {}
    # a node labelled for another domain refuses the claim, and forgets its join (computedomain.go AddNodeLabel)
    DirectoryDomainSource(node.domains_dir).join(NODE, other)
    ok_ns = node.claim("ok", "channel-0", [channel_config(uid)], namespace="team-a")
    assert "serves another ComputeDomain" in node.prepare(ok_ns).error
    assert node.labels() == {NODE: other}
    assert not (load_checkpoint(node.paths.checkpoint).get("domainJoins") or {})


def test_unprepare_of_a_claim_that_never_became_ready_removes_the_label(node):
    uid = str(uuid.uuid4())
    node.domain(compute_domain(uid))
    ref = node.claim("waiting", "channel-0", [channel_config(uid)])
    assert "not ready" in node.prepare(ref).error
    assert node.labels() == {NODE: uid}
    node.stop()  # the join survives a restart of the plugin: it is in the checkpoint
    node.start()
    assert node.unprepare(ref).error == ""
    assert node.labels() == {}


def test_no_clique_prepares_without_device_nodes():
    """device_state.go: with an empty clique ID the channel's IMEX device nodes are not injected (no IMEX)."""
    n = Node(profile="dgx-h100")
    try:
        uid = str(uuid.uuid4())
        n.domain(compute_domain(uid, nodes=[status_node(NODE, clique="")]))
        ref = n.claim("wl", "channel-0", [channel_config(uid, "All")])
        answer = n.prepare(ref)
        assert answer.error == ""
        assert [(d.device_name, list(d.cdi_device_ids)) for d in answer.devices] == [("channel-0", [])]
        assert not os.path.exists(n.cdi_file(ref[2]))
        n.stop()
        n.start()
        assert n.agent.reconcile_report["cdiRewritten"] == []
        assert n.unprepare(ref).error == "" and n.checkpoint_claims() == {}
    finally:
        n.close()


# -- daemon prepare -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dns_names", [True, False], ids=["IMEXDaemonsWithDNSNames", "IPs"])
def test_daemon_prepare_writes_the_imex_files_and_mounts_them(node, dns_names):
    node.stop()
    node.options = dataclasses.replace(node.options, imex_dns_names=dns_names)
    node.start()
    uid = str(uuid.uuid4())
    node.domain(compute_domain(uid, name="job-cd", namespace="team-a", nodes=[
        dict(status_node(NODE, "NotReady", "10.0.0.1"), index=1), status_node("tray-2", "Ready", "10.0.0.2"),
        status_node("other-rack", "Ready", "10.9.0.1", clique="4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f.2")]))
    ref = node.claim("daemon", "daemon-0", [daemon_config(uid)], namespace="team-a")
    answer = node.prepare(ref)  # the daemon's own claim is not gated on readiness: it is what becomes ready
    assert answer.error == ""
    oci = apply_devices(default_oci_spec(), list(answer.devices[0].cdi_device_ids), node.paths.cdi_spec_dirs)
    env = oci["process"]["env"]
    for expected in (f"CLIQUE_ID={RACK_CLIQUE}", f"COMPUTE_DOMAIN_UUID={uid}", "COMPUTE_DOMAIN_NAME=job-cd",
                     "COMPUTE_DOMAIN_NAMESPACE=team-a"):
        assert expected in env
    [mount] = [m for m in oci["mounts"] if m["destination"] == "/imexd"]
    directory = os.path.join(node.paths.plugin_dir, "domains", uid)
    assert mount["source"] == directory
    with open(os.path.join(directory, "nodes.cfg"), encoding="ascii") as fh:
        nodes_cfg = fh.read()
    if dns_names:  # dnsnames.go WriteNodesConfig: all maxNodesPerIMEXDomain (18) names; the clique's IPs in hosts
        assert nodes_cfg == "".join(f"compute-domain-daemon-{i:04d}\n" for i in range(18))
        with open(os.path.join(directory, "hosts"), encoding="ascii") as fh:
            assert fh.read() == ("# Compute Domain Daemon mappings\n10.0.0.2\tcompute-domain-daemon-0000\n"
                                 "10.0.0.1\tcompute-domain-daemon-0001\n")
    else:
        assert nodes_cfg == "10.0.0.1\n10.0.0.2\n"  # the peers of this clique only (writeDaemonsConfig)
        assert not os.path.exists(os.path.join(directory, "hosts"))
    with open(os.path.join(directory, "imexd.cfg.tmpl"), encoding="ascii") as fh:
        template = fh.read()
    assert "IMEX_NODE_CONFIG_FILE={{ .IMEXDaemonNodesConfigPath }}" in template
    assert "IMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}" in template
    assert node.unprepare(ref).error == ""
    assert not os.path.exists(directory)


def test_restart_rewrites_lost_files_and_removes_orphans(node):
    uid = str(uuid.uuid4())
    node.domain(compute_domain(uid, nodes=[status_node(NODE)]))
    daemon = node.claim("daemon", "daemon-0", [daemon_config(uid)])
    channel = node.claim("wl", "channel-0", [channel_config(uid)])
    assert node.prepare(daemon).error == "" and node.prepare(channel).error == ""
    directory = os.path.join(node.paths.plugin_dir, "domains", uid)
    orphan = os.path.join(node.paths.plugin_dir, "domains", str(uuid.uuid4()))
    cdi_file = node.cdi_file(channel[2])
    node.stop()
    shutil.rmtree(directory)
    os.unlink(cdi_file)  # /var/run/cdi is a tmpfs
    os.makedirs(orphan)
    node.start()
    report = node.agent.reconcile_report
    assert report["domainDirsRewritten"] == [uid] and report["cdiRewritten"] == [channel[2]]
    assert report["domainDirsRemoved"] == [os.path.basename(orphan)]
    assert os.path.isfile(os.path.join(directory, "imexd.cfg.tmpl")) and not os.path.exists(orphan)
    assert os.path.exists(node.cdi_file(channel[2]))
    assert node.prepare(channel).error == ""


def test_checkpoint_entries_of_the_compute_domain_driver_are_judged():
    good = {"state": "PrepareCompleted", "namespace": "default", "name": "c", "devices": [
        {"type": "channel", "gpuMinor": None, "gpuUUID": None, "slices": None, "mig": None,
         "domainID": str(uuid.uuid4()), "imexChannels": [0, 1], "request": "channel", "requestNames": ["channel"],
         "pool": NODE, "device": "channel-0", "adminAccess": False, "sharing": None, "cdiDeviceIDs": []}]}
    uid = str(uuid.uuid4())
    assert entry_problem(uid, good) is None
    for key, value, problem in (("domainID", "../../etc", "domainID is not a UID"),
                                ("imexChannels", [5, 1], "imexChannels"), ("gpuMinor", 3, "names a GPU")):
        bad = json.loads(json.dumps(good))
        bad["devices"][0][key] = value
        assert problem in entry_problem(uid, bad)


# -- the NVML path for the clique ----------------------------------------------------------------------------
def test_clique_from_nvml_fabric_info(monkeypatch):
    """nvlib.go getCliqueIDLegacy: the clusterUuid and cliqueId of nvmlDeviceGetGpuFabricInfo, one per node; GPUs
    whose fabric is not attached are skipped; none attached: no clique; two cliques: an error."""
    import pynvml
    from support.fake_libnvml import from_simulated, install

    from gpudra.discovery.nvml import NvmlBackend

    cluster = bytes(range(16))
    lib = from_simulated("dgx-b200")
    for gpu in lib.gpus:
        gpu.fabric = (cluster, 7, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED)
    lib.gpus[0].fabric = (cluster, 7, pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS)
    install(monkeypatch, lib)
    backend = NvmlBackend(node_name=NODE)
    clique = "00010203-0405-0607-0809-0a0b0c0d0e0f.7"
    assert node_clique(backend.inventory()) == clique
    n = Node(backend=backend)
    try:
        with open(os.path.join(n.paths.plugin_dir, "resourceslices.yaml"), encoding="utf-8") as fh:
            [published] = list(yaml.safe_load_all(fh))
        assert {d["attributes"]["cliqueID"]["string"] for d in published["spec"]["devices"]} == {clique}
    finally:
        n.close()
    lib.gpus[1].fabric = (cluster, 8, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED)
    with pytest.raises(CliqueError, match="2 NVLink fabric cliques"):
        node_clique(NvmlBackend(node_name=NODE).inventory())
    lib.gpus[1].fabric = (bytes(range(1, 17)), 7, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED)
    with pytest.raises(CliqueError, match="cluster UUIDs"):
        node_clique(NvmlBackend(node_name=NODE).inventory())
    for gpu in lib.gpus:
        gpu.fabric = None  # NVML_ERROR_NOT_SUPPORTED: no fabric
    assert node_clique(NvmlBackend(node_name=NODE).inventory()) == ""
    assert node_clique(open_backend("simulated", profile="gb200-nvl72", node_name="x").inventory()) == RACK_CLIQUE


def test_fabric_imex_mgmt_capability_is_read_as_upstream_parses_it():
    """internal/common/nvcaps.go ParseNVCapDeviceInfo: "Key: value" lines, decimal; path nvidia-cap<minor>."""
    node = parse_nvcap("DeviceFileMinor: 4\nDeviceFileMode: 256\nDeviceFileModify: 1\n", 240)
    assert (node.path, node.major, node.minor, node.file_mode) == ("/dev/nvidia-caps/nvidia-cap4", 240, 4, 0o400)
    assert parse_nvcap("nothing here", 240) is None


def test_domain_from_object_reads_status_nodes_and_skips_junk():
    uid = str(uuid.uuid4())
    obj = compute_domain(uid, nodes=[status_node("a"), {"ipAddress": "1.2.3.4"}, "junk",
                                     status_node("b", "NotReady", "10.0.0.2")])
    info = domain_from_object(obj)
    assert info is not None and [n.name for n in info.nodes] == ["a", "b"]
    assert info.node_ready("a") and not info.node_ready("b") and not info.node_ready("c")
    assert domain_from_object({"kind": "ComputeDomain", "metadata": {}}) is None


def test_kube_domain_source_through_the_official_client(tmp_path):
    """KubeDomainSource against a loopback API server: ComputeDomains listed from resource.nvidia.com/v1beta1, the
    node label set and removed with patches (a null value deletes a label in a merge patch)."""
    import threading
    from http.server import ThreadingHTTPServer

    from support.fake_http import JsonHandler, write_kubeconfig

    from gpudra.computedomain.domains import DomainError, KubeDomainSource

    uid, other = str(uuid.uuid4()), str(uuid.uuid4())
    node_obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {"a": "b"}}}
    patches: list[tuple[str, dict]] = []

    class Handler(JsonHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.startswith("/apis/resource.nvidia.com/v1beta1/computedomains"):
                self._send(200, {"apiVersion": NV, "kind": "ComputeDomainList", "metadata": {},
                                 "items": [compute_domain(other, name="x"),
                                           compute_domain(uid, nodes=[status_node(NODE)])]})
            elif self.path.startswith(f"/api/v1/nodes/{NODE}"):
                self._send(200, node_obj)
            else:
                self._send(404, {"kind": "Status", "apiVersion": "v1", "code": 404, "reason": "NotFound"})

        def do_PATCH(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            patches.append((self.headers["Content-Type"], body))
            labels = node_obj["metadata"]["labels"]
            for key, value in body["metadata"]["labels"].items():
                if value is None:
                    labels.pop(key, None)
                else:
                    labels[key] = value
            self._send(200, node_obj)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        source = KubeDomainSource.from_kubeconfig(write_kubeconfig(str(tmp_path / "kubeconfig"),
                                                                   server.server_address))
        found = source.domain(uid)
        assert found is not None and found.node_ready(NODE) and source.domain(str(uuid.uuid4())) is None
        source.join(NODE, uid)
        source.join(NODE, uid)  # already labelled: no second patch
        assert node_obj["metadata"]["labels"] == {"a": "b", "resource.nvidia.com/computeDomain": uid}
        with pytest.raises(DomainError, match="serves another ComputeDomain"):
            source.join(NODE, other)
        source.leave(NODE, other)  # another domain's leave keeps the label
        source.leave(NODE, uid)
        assert node_obj["metadata"]["labels"] == {"a": "b"} and len(patches) == 2
        assert patches[1][1] == {"metadata": {"labels": {"resource.nvidia.com/computeDomain": None}}}
    finally:
        server.shutdown()
