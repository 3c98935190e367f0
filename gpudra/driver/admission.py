"""The driver's admission check of opaque configs: `gpudra validate` and the validating webhook share it.

NVIDIA's GPU driver ships a ValidatingAdmissionWebhook (k8s-dra-driver-gpu cmd/webhook/main.go,
admitResourceClaimParameters) so that a ResourceClaim or ResourceClaimTemplate whose GpuConfig /
MigDeviceConfig the driver would refuse at prepare time is refused when it is created, instead of leaving
its pod in ContainerCreating: every `devices.config[].opaque` entry for the driver is decoded strictly
(unknown fields are errors), normalized and validated (api/nvidia.com/resource/v1beta1 sharing.go,
validate.go). Here the decoding and checks are the driver's own (gpudra.driver.config.decode_opaque, the one
copy prepare uses too); this module finds the configs in an object and answers AdmissionReviews.
"""

from __future__ import annotations

from typing import Any

from gpudra.driver.config import ConfigError, decode_opaque
from gpudra.driver.slices import DEFAULT_DRIVER_NAME

ADMISSION_API = "admission.k8s.io/v1"
RESOURCE_GROUP = "resource.k8s.io"
# resource (plural) -> where the device configs are in the object, as the webhook registers for them
CONFIG_PATHS = {"resourceclaims": ("spec",), "resourceclaimtemplates": ("spec", "spec"), "deviceclasses": ("spec",)}
KIND_RESOURCES = {"ResourceClaim": "resourceclaims", "ResourceClaimTemplate": "resourceclaimtemplates",
                  "DeviceClass": "deviceclasses"}
SERVED_VERSIONS = ("v1", "v1beta2", "v1beta1")  # what NVIDIA's webhook accepts (cmd/webhook/resource.go)


def _configs(obj: dict[str, Any], resource: str) -> tuple[str, list[Any]]:
    """(path of the config list, the list) of a v1 object; DeviceClass configs sit in spec.config."""
    node: Any = obj
    for key in CONFIG_PATHS[resource]:
        node = node.get(key) if isinstance(node, dict) else None
    base = ".".join(CONFIG_PATHS[resource])
    if resource == "deviceclasses":
        entries = node.get("config") if isinstance(node, dict) else None
        return f"{base}.config", entries if isinstance(entries, list) else []
    devices = node.get("devices") if isinstance(node, dict) else None
    entries = devices.get("config") if isinstance(devices, dict) else None
    return f"{base}.devices.config", entries if isinstance(entries, list) else []


def opaque_config_problems(obj: dict[str, Any], driver_name: str = DEFAULT_DRIVER_NAME) -> list[tuple[str, str]]:
    """(field path, message) for each of `driver_name`'s opaque configs in a v1 ResourceClaim,
    ResourceClaimTemplate or DeviceClass that the driver would refuse; other drivers' configs are theirs.
    The path is the config's `…opaque.parameters`, as NVIDIA's webhook names it; the message starts with the
    field inside the parameters where there is one (`sharing.strategy: must be TimeSlicing or MPS, …`)."""
    resource = KIND_RESOURCES.get(str(obj.get("kind")))
    if resource is None:
        return []
    base, entries = _configs(obj, resource)
    problems: list[tuple[str, str]] = []
    for position, entry in enumerate(entries):
        opaque = entry.get("opaque") if isinstance(entry, dict) else None
        if not isinstance(opaque, dict) or opaque.get("driver") != driver_name:
            continue
        path = f"{base}[{position}].opaque.parameters"
        try:
            decode_opaque(opaque.get("parameters"), "parameters")
        except ConfigError as exc:
            message = str(exc)
            for prefix in ("parameters: ", "parameters."):  # the path says where the parameters are
                if message.startswith(prefix):
                    message = message[len(prefix):]
            problems.append((path, message))
    return problems


# ----- AdmissionReview (admission.k8s.io/v1) ----------------------------------------------------------------
class ReviewError(ValueError):
    """A request body that is no AdmissionReview this webhook can answer (HTTP 400)."""


def _status(message: str, reason: str, code: int) -> dict[str, Any]:
    return {"message": message, "reason": reason, "code": code}


def review_response(review: Any, driver_name: str = DEFAULT_DRIVER_NAME) -> dict[str, Any]:
    """The AdmissionReview answering `review` (a decoded admission.k8s.io/v1 AdmissionReview): allowed unless
    an object's opaque configs for `driver_name` fail the driver's checks. ReviewError when `review` is not an
    AdmissionReview request at all."""
    from gpudra.api.convert import needs_conversion, to_v1

    if not isinstance(review, dict) or review.get("apiVersion") != ADMISSION_API \
            or review.get("kind") != "AdmissionReview":
        raise ReviewError(f"expected an {ADMISSION_API} AdmissionReview")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise ReviewError("the AdmissionReview has no request with a uid")
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    answer = {"apiVersion": ADMISSION_API, "kind": "AdmissionReview", "response": response}
    found = request.get("resource")
    target: dict[str, Any] = found if isinstance(found, dict) else {}
    resource, version = target.get("resource"), target.get("version")
    if target.get("group") != RESOURCE_GROUP or resource not in CONFIG_PATHS or version not in SERVED_VERSIONS:
        response.update(allowed=False, status=_status(
            f"expected resource.k8s.io {'/'.join(SERVED_VERSIONS)} {', '.join(CONFIG_PATHS)}, got "
            f"{target.get('group')}/{version} {resource}", "BadRequest", 400))
        return answer
    obj = request.get("object")
    if request.get("operation") == "DELETE" or obj is None:
        return answer  # nothing is created: nothing to check
    if not isinstance(obj, dict):
        response.update(allowed=False, status=_status("request.object is not an object", "BadRequest", 400))
        return answer
    try:
        v1 = to_v1(obj) if needs_conversion(obj) else obj
    except Exception as exc:  # noqa: BLE001 - a shape conversion cannot handle is the client's mistake
        response.update(allowed=False, status=_status(f"cannot read the object: {exc}", "BadRequest", 400))
        return answer
    problems = opaque_config_problems(v1, driver_name)
    if problems:  # worded as NVIDIA's webhook words it (admitResourceClaimParameters)
        listed = "; ".join(f"object at {path} is invalid: {message}" for path, message in problems)
        response.update(allowed=False, status=_status(f"{len(problems)} configs failed to validate: {listed}",
                                                      "Invalid", 422))
    return answer
