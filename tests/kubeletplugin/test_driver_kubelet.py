"""Plays the kubelet against the driver over real unix sockets: registration, prepare, unprepare, CDI."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpudra.cdi import apply_devices, default_oci_spec, load_spec_file
from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.kubeletplugin.checkpoint import load_checkpoint
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim

NODE = "node-a"


class Node:
    def __init__(self, profile: str, dynamic_mig: bool = False):
        # Short root: unix socket paths must stay under 108 bytes.
        self.root = tempfile.mkdtemp(prefix="gd", dir="/tmp")
        self.claims_dir = os.path.join(self.root, "claims")
        os.makedirs(self.claims_dir)
        self.agent = DriverAgent(AgentOptions(node_name=NODE, profile=profile, root=self.root,
                                              claims_dir=self.claims_dir, dynamic_mig=dynamic_mig, fsync=False))
        self.agent.start()
        self.kubelet = KubeletClient(self.agent.paths.registration_socket)
        self.kubelet.register()

    def claim(self, name: str, results: list[dict], **kwargs) -> tuple[str, str, str]:
        obj = allocated_claim(name, results, node_name=kwargs.pop("node_name", NODE), **kwargs)
        with open(os.path.join(self.claims_dir, f"{obj['metadata']['namespace']}_{name}.yaml"), "w") as fh:
            yaml.safe_dump(obj, fh)
        return obj["metadata"]["namespace"], name, obj["metadata"]["uid"]

    def prepare_one(self, ref):
        return self.kubelet.prepare([ref]).claims[ref[2]]

    def cdi_file(self, uid: str) -> str:
        return os.path.join(self.agent.paths.cdi_spec_dir, f"k8s.gpu.nvidia.com-claim_{uid}.yaml")

    def container(self, cdi_ids):
        return apply_devices(default_oci_spec(), list(cdi_ids), self.agent.paths.cdi_spec_dirs)

    def close(self):
        self.kubelet.close()
        self.agent.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def node():
    n = Node("hgx-a100-mig")
    yield n
    n.close()


def _device_paths(oci):
    return sorted(d["path"] for d in oci["linux"]["devices"])


def test_registration_info(node):
    info = node.kubelet.info
    assert info.type == "DRAPlugin"
    assert info.name == "gpu.nvidia.com"
    assert info.endpoint == node.agent.paths.dra_socket
    assert node.agent.paths.dra_socket == os.path.join(node.root, "var/lib/kubelet/plugins/gpu.nvidia.com/dra.sock")
    assert node.agent.paths.registration_socket == os.path.join(
        node.root, "var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                                             "v1alpha1.DRAResourceHealth"]
    assert node.kubelet.version == "v1.DRAPlugin"
    assert node.agent.plugin.registration.registered.is_set()


def test_health_service_serving(node):
    with grpc.insecure_channel(f"unix://{node.agent.paths.dra_socket}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "liveness"):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_empty_request_is_valid(node):
    assert len(node.kubelet.prepare([]).claims) == 0


def test_single_gpu_prepare_cdi_and_unprepare(node):
    ref = node.claim("one", [{"request": "gpu", "device": "gpu-4"}])
    answer = node.prepare_one(ref)
    assert answer.error == ""
    [device] = answer.devices
    assert (list(device.request_names), device.pool_name, device.device_name) == (["gpu"], NODE, "gpu-4")
    assert list(device.cdi_device_ids) == [f"k8s.gpu.nvidia.com/claim={ref[2]}-gpu-4"]
    spec = load_spec_file(node.cdi_file(ref[2]))
    assert spec.cdi_version == "0.5.0" and spec.kind == "k8s.gpu.nvidia.com/claim"
    oci = node.container(device.cdi_device_ids)
    assert _device_paths(oci) == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia4", "/dev/nvidiactl"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in oci["process"]["env"]
    rules = oci["linux"]["resources"]["devices"]
    assert {"allow": True, "type": "c", "major": 195, "minor": 4, "access": "rwm"} in rules
    # idempotent: same answer again, CDI file recreated if it vanished (tmpfs lost)
    os.unlink(node.cdi_file(ref[2]))
    again = node.prepare_one(ref)
    assert again == answer and os.path.exists(node.cdi_file(ref[2]))
    assert node.kubelet.unprepare([ref]).claims[ref[2]].error == ""
    assert not os.path.exists(node.cdi_file(ref[2]))
    assert node.kubelet.unprepare([ref]).claims[ref[2]].error == ""  # unknown claim: success
    assert load_checkpoint(node.agent.paths.checkpoint)["claims"] == {}


def test_several_gpus_and_sub_request_names(node):
    ref = node.claim("multi", [{"request": "train/big", "device": "gpu-5"},
                               {"request": "train/big", "device": "gpu-6"},
                               {"request": "infer", "device": "gpu-7"}])
    answer = node.prepare_one(ref)
    assert answer.error == ""
    got = {d.device_name: list(d.request_names) for d in answer.devices}
    assert got == {"gpu-5": ["train"], "gpu-6": ["train"], "gpu-7": ["infer"]}
    ids = [i for d in answer.devices for i in d.cdi_device_ids]
    oci = node.container(ids)
    assert {"/dev/nvidia5", "/dev/nvidia6", "/dev/nvidia7", "/dev/nvidiactl"} <= set(_device_paths(oci))
    # spec-level edits are applied once even with three devices
    assert oci["process"]["env"].count("NVIDIA_VISIBLE_DEVICES=void") == 1
    assert len(load_spec_file(node.cdi_file(ref[2])).devices) == 3


def test_static_mig_device(node):
    ref = node.claim("mig", [{"request": "mig", "device": "gpu-0-mig-1g10gb-19-2"}])
    answer = node.prepare_one(ref)
    assert answer.error == ""
    oci = node.container(answer.devices[0].cdi_device_ids)
    caps = [d for d in oci["linux"]["devices"] if d["path"].startswith("/dev/nvidia-caps/")]
    assert len(caps) == 2 and all(d["type"] == "c" and d["fileMode"] == 0o444 for d in caps)
    assert "/dev/nvidia0" in _device_paths(oci)
    gpu0 = node.agent.backend.inventory().gpus[0]
    mig = next(m for m in gpu0.mig_devices if m.name == "gpu-0-mig-1g10gb-19-2")
    entry = load_checkpoint(node.agent.paths.checkpoint)["claims"][ref[2]]
    assert entry["devices"][0]["mig"]["uuid"] == mig.uuid
    # a full GPU in MIG mode is not allocatable
    bad = node.claim("whole0", [{"request": "gpu", "device": "gpu-0"}])
    assert "MIG mode" in node.prepare_one(bad).error


def test_admin_access_device_is_shared_but_exclusive_devices_are_not(node):
    admin = node.claim("admin", [{"request": "mon", "device": "gpu-4", "adminAccess": True}])
    user = node.claim("user", [{"request": "gpu", "device": "gpu-4"}])
    other = node.claim("other", [{"request": "gpu", "device": "gpu-4"}])
    reply = node.kubelet.prepare([admin, user])
    assert reply.claims[admin[2]].error == "" and reply.claims[user[2]].error == ""
    ids = {reply.claims[admin[2]].devices[0].cdi_device_ids[0], reply.claims[user[2]].devices[0].cdi_device_ids[0]}
    assert len(ids) == 2  # per-claim CDI devices
    error = node.prepare_one(other).error
    assert "already allocated to a different claim" in error and user[2] in error
    assert not os.path.exists(node.cdi_file(other[2]))
    node.kubelet.unprepare([user])
    assert node.prepare_one(other).error == ""


def test_every_claim_is_answered_with_per_claim_errors(node):
    good = node.claim("good", [{"request": "gpu", "device": "gpu-5"}])
    ghost_uid, replacement_uid = str(uuid.uuid4()), str(uuid.uuid4())
    unknown = ("default", "ghost", ghost_uid)
    elsewhere = node.claim("elsewhere", [{"request": "gpu", "device": "gpu-1", "pool": "node-b"}], node_name="node-b")
    missing_device = node.claim("nodev", [{"request": "gpu", "device": "gpu-42"}])
    replaced = ("default", "good", replacement_uid)
    not_a_uid = ("default", "good", "not-a-uid")
    reply = node.kubelet.prepare([good, unknown, elsewhere, missing_device, replaced, not_a_uid])
    assert set(reply.claims) == {good[2], ghost_uid, elsewhere[2], missing_device[2], replacement_uid, "not-a-uid"}
    assert reply.claims[good[2]].error == ""
    assert "not found" in reply.claims[ghost_uid].error
    assert "node-b" in reply.claims[elsewhere[2]].error and not reply.claims[elsewhere[2]].devices
    assert "gpu-42" in reply.claims[missing_device[2]].error
    assert "replaced" in reply.claims[replacement_uid].error
    assert "not a Kubernetes UID" in reply.claims["not-a-uid"].error
    checkpoint = load_checkpoint(node.agent.paths.checkpoint)
    assert set(checkpoint["claims"]) == {good[2]}


def test_unallocated_claim_and_configs(node):
    ns, name, uid = node.claim("pending", [{"request": "gpu", "device": "gpu-4"}])
    path = os.path.join(node.claims_dir, f"{ns}_{name}.yaml")
    obj = yaml.safe_load(open(path))
    obj["status"] = {}
    yaml.safe_dump(obj, open(path, "w"))
    assert "not allocated" in node.prepare_one((ns, name, uid)).error

    def cfg(params, requests=None):
        return [{"source": "FromClaim", "requests": requests or [],
                 "opaque": {"driver": "gpu.nvidia.com", "parameters": params}}]

    ts = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
          "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
    ok = node.claim("ts", [{"request": "gpu", "device": "gpu-5"}], config=cfg(ts, ["gpu"]))
    assert node.prepare_one(ok).error == ""
    entry = load_checkpoint(node.agent.paths.checkpoint)["claims"][ok[2]]
    assert entry["devices"][0]["sharing"] == {"strategy": "TimeSlicing", "timeSliceInterval": "Long"}
    bad_kind = node.claim("bk", [{"request": "gpu", "device": "gpu-6"}], config=cfg({**ts, "kind": "Nope"}))
    assert "unknown kind" in node.prepare_one(bad_kind).error
    bad_field = node.claim("bf", [{"request": "gpu", "device": "gpu-6"}],
                           config=cfg({**ts, "sharing": {"strategy": "TimeSlicing", "surprise": 1}}))
    assert "unknown field" in node.prepare_one(bad_field).error
    wrong_type = node.claim("wt", [{"request": "mig", "device": "gpu-1-mig-1g10gb-19-0"}], config=cfg(ts, ["mig"]))
    assert "cannot configure mig device" in node.prepare_one(wrong_type).error
    mps = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig",
           "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25,
                                                         "defaultPinnedDeviceMemoryLimit": "2Gi"}}}
    mps_claim = node.claim("mps", [{"request": "mig", "device": "gpu-1-mig-1g10gb-19-0"}], config=cfg(mps))
    answer = node.prepare_one(mps_claim)
    assert answer.error == ""
    oci = node.container(answer.devices[0].cdi_device_ids)
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in oci["process"]["env"]
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M" in oci["process"]["env"]
    assert any(m["destination"] == "/tmp/nvidia-mps" for m in oci["mounts"])
    # claims in the store are re-read on every call: fixing the file fixes the claim
    fixed = yaml.safe_load(open(os.path.join(node.claims_dir, "default_bk.yaml")))
    fixed["status"]["allocation"]["devices"]["config"] = []
    yaml.safe_dump(fixed, open(os.path.join(node.claims_dir, "default_bk.yaml"), "w"))
    assert node.prepare_one(bad_kind).error == ""


def test_v1beta1_api():
    n = Node("l4-node")
    try:
        beta = KubeletClient(n.agent.paths.registration_socket)
        beta.register(force_version="v1beta1.DRAPlugin")
        ref = n.claim("b", [{"request": "gpu", "device": "gpu-2"}])
        answer = beta.prepare([ref]).claims[ref[2]]
        assert answer.error == "" and answer.devices[0].device_name == "gpu-2"
        assert beta.unprepare([ref]).claims[ref[2]].error == ""
        beta.close()
    finally:
        n.close()


def test_dynamic_mig_creates_and_destroys_devices():
    n = Node("dgx-h100", dynamic_mig=True)
    try:
        a = n.claim("a", [{"request": "small", "device": "gpu-2-mig-1g10gb-19-3"}])
        b = n.claim("b", [{"request": "half", "device": "gpu-2-mig-3g40gb-9-4"}])  # slices 4-7; 1g at 3 holds slice 3
        whole = n.claim("whole", [{"request": "gpu", "device": "gpu-2"}])
        reply = n.kubelet.prepare([a, b])
        assert reply.claims[a[2]].error == "" and reply.claims[b[2]].error == ""
        gpu2 = n.agent.backend.inventory().gpus[2]
        assert gpu2.mig_enabled and sorted(m.name for m in gpu2.mig_devices) == [
            "gpu-2-mig-1g10gb-19-3", "gpu-2-mig-3g40gb-9-4"]
        assert "already allocated" in n.prepare_one(whole).error
        overlap = n.claim("overlap", [{"request": "x", "device": "gpu-2-mig-2g20gb-14-2"}])
        assert "already allocated" in n.prepare_one(overlap).error
        spec = json.loads(json.dumps(load_spec_file(n.cdi_file(a[2])).to_dict()))
        assert any("nvidia-caps" in d["path"] for d in spec["devices"][0]["containerEdits"]["deviceNodes"])
        n.kubelet.unprepare([a, b])
        gpu2 = n.agent.backend.inventory().gpus[2]
        assert gpu2.mig_devices == [] and not gpu2.mig_enabled
        assert n.prepare_one(whole).error == ""
    finally:
        n.close()


def test_share_id_is_returned_on_v1(node):
    ref = node.claim("shared", [{"request": "gpu", "device": "gpu-7", "shareID": "8c5a7f0e-share"}])
    [device] = node.prepare_one(ref).devices
    assert device.HasField("share_id") and device.share_id == "8c5a7f0e-share"
    plain = node.claim("plain", [{"request": "gpu", "device": "gpu-6"}])
    assert not node.prepare_one(plain).devices[0].HasField("share_id")
