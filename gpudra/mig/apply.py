"""Apply a named mig-parted config to a node's GPUs through a discovery backend (what `nvidia-mig-parted
apply -f FILE -c NAME` does), refusing while prepared claims hold devices on a GPU that would change.

The steps follow mig-parted (`pkg/mig/config/config.go`): a GPU whose MIG mode and instance multiset
already match is left alone (`assert`); otherwise its existing instances are destroyed, the mode is
set, and the wanted instances are created. Unlike mig-parted, which lets NVML choose placements, the
placements come from the catalog's placement search, so the result is the same on the simulated and
the NVML backends and the driver's device names are predictable.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping


from gpudra.catalog import GpuModel, UnknownMigProfile, find_gpu_model
from gpudra.discovery import GpuBackend, Inventory, MigError
from gpudra.errors import GpudraError
from gpudra.kubeletplugin.checkpoint import Checkpoint
from gpudra.kubeletplugin.prepared import reserved_devices
from gpudra.mig.config import DEVICE_FILTER_FORMAT, configs_in_document, validate_config
from gpudra.mig.placement import describe_layout, find_placement


class ApplyError(GpudraError):
    """The config cannot be applied (unknown name, invalid entry, layout that does not fit); a user message."""


class ApplyRefused(ApplyError):
    """GPUs that would change hold prepared claims' devices."""

    def __init__(self, busy: Mapping[int, list[str]]):
        self.busy = dict(busy)
        lines = [f"gpu-{minor}: {holder}" for minor, holders in sorted(self.busy.items()) for holder in holders]
        super().__init__("refusing to repartition GPUs with prepared claims (unprepare them first):\n  "
                         + "\n  ".join(lines))


@dataclass
class GpuChange:
    """One GPU's current and wanted MIG state."""

    minor: int
    index: int
    model: GpuModel | None
    mig_enabled: bool
    current: Counter[str] = field(default_factory=Counter)  # profile name -> count of existing instances
    want_enabled: bool = False
    want: dict[str, int] = field(default_factory=dict)

    @property
    def unchanged(self) -> bool:
        return self.mig_enabled == self.want_enabled and (not self.want_enabled or self.current == Counter(
            {name: n for name, n in self.want.items() if n > 0}))

    def describe(self) -> str:
        if not self.want_enabled:
            return f"gpu-{self.minor}: MIG disabled"
        return f"gpu-{self.minor}: MIG enabled, " + (describe_layout(self.want) if any(self.want.values())
                                                      else "no MIG devices")


def config_entries(document: Any, name: str) -> list[dict[str, Any]]:
    """The entries of config `name` in a mig-parted file (or the GPU Operator's ConfigMap holding one)."""
    try:
        configs = configs_in_document(document)
    except ValueError as exc:
        raise ApplyError(str(exc)) from None
    names: list[str] = []
    for where, config, _ in configs:
        report = validate_config(config)
        if not report.valid:
            raise ApplyError("invalid mig-parted config" + (f" ({where})" if where else "") + ": "
                             + "; ".join(f"{f.where}: {f.message}" for f in report.findings if f.severity == "error"))
        table = config.get("mig-configs") or {}
        if name in table:
            entries: list[dict[str, Any]] = table[name]  # a list of entries: validate_config checked it
            return entries
        names.extend(table)
    raise ApplyError(f"no mig-parted config named {name!r}; the file has: {', '.join(names) or 'none'}")


def read_config_file(path: str) -> Any:
    """A mig-parted config file (or ConfigMap) parsed; '-' reads stdin."""
    from gpudra.api.yaml_files import LoadError, read_yaml  # the manifest loader's limits and wording

    try:
        return read_yaml(path)
    except LoadError as exc:
        raise ApplyError(str(exc)) from None


def _filter_ids(value: Any) -> set[int]:
    values = value if isinstance(value, list) else [value]
    ids = set()
    for text in values:
        match = DEVICE_FILTER_FORMAT.match(str(text))
        if match:
            ids.add(int(match.group(1), 16))
    return ids


