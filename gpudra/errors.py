"""The base of every error a user can hit, and the one spelling of where it happened.

An error a user can hit is a message, never a traceback (a bug is something else: the CLI reports it as an
internal error). `GpudraError` is the base of them all, whichever package raises it; the CLI prints any that
reaches it as `error: WHERE: message` and exits with its `exit_code` (gpudra.cli.errors maps the codes). It is a
click.ClickException, so a command run on its own (click's runner, a test) reports it the same way.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

import click

USAGE_EXIT_CODE = 2  # the question could not be asked (gpudra.cli.errors.USAGE)


def printable(text: str, keep: str = "") -> str:
    """`text` with every character a terminal would act on (ESC, BEL, a carriage return, bidi overrides, …)
    written as Python escapes (`\\x1b`), so that input can never drive the terminal it is reported on; the
    characters in `keep` (say, newline in a multi-line message) are left as they are."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


def use_colour(stream: IO[str] | None = None) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org) or TERM is dumb."""
    stream = stream if stream is not None else sys.stderr
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed stream
        return False


def paint(text: str, stream: IO[str] | None = None, **style: Any) -> str:
    """`text` styled (click.style keywords) when `stream` is a colour terminal, else unchanged."""
    return click.style(text, **style) if use_colour(stream) else text


def location(source: str | None = None, doc: int | None = None, kind: str | None = None,
             name: str | None = None, field: str | None = None) -> str:
    """`FILE:doc N (Kind/name): field`, leaving out the parts that are unknown."""
    where = source or ""
    if doc is not None:
        where = f"{where}:doc {doc}" if where else f"doc {doc}"
    if kind or name:
        what = f"{kind or '?'}/{name}" if name else str(kind)
        where = f"{where} ({what})" if where else what
    if field:
        where = f"{where}: {field}" if where else field
    return where


class GpudraError(click.ClickException):
    """An error a user can hit: `str()` is a message for them; `where` (see `location`) and `details` (lines
    printed under it) are optional. Exit code 2 unless a subclass says otherwise."""

    exit_code = USAGE_EXIT_CODE

    def __init__(self, *args: object, source: str | None = None, doc: int | None = None, kind: str | None = None,
                 name: str | None = None, field: str | None = None, details: list[str] | None = None):
        # Exception's, not click's: any arguments, as the Exception each subclass used to be, and no `message`
        # attribute set over the one some subclasses keep (LoadError, CELCompileError); show/__str__ are ours.
        Exception.__init__(self, *args)
        self.where = location(source, doc, kind, name, field)
        self.details = list(details or [])

    def __str__(self) -> str:
        return Exception.__str__(self)  # click's would print `message` only

    def format_message(self) -> str:
        """`WHERE: message`, then the details, one per line."""
        message = str(self)
        head = f"{self.where}: {message}" if self.where else message
        return "\n".join([head, *self.details])

    def show(self, file: IO[Any] | None = None) -> None:
        """`error: WHERE: message` (and the details) on stderr, the prefix coloured on a terminal."""
        stream = file if file is not None else sys.stderr
        click.echo(f"{paint('error:', stream, fg='red', bold=True)} {printable(self.format_message(), keep=chr(10))}",
                   file=stream)


class InputError(GpudraError, ValueError):
    """Input that cannot be read: a missing or unparseable file, an unreachable cluster (exit 2)."""
