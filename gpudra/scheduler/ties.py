"""Which of the nodes with the top score the scheduler picks (kube-scheduler's selectHost).

kube-scheduler picks uniformly at random among the nodes that share the top score: v1.34 selectHost
(kubernetes v1.34.4 pkg/scheduler/schedule_one.go) by reservoir sampling over the scored nodes (each later node
with the top score replaces the candidate with probability 1/count); v1.35 and v1.36 pop a heap ordered by
(TotalScore, Randomizer) (kubernetes v1.36.0 pkg/scheduler/schedule_one.go, nodeScoreHeap), where the random
Randomizer is only set for nodes an extender scored, and the tie is decided by the order in which the parallel
Filter workers appended the feasible nodes (kubernetes PR 141024 sets Randomizer for every node). Either way a
tie goes to any of the tied nodes with equal chance.

gpudra offers two rules (`Scheduler(ties=...)`):
- `"name"` (the default): the first node name among the tied, so that `gpudra schedule` answers the same way on
  every run;
- a `random.Random`: selectHost's reservoir sampling over the feasible nodes in the order they were evaluated,
  drawn from that generator, so a seeded run (the simulator's replays) is random as kube-scheduler's and
  reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar, Union

BY_NAME = "name"
TieRule = Union[str, random.Random]  # "name" or a seeded generator

T = TypeVar("T")


def check(ties: TieRule) -> TieRule:
    if isinstance(ties, random.Random) or ties == BY_NAME:
        return ties
    raise ValueError(f"ties: {ties!r}: must be {BY_NAME!r} or a random.Random")


def pick(candidates: Sequence[T], score_of: Callable[[T], float], name_of: Callable[[T], str],
         ties: TieRule) -> T:
    """The candidate with the highest score; among equal scores the first name, or one drawn uniformly by
    reservoir sampling in `candidates`' order. `candidates` must not be empty."""
    if not candidates:
        raise ValueError("no candidates to pick from")
    best = candidates[0]
    best_score = score_of(best)
    if isinstance(ties, random.Random):
        count = 1
        for candidate in candidates[1:]:
            score = score_of(candidate)
            if score > best_score:
                best, best_score, count = candidate, score, 1
            elif score == best_score:
                count += 1
                if ties.randrange(count) == 0:  # replace the candidate with probability 1/count
                    best = candidate
        return best
    best_name = name_of(best)
    for candidate in candidates[1:]:
        score = score_of(candidate)
        if score > best_score or (score == best_score and name_of(candidate) < best_name):
            best, best_score, best_name = candidate, score, name_of(candidate)
    return best
