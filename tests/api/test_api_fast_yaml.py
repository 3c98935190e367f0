"""The fast YAML reading (gpudra/api/fast_yaml.py, yaml-rs) means exactly what PyYAML's reading means, or declines.

Each text is loaded twice by `load_text`: as it runs (fast path where it is taken) and with yaml-rs hidden (the
PyYAML path); documents (object with its types, position, item, source) and errors must be identical.
"""

from __future__ import annotations

import glob
import io
import math
import os
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra.api import fast_yaml
from gpudra.api.load import load_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

pytestmark = pytest.mark.skipif(fast_yaml.yaml_rs is None, reason="yaml-rs has no wheel for this platform")


def _typed(value):
    """The value with every scalar's type spelled out (True == 1 and 1 == 1.0 in Python; NaN != NaN)."""
    if isinstance(value, dict):
        return ("dict", [(_typed(key), _typed(child)) for key, child in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(child) for child in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, repr(value))


def _read(text: str, source: str) -> tuple:
    try:
        return ("documents", [(_typed(doc.obj), doc.index, doc.item, doc.source) for doc in load_text(text, source)])
    except Exception as error:  # noqa: BLE001 - LoadError, and whatever else PyYAML's path raises: the same either way
        return ("error", type(error).__name__, str(error))


def both_paths(text: str, source: str = "t.yaml") -> tuple[tuple, tuple, bool]:
    """(as loaded, as PyYAML loads it, whether the fast path was taken)."""
    before = fast_yaml.counts["fast"]
    loaded = _read(text, source)
    taken = fast_yaml.counts["fast"] > before
    saved, fast_yaml.yaml_rs = fast_yaml.yaml_rs, None
    try:
        slow = _read(text, source)
    finally:
        fast_yaml.yaml_rs = saved
    return loaded, slow, taken


# Scalars where YAML 1.1 (PyYAML) and 1.2 (yaml-rs) differ, or nearly: bools, octal, exponents, signs, sexagesimal,
# underscores, special floats, dates, merge and value keys, huge digit runs; and ordinary manifest strings.
TRAPS = ["yes", "no", "on", "off", "y", "n", "Yes", "NO", "On", "OFF", "true", "True", "FALSE", "tRUE", "null",
         "Null", "NULL", "~", "", "0777", "0o17", "09", "0x1F", "-0x1F", "+0X1f", "+12", "-0", "0", "1_000", "_1",
         "1__", "0b101", "0b_", "1:30", "-1:30", "1:30.5", "0000:19:00.0", "1e3", "1E3", "1.5e3", "1.0e+3", "1.e-3",
         ".5", "-.5", "+.5", "1.", "-1.", ".inf", "-.Inf", "+.INF", ".nan", ".NaN", ".Nan", "inf", "nan",
         "123456789012345678901234567890", "9" * 30, "2024-01-01", "2024-01-01T00:00:00Z", "<<", "=", "-", "--",
         "---", "...", "?", "? x", ":", "a:b", "a: b", "a #b", "#c", "- x", "!tag", "!!str", "&a", "*a", "[]", "{}",
         "[a, b]", "{a: b}", "[a:b]", "[] x", "[]x", "{} x", "&&", "\"a\":1", "{{ .Values.x }}", "gpu", "gpu.nvidia.com", "NVIDIA H100 80GB HBM3", "81559Mi",
         "9.0.0", "570.133.20", "10.0.0.1", "x!=y", "a && b", "device.driver == \"gpu\"", "it's", "é", "\u2028",
         "\x85", "\t", "a\tb", "\u00a0", "yes\u00a0", "\u3000x", "1\u30002", "\ufeffx", "\\", "\\n", "@x", "`x", "%x", "|", ">", "a\nb", "a\n\nb", " x", "x "]
# What manifests hold: the fast path is taken for these (quoted or not), so most generated texts test it.
ORDINARY = ["gpu", "gpu.nvidia.com", "NVIDIA H100 80GB HBM3", "81559Mi", "9.0.0", "0", "1", "42", "-7", "+3", "0x1F",
            "1.5", "-2.25", "100.", "true", "false", "True", "null", "~", "", "10.0.0.1", "x!=y", "a && b", "é", "it's",
            "registry.k8s.io/pause:3.10", "GPU-aa790747-10af-56d4-93ed-fd26f097cb1c", "default", "x y z", "a-b_c"]
KEYS = ["apiVersion", "kind", "metadata", "name", "items", "spec", "a", "b", "yes", "on", "1", "0777", "true", "~",
        "<<", "1.0", "-", "?", "k"]
UNICODE_SPACES = ["\u00a0", "\u3000", "\u2028", "\u0085", "\ufeff", "\u2003", "\u1680", "\u202f"]
STYLES = st.sampled_from(["plain"] * 5 + ["single", "single", "double", "double", "folded"])
POOLS = st.sampled_from([ORDINARY] * 8 + [TRAPS])


def _escaped(text: str) -> str:
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\x85": "\\N", "\u2028": "\\L"}
    return "".join(escapes.get(char, char) for char in text)


@st.composite
def scalars(draw, pool=None, indent: int = 0) -> str:
    pool = pool or draw(POOLS)
    text, style = draw(st.sampled_from(pool)), draw(STYLES)
    if style == "single":
        return "'" + text.replace("'", "''") + "'"
    if style == "double":
        return '"' + _escaped(text) + '"'
    if style == "folded" and text:  # a plain scalar over two lines
        return text + "\n" + " " * (indent + 2) + draw(st.sampled_from(pool))
    return text


@st.composite
def flows(draw, depth: int = 0) -> str:
    if depth > 1 or draw(st.booleans()):
        return draw(scalars())
    if draw(st.booleans()):
        items = draw(st.lists(flows(depth + 1), max_size=3))
        return "[" + ", ".join(items) + "]"
    pairs = draw(st.lists(st.tuples(scalars(pool=KEYS), flows(depth + 1)), max_size=3))
    return "{" + ", ".join(f"{key}: {value}" for key, value in pairs) + "}"


@st.composite
def blocks(draw, indent: int = 0, depth: int = 0) -> list[str]:
    """Lines of a block mapping or sequence at `indent`."""
    pad = " " * indent
    lines: list[str] = []
    sequence = depth > 0 and draw(st.integers(0, 3)) == 0
    for position in range(draw(st.integers(1, 4))):
        key = draw(scalars(pool=KEYS)) if draw(st.integers(0, 4)) == 0 else f"k{position}"  # mostly distinct
        head = f"{pad}- " if sequence else f"{pad}{key}:"
        shape = draw(st.integers(0, 19))
        if shape <= 14 or depth >= 3:
            value = draw(scalars(indent=indent))
            lines.append(f"{head} {value}" if value or sequence else head)
        elif shape == 15:
            lines.append(f"{head} {draw(flows())}")
        elif shape == 16:
            indicator = draw(st.sampled_from(["|", "|-", ">", ">-", "|+", "|2"]))
            lines.append(f"{head} {indicator}")
            lines.extend(f"{pad}  {draw(st.sampled_from(['x', 'yes', '0777', ' y', '', '# z']))}"
                         for _ in range(draw(st.integers(1, 3))))
        else:
            lines.append(head.rstrip() if not sequence else f"{pad}-")
            inner = indent + (0 if not sequence and draw(st.booleans()) and shape == 17 else 2)
            lines.extend(draw(blocks(inner, depth + 1)))
        if draw(st.integers(0, 7)) == 0:
            lines[-1] += " # comment"
    return lines


@st.composite
def documents(draw) -> str:
    kind = draw(st.sampled_from(["object", "object", "list", "free"]))
    if kind == "free":
        return "\n".join(draw(blocks()))
    head = ["apiVersion: v1", f"kind: {'List' if kind == 'list' else 'ConfigMap'}"]
    if kind == "list":
        items = []
        for _ in range(draw(st.integers(0, 3))):
            items.append("- apiVersion: v1")
            items.append("  kind: ConfigMap")
            items.extend("  " + line for line in draw(blocks(0, 1)))
        return "\n".join(head + ["items:"] + items + (["- null"] if draw(st.booleans()) else []))
    return "\n".join(head + ["metadata:", "  name: x"] + draw(blocks()))


@st.composite
def streams(draw) -> str:
    parts = draw(st.lists(documents(), min_size=1, max_size=3))
    separators = st.sampled_from(["---"] * 6 + ["--- ", "--- # c", "---\n---", "...\n---", "# c\n---"])
    text = parts[0]
    for part in parts[1:]:
        text += "\n" + draw(separators) + "\n" + part
    if draw(st.booleans()):
        text = draw(st.sampled_from(["---\n", "# c\n", "\n", "%YAML 1.1\n---\n", "# c\n---\n"])) + text
    lines = text.split("\n")
    # damage: indentation, tabs, a repeated line (duplicate keys), CR, a lost line
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        if not lines:
            break
        where = draw(st.integers(0, len(lines) - 1))
        change = draw(st.sampled_from(["indent", "dedent", "tab", "repeat", "crlf", "drop", "unicode"]))
        line = lines[where]
        if change == "indent":
            lines[where] = " " + line
        elif change == "dedent" and line.startswith(" "):
            lines[where] = line[1:]
        elif change == "tab":
            lines[where] = line.replace(" ", "\t", 1)
        elif change == "repeat":
            lines.insert(where, line)
        elif change == "crlf":
            lines[where] = line + "\r"
        elif change == "drop":
            del lines[where]
        elif change == "unicode":  # white space to Python, not to YAML (or a line break to YAML 1.1 alone)
            at = draw(st.integers(0, len(line)))
            lines[where] = line[:at] + draw(st.sampled_from(UNICODE_SPACES)) + line[at:]
    return "\n".join(lines) + draw(st.sampled_from(["\n", "\n", "", "\n---\n", "\n...\n"]))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_the_fast_path_reads_every_text_as_pyyaml_does_or_declines(text):
    loaded, slow, _ = both_paths(text)
    assert loaded == slow


# Issue 20 (attacker finding 4): a first document of lines starting with U+00A0 was dropped by the fast path
# (its `\s` took U+00A0 for white space) and read (and refused) by PyYAML.
RAW_ALPHABET = list("ab1y0:-#'\" .\n\n\n[]{},&*!|>?") + UNICODE_SPACES + ["---\n", "kind: X\n", "\t"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(RAW_ALPHABET), max_size=40).map("".join), st.sampled_from(["", "a: 1\n"]))
def test_texts_with_unicode_white_space_read_alike(text, head):
    loaded, slow, _ = both_paths(head + text)
    assert loaded == slow


