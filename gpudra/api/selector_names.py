"""Selectors checked against the names the given ResourceSlices publish (`gpudra validate -f claims -f slices`).

`device.attributes["gpu.nvidia.com"].prodcutName` compiles (the API server knows no slices), but on every device
of that domain the lookup fails ("no such key"), and kube-scheduler then allocates nothing for the claim. Where
slices of the domain are given, a name that none of their devices publishes, in that map, is reported with the
published name it is closest to, or with the other map when the name is published there (`memory` is a capacity,
not an attribute). Only the reads `gpudra.cel.reads` can name are checked (a selector that iterates a map or
uses optional access `?` is left alone): what a selector reads is taken from its checked syntax tree, not its text.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Iterator

MAPS = ("attributes", "capacity")
NOUN = {"attributes": "an attribute", "capacity": "a capacity"}


@dataclass
class Published:
    """The names a domain's devices publish in the given slices, per map."""

    attributes: set[str] = field(default_factory=set)
    capacity: set[str] = field(default_factory=set)

    def names(self, table: str) -> set[str]:
        return self.attributes if table == "attributes" else self.capacity


def published_names(slices: list[dict[str, Any]]) -> dict[str, Published]:
    """Domain → names, from resource.k8s.io/v1 ResourceSlices: a name without a domain is the driver's
    (k8s.io/api resource/v1 QualifiedName)."""
    out: dict[str, Published] = {}
    for obj in slices:
        spec = _mapping(obj.get("spec") if isinstance(obj, dict) else None)
        driver = spec.get("driver")
        if not isinstance(driver, str):
            continue
        for device in spec.get("devices") or []:
            if not isinstance(device, dict):
                continue
            for table in MAPS:
                entries = device.get(table)
                for name in entries if isinstance(entries, dict) else ():
                    domain, _, identifier = name.rpartition("/") if "/" in name else (driver, "", name)
                    out.setdefault(domain, Published()).names(table).add(identifier)
    return out


def selector_expressions(obj: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(field path, expression) of every CEL selector of a v1 DeviceClass, ResourceClaim or ResourceClaimTemplate."""
    kind = obj.get("kind")
    spec = _mapping(obj.get("spec"))
    if kind == "DeviceClass":
        yield from _selectors(spec.get("selectors"), "spec.selectors")
        return
    base = "spec"
    if kind == "ResourceClaimTemplate":
        spec, base = _mapping(spec.get("spec")), "spec.spec"
    elif kind != "ResourceClaim":
        return
    devices = _mapping(spec.get("devices"))
    for index, request in enumerate(devices.get("requests") or []):
        if not isinstance(request, dict):
            continue
        where = f"{base}.devices.requests[{index}]"
        if isinstance(request.get("exactly"), dict):
            yield from _selectors(request["exactly"].get("selectors"), f"{where}.exactly.selectors")
        for position, sub in enumerate(request.get("firstAvailable") or []):
            if isinstance(sub, dict):
                yield from _selectors(sub.get("selectors"), f"{where}.firstAvailable[{position}].selectors")


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _selectors(selectors: Any, path: str) -> Iterator[tuple[str, str]]:
    for index, selector in enumerate(selectors if isinstance(selectors, list) else []):
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expression = cel.get("expression") if isinstance(cel, dict) else None
        if isinstance(expression, str):
            yield f"{path}[{index}].cel.expression", expression


def name_problems(expression: str, published: dict[str, Published], version: str | None, consumable_capacity: bool,
                  list_type_attributes: bool) -> list[str]:
    """What `expression` reads that no given device of the domain publishes, each with its likely meaning."""
    from gpudra.cel import CELCompileError, compile_selector

    if "?" in expression:  # optional access (`.?name`, `[?key]`): a missing name is an answer, not an error
        return []
    try:
        selector = compile_selector(expression, version=version, consumable_capacity=consumable_capacity,
                                    list_type_attributes=list_type_attributes)
    except (CELCompileError, ValueError):
        return []  # reported as a compile error
    problems = []
    for read in selector.reads or ():
        if len(read) != 3 or read[0] not in MAPS:
            continue
        table, domain, name = read
        names = published.get(domain)
        if names is None:
            close = difflib.get_close_matches(domain, sorted(published), n=1, cutoff=0.8)
            if close:
                problems.append(f"device.{table}[\"{domain}\"]: no given ResourceSlice publishes names in the domain "
                                f"{domain!r}; did you mean {close[0]!r}?")
            continue
        if name in names.names(table):
            continue
        other = "capacity" if table == "attributes" else "attributes"
        where = f'device.{table}["{domain}"].{name}'
        if name in names.names(other):
            usage = '.compareTo(quantity("16Gi")) >= 0' if other == "capacity" else ""
            problems.append(f"{where}: {name!r} is {NOUN[other]} of {domain}, not {NOUN[table]}: write "
                            f'device.{other}["{domain}"].{name}{usage}')
            continue
        close = difflib.get_close_matches(name, sorted(names.names(table)), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else (
            f" (published: {', '.join(sorted(names.names(table))) or 'none'})")
        problems.append(f"{where}: no device of {domain} in the given ResourceSlices publishes {NOUN[table]} named "
                        f"{name!r}: the lookup fails on each of them (\"no such key\") and kube-scheduler allocates "
                        f"nothing for the claim{hint}")
    return problems
