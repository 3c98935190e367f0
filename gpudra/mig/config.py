"""mig-parted configuration files (`version: v1`, `mig-configs:`): generate them like the MIG
manager does for a node's GPUs, and validate hand-written ones against the catalog."""

from __future__ import annotations

import difflib

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from gpudra.api.yaml_files import LoadError, load_yaml
from gpudra.catalog import GpuModel, UnknownMigProfile, gpu_model_for_pci_id, mig_models
from gpudra.mig.placement import describe_layout, find_placement

ENTRY_KEYS = ("device-filter", "devices", "mig-enabled", "mig-devices")
# mig-parted AssertValidMigProfileFormat: [<C>c.]<G>g.<GB>gb[+attr[.attr…]|-attr]
PROFILE_FORMAT = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:[+-][a-z]+(?:\.[a-z]+)*)?$")
DEVICE_FILTER_FORMAT = re.compile(r"^0x([0-9a-fA-F]{4})([0-9a-fA-F]{4})(?::0x[0-9a-fA-F]{8})?$")


@dataclass(frozen=True)
class NodeGpuGroup:
    """GPUs of one model on a node, and the PCI device IDs they report (for device-filter)."""

    model: GpuModel
    pci_device_ids: tuple[int, ...] = ()

    @property
    def filter_ids(self) -> tuple[int, ...]:
        return self.pci_device_ids or self.model.pci_device_ids


def _filter_value(ids: Sequence[int]) -> str | list[str]:
    values = [f"0x{device_id:04X}10DE" for device_id in ids]
    return values[0] if len(values) == 1 else values


def balanced_layout(model: GpuModel) -> dict[str, int]:
    """mig-parted's all-balanced: {1g: 2, 2g: 1, 3g: 1} on 7-slice GPUs, {1g: 2, 2g: 1} on 4-slice ones."""
    by_g = model.smallest_profiles_by_g
    wanted = {1: 2, 2: 1, 3: 1} if model.compute_slices == 7 else {1: 2, 2: 1}
    if not all(g in by_g for g in wanted):
        return {}
    return {by_g[g].name: count for g, count in wanted.items()}


def generate_config(groups: Sequence[NodeGpuGroup | GpuModel]) -> dict[str, Any]:
    """The config the MIG manager generates for a node whose GPUs are `groups` (one per model).

    `device-filter`s appear only when the node reports more than one PCI device ID.
    """
    normalised = [g if isinstance(g, NodeGpuGroup) else NodeGpuGroup(g) for g in groups]
    if not normalised:
        raise ValueError("no MIG-capable GPUs to generate a config for")
    node_ids = {device_id for group in normalised for device_id in group.filter_ids}
    filtered = len(node_ids) > 1 and len(normalised) > 1

    def entry(group: NodeGpuGroup, devices: dict[str, int]) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if filtered:
            body["device-filter"] = _filter_value(group.filter_ids)
        body.update({"devices": "all", "mig-enabled": True, "mig-devices": devices})
        return body

    configs: dict[str, list[dict[str, Any]]] = {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    balanced = [entry(group, balanced_layout(group.model)) for group in normalised if balanced_layout(group.model)]
    if balanced:
        configs["all-balanced"] = balanced
    per_profile: dict[str, list[dict[str, Any]]] = {}
    for group in normalised:
        for profile in group.model.profiles:
            per_profile.setdefault(profile.config_name, []).append(
                entry(group, {profile.name: profile.max_instances}))
    configs.update(per_profile)
    return {"version": "v1", "mig-configs": configs}


# --- validation ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning"
    where: str  # "mig-configs.all-balanced[0]"
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.where}: {self.message}"


