"""A node upgraded in place keeps its prepared claims: checkpoint files written by the driver before checkpoints had a
version (tests/data/checkpoints/v0, made by the code of commit 29c7556: see the README there) are read as typed
records without loss, a restarted driver keeps every claim prepared, unprepares them, and rewrites the file with
`version: 1`. A checkpoint of a version this driver does not know is not guessed at: its entries are quarantined
with their devices reserved, the file kept byte for byte beside it, and `gpudra driver status` says why.

Upstream NVIDIA versions its checkpoint the same way (cmd/gpu-kubelet-plugin/checkpoint.go: `Version`,
`ToLatestVersion` turning a V1 checkpoint into V2 on read, the latest written on every save)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.computedomain.domains import DirectoryDomainSource
from gpudra.computedomain.state import ComputeDomainState
from gpudra.discovery import open_backend
from gpudra.gpuplugin.sharing import RecordingSharing, read_sharing_log
from gpudra.gpuplugin.state import ClaimRef, DeviceState, PrepareError
from gpudra.kubeletplugin.checkpoint import (API_VERSION, CHECKPOINT_VERSION, KIND, CheckpointVersionError, checksum,
                                             load_checkpoint, read_checkpoint)
from gpudra.kubeletplugin.claims import LocalClaimStore
from gpudra.kubeletplugin.paths import DriverPaths
from gpudra.kubeletplugin.prepared import ClaimEntry
from gpudra.kubeletplugin.quarantine import load_quarantine

V0 = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "checkpoints", "v0")
# version 1 as the driver wrote it while one module held every plugin's record types (see the README there): the
# records split by plugin must read these back key for key and act on them as before
V1 = os.path.join(os.path.dirname(V0), "v1")
GENERATIONS = pytest.mark.parametrize("base", [V0, V1], ids=["v0", "v1"])
NODE, BOOT = "n1", "boot-v0"
GPU_DRIVER, CD_DRIVER = "gpu.nvidia.com", "compute-domain.nvidia.com"


def uid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def _raw(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


class Node:
    """A node's disk as the old driver left it (copied from a fixture), and a driver of today started on it."""

    def __init__(self, tmp_path, scenario: str, profile: str, driver: str = GPU_DRIVER, base: str = V0):
        self.source = os.path.join(base, scenario)
        self.root = str(tmp_path)
        self.paths = DriverPaths(driver_name=driver, root=self.root)
        self.paths.make_dirs()
        shutil.copy(os.path.join(self.source, "checkpoint.json"), self.paths.checkpoint)
        if os.path.exists(os.path.join(self.source, "quarantine.json")):
            shutil.copy(os.path.join(self.source, "quarantine.json"), self.paths.quarantine)
        os.makedirs(os.path.dirname(self.paths.simulated_state), exist_ok=True)
        shutil.copy(os.path.join(self.source, "simulated-gpus.json"), self.paths.simulated_state)
        self.claims_dir = os.path.join(self.root, "claims")
        shutil.copytree(os.path.join(self.source, "claims"), self.claims_dir)
        self.backend = open_backend("simulated", profile=profile, node_name=NODE, state_path=self.paths.simulated_state)
        self.v0 = _raw(self.paths.checkpoint)["data"]

    def gpu_state(self, dynamic_mig: bool) -> DeviceState:
        return DeviceState(driver_name=GPU_DRIVER, node_name=NODE, backend=self.backend, paths=self.paths,
                           claims=LocalClaimStore(self.claims_dir), dynamic_mig=dynamic_mig, fsync=False,
                           boot_id=BOOT, sharing=RecordingSharing(self.paths.simulated_sharing_log))

    def ref(self, n: int) -> ClaimRef:
        entry = self.v0["claims"][uid(n)]
        return ClaimRef(entry["namespace"], entry["name"], uid(n))

    def mig_devices(self) -> list[str]:
        return sorted(m.name for g in self.backend.inventory().gpus for m in g.mig_devices)

    def cdi_specs(self) -> list[str]:
        return sorted(os.listdir(self.paths.cdi_spec_dir))


def test_the_fixtures_are_version_0_files_of_the_old_driver():
    for scenario in ("gpu-dynamic-mig", "gpu-static-mig", "compute-domain"):
        doc = _raw(os.path.join(V0, scenario, "checkpoint.json"))
        assert (doc["apiVersion"], doc["kind"]) == (API_VERSION, KIND)
        assert "version" not in doc["data"] and doc["checksum"] == checksum(doc["data"])


@pytest.mark.parametrize("scenario", ["gpu-dynamic-mig", "gpu-static-mig", "compute-domain"])
def test_version_0_entries_read_as_records_without_loss(scenario):
    data = load_checkpoint(os.path.join(V0, scenario, "checkpoint.json"))
    checkpoint = read_checkpoint(os.path.join(V0, scenario, "checkpoint.json"))
    assert checkpoint is not None and checkpoint.version == 0 and checkpoint.unusable == ()
    assert set(checkpoint.claims) == set(data["claims"])
    for claim_uid, raw in data["claims"].items():  # every key and value the old driver wrote comes back
        assert checkpoint.claims[claim_uid].to_json() == raw
    assert dict(checkpoint.domain_joins) == data.get("domainJoins", {})
    migrated = checkpoint.to_json()
    assert migrated["version"] == CHECKPOINT_VERSION and migrated["claims"] == data["claims"]


