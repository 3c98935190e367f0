"""Per-claim calls with a deadline, so one claim never holds up the others or the health service.

Each claim of a NodePrepareResources / NodeUnprepareResources request runs on its own thread;
the gRPC worker waits for it until the deadline (the configured one, or what is left of the
kubelet's, whichever ends first) and then answers that claim with an error. The late call is
abandoned, not killed (Python cannot stop a thread): a prepare checks its `CallToken` before it
reserves devices and again before it reports success, and rolls back instead. So the kubelet's
retry starts clean and a prepare that failed by deadline leaves no reservation behind.

A retry of a claim whose abandoned call still runs is answered at once instead of starting a
second thread: hostile content can tie up at most one thread per distinct claim, and at most
`max_running` in all.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

DEFAULT_DEADLINE_S = 40.0  # under the kubelet's 45 s per call, so the answer arrives before it gives up
KUBELET_MARGIN_S = 1.0  # answer this long before the caller's own deadline
MAX_RUNNING = 256
WORKER_IDLE_EXIT_S = 60.0


class CallAbandoned(Exception):
    """The call outlived its deadline; the caller was answered with an error."""


class CallToken:
    """Decides, once, whether a call commits its result or was abandoned by its deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "running"

    @property
    def abandoned(self) -> bool:
        return self._state == "abandoned"

    def commit(self) -> bool:
        """True when the call may report success; False when its deadline already passed."""
        with self._lock:
            if self._state == "abandoned":
                return False
            self._state = "committed"
            return True

    def abandon(self) -> bool:
        """True when the call is now abandoned; False when it committed first (its result stands)."""
        with self._lock:
            if self._state == "committed":
                return False
            self._state = "abandoned"
            return True


class _Workers:
    """Reusable daemon threads; a new one starts only when none is idle, so a stuck call keeps its
    own thread and never delays others. Handing a call to an idle thread costs a tenth of starting one."""

    def __init__(self, idle_exit_s: float = WORKER_IDLE_EXIT_S):
        self.idle_exit_s = idle_exit_s
        self._queue: queue.SimpleQueue[Callable[[], Callable[[], None]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting on the queue, less the calls already handed to them

    def submit(self, work: Callable[[], Callable[[], None]]) -> None:
        """Run `work` on an idle thread or a new one; what it returns is called once the thread is
        idle again, so whoever that wakes finds the thread free for the next call."""
        with self._lock:
            reuse = self._idle > 0
            if reuse:
                self._idle -= 1
        if reuse:
            self._queue.put(work)
        else:
            threading.Thread(target=self._serve, args=(work,), name="claim-call", daemon=True).start()

    def _serve(self, work: Callable[[], Callable[[], None]]) -> None:
        while True:
            publish = work()
            with self._lock:
                self._idle += 1
            publish()
            while True:
                try:
                    work = self._queue.get(timeout=self.idle_exit_s)
                    break
                except queue.Empty:
                    with self._lock:
                        if self._idle > 0:  # more idle threads than calls on their way: one may go
                            self._idle -= 1
                            return


class ClaimCalls:
    """Runs keyed calls (`("prepare", uid)`, …) on their own threads, each answered by a deadline."""

    def __init__(self, deadline_s: float = DEFAULT_DEADLINE_S, max_running: int = MAX_RUNNING):
        self.deadline_s = deadline_s
        self.max_running = max_running
        self._running: dict[tuple[str, str], Future[Any]] = {}
        self._lock = threading.Lock()
        self._workers = _Workers()

    def running(self) -> int:
        with self._lock:
            return len(self._running)

    def wait_idle(self, timeout: float) -> bool:
        """Wait for every call, abandoned ones included (tests, shutdown); True when none is left."""
        end = time.monotonic() + timeout
        while True:
            with self._lock:
                futures = list(self._running.values())
            if not futures:
                return True
            for future in futures:
                try:
                    future.exception(timeout=max(0.0, end - time.monotonic()))
                except FutureTimeout:
                    return False

    def _start(self, key: tuple[str, str], call: Callable[[CallToken], Any]) -> tuple[Future[Any], CallToken] | Exception:
        with self._lock:
            if key in self._running:
                return CallAbandoned(f"an earlier {key[0]} of this claim outlived its deadline and is still running; "
                                     "retry later")
            if len(self._running) >= self.max_running:
                return CallAbandoned(f"{len(self._running)} claim calls are running; retry later")
            future: Future[Any] = Future()
            self._running[key] = future
        token = CallToken()

        def run() -> Callable[[], None]:
            try:
                publish = functools.partial(future.set_result, call(token))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting gRPC worker
                publish = functools.partial(future.set_exception, exc)
            with self._lock:  # before the answer: a retry right after it must not find the call running
                self._running.pop(key, None)
            return publish

        self._workers.submit(run)
        return future, token

    def run(self, calls: list[tuple[tuple[str, str], Callable[[CallToken], Any]]],
            time_remaining: float | None = None) -> list[Any]:
        """Each call's result, or the exception it raised, or CallAbandoned; in the order given.
        Calls with the same key in one batch run once."""
        budget = self.deadline_s
        if time_remaining is not None:
            budget = min(budget, max(0.0, time_remaining - KUBELET_MARGIN_S))
        end = time.monotonic() + budget
        started: dict[tuple[str, str], tuple[Future[Any], CallToken] | Exception] = {}
        for key, call in calls:
            if key not in started:
                started[key] = self._start(key, call)
        answers: dict[tuple[str, str], Any] = {}
        for key, item in started.items():
            if isinstance(item, Exception):
                answers[key] = item
                continue
            future, token = item
            try:
                answers[key] = future.result(timeout=max(0.0, end - time.monotonic()))
                continue
            except FutureTimeout:
                if token.abandon():
                    answers[key] = CallAbandoned(f"{key[0]} did not finish within {budget:g} s and was abandoned "
                                                 "(it keeps nothing reserved); the kubelet retries")
                    continue
            except BaseException as exc:  # noqa: BLE001
                answers[key] = exc
                continue
            try:  # committed just as the deadline passed: its result stands and is moments away
                answers[key] = future.result()
            except BaseException as exc:  # noqa: BLE001
                answers[key] = exc
        return [answers[key] for key, _ in calls]
