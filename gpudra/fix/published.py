"""`validate --fix` repairs that need to know what the cluster publishes.

Given the ResourceSlices (from the manifests, or read from a live cluster), a selector's comparison of an
attribute with a literal is checked against the published devices: a name written another way is replaced by the
published name (one vocabulary: gpudra.vocabulary), a value that differs only in case and punctuation
by the published value (`NVIDIA-H100-80GB-HBM3` -> `NVIDIA H100 80GB HBM3`), and a topology attribute compared
with a literal ("on NVLink mesh-0") becomes `matchAttribute` on that attribute: the GPUs of the request share
one NVLink domain, whichever it is (a domain id names one node's board, so pinning it would pin a node).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from gpudra.api.schema.types import as_list
from gpudra.vocabulary import TOPOLOGY_ATTRIBUTES, published_name, same_value

# `device.attributes["domain"].name == 'value'` (either quote style, either side), one clause of a conjunction
_ATTRIBUTE = r"""device\.attributes\[\s*(['"])(?P<domain>[^'"]+)\1\s*\]\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)"""
_LITERAL = r"""(['"])(?P<value>[^'"\\]*)\4"""
_COMPARISON = re.compile(rf"^\s*{_ATTRIBUTE}\s*==\s*{_LITERAL}\s*$")
_LOOKUP = re.compile(_ATTRIBUTE)


@dataclass
class PublishedDevices:
    """Attribute names and string values the given devices carry, per domain."""

    names: dict[str, set[str]] = field(default_factory=dict)
    values: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    capacities: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def from_slices(cls, slices: list[dict[str, Any]]) -> "PublishedDevices":
        published = cls()
        for obj in slices:
            spec = obj.get("spec") if isinstance(obj, dict) else None
            if not isinstance(spec, dict) or not isinstance(spec.get("driver"), str):
                continue
            driver = spec["driver"]
            for device in as_list(spec.get("devices")):
                capacity = device.get("capacity") if isinstance(device, dict) else None
                for qualified in capacity if isinstance(capacity, dict) else ():
                    domain, _, name = qualified.rpartition("/")
                    published.capacities.setdefault(domain or driver, set()).add(name)
                attributes = device.get("attributes") if isinstance(device, dict) else None
                for qualified, value in (attributes or {}).items() if isinstance(attributes, dict) else ():
                    domain, _, name = qualified.rpartition("/")
                    domain = domain or driver
                    published.names.setdefault(domain, set()).add(name)
                    if isinstance(value, dict):
                        for typed in value.values():
                            if isinstance(typed, (str, int)) and not isinstance(typed, bool):
                                published.values.setdefault((domain, name), set()).add(str(typed))
        return published

    @classmethod
    def driver_vocabulary(cls) -> "PublishedDevices":
        """The attribute names gpudra's driver publishes, without values (no devices at hand)."""
        from gpudra.api.schema.cel_check import DEFAULT_DOMAIN
        from gpudra.vocabulary import PUBLISHED_ATTRIBUTES, STANDARD_ATTRIBUTE_DOMAIN, STANDARD_ATTRIBUTES

        standard = {name.split("/", 1)[1] for name in STANDARD_ATTRIBUTES}
        return cls(names={DEFAULT_DOMAIN: set(PUBLISHED_ATTRIBUTES), STANDARD_ATTRIBUTE_DOMAIN: standard})

    def __bool__(self) -> bool:
        return bool(self.names)

    def knows(self, domain: str, name: str, table: str = "attributes") -> bool:
        return name in (self.capacities if table == "capacity" else self.names).get(domain, ())


Note = Callable[[str, str], None]  # (field path, text)


def repair_request(request: dict[str, Any], devices: dict[str, Any], path: str, published: PublishedDevices,
                   note: Note, caution: Note) -> None:
    """Check an `exactly` request's selectors against the published devices; see the module docstring."""
    exactly = request.get("exactly")
    if not isinstance(exactly, dict) or not isinstance(exactly.get("selectors"), list):
        return
    kept = []
    for position, selector in enumerate(exactly["selectors"]):
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expression = cel.get("expression") if isinstance(cel, dict) else None
        if not isinstance(cel, dict) or not isinstance(expression, str):
            kept.append(selector)
            continue
        where = f"{path}.exactly.selectors[{position}].cel.expression"
        expression = _rename_attributes(expression, published, where, note)
        clauses = _conjuncts(expression)
        remaining = []
        for clause in clauses or [expression]:
            match = _COMPARISON.match(clause) if clauses else None
            if match is None or not published.knows(match["domain"], match["name"]):
                remaining.append(clause)
                continue
            domain, name, value = match["domain"], match["name"], match["value"]
            if name in TOPOLOGY_ATTRIBUTES:
                _match_attribute(request, devices, f"{domain}/{name}", path, note)
                caution(where, f"dropped `{clause.strip()}`: {name} names one node's group of GPUs, so the "
                        f"request now asks for any one group (matchAttribute: {domain}/{name}); add a selector "
                        f"again if you meant that particular {value!r}")
                continue
            remaining.append(_published_value(clause, match, published, where, note, caution))
        expression = " && ".join(c.strip() for c in remaining)
        if expression:
            cel["expression"] = expression
            kept.append(selector)
    if kept:
        exactly["selectors"] = kept
    else:
        exactly.pop("selectors")


def _rename_attributes(expression: str, published: PublishedDevices, where: str, note: Note) -> str:
    def replace(match: re.Match[str]) -> str:
        domain, name = match["domain"], match["name"]
        if domain not in published.names or published.knows(domain, name):
            return match.group(0)
        new = published_name(name, published.names[domain])
        if new is None:
            return match.group(0)
        note(where, f"attribute {domain}/{name} -> {domain}/{new} (the name the devices publish)")
        return match.group(0)[: match.start("name") - match.start()] + new

    return _LOOKUP.sub(replace, expression)


def _published_value(clause: str, match: re.Match[str], published: PublishedDevices, where: str, note: Note,
                     caution: Note) -> str:
    domain, name, value = match["domain"], match["name"], match["value"]
    values = published.values.get((domain, name), set())
    if value in values or not values:
        return clause
    close = sorted(v for v in values if same_value(value, v))
    if len(close) == 1:
        note(where, f"{name} {value!r} -> {close[0]!r} (the value the devices publish)")
        return clause[: match.start("value")] + close[0] + clause[match.end("value"):]
    shown = ", ".join(repr(v) for v in sorted(values)[:8]) + (" …" if len(values) > 8 else "")
    caution(where, f"no device publishes {domain}/{name} == {value!r}; published values: {shown}")
    return clause


def _match_attribute(request: dict[str, Any], devices: dict[str, Any], attribute: str, path: str, note: Note) -> None:
    name = request.get("name")
    constraints = devices.setdefault("constraints", [])
    if not isinstance(constraints, list):
        return
    for constraint in constraints:
        if isinstance(constraint, dict) and constraint.get("matchAttribute") == attribute and (
                name in (constraint.get("requests") or [name])):
            return
    constraints.append({"requests": [name], "matchAttribute": attribute})
    note(path, f"the devices of request {name!r} share one {attribute} (constraint matchAttribute)")


def _conjuncts(expression: str) -> list[str]:
    """The top-level `&&` clauses of an expression, or [] when it is anything else (|| or ?: at the top)."""
    clauses, depth, quote, start, position = [], 0, "", 0, 0
    while position < len(expression):
        char = expression[position]
        if quote:
            if char == "\\":
                position += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and expression.startswith("&&", position):
            clauses.append(expression[start:position])
            start = position + 2
            position += 1
        elif depth == 0 and (expression.startswith("||", position) or char == "?"):
            return []
        position += 1
    clauses.append(expression[start:])
    return clauses
