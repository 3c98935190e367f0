"""resource.k8s.io/v1 (Kubernetes 1.36): ResourceClaim (spec and status), ResourceClaimTemplate, and the table of
DRA kinds."""

from __future__ import annotations

from typing import Any

from gpudra.api.schema import hints, names
from gpudra.api.schema.meta import CONDITION, NODE_SELECTOR, TEMPLATE_META, object_meta, toleration_check, top_level
from gpudra.api.schema.resource import (
    ALLOCATION_CONFIGS_MAX, CLASS_NAME, CONDITION_NAMES, CONFIGS_MAX, CONSTRAINTS_MAX, DEVICE_CLASS_SPEC,
    DEVICE_CONDITIONS_MAX, DEVICE_SELECTOR, DRIVER, OPAQUE, OPAQUE_PARAMETERS_MAX, REQUESTS_MAX, RESERVED_FOR_MAX,
    RESOURCE_SLICE_SPEC, RESULTS_MAX, SELECTORS_MAX, SUBREQUESTS_MAX, TOLERATIONS_MAX,
)
from gpudra.api.schema.types import (
    AnyValue, Bool, Context, F, Int, ListOf, MapOf, QuantityType, Str, Struct, as_dict, as_list, child, index,
)


# ----- ResourceClaim ---------------------------------------------------------------------------------
DEVICE_TOLERATION = Struct(
    "DeviceToleration",
    {
        "key": F(Str(validators=(names.qualified_name,))),
        "operator": F(Str(enum=("Exists", "Equal"))),
        "value": F(Str(validators=(names.label_value,))),
        "effect": F(Str(enum=("NoSchedule", "NoExecute", "None"))),
        "tolerationSeconds": F(Int()),
    },
    checks=(toleration_check,),
)

CAPACITY_REQUIREMENTS = Struct("CapacityRequirements", {
    "requests": F(MapOf(QuantityType(non_negative=True), key_check=names.dra_qualified_name)),
})


def _count_check(value: dict[str, Any], path: str, ctx: Context) -> None:
    mode, count = value.get("allocationMode"), value.get("count")
    if not isinstance(count, int) or isinstance(count, bool):
        return
    if mode == "All" and count != 0:
        ctx.error(child(path, "count"), "must not be specified when allocationMode is 'All'")
    elif mode in (None, "", "ExactCount") and count < 0:
        ctx.error(child(path, "count"), f"must be greater than zero (is {count})")
    elif mode in (None, "", "ExactCount") and count == 0:
        # the API server's defaulting (pkg/apis/resource/v1/defaults.go SetDefaults_ExactDeviceRequest and
        # SetDefaults_DeviceSubRequest) turns an unset count, 0, into 1
        ctx.warning(child(path, "count"), "0 is stored as 1 (the API server defaults a count of 0 to 1): the "
                                          "request asks for one device; to ask for none, leave the request out")


def _request_fields(admin: bool) -> dict[str, F]:
    fields = {
        "deviceClassName": F(CLASS_NAME, required=True),
        "selectors": F(ListOf(DEVICE_SELECTOR, max_items=SELECTORS_MAX)),
        "allocationMode": F(Str(enum=("ExactCount", "All"))),
        "count": F(Int()),
        "tolerations": F(ListOf(DEVICE_TOLERATION, max_items=TOLERATIONS_MAX)),
        "capacity": F(CAPACITY_REQUIREMENTS),
    }
    if admin:
        fields["adminAccess"] = F(Bool())
    return fields


EXACT_REQUEST = Struct("ExactDeviceRequest", _request_fields(admin=True), checks=(_count_check,))
SUBREQUEST = Struct(
    "DeviceSubRequest",
    {"name": F(Str(validators=(names.dns_label,), allow_empty=False), required=True), **_request_fields(admin=False)},
    checks=(_count_check,),
    unknown_hints=(hints.subrequest_admin_access,),
)

