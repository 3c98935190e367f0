"""Explanations for the mistakes people actually make in DRA manifests.

Each hint recognises an unknown field in a known place (an older API layout, an invented field) and reports
what the field means in resource.k8s.io/v1, with the corrected fragment where one can be derived mechanically.
"""

from __future__ import annotations

import re
from typing import Any

from gpudra.api.convert import EXACT_REQUEST_FIELDS, flatten_device, wrap_request
from gpudra.api.dump import dump_yaml_one
from gpudra.copying import copy_object
from gpudra.quantity import Quantity, QuantityError
from gpudra.api.schema.types import as_list, Context, child

_QUANTITY_WITH_UNIT = re.compile(r"^[+-]?[0-9.]+(?:[eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)$")


def fragment(value: Any) -> str:
    return dump_yaml_one(value).rstrip("\n")


def might_be_quantity(text: str) -> bool:
    """False for a string that `looks_like_quantity` is certainly false for (the cheap part of its test)."""
    return _QUANTITY_WITH_UNIT.match(text) is not None


def looks_like_quantity(value: Any) -> bool:
    """A string with a unit ("80Gi", "16G"): what a capacity holds, not an attribute."""
    if not isinstance(value, str) or not might_be_quantity(value):
        return False
    try:
        Quantity.parse(value)
    except QuantityError:
        return False
    return True


# ----- requests --------------------------------------------------------------------------------------
def request_flat_field(name: str, value: dict[str, Any], path: str, ctx: Context) -> bool:
    if name not in EXACT_REQUEST_FIELDS:
        return False
    if value.get("firstAvailable"):
        ctx.error(
            child(path, name),
            "not a field of a request in resource.k8s.io/v1; with firstAvailable, put it on each subrequest "
            f"under {child(path, 'firstAvailable')}",
        )
        return True
    first = next(n for n in value if n in EXACT_REQUEST_FIELDS)
    fix = None
    if name == first:
        corrected = v1_request(value)
        if corrected is not None:
            fix = "write the request as (resource.k8s.io/v1):\n" + fragment(corrected)
    ctx.error(
        child(path, name),
        f"not a field in resource.k8s.io/v1; move it under {child(path, 'exactly')} "
        "(the flat request layout is resource.k8s.io/v1beta1)",
        fix,
    )
    return True


def request_constraints(name: str, value: dict[str, Any], path: str, ctx: Context) -> bool:
    if name != "constraints":
        return False
    from gpudra.api.schema.cel_check import check_selector_expression

    for position, constraint in enumerate(as_list(value.get("constraints"))):
        if isinstance(constraint, dict) and isinstance(constraint.get("cel"), str):
            check_selector_expression(constraint["cel"], f"{path}.constraints[{position}].cel", ctx)
    ctx.error(
        child(path, name),
        "constraints are not part of a request; they belong in spec.devices.constraints and only support "
        "matchAttribute / distinctAttribute (e.g. matchAttribute: gpu.nvidia.com/nvlinkDomain). To filter which "
        "devices a request accepts, use a CEL selector in exactly.selectors[].cel.expression",
        _constraint_cel_fix(value.get("constraints"), value),
    )
    return True


def _constraint_cel_fix(constraints: Any, request: dict[str, Any]) -> str | None:
    if not any(isinstance(c, dict) and isinstance(c.get("cel"), str) for c in as_list(constraints)):
        return None
    corrected = v1_request(request)
    return None if corrected is None else "as a selector (resource.k8s.io/v1):\n" + fragment(corrected)


def _class_for_extended_resource(name: Any) -> Any:
    """A class name spelled as an extended resource (`nvidia.com/gpu`, or `nvidia.com-gpu` made DNS-safe by hand)
    → the NVIDIA chart's class that serves that resource (`gpu.nvidia.com`, extendedResourceName nvidia.com/gpu);
    anything else as it is."""
    from gpudra.vocabulary import DRIVER_NAME, GPU_EXTENDED_RESOURCE

    if isinstance(name, str) and name in (GPU_EXTENDED_RESOURCE, GPU_EXTENDED_RESOURCE.replace("/", "-")):
        return DRIVER_NAME
    return name


