"""NVIDIA's consumable shares (`--consumable-shares`, feature gate `ConsumableShares`): one GPU or MIG device
allocated to several claims at once, each holding a share told apart by its `shareID` (KEP-5075).

Learned from kubernetes-sigs/dra-driver-nvidia-gpu (main, 2026-08):
* `cmd/gpu-kubelet-plugin/main.go` `validateFlags`: the option's values and messages;
* `cmd/gpu-kubelet-plugin/consumable_shares.go` `applyConsumableShares`: what a published device carries
  (`allowMultipleAllocations`; `memory` rounded down to whole MiB with a 1Mi-step request policy; with a number N a
  `shares` capacity of N, one by default);
* `cmd/gpu-kubelet-plugin/device_state.go` at prepare: `applySharingConfig` refuses MPS while shares are on, and
  `validateNoOverlappingPreparedDevices` lets two claims hold one device only with the same normalized config
  (a GPU has one compute mode and one time slice, whoever holds a share of it).

What NVIDIA does not do, and so gpudra does not either: no per-share memory or compute limit reaches the
container or an MPS daemon. The `memory` and `shares` a claim consumes are the scheduler's accounting only.
"""

from __future__ import annotations

import copy
from typing import Any

from .records import GpuDevice, SharingRecord
from gpudra.quantity import Quantity, parse_quantity

DISABLED, MEMORY, UNLIMITED = "disabled", "memory", "unlimited"
GATE = "ConsumableShares"
SHARES_CAPACITY = "shares"
MIB = 1 << 20
# NVIDIA's applySharingConfig, word for word
MPS_REFUSED = "MPS sharing is not supported when consumable shares is enabled"


def check_option(value: str, gate_enabled: bool) -> str:
    """`--consumable-shares` as NVIDIA's validateFlags checks it; ValueError with its message."""
    value = value.strip()
    if value != DISABLED and not gate_enabled:
        raise ValueError(f"--consumable-shares requires feature gate {GATE} to be enabled")
    if value not in (DISABLED, MEMORY, UNLIMITED) and not _positive_int(value):
        raise ValueError(f"invalid value for --consumable-shares: \"{value}\" (must be 'disabled', 'memory', "
                         "'unlimited', or a positive integer)")
    return value


def _positive_int(text: str) -> bool:
    """Go's strconv.Atoi accepts an optional sign and ASCII digits only."""
    body = text[1:] if text[:1] in "+-" else text
    return body.isascii() and body.isdigit() and int(text) > 0


def enabled(option: str) -> bool:
    """NVIDIA's isConsumableSharesEnabled, once check_option has let the option through."""
    return option.strip() not in ("", DISABLED)


def _range(minimum: str, maximum: str, step: str, default: str) -> dict[str, Any]:
    return {"default": default, "validRange": {"min": minimum, "max": maximum, "step": step}}


def apply_consumable_shares(device: dict[str, Any], option: str) -> dict[str, Any]:
    """The published device with NVIDIA's consumable capacity for `option` (a copy; the device unchanged when
    shares are disabled). For full GPUs and MIG devices; NVIDIA leaves VFIO devices out."""
    if not enabled(option):
        return device
    out = copy.deepcopy(device)
    out["allowMultipleAllocations"] = True
    capacity = out.setdefault("capacity", {})
    memory = capacity.get("memory")
    if memory is None:  # NVIDIA marks the device shareable even then, with nothing to consume
        return out
    whole_bytes = parse_quantity(memory["value"]).as_int() or 0
    # API validation wants max a multiple of step; NVIDIA's resource.NewQuantity(bytes, BinarySI) prints it
    maximum = Quantity.from_int(whole_bytes // MIB * MIB, "BinarySI").canonical()
    memory["value"] = maximum
    if option == MEMORY:
        memory["requestPolicy"] = _range("1Mi", maximum, "1Mi", maximum)
    else:
        memory["requestPolicy"] = _range("0", maximum, "1Mi", "0")
        if option != UNLIMITED:
            shares = str(int(option))
            capacity[SHARES_CAPACITY] = {"value": shares, "requestPolicy": _range("1", shares, "1", "1")}
    return out


def _normalized_sharing(device: GpuDevice) -> SharingRecord | None:
    return device.sharing.normalized() if device.sharing is not None else None


def shares_of_one_device(a: GpuDevice, b: GpuDevice) -> bool:
    """Two consumable-capacity shares of the same device (not admin access, which changes nothing there)."""
    return (bool(a.share_id) and bool(b.share_id) and a.device == b.device
            and not a.admin_access and not b.admin_access)


def conflicting_configuration(mine: GpuDevice, theirs: GpuDevice) -> bool:
    """Two shares of one device whose configs differ (NVIDIA's validateNoOverlappingPreparedDevices)."""
    return _normalized_sharing(mine) != _normalized_sharing(theirs)


def conflict_message(device: str, other_uid: str) -> str:
    return f"requested device {device} has conflicting configuration with already prepared claim {other_uid}"