@GENERATIONS
def test_gpu_claims_stay_prepared_across_the_upgrade_and_unprepare(tmp_path, base):
    node = Node(tmp_path, "gpu-dynamic-mig", "dgx-h100", base=base)
    mig_before = node.mig_devices()
    assert mig_before == ["gpu-1-mig-1g10gb-19-0", "gpu-1-mig-3g40gb-9-4"]
    state = node.gpu_state(dynamic_mig=True)
    report = state.reconcile()
    # nothing rolled back, quarantined or destroyed: the old code quarantined the per-device MPS claim (6) here
    assert (report["rolledBack"], report["unprepared"], report["quarantined"], report["migDestroyed"]) == (
        [], [], [], [])
    assert sorted(report["cdiRewritten"]) == sorted(node.v0["claims"])  # /var/run/cdi is a tmpfs: rewritten
    assert node.mig_devices() == mig_before
    rewritten = _raw(node.paths.checkpoint)
    assert rewritten["checksum"] == checksum(rewritten["data"])
    assert rewritten["data"]["version"] == CHECKPOINT_VERSION
    assert rewritten["data"]["claims"] == node.v0["claims"]  # the same entries, now under a version

    # the kubelet re-prepares after a plugin restart: answered from the checkpoint, the same devices
    answer = state.prepare(node.ref(3))
    assert [d["deviceName"] for d in answer] == ["gpu-1-mig-1g10gb-19-0", "gpu-1-mig-3g40gb-9-4"]
    with pytest.raises(PrepareError, match="already allocated"):  # and the migrated entries still reserve
        state.prepare(_new_claim(node, "intruder", 30, "gpu-3"))

    mps_daemon = node.v0["claims"][uid(5)]["mpsDaemon"]
    for n in (1, 2, 3, 4, 5, 6, 7):
        state.unprepare(node.ref(n))
    assert state.checkpoint_snapshot()["claims"] == {}
    assert node.mig_devices() == [] and node.cdi_specs() == []
    steps = read_sharing_log(node.paths.simulated_sharing_log)
    assert mps_daemon["id"].startswith(uid(5))  # v0: the claim UID; v1: UID and a hash of the device UUIDs
    assert {"op": "mps-stop", "id": mps_daemon["id"]} in steps  # the daemon the old driver recorded is stopped
    assert {"op": "compute-mode", "gpu": mps_daemon["gpus"][0], "mode": "DEFAULT"} in steps
    gpu2 = node.v0["claims"][uid(4)]["devices"][0]["gpuUUID"]
    assert {"op": "time-slice", "gpu": gpu2, "interval": 0} in steps  # time-slicing back to Default
    assert _raw(node.paths.checkpoint)["data"] == {"version": CHECKPOINT_VERSION, "nodeBootID": BOOT, "claims": {}}


@pytest.mark.parametrize("scenario", ["gpu-dynamic-mig", "gpu-static-mig", "compute-domain"])
def test_version_1_files_of_the_unsplit_records_read_back_key_for_key(scenario):
    path = os.path.join(V1, scenario, "checkpoint.json")
    doc = _raw(path)
    assert doc["data"]["version"] == 1 == CHECKPOINT_VERSION and doc["checksum"] == checksum(doc["data"])
    checkpoint = read_checkpoint(path)
    assert checkpoint is not None and checkpoint.version == 1 and checkpoint.unusable == ()
    assert checkpoint.to_json() == doc["data"]  # every record, every key (GPU keys of domain records included)


