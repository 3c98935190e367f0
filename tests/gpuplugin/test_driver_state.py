"""Checkpoint, reconcile, configs, claim sources and concurrency of the prepare/unprepare core."""

from __future__ import annotations

import json
import os
import threading
from unittest import mock

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.discovery import open_backend
from gpudra.kubeletplugin.checkpoint import (API_VERSION, KIND, PREPARE_COMPLETED, PREPARE_STARTED, UNPREPARE_STARTED,
                                      CheckpointError, CompletedEntryCache, checksum, encode_checkpoint, load_checkpoint,
                                      save_checkpoint)
from gpudra.kubeletplugin.claims import ClaimSourceError, KubeClaimSource, LocalClaimStore
from gpudra.device_config import ConfigError, claim_configs, config_for, decode_opaque
from tests.support.builders import allocated_claim
from gpudra.kubeletplugin.paths import DriverPaths
from gpudra.gpuplugin.records import GpuDevice, MigPlacement
from gpudra.gpuplugin.state import ClaimRef, DeviceState, PrepareError

NODE = "n1"


class Env:
    def __init__(self, root, profile="dgx-h100", dynamic_mig=True, boot_id="boot-1"):
        self.root = str(root)
        self.paths = DriverPaths(root=self.root)
        self.claims_dir = os.path.join(self.root, "claims")
        os.makedirs(self.claims_dir, exist_ok=True)
        self.profile = profile
        self.backend = open_backend("simulated", profile=profile, node_name=NODE, state_path=self.paths.simulated_state)
        self.state = self.new_state(dynamic_mig=dynamic_mig, boot_id=boot_id)

    def new_state(self, dynamic_mig=True, boot_id="boot-1"):
        return DeviceState(driver_name="gpu.nvidia.com", node_name=NODE, backend=self.backend, paths=self.paths,
                           claims=LocalClaimStore(self.claims_dir), dynamic_mig=dynamic_mig, fsync=False,
                           boot_id=boot_id)

    def claim(self, name, devices, **kw) -> ClaimRef:
        obj = allocated_claim(name, [{"request": f"r{i}", "device": d} for i, d in enumerate(devices)],
                              node_name=NODE, **kw)
        with open(os.path.join(self.claims_dir, f"default_{name}.yaml"), "w") as fh:
            yaml.safe_dump(obj, fh)
        return ClaimRef("default", name, obj["metadata"]["uid"])

    def cdi_files(self):
        return sorted(f for f in os.listdir(self.paths.cdi_spec_dir) if f.endswith(".yaml"))

    def mig_names(self):
        return sorted(m.name for g in self.backend.inventory().gpus for m in g.mig_devices)


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    e.state.reconcile()
    return e


# -- checkpoint ------------------------------------------------------------------------------------------


def test_checkpoint_round_trip_and_corruption_detection(tmp_path):
    path = str(tmp_path / "checkpoint.json")
    assert load_checkpoint(path) is None
    data = {"nodeBootID": "b", "claims": {"u": {"state": PREPARE_COMPLETED, "devices": []}}}
    save_checkpoint(path, data)
    assert load_checkpoint(path) == data
    assert os.listdir(tmp_path) == ["checkpoint.json"]  # no temp file left behind
    doc = json.loads(open(path).read())
    doc["data"]["claims"]["u"]["devices"] = [{"device": "gpu-0"}]  # tampered without fixing the checksum
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        load_checkpoint(path)
    open(path, "w").write("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(path)
    open(path, "w").write(json.dumps({"apiVersion": "other/v9", "kind": "X"}))
    with pytest.raises(CheckpointError, match="unknown format"):
        load_checkpoint(path)


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), st.sampled_from([PREPARE_STARTED, PREPARE_COMPLETED]),
                       max_size=5))
def test_checkpoint_round_trips_any_claim_map(tmp_path_factory, claims):
    path = str(tmp_path_factory.mktemp("cp") / "cp.json")
    data = {"nodeBootID": "b", "claims": {uid: {"state": s, "devices": []} for uid, s in claims.items()}}
    save_checkpoint(path, data, fsync=False)
    assert load_checkpoint(path) == data


