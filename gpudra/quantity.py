"""Kubernetes `resource.Quantity` with the API machinery's exact semantics.

A quantity is stored as an exact integer number of nano-units: the API server
rounds every parsed value up (away from zero) to nano precision, so nothing
finer can ever be observed, and caps binary-suffixed amounts at 2^63-1.
The canonical string form follows `Quantity.String()`: the suffix family of the
original (binary, decimal or exponent) is kept where it can represent the value
exactly, mantissas are integers, and decimal exponents are multiples of three.

Beside the value, a quantity carries the internal form Kubernetes gives it
(k8s.io/apimachinery v0.34.4 pkg/api/resource quantity.go, amount.go): an
`int64Amount` (an int64 times a power of ten) where ParseQuantity's fast path
or an overflow-free Add/Sub produced one, otherwise an exact `inf.Dec`. Only
AsInt64, and so CEL's isInteger/asInteger, read it: "1000m" is {1000, -3} and no
integer to Kubernetes, "1Pi" or "9223372036854775807" are inf.Dec and no integer either.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from dataclasses import dataclass, field
from typing import Literal

from gpudra.errors import GpudraError

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]

NANO = 10**9
MAX_VALUE = 2**63 - 1  # resource.Quantity caps at the largest int64
MIN_INT64 = -(2**63)

_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_BY_EXPONENT = {0: "", **{v: k for k, v in _BINARY_SUFFIXES.items()}}
_DECIMAL_BY_EXPONENT = {v: k for k, v in _DECIMAL_SUFFIXES.items()}

_SYNTAX = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")


class QuantityError(GpudraError, ValueError):
    """A string that is not a valid Kubernetes quantity."""


def _split_suffix(suffix: str, text: str) -> tuple[int, int, Format]:
    """Return (base, exponent, format) for a suffix, as the API machinery interprets it."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], "DecimalSI"
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], "BinarySI"
    match = _EXPONENT.match(suffix)
    if match:
        digits = match.group(1).lstrip("+-").lstrip("0")
        # suffix.go: strconv.ParseInt(exponent, 10, 64), then int32(parsed): a wider exponent is
        # ErrSuffix, a wide int64 one wraps around as Go's conversion does.
        if len(digits) > 19 or int(match.group(1)) not in range(-(2**63), 2**63):
            raise QuantityError(f"quantity {_abbreviated(text)}: unable to parse quantity's suffix "
                                "(the exponent does not fit in an int64)")
        return 10, (int(match.group(1)) + 2**31) % 2**32 - 2**31, "DecimalExponent"
    raise QuantityError(
        f"quantity {text!r}: unknown suffix {suffix!r}; use one of n, u, m, k, M, G, T, P, E (decimal), "
        "Ki, Mi, Gi, Ti, Pi, Ei (binary) or an exponent such as e3"
    )


