"""Hostile numbers (issue 12, defect 8): quantities, integers and versions are parsed with bounded work.

Nothing here builds a number from an exponent: a billion-digit exponent must be refused (or wrap as Go's
int32 conversion does) after a scan of the text, and thousands of digits give a clear error, never the
ValueError Python raises for long int conversions.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings, strategies as st

from gpudra.api.quantity import MAX_DIGITS, MAX_VALUE, NANO, Quantity, QuantityError
from gpudra.api.semver import SemverError, parse_semver

HUGE = "1" * 5000


@pytest.mark.parametrize("text", ["1e1000000000", "-1e1000000000", "1.5e2000000000", "1e3991", HUGE, HUGE + "k",
                                  "9" * 3992 + "e0"])
def test_values_past_the_digit_limit_are_refused_by_name(text):
    with pytest.raises(QuantityError, match=f"too large: more than {MAX_DIGITS} digits"):
        Quantity.parse(text)


def test_the_largest_accepted_value_is_exact():
    assert Quantity.parse("1e3990").nanos == 10**3999
    assert str(Quantity.parse("1e3990")) == "1e3990"


@pytest.mark.parametrize("text, nanos", [
    ("1e-1000000000", 1),  # below a nano: rounded up to the smallest amount, as ParseQuantity does
    ("-1e-1000000000", -1),
    ("0e1000000000", 0),
    ("0." + "0" * 100_000 + "1", 1),
    ("1." + "0" * 100_000 + "1Ki", 1024 * NANO + 1),
    ("0." + "0" * 100_000 + "1Ei", 1),
    ("1" * 5000 + "Ki", MAX_VALUE * NANO),  # binary amounts are capped at the int64 maximum
    ("2." + "5" * 5000, 2_555_555_556),
])
def test_long_texts_are_exact_without_converting_every_digit(text, nanos):
    assert Quantity.parse(text).nanos == nanos


def test_exponents_follow_go_int64_parse_then_int32_conversion():
    # suffix.go: strconv.ParseInt(exponent, 10, 64) then int32(parsed)
    assert Quantity.parse("1e4294967296").nanos == NANO  # 2^32 wraps to 0
    assert Quantity.parse("1e4294967299").nanos == 1000 * NANO  # wraps to 3
    with pytest.raises(QuantityError, match="unable to parse quantity's suffix"):
        Quantity.parse("1e9223372036854775808")  # not an int64
    with pytest.raises(QuantityError, match="unable to parse quantity's suffix"):
        Quantity.parse("1e" + "9" * 5000)


def test_huge_integers_are_refused_without_str_conversion():
    with pytest.raises(QuantityError, match="too large"):
        Quantity.parse(10**5000)


@settings(max_examples=200)
@given(st.integers(min_value=-(2**40), max_value=2**40), st.integers(min_value=-(2**40), max_value=2**40))
@example(1, 1_000_000_000)
@example(7, -1_000_000_000)
@example(1, -2_147_483_649)  # wraps around to +2^31-1 in Go's int32 conversion
def test_any_exponent_costs_a_scan(mantissa, exponent):
    try:
        quantity = Quantity.parse(f"{mantissa}e{exponent}")
    except QuantityError as error:
        assert "too large" in str(error)
        assert (exponent + 2**31) % 2**32 - 2**31 > 0
    else:
        assert len(str(abs(quantity.nanos))) <= MAX_DIGITS


@pytest.mark.parametrize("text", [f"1.2.{HUGE}", f"{HUGE}.0.0", f"1.{HUGE}.0", f"1.2.3-{HUGE}"])
def test_long_version_numbers_are_out_of_range_not_a_traceback(text):
    with pytest.raises(SemverError, match="value out of range"):
        parse_semver(text)
    with pytest.raises(SemverError, match="value out of range"):
        parse_semver("v" + text, normalize=True)


def test_uint64_boundary_of_version_numbers():
    assert parse_semver("18446744073709551615.0.0").major == 2**64 - 1
    assert parse_semver("0.0.1-000000000000000000000000000000a").prerelease == ("000000000000000000000000000000a",)
    with pytest.raises(SemverError, match="value out of range"):
        parse_semver("18446744073709551616.0.0")