@settings(max_examples=50, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=10))
def test_checkpoint_encoding_is_the_canonical_json_of_the_whole_document(value):
    data = {"nodeBootID": "b", "claims": {"u": {"state": PREPARE_COMPLETED, "extra": value}}}
    doc = {"apiVersion": API_VERSION, "kind": KIND, "checksum": checksum(data), "data": data}
    assert encode_checkpoint(data) == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]),
                          st.sampled_from(["add", "complete", "unprepare", "drop"])), max_size=25))
def test_checkpoint_encoding_with_cached_entries_tracks_every_change(steps):
    cache = CompletedEntryCache()
    data = {"nodeBootID": "b", "claims": {}}
    for n, (uid, action) in enumerate(steps):
        entry = data["claims"].get(uid)
        if action == "add":
            data["claims"][uid] = {"state": PREPARE_STARTED, "devices": [{"device": f"gpu-{n}"}]}
        elif action == "complete" and entry is not None:
            entry["state"] = PREPARE_COMPLETED
        elif action == "unprepare" and entry is not None:
            entry["state"] = UNPREPARE_STARTED
        elif action == "drop":
            data["claims"].pop(uid, None)
        doc = {"apiVersion": API_VERSION, "kind": KIND, "checksum": checksum(data), "data": data}
        assert encode_checkpoint(data, cache) == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def test_checkpoint_rewrites_never_reuse_a_temp_file(tmp_path):
    """Every write creates its own temp file (O_EXCL) and renames it: a leftover at the fixed temp name of older
    versions is neither written into nor renamed over the checkpoint, and no temp file of ours is left behind."""
    path = str(tmp_path / "checkpoint.json")
    leftover = str(tmp_path / ".checkpoint.json.tmp")
    versions = [{"nodeBootID": "b", "claims": {f"u{j}": {"state": PREPARE_COMPLETED, "devices": []} for j in range(n)}}
                for n in (3, 1, 5, 0, 2)]
    with open(leftover, "w") as fh:
        fh.write("x" * 10000)
    for data in versions:
        save_checkpoint(path, data)
        assert load_checkpoint(path) == data
        assert sorted(os.listdir(tmp_path)) == [".checkpoint.json.tmp", "checkpoint.json"]
    assert open(leftover).read() == "x" * 10000


# -- prepare / unprepare / reconcile ----------------------------------------------------------------------


def test_prepare_is_idempotent_and_survives_restart(env):
    ref = env.claim("a", ["gpu-0", "gpu-1-mig-1g10gb-19-0"])
    first = env.state.prepare(ref)
    assert env.state.prepare(ref) == first
    restarted = env.new_state()
    report = restarted.reconcile()
    assert not any(report.values())
    assert restarted.prepare(ref) == first
    assert env.mig_names() == ["gpu-1-mig-1g10gb-19-0"]
    restarted.unprepare(ref)
    assert env.mig_names() == [] and env.cdi_files() == []


def test_reconcile_rolls_back_half_prepared_claims(env):
    ref = env.claim("half", ["gpu-2-mig-2g20gb-14-4"])
    # simulate a crash after the MIG device was created and before PrepareCompleted was written
    with mock.patch.object(env.state, "_write_cdi", side_effect=SystemExit("killed")):
        with pytest.raises(SystemExit):
            env.state.prepare(ref)
    assert load_checkpoint(env.paths.checkpoint)["claims"][ref.uid]["state"] == PREPARE_STARTED
    assert env.mig_names() == ["gpu-2-mig-2g20gb-14-4"]
    report = env.new_state().reconcile()
    assert report["rolledBack"] == [ref.uid]
    assert env.mig_names() == [] and load_checkpoint(env.paths.checkpoint)["claims"] == {}


def test_reconcile_finishes_interrupted_unprepare(env):
    ref = env.claim("u", ["gpu-3-mig-3g40gb-9-0"])
    env.state.prepare(ref)
    with mock.patch.object(env.state.backend, "destroy_mig_device", side_effect=SystemExit("killed")):
        with pytest.raises(SystemExit):
            env.state.unprepare(ref)
    assert load_checkpoint(env.paths.checkpoint)["claims"][ref.uid]["state"] == UNPREPARE_STARTED
    report = env.new_state().reconcile()
    assert report["unprepared"] == [ref.uid] and env.mig_names() == [] and env.cdi_files() == []


