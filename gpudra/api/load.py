"""Read Kubernetes manifests: files, directories, stdin; multi-document YAML, JSON, and `List` kinds.

Timestamps stay strings (the API represents them as RFC 3339 strings) and duplicate keys are
rejected, in JSON as in YAML, as kubectl's strict decoding does, rather than silently keeping the last value.

Hostile input is bounded before any work depends on its shape: a file may hold at most MAX_INPUT_BYTES,
a document may nest at most MAX_DEPTH levels (checked without recursion, before anything recursive reads
it), YAML aliases may add at most MAX_ALIAS_EXPANSION values and characters when expanded, integers too
long for Python's int conversion become out-of-range stand-ins that validation reports by field, and
JSON's unpaired UTF-16 surrogates become U+FFFD, as Go's decoder (the API server's) makes them.

YAML is read by yaml-rs where that provably means what PyYAML reads (fast_yaml: 6x faster on a large dump), else
by PyYAML; errors always come from PyYAML's reading, with its lines and columns.
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import yaml

from gpudra.api import fast_yaml
from gpudra.api.limits import MAX_ALIAS_EXPANSION, MAX_DEPTH, too_deep, too_large
# the loader's error and size limit are this module's API too (re-exported)
from gpudra.api.limits import MAX_INPUT_BYTES as MAX_INPUT_BYTES, LoadError as LoadError, LoadErrors as LoadErrors
from gpudra.api.yaml_loader import ManifestLoader
from gpudra.api.load_json import NOT_JSON, SURROGATE_ESCAPE, check_json_document, json_loads, json_stream

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


NO_OBJECTS = "no Kubernetes objects in it (empty, or only comments)"
# `{{ .Values.x }}`, `{{- include "x" . }}`, `{{ if … }}`: Go template actions, as Helm charts use them
_TEMPLATE_ACTION = re.compile(r"\{\{-?\s*(?:[.$(\"]|/\*|[a-z]+\b)[^\n]*?\}\}")
_KUSTOMIZE_KEYS = frozenset({"resources", "bases", "patches", "patchesStrategicMerge", "patchesJson6902",
                             "components", "helmCharts", "configMapGenerator", "secretGenerator"})


def _template_error(text: str, source: str) -> LoadError | None:
    """A Helm (Go) template, named as such: its `{{ }}` actions are not YAML."""
    match = _TEMPLATE_ACTION.search(text)
    if match is None:
        return None
    line = text.count("\n", 0, match.start()) + 1
    return LoadError(source, "looks like a Helm template ({{ … }}), not a manifest: render it first "
                     "(`helm template CHART | gpudra … -f -`)", line)


def _helm_chart_error(source: str) -> LoadError | None:
    """Chart.yaml, and values files beside one: a Helm chart's own files (a values.yaml with `resources:`
    is no kustomization, and Chart.yaml no object without a kind)."""
    name = os.path.basename(source)
    if name == "Chart.yaml" or name.startswith("values") and os.path.isfile(
            os.path.join(os.path.dirname(source), "Chart.yaml")):
        return LoadError(source, "part of a Helm chart, not a manifest: render it first "
                         "(`helm template CHART | gpudra … -f -`)")
    return None


def _kustomization_error(value: Any, source: str, line: int | None) -> LoadError | None:
    if not isinstance(value, dict):
        return None
    # without apiVersion and kind, the keys decide only in a file named as kustomize wants it (or on stdin)
    named = "kustomization" in os.path.basename(source).lower() or source == "<stdin>"
    if value.get("kind") in ("Kustomization", "Component") and "kustomize" in str(value.get("apiVersion", "")) or (
            named and "kind" not in value and "apiVersion" not in value and _KUSTOMIZE_KEYS & set(map(str, value))):
        return LoadError(source, "looks like a Kustomize kustomization, not a manifest: build it first "
                         "(`kubectl kustomize DIR | gpudra … -f -`)", line)
    return None


@dataclass
class Document:
    obj: dict[str, Any]
    source: str
    index: int  # 1-based position of the document in its file
    item: int | None = None  # 0-based position in the document's `items` when it came from a List

    @property
    def where(self) -> str:
        """`doc 3`, or `doc 1 items[4]` for an object of a `kind: List` (a `kubectl get -o json` dump is one
        document of thousands of items)."""
        return f"doc {self.index}" if self.item is None else f"doc {self.index} items[{self.item}]"

    @property
    def kind(self) -> str:
        kind = self.obj.get("kind") if isinstance(self.obj, dict) else None
        return kind if isinstance(kind, str) else ""

    @property
    def api_version(self) -> str:
        version = self.obj.get("apiVersion") if isinstance(self.obj, dict) else None
        return version if isinstance(version, str) else ""

    @property
    def metadata(self) -> dict[str, Any]:
        meta = self.obj.get("metadata") if isinstance(self.obj, dict) else None
        return meta if isinstance(meta, dict) else {}

    @property
    def name(self) -> str:
        name = self.metadata.get("name")
        if isinstance(name, str) and name:
            return name
        generate = self.metadata.get("generateName")
        return f"{generate}*" if isinstance(generate, str) and generate else ""

    @property
    def namespace(self) -> str:
        namespace = self.metadata.get("namespace")
        return namespace if isinstance(namespace, str) else ""

    def label(self) -> str:
        return f"{self.source}:{self.where} ({self.kind or '?'}/{self.name})"


def _is_list_kind(obj: dict[str, Any]) -> bool:
    kind = obj.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and isinstance(obj.get("items"), list)


def _expand(obj: Any, source: str, index: int, position: int | None = None) -> Iterable[Document]:
    if isinstance(obj, dict) and _is_list_kind(obj):
        for item_position, item in enumerate(obj["items"]):
            if item is None:
                continue
            if isinstance(item, dict) and "apiVersion" not in item and isinstance(obj.get("apiVersion"), str):
                # `kubectl get -o yaml` lists carry apiVersion/kind per item; typed lists may not.
                if obj["kind"] != "List":
                    item = {"apiVersion": obj["apiVersion"], "kind": obj["kind"][: -len("List")], **item}
            yield from _expand(item, source, index, item_position if position is None else position)
        return
    yield Document(obj if isinstance(obj, dict) else obj, source, index, position)


def _mark(exc: Exception) -> tuple[int | None, int | None]:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return None, None
    return mark.line + 1, mark.column + 1


def _yaml_message(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem:
        return f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    return f"invalid YAML: {exc}"


def load_text(text: str, source: str = "<stdin>") -> list[Document]:
    """Parse one file's content. JSON (a single value, possibly a List) or multi-document YAML."""
    if len(text) > MAX_INPUT_BYTES:
        raise LoadError(source, too_large(len(text)))
    text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark (Windows editors)
    chart_file = _helm_chart_error(source)
    if chart_file is not None:
        raise chart_file
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            value = json_loads(text, source)
            values = value if isinstance(value, list) else [value]
        except json.JSONDecodeError as exc:
            if stripped.startswith("["):
                raise _template_error(text, source) or LoadError(
                    source, f"invalid JSON: {exc.msg}", exc.lineno, exc.colno) from None
            value = NOT_JSON
            if exc.msg == "Extra data":  # a stream of objects, as kubectl reads it
                try:
                    values = json_stream(text, source)
                    value = values
                except json.JSONDecodeError:
                    pass  # e.g. JSON followed by YAML documents: let the YAML parser read it
        if value is not NOT_JSON:
            surrogates = SURROGATE_ESCAPE.search(text) is not None
            docs: list[Document] = []
            for position, item in enumerate(values, start=1):
                check_json_document(item, source, position, surrogates)
                _check_document(item, source, position, None)
                docs.extend(_expand(item, source, position))
            return docs
    plain = _plain_yaml(text)
    if plain:
        fast = _fast_yaml_documents(text, source)
        if fast is not None:
            return fast
    fast_yaml.counts["pyyaml"] += 1
    docs = []
    try:
        for position, start, value in _pyyaml_values(text, source, plain):
            docs.extend(_document_objects(value, source, position, start))
    except yaml.YAMLError as exc:
        line, column = _mark(exc)
        raise _template_error(text, source) or LoadError(source, _yaml_message(exc), line, column) from None
    return docs


