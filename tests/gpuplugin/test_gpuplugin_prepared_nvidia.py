"""The typed records carry the NVIDIA-parity facts the dict-based driver (branch work-nvidia) wrote to the
checkpoint, under the same JSON names: `mpsMultiUser` in a device's sharing, `pciBusID` and `iommu` on a VFIO
device. A checkpoint written by that driver reads back without loss, and a field of the wrong type is refused
(quarantined at start-up) instead of being acted on.

The MPS daemon is named as NVIDIA's GetMpsControlDaemonID names it (cmd/gpu-kubelet-plugin/sharing.go), but an
unprepare stops the daemon under the ID the checkpoint recorded: a daemon an older driver started under the bare
claim UID (tests/data/checkpoints/v0) must still be stopped after an upgrade."""

from __future__ import annotations

import hashlib

import pytest

from gpudra.gpuplugin.sharing import RecordingSharing, apply_claim_sharing, mps_daemon, undo_claim_sharing
from gpudra.gpuplugin.records import MpsDaemon, SharingRecord
from gpudra.kubeletplugin.prepared import PREPARE_COMPLETED, ClaimEntry, EntryError, PreparedDevice

UID = "00000000-0000-4000-8000-000000000042"

# as the dict-based driver of work-nvidia (gpuplugin/state.py `_plan`) wrote a VFIO device record
VFIO_RECORD = {"type": "vfio", "gpuMinor": 1, "gpuUUID": "GPU-b", "slices": None, "mig": None, "request": "vm",
               "requestNames": ["vm"], "pool": "node-p", "device": "gpu-vfio-1", "adminAccess": False,
               "sharing": None, "cdiDeviceIDs": [f"gpu.nvidia.com/claim={UID}-gpu-vfio-1"],
               "pciBusID": "0000:1b:00.0", "iommu": {"backendPolicy": "PreferIommuFD", "enableAPIDevice": True}}


def _mps_record(device: str, minor: int, uuid: str, sharing: dict) -> dict:
    return {"type": "gpu", "gpuMinor": minor, "gpuUUID": uuid, "slices": None, "mig": None, "request": "r",
            "requestNames": ["r"], "pool": "n1", "device": device, "adminAccess": False, "sharing": sharing,
            "cdiDeviceIDs": [f"gpu.nvidia.com/claim={UID}-{device}"]}


def test_a_vfio_record_keeps_its_pci_function_and_iommu_config():
    device = PreparedDevice.from_json(VFIO_RECORD)
    assert device.vfio is not None
    assert (device.vfio.pci_bus_id, device.vfio.backend_policy, device.vfio.enable_api_device) == (
        "0000:1b:00.0", "PreferIommuFD", True)
    assert device.to_json() == VFIO_RECORD


@pytest.mark.parametrize("change", [{"pciBusID": None}, {"pciBusID": 7}, {"iommu": {"backendPolicy": 1}},
                                    {"iommu": {"backendPolicy": "LegacyOnly", "enableAPIDevice": "yes"}}])
def test_a_vfio_record_the_driver_cannot_rebind_is_refused(change):
    with pytest.raises(EntryError):
        PreparedDevice.from_json({**VFIO_RECORD, **change})


def test_multi_user_mps_survives_the_checkpoint():
    sharing = {"strategy": "MPS", "mpsMultiUser": True, "mpsActiveThreadPercentage": 50}
    record = _mps_record("gpu-0", 0, "GPU-a", sharing)
    device = PreparedDevice.from_json(record)
    assert device.sharing == SharingRecord(strategy="MPS", mps_active_thread_percentage=50, mps_multi_user=True)
    assert device.to_json() == record
    with pytest.raises(EntryError):
        PreparedDevice.from_json(_mps_record("gpu-0", 0, "GPU-a", {**sharing, "mpsMultiUser": "true"}))


def test_the_daemon_is_named_as_nvidia_names_it_and_started_multi_user(tmp_path):
    sharing = {"strategy": "MPS", "mpsMultiUser": True}
    devices = tuple(PreparedDevice.from_json(_mps_record(f"gpu-{i}", i, uuid, sharing))
                    for i, uuid in enumerate(["GPU-b", "GPU-a"]))
    daemon = mps_daemon(UID, devices, str(tmp_path))
    assert daemon is not None
    assert daemon.id == f"{UID}-{hashlib.sha256(b'GPU-a,GPU-b').hexdigest()[:5]}"
    assert daemon.devices == daemon.gpus == ("GPU-a", "GPU-b")  # sorted, as NVIDIA's UUIDs()
    control = RecordingSharing(str(tmp_path / "sharing.log"))
    recorded: list[MpsDaemon] = []
    apply_claim_sharing(control, UID, devices, str(tmp_path), recorded.append, lambda: {"GPU-a": "9.0",
                                                                                        "GPU-b": "8.0"})
    assert recorded == [daemon]
    (start,) = [c for c in control.calls if c["op"] == "mps-start"]
    assert start["id"] == daemon.id and start["multiUser"] is True


def test_unprepare_stops_the_daemon_under_its_recorded_id(tmp_path):
    """An older driver recorded (and started) its daemon as the bare claim UID: that is the one to stop."""
    devices = (PreparedDevice.from_json(_mps_record("gpu-0", 0, "GPU-a", {"strategy": "MPS"})),)
    old = MpsDaemon(id=UID, pipe=str(tmp_path / "pipe"), log=str(tmp_path / "log"), gpus=("GPU-a",),
                    devices=("GPU-a",))
    entry = ClaimEntry(state=PREPARE_COMPLETED, namespace="default", name="c", devices=devices, payload=old)
    control = RecordingSharing(str(tmp_path / "sharing.log"))
    undo_claim_sharing(control, UID, entry, str(tmp_path), set())
    assert [c for c in control.calls if c["op"] == "mps-stop"] == [{"op": "mps-stop", "id": UID}]