DEVICE_REQUEST = Struct(
    "DeviceRequest",
    {
        "name": F(Str(validators=(names.dns_label,), allow_empty=False), required=True),
        "exactly": F(EXACT_REQUEST),
        "firstAvailable": F(ListOf(SUBREQUEST, max_items=SUBREQUESTS_MAX, min_items=1, unique_by="name")),
    },
    one_of=((("exactly", "firstAvailable"), False),),
    checks=(lambda v, p, c: _request_form_check(v, p, c),),
    unknown_hints=(lambda n, v, p, c: _request_flat_field(n, v, p, c), hints.request_constraints),
)


def _request_form_check(request: dict[str, Any], path: str, ctx: Context) -> None:
    """Exactly one of exactly / firstAvailable, unless the v1beta1 hint already explained the layout."""
    if not request.get("exactly") and not request.get("firstAvailable"):
        if not any(name in request for name in EXACT_REQUEST.fields):
            ctx.error(path, "exactly one of exactly, firstAvailable must be set")


def _request_flat_field(name: str, request: dict[str, Any], path: str, ctx: Context) -> bool:
    if not hints.request_flat_field(name, request, path, ctx):
        return False
    # Still check the value where it belongs, so a misplaced selector gets its expression checked too.
    spec = EXACT_REQUEST.fields.get(name)
    if spec is not None and request.get(name) is not None:
        spec.type.check(request[name], child(path, name), ctx)
    return True


def _fully_qualified(value: str) -> list[str]:
    return names.dra_fully_qualified_name(value)


DEVICE_CONSTRAINT = Struct(
    "DeviceConstraint",
    {
        "requests": F(ListOf(Str(allow_empty=False), unique_items=True)),
        "matchAttribute": F(Str(validators=(_fully_qualified,))),
        "distinctAttribute": F(Str(validators=(_fully_qualified,))),
    },
    one_of=((("matchAttribute", "distinctAttribute"), True),),
    unknown_hints=(hints.constraint_cel,),
)

CLAIM_CONFIG = Struct(
    "DeviceClaimConfiguration",
    {"requests": F(ListOf(Str(allow_empty=False), unique_items=True)), "opaque": F(OPAQUE)},
    one_of=((("opaque",), True),),
)


def _references_check(claim: dict[str, Any], path: str, ctx: Context) -> None:
    requests = as_list(claim.get("requests"))
    known: set[str] = set()
    for request in requests:
        if not isinstance(request, dict) or not isinstance(request.get("name"), str):
            continue
        known.add(request["name"])
        for sub in as_list(request.get("firstAvailable")):
            if isinstance(sub, dict) and isinstance(sub.get("name"), str):
                known.add(f"{request['name']}/{sub['name']}")
    for section in ("constraints", "config"):
        entries = claim.get(section)
        if not isinstance(entries, list):
            continue
        for position, entry in enumerate(entries):
            refs = entry.get("requests") if isinstance(entry, dict) else None
            if not isinstance(refs, list):
                continue
            for ref_position, ref in enumerate(refs):
                if isinstance(ref, str) and ref and ref not in known:
                    ctx.error(index(child(index(child(path, section), position), "requests"), ref_position),
                              f"{ref!r} is not a request of this claim (requests: "
                              + (", ".join(sorted(known)) or "none") + ")")


def _exact_count(request: object) -> int:
    """Devices an ExactCount request (or subrequest) asks for; 0 for allocationMode All or a malformed one."""
    if not isinstance(request, dict) or request.get("allocationMode") not in (None, "", "ExactCount"):
        return 0
    count = request.get("count", 1)
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def _device_count_check(claim: dict[str, Any], path: str, ctx: Context) -> None:
    """The API server accepts any positive count (ValidateResourceClaim checks `count > 0` only), but the
    scheduler's allocator refuses a claim whose requests need more than AllocationResultsMaxSize (32) devices in
    all (k8s.io/dynamic-resource-allocation structured allocator: "exceeds the claim limit"): such a claim is
    valid and can never be allocated, so it is a warning."""
    requests = as_list(claim.get("requests"))
    total = 0
    for position, request in enumerate(requests):
        if not isinstance(request, dict):
            continue
        if isinstance(request.get("exactly"), dict):
            count = _exact_count(request["exactly"])
            if count > RESULTS_MAX:
                ctx.warning(child(child(index(child(path, "requests"), position), "exactly"), "count"),
                            f"{count} devices: the scheduler allocates at most {RESULTS_MAX} devices per claim, so "
                            "this claim can never be allocated (the API server accepts it)")
                return
            total += count
        else:
            subrequests = [_exact_count(sub) for sub in as_list(request.get("firstAvailable"))]
            total += min(subrequests) if subrequests else 0
    if total > RESULTS_MAX:
        ctx.warning(child(path, "requests"), f"{total} devices in all: the scheduler allocates at most {RESULTS_MAX} "
                    "devices per claim, so this claim can never be allocated (the API server accepts it)")


