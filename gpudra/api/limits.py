"""What the manifest loader refuses or stands in for, and its error: the limits that bound hostile input (size,
nesting, alias expansion, integer length) in one place for the YAML and JSON readers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudra.errors import GpudraError

if TYPE_CHECKING:
    from gpudra.api.load import Document


class LoadError(GpudraError, ValueError):
    """A file that cannot be read or parsed; `str()` is a clean message naming the file and line."""

    def __init__(self, source: str, message: str, line: int | None = None, column: int | None = None):
        self.source = source
        self.message = message  # type: ignore[misc]  # ours, not click's (Final since click 8.5): GpudraError
        self.line = line
        self.column = column
        where = source if line is None else f"{source}:{line}" + (f":{column}" if column else "")
        super().__init__(f"{where}: {message}")


class LoadErrors(LoadError):
    """Every file of a run that could not be read (`errors`), raised after the others were read
    (`documents`), so that one bad file in a directory does not hide the problems of the rest."""

    def __init__(self, errors: list[LoadError], documents: list[Document]):
        first = errors[0]
        super().__init__(first.source, first.message, first.line, first.column)
        self.errors = errors
        self.documents = documents
        self.args = ("\n".join(str(error) for error in errors),)

    def __str__(self) -> str:
        return str(self.args[0])  # set to one string in __init__


MAX_INPUT_BYTES = 256 * 2**20  # one file or stdin; a 50 MB List validates in seconds (docs/performance.md)
MAX_DEPTH = 100  # nesting levels of one document; Kubernetes objects use about 15
MAX_ALIAS_EXPANSION = 10_000_000  # values plus characters that YAML aliases may add to a document


def too_large(size: int) -> str:
    return f"larger than {MAX_INPUT_BYTES // 2**20} MiB ({size} bytes); split it into several files"


def too_deep(position: int, depth: int | str) -> str:
    return (f"document {position} nests {depth} levels deep (limit {MAX_DEPTH}); "
            "Kubernetes objects nest about 15 levels")


MAX_INT_DIGITS = 4000  # below Python's int/str conversion limit (4300 digits), far above int64's 19


class OversizedInt(int):
    """An integer literal too long to convert: an out-of-range stand-in that prints as its (abbreviated) text.

    Every integer field of the API is an int64 (or smaller), so validation reports it as out of range
    by field; nothing converts thousands of digits (Python refuses, and the conversion is quadratic).
    """

    text: str

    def __new__(cls, text: str) -> "OversizedInt":
        value = super().__new__(cls, -(10**MAX_INT_DIGITS) if text.lstrip().startswith("-") else 10**MAX_INT_DIGITS)
        value.text = f"{text[:20]}…({len(text)} digits)"
        return value

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return self.text
