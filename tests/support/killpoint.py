"""Kill points for the crash tests, injected from the test side (issue 20, finding 9: the product code read an
environment variable at import and could SIGKILL any gpudra process, the root driver included).

`KillPoint(label, step, n)` SIGKILLs the process just before the nth time it reaches `step` of a `label` write
(`*`: any label), through gpudra.atomicfile's step hook. A test process installs it with `install`; a child
process is started as `python tests/support/kill_at.py LABEL:STEP:N ARGS...` (a `gpudra` command line, the hook
installed before the CLI's main runs) or gets the spec in KILL_ENV through the crash test's zygote."""

from __future__ import annotations

import os
import signal
import threading

from gpudra import atomicfile

KILL_ENV = "GPUDRA_CRASH_KILL_AT"  # read by the test-side zygote and wrapper only, never by gpudra


class KillPoint:
    """SIGKILL this process just before the `count`th time `step` of a `label` write is reached."""

    def __init__(self, label: str, step: str, count: int):
        if step not in atomicfile.STEPS or count < 1:
            raise ValueError(f"bad kill point {label}:{step}:{count} (steps: {', '.join(atomicfile.STEPS)}; "
                             "count >= 1)")
        self.label, self.step, self.count = label, step, count
        self._seen = 0
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, text: str) -> KillPoint:
        label, step, count = text.rsplit(":", 2)
        return cls(label, step, int(count))

    def __call__(self, label: str, step: str, path: str) -> None:
        if step != self.step or self.label not in ("*", label):
            return
        with self._lock:
            self._seen += 1
            if self._seen == self.count:
                os.kill(os.getpid(), signal.SIGKILL)


def install(spec: str | None) -> None:
    """Kill at `spec` (`LABEL:STEP:N`) from now on in this process; None removes the kill point."""
    atomicfile.set_step_hook(KillPoint.parse(spec) if spec else None)
