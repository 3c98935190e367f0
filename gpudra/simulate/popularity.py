"""Task popularity learnt online: the typical tasks of the tasks arrived so far.

FGD's measure (`fgd.py`) weighs node fragmentation by the typical tasks, and the paper's artifact takes them from
the whole trace before the first task arrives: an oracle a live scheduler does not have. The online policies
(`fgd-online`, `fgd-reserve-online`) read this estimate instead: the same typical-task rule
(`fgd.typical_of_counts`: most popular shapes up to 95% of the tasks) applied to the tasks that have arrived.

Warm-up and refreshes: no prior. The estimate is taken again when the count of arrived tasks reaches 1, 2, 4, …
(doubling) up to `REFRESH_INTERVAL`, then every `REFRESH_INTERVAL` tasks; the task that triggers a refresh counts
(a scheduler sees a pending pod before it places it), so the first task is placed with itself as the only
typical task. Between refreshes the estimate stays fixed, so the per-node-state memos of a measure stay valid
for a whole interval: each refresh starts a new `version`, and a policy builds a new measure (empty memos) for it
and recomputes the scores it cached under an older version (`policies.FgdPolicy`).
"""

from __future__ import annotations

from collections import Counter

from .fgd import ResourceKey, TypicalTask, typical_of_counts
from .trace import Task

REFRESH_INTERVAL = 256  # tasks between two estimates once warmed up (a refresh costs every cached score)


class OnlinePopularity:
    """The typical tasks of the tasks observed so far, as of the last refresh (`typical`, `version`)."""

    def __init__(self, interval: int = REFRESH_INTERVAL):
        if interval < 1:
            raise ValueError(f"interval: at least 1 task, not {interval}")
        self.interval = interval
        self.counts: Counter[ResourceKey] = Counter()
        self.seen = 0
        self.version = 0  # 0: nothing observed yet (no typical tasks)
        self.typical: list[TypicalTask] = []
        self.counted: Counter[ResourceKey] = Counter()  # `counts` as of the last refresh (what `typical` is of)
        self._next_refresh = 1

    def observe(self, task: Task) -> None:
        """One more task arrived; at a refresh point the estimate is taken again (a new version)."""
        self.counts[task.resource_key] += 1
        self.seen += 1
        if self.seen >= self._next_refresh:
            self.typical = self.current()
            self.counted = Counter(self.counts)
            self.version += 1
            self._next_refresh = min(2 * self.seen, self.seen + self.interval)

    def current(self) -> list[TypicalTask]:
        """The typical tasks of every task observed until now (what the next refresh would take)."""
        return typical_of_counts(self.counts)
