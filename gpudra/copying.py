"""The one deep copy of Kubernetes objects kept as plain data (what JSON and YAML parse to).

Parsed documents are trees of dicts, lists and scalars, so the copy walks them directly, several times faster than
`copy.deepcopy` (no memo to keep); anything else inside (a dataclass, a tuple) goes to `copy.deepcopy`.
"""

from __future__ import annotations

import copy
from typing import TypeVar

_IMMUTABLE = (str, int, float, bool, type(None))
T = TypeVar("T")


def copy_object(value: T) -> T:
    """A deep copy of `value`: dicts and lists rebuilt (a dict subclass becomes a dict), scalars shared."""
    if isinstance(value, dict):
        # a dict (list) rebuilt is still the T it came as, which mypy cannot tie to T
        return {key: copy_object(item) for key, item in value.items()}  # type: ignore[return-value]
    if isinstance(value, list):
        return [copy_object(item) for item in value]  # type: ignore[return-value]  # as above
    if isinstance(value, _IMMUTABLE):
        return value
    return copy.deepcopy(value)