def _pyyaml_values(text: str, source: str, plain: bool) -> Iterator[tuple[int, int, Any]]:
    """(position, line, value) of every document that is not empty or null, read by PyYAML within the limits
    (`plain`: _plain_yaml cleared the text of aliases and deep nesting)."""
    _check_yaml_nesting(text, source)
    for position, node in enumerate(yaml.compose_all(text, Loader=ManifestLoader), start=1):
        if node is None:
            continue
        line = node.start_mark.line + 1
        if not plain:
            _check_yaml_shape(node, source, position, line)
        value = _construct(node)
        if value is not None:
            yield position, line, value


def yaml_values(text: str, source: str) -> list[tuple[int, int | None, Any]]:
    """(position, line or None, value) of every document of any YAML text that is not empty or null, read as
    manifests are: within the limits (size, nesting, alias expansion), duplicate keys refused, timestamps kept as
    strings, by yaml-rs where that provably means the same; any problem is a LoadError naming `source`."""
    if len(text) > MAX_INPUT_BYTES:
        raise LoadError(source, too_large(len(text)))
    text = text.removeprefix("\ufeff")
    plain = _plain_yaml(text)
    if plain:
        fast = fast_yaml.documents(text)
        if fast is not None:
            return [(position, None, value) for position, value in fast if value is not None]
    try:
        return list(_pyyaml_values(text, source, plain))
    except yaml.YAMLError as exc:
        line, column = _mark(exc)
        raise LoadError(source, _yaml_message(exc), line, column) from None