def v1_request(request: dict[str, Any]) -> dict[str, Any] | None:
    """The request in resource.k8s.io/v1's layout with the mechanical repairs that need nothing but the request:
    flat fields under `exactly`, per-device `constraints[].cel` moved into selectors, a class named as the
    extended resource it should serve renamed (`nvidia.com-gpu` → `gpu.nvidia.com`), and lookups by attribute
    name rewritten (`device.attributes['gpu.nvidia.com/product-name']` → `device.attributes["gpu.nvidia.com"]
    .productName`), so that the suggested fragment is itself valid; None when it cannot be derived."""
    from gpudra.api.schema.cel_check import rewrite_lookup

    corrected = copy_object(request)
    expressions = [c["cel"] for c in as_list(corrected.pop("constraints", None))
                   if isinstance(c, dict) and isinstance(c.get("cel"), str)]
    wrap_request(corrected)
    exactly = corrected.get("exactly")
    if not isinstance(exactly, dict):
        return corrected
    selectors = exactly.setdefault("selectors", [])
    if not isinstance(selectors, list):
        return None
    selectors.extend({"cel": {"expression": e}} for e in expressions)
    exactly["deviceClassName"] = _class_for_extended_resource(exactly.get("deviceClassName"))
    for selector in selectors:
        cel = selector.get("cel") if isinstance(selector, dict) else None
        if isinstance(cel, dict) and isinstance(cel.get("expression"), str):
            cel["expression"] = rewrite_lookup(cel["expression"])[0]
    if not selectors:
        del exactly["selectors"]
    return corrected


def subrequest_admin_access(name: str, value: dict[str, Any], path: str, ctx: Context) -> bool:
    if name != "adminAccess":
        return False
    ctx.error(child(path, name), "subrequests cannot ask for admin access; only exactly requests have adminAccess")
    return True


def constraint_cel(name: str, value: dict[str, Any], path: str, ctx: Context) -> bool:
    if name != "cel":
        return False
    ctx.error(
        child(path, name),
        "constraints have no cel field: a constraint either requires every device of the listed requests to "
        "share one attribute value (matchAttribute: <domain>/<name>) or to have different values "
        "(distinctAttribute). Per-device conditions are selectors: move the expression to "
        "spec.devices.requests[].exactly.selectors[].cel.expression",
    )
    return True


def claim_spec_alpha(name: str, value: dict[str, Any], path: str, ctx: Context) -> bool:
    if name in ("resourceClassName", "parametersRef", "controller"):
        ctx.error(
            child(path, name),
            "this is the removed classic-DRA layout (resource.k8s.io/v1alpha2); in resource.k8s.io/v1 a claim "
            "lists spec.devices.requests[] with exactly.deviceClassName",
        )
        return True
    if name == "requests":
        ctx.error(child(path, name), "requests go under spec.devices.requests, not directly under spec")
        return True
    return False


# ----- devices ---------------------------------------------------------------------------------------
def device_basic(name: str, value: dict[str, Any], path: str, ctx: Context) -> bool:
    if name != "basic":
        return False
    corrected = copy_object(value)
    flatten_device(corrected)
    ctx.error(
        child(path, name),
        "not a field in resource.k8s.io/v1: the `basic` wrapper is the v1beta1 layout; its fields "
        "(attributes, capacity, …) go directly on the device",
        "write the device as (resource.k8s.io/v1):\n" + fragment(corrected),
    )
    return True


def attribute_quantity(name: str, value: dict[str, Any], path: str, ctx: Context) -> bool:
    if name not in ("quantity", "value", "capacity"):
        return False
    attribute = path.rsplit("[", 1)[-1].rstrip("]")
    ctx.error(
        child(path, name),
        "attributes are int, bool, string or version (or their list forms); amounts such as memory are "
        f"capacities: move it to capacity.{attribute}.value",
        fragment({"capacity": {attribute: {"value": value.get(name)}}}),
    )
    return True


def quantity_string_attribute(attribute: str, value: Any, path: str, ctx: Context) -> None:
    """`memory: {string: "80Gi"}` is valid but useless: CEL cannot compare it as an amount."""
    if isinstance(value, dict) and looks_like_quantity(value.get("string")):
        ctx.warning(
            path,
            f"attribute {attribute!r} holds the amount {value['string']!r} as a string; selectors cannot "
            "compare strings as quantities. Publish amounts as capacity so that "
            f"device.capacity[...].{attribute.rsplit('/', 1)[-1]}.compareTo(quantity(\"…\")) works",
            fragment({"capacity": {attribute: {"value": value["string"]}}}),
        )
