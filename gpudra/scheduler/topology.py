"""Where devices live: which nodes see which pools, and which node-local devices form one physical device.

A mixin of `ClusterState` (it reads the cluster's nodes, slices and allocated devices). Used to invalidate per-node
caches when devices are allocated (`pool_nodes`) and by the device-aware policies (physical devices, free
capacity).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from gpudra.quantity import Quantity, QuantityError
from gpudra.vocabulary import PARENT_UUID_ATTRIBUTE

from gpudra.api.objectmeta import name_of
from gpudra.schedulinghelpers import node_selector_matches

PoolId = tuple[str, str]  # (driver, pool)
GroupId = tuple[str, ...]  # ("counters", driver, pool, counter set) | ("parent", driver, uuid) | ("device", ...)
DeviceId = tuple[str, str, str]  # (driver, pool, device)


def _parent_uuid(device: dict[str, Any], driver: str) -> str | None:
    """A statically partitioned device (MIG) names its parent GPU in the driver's `parentUUID` attribute, written
    bare or as `<driver>/parentUUID` (a QualifiedName without a domain is the driver's); another domain's
    `parentUUID` is another attribute."""
    attributes = device.get("attributes") or {}
    for name in (PARENT_UUID_ATTRIBUTE, f"{driver}/{PARENT_UUID_ATTRIBUTE}"):
        value = attributes.get(name)
        text = value.get("string") if isinstance(value, dict) else None
        if text:
            return str(text)
    return None


def _nanos(value: Any) -> int:
    try:
        return Quantity.parse(value).nanos if value is not None else 0
    except QuantityError:
        return 0


def _device_visible(device: dict[str, Any], node: dict[str, Any]) -> bool:
    node_name: str | None = device.get("nodeName")
    if node_name:
        return node_name == name_of(node)
    if device.get("allNodes"):
        return True
    if device.get("nodeSelector") is not None:
        return node_selector_matches(device["nodeSelector"], node)
    return False


class Topology:
    nodes: dict[str, dict[str, Any]]
    slices: list[dict[str, Any]]
    allocated_devices: Counter[DeviceId]

    def _reset_topology(self) -> None:
        self._pool_nodes: dict[PoolId, list[str]] | None = None
        self._node_devices: dict[str, list[DeviceId]] | None = None
        self._device_groups: dict[DeviceId, GroupId] | None = None
        self._node_groups: dict[str, list[GroupId]] | None = None
        self.group_use: Counter[GroupId] = Counter()  # allocated devices per physical device
        self._counter_totals: dict[GroupId, tuple[str, int]] = {}
        self._consumption: dict[DeviceId, int] = {}
        self._group_sizes: Counter[GroupId] = Counter()

    def pool_nodes(self) -> dict[PoolId, list[str]]:
        """For every pool, the nodes that can see at least one of its devices (the first binding asks: computed
        on its own, without the physical devices of every device, which only the device-aware policies need)."""
        if self._pool_nodes is None:
            self._compute_pool_nodes()
        assert self._pool_nodes is not None
        return self._pool_nodes

    def _compute_pool_nodes(self) -> None:
        pool_nodes: dict[PoolId, set[str]] = {}
        for slice_obj in self.slices:
            spec = slice_obj.get("spec") or {}
            pool: PoolId = (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))
            pool_nodes.setdefault(pool, set()).update(self._slice_nodes(spec))
        self._pool_nodes = {pool: sorted(nodes) for pool, nodes in pool_nodes.items()}

    def _slice_nodes(self, spec: dict[str, Any]) -> Iterable[str]:
        """The nodes that see a device of the slice."""
        if spec.get("nodeName"):
            return (spec["nodeName"],) if spec["nodeName"] in self.nodes else ()
        if spec.get("allNodes"):
            return self.nodes
        if spec.get("nodeSelector") is not None:
            return [n for n, node in self.nodes.items() if node_selector_matches(spec["nodeSelector"], node)]
        if spec.get("perDeviceNodeSelection"):
            return {name for device in spec.get("devices") or [] for name, node in self.nodes.items()
                    if _device_visible(device, node)}
        return ()

    def node_devices(self, node_name: str) -> list[DeviceId]:
        """Devices local to the node (slice or device `nodeName`), used by the device-aware policies."""
        if self._node_devices is None:
            self._compute_topology()
        assert self._node_devices is not None
        return self._node_devices.get(node_name, [])

    def device_group(self, device: DeviceId) -> GroupId | None:
        """The physical device a node-local device belongs to: the counter set it draws on (dynamic MIG: all
        partitions and the whole GPU share one), else its `parentUUID` attribute (static MIG devices of one GPU),
        else the device itself. None for devices that are not node-local."""
        if self._device_groups is None:
            self._compute_topology()
        assert self._device_groups is not None
        return self._device_groups.get(device)

    def node_groups(self, node_name: str) -> list[GroupId]:
        if self._node_groups is None:
            self._compute_topology()
        assert self._node_groups is not None
        return self._node_groups.get(node_name, [])

    def free_node_groups(self, node_name: str) -> int:
        """Physical devices of the node nothing is allocated from (whole GPUs still free)."""
        groups = self.node_groups(node_name)  # first: group_use is counted with the groups
        used = self.group_use
        return sum(1 for group in groups if not used.get(group))

    def groups_opened(self, node_name: str, allocations: list[dict[str, Any]] | None) -> int:
        """How many of the node's free physical devices these allocation results would start using."""
        opened = set()
        for allocation in allocations or []:
            for result in ((allocation or {}).get("devices") or {}).get("results") or []:
                if result.get("adminAccess"):
                    continue
                group = self.device_group((result.get("driver", ""), result.get("pool", ""), result.get("device", "")))
                if group is not None and not self.group_use.get(group):
                    opened.add(group)
        return len(opened)

    def _compute_topology(self) -> None:
        node_devices: dict[str, list[DeviceId]] = {}
        device_groups: dict[DeviceId, GroupId] = {}

        counter_totals: dict[GroupId, tuple[str, int]] = {}  # counter set -> (its first counter, amount)
        consumption: dict[DeviceId, int] = {}  # device -> how much of that counter it takes
        for slice_obj in self.slices:
            spec = slice_obj.get("spec") or {}
            for counter_set in spec.get("sharedCounters") or []:
                counters = (counter_set or {}).get("counters") or {}
                if counters:
                    first = sorted(counters)[0]
                    group = ("counters", spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""),
                             str(counter_set.get("name", "")))
                    counter_totals[group] = (first, _nanos((counters[first] or {}).get("value")))

        def local(node_name: str, driver: str, pool_name: str, device: dict[str, Any]) -> None:
            device_id = (driver, pool_name, device.get("name", ""))
            node_devices.setdefault(node_name, []).append(device_id)
            consumes = device.get("consumesCounters") or []
            if consumes and isinstance(consumes[0], dict):
                group = ("counters", driver, pool_name, str(consumes[0].get("counterSet", "")))
                device_groups[device_id] = group
                counter = counter_totals.get(group)
                if counter is not None:
                    amount = ((consumes[0].get("counters") or {}).get(counter[0]) or {}).get("value")
                    consumption[device_id] = _nanos(amount)
            else:
                parent = _parent_uuid(device, driver)
                device_groups[device_id] = ("parent", driver, parent) if parent else ("device", *device_id)

        for slice_obj in self.slices:
            spec = slice_obj.get("spec") or {}
            driver = spec.get("driver", "")
            pool_name = (spec.get("pool") or {}).get("name", "")
            devices = spec.get("devices") or []
            if spec.get("nodeName"):
                for device in devices:
                    local(spec["nodeName"], driver, pool_name, device)
            elif not spec.get("allNodes") and spec.get("nodeSelector") is None and spec.get("perDeviceNodeSelection"):
                for device in devices:
                    if device.get("nodeName"):
                        local(device["nodeName"], driver, pool_name, device)
        if self._pool_nodes is None:
            self._compute_pool_nodes()
        self._node_devices = node_devices
        self._device_groups = device_groups
        self._node_groups = {
            node: sorted({device_groups[d] for d in node_list}) for node, node_list in node_devices.items()
        }
        self._counter_totals = counter_totals
        self._consumption = consumption
        self._group_sizes = Counter(device_groups.values())
        self.group_use = Counter()
        for device, count in self.allocated_devices.items():
            device_group = device_groups.get(device)
            if device_group is not None and count > 0:
                self.group_use[device_group] += count

    def free_capacity(self, node_name: str, extra_devices: Iterable[DeviceId] = ()) -> float:
        """The node's free device capacity in physical devices: 1 per untouched device, and for a device split
        by counters the free share of its counter (half a GPU whose MIG half is taken counts 0.5). With
        `extra_devices`, as if those were allocated too."""
        extra = set(extra_devices)
        allocated = self.allocated_devices
        consumed: dict[GroupId, int] = {}
        taken_members: dict[GroupId, int] = {}
        used = set()
        devices = self.node_devices(node_name)  # computes the topology on first use
        device_groups = self._device_groups
        assert device_groups is not None
        for device in devices:
            if device in allocated or device in extra:
                group = device_groups[device]
                used.add(group)
                taken_members[group] = taken_members.get(group, 0) + 1
                consumed[group] = consumed.get(group, 0) + self._consumption.get(device, 0)
        total = 0.0
        for group in self.node_groups(node_name):
            counter = self._counter_totals.get(group)
            if counter is not None and counter[1] > 0:
                total += max(0, counter[1] - consumed.get(group, 0)) / counter[1]
            elif group in used:  # static partitions (MIG devices of one parent GPU): the free share by count
                members = self._group_sizes.get(group, 1)
                taken = taken_members.get(group, 0)
                total += max(0, members - taken) / members
            else:
                total += 1.0
        return total

    def _count_groups(self, devices: list[DeviceId], sign: int) -> None:
        if self._device_groups is None:
            return  # not computed yet: _compute_topology counts the allocated devices when first asked
        for device in devices:
            group = self._device_groups.get(device)
            if group is not None:
                self.group_use[group] += sign
                if self.group_use[group] <= 0:
                    del self.group_use[group]

