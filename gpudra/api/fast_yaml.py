"""A fast reading of plain manifest YAML (yaml-rs, in Rust) that means exactly what PyYAML would read, or declines.

PyYAML's C loader needs about 8 s for a 13 MB, 6,000-document cluster dump; most of that is its Python
constructor. yaml-rs reads the same text in under a second, but it implements YAML 1.2 where PyYAML (and this
project's meaning of a manifest) is YAML 1.1: `yes`, `on` and `0777` differ, `1e3` and `.Nan` are numbers,
`1_000` and `+0X1F` are integers, dates are dates, `<<` is no merge key, flow collections take `a:b`. So the
fast path is taken only where a document cannot tell the two apart; any doubt returns None and the caller reads
the text with PyYAML as before (which also gives every error message with its line and column).

Before parsing, the text is refused (None) where the two grammars or resolvers can differ and a cheap scan sees
it: a character outside printable, LF-only text (YAML 1.1 also breaks lines at NEL, LS and PS); a tab; a space
that is white space to Python but not to YAML (U+00A0, U+3000: the words are split at white space); a backslash
(escapes); a directive, a `...` end marker or content after `---`; Helm's `{{`; and, where a node starts, a tag,
anchor, alias, complex key (`? `), empty key (`: x`: yaml-rs makes a None key), non-empty flow collection
(`[a:b]` differ) or block scalar (a whitespace-only line differs). Then every white-space-separated word that either could read as other than a string, as a plain
scalar, is read by both: one that yaml-rs reads as a number, bool or null differently from PyYAML's resolver
(without timestamps, as the loader sets it up) refuses the text (`0777`, `1e3`, `_1`, `.Nan`); one that PyYAML
alone reads as a non-string (`yes`, `1:30`, `<<`) refuses it only if the documents hold that string and the text
has it where a plain scalar could start (not right after a quote). After parsing, the documents must hold only
built-in types (marshal refuses dates and other objects). Each document is parsed alone, split at its `---`, so
its position is PyYAML's count.
"""

from __future__ import annotations

import marshal
import re
from itertools import chain
from typing import Any

import yaml

from gpudra.api.yaml_loader import ManifestLoader

yaml_rs: Any
try:  # optional: a platform without a wheel reads YAML with PyYAML alone
    import yaml_rs
except ImportError:  # pragma: no cover - depends on the platform
    yaml_rs = None

# How often the loader used this module's reading of a YAML text ("fast") and how often PyYAML's ("pyyaml").
counts = {"fast": 0, "pyyaml": 0}

_UNSAFE_CHARACTER = re.compile("[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")
# at a line's start: a directive, a document end marker, content after `---`
_LINE_START_DIFFERS = re.compile(r"\n(?:%|\.\.\.(?:[ \t]|\n|\Z)|---[ \t]*[^\s])")
_AFTER_INDICATOR = re.compile(r"[-?:][ \t]+\Z")
_DOCUMENT_MARKER = re.compile(r"^---[ \t]*(?:\n|\Z)", re.MULTILINE)
# YAML's white space is the space and the tab alone (`\s` would also skip U+00A0 or U+3000, which start a plain scalar)
_CONTENT_LINE = re.compile(r"^[ \t]*[^ \t\n#]", re.MULTILINE)
# White space to Python's str.split and `\s` but not to YAML (U+00A0, U+3000, ...; tabs and breaks are refused apart)
_UNICODE_SPACE = re.compile(r"[^\S \t\n]")
# Characters of the plain scalars that yaml-rs may read as a number, bool or null: `[-+.0-9A-Za-z_~]`, and the
# first of them one of `[-+._0-9~]` (the words true, false, null read alike in both).
_NUMBER_START = frozenset("-+._0123456789~")
_NUMBER_LIKE = re.compile(r"[-+._0-9~][-+.0-9A-Za-z_~]*")

_LOADER = ManifestLoader("")  # resolves and constructs single plain scalars, as the manifest loader would


