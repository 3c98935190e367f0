"""Container Device Interface (CDI) spec model, spec version 1.1.0.

Parsing is strict like the reference Go implementation: an unknown field is an error.
`to_dict()` omits empty optional fields so written specs look like the ones
nvidia-ctk and the DRA drivers produce.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpudra.errors import GpudraError


class CdiError(GpudraError):
    """Invalid CDI content or an unresolvable device; a user-facing message."""


def _check_keys(data: Any, allowed: set[str], what: str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise CdiError(f"{what}: expected a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise CdiError(f"{what}: unknown field(s) {', '.join(unknown)}")
    for key in required:
        if key not in data or data[key] in (None, ""):
            raise CdiError(f"{what}: missing required field {key!r}")
    return data


def _str_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CdiError(f"{what}: expected a list of strings")
    return list(value)


def _opt_int(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise CdiError(f"{what}: expected an integer")
    return value


@dataclass
class DeviceNode:
    path: str
    host_path: str = ""
    type: str = ""
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str = ""
    uid: int | None = None
    gid: int | None = None

    FIELDS = {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}

    @classmethod
    def from_dict(cls, data: Any, what: str = "deviceNode") -> "DeviceNode":
        d = _check_keys(data, cls.FIELDS, what, ("path",))
        return cls(path=str(d["path"]), host_path=str(d.get("hostPath") or ""), type=str(d.get("type") or ""),
                   major=_opt_int(d.get("major"), what), minor=_opt_int(d.get("minor"), what),
                   file_mode=_opt_int(d.get("fileMode"), what), permissions=str(d.get("permissions") or ""),
                   uid=_opt_int(d.get("uid"), what), gid=_opt_int(d.get("gid"), what))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        for key, value in (("hostPath", self.host_path), ("type", self.type), ("major", self.major),
                           ("minor", self.minor), ("fileMode", self.file_mode), ("permissions", self.permissions),
                           ("uid", self.uid), ("gid", self.gid)):
            if value not in (None, ""):
                out[key] = value
        return out


@dataclass
class Mount:
    host_path: str
    container_path: str
    options: list[str] = field(default_factory=list)
    type: str = ""

    FIELDS = {"hostPath", "containerPath", "options", "type"}

    @classmethod
    def from_dict(cls, data: Any, what: str = "mount") -> "Mount":
        d = _check_keys(data, cls.FIELDS, what, ("hostPath", "containerPath"))
        return cls(host_path=str(d["hostPath"]), container_path=str(d["containerPath"]),
                   options=_str_list(d.get("options"), what), type=str(d.get("type") or ""))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.options:
            out["options"] = list(self.options)
        if self.type:
            out["type"] = self.type
        return out


@dataclass
class Hook:
    hook_name: str
    path: str
    args: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    timeout: int | None = None

    FIELDS = {"hookName", "path", "args", "env", "timeout"}

    @classmethod
    def from_dict(cls, data: Any, what: str = "hook") -> "Hook":
        d = _check_keys(data, cls.FIELDS, what, ("hookName", "path"))
        return cls(hook_name=str(d["hookName"]), path=str(d["path"]), args=_str_list(d.get("args"), what),
                   env=_str_list(d.get("env"), what), timeout=_opt_int(d.get("timeout"), what))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hookName": self.hook_name, "path": self.path}
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = list(self.env)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out


@dataclass
class NetDevice:
    host_interface_name: str
    name: str

    @classmethod
    def from_dict(cls, data: Any, what: str = "netDevice") -> "NetDevice":
        d = _check_keys(data, {"hostInterfaceName", "name"}, what, ("hostInterfaceName", "name"))
        return cls(str(d["hostInterfaceName"]), str(d["name"]))

    def to_dict(self) -> dict[str, Any]:
        return {"hostInterfaceName": self.host_interface_name, "name": self.name}


@dataclass
class IntelRdt:
    clos_id: str = ""
    l3_cache_schema: str = ""
    mem_bw_schema: str = ""
    schemata: list[str] = field(default_factory=list)
    enable_monitoring: bool = False

    @classmethod
    def from_dict(cls, data: Any, what: str = "intelRdt") -> "IntelRdt":
        d = _check_keys(data, {"closID", "l3CacheSchema", "memBwSchema", "schemata", "enableMonitoring"}, what)
        return cls(str(d.get("closID") or ""), str(d.get("l3CacheSchema") or ""), str(d.get("memBwSchema") or ""),
                   _str_list(d.get("schemata"), what), bool(d.get("enableMonitoring", False)))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in (("closID", self.clos_id), ("l3CacheSchema", self.l3_cache_schema),
                           ("memBwSchema", self.mem_bw_schema), ("schemata", self.schemata),
                           ("enableMonitoring", self.enable_monitoring)):
            if value:
                out[key] = value
        return out


@dataclass
class ContainerEdits:
    env: list[str] = field(default_factory=list)
    device_nodes: list[DeviceNode] = field(default_factory=list)
    net_devices: list[NetDevice] = field(default_factory=list)
    hooks: list[Hook] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    intel_rdt: IntelRdt | None = None
    additional_gids: list[int] = field(default_factory=list)

    FIELDS = {"env", "deviceNodes", "netDevices", "hooks", "mounts", "intelRdt", "additionalGids"}

    @classmethod
    def from_dict(cls, data: Any, what: str = "containerEdits") -> "ContainerEdits":
        if data is None:
            return cls()
        d = _check_keys(data, cls.FIELDS, what)
        gids = d.get("additionalGids") or []
        if not isinstance(gids, list) or not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0
                                                 for g in gids):
            raise CdiError(f"{what}.additionalGids: expected a list of non-negative integers")
        return cls(
            env=_str_list(d.get("env"), f"{what}.env"),
            device_nodes=[DeviceNode.from_dict(x, f"{what}.deviceNodes[{i}]") for i, x in enumerate(d.get("deviceNodes") or [])],
            net_devices=[NetDevice.from_dict(x, f"{what}.netDevices[{i}]") for i, x in enumerate(d.get("netDevices") or [])],
            hooks=[Hook.from_dict(x, f"{what}.hooks[{i}]") for i, x in enumerate(d.get("hooks") or [])],
            mounts=[Mount.from_dict(x, f"{what}.mounts[{i}]") for i, x in enumerate(d.get("mounts") or [])],
            intel_rdt=IntelRdt.from_dict(d["intelRdt"], f"{what}.intelRdt") if d.get("intelRdt") else None,
            additional_gids=list(gids),
        )

    def is_empty(self) -> bool:
        return not (self.env or self.device_nodes or self.net_devices or self.hooks or self.mounts
                    or self.intel_rdt or self.additional_gids)

    def append(self, other: "ContainerEdits") -> "ContainerEdits":
        self.env.extend(other.env)
        self.device_nodes.extend(other.device_nodes)
        self.net_devices.extend(other.net_devices)
        self.hooks.extend(other.hooks)
        self.mounts.extend(other.mounts)
        if other.intel_rdt is not None:
            self.intel_rdt = other.intel_rdt
        self.additional_gids.extend(other.additional_gids)
        return self

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [d.to_dict() for d in self.device_nodes]
        if self.net_devices:
            out["netDevices"] = [n.to_dict() for n in self.net_devices]
        if self.hooks:
            out["hooks"] = [h.to_dict() for h in self.hooks]
        if self.mounts:
            out["mounts"] = [m.to_dict() for m in self.mounts]
        if self.intel_rdt is not None:
            out["intelRdt"] = self.intel_rdt.to_dict()
        if self.additional_gids:
            out["additionalGids"] = list(self.additional_gids)
        return out


@dataclass
class Device:
    name: str
    container_edits: ContainerEdits
    annotations: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, what: str = "device") -> "Device":
        d = _check_keys(data, {"name", "annotations", "containerEdits"}, what, ("name",))
        return cls(name=str(d["name"]), container_edits=ContainerEdits.from_dict(d.get("containerEdits"),
                                                                                  f"{what}.containerEdits"),
                   annotations=dict(d.get("annotations") or {}))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        out["containerEdits"] = self.container_edits.to_dict()
        return out


@dataclass
class Spec:
    kind: str
    devices: list[Device]
    cdi_version: str = ""  # empty: the writer fills in the minimum required version
    container_edits: ContainerEdits = field(default_factory=ContainerEdits)
    annotations: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, what: str = "spec") -> "Spec":
        d = _check_keys(data, {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}, what,
                        ("cdiVersion", "kind"))
        devices = d.get("devices") or []
        if not isinstance(devices, list):
            raise CdiError(f"{what}.devices: expected a list")
        return cls(kind=str(d["kind"]), cdi_version=str(d["cdiVersion"]),
                   devices=[Device.from_dict(x, f"{what}.devices[{i}]") for i, x in enumerate(devices)],
                   container_edits=ContainerEdits.from_dict(d.get("containerEdits"), f"{what}.containerEdits"),
                   annotations=dict(d.get("annotations") or {}))

    @property
    def vendor(self) -> str:
        return self.kind.split("/", 1)[0]

    @property
    def device_class(self) -> str:
        return self.kind.split("/", 1)[1] if "/" in self.kind else ""

    def qualified_name(self, device: str) -> str:
        return f"{self.kind}={device}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cdiVersion": self.cdi_version, "kind": self.kind}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        out["devices"] = [d.to_dict() for d in self.devices]
        edits = self.container_edits.to_dict()
        if edits:
            out["containerEdits"] = edits
        return out