DEVICE_CLAIM = Struct(
    "DeviceClaim",
    {
        "requests": F(ListOf(DEVICE_REQUEST, max_items=REQUESTS_MAX, unique_by="name")),
        "constraints": F(ListOf(DEVICE_CONSTRAINT, max_items=CONSTRAINTS_MAX)),
        "config": F(ListOf(CLAIM_CONFIG, max_items=CONFIGS_MAX)),
    },
    checks=(_references_check, _device_count_check),
)

RESOURCE_CLAIM_SPEC = Struct("ResourceClaimSpec", {"devices": F(DEVICE_CLAIM)},
                             unknown_hints=(hints.claim_spec_alpha,))

RESULT = Struct(
    "DeviceRequestAllocationResult",
    {
        "request": F(Str(allow_empty=False), required=True),
        "driver": F(DRIVER, required=True),
        "pool": F(Str(validators=(names.pool_name,)), required=True),
        "device": F(Str(validators=(names.dns_label,)), required=True),
        "adminAccess": F(Bool()),
        "tolerations": F(ListOf(DEVICE_TOLERATION, max_items=TOLERATIONS_MAX)),
        "bindingConditions": F(CONDITION_NAMES),
        "bindingFailureConditions": F(CONDITION_NAMES),
        "shareID": F(Str(allow_empty=False)),
        "consumedCapacity": F(MapOf(QuantityType(non_negative=True), key_check=names.dra_qualified_name)),
    },
)


def _claim_status_check(status: dict[str, Any], path: str, ctx: Context) -> None:
    if status.get("reservedFor") and not status.get("allocation"):
        ctx.error(child(path, "reservedFor"), "may only be set while the claim is allocated (status.allocation)")
    allocation = as_dict(status.get("allocation"))
    devices = as_dict(allocation.get("devices"))
    allocated = {(r.get("driver"), r.get("pool"), r.get("device")) for r in as_list(devices.get("results"))
                 if isinstance(r, dict)}
    seen = set()
    for position, entry in enumerate(as_list(status.get("devices"))):
        if not isinstance(entry, dict):
            continue
        identity = (entry.get("driver"), entry.get("pool"), entry.get("device"))
        entry_path = index(child(path, "devices"), position)
        if identity not in allocated:
            ctx.error(entry_path, f"device {'/'.join(map(str, identity))} is not in status.allocation")
        marker = (*identity, entry.get("shareID"))
        if marker in seen:
            ctx.error(entry_path, "duplicate entry for this device")
        seen.add(marker)


def _claim_check(claim: dict[str, Any], path: str, ctx: Context) -> None:
    """Allocation results must name requests of the claim (`req` or `req/sub` for firstAvailable)."""
    spec, status = claim.get("spec"), claim.get("status")
    if not isinstance(spec, dict) or not isinstance(status, dict):
        return
    devices = as_dict(spec.get("devices"))
    known: set[str] = set()
    for request in as_list(devices.get("requests")):
        if isinstance(request, dict) and isinstance(request.get("name"), str):
            subs = [s.get("name") for s in as_list(request.get("firstAvailable")) if isinstance(s, dict)]
            known.update(f"{request['name']}/{sub}" for sub in subs) if subs else known.add(request["name"])
    allocation = as_dict(status.get("allocation"))
    results = allocation.get("devices", {}).get("results") if isinstance(allocation.get("devices"), dict) else None
    for position, result in enumerate(as_list(results)):
        if isinstance(result, dict) and isinstance(result.get("request"), str) and result["request"] not in known:
            ctx.error(f"status.allocation.devices.results[{position}].request",
                      f"{result['request']!r} is not a request of this claim"
                      + (f" (expected one of {', '.join(sorted(known))})" if known else ""))