def plan_changes(entries: list[dict[str, Any]], inventory: Inventory) -> list[GpuChange]:
    """Each selected GPU's wanted state; entries apply in order, so a later entry wins for a GPU both select."""
    changes: dict[int, GpuChange] = {}
    for gpu in inventory.gpus:
        model = find_gpu_model(gpu.model or gpu.product_name) if gpu.mig_capable else None
        changes[gpu.minor] = GpuChange(minor=gpu.minor, index=gpu.index, model=model, mig_enabled=gpu.mig_enabled,
                                       current=Counter(m.profile for m in gpu.mig_devices))
    selected: set[int] = set()
    for position, entry in enumerate(entries):
        ids = _filter_ids(entry["device-filter"]) if "device-filter" in entry else None
        devices = entry.get("devices")
        for gpu in inventory.gpus:
            change = changes[gpu.minor]
            if devices != "all" and gpu.index not in (devices or []):
                continue
            if ids is not None and (change.model is None or not ids & set(change.model.pci_device_ids)):
                continue
            if change.model is None:
                raise ApplyError(f"entry {position} selects gpu-{gpu.minor} ({gpu.product_name}), which has no MIG")
            change.want_enabled = bool(entry.get("mig-enabled"))
            change.want = {k: int(v) for k, v in (entry.get("mig-devices") or {}).items()} if change.want_enabled \
                else {}
            selected.add(gpu.minor)
    out = [changes[minor] for minor in sorted(selected)]
    for change in out:
        if change.want_enabled and any(change.want.values()):
            assert change.model is not None  # a selected GPU has MIG (refused above otherwise)
            try:
                fits = find_placement(change.model, change.want)
            except UnknownMigProfile as exc:
                raise ApplyError(f"gpu-{change.minor}: {exc}") from None
            if not fits:
                raise ApplyError(f"gpu-{change.minor}: {fits.reason}")
    return out


def busy_gpus(checkpoint: Checkpoint | None) -> dict[int, list[str]]:
    """GPU minor -> the prepared (or being prepared) claims holding devices on it, from the driver's checkpoint.
    Entries the driver cannot use count too, as far as they can be read: the driver keeps their devices reserved."""
    busy: dict[int, list[str]] = {}
    if checkpoint is None:
        return busy
    for uid, entry in checkpoint.claims.items():
        for device in entry.devices:
            if device.gpu_minor is not None:
                busy.setdefault(device.gpu_minor, []).append(
                    f"claim {entry.namespace}/{entry.name} ({uid}) holds {device.device}")
    for bad in checkpoint.unusable:
        raw = bad.entry if isinstance(bad.entry, dict) else {}
        for reserved in reserved_devices(bad.entry):
            if reserved.gpu_minor is not None:
                busy.setdefault(reserved.gpu_minor, []).append(
                    f"claim {raw.get('namespace')}/{raw.get('name')} ({bad.uid}) holds {reserved.device}")
    return busy


def apply_changes(backend: GpuBackend, changes: Iterable[GpuChange], busy: Mapping[int, list[str]]) -> list[str]:
    """Repartition every GPU whose state differs; returns what was done, one line per GPU. Nothing is
    touched when a GPU that would change holds claims (ApplyRefused lists them)."""
    todo = [c for c in changes if not c.unchanged]
    refused = {c.minor: list(busy[c.minor]) for c in todo if busy.get(c.minor)}
    if refused:
        raise ApplyRefused(refused)
    done = []
    for change in todo:
        inventory_gpu = backend.inventory().gpu_by_minor(change.minor)
        for mig in inventory_gpu.mig_devices if inventory_gpu else []:
            backend.destroy_mig_device(change.minor, mig.gi_id)
        if change.mig_enabled != change.want_enabled:
            backend.set_mig_mode(change.minor, change.want_enabled)  # MigError: pending a reset, in use
        if change.want_enabled and any(change.want.values()):
            assert change.model is not None  # plan_changes selects only GPUs with MIG
            for instance in find_placement(change.model, change.want).instances:
                backend.create_mig_device(change.minor, instance.profile.profile_id, instance.placement.start)
        done.append(change.describe())
    return done


@dataclass
class ApplyResult:
    changed: list[str]
    unchanged: list[str]


def apply_config(backend: GpuBackend, document: Any, name: str,
                 checkpoint: Checkpoint | None = None) -> ApplyResult:
    """Apply config `name` of `document`; `checkpoint` is the driver's (its claims block changing GPUs)."""
    changes = plan_changes(config_entries(document, name), backend.inventory())
    try:
        changed = apply_changes(backend, changes, busy_gpus(checkpoint))
    except MigError as exc:
        raise ApplyError(str(exc)) from None
    return ApplyResult(changed=changed, unchanged=[c.describe() for c in changes if c.unchanged])


def is_applied(backend: GpuBackend, document: Any, name: str) -> bool:
    """`nvidia-mig-parted assert`: every GPU the config selects is already as it says."""
    return all(c.unchanged for c in plan_changes(config_entries(document, name), backend.inventory()))
