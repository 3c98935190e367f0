"""Checkpoints that pass the checksum but hold entries the driver cannot act on are quarantined
(reported, kept aside, their devices still reserved) instead of crashing or blocking start-up;
only regular files of bounded size are read; deep nesting is a clear error."""

from __future__ import annotations

import json
import os
import uuid

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.kubeletplugin.checkpoint import (API_VERSION, KIND, MAX_CHECKPOINT_BYTES, CheckpointError, checksum,
                                      entry_problem, load_checkpoint)
from gpudra.kubeletplugin.quarantine import load_quarantine
from gpudra.gpuplugin.state import PrepareError

from test_driver_state import Env


def _rewrite(path: str, mutate) -> None:
    """Change the checkpoint's data and fix its checksum: damage the checksum cannot see."""
    with open(path) as fh:
        doc = json.load(fh)
    mutate(doc["data"]["claims"])
    doc["checksum"] = checksum(doc["data"])
    with open(path, "w") as fh:
        json.dump(doc, fh)


def _good_device(env: Env) -> dict:
    ref = env.claim("donor", ["gpu-3"])
    env.state.prepare(ref)
    record = env.state.checkpoint_snapshot()["claims"][ref.uid]["devices"][0]
    env.state.unprepare(ref)
    return record


BAD_UID = str(uuid.uuid4())
# entry mutations that keep a valid checksum: (what, function of a good entry -> (uid, bad entry))
MALFORMED = {
    "no devices": lambda e: (BAD_UID, {k: v for k, v in e.items() if k != "devices"}),
    "devices null": lambda e: (BAD_UID, {**e, "devices": None}),
    "devices a string": lambda e: (BAD_UID, {**e, "devices": "gpu-3"}),
    "device without gpuMinor": lambda e: (BAD_UID, {**e, "devices": [{k: v for k, v in e["devices"][0].items()
                                                                     if k != "gpuMinor"}]}),
    "gpuMinor a string": lambda e: (BAD_UID, {**e, "devices": [{**e["devices"][0], "gpuMinor": "3"}]}),
    "uid with ../": lambda e: ("../../victim", e),
    "uid with a NUL": lambda e: ("a\x00b", e),
    "unknown state": lambda e: (BAD_UID, {**e, "state": "Prepared"}),
    "entry a string": lambda e: (BAD_UID, "PrepareCompleted"),
    "slices reversed": lambda e: (BAD_UID, {**e, "devices": [{**e["devices"][0], "slices": [3, 1]}]}),
}


@pytest.mark.parametrize("what", sorted(MALFORMED))
def test_a_malformed_entry_is_quarantined_and_its_devices_stay_reserved(tmp_path, what):
    env = Env(tmp_path)
    env.state.reconcile()
    keep = env.claim("keep", ["gpu-0"])
    env.state.prepare(keep)
    good = {"state": "PrepareCompleted", "namespace": "default", "name": "gone", "devices": [_good_device(env)]}
    bad_uid, bad_entry = MALFORMED[what](good)
    _rewrite(env.paths.checkpoint, lambda claims: claims.__setitem__(bad_uid, bad_entry))

    restarted = env.new_state()
    report = restarted.reconcile()  # no traceback, no refusal to start
    assert report["quarantined"] == [bad_uid]
    assert set(restarted.checkpoint_snapshot()["claims"]) == {keep.uid}
    [item] = load_quarantine(env.paths.quarantine)
    assert item.uid == bad_uid and item.entry == bad_entry and item.reason
    other = env.claim("other", ["gpu-3"])
    if any(r.device == "gpu-3" or r.gpu_minor == 3 for r in item.reserved):
        with pytest.raises(PrepareError, match="reserved by a quarantined checkpoint entry"):
            restarted.prepare(other)
    else:  # nothing readable names a device: nothing can be reserved (the reason says so in the log)
        assert what in ("no devices", "devices null", "devices a string", "entry a string")
        restarted.prepare(other)
        restarted.unprepare(other)
    # a second start does not quarantine twice; the operator releases by removing the file
    assert env.new_state().reconcile()["quarantined"] == []
    assert len(load_quarantine(env.paths.quarantine)) == 1
    os.unlink(env.paths.quarantine)
    released = env.new_state()
    released.reconcile()
    released.prepare(other)
    assert released.checkpoint_snapshot()["claims"][keep.uid]["state"] == "PrepareCompleted"