RESOURCE_CLAIM_STATUS = Struct(
    "ResourceClaimStatus",
    {
        "allocation": F(Struct("AllocationResult", {
            "devices": F(Struct("DeviceAllocationResult", {
                "results": F(ListOf(RESULT, max_items=RESULTS_MAX)),
                "config": F(ListOf(Struct("DeviceAllocationConfiguration", {
                    "source": F(Str(enum=("FromClass", "FromClaim")), required=True),
                    "requests": F(ListOf(Str())),
                    "opaque": F(OPAQUE),
                }, one_of=((("opaque",), True),)), max_items=ALLOCATION_CONFIGS_MAX)),
            })),
            "nodeSelector": F(NODE_SELECTOR),
            "allocationTimestamp": F(Str()),
        })),
        "reservedFor": F(ListOf(Struct("ResourceClaimConsumerReference", {
            "apiGroup": F(Str()),
            "resource": F(Str(allow_empty=False), required=True),
            "name": F(Str(allow_empty=False), required=True),
            "uid": F(Str(allow_empty=False), required=True),
        }), max_items=RESERVED_FOR_MAX, unique_by="uid")),
        "devices": F(ListOf(Struct("AllocatedDeviceStatus", {
            "driver": F(DRIVER, required=True),
            "pool": F(Str(validators=(names.pool_name,)), required=True),
            "device": F(Str(validators=(names.dns_label,)), required=True),
            "shareID": F(Str()),
            "conditions": F(ListOf(CONDITION, max_items=DEVICE_CONDITIONS_MAX, unique_by="type")),
            "data": F(AnyValue(max_bytes=OPAQUE_PARAMETERS_MAX)),
            "networkData": F(Struct("NetworkDeviceData", {
                "interfaceName": F(Str(max_len=256)),
                "ips": F(ListOf(Str(), max_items=16, unique_items=True)),
                "hardwareAddress": F(Str(max_len=128)),
            })),
        }))),
    },
    checks=(_claim_status_check,),
)

# DeviceClass, ResourceClaim and template specs are values, not pointers, in the Go types: an object without
# one is an empty (valid) spec. A ResourceSlice without spec misses its required driver and pool.
DEVICE_CLASS = top_level("DeviceClass", object_meta(names.device_class_name), DEVICE_CLASS_SPEC, None,
                         spec_required=False)
RESOURCE_SLICE = top_level("ResourceSlice", object_meta(), RESOURCE_SLICE_SPEC, None)
RESOURCE_CLAIM = top_level("ResourceClaim", object_meta(), RESOURCE_CLAIM_SPEC, RESOURCE_CLAIM_STATUS,
                           spec_required=False, checks=(_claim_check,))
RESOURCE_CLAIM_TEMPLATE = top_level(
    "ResourceClaimTemplate",
    object_meta(),
    Struct("ResourceClaimTemplateSpec", {
        "metadata": F(TEMPLATE_META),
        "spec": F(RESOURCE_CLAIM_SPEC),
    }, unknown_hints=(lambda n, v, p, c: _template_devices_hint(n, v, p, c),)),
    None,
)


def _template_devices_hint(name: str, value: dict[str, Any], path: str, ctx: Context) -> bool:
    if name != "devices":
        return False
    ctx.error(child(path, name), "a template wraps a claim spec: write spec.spec.devices, not spec.devices",
              hints.fragment({"spec": {"spec": {"devices": value.get("devices")}}}))
    return True


KINDS: dict[str, Struct] = {
    "DeviceClass": DEVICE_CLASS,
    "ResourceSlice": RESOURCE_SLICE,
    "ResourceClaim": RESOURCE_CLAIM,
    "ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATE,
}
CLUSTER_SCOPED = {"DeviceClass", "ResourceSlice"}