def _pyyaml_plain(token: str) -> Any:
    """The value PyYAML's manifest loader gives `token` as a plain scalar (raises what its constructor raises)."""
    loader = _LOADER
    tag = loader.resolve(yaml.ScalarNode, token, (True, False))
    return loader.construct_object(yaml.ScalarNode(tag, token), deep=True)


def _non_string_pattern() -> re.Pattern[str]:
    """One pattern for every implicit resolver of the loader (bool, int, float, null, merge, value) but str."""
    loader = _LOADER
    patterns = {regexp.pattern for resolvers in loader.yaml_implicit_resolvers.values()
                for tag, regexp in resolvers if tag != "tag:yaml.org,2002:str"}
    return re.compile("|".join(f"(?:{pattern})" for pattern in sorted(patterns)), re.X)


_non_string: re.Pattern[str] | None = None
_NO_VALUE = object()
_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]{0,17})")  # a plain int both read alike (no `_`, no leading 0)


def _same(left: Any, right: Any) -> bool:
    return type(left) is type(right) and (left == right or repr(left) == repr(right))  # NaN


def _plain_words(words: set[str]) -> set[str] | None:
    """Compare how both read, as plain scalars, the words that either could read as other than a string.

    Without flow collections, tabs and CR, a plain scalar starts after a space or a line break; one that PyYAML
    resolves to other than a string (no resolver takes a space) or that yaml-rs could read as a number (a run of
    `_NUMBER_LIKE`) ends at white space, or at `:` and white space (a key): it is a white-space-separated word, or
    one less its final colon. None when some word reads differently in a way that matters, else the words that
    PyYAML would read as non-strings where yaml-rs reads strings (`yes`, `1:30`): harmless unless some string of
    the documents is one of them and could have been plain (`_plain_in_text`)."""
    global _non_string
    if _non_string is None:
        _non_string = _non_string_pattern()
    tokens = sorted({token for word in words for token in ((word, word[:-1]) if word.endswith(":") else (word,))
                     if token not in ("", "-")  # `-`: an indicator
                     and (token[0] in _NUMBER_START and _NUMBER_LIKE.fullmatch(token) or _non_string.match(token))})
    if not tokens:
        return set()
    try:
        fast = yaml_rs.loads("".join(f"- {token}\n" for token in tokens), parse_datetime=False)
    except Exception:  # noqa: BLE001 - yaml-rs refuses them: the caller reads with PyYAML
        return None
    if not isinstance(fast, list) or len(fast) != len(tokens):
        return None
    suspects: set[str] = set()
    try:
        for token, value in zip(tokens, fast):
            if type(value) is int and _DECIMAL.fullmatch(token):
                continue  # PyYAML's int(token), the same
            try:
                slow = _pyyaml_plain(token)
            except Exception:  # noqa: BLE001 - `<<`, `=`, `0b_`: no value in PyYAML
                slow = _NO_VALUE
            if _same(slow, value):
                continue
            if value != token:
                return None
            suspects.add(token)
    finally:
        _LOADER.constructed_objects.clear()  # the loader is kept; what it made is not
    return suspects


def _chunks(text: str) -> list[tuple[int, str]]:
    """The documents of `text` with their 1-based positions, as PyYAML counts them: what precedes the first `---`
    is a document only when it holds more than comments; every `---` starts one, even an empty one."""
    if not text.startswith("---") and text.count("\n---") == text.count("\n---\n"):
        parts = text.split("\n---\n")  # every marker a bare `---` line: 10x faster than the pattern
    else:
        parts = _DOCUMENT_MARKER.split(text)
    first = parts[0] if _CONTENT_LINE.search(parts[0]) else None
    chunks = [part for part in ([first] if first is not None else []) + parts[1:]]
    return list(enumerate(chunks, start=1))


_SCALARS = (str, int, bool, float, type(None))


