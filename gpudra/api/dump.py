"""Write objects back as YAML or JSON, keeping the key order they were loaded with: every YAML gpudra writes is
dumped here, in one of two styles.

- `dump_yaml` / `dump_yaml_one`: as kubectl prints objects (list items indented under their key, multi-line strings
  as `|` blocks, no line folding); PyYAML's pure-Python emitter, the C one ignores the indentation override.
- `dump_yaml_data`: reports and large outputs (a scheduled cluster, an explanation, a mig-parted config): the C
  emitter where libyaml is there, PyYAML's default layout. Both write shared sub-objects out in full (no `&id001`
  anchors) and keep non-ASCII text as it is.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

import yaml

_LINE_BREAKS = ("\x85", "\u2028", "\u2029")


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if any(mark in value for mark in _LINE_BREAKS):
        # YAML 1.1 reads these as line breaks in plain and block scalars; only the escaped form survives.
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


class _PureDumper(yaml.SafeDumper):
    """Block-style YAML with list items indented under their key, as kubectl prints them.

    The pure-Python dumper is used because the C dumper ignores the indentation override.
    """

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:  # noqa: D401
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:  # shared sub-objects are written out, never as &id anchors
        return True


# the base is chosen at import (the C dumper where PyYAML has libyaml), so mypy sees an Any base
class _FastDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    def ignore_aliases(self, data: Any) -> bool:  # shared sub-objects are written out, never as &id anchors
        return True


_PureDumper.add_representer(str, _str_representer)


def dump_yaml_one(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_PureDumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1_000_000)


def dump_yaml_data(data: Any, *, sort_keys: bool = False, width: int | None = None, documents: bool = False) -> str:
    """`data` in the fast style (see the module doc); `documents`: `data` is a list of documents, `---` between."""
    dump = yaml.dump_all if documents else yaml.dump
    return dump(data, Dumper=_FastDumper, sort_keys=sort_keys, default_flow_style=False, allow_unicode=True,
                width=width)


def dump_yaml(objs: Iterable[Any]) -> str:
    """Documents separated by `---`, each in the key order it has."""
    return "---\n".join(dump_yaml_one(obj) for obj in objs)


def dump_json(objs: Iterable[Any]) -> str:
    """One object as is; several as a v1 List (what `kubectl get -o json` prints)."""
    items = list(objs)
    if len(items) == 1:
        return json.dumps(items[0], indent=2, ensure_ascii=False) + "\n"
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2, ensure_ascii=False) + "\n"
