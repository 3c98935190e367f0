"""Validate the input in a second process while the command computes its answer.

`schedule` and `explain` on a big cluster spend a fifth of their time validating 2,000 ResourceSlices and a
thousand pods, work that the answer does not depend on when the input is valid (and invalid input has no answer:
the command stops with `gpudra validate`'s messages instead). On a machine with a second core, a forked child
validates while the parent schedules; nothing is printed until the child has answered, so what the user sees,
and the exit code, are exactly those of validating first:

- invalid input: the validation messages (exit 1), whatever the computation did or raised meanwhile; the
  computation is stopped early when it reports progress after the child has found problems;
- valid input: the command's answer, its warnings, its errors.

Where fork is unavailable or would not help (not Linux, one core, a small input), or the child dies, the
documents are validated in this process, as before.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from gpudra.api.load import Document

# Below this many documents validation takes a fraction of a second: not worth a process.
MIN_DOCUMENTS = 500


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    """fork is Linux's (macOS's is unsafe with system frameworks loaded; Windows has none)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and _cores() > 1


def error_lines(documents: list[Document], progress: Any = None, render: bool = True,
                release: str | None = None, features: Any = None) -> list[str]:
    """The errors of `gpudra validate --kubernetes-version RELEASE [--features …]` for the documents (gate
    warnings left out): each as its line and the suggested fragment (`render`), or the line alone."""
    from gpudra.api.problems import errors
    from gpudra.api.validate import validate_documents

    found = errors(validate_documents(documents, release, progress=progress, gates=False, features=features))
    return [problem.render() if render else str(problem) for problem in found]


class _Child:
    """A forked child that validates the documents and writes the problem lines to a pipe as one JSON list."""

    def __init__(self, documents: list[Document], release: str | None = None, features: Any = None):
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            raise
        if pid == 0:  # pragma: no cover - the child's own lines run in the forked process
            status = 1
            try:
                os.close(read_end)
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
                payload = json.dumps(error_lines(documents, release=release, features=features)).encode()
                with os.fdopen(write_end, "wb") as pipe:
                    pipe.write(payload)
                status = 0
            finally:
                os._exit(status)  # no exit handlers, no flushing of buffers the parent also holds
        os.close(write_end)
        self.pid, self.fd = pid, read_end
        self.lines: list[str] | None = None
        self.finished = False

    def ready(self) -> bool:
        """Whether the child has answered (or died): its pipe is readable."""
        if self.finished:
            return True
        readable, _, _ = select.select([self.fd], [], [], 0)
        return bool(readable)

    def result(self) -> list[str] | None:
        """The problem lines; None when the child did not answer (killed, out of memory)."""
        if not self.finished:
            chunks = []
            with os.fdopen(self.fd, "rb") as pipe:
                while chunk := pipe.read(1 << 16):
                    chunks.append(chunk)
            _, status = os.waitpid(self.pid, 0)
            self.finished = True
            try:
                lines = json.loads(b"".join(chunks)) if status == 0 else None
            except ValueError:
                lines = None
            self.lines = lines if isinstance(lines, list) else None
        return self.lines

    def cancel(self) -> None:
        if self.finished:
            return
        self.finished = True
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


class ValidationFailed(Exception):
    """The input is invalid: the problem lines, for the command's refusal."""

    def __init__(self, lines: list[str]):
        super().__init__(lines[0])
        self.lines = lines


class Alongside:
    """`with Alongside(documents) as check:` validates the documents during the block (or before it, see the
    module's docstring), then raises ValidationFailed if they are invalid, in place of whatever the block raised.
    `check()` raises it early, from within the block, once the child has found problems (call it from a
    progress callback: it costs a select())."""

    def __init__(self, documents: list[Document],
                 validate_here: Callable[[list[Document]], list[str]] = error_lines, release: str | None = None,
                 features: Any = None):
        self.documents = documents
        self.release = release  # the Kubernetes release whose rules the child validates by (validate_here's own)
        self.features = features  # and the gates (--features) over its defaults
        self.validate_here = validate_here  # error_lines, or a version of it that shows progress
        self.child: _Child | None = None

    def __enter__(self) -> Callable[[], None]:
        if not self.documents:
            return _nothing
        if len(self.documents) < MIN_DOCUMENTS or not can_fork():
            self._raise_if_any(self.validate_here(self.documents))
            return _nothing
        try:
            self.child = _Child(self.documents, self.release, self.features)
        except OSError:  # no process or pipe to spare: validate here
            self._raise_if_any(self.validate_here(self.documents))
            return _nothing
        return self._check

    def _check(self) -> None:
        if self.child is not None and self.child.ready():
            self._raise_if_any(self._lines())

    def _lines(self) -> list[str]:
        assert self.child is not None
        lines = self.child.result()
        return self.validate_here(self.documents) if lines is None else lines

    @staticmethod
    def _raise_if_any(lines: list[str]) -> None:
        if lines:
            raise ValidationFailed(lines)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        child = self.child
        if child is None:
            return
        try:
            if isinstance(error, ValidationFailed) or (kind is not None and not issubclass(kind, Exception)):
                return  # already the answer, or Ctrl-C / exit: do not wait for the child
            self._raise_if_any(self._lines())  # in place of what the block raised, if anything
        finally:
            child.cancel()


def _nothing() -> None:
    return None
