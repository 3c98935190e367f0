"""Health recovery: a GPU whose error clears is untainted and offered again, by NVIDIA's XID catalog's Immediate
Resolution (gpudra/discovery/xids.py): errors that clear on their own (IGNORE, RESTART_APP) go with a "recovered"
event, those needing a GPU reset (RESET_GPU and the rest) only with a "gpu-reset" event, those needing a reboot
(RESTART_BM: XID 79, fallen off the bus) only with a driver restart. Without recovery (the old code, and NVIDIA's
driver) every taint stays until the driver restarts."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from click.testing import CliRunner

from gpudra.allocator import Allocator, Features
from gpudra.cli import cli
from gpudra.discovery import open_backend
from gpudra.discovery.health import HealthEvent, HealthEventError
from gpudra.discovery.model import Inventory
from gpudra.discovery.xids import IMMEDIATE_RESOLUTION, recovery_class
from gpudra.gpuplugin.health import DeviceHealth
from gpudra.gpuplugin.slices import build_resource_slices, device_classes

NODE = "node-r"


def _inventory(profile: str = "dgx-h100") -> Inventory:
    return open_backend("simulated", profile=profile, node_name=NODE).inventory()


def _taints(inventory: Inventory, health: DeviceHealth, name: str = "gpu-0") -> list[tuple[str, Any, str]]:
    device = next(d for s in build_resource_slices(inventory, NODE, taints_of=health.taints_of)
                  for d in s["spec"]["devices"] if d["name"] == name)
    return [(t["key"], t.get("value"), t["effect"]) for t in device.get("taints") or []]


def _allocated(inventory: Inventory, health: DeviceHealth, count: int) -> list[str] | None:
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": count}}]}}}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
    slices = build_resource_slices(inventory, NODE, taints_of=health.taints_of)
    outcome = Allocator(device_classes(), slices, [], Features.parse("default")).allocate(node, [claim])
    if outcome.outcome != "allocated":
        return None
    return [r["device"] for a in outcome.allocations for r in a["devices"]["results"]]


@pytest.mark.parametrize("xid, resolution, recovery", [
    (13, "RESTART_APP", "clears"),  # Graphics Engine Exception
    (31, "RESTART_APP", "clears"),  # GPU memory page fault
    (63, "IGNORE", "clears"),  # row remapping event
    (94, "RESTART_APP", "clears"),  # contained ECC error
    (48, "WORKFLOW_XID_48", "reset"),  # double-bit ECC
    (64, "RESET_GPU", "reset"),  # row remapping failure
    (95, "RESET_GPU", "reset"),  # uncontained ECC error
    (109, "RESET_GPU", "reset"),  # on NVIDIA's driver's application list all the same
    (119, "RESET_GPU", "reset"),  # GSP RPC timeout
    (79, "RESTART_BM", "reboot"),  # fallen off the bus
    (151, "RESTART_VM", "reboot"),  # key rotation error
    (1, None, "reset"),  # CONTACT_SUPPORT rows and unknown XIDs: a reset at least
    (9999, None, "reset"),
])
def test_the_catalogs_immediate_resolution_decides(xid: int, resolution: str | None, recovery: str) -> None:
    assert IMMEDIATE_RESOLUTION.get(xid) == resolution
    assert recovery_class(xid) == recovery


def test_a_cleared_application_error_untaints_and_the_gpu_is_offered_again() -> None:
    inventory = _inventory()
    uuid = inventory.gpus[0].uuid
    health = DeviceHealth("gpu.nvidia.com")
    health.record([HealthEvent("xid", gpu=uuid, xid=94)], inventory)  # contained ECC: NoSchedule, clears
    assert _taints(inventory, health) == [("gpu.nvidia.com/xid", "94", "NoSchedule")]
    every_gpu = len(inventory.gpus)
    assert _allocated(inventory, health, every_gpu) is None  # the scheduler keeps claims off the tainted GPU
    version = health.version
    event = HealthEvent("recovered", gpu=uuid)
    assert health.record([event], inventory) == [(event, True)]
    assert _taints(inventory, health) == [] and health.version == version + 1
    # the republished slices carry no taint: kube-scheduler's allocator takes every GPU again
    assert "gpu-0" in (_allocated(inventory, health, every_gpu) or [])


def test_a_sticky_xid_stays_until_a_reset_and_a_reboot_xid_until_a_restart() -> None:
    inventory = _inventory()
    uuid = inventory.gpus[0].uuid
    health = DeviceHealth("gpu.nvidia.com")
    health.record([HealthEvent("xid", gpu=uuid, xid=95)], inventory)  # uncontained ECC: RESET_GPU
    health.record([HealthEvent("recovered", gpu=uuid)], inventory)
    assert _taints(inventory, health) == [("gpu.nvidia.com/xid", "95", "NoSchedule")]
    health.record([HealthEvent("gpu-reset", gpu=uuid)], inventory)
    assert _taints(inventory, health) == []

    health.record([HealthEvent("xid", gpu=uuid, xid=79), HealthEvent("ecc", gpu=uuid)], inventory)
    health.record([HealthEvent("gpu-reset", gpu=uuid)], inventory)  # the ECC taint goes, XID 79 needs a reboot
    assert _taints(inventory, health) == [("gpu.nvidia.com/xid", "79", "NoSchedule")]
    assert _taints(inventory, DeviceHealth("gpu.nvidia.com")) == []  # a restarted driver starts untainted


def test_a_later_harmless_xid_does_not_make_a_sticky_one_clearable() -> None:
    """NVIDIA keeps one taint per key (the latest XID's value); the stickiest error since the taint was put on
    still decides, so XID 79 followed by XID 94 is not cleared by a recovery of 94."""
    inventory = _inventory()
    uuid = inventory.gpus[0].uuid
    health = DeviceHealth("gpu.nvidia.com")
    health.record([HealthEvent("xid", gpu=uuid, xid=79), HealthEvent("xid", gpu=uuid, xid=94)], inventory)
    assert _taints(inventory, health) == [("gpu.nvidia.com/xid", "94", "NoSchedule")]
    health.record([HealthEvent("recovered", gpu=uuid, xid=94)], inventory)
    assert _taints(inventory, health) == [("gpu.nvidia.com/xid", "94", "NoSchedule")]


def test_a_recovery_naming_another_xid_or_another_gpu_removes_nothing() -> None:
    inventory = _inventory()
    first, second = inventory.gpus[0].uuid, inventory.gpus[1].uuid
    health = DeviceHealth("gpu.nvidia.com")
    health.record([HealthEvent("xid", gpu=first, xid=13), HealthEvent("xid", gpu=second, xid=31)], inventory)
    event = HealthEvent("recovered", gpu=first, xid=31)
    assert health.record([event], inventory) == [(event, False)]
    health.record([HealthEvent("recovered", gpu=second)], inventory)
    assert _taints(inventory, health, "gpu-0") == [("gpu.nvidia.com/xid", "13", "None")]
    assert _taints(inventory, health, "gpu-1") == []


def test_a_whole_gpu_recovery_clears_its_mig_devices_too() -> None:
    inventory = _inventory("hgx-a100-mig")
    gpu = next(g for g in inventory.gpus if g.mig_devices)
    mig = gpu.mig_devices[0]
    health = DeviceHealth("gpu.nvidia.com")
    health.record([HealthEvent("xid", gpu=gpu.uuid, gi_id=mig.gi_id, xid=94)], inventory)
    assert _taints(inventory, health, mig.name) != []
    health.record([HealthEvent("recovered", gpu=gpu.uuid)], inventory)
    assert _taints(inventory, health, mig.name) == []


def test_blocking_effect_noexecute() -> None:
    inventory = _inventory()
    uuid = inventory.gpus[0].uuid
    health = DeviceHealth("gpu.nvidia.com", blocking_effect="NoExecute")
    health.record([HealthEvent("xid", gpu=uuid, xid=79), HealthEvent("xid", gpu=inventory.gpus[1].uuid, xid=13)],
                  inventory)
    assert _taints(inventory, health) == [("gpu.nvidia.com/xid", "79", "NoExecute")]
    assert _taints(inventory, health, "gpu-1") == [("gpu.nvidia.com/xid", "13", "None")]  # still NVIDIA's None
    with pytest.raises(ValueError):
        DeviceHealth("gpu.nvidia.com", blocking_effect="None")


def test_recovery_events_are_checked() -> None:
    with pytest.raises(HealthEventError):
        HealthEvent("gpu-reset", gpu="GPU-X", xid=79)  # a reset carries no XID
    with pytest.raises(HealthEventError):
        HealthEvent("recovered")  # names one GPU
    with pytest.raises(HealthEventError):
        HealthEvent("ecc", gpu="GPU-X", xid=48)


def test_inject_event_clear_and_reset(tmp_path: Any) -> None:
    from gpudra.kubeletplugin.paths import DriverPaths

    state = DriverPaths(root=str(tmp_path)).simulated_state
    os.makedirs(os.path.dirname(state), exist_ok=True)
    with open(state, "w") as f:
        f.write("{}")
    runner = CliRunner()
    result = runner.invoke(cli, ["driver", "inject-event", "--root", str(tmp_path), "--gpu", "0", "--clear",
                                 "--xid", "94"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["event"] == {"kind": "recovered", "gpu": "0", "xid": 94}
    result = runner.invoke(cli, ["driver", "inject-event", "--root", str(tmp_path), "--gpu", "0", "--reset"])
    assert result.exit_code == 0 and json.loads(result.stdout)["event"] == {"kind": "gpu-reset", "gpu": "0"}
    for bad in (["--reset", "--xid", "79"], ["--clear", "--reset"], ["--clear", "--ecc"], ["--clear"]):
        gpu = [] if bad == ["--clear"] else ["--gpu", "0"]
        result = runner.invoke(cli, ["driver", "inject-event", "--root", str(tmp_path), *gpu, *bad])
        assert result.exit_code == 2 and "error:" in result.output, (bad, result.output)
