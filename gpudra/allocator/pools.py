"""Which resource pools a node sees, and in which order (upstream GatherPools and buildPool).

The order is the search's order, so it decides which devices a claim gets; the variants differ
(see SliceIndex.gather).
"""

from __future__ import annotations

import operator
from collections import OrderedDict, defaultdict
from typing import TYPE_CHECKING, Any, Iterable

from .features import Features
from .model import CacheKey, DeviceInfo, SliceInfo
from .nodematch import NodeInfo, node_matches

if TYPE_CHECKING:
    from .nodeview import NodeView  # a view is built from this index's pools


class Pool:
    __slots__ = (
        "id", "driver", "name", "incomplete", "invalid_reason", "node_slices", "other_slices",
        "all_device_slices", "counter_sets", "has_binding_conditions", "devices", "sources",
    )

    def __init__(self, pool_id: tuple[str, str]):
        self.id = pool_id
        self.driver, self.name = pool_id
        self.incomplete = False
        self.invalid_reason: str | None = None
        self.node_slices: list[SliceInfo] = []  # device slices that target the node, in visiting order
        self.other_slices: list[SliceInfo] = []  # device slices of the pool that do not (for counters)
        self.all_device_slices: list[SliceInfo] = []  # both
        self.counter_sets: dict[str, dict[str, int]] = {}
        self.has_binding_conditions = False
        self.devices: list[DeviceInfo] = []  # devices of node_slices in visiting order
        self.sources: list[SliceInfo] = []  # every slice the pool was built from (to notice in-place edits)

    @property
    def usable(self) -> bool:
        return not self.incomplete and self.invalid_reason is None