def test_reconcile_rewrites_lost_cdi_specs_and_removes_orphans(env):
    kept = env.claim("kept", ["gpu-4"])
    env.state.prepare(kept)
    os.unlink(os.path.join(env.paths.cdi_spec_dir, f"k8s.gpu.nvidia.com-claim_{kept.uid}.yaml"))  # tmpfs lost
    orphan = os.path.join(env.paths.cdi_spec_dir, "k8s.gpu.nvidia.com-claim_ghost.yaml")
    open(orphan, "w").write("---\n")
    foreign = os.path.join(env.paths.cdi_spec_dir, "other-vendor.yaml")
    open(foreign, "w").write("---\n")
    stray_mig = env.backend.create_mig_device(6, 19, 2)  # e.g. created right before a crash, never recorded
    report = env.new_state().reconcile()
    assert report["cdiRewritten"] == [kept.uid] and report["cdiRemoved"] == ["ghost"]
    assert report["migDestroyed"] == [stray_mig.name]
    assert os.path.exists(foreign)  # not ours: left alone
    assert env.cdi_files() == sorted(["other-vendor.yaml", f"k8s.gpu.nvidia.com-claim_{kept.uid}.yaml"])


def test_static_mig_devices_are_not_destroyed_without_dynamic_mig(tmp_path):
    e = Env(tmp_path, profile="hgx-a100-mig", dynamic_mig=False)
    before = e.mig_names()
    e.state.reconcile()
    ref = e.claim("s", ["gpu-0-mig-1g10gb-19-1"])
    e.state.prepare(ref)
    e.state.unprepare(ref)
    assert e.mig_names() == before and len(before) == 22


def test_reboot_forgets_prepared_claims(env):
    ref = env.claim("a", ["gpu-0"])
    env.state.prepare(ref)
    after_reboot = env.new_state(boot_id="boot-2")
    after_reboot.reconcile()
    assert load_checkpoint(env.paths.checkpoint)["claims"] == {} and env.cdi_files() == []


def test_errors(env):
    with pytest.raises(PrepareError, match="not found"):
        env.state.prepare(ClaimRef("default", "nope", "0b6c5d8e-7f1a-4c2b-9d3e-5f6a7b8c9d0e"))
    ref = env.claim("x", ["gpu-1-mig-1g10gb-19-9"])  # no placement 9
    with pytest.raises(PrepareError, match="does not exist"):
        env.state.prepare(ref)
    assert load_checkpoint(env.paths.checkpoint)["claims"] == {}
    env.state.unprepare(ref)  # never prepared: fine


def test_failed_mig_creation_rolls_back_everything(env):
    ref = env.claim("two", ["gpu-5-mig-1g10gb-19-0", "gpu-5-mig-7g80gb-0-0"])  # 7g cannot coexist with 1g
    with pytest.raises(PrepareError, match="insufficient resources"):
        env.state.prepare(ref)
    assert env.mig_names() == [] and env.cdi_files() == [] and load_checkpoint(env.paths.checkpoint)["claims"] == {}


