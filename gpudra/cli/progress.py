"""Progress on stderr for work that can take more than a couple of seconds (scheduling a long queue, allocating
every claim on every node, replaying a cluster for explain's fixes).

Only on a terminal, and only once the work has run for SHOW_AFTER_S: short runs and piped or redirected output
stay exactly as they were. The bar is click's (the project's CLI library), drawn on stderr so stdout stays data.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TextIO

SHOW_AFTER_S = 2.0

# A library loop reports (what, done, total); the CLI turns that into a bar.
Report = Callable[[str, int, int], None]


class Progress:
    """Receives (label, done, total) from the work; draws a bar after SHOW_AFTER_S on a terminal."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, show_after: float | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_terminal(self.stream) if enabled is None else enabled
        self.clock = clock
        self.show_after = SHOW_AFTER_S if show_after is None else show_after
        self.started = clock()
        self.bar: Any = None
        self.label = ""
        self.shown = 0
        self.draws = 0  # how often the bar was brought up to date (tests count these, not seconds)

    def __call__(self, label: str, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        if self.bar is not None and label != self.label:
            self.close()
        if self.bar is None:
            if self.clock() - self.started < self.show_after:
                return
            import click

            self.bar = click.progressbar(length=total, label=label, file=self.stream, show_eta=True,
                                         show_percent=True, show_pos=True)
            self.bar.__enter__()
            self.label, self.shown = label, 0
        step = min(done, total) - self.shown
        if step > 0:
            self.bar.update(step)
            self.shown += step
            self.draws += 1

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


@contextmanager
def progress(stream: TextIO | None = None, **kwargs: Any) -> Iterator[Progress]:
    """`with progress() as report: work(progress=report)`: the bar (if any) is closed on the way out."""
    bar = Progress(stream, **kwargs)
    try:
        yield bar
    finally:
        bar.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
