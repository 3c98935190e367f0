"""Which resource pools a node sees (upstream GatherPools, incubating/experimental variant).

Pools are visited sorted by (driver, pool name) — pools that contain devices with binding conditions
last when that feature is on — and a pool's slices by slice name.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from typing import Iterable

from .features import Features
from .model import DeviceInfo, SliceInfo
from .nodematch import NodeInfo, node_matches


class Pool:
    __slots__ = (
        "id", "driver", "name", "incomplete", "invalid_reason", "node_slices", "all_device_slices",
        "counter_sets", "has_binding_conditions", "devices",
    )

    def __init__(self, pool_id: tuple[str, str]):
        self.id = pool_id
        self.driver, self.name = pool_id
        self.incomplete = False
        self.invalid_reason: str | None = None
        self.node_slices: list[SliceInfo] = []  # device slices that target the node, by name
        self.all_device_slices: list[SliceInfo] = []  # also those that do not (for counters)
        self.counter_sets: dict[str, dict[str, int]] = {}
        self.has_binding_conditions = False
        self.devices: list[DeviceInfo] = []  # devices of node_slices in visiting order

    @property
    def usable(self) -> bool:
        return not self.incomplete and self.invalid_reason is None


class SliceIndex:
    """All slices of the cluster, indexed for cheap per-node gathering.

    An index, its per-node pool views and its selector results depend only on the slice objects
    and the feature gates, so `shared()` hands out the same index for the same slice objects: a
    scheduler building one Allocator per pod (as upstream does) pays for parsing, pool gathering
    and CEL once, like upstream's informer cache. Objects are treated as immutable, as in
    Kubernetes: pass new dicts for changed slices.
    """

    _shared: "OrderedDict[tuple, SliceIndex]" = OrderedDict()
    _shared_limit = 8

    @classmethod
    def shared(cls, slices: list[dict], features: Features) -> "SliceIndex":
        key = (features, tuple(map(id, slices)))
        found = cls._shared.get(key)
        if found is not None:
            cls._shared.move_to_end(key)
            return found
        found = cls(slices, features)
        cls._shared[key] = found  # the index keeps the dicts alive, so their ids stay unique
        while len(cls._shared) > cls._shared_limit:
            cls._shared.popitem(last=False)
        return found

    @classmethod
    def forget_shared(cls) -> None:
        """Drop every shared index (after slice dicts were edited in place)."""
        cls._shared.clear()

    def __init__(self, slices: Iterable[dict], features: Features):
        from .selection import SelectorEvaluator

        self.features = features
        self.evaluator = SelectorEvaluator(features.consumable_capacity, features.list_type_attributes)
        self.views: dict = {}
        self.slices = [SliceInfo(raw or {}, i) for i, raw in enumerate(slices)]
        self.by_pool: dict[tuple[str, str], list[SliceInfo]] = defaultdict(list)
        self.by_node_name: dict[str, list[SliceInfo]] = defaultdict(list)
        self.other: list[SliceInfo] = []  # allNodes, nodeSelector, per-device, counter-set slices
        for info in self.slices:
            self.by_pool[info.pool_id].append(info)
            if info.node_name and not info.shared_counters and not info.per_device_node_selection:
                self.by_node_name[info.node_name].append(info)
            else:
                self.other.append(info)

    def _included(self, info: SliceInfo, node: NodeInfo) -> tuple[bool, bool]:
        """(included, targets_node) for one slice."""
        partitionable = self.features.partitionable_devices
        if info.per_device_node_selection or info.shared_counters:
            if not partitionable:
                return False, False
        if info.shared_counters:
            # Counter sets are needed on every node. (Devices next to them are a pre-1.35 layout
            # that validation rejects; they still only count for the nodes they target.)
            if not info.has_devices:
                return True, False
            return True, node_matches(node, info.node_name, info.all_nodes, info.node_selector)
        if info.node_name or info.all_nodes or info.node_selector is not None:
            matched = node_matches(node, info.node_name, info.all_nodes, info.node_selector)
            return matched, matched
        if info.per_device_node_selection:
            matched = any(node_matches(node, d.node_name, d.all_nodes, d.node_selector) for d in info.devices)
            return matched, matched
        return False, False

    def targets(self, info: SliceInfo, node: NodeInfo) -> bool:
        return self._included(info, node)[1]

    def gather(self, node: NodeInfo) -> list[Pool]:
        candidates = list(self.by_node_name.get(node.name, ()))
        candidates.extend(self.other)
        newest: dict[tuple[str, str], list[SliceInfo]] = {}
        for info in candidates:
            included, _ = self._included(info, node)
            if not included:
                continue
            current = newest.get(info.pool_id)
            if current is None or info.generation > current[0].generation:
                newest[info.pool_id] = [info]
            elif info.generation == current[0].generation:
                current.append(info)
        pools = []
        for pool_id, pool_slices in newest.items():
            generation = pool_slices[0].generation
            if len(pool_slices) != pool_slices[0].slice_count:
                everything = self.by_pool[pool_id]
                if any(s.generation > generation for s in everything):
                    continue  # obsolete: a newer generation is being published elsewhere
                pool_slices = [s for s in everything if s.generation == generation]
                if len(pool_slices) < pool_slices[0].slice_count:
                    pool = Pool(pool_id)
                    pool.incomplete = True
                    pools.append(pool)
                    continue
            pools.append(self._build(pool_id, pool_slices, node))
        binding_last = self.features.device_binding_and_status
        pools.sort(key=lambda p: ((p.has_binding_conditions if binding_last else False), p.driver, p.name))
        return pools

    def _build(self, pool_id: tuple[str, str], pool_slices: list[SliceInfo], node: NodeInfo) -> Pool:
        pool = Pool(pool_id)
        ordered = sorted(pool_slices, key=lambda s: (s.name, s.order))
        problems: list[str] = []
        for info in ordered:
            for set_name, counters in info.shared_counters:
                if set_name in pool.counter_sets:
                    problems.append(f"duplicate counter set name {set_name}")
                pool.counter_sets[set_name] = counters
            if info.has_devices or not info.shared_counters:
                pool.all_device_slices.append(info)
                if self.targets(info, node):
                    pool.node_slices.append(info)
        seen: set[str] = set()
        for info in pool.node_slices:
            for device in info.devices:
                if device.name in seen:
                    problems.append(f"duplicate device name {device.name}")
                seen.add(device.name)
                pool.devices.append(device)
        for info in pool.all_device_slices if self.features.partitionable_devices else ():
            for device in info.devices:
                for set_name, counters in device.consumes_counters:
                    available = pool.counter_sets.get(set_name)
                    if available is None:
                        problems.append(f"counter set {set_name} not found")
                        continue
                    for counter in counters:
                        if counter not in available:
                            problems.append(f"counter {counter} not found in counter set {set_name}")
        if problems:
            pool.invalid_reason = problems[0]
        pool.has_binding_conditions = any(s.has_binding_conditions for s in pool.all_device_slices)
        return pool
