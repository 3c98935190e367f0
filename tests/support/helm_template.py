"""`helm template` for the Go-template subset gpudra's chart uses, because no Helm binary can be installed here.

Supported (with Go text/template semantics): `{{ .Values.a.b }}`, `.Release.Namespace`, `.Chart.<Field>`,
string and integer literals, pipelines (`x | f y` passes x as f's last argument), the Sprig functions
`default`, `quote`, `toYaml`, `indent`, `nindent`, `if`/`else`/`end` blocks, and `{{-`/`-}}` whitespace
trimming. Anything else raises, so the chart cannot silently use a construct rendered wrongly here.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

import yaml

_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.DOTALL)


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "") and value != [] and value != {}


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=True).rstrip("\n")


def _indent(n: Any, text: Any) -> str:
    return "\n".join(" " * int(n) + line for line in str(text).split("\n"))


FUNCTIONS = {
    "default": lambda fallback, value=None: value if _truthy(value) else fallback,
    "quote": lambda value: '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"',
    "toYaml": _to_yaml,
    "indent": _indent,
    "nindent": lambda n, text: "\n" + _indent(n, text),
}


def _value(token: str, scope: dict[str, Any]) -> Any:
    if token.startswith("."):
        value: Any = scope
        for part in token[1:].split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value
    if token.startswith('"'):
        return shlex.split(token)[0]
    if re.fullmatch(r"-?\d+", token):
        return int(token)
    raise ValueError(f"unsupported template token {token!r}")


def _pipeline(text: str, scope: dict[str, Any]) -> Any:
    result: Any = None
    for position, command in enumerate(part.strip() for part in text.split("|")):
        words = shlex.split(command, posix=False)
        if words[0] in FUNCTIONS:
            args = [_value(w, scope) for w in words[1:]] + ([result] if position else [])
            result = FUNCTIONS[words[0]](*args)
        elif position == 0 and len(words) == 1:
            result = _value(words[0], scope)
        else:
            raise ValueError(f"unsupported template command {command!r}")
    return result


def render(template: str, scope: dict[str, Any]) -> str:
    pieces = _ACTION.split(template)  # text, trim-left, action, trim-right, text, ...
    texts, actions = pieces[0::4], list(zip(pieces[1::4], pieces[2::4], pieces[3::4]))
    texts = list(texts)
    for i, (left, _, right) in enumerate(actions):
        if left:
            texts[i] = texts[i].rstrip()
        if right:
            texts[i + 1] = texts[i + 1].lstrip()
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # per open if: (its condition, in the else branch)

    def rendering() -> bool:
        return all(cond != in_else for cond, in_else in stack)

    for i, text in enumerate(texts):
        if rendering():
            out.append(text)
        if i == len(actions):
            break
        action = actions[i][1]
        if action.startswith("if "):
            stack.append((_truthy(_pipeline(action[3:], scope)), False))
        elif action == "else":
            cond, _ = stack.pop()
            # the else branch renders when the if's condition was false (and everything around renders)
            stack.append((cond, True))
        elif action == "end":
            stack.pop()
        elif rendering():
            value = _pipeline(action, scope)
            out.append("" if value is None else str(value))
    if stack:
        raise ValueError("unterminated if")
    return "".join(out)


def _coalesce(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of given values over the chart's: maps merge key by key, anything else replaces
    (found by comparing with Helm's own engine: `--set webhook.enabled=true` keeps `webhook.replicas`)."""
    merged = dict(defaults)
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _coalesce(merged[key], value)
        else:
            merged[key] = value
    return merged


def helm_template(chart_dir: str, *, namespace: str, values: dict[str, Any] | None = None) -> list[dict]:
    """The objects `helm template <chart> --namespace NS --set ...` would print, in template order."""
    with open(os.path.join(chart_dir, "Chart.yaml"), encoding="utf-8") as fh:
        chart = yaml.safe_load(fh)
    with open(os.path.join(chart_dir, "values.yaml"), encoding="utf-8") as fh:
        merged = _coalesce(yaml.safe_load(fh) or {}, values or {})
    scope = {"Values": merged, "Release": {"Namespace": namespace, "Name": "gpudra"},
             "Chart": {k[0].upper() + k[1:]: v for k, v in chart.items()}}
    objects = []
    templates = os.path.join(chart_dir, "templates")
    for name in sorted(os.listdir(templates)):
        if name.endswith(".yaml"):
            with open(os.path.join(templates, name), encoding="utf-8") as fh:
                text = render(fh.read(), scope)
            objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects
