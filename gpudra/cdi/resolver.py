"""Resolve CDI device IDs and apply them to an OCI runtime spec the way container runtimes do.

Mirrors the reference `cdi` package: spec directories are scanned in order (later = higher
priority), a device defined twice at the same priority is a conflict, each referenced spec's
spec-level edits are applied once plus the edits of every requested device; env entries
replace same-named variables, device nodes and mounts replace earlier ones at the same
container path, mounts are sorted by path depth, and char/block device nodes get a cgroup
allow rule.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any

from gpudra.copying import copy_object

from .spec import CdiError, ContainerEdits, DeviceNode, Spec
from .validate import parse_qualified_name, validate_spec
from .writer import DEFAULT_SPEC_DIRS, load_spec_file


@dataclass
class Registry:
    """All CDI devices visible from a list of spec directories."""

    spec_dirs: tuple[str, ...] = DEFAULT_SPEC_DIRS
    devices: dict[str, tuple[Spec, int]] = field(default_factory=dict)  # qualified name -> (spec, device index)
    spec_files: dict[str, str] = field(default_factory=dict)  # qualified name -> the spec file defining it
    errors: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, spec_dirs: tuple[str, ...] | list[str] = DEFAULT_SPEC_DIRS) -> "Registry":
        registry = cls(spec_dirs=tuple(spec_dirs))
        for directory in registry.spec_dirs:
            try:
                names = sorted(os.listdir(directory))
            except FileNotFoundError:
                continue
            at_this_priority: dict[str, str] = {}
            for name in names:
                if not name.endswith((".yaml", ".json")) or name.startswith("."):
                    continue
                path = os.path.join(directory, name)
                try:
                    spec = load_spec_file(path)
                except CdiError as exc:
                    registry.errors.append(str(exc))
                    continue
                problems = validate_spec(spec)
                if problems:
                    registry.errors.append(f"{path}: " + "; ".join(problems))
                    continue
                for index, device in enumerate(spec.devices):
                    qualified = spec.qualified_name(device.name)
                    if qualified in at_this_priority:
                        registry.errors.append(f"conflicting device {qualified} in {at_this_priority[qualified]} and {path}")
                        registry.devices.pop(qualified, None)
                        registry.spec_files.pop(qualified, None)
                        continue
                    at_this_priority[qualified] = path
                    registry.devices[qualified] = (spec, index)  # higher priority dirs overwrite
                    registry.spec_files[qualified] = path
        return registry

    def resolve(self, device_ids: list[str]) -> ContainerEdits:
        """Collected edits for the devices, spec-level edits once per spec; raises on unresolvable IDs."""
        unresolved = []
        edits = ContainerEdits()
        seen_specs: set[int] = set()
        for device_id in device_ids:
            parse_qualified_name(device_id)
            found = self.devices.get(device_id)
            if found is None:
                unresolved.append(device_id)
                continue
            spec, index = found
            if id(spec) not in seen_specs:
                seen_specs.add(id(spec))
                edits.append(copy_object(spec.container_edits))
            edits.append(copy_object(spec.devices[index].container_edits))
        if unresolved:
            raise CdiError(f"unresolvable CDI devices {', '.join(unresolved)}")
        return edits


def default_oci_spec() -> dict[str, Any]:
    """A minimal OCI runtime spec like `runc spec` / containerd produce before device injection."""
    return {
        "ociVersion": "1.2.0",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
        },
        "root": {"path": "rootfs"},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755"]},
        ],
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
    }


def _fill_device_node(node: DeviceNode) -> DeviceNode:
    """Runtime behaviour: look up type/major/minor/mode on the host unless they are given."""
    node = copy_object(node)
    host = node.host_path or node.path
    if node.type == "p" or (node.type and node.major is not None):
        return node
    try:
        st = os.stat(host)
    except OSError as exc:
        raise CdiError(f"failed to stat CDI host device {host!r}: {exc.strerror}") from None
    if stat.S_ISBLK(st.st_mode):
        kind = "b"
    elif stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISFIFO(st.st_mode):
        kind = "p"
    else:
        raise CdiError(f"CDI device node {host!r} is not a device node")
    if node.type and node.type != kind:
        raise CdiError(f"CDI device {node.path}: host device type {kind!r} does not match {node.type!r}")
    node.type = kind
    node.major, node.minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    if node.file_mode is None:
        node.file_mode = stat.S_IMODE(st.st_mode)
    return node


def _set_env(env: list[str], entry: str) -> None:
    key = entry.split("=", 1)[0]
    for i, existing in enumerate(env):
        if existing.split("=", 1)[0] == key:
            env[i] = entry
            return
    env.append(entry)


def apply_edits(oci: dict[str, Any], edits: ContainerEdits) -> dict[str, Any]:
    """Return a copy of the OCI spec with the container edits applied."""
    spec = copy_object(oci)
    process = spec.setdefault("process", {})
    env = process.setdefault("env", [])
    for entry in edits.env:
        _set_env(env, entry)
    linux = spec.setdefault("linux", {})
    user = process.get("user") or {}
    for node in edits.device_nodes:
        node = _fill_device_node(node)
        device: dict[str, Any] = {"path": node.path, "type": node.type}
        if node.type != "p":
            device["major"], device["minor"] = node.major or 0, node.minor or 0
        if node.file_mode is not None:
            device["fileMode"] = node.file_mode
        uid = node.uid if node.uid is not None else (user.get("uid") or None)
        gid = node.gid if node.gid is not None else (user.get("gid") or None)
        if uid:
            device["uid"] = uid
        if gid:
            device["gid"] = gid
        devices = [d for d in linux.get("devices", []) if d.get("path") != node.path]
        devices.append(device)
        linux["devices"] = devices
        if node.type in ("b", "c"):
            access = node.permissions or "rwm"
            if access != "none":
                rules = linux.setdefault("resources", {}).setdefault("devices", [])
                rules.append({"allow": True, "type": node.type, "major": device["major"], "minor": device["minor"],
                              "access": access})
    if edits.mounts:
        mounts = spec.setdefault("mounts", [])
        for mount in edits.mounts:
            mounts[:] = [m for m in mounts if m.get("destination") != mount.container_path]
            mount_entry: dict[str, Any] = {"destination": mount.container_path, "source": mount.host_path}
            if mount.type:
                mount_entry["type"] = mount.type
            if mount.options:
                mount_entry["options"] = list(mount.options)
            mounts.append(mount_entry)
        mounts.sort(key=lambda m: len([p for p in m["destination"].split("/") if p]))
    for hook in edits.hooks:
        hook_entry: dict[str, Any] = {"path": hook.path}
        if hook.args:
            hook_entry["args"] = list(hook.args)
        if hook.env:
            hook_entry["env"] = list(hook.env)
        if hook.timeout is not None:
            hook_entry["timeout"] = hook.timeout
        spec.setdefault("hooks", {}).setdefault(hook.hook_name, []).append(hook_entry)
    if edits.additional_gids:
        gids = process.setdefault("user", {}).setdefault("additionalGids", [])
        for gid in edits.additional_gids:
            if gid != 0 and gid not in gids:
                gids.append(gid)
    if edits.intel_rdt is not None:
        rdt = edits.intel_rdt.to_dict()
        linux["intelRdt"] = rdt
    for net in edits.net_devices:
        linux.setdefault("netDevices", {})[net.host_interface_name] = {"name": net.name}
    return spec


def apply_devices(oci: dict[str, Any], device_ids: list[str], spec_dirs: tuple[str, ...] | list[str] = DEFAULT_SPEC_DIRS
                  ) -> dict[str, Any]:
    """Resolve `device_ids` from `spec_dirs` and apply them to `oci` (what the runtime would run)."""
    registry = Registry.load(spec_dirs)
    return apply_edits(oci, registry.resolve(device_ids))