@dataclass
class ValidationReport:
    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # "all-balanced[0] on H100-80GB: 3g.40gb@4:4 …"

    @property
    def valid(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def error(self, where: str, message: str) -> None:
        self.findings.append(Finding("error", where, message))

    def warning(self, where: str, message: str) -> None:
        self.findings.append(Finding("warning", where, message))


def _models_for_filter(value: Any, where: str, report: ValidationReport) -> list[GpuModel] | None:
    """Catalog models a device-filter selects (None when the filter itself is malformed)."""
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) for v in values):
        report.error(where, "device-filter must be a string or a non-empty list of strings")
        return None
    models: list[GpuModel] = []
    for text in values:
        match = DEVICE_FILTER_FORMAT.match(text)
        if match is None:
            report.error(where, f"device-filter {text!r} is not of the form 0x<device><vendor> (e.g. 0x233010DE)")
            return None
        model = gpu_model_for_pci_id(int(match.group(1), 16))
        if match.group(2).lower() != "10de":
            report.warning(where, f"device-filter {text!r} names vendor 0x{match.group(2)}, not NVIDIA (10DE)")
        elif model is None:
            report.warning(where, f"device-filter {text!r} is not a MIG-capable GPU in the catalog")
        elif model not in models:
            models.append(model)
    return models


def _check_devices(value: Any, where: str, report: ValidationReport) -> None:
    if value == "all":
        return
    if isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                 for i in value):
        if len(set(value)) != len(value):
            report.error(where, "devices lists a GPU index more than once")
        return
    report.error(where, "devices must be \"all\" or a non-empty list of GPU indices")


def _check_mig_devices(value: Any, where: str, report: ValidationReport) -> dict[str, int] | None:
    if not isinstance(value, dict):
        report.error(where, "mig-devices must be a mapping of profile name to count")
        return None
    counts: dict[str, int] = {}
    ok = True
    for name, count in value.items():
        if not isinstance(name, str) or PROFILE_FORMAT.match(name) is None:
            meant = "".join(str(name).split()).lower()  # NVIDIA's names are lower case: `1g.10gb`, not `1g.10GB`
            hint = f"; did you mean {meant!r}?" if PROFILE_FORMAT.match(meant) else ""
            report.error(where, f"{name!r} is not a MIG profile name ([<C>c.]<G>g.<GB>gb[+attr]){hint}")
            ok = False
            continue
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            report.error(where, f"count of {name} must be a non-negative integer, got {count!r}")
            ok = False
            continue
        counts[name] = count
    if ok and counts and all(count == 0 for count in counts.values()):
        report.error(where, "every count in mig-devices is 0 (use {} for MIG enabled with no devices)")
        ok = False
    return counts if ok else None


def _check_on_model(model: GpuModel, counts: Mapping[str, int], where: str, report: ValidationReport) -> bool:
    unknown = [name for name in counts if not model.has_profile(name)]
    if unknown:
        compute_instance = [n for n in unknown if (match := PROFILE_FORMAT.match(n)) and match.group(1)]
        hint = " (compute-instance profiles are not modelled)" if compute_instance else ""
        names = ", ".join(p.name for p in model.profiles)
        close = [m for n in unknown for m in difflib.get_close_matches(n, [p.name for p in model.profiles], n=1)]
        if close and not compute_instance:
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)"
        report.error(where, f"{model.display_name} has no MIG profile {', '.join(unknown)}{hint}; it offers {names}")
        return False
    try:
        result = find_placement(model, counts)
    except UnknownMigProfile as exc:  # pragma: no cover - guarded above
        report.error(where, str(exc))
        return False
    if not result.feasible:
        report.error(where, result.reason)
        return False
    layout = ", ".join(f"{i.profile.name}@{i.placement}" for i in result.instances) or "no instances"
    report.checked.append(f"{where} on {model.display_name}: {layout}")
    return True


