"""Read Kubernetes manifests: files, directories, stdin; multi-document YAML, JSON, and `List` kinds.

Timestamps stay strings (the API represents them as RFC 3339 strings) and duplicate keys are
rejected, as kubectl's strict decoding does, rather than silently keeping the last value.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Iterable

import yaml

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class LoadError(ValueError):
    """A file that cannot be read or parsed; `str()` is a clean message naming the file and line."""

    def __init__(self, source: str, message: str, line: int | None = None, column: int | None = None):
        self.source = source
        self.message = message
        self.line = line
        self.column = column
        where = source if line is None else f"{source}:{line}" + (f":{column}" if column else "")
        super().__init__(f"{where}: {message}")


class _ManifestLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """Safe loader without the YAML 1.1 timestamp type and with duplicate-key detection."""


_ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a scalar", key_node.start_mark
            ) from None
        if key in result:
            raise yaml.constructor.ConstructorError(
                None, None, f"mapping key {key!r} already defined", key_node.start_mark
            )
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_ManifestLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


@dataclass
class Document:
    obj: dict[str, Any]
    source: str
    index: int  # 1-based position of the document in its file

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
        return f"{self.source}:doc {self.index} ({self.kind or '?'}/{self.name})"


def _is_list_kind(obj: dict[str, Any]) -> bool:
    kind = obj.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and isinstance(obj.get("items"), list)


def _expand(obj: Any, source: str, index: int) -> Iterable[Document]:
    if isinstance(obj, dict) and _is_list_kind(obj):
        for item in obj["items"]:
            if item is None:
                continue
            if isinstance(item, dict) and "apiVersion" not in item and isinstance(obj.get("apiVersion"), str):
                # `kubectl get -o yaml` lists carry apiVersion/kind per item; typed lists may not.
                if obj["kind"] != "List":
                    item = {"apiVersion": obj["apiVersion"], "kind": obj["kind"][: -len("List")], **item}
            yield from _expand(item, source, index)
        return
    yield Document(obj if isinstance(obj, dict) else obj, source, index)


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
    text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark (Windows editors)
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            value = json.loads(text)
            values = value if isinstance(value, list) else [value]
        except json.JSONDecodeError as exc:
            if stripped.startswith("["):
                raise LoadError(source, f"invalid JSON: {exc.msg}", exc.lineno, exc.colno) from None
            value = _NOT_JSON
            if exc.msg == "Extra data":  # a stream of objects, as kubectl reads it
                try:
                    values = _json_stream(text)
                    value = values
                except json.JSONDecodeError:
                    pass  # e.g. JSON followed by YAML documents: let the YAML parser read it
        if value is not _NOT_JSON:
            docs: list[Document] = []
            for position, item in enumerate(values, start=1):
                _check_document(item, source, position, None)
                docs.extend(_expand(item, source, position))
            return docs
    docs = []
    try:
        for position, node in enumerate(yaml.compose_all(text, Loader=_ManifestLoader), start=1):
            if node is None:
                continue
            line = node.start_mark.line + 1
            value = _construct(node)
            if value is None:
                continue
            _check_document(value, source, position, line)
            docs.extend(_expand(value, source, position))
    except yaml.YAMLError as exc:
        line, column = _mark(exc)
        raise LoadError(source, _yaml_message(exc), line, column) from None
    return docs


_NOT_JSON = object()


def _json_stream(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    values: list[Any] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return values
        value, position = decoder.raw_decode(text, position)
        values.append(value)


def _construct(node: yaml.Node) -> Any:
    loader = _ManifestLoader("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


MAX_ALIAS_EXPANSION = 1_000_000  # extra values that YAML aliases may add to a document when expanded


def _check_shape(value: Any, source: str, position: int, line: int | None) -> None:
    """Reject alias bombs: a few aliased nodes that expand to millions of values would make every walk explode.

    The expanded size is computed once per distinct node (memoized by identity), so this is linear in the input.
    """
    sizes: dict[int, int] = {}
    unique = 0
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, children_done = stack.pop()
        if id(item) in sizes:
            continue
        children = list(item.values()) if isinstance(item, dict) else item
        containers = [c for c in children if isinstance(c, (dict, list))]
        if not children_done:
            stack.append((item, True))
            stack.extend((c, False) for c in containers if id(c) not in sizes)
            continue
        unique += 1
        sizes[id(item)] = 1 + len(children) + sum(sizes.get(id(c), 0) for c in containers)
    expanded = sizes.get(id(value), 0)
    if expanded - unique > MAX_ALIAS_EXPANSION:
        raise LoadError(source, f"document {position} expands to {expanded} values through YAML aliases "
                        f"(limit {MAX_ALIAS_EXPANSION} extra)", line)


def _check_document(value: Any, source: str, position: int, line: int | None) -> None:
    if isinstance(value, (dict, list)):
        _check_shape(value, source, position, line)
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
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except UnicodeDecodeError:
        raise LoadError(path, "not a UTF-8 text file") from None
    except FileNotFoundError:
        raise LoadError(path, "no such file or directory") from None
    except IsADirectoryError:
        raise LoadError(path, "is a directory") from None
    except OSError as exc:
        raise LoadError(path, exc.strerror or str(exc)) from None


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files as given; directories walked recursively for *.yaml, *.yml and *.json, in sorted order."""
    files: list[str] = []
    for path in paths:
        if path != "-" and os.path.isdir(path):
            found = []
            for root, dirs, names in os.walk(path):
                dirs.sort()
                found.extend(os.path.join(root, n) for n in names if n.endswith(MANIFEST_SUFFIXES))
            files.extend(sorted(found))
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


def load_paths(paths: list[str]) -> list[Document]:
    documents: list[Document] = []
    for path in expand_paths(paths):
        source = "<stdin>" if path == "-" else path
        documents.extend(load_text(_read(path), source))
    return documents


def load_file(path: str) -> list[Document]:
    return load_paths([path])


def load_objects(paths: list[str]) -> list[dict[str, Any]]:
    return [doc.obj for doc in load_paths(paths)]
