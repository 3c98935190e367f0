"""One node's view of the pools, with the per-request-shape caches the Allocator and the search fill."""

from __future__ import annotations

import itertools
from typing import Iterable

from .model import CacheKey, DeviceInfo, DeviceKey, SliceInfo
from .nodematch import NodeInfo
from .pools import Pool
from .selection import SelectorFailure


# What Allocator.fit_key reads of one candidate: (its key, multi-allocation allowed, its capacities' signature, its
# matchAttribute group: (type, values) or None without that constraint).
FitStatic = tuple[DeviceKey, bool, CacheKey, "tuple[str, frozenset[object]] | None"]
# A request's candidate devices on a node, in visiting order, each with the failure of its selectors (or None).
Candidates = list[tuple[DeviceInfo, "SelectorFailure | None"]]
# Allocator.request_shape: (candidates, counter flags, what each candidate consumes or None).
RequestShape = tuple[Candidates, tuple[bool, bool], "list[dict[str, int] | None] | None"]
# Per candidates key: the candidates' FitStatic, their keys, and their shape while none is in use.
FitStatics = tuple[tuple[FitStatic, ...], tuple[DeviceKey, ...], CacheKey]


class NodeView:
    """The pools one node sees, and per request shape the devices worth examining, in visiting order."""

    __slots__ = ("node", "pools", "pool_by_id", "devices", "any_invalid", "candidates", "counter_flags", "fit_static",
                 "sources", "consumptions", "shapes")

    def __init__(self, node: NodeInfo, pools: list[Pool], reachable: Iterable[SliceInfo] = ()):
        self.node = node
        self.pools = pools
        # the slices behind the view and those that could be edited to reach the node, each once: an in-place
        # edit of one of them makes the view stale
        self.sources = list({id(s): s for s in itertools.chain((s for p in pools for s in p.sources), reachable)}
                            .values())
        self.pool_by_id = {p.id: p for p in pools}
        self.devices: list[DeviceInfo] = [d for p in pools if p.usable for d in p.devices]
        self.any_invalid = any(p.invalid_reason is not None for p in pools)
        self.candidates: dict[CacheKey, Candidates] = {}
        # per candidates key: (some candidate consumes counters, one of those also has taints)
        self.counter_flags: dict[CacheKey, tuple[bool, bool]] = {}
        # per candidates key: what `Allocator.fit_key` needs of each candidate, or None when it cannot say
        self.fit_static: dict[CacheKey, FitStatics | None] = {}
        # per (candidates key, requested capacity): see Allocator.consumptions
        self.consumptions: dict[CacheKey, list[dict[str, int] | None]] = {}
        self.shapes: dict[int, RequestShape] = {}  # see Allocator.request_shape