def test_a_quarantined_dynamic_mig_device_is_not_destroyed_or_handed_out(tmp_path):
    env = Env(tmp_path)
    env.state.reconcile()
    ref = env.claim("mig", ["gpu-1-mig-3g40gb-9-4"])
    env.state.prepare(ref)
    _rewrite(env.paths.checkpoint, lambda claims: claims.__setitem__("../escape", claims.pop(ref.uid)))
    restarted = env.new_state()
    report = restarted.reconcile()
    assert report["quarantined"] == ["../escape"] and report["migDestroyed"] == []
    assert env.mig_names() == ["gpu-1-mig-3g40gb-9-4"]
    overlapping = env.claim("overlap", ["gpu-1-mig-1g10gb-19-5"])
    with pytest.raises(PrepareError, match="reserved by a quarantined"):
        restarted.prepare(overlapping)


def test_status_lists_invalid_and_quarantined_entries(tmp_path):
    env = Env(tmp_path)
    env.state.reconcile()
    _rewrite(env.paths.checkpoint, lambda claims: claims.__setitem__(BAD_UID, {"state": "PrepareCompleted"}))
    runner = CliRunner()
    before = yaml.safe_load(runner.invoke(cli, ["driver", "status", "--root", env.root]).output)
    assert before["invalid"] == [{"uid": BAD_UID, "reason": "namespace: must be a string"}]
    env.new_state().reconcile()
    after = runner.invoke(cli, ["driver", "status", "--root", env.root])
    assert after.exit_code == 0, after.output
    status = yaml.safe_load(after.output)
    assert "invalid" not in status and status["quarantined"][0]["uid"] == BAD_UID


def test_every_entry_the_driver_writes_is_valid(tmp_path):
    env = Env(tmp_path)
    env.state.reconcile()
    refs = [env.claim("a", ["gpu-0", "gpu-1-mig-1g10gb-19-0"]), env.claim("b", ["gpu-2"])]
    for ref in refs:
        env.state.prepare(ref)
    for uid, entry in env.state.checkpoint_snapshot()["claims"].items():
        assert entry_problem(uid, entry) is None


# -- the file itself ---------------------------------------------------------------------------------------


def test_a_deeply_nested_checkpoint_is_a_clear_error(tmp_path):
    path = str(tmp_path / "checkpoint.json")
    depth = 5_000_000  # 10 MB
    with open(path, "w") as fh:
        fh.write('{"apiVersion":"gpudra.io/v1","kind":"DriverCheckpoint","data":' + "[" * depth + "]" * depth + "}")
    with pytest.raises(CheckpointError, match="nested too deeply"):
        load_checkpoint(path)


def test_only_regular_files_of_bounded_size_are_read(tmp_path):
    link = str(tmp_path / "link.json")
    os.symlink("/dev/zero", link)
    with pytest.raises(CheckpointError, match="symbolic link"):
        load_checkpoint(link)
    fifo = str(tmp_path / "fifo.json")
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError, match="not a regular file"):
        load_checkpoint(fifo)  # returns at once: opening a FIFO with no writer must not block start-up
    big = str(tmp_path / "big.json")
    with open(big, "wb") as fh:
        fh.truncate(MAX_CHECKPOINT_BYTES + 1)
    with pytest.raises(CheckpointError, match="larger than"):
        load_checkpoint(big)


def test_the_driver_refuses_a_bad_checkpoint_file_with_a_message(tmp_path):
    plugin_dir = tmp_path / "var/lib/kubelet/plugins/gpu.nvidia.com"
    plugin_dir.mkdir(parents=True)
    os.symlink("/dev/zero", plugin_dir / "checkpoint.json")
    result = CliRunner(env={"KUBECONFIG": None}).invoke(
        cli, ["driver", "run", "--node-name", "n", "--root", str(tmp_path), "--claims", str(tmp_path)])
    assert result.exit_code == 2 and "symbolic link" in result.output and "Traceback" not in result.output


def test_an_envelope_without_a_claims_map_is_still_refused(tmp_path):
    path = str(tmp_path / "checkpoint.json")
    data = {"nodeBootID": "b", "claims": []}
    with open(path, "w") as fh:
        json.dump({"apiVersion": API_VERSION, "kind": KIND, "checksum": checksum(data), "data": data}, fh)
    with pytest.raises(CheckpointError, match="no claims map"):
        load_checkpoint(path)


def test_after_a_reboot_quarantined_entries_reserve_nothing(tmp_path):
    env = Env(tmp_path)
    env.state.reconcile()
    good = {"state": "PrepareCompleted", "namespace": "default", "name": "gone", "devices": [_good_device(env)]}
    _rewrite(env.paths.checkpoint, lambda claims: claims.__setitem__("../x", good))
    same_boot = env.new_state()
    same_boot.reconcile()
    other = env.claim("other", ["gpu-3"])
    with pytest.raises(PrepareError, match="reserved by a quarantined"):
        same_boot.prepare(other)
    rebooted = env.new_state(boot_id="boot-2")
    rebooted.reconcile()
    rebooted.prepare(other)  # the file stays for the record, but nothing of an earlier boot is in use
    assert load_quarantine(env.paths.quarantine)[0].uid == "../x"
