"""What it takes for a GPU to be usable again after an XID: NVIDIA's XID catalog, "Immediate Resolution" column.

Source: NVIDIA's XID catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, sheet
"Catalog"), read from its machine transcription in leptonai/gpud components/accelerator/nvidia/xid/
catalog_generated.go (generated 2025-10-29). Only the XIDs whose resolution is not CONTACT_SUPPORT are listed;
an XID not listed here (CONTACT_SUPPORT, unused or unknown) is treated as needing a GPU reset.

gpudra reads the resolutions as three recovery classes:

| class    | catalog resolutions                   | a device taint for it is removed by                           |
|----------|---------------------------------------|---------------------------------------------------------------|
| `clears` | IGNORE, RESTART_APP                   | a "recovered" health event (the error cleared), a GPU reset,  |
|          |                                       | a driver restart                                              |
| `reset`  | RESET_GPU, the workflows, the rest    | a GPU reset event or a driver restart ("sticky")              |
| `reboot` | RESTART_BM, RESTART_VM                | a driver restart only (the node reboots)                      |

NVIDIA's GPU DRA driver itself (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/device_health.go,
device_health_status.go) classifies XIDs only as application errors (13, 31, 43, 45, 68, 109: taint effect None)
or critical (NoSchedule), and never removes a taint ("DRA device taints (KEP-5055) have no removal mechanism yet
and remain in place"); its recovery loop turns only the kubelet's health report back to healthy. Note that the
catalog says RESET_GPU for 109 and WORKFLOW_XID_45 for 45, two of NVIDIA's "application" XIDs.
"""

from __future__ import annotations

from typing import Literal

RecoveryClass = Literal["clears", "reset", "reboot"]

# XID -> the catalog's Immediate Resolution (CONTACT_SUPPORT rows left out)
IMMEDIATE_RESOLUTION: dict[int, str] = {
    8: "RESTART_APP", 11: "RESTART_APP", 13: "RESTART_APP", 14: "IGNORE", 25: "RESTART_APP", 31: "RESTART_APP",
    32: "RESTART_APP", 37: "IGNORE", 38: "IGNORE", 39: "RESTART_APP", 40: "RESTART_APP", 41: "RESTART_APP",
    43: "IGNORE", 44: "IGNORE", 45: "WORKFLOW_XID_45", 46: "RESET_GPU", 48: "WORKFLOW_XID_48",
    54: "CHECK_MECHANICALS", 60: "RESTART_APP", 62: "RESET_GPU", 63: "IGNORE", 64: "RESET_GPU", 66: "IGNORE",
    67: "IGNORE", 68: "RESTART_APP", 69: "RESTART_APP", 70: "RESTART_APP", 71: "RESTART_APP", 72: "RESTART_APP",
    74: "WORKFLOW_NVLINK_ERR", 75: "RESTART_APP", 76: "RESTART_APP", 77: "RESTART_APP", 78: "UPDATE_SWFW",
    79: "RESTART_BM", 80: "RESTART_APP", 82: "RESTART_APP", 83: "RESTART_APP", 84: "RESTART_APP",
    85: "RESTART_APP", 86: "RESTART_APP", 88: "RESTART_APP", 89: "RESTART_APP", 92: "IGNORE", 93: "IGNORE",
    94: "RESTART_APP", 95: "RESET_GPU", 96: "RESTART_APP", 97: "RESTART_APP", 98: "RESTART_APP",
    99: "RESTART_APP", 100: "RESTART_APP", 101: "RESTART_APP", 102: "RESTART_APP", 103: "RESTART_APP",
    104: "RESTART_APP", 105: "RESTART_APP", 106: "IGNORE", 107: "IGNORE", 108: "IGNORE", 109: "RESET_GPU",
    110: "RESET_GPU", 119: "RESET_GPU", 120: "RESET_GPU", 121: "IGNORE", 126: "RESTART_APP", 127: "RESTART_APP",
    128: "RESTART_APP", 129: "RESTART_APP", 130: "RESTART_APP", 131: "RESTART_APP", 132: "RESTART_APP",
    133: "RESTART_APP", 134: "RESTART_APP", 135: "RESTART_APP", 136: "RESET_GPU", 137: "IGNORE",
    139: "RESTART_APP", 140: "RESET_GPU", 141: "IGNORE", 143: "RESET_GPU", 144: "WORKFLOW_NVLINK5_ERR",
    145: "WORKFLOW_NVLINK5_ERR", 146: "WORKFLOW_NVLINK5_ERR", 147: "WORKFLOW_NVLINK5_ERR",
    148: "WORKFLOW_NVLINK5_ERR", 149: "WORKFLOW_NVLINK5_ERR", 150: "WORKFLOW_NVLINK5_ERR", 151: "RESTART_VM",
    152: "IGNORE", 153: "IGNORE", 154: "XID_154", 155: "RESET_GPU", 156: "RESET_GPU", 157: "IGNORE",
    158: "RESET_GPU", 159: "CHECK_UVM", 160: "IGNORE", 161: "IGNORE",
}

_CLEARS = frozenset({"IGNORE", "RESTART_APP"})
_REBOOT = frozenset({"RESTART_BM", "RESTART_VM"})


def recovery_class(xid: int) -> RecoveryClass:
    """How an XID's device taint goes away (see the table above)."""
    resolution = IMMEDIATE_RESOLUTION.get(xid, "CONTACT_SUPPORT")
    if resolution in _CLEARS:
        return "clears"
    if resolution in _REBOOT:
        return "reboot"
    return "reset"
