"""Answers for Kubernetes quantities and semantic versions computed here, apart from gpudra's code, so that tests
of gpudra.quantity, gpudra.api.semver and the CEL libraries built on them have an outside expectation.

Quantities follow k8s.io/apimachinery/pkg/api/resource/quantity.go (v0.34): the grammar in the `Quantity` comment
(<signedNumber><suffix>; suffixes n u m "" k M G T P E, Ki Mi Gi Ti Pi Ei, or e/E<signedNumber>) and
ParseQuantity's two adjustments: a magnitude is rounded up (away from zero) to a whole nano (inf.RoundUp at
Nano), and a binary-suffixed magnitude is capped at 2^63-1. Values are exact `Fraction`s; Cmp, Add, Sub and Sign
are then plain arithmetic. Not modelled: AsInt64 (CEL's isInteger/asInteger), which depends on the internal form
(int64Amount or inf.Dec) a quantity happens to take, not on its value; tests take those answers from cel-go.

Versions follow semver.org 2.0.0 §9-11 (precedence), written out rule by rule.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)")
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)")
_NANO = Fraction(1, 10**9)
_INT64_MAX = 2**63 - 1


def quantity_value(text: str) -> Fraction:
    """The exact value Kubernetes parses `text` to (ValueError where ParseQuantity refuses it)."""
    sign, whole, fraction, suffix = _QUANTITY.fullmatch(text).groups()  # type: ignore[union-attr]
    fraction = fraction or ""
    if not whole and not fraction:
        raise ValueError(f"no digits in {text!r}")
    number = Fraction(int(whole or "0")) + (Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0)
    binary = suffix in _BINARY_SI
    if binary:
        number *= 2 ** _BINARY_SI[suffix]
    elif suffix in _DECIMAL_SI:
        number *= Fraction(10) ** _DECIMAL_SI[suffix]
    elif exponent := _EXPONENT.fullmatch(suffix):
        number *= Fraction(10) ** int(exponent.group(1))
    else:
        raise ValueError(f"unknown suffix in {text!r}")
    magnitude = math.ceil(number / _NANO) * _NANO  # rounded up to a whole nano
    if binary:
        magnitude = min(magnitude, Fraction(_INT64_MAX))
    return -magnitude if sign == "-" else magnitude


def quantity_text(value: Fraction) -> str:
    """A quantity literal for a value that is a whole number of nanos (every parsed value, and sums of them)."""
    nanos = value / _NANO
    assert nanos.denominator == 1, value
    return f"{nanos.numerator}n"


def compare(left: Fraction, right: Fraction) -> int:
    return (left > right) - (left < right)


Version = tuple[int, int, int, tuple["int | str", ...], tuple[str, ...]]


def version_text(version: Version) -> str:
    major, minor, patch, prerelease, build = version
    text = f"{major}.{minor}.{patch}"
    if prerelease:
        text += "-" + ".".join(map(str, prerelease))
    if build:
        text += "+" + ".".join(build)
    return text


def precedence(a: Version, b: Version) -> int:
    """semver.org 2.0.0 §11: -1, 0 or 1; build metadata (§10) does not count."""
    for number_a, number_b in zip(a[:3], b[:3]):
        if number_a != number_b:
            return -1 if number_a < number_b else 1
    left, right = a[3], b[3]
    if not left or not right:  # a version without a pre-release ranks above one with it
        return (not left) - (not right)
    for x, y in zip(left, right):
        if x == y:
            continue
        if isinstance(x, int) and isinstance(y, int):
            return -1 if x < y else 1
        if isinstance(x, int) != isinstance(y, int):  # numeric identifiers rank below alphanumeric ones
            return -1 if isinstance(x, int) else 1
        return -1 if str(x) < str(y) else 1  # ASCII order
    return (len(left) > len(right)) - (len(left) < len(right))