def _fast_yaml_documents(text: str, source: str) -> list[Document] | None:
    """The documents as yaml-rs reads them where that provably means what PyYAML reads (fast_yaml), else None.
    A problem found in them (LoadError) also gives None: PyYAML's reading says it with the document's line."""
    values = fast_yaml.documents(text)
    if values is None:
        return None
    docs: list[Document] = []
    try:
        for position, value in values:
            if value is not None:
                docs.extend(_document_objects(value, source, position, None))
    except LoadError:
        return None
    fast_yaml.counts["fast"] += 1
    return docs


def _document_objects(value: Any, source: str, position: int, line: int | None) -> Iterable[Document]:
    """One parsed YAML document checked (a Kubernetes object, no kustomization) and expanded (a List's items)."""
    _check_document(value, source, position, line)
    kustomization = _kustomization_error(value, source, line)
    if kustomization is not None:
        raise kustomization
    return _expand(value, source, position)


def _construct(node: yaml.Node) -> Any:
    loader = ManifestLoader("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


_C_COMPOSER_SAFE_DEPTH = 1000  # libyaml's composer recurses in C: a deep enough document overflows the stack
_COLLECTION_START = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_COLLECTION_END = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _check_yaml_nesting(text: str, source: str) -> None:
    """Refuse YAML nested deeper than MAX_DEPTH before the (recursive) composer sees it.

    Block collections nest only by indentation (at most two levels per column: a mapping and the
    sequence that is its value) and flow collections by brackets, so most files are cleared by counting;
    the rest are checked on the event stream, which libyaml produces without recursion.
    """
    longest = max((len(line) for line in text.splitlines()), default=0)
    if 2 * (longest + 2) + 2 * text.count("[") + text.count("{") <= _C_COMPOSER_SAFE_DEPTH:
        return
    depth, document = 0, 0
    try:
        for event in yaml.parse(text, Loader=ManifestLoader):
            if isinstance(event, _COLLECTION_START):
                depth += 1
                if depth > MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark is not None else None
                    raise LoadError(source, too_deep(document, f"more than {MAX_DEPTH}"), line)
            elif isinstance(event, _COLLECTION_END):
                depth -= 1
            elif isinstance(event, yaml.DocumentStartEvent):
                document += 1
    except yaml.MarkedYAMLError as error:
        # PyYAML >= 6.0.4's libyaml stops at its own nesting limit (1,000) before our count sees the
        # events: the same refusal, in the same words
        if "maximum nesting depth" not in str(error.problem or ""):
            raise
        line = error.problem_mark.line + 1 if error.problem_mark else None
        raise LoadError(source, too_deep(max(document, 1), f"more than {MAX_DEPTH}"), line) from None


# An alias (`*name`) starts a node: after indentation, an indicator, a flow bracket or a comma, then a name.
_ALIAS = re.compile(r"(?:^|[ \t\[{,])\*[^ \t\r\n\[\]{},]", re.MULTILINE)


def _plain_yaml(text: str) -> bool:
    """Whether no document of `text` can hold an alias or nest deeper than MAX_DEPTH, so that the walk over the
    composed graph (_check_yaml_shape) has nothing to find: a 13 MB cluster dump is then read a quarter faster.

    Nesting: a block collection starts at a greater column than its parent's, except a sequence that is a
    mapping's value (same column), so a chain of block collections gains at most two levels per column; each
    flow bracket adds at most one. Counting brackets inside strings and lines of block scalars only overestimates.
    Where a block collection can start on a line: after the indentation (and a `---` marker) and the run of compact
    indicators (`- - key: v` starts a mapping at column 4).
    """
    if "*" in text and _ALIAS.search(text):
        return False
    # 2 * (widest + 1) + brackets <= MAX_DEPTH, where a block start (indentation, `---` and indicators) is a run of
    # ` \t-?:` at least as long: a search for a run one longer than allowed is exact enough and 20x faster
    widest = (MAX_DEPTH - text.count("[") - text.count("{")) // 2 - 1
    return widest >= 0 and re.compile(r"\n[ \t?:-]{%d}" % (widest + 1)).search("\n" + text) is None


def _node_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return node.value if isinstance(node, yaml.SequenceNode) else []


def _check_yaml_shape(root: yaml.Node, source: str, position: int, line: int) -> None:
    """Depth through aliases, recursive aliases and alias bombs, on the composed graph without recursion.

    An alias is the same node reached twice, so a document's expanded size (one per value plus its
    characters) is computed once per node; what aliases add is the expanded size minus the size of the
    distinct nodes: zero for a document without aliases, however large.
    """
    weights: dict[int, int] = {}
    heights: dict[int, int] = {}
    unique = 0
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            active.discard(key)
            children = _node_children(node)
            weights[key] = 1 + sum(weights[id(child)] for child in children)
            heights[key] = height = 1 + max((heights[id(child)] for child in children), default=0)
            if height > MAX_DEPTH:
                raise LoadError(source, too_deep(position, f"more than {MAX_DEPTH}"), node.start_mark.line + 1)
            unique += 1
            continue
        if key in weights:
            continue
        if key in active:
            raise LoadError(source, f"document {position}: an alias refers to a node that contains it",
                            node.start_mark.line + 1)
        if isinstance(node, yaml.ScalarNode):
            weights[key] = 1 + len(node.value)
            heights[key] = 0
            unique += weights[key]
            continue
        active.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _node_children(node) if id(child) not in weights)
    extra = weights[id(root)] - unique
    if extra > MAX_ALIAS_EXPANSION:
        raise LoadError(source, f"document {position}: YAML aliases add {extra} values and characters when "
                        f"expanded (limit {MAX_ALIAS_EXPANSION})", line)


