"""One error vocabulary for every `gpudra` command, and the one place that maps it to exit codes.

Exit codes (docs/cli.md's command table lists them per command):

- 0 (`OK`): success; the manifests are valid, the claims fit, the pods were scheduled.
- 1 (`NEGATIVE`): the command ran and the answer is "no": invalid manifests, unallocatable claims,
  unschedulable pods, "does not fit".
- 2 (`USAGE`): the question could not be asked: a bad option, input that cannot be read or parsed,
  a cluster that cannot be reached, or an internal error (no answer was given, so not 1).

Every message a user can hit is printed as `error: WHERE: message` on stderr, WHERE being
`FILE:doc N (Kind/name): field` when it is known; never a traceback (GPUDRA_DEBUG=1 shows it for bugs).
Control characters in a message (a name with ESC or BEL in it) are printed escaped, never raw.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import click

from gpudra.errors import GpudraError, InputError, location, paint, printable, use_colour

__all__ = ["OK", "NEGATIVE", "USAGE", "BROKEN_PIPE", "GpudraError", "InputError", "UsageError", "NegativeAnswer",
           "InvalidInput", "location", "use_colour", "paint", "fail", "warn", "show_error",
           "exit_quietly_on_broken_pipe", "report_internal_error"]

OK = 0
NEGATIVE = 1
USAGE = 2
# A process that died of SIGPIPE reports 128 + 13 in shells; `gpudra … | head -1` ends with it, quietly.
BROKEN_PIPE = 128 + 13


# GpudraError (gpudra.errors) is the base of every error a user can hit, from any package: the command runner
# prints it (`show`) and exits with its code. InputError (exit 2) is gpudra.errors' too.


class UsageError(GpudraError):
    """A bad option or a combination of options that makes no sense (exit 2)."""


class NegativeAnswer(GpudraError):
    """The command ran and the answer is no: invalid manifests, unallocatable, unschedulable (exit 1)."""

    exit_code = NEGATIVE


class InvalidInput(NegativeAnswer):
    """Manifests that fail validation; `details` are the problems, one per line (exit 1)."""


def fail(message: str, code: int = USAGE, **where: Any) -> NoReturn:
    """Raise the error class that carries `code` (for commands that decide the code at run time)."""
    raise (NegativeAnswer if code == NEGATIVE else UsageError)(message, **where)


def warn(message: str) -> None:
    """`warning: message` on stderr, the prefix coloured on a terminal."""
    click.echo(f"{paint('warning:', sys.stderr, fg='yellow', bold=True)} {printable(message, keep=chr(10))}",
               err=True)


def show_error(message: str) -> None:
    """`error: message` on stderr for the rare caller that prints and goes on (most raise instead)."""
    click.echo(f"{paint('error:', sys.stderr, fg='red', bold=True)} {printable(message, keep=chr(10))}", err=True)


def exit_quietly_on_broken_pipe() -> NoReturn:
    """The reader went away (`gpudra … | head -1`): stop without a word, as Unix tools do.

    stdout is pointed at /dev/null first so that the interpreter's final flush cannot fail again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (an embedding, a test runner)
        pass
    sys.exit(BROKEN_PIPE)


def report_internal_error(exc: BaseException) -> NoReturn:
    """A bug, not a user error: one line that says so (the traceback with GPUDRA_DEBUG=1), exit 2."""
    if os.environ.get("GPUDRA_DEBUG"):
        raise exc
    show_error(f"internal error ({type(exc).__name__}: {exc}); please report it "
               "(GPUDRA_DEBUG=1 shows the traceback)")
    sys.exit(USAGE)
