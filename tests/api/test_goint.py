"""Gt/Lt integers as kube-scheduler parses them (issue 20, finding 10): node affinity and taint tolerations used
Python's int(), which takes `1_0`, spaces, non-ASCII digits and any size, where Go's strconv.ParseInt(s, 10, 64)
refuses them. Checked against a plain transcription of Go's algorithm (strconv/atoi.go: ParseInt over ParseUint,
byte by byte), not against a regular expression like the one the product code uses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.allocator.nodematch import NodeInfo, requirement_matches, term_matches
from gpudra.api.goint import parse_canonical_int64, parse_int64, parse_requirement_int
from gpudra.schedulinghelpers import pod_matches_node_selector_and_affinity, toleration_tolerates


def go_parse_int(s: str) -> int | None:
    """strconv.ParseInt(s, 10, 64) as Go's atoi.go does it: sign, then ParseUint(s, 10, 64) over the UTF-8 bytes
    (base 10 given: no underscores), cutoff checks for overflow, then the signed range."""
    if s == "":
        return None
    negative = False
    if s[0] == "+":
        s = s[1:]
    elif s[0] == "-":
        negative, s = True, s[1:]
    if s == "":
        return None
    max_uint64 = (1 << 64) - 1
    cutoff = max_uint64 // 10 + 1
    n = 0
    for byte in s.encode("utf-8"):
        if not 0x30 <= byte <= 0x39:
            return None
        if n >= cutoff:
            return None
        n *= 10
        n1 = n + (byte - 0x30)
        if n1 > max_uint64:
            return None
        n = n1
    if not negative and n >= 1 << 63:
        return None
    if negative and n > 1 << 63:
        return None
    return -n if negative else n


def go_is_label_value(s: str) -> bool:
    """k8s.io/apimachinery validation.IsValidLabelValue, spelled out: at most 63 characters, empty or alphanumeric
    (ASCII) at both ends with `-`, `_`, `.` allowed between."""
    def alnum(c: str) -> bool:
        return c.isascii() and c.isalnum()
    if len(s) > 63:
        return False
    return s == "" or alnum(s[0]) and alnum(s[-1]) and all(alnum(c) or c in "-_." for c in s)


def go_is_decimal_integer(s: str) -> bool:
    """k8s.io/apimachinery validation/content IsDecimalInteger: `0`, or an optional `-`, then 1-9, then digits."""
    if s == "":
        return False
    i = 1 if s[0] == "-" else 0
    if i == len(s):
        return False
    if s[i] == "0":
        return len(s) == 1
    return all("0" <= c <= "9" for c in s[i:])


_EDGES = [str(v) for v in (0, 1, -1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 10**19, 10**20)]
TEXTS = st.one_of(
    st.text(alphabet="0123456789+-_ \t\n٣０²x.eE", max_size=24),
    st.sampled_from(_EDGES + ["+" + e for e in _EDGES] + ["00" + e.lstrip("-") for e in _EDGES]),
    st.integers(min_value=-(2**65), max_value=2**65).map(str),
    st.builds(lambda zeros, n: "0" * zeros + str(n), st.integers(0, 80), st.integers(0, 2**64)),
)


@settings(max_examples=600, deadline=None)
@given(TEXTS)
def test_parse_int64_is_gos_parse_int(text):
    assert parse_int64(text) == go_parse_int(text)
    expected = go_parse_int(text) if go_is_label_value(text) else None
    assert parse_requirement_int(text) == expected
    assert parse_canonical_int64(text) == (go_parse_int(text) if go_is_decimal_integer(text) else None)


def _affinity_pod(operator: str, value: str) -> dict:
    term = {"matchExpressions": [{"key": "gpus", "operator": operator, "values": [value]}]}
    return {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}}}


@settings(max_examples=400, deadline=None)
@given(TEXTS, TEXTS, st.sampled_from(["Gt", "Lt"]))
def test_allocator_and_scheduler_match_gt_lt_as_kube_scheduler(label, value, operator):
    have, want = go_parse_int(label), go_parse_int(value) if go_is_label_value(value) else None
    expected = have is not None and want is not None and (have > want if operator == "Gt" else have < want)
    requirement = {"key": "gpus", "operator": operator, "values": [value]}
    assert requirement_matches(requirement, {"gpus": label}) is expected
    assert term_matches({"matchExpressions": [requirement]}, NodeInfo("n", {"gpus": label})) is expected
    node = {"metadata": {"name": "n", "labels": {"gpus": label}}}
    assert pod_matches_node_selector_and_affinity(_affinity_pod(operator, value), node) is expected


@settings(max_examples=300, deadline=None)
@given(TEXTS, TEXTS, st.sampled_from(["Gt", "Lt"]))
def test_numeric_tolerations_compare_as_kube_scheduler(taint_value, toleration_value, operator):
    taint = {"key": "k", "value": taint_value, "effect": "NoSchedule"}
    toleration = {"key": "k", "operator": operator, "value": toleration_value}
    canonical = [go_parse_int(v) if go_is_decimal_integer(v) else None for v in (taint_value, toleration_value)]
    have, want = canonical
    expected = have is not None and want is not None and (have < want if operator == "Lt" else have > want)
    assert toleration_tolerates(toleration, taint) is expected


@pytest.mark.parametrize("label,value", [("10", "1_0"), (" 20", "5"), ("20", " 5"), ("٣", "1"), ("2" + "0" * 30, "5"),
                                         ("10", "5\n"), ("10", "+5"), ("9223372036854775808", "1")])
def test_the_attackers_values_match_no_node(label, value):
    node = {"metadata": {"name": "n", "labels": {"gpus": label}}}
    assert not requirement_matches({"key": "gpus", "operator": "Gt", "values": [value]}, {"gpus": label})
    assert not pod_matches_node_selector_and_affinity(_affinity_pod("Gt", value), node)


def test_leading_zeros_and_a_plus_on_the_nodes_label_are_go_integers():
    """strconv.ParseInt accepts both; only the requirement's value must also be a label value."""
    assert requirement_matches({"key": "gpus", "operator": "Gt", "values": ["007"]}, {"gpus": "+0010"})
    assert requirement_matches({"key": "gpus", "operator": "Lt", "values": ["5"]}, {"gpus": "-3"})


def test_cel_and_label_values_share_one_strconv_and_neither_breaks_on_thousands_of_digits():
    """cel-go's `int("…")` and kube-scheduler's Gt/Lt both use strconv.ParseInt: one copy (gpudra/gostrconv.py).
    Python's int() refuses more than 4,300 digits with a ValueError, which reached the user from CEL before."""
    from gpudra import cel
    from gpudra.api.goint import parse_int64 as labels_parse
    from gpudra.cel.constants import parse_go_int, parse_go_uint

    long = "1" * 5000
    assert labels_parse is parse_go_int
    assert parse_go_int(long) is None and parse_go_uint(long) is None and parse_go_uint("-1") is None
    with pytest.raises(cel.CELCompileError, match="type conversion error from 'string' to 'int'"):
        cel.compile_selector(f'int("{long}") == 1')