def test_concurrent_claims_never_share_a_device(env):
    refs = [env.claim(f"c{i}", [f"gpu-{i % 4}"]) for i in range(24)]
    results: dict[str, str] = {}

    def run(ref):
        try:
            env.state.prepare(ref)
            results[ref.uid] = "ok"
        except PrepareError:
            results[ref.uid] = "busy"

    threads = [threading.Thread(target=run, args=(r,)) for r in refs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert list(results.values()).count("ok") == 4
    held = [d["device"] for e in load_checkpoint(env.paths.checkpoint)["claims"].values() for d in e["devices"]]
    assert sorted(held) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_same_claim_is_serialized(env):
    ref = env.claim("same", ["gpu-7-mig-1g20gb-15-0"])
    errors = []

    def run():
        try:
            env.state.prepare(ref)
        except PrepareError as exc:  # pragma: no cover - would be a bug
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and env.mig_names() == ["gpu-7-mig-1g20gb-15-0"]


def test_share_ids_let_claims_share_a_device(env):
    a = env.claim("sa", ["gpu-6"])
    b = env.claim("sb", ["gpu-6"])
    for ref, share in ((a, "s-1"), (b, "s-2")):
        path = os.path.join(env.claims_dir, f"default_{ref.name}.yaml")
        obj = yaml.safe_load(open(path))
        obj["status"]["allocation"]["devices"]["results"][0]["shareID"] = share
        yaml.safe_dump(obj, open(path, "w"))
    assert env.state.prepare(a)[0]["shareID"] == "s-1"
    assert env.state.prepare(b)[0]["shareID"] == "s-2"
    c = env.claim("sc", ["gpu-6"])  # no share ID: exclusive, so it conflicts
    with pytest.raises(PrepareError, match="already allocated"):
        env.state.prepare(c)


# -- configs ---------------------------------------------------------------------------------------------


def _opaque(params, requests=(), source="FromClaim", driver="gpu.nvidia.com"):
    return {"source": source, "requests": list(requests), "opaque": {"driver": driver, "parameters": params}}


GPU_TS = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
          "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}}}


def test_config_precedence_class_then_claim_last_wins():
    class_cfg = {**GPU_TS, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
    allocation = {"devices": {"config": [_opaque(GPU_TS, ["gpu"]), _opaque(class_cfg, source="FromClass"),
                                         _opaque({"anything": 1}, driver="other.example.com")]}}
    configs = claim_configs(allocation, "gpu.nvidia.com")
    assert [c.source for c in configs] == ["FromClass", "FromClaim"]
    assert config_for(configs, "gpu", "gpu", "gpu-0").sharing.time_slice_interval == "Short"
    assert config_for(configs, "gpu/sub", "gpu", "gpu-0").sharing.time_slice_interval == "Short"
    assert config_for(configs, "other", "gpu", "gpu-0").sharing.time_slice_interval == "Long"
    assert config_for(configs, "other", "mig", "gpu-0-mig-1g10gb-19-0") is None


@pytest.mark.parametrize("params, message", [
    ({**GPU_TS, "apiVersion": "resource.nvidia.com/v9"}, "unknown apiVersion"),
    ({**GPU_TS, "extra": True}, "unknown field"),
    ({**GPU_TS, "sharing": {"strategy": "Spatial"}}, "must be TimeSlicing or MPS"),
    ({**GPU_TS, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}}}, "interval"),
    ({**GPU_TS, "sharing": {"strategy": "MPS", "timeSlicingConfig": {}}}, "only allowed with strategy TimeSlicing"),
    ({**GPU_TS, "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}}, "0..100"),
    ({**GPU_TS, "sharing": {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "10Ki"}}},
     "at least 1Mi"),
    ({**GPU_TS, "sharing": {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "lots"}}},
     "invalid quantity"),
    ({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig",
      "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}}}, "unknown field"),
    ("{broken", "not valid JSON"),
])
def test_invalid_configs_are_rejected(params, message):
    with pytest.raises(ConfigError, match=message):
        decode_opaque(params, "config[0]")


def test_mps_config_values():
    kind, sharing = decode_opaque(json.dumps({
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 40,
                                                     "defaultPinnedDeviceMemoryLimit": "10Gi",
                                                     "defaultPerDevicePinnedMemoryLimit": {"0": "5Gi"}}}}), "c")
    assert kind == "GpuConfig"
    assert sharing.to_dict() == {"strategy": "MPS", "mpsActiveThreadPercentage": 40, "mpsPinnedMemoryLimitMiB": 10240,
                                 "mpsPerDevicePinnedMemoryMiB": {"0": 5120}}


# -- claim sources --------------------------------------------------------------------------------------


