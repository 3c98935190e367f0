"""gpudra.cel.constants: Go's strconv as cel-go calls it, and the conversions cel-go's planner folds.

Outside references: cel-cpp's own double-to-string (Go's %g with the shortest digits gives the same text for
finite doubles), Python's integer parsing for well-formed decimal strings, and the round trip of the printed
doubles. The cel-go answers for whole expressions are in tests/data/conformance/cel-derived.
"""

from __future__ import annotations

import math

from cel_expr_python import cel
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.cel.constants import format_go_float, parse_go_float, parse_go_int, parse_go_uint

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
UINT64 = st.integers(min_value=0, max_value=2**64 - 1)
_STRING_OF = cel.NewEnv(variables={"d": cel.Type.DOUBLE}).compile("string(d)")


@given(INT64)
def test_parse_int_reads_every_int64_with_an_optional_sign(value):
    assert parse_go_int(str(value)) == value
    if value >= 0:
        assert parse_go_int(f"+{value}") == value
        assert parse_go_uint(f"+{value}") is None  # ParseUint takes no sign


@given(UINT64)
def test_parse_uint_reads_every_uint64(value):
    assert parse_go_uint(str(value)) == value
    assert parse_go_int(str(value)) == (value if value < 2**63 else None)


@given(st.integers(min_value=2**64, max_value=2**80) | st.integers(max_value=-(2**63) - 1, min_value=-(2**80)))
def test_out_of_range_integers_are_errors(value):
    assert parse_go_int(str(value)) is None
    assert parse_go_uint(str(value)) is None  # negative, or past 2^64 - 1


@given(INT64, st.sampled_from([" {}", "{} ", "0x{}", "{}_0", "1_{}", "{}.0", "{}e1"]))
def test_what_base_10_parsing_refuses(value, shape):
    assert parse_go_int(shape.format(abs(value))) is None


@settings(max_examples=300)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_to_string_matches_cel_cpp_and_round_trips(value):
    text = format_go_float(value)
    assert float(text) == value or (value == 0 and float(text) == 0)
    if value != 0:  # cel-cpp prints -0 and 0 alike only sometimes; the digits are what matters
        assert text == _STRING_OF.eval(data={"d": value}).value()


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_parse_float_reads_what_format_prints(value):
    assert parse_go_float(format_go_float(value)) == value


def test_parse_float_is_go_s():
    assert parse_go_float("1e400") is None  # out of range is an error in ParseFloat
    assert parse_go_float("1e-400") == 0.0  # underflow is not
    assert parse_go_float("Infinity") == math.inf and parse_go_float("-inf") == -math.inf
    assert math.isnan(parse_go_float("NaN") or 0.0)
    assert parse_go_float("0x1p-2") == 0.25 and parse_go_float("0x_1p0") == 1.0
    assert parse_go_float("1_000") is None and parse_go_float(" 1") is None and parse_go_float("") is None
