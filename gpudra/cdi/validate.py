"""CDI naming rules, spec versions and spec validation (as in the reference Go `cdi`/`parser` packages)."""

from __future__ import annotations

import re

from .spec import CdiError, ContainerEdits, Spec

VALID_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
EARLIEST_SUPPORTED = "0.3.0"
CURRENT_VERSION = "1.1.0"
HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
DEVICE_NODE_TYPES = ("", "b", "c", "u", "p")

_VENDOR_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_CLASS_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


def version_key(version: str) -> tuple[int, int, int]:
    text = version[1:] if version.startswith("v") else version
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", text)
    if not match:
        raise CdiError(f"invalid cdiVersion {version!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def _edits_list(spec: Spec) -> list[ContainerEdits]:
    return [spec.container_edits] + [d.container_edits for d in spec.devices]


def minimum_required_version(spec: Spec) -> str:
    """The lowest cdiVersion that can express everything the spec uses."""
    edits = _edits_list(spec)
    if any(e.net_devices for e in edits) or any(e.intel_rdt and (e.intel_rdt.schemata or e.intel_rdt.enable_monitoring)
                                                for e in edits):
        return "1.1.0"
    if any(e.intel_rdt for e in edits) or any(e.additional_gids for e in edits):
        return "0.7.0"
    if spec.annotations or any(d.annotations for d in spec.devices) or "." in spec.device_class:
        return "0.6.0"
    if any(d.name[:1].isdigit() for d in spec.devices) or any(n.host_path for e in edits for n in e.device_nodes):
        return "0.5.0"
    if any(m.type for e in edits for m in e.mounts):
        return "0.4.0"
    return EARLIEST_SUPPORTED


def validate_vendor_name(vendor: str) -> str | None:
    if not vendor:
        return "empty vendor name"
    if not _VENDOR_RE.match(vendor):
        return f"invalid vendor {vendor!r}: must start with a letter, end with a letter or digit, and contain only letters, digits, '_', '.', '-'"
    return None


def validate_class_name(cls: str) -> str | None:
    if not cls:
        return "empty class name"
    if not _CLASS_RE.match(cls):
        return f"invalid class {cls!r}: must start with a letter, end with a letter or digit, and contain only letters, digits, '_', '.', '-'"
    if len(cls) > 63:
        return f"invalid class {cls!r}: longer than 63 characters"
    return None


def validate_device_name(name: str) -> str | None:
    if not name:
        return "empty device name"
    if not _DEVICE_RE.match(name):
        return f"invalid device name {name!r}: must start and end with a letter or digit and contain only letters, digits, '_', '.', ':', '-'"
    return None


def parse_qualified_name(device: str) -> tuple[str, str, str]:
    """`vendor/class=name` -> (vendor, class, name); raises CdiError."""
    kind, sep, name = device.partition("=")
    vendor, slash, cls = kind.partition("/")
    if not sep or not slash:
        raise CdiError(f"unqualified CDI device {device!r}: expected vendor/class=name")
    for problem in (validate_vendor_name(vendor), validate_class_name(cls), validate_device_name(name)):
        if problem:
            raise CdiError(f"invalid CDI device {device!r}: {problem}")
    return vendor, cls, name


def _validate_edits(edits: ContainerEdits, what: str) -> list[str]:
    problems = []
    for env in edits.env:
        if "=" not in env or env.index("=") == 0:
            problems.append(f"{what}: invalid environment variable {env!r} (want KEY=VALUE)")
    for node in edits.device_nodes:
        if not node.path:
            problems.append(f"{what}: device node with empty path")
        if node.type not in DEVICE_NODE_TYPES:
            problems.append(f"{what}: device node {node.path}: invalid type {node.type!r}")
        if node.permissions and node.permissions != "none" and not set(node.permissions) <= set("rwm"):
            problems.append(f"{what}: device node {node.path}: invalid permissions {node.permissions!r}")
    for hook in edits.hooks:
        if hook.hook_name not in HOOK_NAMES:
            problems.append(f"{what}: invalid hook name {hook.hook_name!r}")
        if not hook.path:
            problems.append(f"{what}: hook with empty path")
        if hook.timeout is not None and hook.timeout <= 0:
            problems.append(f"{what}: hook {hook.path}: timeout must be positive")
        for env in hook.env:
            if "=" not in env or env.index("=") == 0:
                problems.append(f"{what}: hook {hook.path}: invalid environment variable {env!r}")
    for mount in edits.mounts:
        if not mount.host_path or not mount.container_path:
            problems.append(f"{what}: mount needs both hostPath and containerPath")
    for net in edits.net_devices:
        if not net.host_interface_name or not net.name:
            problems.append(f"{what}: netDevice needs hostInterfaceName and name")
    return problems


def validate_spec(spec: Spec) -> list[str]:
    """Every problem with the spec (empty list when valid)."""
    problems: list[str] = []
    if spec.cdi_version:
        try:
            key = version_key(spec.cdi_version)
            if f"{key[0]}.{key[1]}.{key[2]}" not in VALID_VERSIONS:
                problems.append(f"unsupported cdiVersion {spec.cdi_version!r}")
            elif key < version_key(EARLIEST_SUPPORTED):
                problems.append(f"cdiVersion {spec.cdi_version} is older than the earliest supported {EARLIEST_SUPPORTED}")
            elif key < version_key(minimum_required_version(spec)):
                problems.append(f"cdiVersion {spec.cdi_version} is too old: the spec needs at least "
                                f"{minimum_required_version(spec)}")
        except CdiError as exc:
            problems.append(str(exc))
    else:
        problems.append("missing cdiVersion")
    vendor, slash, cls = spec.kind.partition("/")
    if not slash:
        problems.append(f"invalid kind {spec.kind!r}: want vendor/class")
    else:
        problems.extend(p for p in (validate_vendor_name(vendor), validate_class_name(cls)) if p)
    if not spec.devices:
        problems.append("spec has no devices")
    seen: set[str] = set()
    for device in spec.devices:
        problem = validate_device_name(device.name)
        if problem:
            problems.append(problem)
        if device.name in seen:
            problems.append(f"duplicate device name {device.name!r}")
        seen.add(device.name)
        if device.container_edits.is_empty():
            problems.append(f"invalid device {device.name!r}: empty device edits")
        problems.extend(_validate_edits(device.container_edits, f"device {device.name}"))
    problems.extend(_validate_edits(spec.container_edits, "spec containerEdits"))
    return problems


def check_spec(spec: Spec) -> None:
    problems = validate_spec(spec)
    if problems:
        raise CdiError("invalid CDI spec: " + "; ".join(problems))