class SliceIndex:
    """All slices of the cluster, indexed for cheap per-node gathering.

    An index, its per-node pool views and its selector results depend only on the slice objects
    and the feature gates, so `shared()` hands out the same index for the same slice objects: a
    scheduler building one Allocator per pod (as upstream does) pays for parsing, pool gathering
    and CEL once, like upstream's informer cache. A changed slice is a new object (as an informer
    delivers it) or, edited in place, one with a new generation or resourceVersion: the Allocator
    compares the stamps of the slices behind a node's view before using it (SliceInfo.edited)
    and calls `discard` on a stale index.
    """

    _shared: "OrderedDict[CacheKey, SliceIndex]" = OrderedDict()
    _shared_limit = 8
    # The index handed out last, with its slice objects: a scheduler asks for the same list pod after pod,
    # and comparing identities is cheaper than hashing a key of every slice's id.
    _last: "tuple[Features, list[dict[str, Any]], SliceIndex] | None" = None

    @classmethod
    def shared(cls, slices: list[dict[str, Any]], features: Features) -> "SliceIndex":
        last = cls._last
        if last is not None and (last[0] is features or last[0] == features) and len(last[1]) == len(slices) and all(
                map(operator.is_, last[1], slices)):
            return last[2]
        key = (features, tuple(map(id, slices)))
        found = cls._shared.get(key)
        if found is not None:
            cls._shared.move_to_end(key)
        else:
            found = cls(slices, features)
            found.key = key
            cls._shared[key] = found  # the index keeps the dicts alive, so their ids stay unique
            while len(cls._shared) > cls._shared_limit:
                cls._shared.popitem(last=False)
        cls._last = (features, list(slices), found)
        return found

    @classmethod
    def forget_shared(cls) -> None:
        """Drop every shared index (after slice dicts were edited in place without a new generation)."""
        cls._shared.clear()
        cls._last = None

    @classmethod
    def discard(cls, index: "SliceIndex") -> None:
        """Stop handing out `index` (some of its slices were edited in place)."""
        if index.key is not None and cls._shared.get(index.key) is index:
            del cls._shared[index.key]
        if cls._last is not None and cls._last[2] is index:
            cls._last = None

    def __init__(self, slices: Iterable[dict[str, Any]], features: Features):
        from .selection import SelectorEvaluator

        self.features = features
        self.key: CacheKey | None = None  # its key among the shared indexes
        self.evaluator = SelectorEvaluator(not features.stable_variant, features.list_type_attributes)
        self.views: dict[CacheKey, NodeView] = {}  # NodeInfo.key -> its view
        self.views_by_node: dict[int, tuple[dict[str, Any], NodeView]] = {}  # id(Node dict) -> (the dict, its NodeView): see Allocator.node_view
        # 1.33/1.34 (features.combined_slices): a slice holds devices and the counter sets they consume, so a
        # slice with counter sets is a device slice like any other, and its counter sets are its own.
        self.combined = features.combined_slices
        self.slices = [SliceInfo(raw or {}, i, self.combined) for i, raw in enumerate(slices)]
        self.by_pool: dict[tuple[str, str], list[SliceInfo]] = defaultdict(list)
        self.by_node_name: dict[str, list[SliceInfo]] = defaultdict(list)
        self.other: list[SliceInfo] = []  # allNodes, nodeSelector, per-device, counter-set slices
        for info in self.slices:
            self.by_pool[info.pool_id].append(info)
            # Upstream (incubating) splits slices the same way: by nodeName unless they hold counter sets.
            if info.node_name and (self.combined or not info.shared_counters):
                self.by_node_name[info.node_name].append(info)
            else:
                self.other.append(info)

    def _relevant(self, info: SliceInfo, node: NodeInfo) -> bool:
        """Whether GatherPools adds the slice to its pool for this node (any variant)."""
        if not self.features.partitionable_devices and (info.per_device_field_set or info.shared_counters):
            return False
        if info.shared_counters and not self.combined:
            return True  # counter sets are needed on every node
        if info.node_name or info.all_nodes or info.node_selector is not None:
            return node_matches(node, info.node_name, info.all_nodes, info.node_selector)
        if info.per_device_node_selection:
            return any(node_matches(node, d.node_name, d.all_nodes, d.node_selector) for d in info.devices)
        return False  # an unknown future way of node selection: skipped

    def targets(self, info: SliceInfo, node: NodeInfo) -> bool:
        """Whether the slice's devices can be allocated on the node (counter-set slices: never)."""
        if info.shared_counters and self.features.partitionable_devices and not self.combined:
            return False
        return self._relevant(info, node)

    def gather(self, node: NodeInfo) -> list[Pool]:
        """Upstream GatherPools for the variant that runs (structured/internal/*/pools_*.go, v0.36.2).

        stable: every slice in input order; pools in the order they are first seen (upstream ranges
        over a Go map, so its order is random; the first seen is as good a guess as any and is
        deterministic); a pool's slices in input order.
        incubating/experimental: the node's own slices, then the others (node-independent ones and
        counter sets); pools sorted by (driver, pool name) with pools that have devices with binding
        conditions last whether or not that feature is on; a pool's slices sorted by name.
        """
        stable = self.features.stable_variant
        if stable:
            candidates: Iterable[SliceInfo] = self.slices
        else:
            candidates = [*self.by_node_name.get(node.name, ()), *self.other]
        newest: dict[tuple[str, str], list[SliceInfo]] = {}
        for info in candidates:
            if not self._relevant(info, node):
                continue
            current = newest.get(info.pool_id)
            if current is None or info.generation > current[0].generation:
                newest[info.pool_id] = [info]
            elif info.generation == current[0].generation:
                current.append(info)
        pools: list[Pool] = []
        binding_pools: list[Pool] = []
        for pool_id, pool_slices in newest.items():
            generation = pool_slices[0].generation
            expected = pool_slices[0].slice_count  # the first slice's count decides, as upstream
            everything = None
            if len(pool_slices) != expected:
                # Some slices of the pool did not target this node: look at the whole cluster.
                if any(s.generation > generation for s in self.by_pool[pool_id]):
                    continue  # obsolete: a newer generation is being published elsewhere
                everything = [s for s in self.by_pool[pool_id] if s.generation == generation]
                if len(everything) != expected:
                    pool = Pool(pool_id)
                    pool.incomplete = True
                    pool.sources = [*pool_slices, *everything]
                    pools.append(pool)
                    continue
            pool = self._build(pool_id, pool_slices, everything, node, sort_slices=not stable)
            pool.sources = [*pool_slices, *(everything or ())]
            if not stable and pool.has_binding_conditions:
                binding_pools.append(pool)
            else:
                pools.append(pool)
        if not stable:
            pools.sort(key=lambda p: (p.driver, p.name))
            binding_pools.sort(key=lambda p: (p.driver, p.name))
        return pools + binding_pools

    def _build(
        self,
        pool_id: tuple[str, str],
        pool_slices: list[SliceInfo],
        everything: list[SliceInfo] | None,
        node: NodeInfo,
        sort_slices: bool,
    ) -> Pool:
        """Upstream buildPool: split counter-set and device slices, then validate the pool."""
        pool = Pool(pool_id)
        ordered = sorted(pool_slices, key=lambda s: s.name) if sort_slices else list(pool_slices)
        partitionable = self.features.partitionable_devices
        counter_slices = [s for s in ordered if partitionable and s.shared_counters]
        pool.node_slices = [s for s in ordered if self.combined or not (partitionable and s.shared_counters)]
        seen: set[str] = set()
        problems: list[str] = []
        for info in pool.node_slices:
            for device in info.devices:
                if device.name in seen and not problems:
                    problems.append(f"duplicate device name {device.name}")
                seen.add(device.name)
        for info in counter_slices:
            for set_name, counters in info.shared_counters:
                if set_name in pool.counter_sets and not problems:
                    problems.append(f"duplicate counter set name {set_name}")
                pool.counter_sets.setdefault(set_name, counters)
        if partitionable:
            checked = list(ordered)
            if everything is not None and len(everything) != len(pool_slices):
                names = {s.name for s in pool_slices}
                # Slices of this generation that do not target the node: their devices only
                # count for counter accounting (upstream DeviceSlicesNotTargetingNode).
                pool.other_slices = [s for s in everything if s.name not in names]
                checked += pool.other_slices
            for info in checked if not problems else ():
                for device in info.devices:
                    problem = self._counter_problem(device, pool.counter_sets)
                    if problem:
                        problems.append(problem)
                        break
                if problems:
                    break
        if problems:
            # The search skips an invalid pool (upstream returns it without slices); the slices
            # stay here for explanations.
            pool.invalid_reason = problems[0]
        pool.all_device_slices = pool.node_slices + pool.other_slices
        pool.devices = [device for info in pool.node_slices for device in info.devices]
        pool.has_binding_conditions = pool.invalid_reason is None and any(
            s.has_binding_conditions for s in pool.node_slices
        )
        return pool

    @staticmethod
    def _counter_problem(device: DeviceInfo, counter_sets: dict[str, dict[str, int]]) -> str | None:
        for set_name, counters in device.consumes_counters:
            available = counter_sets.get(set_name)
            if available is None:
                return f"counter set {set_name} not found"
            for counter in counters:
                if counter not in available:
                    return f"counter {counter} not found in counter set {set_name}"
        return None
