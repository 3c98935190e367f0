"""resource.Quantity semantics: parsing, rounding, ordering and the canonical form."""

from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from gpudra.api.quantity import MAX_VALUE, NANO, Quantity, QuantityError

DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
           "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
           "P": Fraction(10**15), "E": Fraction(10**18)}
BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


@st.composite
def quantity_text(draw):
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.integers(min_value=0, max_value=10**6))
    fraction = draw(st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=4)))
    kind = draw(st.sampled_from(["decimal", "binary", "exponent"]))
    if kind == "decimal":
        suffix = draw(st.sampled_from(sorted(DECIMAL)))
        factor = DECIMAL[suffix]
    elif kind == "binary":
        suffix = draw(st.sampled_from(sorted(BINARY)))
        factor = Fraction(BINARY[suffix])
    else:
        exponent = draw(st.integers(min_value=-12, max_value=12))
        suffix = f"e{exponent}"
        factor = Fraction(10) ** exponent
    text = f"{sign}{whole}" + (f".{fraction}" if fraction else "") + suffix
    value = (Fraction(whole) + (Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0)) * factor
    return text, (-value if sign == "-" else value, kind == "binary")


def expected_nanos(exact) -> int:
    """Round away from zero to nano precision; binary amounts are capped at the int64 maximum (ParseQuantity)."""
    value, binary = exact
    magnitude = abs(value) * NANO
    nanos = -((-magnitude.numerator) // magnitude.denominator)
    if binary:
        nanos = min(nanos, MAX_VALUE * NANO)
    return -nanos if value < 0 else nanos


@settings(max_examples=400, deadline=None)
@given(quantity_text())
def test_parse_is_exact(case):
    text, value = case
    assert Quantity.parse(text).nanos == expected_nanos(value)


@settings(max_examples=400, deadline=None)
@given(quantity_text())
def test_canonical_round_trip_and_idempotence(case):
    text, _ = case
    quantity = Quantity.parse(text)
    canonical = str(quantity)
    again = Quantity.parse(canonical)
    assert again == quantity
    assert str(again) == canonical


@settings(max_examples=300, deadline=None)
@given(quantity_text(), quantity_text())
def test_ordering_matches_exact_values(a, b):
    qa, qb = Quantity.parse(a[0]), Quantity.parse(b[0])
    ea, eb = expected_nanos(a[1]), expected_nanos(b[1])
    assert (qa < qb) == (ea < eb)
    assert (qa == qb) == (ea == eb)
    assert qa.cmp(qb) == (ea > eb) - (ea < eb)
    assert (hash(qa) == hash(qb)) or qa != qb


@pytest.mark.parametrize("text, canonical", [
    ("1.5Gi", "1536Mi"), ("1024Mi", "1Gi"), ("0.5", "500m"), ("1000m", "1"), ("1M", "1M"), ("1000k", "1M"),
    ("100Mi", "100Mi"), ("-1", "-1"), ("1n", "1n"), ("0.1n", "1n"), ("0", "0"), ("5e3", "5e3"),
    ("81559Mi", "81559Mi"), ("16Gi", "16Gi"), ("+2", "2"), ("1.1", "1100m"),
])
def test_known_canonical_forms(text, canonical):
    assert str(Quantity.parse(text)) == canonical


@pytest.mark.parametrize("text", ["", "Gi", "1.2.3", "1GB", "1 Gi", "--1", "1e", "e3", "0x10", "1Gib", ".", "1_000"])
def test_invalid_quantities_are_rejected_cleanly(text):
    with pytest.raises(QuantityError) as info:
        Quantity.parse(text)
    assert repr(text) in str(info.value) or text == ""


def test_binary_amounts_are_capped_and_decimal_ones_are_not():
    assert Quantity.parse("100Ei").as_int() == MAX_VALUE
    assert Quantity.parse("100E").nanos == 100 * 10**18 * NANO
    assert Quantity.parse("100E").as_int() is None


def test_arithmetic_and_accessors():
    q = Quantity.parse("1536Mi")
    assert q.add(Quantity.parse("512Mi")) == Quantity.parse("2Gi")
    assert q.sub(1) == Quantity.parse(str(1536 * 2**20 - 1))
    assert q.as_int() == 1536 * 2**20 and q.is_integer() and q.sign() == 1
    assert Quantity.parse("500m").as_int() is None and Quantity.parse("500m").as_float() == 0.5
    assert Quantity.parse(1.5) == Quantity.parse("1.5")  # a JSON number, as the API server reads it
    with pytest.raises(QuantityError):
        Quantity.parse(True)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(10**25), max_value=10**25))
def test_integers_parse_like_their_decimal_strings(value):
    assert Quantity.parse(value) == Quantity.parse(str(value))
    assert str(Quantity.parse(value)) == str(Quantity.parse(str(value)))