def _check_document(value: Any, source: str, position: int, line: int | None) -> None:
    if not isinstance(value, dict):
        kind = type(value).__name__
        raise LoadError(
            source,
            f"document {position} is a {_json_type(value)} ({kind}); a Kubernetes object must be a mapping "
            "with apiVersion, kind and metadata",
            line,
        )


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "scalar"


def _read(path: str) -> str:
    source = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            if sys.stdin is None:  # started with stdin closed (`<&-`)
                raise LoadError(source, "stdin is closed")
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1) if hasattr(sys.stdin, "buffer") else None
            if data is None:  # a text stream put in place of stdin (tests, embedding)
                return sys.stdin.read(MAX_INPUT_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_INPUT_BYTES + 1)
        if len(data) > MAX_INPUT_BYTES:
            raise LoadError(source, too_large(len(data)) if path == "-" else too_large(os.path.getsize(path)))
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise LoadError(source, "not a UTF-8 text file") from None
    except FileNotFoundError:
        raise LoadError(path, "no such file or directory") from None
    except IsADirectoryError:
        raise LoadError(path, "is a directory") from None
    except OSError as exc:
        raise LoadError(path, exc.strerror or str(exc)) from None


def read_text(path: str) -> str:
    """One file's (or stdin's, for '-') text, with the loader's limits and error wording (LoadError)."""
    return _read(path)


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files as given; directories walked recursively for *.yaml, *.yml and *.json, in sorted order
    (a directory with none stays in the list, for the loader to report)."""
    files: list[str] = []
    for path in paths:
        if path != "-" and os.path.isdir(path):
            found: list[str] = []
            for root, dirs, names in os.walk(path):
                dirs.sort()
                found.extend(os.path.join(root, n) for n in names if n.endswith(MANIFEST_SUFFIXES))
            files.extend(sorted(found) or [path])
        else:
            files.append(path)
    # A file reached twice (`-f dir -f dir/x.yaml`) would make each object a duplicate of itself.
    seen: set[str] = set()
    unique: list[str] = []
    for path in files:
        identity = path if path == "-" else os.path.realpath(path)
        if identity == "-" or identity not in seen:
            seen.add(identity)
            unique.append(path)
    return unique


_input_frozen = False  # freeze_input was called and thaw_input not yet


def freeze_input() -> None:
    """Keep everything built so far (the input a command read) out of the cycle collector's sight until
    thaw_input: later collections need not walk it again and again (gc.freeze)."""
    global _input_frozen
    gc.freeze()
    _input_frozen = True


def thaw_input() -> None:
    global _input_frozen
    gc.unfreeze()
    _input_frozen = False


@contextmanager
def cycle_collection_paused(join_frozen: bool = False) -> Iterator[None]:
    """Pause Python's cycle collector while a big input is parsed or checked (or the scheduler runs a queue):
    that builds hundreds of thousands of dicts and lists, none of them cyclic garbage, and the collector would
    walk them again and again as they grow (a fifth of the time of loading 2,000 ResourceSlices). The previous
    state is restored. `join_frozen`: where the process already keeps what it read out of the collector's sight
    (freeze_input, as a CLI command does until it ends), what was built joins it, so that the first collection
    afterwards does not walk it all once more."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if join_frozen and _input_frozen:  # (gc.get_freeze_count() walks every frozen object: 20 ms here)
            gc.freeze()  # before the collector is back: its first allocation would trigger a collection
        if enabled:
            gc.enable()


