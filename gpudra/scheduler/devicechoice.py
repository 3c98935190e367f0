"""Device choice inside the chosen node for the device-aware policies.

The allocator answers with upstream's first fit. To steer it without changing it, gpudra hides devices: a
probe claim "allocates" every free device of the groups the policy wants to avoid, the allocator runs again,
and the probe is withdrawn. A group is one physical device: the devices that draw on the same counter set
(MIG partitions of one GPU), or a device on its own. binpack hides the untouched groups (so partitions land on
GPUs already in use); spread hides the touched ones. When the steered run fails the first fit stands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .allocation import allocate
from .topology import DeviceId

if TYPE_CHECKING:  # pragma: no cover
    from .cyclestate import NodeEval, PodInfo
    from .scheduler import Scheduler

PROBE_CLAIM_NAMESPACE = "gpudra-probe"


def device_groups(scheduler: "Scheduler", node: str) -> dict[DeviceId, Any]:
    """Node-local device -> its physical device (`ClusterState.device_group`)."""
    cluster = scheduler.cluster
    return {device: cluster.device_group(device) for device in cluster.node_devices(node)}


def probe_claim(name: str, devices: list[DeviceId]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": PROBE_CLAIM_NAMESPACE, "uid": f"gpudra-probe-{name}"},
        "spec": {"devices": {"requests": [{"name": "probe"}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "probe", "driver": driver, "pool": pool, "device": device}
                        for driver, pool, device in devices
                    ]
                }
            }
        },
    }


def allocate_hiding(
    scheduler: "Scheduler", node: str, claims: list[dict[str, Any]], hidden: list[DeviceId]
) -> list[dict[str, Any]] | None:
    """Allocate `claims` on `node` as if `hidden` devices were taken; None when that does not fit."""
    cluster = scheduler.cluster
    allocator = cluster.allocator()
    # Hidden devices are excluded for this call only: a probe claim would also consume their
    # counters, and an over-drawn counter set makes the allocator reject its whole pool.
    outcome = allocate(allocator, cluster.nodes[node], claims, exclude_devices=set(hidden))
    return outcome.allocations if outcome.outcome == "allocated" else None


def claims_to_allocate(scheduler: "Scheduler", info: "PodInfo", chosen: "NodeEval") -> list[dict[str, Any]]:
    claims = [scheduler.cluster.claims[key] for key in info.dra.to_allocate]
    if chosen.extended_claim is not None:
        claims.append(chosen.extended_claim)
    return claims


def steered_alternative(
    scheduler: "Scheduler", info: "PodInfo", chosen: "NodeEval", prefer_used_groups: bool
) -> list[dict[str, Any]] | None:
    node = chosen.result.node
    claims = claims_to_allocate(scheduler, info, chosen)
    if not claims or not chosen.result.allocations:
        return None
    groups = device_groups(scheduler, node)
    if not groups:
        return None
    allocated = scheduler.cluster.allocated_devices
    used_groups = {group for group in groups.values() if scheduler.cluster.group_use.get(group)}
    hidden = [
        device
        for device, group in groups.items()
        if device not in allocated and ((group in used_groups) != prefer_used_groups)
    ]
    if not hidden:
        return None
    return allocate_hiding(scheduler, node, claims, hidden)


def choose_device_alternative(
    scheduler: "Scheduler", info: "PodInfo", chosen: "NodeEval", prefer_used_groups: bool
) -> list[dict[str, Any]]:
    alternative = steered_alternative(scheduler, info, chosen, prefer_used_groups)
    return alternative if alternative is not None else list(chosen.result.allocations or [])
