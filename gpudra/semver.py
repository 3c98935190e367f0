"""Semantic versions as Kubernetes parses and orders them (github.com/blang/semver/v4).

`parse_semver` is the strict parser used for `version` device attributes and CEL `semver(s)`;
`parse_semver(s, normalize=True)` is the tolerant form of CEL `semver(s, true)` (leading "v",
missing minor/patch, leading zeros). Ordering follows semver.org 2.0.0: build metadata is ignored,
a release sorts after its pre-releases, numeric pre-release identifiers sort numerically and before
alphanumeric ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from gpudra.errors import GpudraError

_DIGITS = frozenset("0123456789")
_ALPHANUMERIC = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-")
_UINT64_MAX = 2**64 - 1


class SemverError(GpudraError, ValueError):
    """A string that is not a semantic version; the message matches blang/semver's wording."""


def _abbreviated(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}…({len(text)} characters)"


def _contains_only(text: str, allowed: frozenset[str]) -> bool:
    return all(char in allowed for char in text)


def _has_leading_zeroes(text: str) -> bool:
    return len(text) > 1 and text[0] == "0"


def _parse_uint64(text: str) -> int:
    if not text or not _contains_only(text, _DIGITS):
        raise SemverError(f'strconv.ParseUint: parsing "{text}": invalid syntax')
    # Longer than any uint64 (20 digits) is out of range without converting it: int() of thousands of
    # digits is refused by Python and quadratic anyway.
    if len(text.lstrip("0")) > 20 or int(text) > _UINT64_MAX:
        raise SemverError(f'strconv.ParseUint: parsing "{_abbreviated(text)}": value out of range')
    return int(text)


def _parse_number(text: str, name: str) -> int:
    if not _contains_only(text, _DIGITS):
        raise SemverError(f'Invalid character(s) found in {name} number "{text}"')
    if _has_leading_zeroes(text):
        raise SemverError(f'{name.capitalize()} number must not contain leading zeroes "{text}"')
    return _parse_uint64(text)


def _parse_prerelease(text: str) -> int | str:
    if not text:
        raise SemverError("Prerelease is empty")
    if _contains_only(text, _DIGITS):
        if _has_leading_zeroes(text):
            raise SemverError(f'Numeric PreRelease version must not contain leading zeroes "{text}"')
        return _parse_uint64(text)
    if _contains_only(text, _ALPHANUMERIC):
        return text
    raise SemverError(f'Invalid character(s) found in prerelease "{text}"')


@dataclass(frozen=True, slots=True)
class Semver:
    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()
    build: tuple[str, ...] = field(default=(), compare=False)

    # ----- ordering (build metadata never counts) -------------------------------------------------
    def sort_key(self) -> tuple[int, int, int, tuple[object, ...]]:
        if not self.prerelease:
            pre_key: tuple[object, ...] = (1,)
        else:
            pre_key = (0, tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in self.prerelease))
        return (self.major, self.minor, self.patch, pre_key)

    def compare(self, other: "Semver") -> int:
        mine, theirs = self.sort_key(), other.sort_key()
        return (mine > theirs) - (mine < theirs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.sort_key() == other.sort_key()

    def __hash__(self) -> int:
        return hash(self.sort_key())

    def __lt__(self, other: "Semver") -> bool:
        return self.sort_key() < other.sort_key()

    def __le__(self, other: "Semver") -> bool:
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: "Semver") -> bool:
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: "Semver") -> bool:
        return self.sort_key() >= other.sort_key()

    # ----- text ------------------------------------------------------------------------------------
    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(part) for part in self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"


def parse_semver(text: str, normalize: bool = False) -> Semver:
    """Parse `text` strictly (blang `semver.Parse`), or tolerantly like CEL `semver(text, true)`."""
    if not isinstance(text, str):
        raise SemverError(f"expected a string, not {type(text).__name__}")
    if len(text) <= _CACHED_LENGTH:
        return _parse_cached(text, normalize)  # a slice repeats the same few versions on every device
    return _parse(text, normalize)


_CACHED_LENGTH = 64  # DeviceAttributeMaxValueLength: every valid version attribute


@lru_cache(maxsize=4096)
def _parse_cached(text: str, normalize: bool) -> Semver:
    return _parse(text, normalize)


def _parse(text: str, normalize: bool) -> Semver:
    if normalize:
        text = _normalize(text)
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _parse_number(parts[0], "major")
    minor = _parse_number(parts[1], "minor")
    rest = parts[2]
    build: list[str] = []
    prerelease_texts: list[str] = []
    if "+" in rest:
        rest, build_text = rest.split("+", 1)
        build = build_text.split(".")
    if "-" in rest:
        rest, prerelease_text = rest.split("-", 1)
        prerelease_texts = prerelease_text.split(".")
    patch = _parse_number(rest, "patch")
    prerelease = tuple(_parse_prerelease(part) for part in prerelease_texts)
    for part in build:
        if not part:
            raise SemverError("Build meta data is empty")
        if not _contains_only(part, _ALPHANUMERIC):
            raise SemverError(f'Invalid character(s) found in build meta data "{part}"')
    return Semver(major, minor, patch, prerelease, tuple(build))


def _normalize(text: str) -> str:
    """Kubernetes' normalizeAndParse: drop a leading "v" and leading zeros, pad to major.minor.patch."""
    if text.startswith("v"):
        text = text[1:]
    parts = text.split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            if not stripped or stripped[0] not in _DIGITS:
                stripped = "0" + stripped
            parts[index] = stripped
    if len(parts) < 3:
        if any(char in parts[-1] for char in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts.extend(["0"] * (3 - len(parts)))
    return ".".join(parts)


def is_semver(text: str, normalize: bool = False) -> bool:
    try:
        parse_semver(text, normalize)
    except SemverError:
        return False
    return True
