"""Go's `strconv` integer parsing, the one copy: Kubernetes parses label, taint and toleration values with it
(`gpudra/api/goint.py`) and cel-go parses `int("…")`/`uint("…")` with it (`gpudra/cel/constants.py`).

`strconv.ParseInt(s, 10, 64)`: an optional `+` or `-`, then one or more ASCII digits (leading zeros allowed),
within int64; `ParseUint(s, 10, 64)`: digits only, within uint64. No spaces, no `_` (Go allows it only with base
0), no other digits. Python's `int()` accepts all three and any size (and refuses more than 4,300 digits with a
ValueError), so every caller goes through here.
"""

from __future__ import annotations

import re
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1
_SIGNED = re.compile(r"[+-]?[0-9]+", re.ASCII)  # `$` would also match before a final newline: fullmatch
_UNSIGNED = re.compile(r"[0-9]+", re.ASCII)
_MAX_DIGITS = 30  # longer digit runs are out of range whatever they say (64 bits have 20 digits, zeros aside)


def _value(text: str) -> int | None:
    digits = text.lstrip("+-").lstrip("0")
    return None if len(digits) > _MAX_DIGITS else int(text, 10)


def parse_int64(text: Any) -> int | None:
    """`strconv.ParseInt(text, 10, 64)`; None where Go returns an error (syntax or range)."""
    if not isinstance(text, str) or not _SIGNED.fullmatch(text):
        return None
    value = _value(text)
    return value if value is not None and INT64_MIN <= value <= INT64_MAX else None


def parse_uint64(text: Any) -> int | None:
    """`strconv.ParseUint(text, 10, 64)`; None where Go returns an error (syntax or range)."""
    if not isinstance(text, str) or not _UNSIGNED.fullmatch(text):
        return None
    value = _value(text)
    return value if value is not None and value <= UINT64_MAX else None
