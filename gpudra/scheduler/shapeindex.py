"""Every node's verdict for one pod shape, kept current from the cluster's change log.

The linear scan of kube-scheduler (walk the nodes round-robin from where the last pod stopped, stop after
`num_feasible_nodes_to_find` feasible ones) touches hundreds of nodes per pod. When many pods share a shape
(pods of one template), this index answers the same question with a binary search: the feasible nodes are a
sorted list of node positions, so "the first K feasible nodes from position `start`" and "how many nodes the
scan would have processed" follow directly. Only nodes whose epoch changed since the shape's last pod are
re-evaluated (normally one: where the previous pod went). The answers are exactly the linear scan's.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .cyclestate import NodeEval, PodInfo
    from .scheduler import Scheduler


class ShapeIndex:
    def __init__(self, scheduler: "Scheduler", info: "PodInfo", cached: dict[str, "NodeEval"]):
        cluster = scheduler.cluster
        self.nodes = cluster.node_names()
        self.generation = cluster.generation
        self.position = {name: i for i, name in enumerate(self.nodes)}
        count = len(self.nodes)
        self.evals: list[NodeEval | None] = [None] * count
        self.feasible: list[int] = []  # sorted node positions
        # aligned with `feasible`: the node's plain score as one int that orders like (score, -position), so the
        # best of a window is `max` of a slice at C speed (see `plain_key`); None where the score is not plain
        self.keys: list[int | None] = []
        self.fatal: list[int] = []  # sorted node positions whose evaluation raised a fatal allocator error
        self.nonplain = 0  # feasible nodes whose score depends on the other scored nodes
        self.log_position = len(cluster.changes)
        for i, name in enumerate(self.nodes):
            evaluation = cached.get(name)
            if evaluation is None or evaluation.epoch != cluster.epoch[name]:
                evaluation = scheduler.evaluate_fresh(info, name)
            self._set(scheduler, i, evaluation)

    def _set(self, scheduler: "Scheduler", i: int, evaluation: "NodeEval") -> None:
        old = self.evals[i]
        feasible = self.feasible
        if old is not None:
            if old.fatal is not None:
                self.fatal.remove(i)
            elif not old.result.reasons:
                at = bisect_left(feasible, i)
                del feasible[at]
                if self.keys.pop(at) is None:
                    self.nonplain -= 1
        self.evals[i] = evaluation
        if evaluation.fatal is not None:
            insort(self.fatal, i)
        elif not evaluation.result.reasons:
            score = scheduler.policy.plain_score(evaluation.parts)
            key = plain_key(score, i, len(self.nodes)) if type(score) is int else None
            if key is None:
                self.nonplain += 1
            at = bisect_left(feasible, i)
            feasible.insert(at, i)
            self.keys.insert(at, key)

    def refresh(self, scheduler: "Scheduler", info: "PodInfo") -> None:
        cluster = scheduler.cluster
        changes = cluster.changes
        if self.log_position == len(changes):
            return
        changed = set(changes[self.log_position:])
        self.log_position = len(changes)
        for name in changed:
            i = self.position.get(name)
            if i is None:
                continue
            current = self.evals[i]
            if current is not None and current.epoch == cluster.epoch[name]:
                continue
            self._set(scheduler, i, scheduler.evaluate_fresh(info, name))

    def select(self, start: int, to_find: int) -> tuple[list[int], list[int | None], int, int | None]:
        """(feasible positions in scan order, their `keys`, nodes processed, fatal position hit first or None)."""
        feasible, keys = self.feasible, self.keys
        count = len(self.nodes)
        split = bisect_left(feasible, start)
        if len(feasible) >= to_find:
            chosen = feasible[split : split + to_find]
            chosen_keys = keys[split : split + to_find]
            if len(chosen) < to_find:
                chosen = chosen + feasible[: to_find - len(chosen)]
                chosen_keys = chosen_keys + keys[: to_find - len(chosen_keys)]
            processed = (chosen[-1] - start) % count + 1
        else:
            chosen = feasible[split:] + feasible[:split]
            chosen_keys = keys[split:] + keys[:split]
            processed = count
        fatal_hit = None
        if self.fatal:
            at = bisect_left(self.fatal, start)
            first = self.fatal[at] if at < len(self.fatal) else self.fatal[0]
            if (first - start) % count < processed:
                fatal_hit = first
                processed = (first - start) % count  # the nodes the scan passed before the error, as the linear scan
                kept = [n for n, i in enumerate(chosen) if (i - start) % count < (first - start) % count]
                chosen, chosen_keys = [chosen[n] for n in kept], [chosen_keys[n] for n in kept]
        return chosen, chosen_keys, processed, fatal_hit


def plain_key(score: int, position: int, count: int) -> int:
    """One int for (score, -position) among `count` nodes: a higher score wins, then the lower position (the first
    node name); `key // count` gives the score back and `count - 1 - key % count` the position."""
    return score * count + (count - 1 - position)


class PlainScores(Mapping[str, float]):
    """node -> score for the scored nodes, built on first use (most callers only need the winner). `keys`: the
    chosen positions' `plain_key`s, a snapshot (the index's lists change as later pods land)."""

    def __init__(self, nodes: list[str], keys: list[int], chosen: list[int]):
        self._source = (nodes, keys, chosen)
        self._scores: dict[str, float] | None = None

    def _materialize(self) -> dict[str, float]:
        if self._scores is None:
            nodes, keys, chosen = self._source
            count = len(nodes)
            self._scores = {nodes[i]: key // count for i, key in zip(chosen, keys)}
        return self._scores

    def __getitem__(self, node: str) -> float:
        return self._materialize()[node]

    def __iter__(self) -> Iterator[str]:
        return iter(self._materialize())

    def __len__(self) -> int:
        return len(self._source[2])

    def __repr__(self) -> str:
        return repr(self._materialize())