def _new_claim(node: Node, name: str, n: int, device: str) -> ClaimRef:
    import yaml

    from tests.support.builders import allocated_claim

    obj = allocated_claim(name, [{"request": "gpu", "device": device}], uid=uid(n), node_name=NODE)
    with open(os.path.join(node.claims_dir, f"default_{name}.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(obj, fh)
    return ClaimRef("default", name, uid(n))


@GENERATIONS
def test_static_mig_claims_and_the_old_quarantine_survive_the_upgrade(tmp_path, base):
    node = Node(tmp_path, "gpu-static-mig", "dgx-h100", base=base)
    state = node.gpu_state(dynamic_mig=False)
    report = state.reconcile()
    assert report["quarantined"] == [] and sorted(report["cdiRewritten"]) == [uid(11), uid(12)]
    [old] = load_quarantine(node.paths.quarantine)  # the quarantine file the old driver wrote
    assert old.uid == uid(13) and [r.device for r in old.reserved] == ["gpu-2"]
    with pytest.raises(PrepareError, match="reserved by a quarantined checkpoint entry"):
        state.prepare(_new_claim(node, "wants-gpu-2", 31, "gpu-2"))
    assert [d["deviceName"] for d in state.prepare(node.ref(12))] == ["gpu-1"]
    for n in (11, 12):
        state.unprepare(node.ref(n))
    assert node.mig_devices() == ["gpu-0-mig-1g10gb-19-0", "gpu-0-mig-3g40gb-9-4"]  # static: the MIG manager's
    assert state.checkpoint_snapshot()["claims"] == {}


@GENERATIONS
def test_compute_domain_claims_and_joins_survive_the_upgrade(tmp_path, base):
    node = Node(tmp_path, "compute-domain", "gb200-nvl72", driver=CD_DRIVER, base=base)
    domains_dir = os.path.join(node.root, "domains")
    shutil.copytree(os.path.join(node.source, "domains"), domains_dir)
    domains = DirectoryDomainSource(domains_dir)
    domain_uid = node.v0["domainJoins"][uid(21)]
    assert domains._labels() == {NODE: domain_uid}
    state = ComputeDomainState(domains=domains, clique="4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f.1",
                               driver_name=CD_DRIVER, node_name=NODE, backend=node.backend, paths=node.paths,
                               claims=LocalClaimStore(node.claims_dir), fsync=False, boot_id=BOOT)
    report = state.reconcile()
    assert report["quarantined"] == [] and report["domainDirsRewritten"] == [domain_uid]
    assert sorted(report["cdiRewritten"]) == [uid(21), uid(22)]
    rewritten = _raw(node.paths.checkpoint)["data"]
    assert rewritten["version"] == CHECKPOINT_VERSION and rewritten["domainJoins"] == node.v0["domainJoins"]
    assert rewritten["claims"] == node.v0["claims"]
    state.unprepare(node.ref(21))  # the last channel claim: the node leaves the domain
    assert domains._labels() == {} and uid(21) not in state.checkpoint_snapshot().get("domainJoins", {})
    state.unprepare(node.ref(22))  # the daemon's claim: its directory goes
    assert not os.path.exists(os.path.join(node.paths.plugin_dir, "domains", domain_uid))
    assert state.checkpoint_snapshot()["claims"] == {} and node.cdi_specs() == []


def _write_version(path: str, version: int) -> bytes:
    doc = _raw(path)
    doc["data"]["version"] = version
    doc["checksum"] = checksum(doc["data"])
    raw = json.dumps(doc).encode()
    with open(path, "wb") as fh:
        fh.write(raw)
    return raw


def test_a_newer_checkpoint_is_set_aside_and_its_devices_stay_reserved(tmp_path):
    node = Node(tmp_path, "gpu-dynamic-mig", "dgx-h100")
    raw = _write_version(node.paths.checkpoint, CHECKPOINT_VERSION + 1)
    with pytest.raises(CheckpointVersionError, match="version 2, newer than this driver reads"):
        read_checkpoint(node.paths.checkpoint)

    status = CliRunner().invoke(cli, ["driver", "status", "--root", node.root])  # a read-only look: says why
    assert status.exit_code == 2 and "error:" in status.output and "written by a newer driver" in status.output
    assert "Traceback" not in status.output

    state = node.gpu_state(dynamic_mig=True)
    report = state.reconcile()  # no crash, no refusal to start
    assert sorted(report["quarantined"]) == sorted(node.v0["claims"])
    with open(node.paths.newer_checkpoint(CHECKPOINT_VERSION + 1), "rb") as fh:
        assert fh.read() == raw  # kept byte for byte for a re-upgrade
    assert _raw(node.paths.checkpoint)["data"]["claims"] == {}
    assert node.mig_devices() == ["gpu-1-mig-1g10gb-19-0", "gpu-1-mig-3g40gb-9-4"]  # not destroyed: maybe in use
    quarantined = load_quarantine(node.paths.quarantine)
    assert all("checkpoint version 2" in item.reason for item in quarantined)
    with pytest.raises(PrepareError, match="reserved by a quarantined checkpoint entry"):
        state.prepare(_new_claim(node, "wants-gpu-0", 32, "gpu-0"))
    assert len(node.cdi_specs()) == 0 or all(uid(32) not in name for name in node.cdi_specs())


def test_a_checkpoint_with_a_nonsense_version_is_refused(tmp_path):
    node = Node(tmp_path, "gpu-static-mig", "dgx-h100")
    for version in (-1, "1", True):
        _write_version(node.paths.checkpoint, version)
        with pytest.raises(Exception, match="invalid version"):
            read_checkpoint(node.paths.checkpoint)


def test_entries_parse_strictly():
    good = load_checkpoint(os.path.join(V0, "gpu-dynamic-mig", "checkpoint.json"))["claims"][uid(5)]
    assert ClaimEntry.from_json(uid(5), good).payload is not None  # the GPU plugin's MpsDaemon
    broken = {**good, "mpsDaemon": {"id": 7}}
    with pytest.raises(ValueError, match="mpsDaemon"):
        ClaimEntry.from_json(uid(5), broken)
