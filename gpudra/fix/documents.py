"""Mechanical repairs for `gpudra validate --fix`.

Only rewrites whose intent is unambiguous are made: older layouts inside v1 documents, amounts published as
attributes, bare values where typed ones are needed, DeviceClass names that are extended-resource names (and
the references to them), selector lookups written with the attribute name as the domain, and CEL put where
constraints go. Everything else is left for the user, with the remaining problems listed.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from gpudra.api.convert import V1, flatten_device, wrap_request
from gpudra.copying import copy_object
from gpudra.fix.published import PublishedDevices, repair_request
from gpudra.api.load import Document
from gpudra.api.schema.cel_check import DEFAULT_DOMAIN, rewrite_lookup
from gpudra.api.schema.hints import looks_like_quantity
from gpudra.api.schema.names import suggest_dns_name
from gpudra.api.schema.types import as_dict, as_list

_DRIVER_TEST = re.compile(r"device\.driver\s*==\s*['\"]([^'\"]+)['\"]")
_DRIVER_ONLY = re.compile(r"^\s*device\.driver\s*==\s*['\"]([^'\"]+)['\"]\s*$")


@dataclass
class FixResult:
    documents: list[Document]
    changes: list[str] = field(default_factory=list)  # one line per repair, located like a Problem
    cautions: list[str] = field(default_factory=list)  # repairs that rest on a guess the user should check
    # What the cluster publishes (the given ResourceSlices, or a live cluster's); empty: nothing to check against.
    published: PublishedDevices = field(default_factory=PublishedDevices)


def fix_documents(docs: list[Document], cluster_slices: list[dict] | None = None) -> FixResult:
    """Repair `docs`. Attribute names and values are checked against `cluster_slices` (a live cluster's) plus the
    ResourceSlices among `docs`."""
    fixed = [Document(copy_object(d.obj), d.source, d.index, d.item) for d in docs]
    slices = list(cluster_slices or []) + [d.obj for d in fixed if d.kind == "ResourceSlice"]
    result = FixResult(fixed, published=PublishedDevices.from_slices(slices))
    renames = _rename_classes(fixed, result)
    class_drivers = _class_drivers(fixed)
    for position, doc in enumerate(fixed):
        try:
            _fix_document(doc, renames, class_drivers, result)
        except (TypeError, AttributeError, KeyError, ValueError):
            # Malformed beyond the repairs' assumptions: keep the document as written and say so.
            fixed[position] = Document(copy_object(docs[position].obj), doc.source, doc.index, doc.item)
            result.cautions.append(f"{doc.source}:{doc.where} ({doc.kind}/{doc.name}): left unchanged; its "
                                   "structure is too far off for automatic repair")
    _drop_repeated_classes(result, {id(d) for d, original in zip(fixed, docs) if d.obj != original.obj})
    return result


def _drop_repeated_classes(result: FixResult, repaired: set[int]) -> None:
    """A repaired DeviceClass that is now exactly a class given with it (the cluster's) is printed once."""
    given = {(d.name, repr(d.obj.get("spec"))): d for d in result.documents
             if d.kind == "DeviceClass" and id(d) not in repaired}
    kept = []
    for doc in result.documents:
        same = given.get((doc.name, repr(doc.obj.get("spec")))) if doc.kind == "DeviceClass" else None
        if same is not None and id(doc) in repaired and _same_spec(doc, same):
            _note(result, doc, "metadata.name", f"now the same DeviceClass as {same.source}:{same.where}; "
                  "printed once")
            continue
        kept.append(doc)
    result.documents[:] = kept


def _same_spec(one: Document, other: Document) -> bool:
    return one.obj.get("spec") == other.obj.get("spec")


def _fix_document(doc: Document, renames: dict[str, str], class_drivers: dict[str, str], result: FixResult) -> None:
    obj = doc.obj
    if not isinstance(obj, dict) or obj.get("apiVersion") not in (V1, "resource.k8s.io/v1beta2"):  # one layout
        return
    kind = obj.get("kind")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if kind == "ResourceSlice":
        _fix_slice(doc, spec, result)
    elif kind == "ResourceClaim":
        _fix_claim_spec(doc, spec, "spec", renames, class_drivers, result)
    elif kind == "ResourceClaimTemplate":
        if "spec" not in spec and isinstance(spec.get("devices"), dict):
            obj["spec"] = spec = {**{k: v for k, v in spec.items() if k != "devices"},
                                  "spec": {"devices": spec["devices"]}}
            _note(result, doc, "spec", "wrapped spec.devices as spec.spec.devices")
        if isinstance(spec.get("spec"), dict):
            _fix_claim_spec(doc, spec["spec"], "spec.spec", renames, class_drivers, result)
    elif kind == "DeviceClass":
        _fix_selectors(doc, spec.get("selectors"), "spec.selectors", DEFAULT_DOMAIN, result)


def _note(result: FixResult, doc: Document, path: str, text: str) -> None:
    result.changes.append(f"{doc.source}:{doc.where} ({doc.kind}/{doc.name}): {path}: {text}")


def _caution(result: FixResult, doc: Document, path: str, text: str) -> None:
    result.cautions.append(f"{doc.source}:{doc.where} ({doc.kind}/{doc.name}): {path}: {text}")


# ----- DeviceClass names -----------------------------------------------------------------------------
def _rename_classes(docs: list[Document], result: FixResult) -> dict[str, str]:
    renames: dict[str, str] = {}
    for doc in docs:
        if doc.kind != "DeviceClass" or not isinstance(doc.obj.get("metadata"), dict):
            continue
        name = doc.obj["metadata"].get("name")
        if isinstance(name, str) and "/" in name:
            new = suggest_dns_name(name)
            label = f"{doc.source}:{doc.where} ({doc.kind}/{name})"
            doc.obj["metadata"]["name"] = new
            result.changes.append(f"{label}: metadata.name: renamed {name!r} to {new!r}")
            _adopt_driver_selectors(doc, new, label, result)
            spec = doc.obj.get("spec")
            if isinstance(spec, dict) and "extendedResourceName" not in spec:
                spec["extendedResourceName"] = name
                result.changes.append(f"{label}: spec.extendedResourceName: set to {name!r} so that pods asking "
                                      f"for {name} in resources.limits get a device of this class")
            renames[name] = new
    return renames


def _adopt_driver_selectors(doc: Document, name: str, label: str, result: FixResult) -> None:
    """A class renamed to one of the classes gpudra's driver publishes, whose selectors only name the driver,
    selects what the driver's class does: `gpu.nvidia.com` is full GPUs (type == "gpu"), not MIG devices too."""
    from gpudra.gpuplugin.slices import device_classes

    spec = as_dict(doc.obj.get("spec"))
    selectors = spec.get("selectors")
    drivers = {match.group(1) for selector in as_list(selectors)
               for match in [_DRIVER_ONLY.match(((selector or {}).get("cel") or {}).get("expression") or "")
                             if isinstance(selector, dict) and isinstance(selector.get("cel"), dict) else None]
               if match}
    if not selectors or len(drivers) != 1 or len(drivers) != len(selectors):
        return
    published = next((c for c in device_classes(drivers.pop()) if c["metadata"]["name"] == name), None)
    if published is None:
        return
    spec["selectors"] = copy_object(published["spec"]["selectors"])
    expression = spec["selectors"][0]["cel"]["expression"]
    result.changes.append(f"{label}: spec.selectors: now {expression!r}, the selector of the driver's own class "
                          f"{name!r} (without the type test it would match MIG devices too)")


def _class_drivers(docs: list[Document]) -> dict[str, str]:
    drivers: dict[str, str] = {}
    for doc in docs:
        spec = doc.obj.get("spec") if doc.kind == "DeviceClass" else None
        for selector in as_list(spec.get("selectors")) if isinstance(spec, dict) else []:
            cel = selector.get("cel") if isinstance(selector, dict) else None
            expression = cel.get("expression") if isinstance(cel, dict) else None
            match = _DRIVER_TEST.search(expression) if isinstance(expression, str) else None
            if match and doc.name:
                drivers[doc.name] = match.group(1)
    return drivers


def _resolve_class(name: str, renames: dict[str, str], known: set[str]) -> str | None:
    if name in renames:
        return renames[name]
    if "/" in name:
        return suggest_dns_name(name)
    if known and name not in known:
        close = difflib.get_close_matches(name, sorted(set(renames) | known), n=1, cutoff=0.8)
        if close:
            return renames.get(close[0], close[0])
    return None


# ----- claims ----------------------------------------------------------------------------------------
def _fix_claim_spec(doc: Document, spec: dict, base: str, renames: dict[str, str], class_drivers: dict[str, str],
                    result: FixResult) -> None:
    devices = spec.get("devices")
    if not isinstance(devices, dict):
        return
    known = set(class_drivers) | set(renames.values())
    requests = as_list(devices.get("requests"))
    for position, request in enumerate(requests):
        if not isinstance(request, dict):
            continue
        path = f"{base}.devices.requests[{position}]"
        moved_constraints = request.pop("constraints", None)
        if wrap_request(request):
            _note(result, doc, path, "moved the v1beta1 request fields under exactly")
        for form_path, form in _request_forms(request, path):
            class_name = form.get("deviceClassName")
            if isinstance(class_name, str):
                new = _resolve_class(class_name, renames, known)
                if new and new != class_name:
                    form["deviceClassName"] = new
                    _note(result, doc, f"{form_path}.deviceClassName", f"{class_name!r} -> {new!r}")
                    class_name = new
            domain = class_drivers.get(class_name, DEFAULT_DOMAIN) if isinstance(class_name, str) else DEFAULT_DOMAIN
            _fix_selectors(doc, form.get("selectors"), f"{form_path}.selectors", domain, result)
        if isinstance(moved_constraints, list):
            _move_request_constraints(doc, devices, request, moved_constraints, path, result,
                                      _domain_of(request, class_drivers))
    constraints = devices.get("constraints")
    if isinstance(constraints, list):
        kept = []
        for position, constraint in enumerate(constraints):
            if isinstance(constraint, dict) and isinstance(constraint.get("cel"), str) and not (
                    constraint.get("matchAttribute") or constraint.get("distinctAttribute")):
                targets = constraint.get("requests") or [r.get("name") for r in requests if isinstance(r, dict)]
                for request_position, request in enumerate(requests):
                    if not isinstance(request, dict) or not isinstance(request.get("exactly"), dict):
                        continue
                    if request.get("name") in targets:
                        _add_selector(request["exactly"], constraint["cel"], doc, result,
                                      _domain_of(request, class_drivers),
                                      f"{base}.devices.requests[{request_position}].exactly.selectors")
                _note(result, doc, f"{base}.devices.constraints[{position}]",
                      "moved the cel expression into the selectors of the requests it names (constraints only "
                      "support matchAttribute / distinctAttribute)")
                continue
            kept.append(constraint)
        if kept:
            devices["constraints"] = kept
        else:
            devices.pop("constraints")
    # Without devices to check against, the names gpudra's driver publishes still say which attributes are
    # topology ("same NVLink mesh" is matchAttribute either way); values are then left as written.
    published = result.published or PublishedDevices.driver_vocabulary()
    if published:
        for position, request in enumerate(requests):
            if isinstance(request, dict):
                path = f"{base}.devices.requests[{position}]"
                repair_request(request, devices, path, published,
                               lambda where, text: _note(result, doc, where, text),
                               lambda where, text: _caution(result, doc, where, text))


def _request_forms(request: dict, path: str) -> list[tuple[str, dict]]:
    forms = []
    if isinstance(request.get("exactly"), dict):
        forms.append((f"{path}.exactly", request["exactly"]))
    for position, sub in enumerate(as_list(request.get("firstAvailable"))):
        if isinstance(sub, dict):
            forms.append((f"{path}.firstAvailable[{position}]", sub))
    return forms


def _domain_of(request: dict, class_drivers: dict[str, str]) -> str:
    """The driver domain a request's devices come from, when its class names one; else the NVIDIA driver's."""
    exactly = request.get("exactly")
    class_name = exactly.get("deviceClassName") if isinstance(exactly, dict) else None
    return class_drivers.get(class_name, DEFAULT_DOMAIN) if isinstance(class_name, str) else DEFAULT_DOMAIN


def _move_request_constraints(doc: Document, devices: dict, request: dict, constraints: list, path: str,
                              result: FixResult, domain: str) -> None:
    for constraint in constraints:
        if not isinstance(constraint, dict):
            continue
        if isinstance(constraint.get("cel"), str) and isinstance(request.get("exactly"), dict):
            _add_selector(request["exactly"], constraint["cel"], doc, result, domain, f"{path}.exactly.selectors")
            _note(result, doc, f"{path}.constraints", "moved the cel expression to exactly.selectors (a per-device "
                  "condition is a selector; constraints only support matchAttribute / distinctAttribute)")
        rest = {k: v for k, v in constraint.items() if k != "cel"}
        if rest.get("matchAttribute") or rest.get("distinctAttribute"):
            rest.setdefault("requests", [request.get("name")])
            devices.setdefault("constraints", []).append(rest)
            _note(result, doc, f"{path}.constraints", "moved the constraint to spec.devices.constraints")


def _add_selector(form: dict, expression: str, doc: Document, result: FixResult, domain: str, path: str) -> None:
    new, changes = rewrite_lookup(expression, domain)
    for change in changes:
        _note(result, doc, path, f"rewrote {change}")
    _caution_guessed_names(doc, path, changes, result)
    form.setdefault("selectors", []).append({"cel": {"expression": new}})


def _fix_selectors(doc: Document, selectors: Any, path: str, domain: str, result: FixResult) -> None:
    for position, selector in enumerate(selectors if isinstance(selectors, list) else []):
        cel = selector.get("cel") if isinstance(selector, dict) else None
        if not isinstance(cel, dict) or not isinstance(cel.get("expression"), str):
            continue
        new, changes = rewrite_lookup(cel["expression"], domain)
        if changes:
            cel["expression"] = new
            for change in changes:
                _note(result, doc, f"{path}[{position}].cel.expression", f"rewrote {change}")
            _caution_guessed_names(doc, f"{path}[{position}].cel.expression", changes, result)


def _caution_guessed_names(doc: Document, path: str, changes: list[str], result: FixResult) -> None:
    for change in changes:
        before, _, after = change.partition(" -> ")
        name = after.rsplit(".", 1)[-1]
        domain = after.split('["', 1)[-1].split('"]', 1)[0]
        if result.published.knows(domain, name, "capacity" if after.startswith("device.capacity") else "attributes"):
            continue  # the devices given with the manifests publish it: nothing to check by hand
        if name not in before:
            result.cautions.append(
                f"{doc.source}:{doc.where} ({doc.kind}/{doc.name}): {path}: the attribute name {name!r} was "
                "derived from an invalid name; check the attributes and values your driver publishes "
                "(kubectl get resourceslices -o yaml), or give them to --fix (-f DUMP or --context) to have them "
                "checked")
        elif ".capacity[" in after and ".attributes[" in before:
            result.cautions.append(
                f"{doc.source}:{doc.where} ({doc.kind}/{doc.name}): {path}: now reads capacity {name!r} of domain "
                f"{after.split('[', 1)[1].split(']', 1)[0]}; check that your driver publishes it under that domain")


# ----- slices ----------------------------------------------------------------------------------------
def _fix_slice(doc: Document, spec: dict, result: FixResult) -> None:
    for position, device in enumerate(as_list(spec.get("devices"))):
        if not isinstance(device, dict):
            continue
        path = f"spec.devices[{position}]"
        if flatten_device(device):
            _note(result, doc, path, "lifted the v1beta1 `basic` fields onto the device / wrapped bare capacities")
        attributes = device.get("attributes")
        if not isinstance(attributes, dict):
            continue
        for name, value in list(attributes.items()):
            amount = _amount(value)
            if amount is not None:
                del attributes[name]
                capacity = device.setdefault("capacity", {})
                if isinstance(capacity, dict) and name not in capacity:
                    capacity[name] = {"value": amount}
                _note(result, doc, f"{path}.attributes[{name}]", f"moved the amount {amount!r} to capacity[{name}]")
            elif isinstance(value, (bool, int, str)):
                typed = {bool: "bool", int: "int", str: "string"}[type(value)]
                attributes[name] = {typed: value}
                _note(result, doc, f"{path}.attributes[{name}]", f"wrote the value as {{{typed}: …}}")
        if not attributes:
            device.pop("attributes")


def _amount(value: Any) -> Any:
    if looks_like_quantity(value):
        return value
    if isinstance(value, dict):
        for field_name in ("quantity", "value", "capacity"):
            if field_name in value and len(value) == 1:
                return value[field_name]
        if len(value) == 1 and looks_like_quantity(value.get("string")):
            return value["string"]
    return None
