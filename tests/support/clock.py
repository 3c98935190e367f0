"""A clock that moves only when asked (deadlines tested without waiting)."""

from __future__ import annotations


class SteppingClock:
    """time.monotonic() that advances one second per reading."""

    def __init__(self) -> None:
        self.now = 0.0
        self.readings = 0

    def monotonic(self) -> float:
        self.readings += 1
        self.now += 1.0
        return self.now
