"""DeviceTaintRules: taints put on devices from outside their driver (for example to drain a GPU).

The scheduler lists slices "with device taint rules" (upstream's `ListWithDeviceTaintRules`): every rule's
taint is added to the devices its selector matches before the allocator sees them. A selector field that is
empty matches everything; `deviceClassName` and CEL `selectors` (older API versions) must hold as well, and a
device whose CEL evaluation fails is not tainted.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from gpudra.copying import copy_object
from gpudra.plain import as_dict, as_list, as_str

# id(slice) -> (slice, rules key, slice with the rules applied): rules rarely change, slices are reused.
# Least recently used first. An entry keeps its slice (and a tainted copy) alive, and a long-running
# scheduler sees ever new slice objects, so only about two calls' worth of slices is kept.
_applied: OrderedDict[int, tuple[dict[str, Any], str, dict[str, Any]]] = OrderedDict()
_APPLIED_MIN = 64


def _selector_matches(selector: dict[str, Any], driver: str, pool: str, device: dict[str, Any],
                      classes: dict[str, dict[str, Any]]) -> bool:
    for field, value in (("driver", driver), ("pool", pool), ("device", as_str(device.get("name")))):
        wanted = selector.get(field)
        if wanted and wanted != value:
            return False
    expressions = []
    class_name = selector.get("deviceClassName")
    if class_name:
        device_class = classes.get(class_name)
        if device_class is None:
            return False
        expressions += [as_dict(s.get("cel")).get("expression") for s in as_list(as_dict(device_class.get("spec")).get("selectors"))]
    expressions += [as_dict(as_dict(s).get("cel")).get("expression") for s in as_list(selector.get("selectors"))]
    if not expressions:
        return True
    from gpudra.cel import CELCompileError, CELRuntimeError, compile_selector, device_input

    inputs = device_input(driver, device)
    try:
        return all(isinstance(e, str) and compile_selector(e).evaluate(inputs) for e in expressions)
    except (CELCompileError, CELRuntimeError):
        return False


def _apply(slice_obj: dict[str, Any], rules: list[dict[str, Any]], classes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    spec = as_dict(slice_obj.get("spec"))
    driver, pool = as_str(spec.get("driver")), as_str(as_dict(spec.get("pool")).get("name"))
    result = None
    for index, device in enumerate(as_list(spec.get("devices"))):
        if not isinstance(device, dict):
            continue
        taints = [as_dict(as_dict(rule.get("spec")).get("taint")) for rule in rules
                  if _selector_matches(as_dict(as_dict(rule.get("spec")).get("deviceSelector")), driver, pool, device, classes)]
        if not taints:
            continue
        if result is None:
            result = copy_object(slice_obj)
        target = result["spec"]["devices"][index]
        target["taints"] = list(as_list(target.get("taints"))) + [dict(taint) for taint in taints]
    return result if result is not None else slice_obj


def apply_device_taint_rules(slices: list[dict[str, Any]], rules: list[dict[str, Any]],
                             device_classes: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The slices as the allocator must see them: untouched objects where no rule matches (so caches keyed by
    object identity keep working), tainted copies where one does."""
    rules = [rule for rule in rules if isinstance(rule, dict) and as_dict(as_dict(rule.get("spec")).get("taint"))]
    if not rules:
        return slices
    classes = {as_str(as_dict(c.get("metadata")).get("name")): c for c in device_classes if isinstance(c, dict)}
    key = json.dumps([r.get("spec") for r in rules], sort_keys=True, default=str) + json.dumps(
        sorted(classes), default=str)
    out = []
    for slice_obj in slices:
        cached = _applied.get(id(slice_obj))
        if cached is not None and cached[0] is slice_obj and cached[1] == key:
            _applied.move_to_end(id(slice_obj))
            out.append(cached[2])
            continue
        applied = _apply(slice_obj, rules, classes)
        _applied[id(slice_obj)] = (slice_obj, key, applied)
        _applied.move_to_end(id(slice_obj))
        out.append(applied)
    while len(_applied) > max(_APPLIED_MIN, 2 * len(slices)):
        _applied.popitem(last=False)
    return out
