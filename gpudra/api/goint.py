"""Integers in label and taint values, parsed as kube-scheduler parses them (Go), in one place for the allocator,
the scheduler and validation.

- `parse_int64` (gpudra/gostrconv.py, shared with CEL): Go's `strconv.ParseInt(s, 10, 64)`: an optional `+` or `-`, then one or more ASCII digits
  (leading zeros allowed), within int64. No spaces, no `_` (Go allows it only with base 0), no other digits.
  Python's `int()` accepts all three, and any size: `" 5"`, `"1_0"`, `"٣"` and `"1" + "0" * 30` matched Gt/Lt
  requirements that kube-scheduler never matches (issue 20).
- `parse_requirement_int`: a Gt/Lt node-selector requirement's value, as k8s.io/apimachinery labels.NewRequirement
  takes it: ParseInt, and a valid label value too (so `+5` and `-5` make the requirement invalid, and its term
  matches no node; component-helpers nodeaffinity). The node's label itself is only ParseInt'ed (Requirement.Matches).
- `parse_canonical_int64`: a Gt/Lt toleration's and taint's value (k8s.io/api core/v1 Toleration.ToleratesTaint,
  compareNumericValues): content.IsDecimalInteger (`0`, or an optional `-` and no leading zero; no `+`, no `-0`),
  then ParseInt.
"""

from __future__ import annotations

import re
from typing import Any

from gpudra.api.schema.names import label_value
from gpudra.gostrconv import INT64_MAX, INT64_MIN, parse_int64

__all__ = ["INT64_MAX", "INT64_MIN", "parse_canonical_int64", "parse_int64", "parse_requirement_int"]

_CANONICAL_DECIMAL = re.compile(r"0|-?[1-9][0-9]*", re.ASCII)


def parse_requirement_int(text: Any) -> int | None:
    """A Gt/Lt node-selector requirement's value: None where labels.NewRequirement refuses it."""
    value = parse_int64(text)
    return None if value is None or label_value(text) else value


def parse_canonical_int64(text: Any) -> int | None:
    """A Gt/Lt toleration's or taint's value: None where compareNumericValues refuses it."""
    if not isinstance(text, str) or not _CANONICAL_DECIMAL.fullmatch(text):
        return None
    return parse_int64(text)
