"""Runtime limits of one evaluation: Kubernetes' cost limit and the allocator search's deadline.

cel-expr-python has no cost tracking or cancellation, so the limits are applied where gpudra's own
work happens: the Kubernetes library functions written in Python (quantity, semver, lists, regex, IP,
CIDR, URL) are `metered`: each call charges its cost (one, plus one per ten bytes or elements of its
arguments, cel-go's unit) and checks the deadline. A charge over the limit raises inside the function,
and because CEL's `||`/`&&` can absorb an error, the evaluation's outcome is decided afterwards from
the meter: over the cost limit is the runtime error "operation cancelled: actual cost limit exceeded",
past the deadline raises EvaluationDeadlineExceeded (a TimeoutError, never cached: the same selector
on the same device gives its real answer to a search with time left). cel-cpp's own work is bounded by
the static cost estimate every selector passes at compile time and by its 10,000-iteration budget.
"""

from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

# CELSelectorExpressionMaxCost: the limit of the compile-time estimate (gpudra.cel.cost) and the runtime CostLimit
MAX_COST = 1_000_000

COST_LIMIT_EXCEEDED = "operation cancelled: actual cost limit exceeded"


class EvaluationDeadlineExceeded(TimeoutError):
    """The search's deadline passed before or during an evaluation."""


class Meter:
    __slots__ = ("cost", "deadline", "aborted")

    def __init__(self, deadline: float | None):
        self.cost = 0
        self.deadline = deadline
        self.aborted: str | None = None  # "cost" | "deadline"


_local = threading.local()


@contextmanager
def evaluation(deadline: float | None) -> Iterator[Meter]:
    """Meter one evaluation; refuses to start one past `deadline` (a time.monotonic() instant)."""
    if deadline is not None and time.monotonic() > deadline:
        raise EvaluationDeadlineExceeded("operation interrupted: the search's deadline passed")
    meter = Meter(deadline)
    previous = getattr(_local, "meter", None)
    _local.meter = meter
    try:
        yield meter
    finally:
        _local.meter = previous


def outcome(meter: Meter) -> str | None:
    """After the evaluation: the runtime error it ends with, or None; raises when the deadline passed."""
    if meter.aborted == "deadline":
        raise EvaluationDeadlineExceeded("operation interrupted: the search's deadline passed")
    return COST_LIMIT_EXCEEDED if meter.aborted == "cost" else None


def restart(meter: Meter) -> None:
    """The evaluation starts over (gpudra.cel.chunked evaluates it again in parts): what it charged so far is void."""
    meter.cost = 0


def charge(units: int) -> None:
    meter: Meter | None = getattr(_local, "meter", None)
    if meter is None:
        return
    if meter.aborted is None:
        meter.cost += units
        if meter.cost > MAX_COST:
            meter.aborted = "cost"
        elif meter.deadline is not None and time.monotonic() > meter.deadline:
            meter.aborted = "deadline"
    if meter.aborted is not None:
        raise ValueError(COST_LIMIT_EXCEEDED if meter.aborted == "cost" else "operation interrupted")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict)) else 1


def metered(impl: Callable[..., Any]) -> Callable[..., Any]:
    """`impl`, charging its cost to the running evaluation before it runs."""

    @functools.wraps(impl)
    def call(*args: Any) -> Any:
        charge(1 + sum(_size(arg) for arg in args) // 10)
        return impl(*args)

    return call
