"""Pod resource requests and node allocatable, in integers (cpu in millicores, everything else in units).

`pod_requests` follows upstream's resourcehelper.PodRequests: regular containers are summed; a restartable
("sidecar") init container runs alongside everything after it; a regular init container runs alone, so the pod
needs the maximum of (each init container + the sidecars started before it) and (containers + all sidecars);
the pod overhead is added on top.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable

from gpudra.errors import GpudraError
from gpudra.quantity import Quantity, QuantityError

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"

# Used only for scoring when a container requests nothing (upstream's non-zero defaults).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

# Resources the kube-scheduler compares against allocatable; everything else with a domain is "extended".
_NATIVE = {CPU, MEMORY, EPHEMERAL_STORAGE, PODS}


class ResourceError(GpudraError, ValueError):
    pass


@lru_cache(maxsize=8192)
def _amount(resource: str, value: str | int) -> int:
    try:
        quantity = Quantity.parse(value)
    except QuantityError as exc:
        raise ResourceError(f"resource {resource}: {exc}") from None
    if resource == CPU:
        return -((-quantity.nanos) // 1_000_000)  # MilliValue rounds up
    return -((-quantity.nanos) // 1_000_000_000)  # Value rounds up


def amount(resource: str, value: Any) -> int:
    if isinstance(value, Quantity):
        value = str(value)
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ResourceError(f"resource {resource}: {value!r} is not a quantity")
    return _amount(resource, value)


def is_extended(resource: str) -> bool:
    """Extended resources are the ones a device plugin or a DeviceClass can serve (`nvidia.com/gpu`)."""
    if resource in _NATIVE or resource.startswith("hugepages-"):
        return False
    return "/" in resource and not resource.startswith("kubernetes.io/") and not resource.startswith(
        "requests."
    )


def container_requests(container: dict[str, Any]) -> dict[str, int]:
    """A container's requests, with limits standing in for unset requests (API defaulting)."""
    resources = container.get("resources") or {}
    requests = dict(resources.get("requests") or {})
    for name, value in (resources.get("limits") or {}).items():
        requests.setdefault(name, value)
    return {name: amount(name, value) for name, value in requests.items()}


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _max(total: dict[str, int], more: dict[str, int]) -> None:
    for name, value in more.items():
        if value > total.get(name, 0):
            total[name] = value


def pod_requests(pod: dict[str, Any], non_zero: bool = False) -> dict[str, int]:
    """The pod's effective requests. With `non_zero`, unset cpu/memory count as the scoring defaults."""
    return pod_request_totals(pod)[1 if non_zero else 0]


def pod_request_totals(pod: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """(`pod_requests(pod)`, `pod_requests(pod, non_zero=True)`), each container read once."""
    spec = pod.get("spec") or {}
    containers = [container_requests(container) for container in spec.get("containers") or []]
    inits = [(container_requests(container), container.get("restartPolicy") == "Always")
             for container in spec.get("initContainers") or []]
    overhead = {name: amount(name, value) for name, value in (spec.get("overhead") or {}).items()}
    plain = _effective(containers, inits, overhead)
    non_zero = _effective([_non_zero(r) for r in containers], [(_non_zero(r), s) for r, s in inits], overhead)
    return plain, non_zero


def _effective(containers: list[dict[str, int]], inits: list[tuple[dict[str, int], bool]],
               overhead: dict[str, int]) -> dict[str, int]:
    """Sum of the containers, raised to the peak of the init phase (sidecars, `restartPolicy: Always`, keep
    running and add up), plus the overhead."""
    total: dict[str, int] = {}
    for requests in containers:
        _add(total, requests)
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for requests, sidecar in inits:
        if sidecar:
            _add(total, requests)
            _add(sidecars, requests)
            candidate = dict(sidecars)
        else:
            candidate = dict(sidecars)
            _add(candidate, requests)
        _max(init_peak, candidate)
    _max(total, init_peak)
    _add(total, overhead)
    return total


def _non_zero(requests: dict[str, int]) -> dict[str, int]:
    result = dict(requests)
    if CPU not in result:
        result[CPU] = DEFAULT_MILLI_CPU_REQUEST
    if MEMORY not in result:
        result[MEMORY] = DEFAULT_MEMORY_REQUEST
    return result


def node_allocatable(node: dict[str, Any]) -> dict[str, int]:
    """`status.allocatable`, falling back to `status.capacity` (as the kubelet reports both)."""
    status = node.get("status") or {}
    values = status.get("allocatable") or status.get("capacity") or {}
    return {name: amount(name, value) for name, value in values.items()}


def all_containers(pod: dict[str, Any]) -> Iterable[dict[str, Any]]:
    spec = pod.get("spec") or {}
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []
