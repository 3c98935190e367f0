"""Turning a found solution into v1 `status.allocation` dicts (results, configs, nodeSelector)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpudra.copying import copy_object
from gpudra.plain import as_dict, as_list
from gpudra.quantity import Quantity, QuantityError

from .capacity import consumed_quantity
from .model import CacheKey, DeviceInfo
from .outcome import AllocationError

if TYPE_CHECKING:
    from .search import ClaimData, RequestData, Search


def format_quantity(nanos: int) -> str:
    if nanos % 1_000_000_000 == 0:
        return str(Quantity.parse(str(nanos // 1_000_000_000)))
    return str(Quantity.parse(f"{nanos}n"))


def _quantity_text(device: DeviceInfo, name: str, nanos: int, request: dict[str, Any]) -> str:
    """The consumed amount spelled as upstream computes it (see capacity.consumed_quantity)."""
    requested = as_dict(as_dict(request.get("capacity")).get("requests")).get(name)
    try:
        requested_quantity = None if requested is None else Quantity.parse(requested)
    except (QuantityError, TypeError, ValueError):
        requested_quantity = None
    quantity = consumed_quantity(requested_quantity, device.capacity[name])
    return str(quantity) if quantity.nanos == nanos else format_quantity(nanos)


def _device_result(search: "Search", rd: "RequestData", device: DeviceInfo, consumed: dict[str, int] | None,
                   share_id: str | None) -> dict[str, Any]:
    features = search.features
    result: dict[str, Any] = {
        "request": rd.full_name,
        "driver": device.driver,
        "pool": device.pool,
        "device": device.name,
    }
    if rd.admin:
        result["adminAccess"] = True
    # Upstream copies the request's tolerations into the result whatever DRADeviceTaints says.
    if rd.tolerations:
        result["tolerations"] = [dict(t, operator=t.get("operator") or "Equal") for t in rd.tolerations]
    if features.device_binding_and_status:
        if device.binding_conditions:
            result["bindingConditions"] = list(device.binding_conditions)
        if device.binding_failure_conditions:
            result["bindingFailureConditions"] = list(device.binding_failure_conditions)
    if share_id is not None:
        result["shareID"] = share_id
        if consumed:
            result["consumedCapacity"] = {
                name: _quantity_text(device, name, amount, rd.raw) for name, amount in consumed.items()
            }
    return result


def _configs(claim: "ClaimData") -> list[dict[str, Any]]:
    spec_configs = as_list(as_dict(as_dict(claim.claim.get("spec")).get("devices")).get("config"))
    if not spec_configs and not any(slot.option(slot.selected).class_info.configs for slot in claim.requests):
        return []  # the common case, without the bookkeeping below
    configs: list[dict[str, Any]] = []
    by_class: dict[str, list[str]] = {}
    class_order = []
    for slot in claim.requests:
        rd = slot.option(slot.selected)
        name = rd.class_info.name
        if name not in by_class:
            by_class[name] = []
            class_order.append(rd.class_info)
        by_class[name].append(rd.full_name)
    for class_info in class_order:
        for config in class_info.configs:
            entry = {"source": "FromClass", "requests": list(by_class[class_info.name])}
            entry.update({k: copy_object(v) for k, v in (config or {}).items() if k != "requests"})
            configs.append(entry)
    for config in spec_configs:
        config = as_dict(config)
        wanted = as_list(config.get("requests"))
        entry = {"source": "FromClaim"}
        entry.update({k: copy_object(v) for k, v in config.items()})
        if not wanted:
            configs.append(entry)
            continue
        for slot in claim.requests:
            if slot.name in wanted:
                configs.append(copy_object(entry))
            elif slot.subrequests is not None:
                selected = slot.subrequests[slot.selected]
                if selected.full_name in wanted:
                    configs.append(copy_object(entry))
    return configs


def _node_selector(search: "Search", claim: "ClaimData") -> dict[str, Any] | None:
    node_name = search.view.node.name
    # incubating and experimental pin the allocation to the node for a bindsToNode device even
    # with DRADeviceBindingConditions off; stable does not look at bindsToNode.
    binds_to_node = not search.features.stable_variant
    expressions: list[dict[str, Any]] = []
    fields: list[dict[str, Any]] = []
    seen: set[CacheKey] = set()
    for _, device, _, _ in claim.results:
        source = device if device.slice.per_device_node_selection else device.slice
        if source.node_name or (binds_to_node and device.binds_to_node):
            return {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            }
        selector = source.node_selector
        if not selector:
            continue
        terms = as_list(selector.get("nodeSelectorTerms"))
        if len(terms) != 1:
            raise AllocationError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
        term = as_dict(terms[0])
        for kind, target in (("matchExpressions", expressions), ("matchFields", fields)):
            for requirement in as_list(term.get(kind)):
                requirement = as_dict(requirement)
                identity = (
                    kind,
                    requirement.get("key"),
                    requirement.get("operator"),
                    frozenset(str(v) for v in as_list(requirement.get("values"))),  # compared as sets
                )
                if identity in seen:
                    continue
                seen.add(identity)
                target.append(copy_object(requirement))
    if not expressions and not fields:
        return None
    merged: dict[str, Any] = {}
    if expressions:
        merged["matchExpressions"] = expressions
    if fields:
        merged["matchFields"] = fields
    return {"nodeSelectorTerms": [merged]}


def build_allocation(search: "Search", claim: "ClaimData") -> dict[str, Any]:
    devices: dict[str, Any] = {
        "results": [_device_result(search, rd, device, consumed, share) for rd, device, consumed, share in claim.results]
    }
    configs = _configs(claim)
    if configs:
        devices["config"] = configs
    allocation: dict[str, Any] = {"devices": devices}
    selector = _node_selector(search, claim)
    if selector is not None:
        allocation["nodeSelector"] = selector
    return allocation