@pytest.mark.parametrize("space", UNICODE_SPACES)
def test_a_first_document_of_unicode_spaces_is_not_dropped(space):
    text = f"{space}x\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
    loaded, slow, _ = both_paths(text)
    assert loaded == slow
    assert loaded[0] == "error" and "document 1" in loaded[2]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KEYS[:6]), scalars()), min_size=1, max_size=6))
def test_single_scalars_read_alike(pairs):
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n" + "".join(
        f"  k{position}: {value}\n" for position, (_, value) in enumerate(pairs))
    loaded, slow, _ = both_paths(text)
    assert loaded == slow


def _article_snippets(path: str) -> list[str]:
    """The manifests of the article's text: from each `apiVersion:` line to the next paragraph mark."""
    snippets, current = [], None
    for line in open(path, encoding="utf-8").read().splitlines():
        if line.startswith("apiVersion:") and current is None:
            current = [line]
        elif current is not None:
            if line.strip() == "" and "\xa0" in line or re.match(r"\d+\. ", line):
                snippets.append("\n".join(current) + "\n")
                current = None
            else:
                current.append(line)
    return snippets + (["\n".join(current) + "\n"] if current else [])


def _yaml_files() -> list[str]:
    files = []
    for folder in ("examples", "tests/data"):
        for suffix in ("yaml", "yml"):
            files.extend(glob.glob(os.path.join(ROOT, folder, "**", f"*.{suffix}"), recursive=True))
    return sorted(files)