def _ceil_div(numerator: int, denominator: int) -> int:
    return -((-numerator) // denominator)


# The exact value is kept in nano-units; one with more digits than this is rejected instead of built.
# Kubernetes accepts any size (API validation: "Any parsed quantity is valid"), but a value like
# 1e1000000000 makes inf.Dec (and any exact arithmetic) build a billion-digit number: the API server
# spends minutes on it, gpudra refuses it. No device or request comes near: int64 nano-units have 19.
MAX_DIGITS = 4000
_MAX_NANOS = 10**MAX_DIGITS
_BINARY_PLACES = 64  # >= the largest binary exponent (Ei = 2^60)


def _abbreviated(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}…({len(text)} characters)"


def _nanos(whole: str, fraction: str, base: int, exponent: int, fmt: Format, text: str) -> int:
    """The magnitude in nano-units, rounded up (away from zero) like ParseQuantity; bounded work.

    value = int(whole fraction) * 10^-len(fraction) * base^exponent. Nothing is computed until the
    magnitude is known from the digit counts, so a huge exponent or a long fraction costs a scan.
    """
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return 0
    if base == 2:
        # exponent <= 60 < 10^19; binary amounts are capped at the int64 maximum anyway (ParseQuantity).
        if len(digits) - len(fraction) > 20:
            return MAX_VALUE * NANO
        power = 9 - len(fraction)  # nanos = ceil(digits * 2^exponent * 10^power)
        cut = len(digits) + power + _BINARY_PLACES  # the digits down to 10^-_BINARY_PLACES nano
        if cut < len(digits):
            # 10^_BINARY_PLACES / 2^exponent is an integer, so no integer lies strictly between the value
            # cut there and the value itself: a sticky 1 for any cut-off digit keeps the ceiling exact.
            sticky = "1" if digits[max(cut, 0):].strip("0") else ""
            digits, power = digits[: max(cut, 0)] + sticky, -_BINARY_PLACES - len(sticky)
        scaled = int(digits) * 2**exponent
        nanos = scaled * 10**power if power >= 0 else _ceil_div(scaled, 10 ** (-power))
        return min(nanos, MAX_VALUE * NANO)
    power = exponent - len(fraction) + 9  # nanos = digits * 10^power
    if len(digits) + power > MAX_DIGITS:
        raise QuantityError(
            f"quantity {_abbreviated(text)}: too large: more than {MAX_DIGITS} digits in nano-units "
            "(gpudra's limit; Kubernetes accepts it but needs unbounded time and memory for it)"
        )
    if power >= 0:
        scale: int = 10**power  # an int: power >= 0
        return int(digits) * scale
    kept = len(digits) + power  # digits left of the nano point
    if kept <= 0:
        return 1  # below one nano: rounded up to the smallest amount
    return int(digits[:kept]) + (1 if digits[kept:].strip("0") else 0)

def _wrap_int32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def _wrap_int64(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63


def _fits_int64(value: int) -> bool:
    return MIN_INT64 <= value <= MAX_VALUE


def _positive_scale(base: int, scale: int) -> int | None:
    """math.go positiveScaleInt64: base * 10^scale, None on overflow. The scale is an int32 there; a
    negative one (a wrapped difference) runs its loop zero times and returns base unchanged."""
    if scale <= 0 or base == 0:
        return base
    if base == MIN_INT64 or scale > 19:
        return None
    product = base * 10**scale
    return product if _fits_int64(product) else None


@dataclass(frozen=True, slots=True)
class Int64Amount:
    """amount.go int64Amount: value * 10^scale, value an int64 and scale an int32."""

    value: int
    scale: int

    def as_int64(self) -> int | None:
        """int64Amount.AsInt64: only a scale >= 0 converts (a negative one is never reduced: 1000m is not 1)."""
        if self.scale < 0:
            return None
        return _positive_scale(self.value, self.scale)

    def add(self, other: "Int64Amount") -> "Int64Amount | None":
        """int64Amount.Add: the sum at the smaller scale, or None where an int64 overflows (Kubernetes then
        continues in inf.Dec)."""
        if other.value == 0:
            return self
        if self.value == 0:
            return other
        if self.scale == other.scale:
            left, right, scale = self.value, other.value, self.scale
        elif self.scale > other.scale:
            scaled = _positive_scale(self.value, _wrap_int32(self.scale - other.scale))
            if scaled is None:
                return None
            left, right, scale = scaled, other.value, other.scale
        else:
            scaled = _positive_scale(other.value, _wrap_int32(other.scale - self.scale))
            if scaled is None:
                return None
            left, right, scale = self.value, scaled, self.scale
        total = left + right
        return Int64Amount(total, scale) if _fits_int64(total) else None

    def sub(self, other: "Int64Amount") -> "Int64Amount | None":
        """int64Amount.Sub: Add of the negated value (Go's negation of the smallest int64 is itself)."""
        return self.add(Int64Amount(_wrap_int64(-other.value), other.scale))


# The form of a quantity known only by its value: what ParseQuantity gives its canonical text, i.e. what a
# stored object reads back as. Resolved on demand (Quantity.int64_amount).
_CANONICAL: Literal["canonical"] = "canonical"
_MAX_FAST_DIGITS = 18  # quantity.go maxInt64Factors


def _parsed_form(negative: bool, whole: str, fraction: str, base: int, exponent: int) -> Int64Amount | None:
    """ParseQuantity's fast path (quantity.go): an int64Amount, or None where it goes on in inf.Dec."""
    num = whole.lstrip("0") or "0"
    if base == 10:
        scale, multiplier = exponent, 1
        precision = _MAX_FAST_DIGITS - (len(num) + len(fraction))
    elif not fraction:
        # binary suffixes only take the fast path without a fraction; int32(float32(exponent)*3/10) is exact
        # for the suffixes' exponents 10..60
        scale, multiplier = 0, 1 << exponent
        precision = 15 - len(num) - exponent * 3 // 10 - 1
    else:
        return None
    if precision < 0:
        return None
    scale = _wrap_int32(scale - len(fraction))
    if scale < -9:  # below Nano: inf.Dec, which rounds to nano-units
        return None
    product = int(num + fraction) * multiplier
    if not _fits_int64(product):  # int64Multiply fails
        return None
    return Int64Amount(-product if negative else product, scale)


@dataclass(frozen=True, slots=True)
class Quantity:
    nanos: int
    format: Format = "DecimalSI"
    # Kubernetes' internal form (module docstring): an Int64Amount, None for inf.Dec, or _CANONICAL for the
    # form of the canonical text. Not part of the value: equality, order and the canonical text ignore it.
    form: "Int64Amount | None | Literal['canonical']" = field(default=_CANONICAL, compare=False, repr=False)

    # ----- construction -------------------------------------------------------------------------
    @classmethod
    def parse(cls, value: "str | int | float | Quantity") -> "Quantity":
        if isinstance(value, Quantity):
            return value
        if isinstance(value, bool):
            raise QuantityError(f"quantity {value!r}: expected a string or an integer, not a boolean")
        if isinstance(value, int):
            return cls.from_int(value)
        if isinstance(value, float):
            # The API server parses a JSON number's text (resource.Quantity.UnmarshalJSON); repr gives the
            # same shortest round-trip digits as Go's encoder. NaN/Inf cannot be JSON at all.
            if not math.isfinite(value):
                raise QuantityError(f"quantity {value!r}: not a finite number")
            value = repr(value)
        if not isinstance(value, str):
            raise QuantityError(f"quantity {value!r}: expected a string such as \"16Gi\"")
        if len(value) <= _CACHED_LENGTH:
            return _parse_text(value)  # manifests repeat the same few amounts thousands of times
        return _parse_text.__wrapped__(value)

    @classmethod
    def from_int(cls, value: int, fmt: Format = "DecimalSI") -> "Quantity":
        """An integer amount; like parsing its decimal string (only binary amounts are capped)."""
        if fmt == "BinarySI":
            value = max(-MAX_VALUE, min(MAX_VALUE, value))
        if abs(value) * NANO >= _MAX_NANOS:
            digits = int(abs(value).bit_length() * 0.30103) + 1  # str() of a huge int is itself refused
            raise QuantityError(f"quantity of about {digits} digits: too large: more than {MAX_DIGITS} digits "
                                "in nano-units (gpudra's limit)")
        # ParseQuantity of the decimal digits: the fast path takes up to 18 of them
        form = Int64Amount(value, 0) if abs(value) < 10**_MAX_FAST_DIGITS else None
        return cls(value * NANO, fmt, form)

    # ----- comparisons ---------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.nanos == other.nanos
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.nanos)

    def __lt__(self, other: "Quantity") -> bool:
        return self.nanos < other.nanos

    def __le__(self, other: "Quantity") -> bool:
        return self.nanos <= other.nanos

    def __gt__(self, other: "Quantity") -> bool:
        return self.nanos > other.nanos

    def __ge__(self, other: "Quantity") -> bool:
        return self.nanos >= other.nanos

    def cmp(self, other: "Quantity") -> int:
        return (self.nanos > other.nanos) - (self.nanos < other.nanos)

    # ----- arithmetic (keeps the receiver's format, like Quantity.Add) ---------------------------
    def add(self, other: "Quantity | int") -> "Quantity":
        """Quantity.Add; an int is resource.NewQuantity(int, ...) (CEL's add(int)): an int64Amount of scale 0."""
        other_nanos, other_form = _operand(other)
        left, right = self.int64_amount(), other_form
        form = left.add(right) if left is not None and right is not None else None
        return Quantity(self.nanos + other_nanos, self.format, form)

    def sub(self, other: "Quantity | int") -> "Quantity":
        """Quantity.Sub: stays an int64Amount where both are one and nothing overflows, else inf.Dec."""
        other_nanos, other_form = _operand(other)
        left, right = self.int64_amount(), other_form
        form = left.sub(right) if left is not None and right is not None else None
        return Quantity(self.nanos - other_nanos, self.format, form)

    def sign(self) -> int:
        return (self.nanos > 0) - (self.nanos < 0)

    def is_integer(self) -> bool:
        return self.nanos % NANO == 0

    def int64_amount(self) -> Int64Amount | None:
        """Kubernetes' internal form: the int64Amount, or None where it holds an inf.Dec."""
        if isinstance(self.form, str):  # _CANONICAL
            return _parse_text(self.canonical()).int64_amount()
        return self.form

    def as_int64(self) -> int | None:
        """Quantity.AsInt64, what CEL's isInteger/asInteger answer from: an int64 only where the internal
        form is an int64Amount of scale >= 0 that fits (quantity("1000m") has none, though its value is 1)."""
        amount = self.int64_amount()
        return None if amount is None else amount.as_int64()

    def as_int(self) -> int | None:
        """The value as an int64, or None when it has a fraction or does not fit (the value, not AsInt64)."""
        if self.nanos % NANO:
            return None
        value = self.nanos // NANO
        if not -(2**63) <= value <= MAX_VALUE:
            return None
        return value

    def as_float(self) -> float:
        return self.nanos / NANO

    # ----- canonical form ------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({self.canonical()!r})"

    def canonical(self) -> str:
        if self.nanos == 0:
            return "0"
        fmt = self.format
        if fmt == "BinarySI" and (-1024 * NANO < self.nanos < 1024 * NANO or self.nanos % NANO):
            fmt = "DecimalSI"  # binary suffixes cannot show fractions or small values without rounding
        if fmt == "BinarySI":
            mantissa, exponent = self.nanos // NANO, 0
            while mantissa % 1024 == 0 and exponent < 60:
                mantissa //= 1024
                exponent += 10
            return f"{mantissa}{_BINARY_BY_EXPONENT[exponent]}"
        mantissa, exponent = self.nanos, -9
        while mantissa % 10 == 0:
            mantissa //= 10
            exponent += 1
        remainder = exponent % 3
        if remainder:
            mantissa *= 10**remainder
            exponent -= remainder
        if fmt == "DecimalSI" and exponent in _DECIMAL_BY_EXPONENT:
            return f"{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"
        return f"{mantissa}" if exponent == 0 else f"{mantissa}e{exponent}"


def _operand(other: "Quantity | int") -> tuple[int, Int64Amount | None]:
    if isinstance(other, int):
        return other * NANO, Int64Amount(other, 0)
    return other.nanos, other.int64_amount()


_CACHED_LENGTH = 64


@lru_cache(maxsize=8192)
def _parse_text(text: str) -> Quantity:
    if not text:
        raise QuantityError("quantity '': empty string; write a number with an optional suffix such as 16Gi")
    match = _SYNTAX.match(text)
    if match is None:  # pragma: no cover - the pattern accepts every string
        raise QuantityError(f"quantity {text!r}: not a number")
    sign, whole, fraction, suffix = match.groups()
    fraction = fraction or ""
    if not whole and not fraction:
        raise QuantityError(f"quantity {text!r}: must start with a number, for example 16Gi or 500m")
    base, exponent, fmt = _split_suffix(suffix, text)
    nanos = _nanos(whole, fraction, base, exponent, fmt, text)
    if fmt == "BinarySI":
        nanos = min(nanos, MAX_VALUE * NANO)  # ParseQuantity caps only binary amounts
    if sign == "-":
        nanos = -nanos
    return Quantity(nanos, fmt, _parsed_form(sign == "-", whole, fraction, base, exponent))


def parse_quantity(value: "str | int | Quantity") -> Quantity:
    return Quantity.parse(value)
