"""Errors of the DRA CEL environment, worded like Kubernetes (cel-go) reports them."""

from __future__ import annotations

from gpudra.errors import GpudraError


class CELCompileError(GpudraError, ValueError):
    """An expression that cannot be used as a device selector.

    `message` is the first problem in cel-go's words ("undeclared reference to 'x' (in container '')");
    `column` and `line` are 1-based positions in the original expression (None when the problem is
    not tied to a position); `str(error)` is the full report with a caret under the position,
    formatted like cel-go's `ERROR: <input>:1:5: … | expr | ....^`.
    """

    def __init__(self, expression: str, message: str, column: int | None = None, line: int | None = None,
                 report: str | None = None):
        self.expression = expression
        self.message = message  # type: ignore[misc]  # ours, not click's (Final since click 8.5): GpudraError
        self.column = column
        self.line = line if line is not None or column is None else 1
        self.report = report or message
        super().__init__(self.report)

    def __str__(self) -> str:
        return self.report


class CELRuntimeError(GpudraError, RuntimeError):
    """Evaluating a selector on one device failed, e.g. "no such key: memory".

    Kubernetes' allocator treats it as fatal for the whole allocation attempt and reports
    `selector #i: CEL runtime error: <message>`.
    """

    def __init__(self, message: str, expression: str | None = None):
        self.message = message  # type: ignore[misc]  # ours, not click's (Final since click 8.5): GpudraError
        self.expression = expression
        super().__init__(message)

    def __str__(self) -> str:
        return self.message