def _types_agree(value: Any, suspects: set[str], found: set[str]) -> bool:
    """Only dicts, lists and scalars of the types PyYAML's safe loader makes here (keys included); strings
    (and keys) that are `suspects` go to `found`."""
    stack = [value]
    mappings = []
    while stack:
        item = stack.pop()
        if type(item) is dict:
            mappings.append(item)
            children = item.values()
        else:
            children = item
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append(child)
            elif kind not in _SCALARS:
                return False
            elif suspects and kind is str and child in suspects:
                found.add(child)
    keys = set(chain.from_iterable(mappings))
    if suspects:
        found.update(suspects & keys)
    return set(map(type, keys)).issubset(_SCALARS)


def _only_plain_types(values: list[tuple[int, Any]]) -> bool:
    """Whether the values hold only built-in types, checked in C (marshal refuses dates and any other object).
    Of the built-ins it takes beyond PyYAML's dict, list, str, int, float, bool and None, yaml-rs makes bytes,
    sets and tuples only for tags and complex keys, which `documents` refused before parsing."""
    try:
        marshal.dumps(values)
    except ValueError:
        return False
    return True


def _starts_node(text: str, word: str) -> bool:
    """Whether `word` occurs in `text` where a node could start: after the indentation, or after an indicator
    (`- `, `: `, `? `); a CEL `!=` or `&&` in the middle of a plain scalar does not."""
    for match in re.finditer(re.escape(word), text):
        before = text[text.rfind("\n", 0, match.start()) + 1:match.start()]
        if not before.strip() or _AFTER_INDICATOR.search(before):
            return True
    return False


def _plain_in_text(text: str, string: str) -> bool:
    """Whether `string` occurs in `text` where a plain scalar could start (not right after a quote)."""
    return any(match.start() == 0 or text[match.start() - 1] not in "'\"" for match in re.finditer(re.escape(string), text))


_PRINTABLE_ASCII = bytes(range(0x20, 0x7F)) + b"\n"


def _printable_ascii(text: str) -> bool:
    """Only printable ASCII and line feeds (most manifests): bytes.translate answers in a few milliseconds where
    the str checks below take a tenth of a second on a 13 MB dump."""
    return text.isascii() and not text.encode("ascii").translate(None, _PRINTABLE_ASCII)


def documents(text: str) -> list[tuple[int, Any]] | None:
    """`(position, value)` for every document of `text` (None values included), read by yaml-rs; or None when
    the text might mean something else to PyYAML, or yaml-rs is missing or refuses it.

    The caller must have cleared the text of aliases and of nesting deeper than MAX_DEPTH (`_plain_yaml`)."""
    if yaml_rs is None or "\\" in text or "{{" in text or "\t" in text or "\r" in text:
        return None  # escapes, a Helm template (PyYAML's error names it), tabs, CR line breaks
    if not _printable_ascii(text) and not text.replace("\n", "").isprintable() and _UNSAFE_CHARACTER.search(text):
        return None  # control characters, NEL, LS, PS, BOM
    if not text.isascii() and _UNICODE_SPACE.search(text):
        return None  # the words below are split at white space as YAML sees it: U+00A0 is none to YAML
    if _LINE_START_DIFFERS.search("\n" + text):
        return None
    words = set(text.split())
    if any(_starts_node(text, word) for word in words if word == ":" or word.startswith(
            ("!", "&", "*", "?", "[", "{", "|", ">")) and word not in ("[]", "{}") and (word[0] != "?" or word == "?")):
        return None  # a tag, anchor, alias, complex key (`? `), empty key (`: x`), non-empty flow collection or block scalar
    suspects = _plain_words(words)
    if suspects is None:
        return None
    values: list[tuple[int, Any]] = []
    found: set[str] = set()
    try:
        for position, chunk in _chunks(text):
            value = yaml_rs.loads(chunk, parse_datetime=False)
            values.append((position, value))
    except Exception:  # noqa: BLE001 - yaml-rs refuses it (duplicate key, bad indentation, ...): PyYAML says where and why
        return None
    if suspects:
        if not all(type(value) in _SCALARS or _types_agree(value, suspects, found) for _, value in values):
            return None
    elif not _only_plain_types(values):
        return None
    if any(_plain_in_text(text, string) for string in found):
        return None
    return values