def config_map(config_yaml: str, *, name: str = "default-mig-parted-config", namespace: str = "gpu-operator",
               key: str = "config.yaml") -> dict[str, Any]:
    """The GPU Operator's form of a mig-parted config: a ConfigMap holding it under data[key] (the operator's
    ClusterPolicy `migManager.config.name` names it; `default-mig-parted-config` is the one it ships)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": {key: config_yaml}}


def configs_in_document(document: Any) -> list[tuple[str, Any, str]]:
    """The mig-parted configs a file holds: itself, or, for the GPU Operator's ConfigMap, every `data` entry
    that is a mig-parted config (label, config, field: "data['config.yaml']"). A ConfigMap without one gives a
    ValueError."""
    if not (isinstance(document, dict) and document.get("kind") == "ConfigMap"):
        return [("", document, "")]
    raw_metadata = document.get("metadata")
    metadata = raw_metadata if isinstance(raw_metadata, dict) else {}
    where = f"ConfigMap {metadata.get('namespace', 'default')}/{metadata.get('name', '')}"
    found = []
    for key, text in (document.get("data") or {}).items():
        try:
            config = load_yaml(text, f"{where} data[{key!r}]") if isinstance(text, str) else None
        except LoadError as exc:  # the file's own limits hold for the YAML text inside it too
            raise ValueError(str(exc)) from None
        if isinstance(config, dict) and ("mig-configs" in config or "version" in config):
            found.append((f"{where} data[{key!r}]", config, f"data[{key!r}]"))
    if not found:
        raise ValueError(f"{where} holds no mig-parted config (a data entry with version and mig-configs)")
    return found


def validate_config(document: Any, models: Iterable[GpuModel] | None = None) -> ValidationReport:
    """Check a parsed mig-parted config. With `models` (the node's GPUs) every entry is checked on
    each model its device-filter selects; without, on the models its filter names or, with no
    filter, on every catalog model offering all of its profiles (it must fit on at least one)."""
    report = ValidationReport()
    node_models = list(models) if models is not None else None
    if not isinstance(document, dict):
        report.error("<root>", "a mig-parted config must be a mapping with version and mig-configs")
        return report
    for key in document:
        if key not in ("version", "mig-configs"):
            report.error("<root>", f"unexpected field {key!r} (only version and mig-configs are allowed)")
    if document.get("version") != "v1":
        report.error("version", f"must be \"v1\", got {document.get('version')!r}")
    configs = document.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        report.error("mig-configs", "must be a non-empty mapping of config name to a list of entries")
        return report
    for config_name, entries in configs.items():
        base = f"mig-configs.{config_name}"
        if not isinstance(entries, list) or not entries:
            report.error(base, "must be a non-empty list of entries")
            continue
        for index, entry in enumerate(entries):
            _validate_entry(entry, f"{base}[{index}]", node_models, report)
    return report


def _validate_entry(entry: Any, where: str, node_models: list[GpuModel] | None, report: ValidationReport) -> None:
    if not isinstance(entry, dict):
        report.error(where, "entry must be a mapping")
        return
    for key in entry:
        if key not in ENTRY_KEYS:
            report.error(where, f"unexpected field {key!r} (allowed: {', '.join(ENTRY_KEYS)})")
    if "devices" not in entry:
        report.error(where, "devices is required")
    else:
        _check_devices(entry["devices"], where, report)
    enabled = entry.get("mig-enabled")
    if not isinstance(enabled, bool):
        report.error(where, "mig-enabled is required and must be true or false")
        return
    filter_models = None
    if "device-filter" in entry:
        filter_models = _models_for_filter(entry["device-filter"], where, report)
        if filter_models is None:
            return
    if not enabled:
        if entry.get("mig-devices"):
            report.error(where, "mig-devices must be absent or empty when mig-enabled is false")
        return
    if "mig-devices" not in entry:
        report.error(where, "mig-devices is required when mig-enabled is true ({} for none)")
        return
    counts = _check_mig_devices(entry["mig-devices"], where, report)
    if counts is None or not any(counts.values()):
        return
    wanted = {name: n for name, n in counts.items() if n > 0}
    if node_models is not None:
        targets = node_models if filter_models is None else [m for m in node_models if m in filter_models]
        if not targets:
            report.warning(where, "device-filter matches none of the given GPUs; entry not checked")
        for model in targets:
            _check_on_model(model, wanted, where, report)
        return
    if filter_models:
        for model in filter_models:
            _check_on_model(model, wanted, where, report)
        return
    candidates = [m for m in mig_models() if all(m.has_profile(name) for name in wanted)]
    if not candidates:
        report.error(where, f"no catalog GPU offers all of {', '.join(wanted)}")
        return
    scratch = ValidationReport()
    fits = [m for m in candidates if _check_on_model(m, wanted, where, scratch)]
    if fits:
        report.checked.extend(scratch.checked)
        return
    report.error(where, f"{describe_layout(wanted)} fits on none of the GPUs offering these profiles: "
                        + "; ".join(f.message for f in scratch.findings))
