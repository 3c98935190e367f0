"""Hostile manifests (issue 12, defect 9): the loader bounds depth, size and alias expansion for JSON as
for YAML, rejects duplicate keys in both, and nothing recursive ever sees a document deeper than its limit."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from gpudra.api import load as loader
from gpudra.api.load import MAX_DEPTH, LoadError, load_paths, load_text
from gpudra.api.validate import validate_documents

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAD = '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": '


def json_nested(levels: int) -> str:
    return HEAD + "[" * levels + "]" * levels + "}}"


def yaml_nested(levels: int, flow: bool = True) -> str:
    if flow:
        return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: " + "[" * levels + "]" * levels + "}\n"
    # block sequences nested on one line: "- - - x"
    return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  a:\n    " + "- " * levels + "x\n"


@pytest.mark.parametrize("text", [json_nested(100_000), yaml_nested(100_000), yaml_nested(5000), json_nested(900),
                                  yaml_nested(3000, flow=False)])
def test_deep_documents_are_refused_with_a_message(text):
    # 100,000 levels used to crash libyaml's composer (SIGSEGV) and overflow json's recursion;
    # 900 levels parsed and then overflowed every recursive walk after it.
    with pytest.raises(LoadError, match=f"nests more than {MAX_DEPTH} levels deep"):
        load_text(text, "deep")


def test_depth_limit_is_the_same_for_json_and_yaml():
    # data (1) + a (2) + the lists: the top-level mapping is level 1
    fits, too_deep = MAX_DEPTH - 2, MAX_DEPTH - 1
    assert load_text(json_nested(fits), "ok.json")
    assert load_text(yaml_nested(fits), "ok.yaml")
    for text in (json_nested(too_deep), yaml_nested(too_deep)):
        with pytest.raises(LoadError, match="levels deep"):
            load_text(text, "deep")


def test_depth_counts_through_aliases():
    levels = ["a0: &a0 [x]"] + [f"a{n}: &a{n} [*a{n - 1}]" for n in range(1, MAX_DEPTH + 5)]
    with pytest.raises(LoadError, match="levels deep"):
        load_text("\n".join(levels) + "\n", "chain.yaml")


def test_recursive_alias_is_an_error_not_a_hang():
    with pytest.raises(LoadError, match="refers to a node that contains it|invalid YAML"):
        load_text("a: &a [*a]\n", "loop.yaml")


@pytest.mark.parametrize("text, where", [
    ('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "name": "y"}}', "metadata"),
    ('{"apiVersion": "v1", "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}', "(top level)"),
    ('{"kind": "List", "items": [{"kind": "ConfigMap", "metadata": {}, "data": {"k": 1, "k": 2}}]}', "items[0].data"),
])
def test_json_duplicate_keys_are_rejected_as_yaml_ones_are(text, where):
    with pytest.raises(LoadError, match="already defined") as caught:
        load_text(text, "dup.json")
    assert f"{where}: mapping key" in str(caught.value)
    with pytest.raises(LoadError, match="already defined"):
        load_text(text + "\n" + text, "stream.json")  # a stream of JSON objects, as kubectl reads it
    yaml_text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  name: y\n"
    with pytest.raises(LoadError, match="already defined"):
        load_text(yaml_text, "dup.yaml")


def test_a_large_string_aliased_many_times_is_an_alias_bomb():
    big = "x" * (1 << 20)
    text = f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\ndata:\n  a: &s {big}\n  l: [" + ", ".join(
        ["*s"] * 20_000) + "]\n"
    with pytest.raises(LoadError, match="YAML aliases add 20971"):
        load_text(text, "strings.yaml")


def test_values_without_aliases_are_never_counted_as_an_alias_bomb():
    # 1.2 million values used to be refused as "expands to … values through YAML aliases"
    values = [0] * 1_200_000
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"v": values}}]})
    (doc,) = load_text(text, "big.json")
    assert len(doc.obj["data"]["v"]) == len(values)
    (doc,) = load_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  s: &s [1, 2]\n  t: *s\n", "ok")
    assert doc.obj["data"]["t"] == [1, 2]


def test_lone_surrogates_become_replacement_characters_as_in_go():
    text = HEAD.replace('"a": ', '"\\udc00": ') + '["\\ud800", "\\ud83d\\ude00"]}}'
    (doc,) = load_text(text, "s.json")
    assert doc.obj["data"] == {"\ufffd": ["\ufffd", "\U0001F600"]}
    json.dumps(doc.obj, ensure_ascii=False).encode("utf-8")  # nothing left that UTF-8 cannot carry


def test_lone_surrogate_in_an_attribute_no_longer_breaks_allocate(tmp_path):
    slice_ = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
              "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
                       "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                       "devices": [{"name": "gpu-0", "attributes": {"model": {"string": "SURROGATE"}}}]}}
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
           "spec": {"selectors": [{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].model == "x"'}}]}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "d"},
             "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [slice_, cls, claim, node]})
    path = tmp_path / "s.json"
    path.write_text(text.replace("SURROGATE", "\\ud800"))
    done = subprocess.run([sys.executable, "-m", "gpudra", "allocate", "-f", str(path)], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    assert "Traceback" not in done.stderr, done.stderr
    # a clean "does not fit": the selector ran on the device, whose model is not "x"
    assert "unallocatable on every node" in done.stderr and "error" not in done.stderr, done.stderr


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_integers_of_thousands_of_digits_are_reported_by_field(fmt):
    digits = "1" * 5000
    if fmt == "json":
        text = ('{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": '
                '{"driver": "gpu.nvidia.com", "nodeName": "n", "pool": {"name": "p", "generation": 1, '
                f'"resourceSliceCount": 1}}, "devices": [{{"name": "d", "attributes": {{"a": {{"int": {digits}}}}}}}]}}}}')
    else:
        text = ("apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\nspec:\n  driver: gpu.nvidia.com\n"
                "  nodeName: n\n  pool: {name: p, generation: 1, resourceSliceCount: 1}\n"
                f"  devices:\n  - name: d\n    attributes:\n      a: {{int: {digits}}}\n")
    problems = validate_documents(load_text(text, f"big.{fmt}"))
    assert any("attributes[a].int" in p.path and "64-bit" in p.message for p in problems), problems


def test_input_size_is_limited_before_parsing(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "MAX_INPUT_BYTES", 1000)
    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * 2000 + "\n")
    with pytest.raises(LoadError, match="larger than"):
        load_paths([str(path)])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a: " + b"x" * 2000)))
    with pytest.raises(LoadError, match="larger than"):
        load_paths(["-"])


def test_stdin_that_is_not_utf8_is_a_load_error(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a: \xff\xfe\n")))
    with pytest.raises(LoadError, match="not a UTF-8 text file"):
        load_paths(["-"])
