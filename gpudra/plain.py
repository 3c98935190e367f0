"""Tolerant reading of plain objects (what YAML and JSON parse to), whatever shape the input has.

Checks and the allocator must survive malformed objects: a field of the wrong JSON type reads as absent (an
empty dict, list or string), which is how they then treat it.
"""

from __future__ import annotations

from typing import Any


def as_dict(value: Any) -> dict[str, Any]:
    """The value if it is a dict, else an empty dict."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """The value if it is a list, else an empty list."""
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str:
    """The value if it is a string, else ""."""
    return value if isinstance(value, str) else ""