def load_paths(paths: list[str]) -> list[Document]:
    """Every document of every file. A file that cannot be read, or holds no Kubernetes object, is an
    error; all such files are reported together (LoadErrors) after the rest were read, and input with
    no objects at all is an error too: "0 documents, valid" would hide a wrong path or an empty pipe."""
    with cycle_collection_paused():
        return _load_paths(paths)


def _load_paths(paths: list[str]) -> list[Document]:
    documents: list[Document] = []
    errors: list[LoadError] = []
    for path in expand_paths(paths):
        source = "<stdin>" if path == "-" else path
        if path != "-" and os.path.isdir(path):  # a directory without a single manifest file
            errors.append(LoadError(path, f"no {', '.join('*' + s for s in MANIFEST_SUFFIXES)} files in it"))
            continue
        try:
            text = _read(path)
            found = load_text(text, source)
            if not found and not _has_documents(text):
                raise LoadError(source, NO_OBJECTS)
        except LoadError as error:
            errors.append(error)
            continue
        documents.extend(found)
    if errors:
        raise LoadErrors(errors, documents)
    if not documents and paths:
        raise LoadError(", ".join("<stdin>" if p == "-" else p for p in paths), "no Kubernetes objects in the input")
    return documents


def _has_documents(text: str) -> bool:
    """Whether the text held a document (an empty `List` counts: `kubectl get … -o yaml` of nothing)."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return True
    try:
        return any(node is not None for node in yaml.compose_all(text, Loader=ManifestLoader))
    except yaml.YAMLError:
        return False


def load_file(path: str) -> list[Document]:
    return load_paths([path])


def load_objects(paths: list[str]) -> list[dict[str, Any]]:
    return [doc.obj for doc in load_paths(paths)]
