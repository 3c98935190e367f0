"""The bounds of the scheduling cycle's verdict caches: how many pod shapes (or claim signatures) keep per-node
verdicts, and the one way an entry is dropped (the oldest first) when a cache is full.

The caches themselves live on `Scheduler` (gpudra.scheduler.scheduler: per pod shape, per Node-object shape, per
claim signature for DynamicResources, the shape indexes of gpudra.scheduler.shapeindex) and are keyed so that a
verdict is reused only while what decided it is unchanged (node epochs, device epochs, the cluster's generation).
kube-scheduler caches no verdicts across pods (it re-runs Filter per pod, pkg/scheduler/schedule_one.go
findNodesThatPassFilters, v1.36.0); the bounds keep memory flat when every pod has a shape of its own.
"""

from __future__ import annotations

from typing import Any, TypeVar

MAX_CACHED_SHAPES = 256  # per-node verdict caches kept (oldest dropped first)
MAX_INDEXED_SHAPES = 256  # as many as verdict caches: re-indexing a shape walks every node

K = TypeVar("K")
V = TypeVar("V")


def make_room(cache: dict[Any, Any], limit: int = MAX_CACHED_SHAPES) -> None:
    """Drop the oldest entry (first inserted) of a full `cache`, so that one more fits within `limit`."""
    if len(cache) >= limit:
        del cache[next(iter(cache))]


def per_node_slot(caches: dict[K, dict[str, V]], key: K) -> dict[str, V]:
    """`caches[key]`: the per-node verdicts of one shape, made empty (after `make_room`) when the shape is new."""
    found = caches.get(key)
    if found is None:
        make_room(caches)
        found = caches[key] = {}
    return found
