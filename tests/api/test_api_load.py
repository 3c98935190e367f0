"""Loading manifests: files, directories, stdin, multi-document YAML, JSON, List kinds, clean errors."""

import os

import pytest

from gpudra.api.load import LoadError, load_paths, load_text

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "api")


def test_multi_document_yaml_skips_empty_documents_and_expands_lists():
    docs = load_paths([os.path.join(DATA, "mixed.yaml")])
    assert [(d.kind, d.name, d.index) for d in docs] == [("DeviceClass", "example.com", 1), ("Node", "n1", 3),
                                                         ("Node", "n2", 3)]
    assert docs[0].source.endswith("mixed.yaml")


def test_json_document_and_properties():
    (doc,) = load_paths([os.path.join(DATA, "claim.json")])
    assert (doc.kind, doc.name, doc.namespace, doc.index) == ("ResourceClaim", "c", "default", 1)


def test_directories_are_walked_recursively_in_sorted_order():
    docs = load_paths([os.path.join(DATA, "dir")])
    assert [os.path.relpath(d.source, DATA) for d in docs] == [
        os.path.join("dir", "b.json")] + [os.path.join("dir", "sub", "a.yaml")] * 3


def test_stdin(monkeypatch):
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: Node\napiVersion: v1\nmetadata: {name: x}\n"))
    (doc,) = load_paths(["-"])
    assert doc.source == "<stdin>" and doc.name == "x"


def test_stdin_with_only_separators_is_named_stdin(monkeypatch):
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO("---\n---\n"))
    with pytest.raises(LoadError) as info:
        load_paths(["-"])
    assert str(info.value).startswith("<stdin>: no Kubernetes objects")


def test_two_objects_pasted_without_a_separator_are_named_as_such():
    # an article's blocks copied one after another into one file, without `---` between them
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\n"
    with pytest.raises(LoadError) as info:
        load_text(text, "pasted.yaml")
    assert str(info.value).startswith("pasted.yaml:4:1: invalid YAML: mapping key 'apiVersion' already defined")
    assert "`---`" in str(info.value)
    with pytest.raises(LoadError) as nested:  # a key repeated inside an object is only that
        load_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\n", "twice.yaml")
    assert "`---`" not in str(nested.value)


def test_a_helm_chart_directory_is_named_as_a_chart_not_as_kustomize_or_objects_without_kind(tmp_path):
    from gpudra.api.load import LoadErrors

    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: gpu\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("replicas: 1\nresources:\n  limits: {cpu: 1}\n")  # `resources:` as Helm has it
    (chart / "values.schema.json").write_text('{"type": "object"}')
    (chart / "templates" / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Release.Name }}\n")
    with pytest.raises(LoadErrors) as info:
        load_paths([str(chart)])
    messages = {os.path.relpath(e.source, chart): e.message for e in info.value.errors}
    assert set(messages) == {"Chart.yaml", "values.yaml", "values.schema.json", os.path.join("templates", "pod.yaml")}
    for name in ("Chart.yaml", "values.yaml", "values.schema.json"):
        assert messages[name].startswith("part of a Helm chart, not a manifest: render it first"), messages[name]
    assert messages[os.path.join("templates", "pod.yaml")].startswith("looks like a Helm template")
    # outside a chart, a settings file that happens to have `resources:` is not called a kustomization
    (tmp_path / "settings.yaml").write_text("resources:\n- gpu\n")
    (settings,) = load_paths([str(tmp_path / "settings.yaml")])
    assert settings.obj == {"resources": ["gpu"]}
    (tmp_path / "kustomization.yaml").write_text("resources:\n- a.yaml\n")
    with pytest.raises(LoadError, match="Kustomize"):
        load_paths([str(tmp_path / "kustomization.yaml")])


def test_a_closed_stdin_is_a_load_error(monkeypatch):
    monkeypatch.setattr("sys.stdin", None)  # `gpudra … -f - <&-`: Python sets sys.stdin to None
    with pytest.raises(LoadError, match="^<stdin>: stdin is closed"):
        load_paths(["-"])


def test_typed_list_items_inherit_kind():
    docs = load_text("apiVersion: v1\nkind: NodeList\nitems:\n- metadata: {name: a}\n", "l.yaml")
    assert docs[0].kind == "Node" and docs[0].obj["apiVersion"] == "v1"


def test_items_of_a_list_are_located_by_their_position_in_it():
    """A `kubectl get -o json` dump is one document: every problem in it was located as "doc 1"."""
    from gpudra.api.validate import validate_documents

    text = ('{"apiVersion": "v1", "kind": "List", "items": ['
            '{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "ok"}, "spec": {}},'
            '{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "Bad_Name"}, "spec": {}}'
            ']}')
    docs = load_text(text, "dump.json")
    assert [d.where for d in docs] == ["doc 1 items[0]", "doc 1 items[1]"]
    (problem,) = [p for p in validate_documents(docs) if p.severity == "error"]
    assert str(problem).startswith("dump.json:doc 1 items[1] (DeviceClass/Bad_Name): metadata.name: ")
    assert problem.to_dict()["item"] == 1
    (plain,) = load_text("apiVersion: v1\nkind: Node\nmetadata: {name: n}\n", "n.yaml")
    assert plain.where == "doc 1" and plain.label() == "n.yaml:doc 1 (Node/n)"


def test_timestamps_stay_strings():
    (doc,) = load_text("kind: X\nmetadata:\n  creationTimestamp: 2025-01-01T00:00:00Z\n", "t.yaml")
    assert doc.obj["metadata"]["creationTimestamp"] == "2025-01-01T00:00:00Z"


@pytest.mark.parametrize("text, fragment", [
    ("a: 1\na: 2\n", "already defined"),
    ("a: [1\n", "invalid YAML"),
    ("- 1\n- 2\n", "must be a mapping"),
    ("[1, 2", "invalid JSON"),
    ("just a string\n", "must be a mapping"),
    ("a: b: c\n", "invalid YAML"),
])
def test_unparseable_input_gives_located_load_errors(text, fragment):
    with pytest.raises(LoadError) as info:
        load_text(text, "bad.yaml")
    message = str(info.value)
    assert message.startswith("bad.yaml:") and fragment in message
    assert "Traceback" not in message


def test_missing_file_is_a_load_error():
    with pytest.raises(LoadError, match="no such file"):
        load_paths([os.path.join(DATA, "does-not-exist.yaml")])


def test_alias_bombs_are_rejected_quickly():
    levels = ["a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    for position, name in enumerate("bcdefg"):
        previous = "abcdefg"[position]
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    levels.append("h: [" + ", ".join(["*g"] * 9) + "]")
    with pytest.raises(LoadError, match="YAML aliases add"):
        load_text("\n".join(levels) + "\n", "bomb.yaml")
    (doc,) = load_text("base: &b {x: 1}\nother: *b\n", "ok.yaml")
    assert doc.obj["other"] == {"x": 1}


@pytest.mark.parametrize("token", ["0x_", "0b_", "+0x_", "-0b__"])
def test_an_int_look_alike_without_digits_is_a_string_not_a_crash(token):
    """PyYAML's int pattern takes `0x_`, then its constructor finds no digit; Go's YAML (the API server's) reads
    a string, and so does the loader (it used to end in an internal error)."""
    (document,) = load_text(f"kind: ConfigMap\ndata:\n  a: {token}\n  b: 0x1_F\n")
    assert document.obj["data"] == {"a": token, "b": 31}
