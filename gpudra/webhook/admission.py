"""The driver's admission check of opaque configs: `gpudra validate` and the validating webhook share it.

NVIDIA's GPU driver ships a ValidatingAdmissionWebhook (k8s-dra-driver-gpu cmd/webhook/main.go,
admitResourceClaimParameters) so that a ResourceClaim or ResourceClaimTemplate whose GpuConfig /
MigDeviceConfig the driver would refuse at prepare time is refused when it is created, instead of leaving
its pod in ContainerCreating: every `devices.config[].opaque` entry for the driver is decoded strictly
(unknown fields are errors), normalized and validated (api/nvidia.com/resource/v1beta1 sharing.go,
validate.go). Here the decoding and checks are the driver's own (gpudra.device_config: decode_opaque, the one
copy prepare uses too, and opaque_config_problems, which finds the configs in an object); this module answers
AdmissionReviews. The compute-domain driver's ComputeDomainChannelConfig / ComputeDomainDaemonConfig are checked
too (computedomainconfig.go's Validate and strict decoding; NVIDIA's webhook registers as gpu.nvidia.com and lets
them through unchecked), so one webhook serves both of gpudra's kubelet plugins.
"""

from __future__ import annotations

from typing import Any

from gpudra.device_config import CONFIG_PATHS, KIND_RESOURCES, drivers_config_problems
from gpudra.gpuplugin.slices import DEFAULT_DRIVER_NAME
from gpudra.vocabulary import COMPUTE_DOMAIN_DRIVER_NAME

ADMISSION_API = "admission.k8s.io/v1"
RESOURCE_GROUP = "resource.k8s.io"
SERVED_VERSIONS = ("v1", "v1beta2", "v1beta1")  # what NVIDIA's webhook accepts (cmd/webhook/resource.go)
RESOURCE_KINDS = {resource: kind for kind, resource in KIND_RESOURCES.items()}


class ReviewError(ValueError):
    """A request body that is no AdmissionReview this webhook can answer (HTTP 400)."""


def _status(message: str, reason: str, code: int) -> dict[str, Any]:
    return {"message": message, "reason": reason, "code": code}


def review_response(review: Any, driver_name: str = DEFAULT_DRIVER_NAME,
                    compute_domain_driver: str | None = COMPUTE_DOMAIN_DRIVER_NAME) -> dict[str, Any]:
    """The AdmissionReview answering `review` (a decoded admission.k8s.io/v1 AdmissionReview): allowed unless
    an object's opaque configs for `driver_name` (or for the compute-domain driver, unless None) fail that
    driver's checks. ReviewError when `review` is not an AdmissionReview request at all."""
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
    # The API server sends the object converted to the version it names in request.kind/resource, its apiVersion
    # and kind set (k8s.io/apiserver admission/plugin/webhook/request: CreateV1AdmissionReview encodes
    # VersionedObject). One that says otherwise is not from it, and an unknown kind would go unchecked.
    expected = (f"{RESOURCE_GROUP}/{version}", RESOURCE_KINDS[str(resource)])
    if (obj.get("apiVersion"), obj.get("kind")) != expected:
        response.update(allowed=False, status=_status(
            f"request.object is {str(obj.get('apiVersion'))[:64]} {str(obj.get('kind'))[:64]}, expected "
            f"{expected[0]} {expected[1]} for {resource}", "BadRequest", 400))
        return answer
    # No conversion to v1: the opaque configs sit at the same paths with the same fields in every served version
    # (DeviceClaimConfiguration / DeviceClassConfiguration of v1beta1, v1beta2 and v1), and converting would copy
    # the whole object, doubling what a hostile review costs in memory.
    problems = drivers_config_problems(obj, driver_name, compute_domain_driver)
    if problems:  # worded as NVIDIA's webhook words it (admitResourceClaimParameters)
        listed = "; ".join(f"object at {path} is invalid: {message}" for _, path, message in problems)
        response.update(allowed=False, status=_status(f"{len(problems)} configs failed to validate: {listed}",
                                                      "Invalid", 422))
    return answer
