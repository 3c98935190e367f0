"""Turn ResourceClaims into MIG demands: which profiles (or the full GPU) each requested device accepts.

Selectors are evaluated on synthetic dynamic-MIG devices of the GPU model — one per profile —
with the DRA CEL environment (`gpudra.cel`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from gpudra.catalog import GpuModel, MigProfile
from gpudra.cel import CELCompileError, CELRuntimeError, compile_selector, device_input
from gpudra.errors import GpudraError
from gpudra.mig.dynamic import DynamicMigGpu, gpu_devices, resolve_mig_device
from gpudra.vocabulary import DRIVER_NAME

DRIVER = DRIVER_NAME
BUILTIN_DEVICE_CLASSES: dict[str, str] = {  # the driver's classes (gpudra.gpuplugin.slices.device_classes)
    "gpu.nvidia.com": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'",
    "mig.nvidia.com": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig'",
}
FULL_GPU = "full GPU"


class PlanError(GpudraError, ValueError):
    """Claims the planner cannot work with (unknown class, unsupported selector, …)."""


@dataclass(frozen=True)
class Option:
    """One acceptable alternative of a request: MIG profiles (smallest first) and/or the full GPU."""

    request: str
    profiles: tuple[MigProfile, ...]
    full_gpu: bool


@dataclass(frozen=True)
class Demand:
    """One device a claim needs (a request with count 3 is three demands)."""

    claim: str
    request: str
    options: tuple[Option, ...]

    @property
    def label(self) -> str:
        return f"{self.claim}/{self.request}"

    @property
    def choices(self) -> list[MigProfile | None]:
        """Preference order for the static plan; None stands for the full GPU."""
        out: list[MigProfile | None] = []
        for option in self.options:
            out.extend(option.profiles)
            if option.full_gpu:
                out.append(None)
        return out


def synthetic_gpu(model: GpuModel) -> DynamicMigGpu:
    return DynamicMigGpu(minor=0, model=model, uuid="GPU-00000000-0000-0000-0000-000000000000", attributes={
        "productName": {"string": model.product_names[0]},
        "architecture": {"string": model.architecture},
        "brand": {"string": "Nvidia"},
    }, include_full_gpu=True)


class _Selector:
    """A selector compiled by the DRA CEL environment."""

    def __init__(self, expression: str, where: str):
        self.expression = expression
        try:
            self._compiled = compile_selector(expression)
        except CELCompileError as exc:
            raise PlanError(f"{where}: selector {expression!r} does not compile: {exc}") from None

    def matches(self, device: dict[str, Any]) -> bool:
        try:
            return self._compiled.evaluate(device_input(DRIVER, device)) is True
        except CELRuntimeError:
            return False


def _compile(expression: str, where: str) -> _Selector:
    return _Selector(expression, where)


def _selectors(spec: dict[str, Any], where: str) -> list[_Selector]:
    compiled = []
    for selector in spec.get("selectors") or []:
        cel = (selector or {}).get("cel") or {}
        if "expression" not in cel:
            raise PlanError(f"{where}: only CEL selectors are supported")
        compiled.append(_compile(cel["expression"], where))
    return compiled


def _class_selectors(classes: dict[str, dict[str, Any]], name: str, where: str) -> list[_Selector]:
    if name in classes:
        return _selectors(classes[name].get("spec") or {}, f"DeviceClass {name}")
    if name in BUILTIN_DEVICE_CLASSES:
        return [_compile(BUILTIN_DEVICE_CLASSES[name], f"DeviceClass {name}")]
    raise PlanError(f"{where}: unknown DeviceClass {name!r} (add it to the input; built in: "
                    f"{', '.join(BUILTIN_DEVICE_CLASSES)})")


def _option(model: GpuModel, devices: list[dict[str, Any]], selectors: list[_Selector], name: str) -> Option:
    matched_profiles: dict[str, MigProfile] = {}
    full = False
    for device in devices:
        if not all(s.matches(device) for s in selectors):
            continue
        ref = resolve_mig_device(device["name"], {0: model})
        if ref is None:
            full = True
        else:
            matched_profiles[ref.profile.name] = ref.profile
    ordered = sorted(matched_profiles.values(), key=lambda p: (p.memory_slices, p.compute_slices, p.memory_mib))
    return Option(name, tuple(ordered), full)


def demands_from_objects(objects: Iterable[dict[str, Any]], model: GpuModel) -> list[Demand]:
    """Demands of every ResourceClaim and ResourceClaimTemplate, in input order."""
    objects = list(objects)
    classes = {o.get("metadata", {}).get("name"): o for o in objects if o.get("kind") == "DeviceClass"}
    devices = gpu_devices(synthetic_gpu(model))
    demands: list[Demand] = []
    for obj in objects:
        kind = obj.get("kind")
        if kind == "ResourceClaim":
            spec = obj.get("spec") or {}
        elif kind == "ResourceClaimTemplate":
            spec = (obj.get("spec") or {}).get("spec") or {}
        else:
            continue
        meta = obj.get("metadata") or {}
        claim = f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"
        for request in (spec.get("devices") or {}).get("requests") or []:
            demands.extend(_request_demands(model, devices, classes, claim, request))
    if not demands:
        raise PlanError("no ResourceClaim or ResourceClaimTemplate requests in the input")
    return demands


def _request_demands(model: GpuModel, devices: list[dict[str, Any]], classes: dict[str, dict[str, Any]], claim: str,
                     request: dict[str, Any]) -> list[Demand]:
    name = request.get("name", "?")
    where = f"{claim} request {name}"
    if "exactly" in request:
        subrequests = [(name, request["exactly"])]
    elif "firstAvailable" in request:
        subrequests = [(f"{name}/{sub.get('name', '?')}", sub) for sub in request["firstAvailable"]]
    else:
        subrequests = [(name, request)]  # pre-v1 shape: fields directly on the request
    counts = set()
    options = []
    for sub_name, sub in subrequests:
        if sub.get("allocationMode", "ExactCount") != "ExactCount":
            raise PlanError(f"{where}: allocationMode {sub['allocationMode']} cannot be planned as a MIG mix")
        counts.add(int(sub.get("count", 1)))
        selectors = _class_selectors(classes, sub.get("deviceClassName", ""), where) + _selectors(sub, where)
        options.append(_option(model, devices, selectors, sub_name))
    if len(counts) > 1:
        raise PlanError(f"{where}: firstAvailable alternatives with different counts are not supported")
    count = counts.pop() if counts else 1
    return [Demand(claim, name, tuple(options)) for _ in range(count)]