@pytest.mark.parametrize("part", range(4))  # 12 MB in all: four parts for the suite's workers
def test_every_yaml_file_of_the_repository_reads_alike(part):
    files = _yaml_files()
    assert len(files) > 100
    files = files[part::4]
    taken = 0
    for path in files:
        text = open(path, encoding="utf-8").read()
        loaded, slow, fast = both_paths(text, os.path.relpath(path, ROOT))
        assert loaded == slow, path
        taken += fast
    assert taken > len(files) // 2  # the fast path is the common one, not a path never taken


@pytest.mark.parametrize("path", [os.path.join(ROOT, "examples", "k8s-1.34-dra-gpu-article.ko.txt"),
                                  "/work/shared/seed/k8s-1.34-dra-gpu-article.ko.txt"])
def test_the_article_manifests_read_alike(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} is not on this machine")
    snippets = _article_snippets(path)
    assert len(snippets) >= 4
    for snippet in snippets:
        loaded, slow, _ = both_paths(snippet, "article.yaml")
        assert loaded == slow, snippet


def test_the_benchmark_cluster_takes_the_fast_path():
    from gen_cluster import dump_yaml
    from large_cluster import build_objects

    stream = io.StringIO()
    dump_yaml(build_objects(nodes=20, pods=10), stream)
    loaded, slow, taken = both_paths(stream.getvalue(), "cluster.yaml")
    assert taken
    assert loaded == slow and len(loaded[1]) == 1 + 20 * 2 + 10 * 2


@pytest.mark.parametrize("text, why", [
    ("a: yes\n", "a plain YAML 1.1 bool"),
    ("a: 0777\n", "an octal int"),
    ("a: 1e3\n", "a string to PyYAML, a float to yaml-rs"),
    ("a: 1:30\n", "sexagesimal"),
    ("a: &x 1\nb: *x\n", "an alias"),
    ("<<: {a: 1}\n", "a merge key"),
    ("a: !!str 1\n", "a tag"),
    ("a: [b:c]\n", "a flow collection"),
    ("a: \"\\/\"\n", "an escape"),
    ("a:\tb\n", "a tab"),
    ("a: b\r\n", "a CR"),
    ("a: 1\na: 2\n", "a duplicate key (yaml-rs refuses it; PyYAML says where)"),
    ("%YAML 1.1\n---\na: 1\n", "a directive"),
])
def test_the_fast_path_declines(text, why):
    loaded, slow, taken = both_paths("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n" + text)
    assert not taken, why
    assert loaded == slow


def test_quoted_look_alikes_take_the_fast_path():
    text = ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  annotations:\n    enabled: 'yes'\n"
            "    mode: \"0777\"\n    bus: '0000:19:00.0'\ndata:\n  count: 3\n  empty: ''\n  on: 'on'\n")
    loaded, slow, taken = both_paths(text)
    assert taken is False  # `on:` is a plain key here: True to PyYAML
    loaded, slow, taken = both_paths(text.replace("  on: 'on'\n", "  'on': 'on'\n"))
    assert taken and loaded == slow
    assert loaded[1][0][0] == _typed({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "x", "annotations": {"enabled": "yes", "mode": "0777", "bus": "0000:19:00.0"}},
        "data": {"count": 3, "empty": "", "on": "on"}})


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0xFF)))
def test_the_printable_ascii_shortcut_agrees_with_the_str_check(text):
    """fast_yaml._printable_ascii answers True only where the str check it skips would have passed."""
    if fast_yaml._printable_ascii(text):
        assert text.replace("\n", "").isprintable()
    else:
        assert not text.isascii() or not text.replace("\n", "").isprintable()
