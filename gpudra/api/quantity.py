"""Kubernetes `resource.Quantity` with the API machinery's exact semantics.

A quantity is stored as an exact integer number of nano-units: the API server
rounds every parsed value up (away from zero) to nano precision, so nothing
finer can ever be observed, and caps binary-suffixed amounts at 2^63-1.
The canonical string form follows `Quantity.String()`: the suffix family of the
original (binary, decimal or exponent) is kept where it can represent the value
exactly, mantissas are integers, and decimal exponents are multiples of three.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]

NANO = 10**9
MAX_VALUE = 2**63 - 1  # resource.Quantity caps at the largest int64

_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_BY_EXPONENT = {0: "", **{v: k for k, v in _BINARY_SUFFIXES.items()}}
_DECIMAL_BY_EXPONENT = {v: k for k, v in _DECIMAL_SUFFIXES.items()}

_SYNTAX = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity."""


def _split_suffix(suffix: str, text: str) -> tuple[int, int, Format]:
    """Return (base, exponent, format) for a suffix, as the API machinery interprets it."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], "DecimalSI"
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], "BinarySI"
    match = _EXPONENT.match(suffix)
    if match:
        return 10, int(match.group(1)), "DecimalExponent"
    raise QuantityError(
        f"quantity {text!r}: unknown suffix {suffix!r}; use one of n, u, m, k, M, G, T, P, E (decimal), "
        "Ki, Mi, Gi, Ti, Pi, Ei (binary) or an exponent such as e3"
    )


def _ceil_div(numerator: int, denominator: int) -> int:
    return -((-numerator) // denominator)


@dataclass(frozen=True, slots=True)
class Quantity:
    nanos: int
    format: Format = "DecimalSI"

    # ----- construction -------------------------------------------------------------------------
    @classmethod
    def parse(cls, value: "str | int | Quantity") -> "Quantity":
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
        text = value
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
        digits = int((whole or "0") + fraction)
        scale = len(fraction)  # value = digits * 10^-scale * base^exponent
        if base == 10:
            power = exponent - scale + 9  # to nano-units
            if power >= 0:
                nanos = digits * 10**power
            else:
                nanos = _ceil_div(digits, 10 ** (-power))
        else:
            nanos = _ceil_div(digits * (2**exponent) * NANO, 10**scale)
        if fmt == "BinarySI":
            nanos = min(nanos, MAX_VALUE * NANO)  # ParseQuantity caps only binary amounts
        if sign == "-":
            nanos = -nanos
        return cls(nanos, fmt)

    @classmethod
    def from_int(cls, value: int, fmt: Format = "DecimalSI") -> "Quantity":
        """An integer amount; like parsing its decimal string (only binary amounts are capped)."""
        if fmt == "BinarySI":
            value = max(-MAX_VALUE, min(MAX_VALUE, value))
        return cls(value * NANO, fmt)

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
        other_nanos = other * NANO if isinstance(other, int) else other.nanos
        return Quantity(self.nanos + other_nanos, self.format)

    def sub(self, other: "Quantity | int") -> "Quantity":
        other_nanos = other * NANO if isinstance(other, int) else other.nanos
        return Quantity(self.nanos - other_nanos, self.format)

    def sign(self) -> int:
        return (self.nanos > 0) - (self.nanos < 0)

    def is_integer(self) -> bool:
        return self.nanos % NANO == 0

    def as_int(self) -> int | None:
        """The value as an int64, or None when it has a fraction or does not fit (like AsInt64)."""
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


def parse_quantity(value: "str | int | Quantity") -> Quantity:
    return Quantity.parse(value)
