"""Reading JSON manifests: one value or a stream of them (as kubectl reads), duplicate keys kept for the document
check to report where they are, nesting bounded, integers of thousands of digits stood in for, and unpaired UTF-16
surrogates turned into U+FFFD as Go's decoder (the API server's) turns them."""

from __future__ import annotations

import json
import re
from typing import Any

from gpudra.api.limits import MAX_DEPTH, MAX_INT_DIGITS, LoadError, OversizedInt, too_deep


def _json_int(text: str) -> int:
    return OversizedInt(text) if len(text) > MAX_INT_DIGITS else int(text)


class _DuplicateKeys(dict[str, Any]):
    """A JSON object that repeated a key: kept (last value wins, as json.loads does) and reported by the
    document check, which knows where it is."""

    duplicate: str = ""


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    marked = _DuplicateKeys(obj)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.duplicate = key  # the first key repeated
            break
        seen.add(key)
    return marked


def _json_decoder(big_ints: bool) -> json.JSONDecoder:
    return json.JSONDecoder(object_pairs_hook=_json_object, parse_int=_json_int if big_ints else None)


def json_loads(text: str, source: str) -> Any:
    try:
        try:
            return _json_decoder(False).decode(text)
        except ValueError as exc:
            if isinstance(exc, json.JSONDecodeError) or "integer string conversion" not in str(exc):
                raise
            return _json_decoder(True).decode(text)  # rare: a literal of thousands of digits
    except RecursionError:
        raise LoadError(source, f"invalid JSON: {too_deep(1, 'more than ' + str(MAX_DEPTH))}") from None


NOT_JSON = object()


def json_stream(text: str, source: str) -> list[Any]:
    decoder = _json_decoder(len(text) > MAX_INT_DIGITS)
    values: list[Any] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return values
        try:
            value, position = decoder.raw_decode(text, position)
        except RecursionError:
            raise LoadError(source, f"invalid JSON: {too_deep(len(values) + 1, 'more than ' + str(MAX_DEPTH))}") from None
        values.append(value)


SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_surrogates(text: str) -> str:
    # json.loads keeps an unpaired \ud800 escape as a lone surrogate, which no UTF-8 consumer (the CEL
    # engine, a YAML dump) accepts; Go's decoder turns it into U+FFFD, and so does this.
    return _SURROGATE.sub("\ufffd", text)


# Where a value sits, as a linked list from the innermost key back to the document: (outer chain, key or index).
KeyChain = tuple["KeyChain | None", "str | int"]


def _where(chain: KeyChain | None) -> str:
    parts: list[str] = []
    while chain is not None:
        chain, key = chain
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return "".join(reversed(parts)).lstrip(".") or "(top level)"


_CONTAINERS = (dict, list, _DuplicateKeys)  # what the JSON decoder builds (`type(x) in`: cheaper than isinstance)


def _plainly_valid(value: Any) -> bool:
    """True when the document nests at most MAX_DEPTH levels and repeats no key: the common case, checked level by
    level without the paths that _check_json_document builds to say where a problem is."""
    level, depth = [value], 1
    while level:
        if depth > MAX_DEPTH:
            return False
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is dict:
                below.extend([child for child in item.values() if type(child) in _CONTAINERS])
            elif kind is list:
                below.extend([child for child in item if type(child) in _CONTAINERS])
            else:
                return False  # _DuplicateKeys
        level, depth = below, depth + 1
    return True


def check_json_document(value: Any, source: str, position: int, surrogates: bool) -> None:
    """Depth and duplicate keys of one parsed JSON document, without recursion; unpaired surrogates fixed."""
    if not surrogates and _plainly_valid(value):
        return
    stack: list[tuple[Any, int, KeyChain | None]] = [(value, 1, None)]
    while stack:
        item, depth, chain = stack.pop()
        if depth > MAX_DEPTH:
            raise LoadError(source, f"{too_deep(position, 'more than ' + str(MAX_DEPTH))}, at {_where(chain)[:80]}")
        if isinstance(item, dict):
            if isinstance(item, _DuplicateKeys):
                raise LoadError(source, f"document {position}: {_where(chain)}: mapping key {item.duplicate!r} "
                                "already defined (JSON objects, like YAML mappings, may not repeat a key)")
            if surrogates:
                _fix_surrogates_in_mapping(item)
            for key, child in item.items():
                if isinstance(child, (dict, list)):
                    stack.append((child, depth + 1, (chain, key)))
        elif isinstance(item, list):
            for index, child in enumerate(item):
                if isinstance(child, (dict, list)):
                    stack.append((child, depth + 1, (chain, index)))
                elif surrogates and isinstance(child, str):
                    item[index] = _without_surrogates(child)


def _fix_surrogates_in_mapping(item: dict[str, Any]) -> None:
    entries = [(_without_surrogates(key), _without_surrogates(child) if isinstance(child, str) else child)
               for key, child in item.items()]
    item.clear()
    item.update(entries)


def load_json_document(text: str, source: str) -> Any:
    """One JSON value of a file that is not a manifest list (a CDI spec, a claim store file), with the loader's
    checks (depth, duplicate keys, surrogates); json.JSONDecodeError or LoadError."""
    value = json_loads(text, source)
    check_json_document(value, source, 1, SURROGATE_ESCAPE.search(text) is not None)
    return value