def test_local_claim_store_reads_every_call_and_scans(tmp_path):
    store = LocalClaimStore(str(tmp_path))
    claim = allocated_claim("c1", [{"request": "gpu", "device": "gpu-0"}], namespace="team", uid="u1")
    other = allocated_claim("c2", [{"request": "gpu", "device": "gpu-1"}], namespace="team", uid="u2")
    (tmp_path / "bundle.yaml").write_text(yaml.safe_dump_all([claim, {"kind": "Pod", "metadata": {"name": "p"}}]))
    (tmp_path / "list.json").write_text(json.dumps({"kind": "ResourceClaimList", "items": [other]}))
    assert store.get("team", "c1")["metadata"]["uid"] == "u1"
    assert store.get("team", "c2")["metadata"]["uid"] == "u2"
    assert store.get("default", "c1") is None
    claim["metadata"]["uid"] = "u1-new"
    (tmp_path / "bundle.yaml").write_text(yaml.safe_dump(claim) + "# changed size\n")
    assert store.get("team", "c1")["metadata"]["uid"] == "u1-new"
    (tmp_path / "broken.yaml").write_text("a: [")
    with pytest.raises(ClaimSourceError, match="broken.yaml"):
        store.get("team", "missing")
    with pytest.raises(ClaimSourceError, match="does not exist"):
        LocalClaimStore(str(tmp_path / "nowhere")).get("a", "b")


class _ApiException(Exception):
    def __init__(self, status):
        super().__init__(status)
        self.status, self.reason = status, "x"


def test_kube_claim_source(monkeypatch):
    import kubernetes.client.exceptions as exceptions

    monkeypatch.setattr(exceptions, "ApiException", _ApiException)
    api = mock.Mock(spec=["read_namespaced_resource_claim"])
    api.read_namespaced_resource_claim.side_effect = [_ApiException(503), {"metadata": {"uid": "u"}}]
    source = KubeClaimSource(api, backoff_s=0.001)
    assert source.get("ns", "c") == {"metadata": {"uid": "u"}}
    api.read_namespaced_resource_claim.assert_called_with("c", "ns")
    api.read_namespaced_resource_claim.side_effect = [_ApiException(404)]
    assert source.get("ns", "c") is None
    api.read_namespaced_resource_claim.side_effect = [_ApiException(403)]
    with pytest.raises(ClaimSourceError, match="403"):
        source.get("ns", "c")


def test_device_numbers_from_proc_files(tmp_path):
    from gpudra.gpuplugin import cdiedits
    from gpudra.kubeletplugin import cdispec

    devices = tmp_path / "devices"
    devices.write_text("Character devices:\n  1 mem\n195 nvidia\n236 nvidia-caps\n508 nvidia-uvm\n\n"
                       "Block devices:\n  8 sd\n236 not-a-char\n")
    assert cdispec.read_char_majors(str(devices)) == {"mem": 1, "nvidia": 195, "nvidia-caps": 236, "nvidia-uvm": 508}
    minors = tmp_path / "mig-minors"
    minors.write_text("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\ngpu1/gi2/access 156\n"
                      "gpu1/gi2/ci0/access 157\n")
    table = cdiedits.read_mig_minors(str(minors))
    assert cdiedits.mig_cap_minors(1, 2, 0, table) == (156, 157)
    assert cdiedits.mig_cap_minors(0, 0, 0) == (3, 4)  # the driver's numbering without a table
    assert cdiedits.mig_cap_minors(1, 2, 0) == (156, 157)
    mig = GpuDevice(type="mig", device="gpu-1-mig-1g10gb-19-0", pool="n", request="r", request_names=("r",),
                    admin_access=False, cdi_device_ids=(), gpu_minor=1,
                    mig=MigPlacement(gi_profile_id=19, start=0, size=1, dynamic=False, gi_id=2, ci_id=0))
    spec = cdiedits.claim_spec("gpu.nvidia.com", "u", [mig],
                              majors=cdispec.read_char_majors(str(devices)), mig_minors=table)
    nodes = spec.devices[0].container_edits.device_nodes
    assert [(n.path, n.major, n.minor) for n in nodes] == [
        ("/dev/nvidia1", 195, 1), ("/dev/nvidia-caps/nvidia-cap156", 236, 156),
        ("/dev/nvidia-caps/nvidia-cap157", 236, 157)]
    assert [n.major for n in spec.container_edits.device_nodes] == [195, 508, 508]
