"""Where a local cluster keeps things: its state directory, its nodes, and which cluster was brought up last."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpudra.api.dump import dump_yaml_data
from gpudra.driver.paths import DriverPaths
from gpudra.driver.slices import DEFAULT_DRIVER_NAME

from gpudra.errors import GpudraError

from .store import Store

CONFIG_FILE = "cluster.yaml"
DEFAULT_NODES = "dgx-h100:2,hgx-a100-mig+dynamic-mig,l4-node"
DEFAULT_KUBERNETES_VERSION = "1.36"
DEFAULT_EVENT_TTL_S = 3600  # kube-apiserver --event-ttl (1h)
# Kubelet-like layout under each node's root, kept short: unix socket paths must stay under 108 bytes.
REGISTRY_DIR = "/registry"
PLUGINS_DIR = "/plugins"
CDI_DIR = "/var/run/cdi"


class ClusterSetupError(GpudraError):
    """A problem the user can fix (bad --nodes, no cluster, a path too long); printed without a traceback."""


@dataclass
class NodeSpec:
    name: str
    profile: str
    dynamic_mig: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "profile": self.profile, "dynamicMig": self.dynamic_mig}


@dataclass
class ClusterConfig:
    nodes: list[NodeSpec] = field(default_factory=list)
    policy: str = "kube"
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    driver_name: str = DEFAULT_DRIVER_NAME
    event_ttl_s: int = DEFAULT_EVENT_TTL_S


def _short_name(profile: str) -> str:
    base = os.path.splitext(os.path.basename(profile))[0].lower()
    base = re.sub(r"^(dgx|hgx)-", "", base)
    base = re.sub(r"-(node|mig)$", "", base)
    return re.sub(r"[^a-z0-9-]", "-", base).strip("-") or "node"


def parse_nodes(text: str) -> list[NodeSpec]:
    """`PROFILE[:COUNT][+dynamic-mig],…` → nodes named `<short profile>-<i>` (dgx-h100:2 → h100-0, h100-1)."""
    from gpudra.discovery.model import DiscoveryError
    from gpudra.discovery.profiles import node_profile

    nodes: list[NodeSpec] = []
    counters: dict[str, int] = {}
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        dynamic = part.endswith("+dynamic-mig")
        part = part.removesuffix("+dynamic-mig")
        profile, _, count_text = part.partition(":")
        if count_text and not count_text.isdigit():
            raise ClusterSetupError(f"--nodes: {part!r}: COUNT must be a positive integer")
        count = int(count_text or 1)
        if count < 1:
            raise ClusterSetupError(f"--nodes: {part!r}: COUNT must be a positive integer")
        try:
            node_profile(profile)
        except DiscoveryError as exc:
            raise ClusterSetupError(f"--nodes: {exc}") from None
        short = _short_name(profile)
        for _ in range(count):
            index = counters.get(short, 0)
            counters[short] = index + 1
            nodes.append(NodeSpec(f"{short}-{index}", profile, dynamic))
    if not nodes:
        raise ClusterSetupError("--nodes: no node given")
    return nodes


class ClusterDir:
    """A local cluster's state directory."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.store = Store(self.path, release=self.kubernetes_version)
        self._release_seen: tuple[float, str] | None = None

    def kubernetes_version(self) -> str | None:
        """The cluster's release from its config (re-read only when the file changes); None before `up`."""
        try:
            mtime = os.stat(self.config_path).st_mtime
        except FileNotFoundError:
            return None
        if self._release_seen is None or self._release_seen[0] != mtime:
            self._release_seen = (mtime, self.load_config().kubernetes_version)
        return self._release_seen[1]

    @property
    def config_path(self) -> str:
        return os.path.join(self.path, CONFIG_FILE)

    def exists(self) -> bool:
        return os.path.isfile(self.config_path)

    def load_config(self) -> ClusterConfig:
        try:
            with open(self.config_path, encoding="utf-8") as fh:
                data = yaml.safe_load(fh) or {}
        except FileNotFoundError:
            raise ClusterSetupError(f"no local cluster in {self.path} (run `gpudra cluster up --dir {self.path}`)") from None
        nodes = [NodeSpec(n["name"], n["profile"], bool(n.get("dynamicMig"))) for n in data.get("nodes") or []]
        return ClusterConfig(nodes=nodes, policy=data.get("policy", "kube"),
                             kubernetes_version=str(data.get("kubernetesVersion", DEFAULT_KUBERNETES_VERSION)),
                             driver_name=data.get("driverName", DEFAULT_DRIVER_NAME),
                             event_ttl_s=int(data.get("eventTTLSeconds", DEFAULT_EVENT_TTL_S)))

    def save_config(self, config: ClusterConfig) -> None:
        os.makedirs(self.path, exist_ok=True)
        data = {"apiVersion": "gpudra.local/v1", "kind": "LocalCluster", "policy": config.policy,
                "kubernetesVersion": config.kubernetes_version, "driverName": config.driver_name,
                "eventTTLSeconds": config.event_ttl_s, "nodes": [n.to_dict() for n in config.nodes]}
        with open(self.config_path, "w", encoding="utf-8") as fh:
            fh.write(dump_yaml_data(data))

    def node_dir(self, node: str) -> str:
        return os.path.join(self.path, "nodes", node)

    def driver_paths(self, node: str, driver_name: str = DEFAULT_DRIVER_NAME) -> DriverPaths:
        return DriverPaths(driver_name=driver_name, root=self.node_dir(node), registry_dir=REGISTRY_DIR,
                           plugins_dir=PLUGINS_DIR, cdi_dir=CDI_DIR)

    def pid_file(self, node: str) -> str:
        return os.path.join(self.node_dir(node), "driver.pid")

    def log_file(self, node: str) -> str:
        return os.path.join(self.node_dir(node), "driver.log")

    def kubelet_dir(self, node: str) -> str:
        """The kubelet stand-in's records: one file per started pod (prepared claims, containers' view)."""
        return os.path.join(self.node_dir(node), "kubelet", "pods")

    def controller_lock(self) -> str:
        return os.path.join(self.path, "controller.lock")

    def control_plane_pid_file(self) -> str:
        return os.path.join(self.path, "control-plane.pid")

    def control_plane_log(self) -> str:
        return os.path.join(self.path, "control-plane.log")

    # Everything the cluster writes directly in its directory (`cluster down` removes these and no other file,
    # since the directory may be one of the user's: `cluster up --dir .`, `demo --keep DIR`).
    OWN_ENTRIES = (CONFIG_FILE, "nodes", "store", "store.lock", "controller.lock", "control-plane.pid",
                   "control-plane.log", "view.html")


# ----- the cluster brought up last -------------------------------------------------------------------


def _state_home() -> str:
    return os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")


def current_pointer() -> str:
    return os.path.join(_state_home(), "gpudra", "current-cluster")


def default_new_dir() -> str:
    return os.path.join(_state_home(), "gpudra", "cluster")


def remember(path: str) -> None:
    pointer = current_pointer()
    os.makedirs(os.path.dirname(pointer), exist_ok=True)
    with open(pointer, "w", encoding="utf-8") as fh:
        fh.write(os.path.abspath(path) + "\n")


def forget(path: str) -> None:
    pointer = current_pointer()
    try:
        with open(pointer, encoding="utf-8") as fh:
            current = fh.read().strip()
    except FileNotFoundError:
        return
    if current == os.path.abspath(path):
        os.unlink(pointer)


def resolve_dir(path: str | None) -> ClusterDir:
    """`--dir DIR`, else the cluster brought up last; it must hold a cluster."""
    if not path:
        try:
            with open(current_pointer(), encoding="utf-8") as fh:
                path = fh.read().strip()
        except FileNotFoundError:
            raise ClusterSetupError("no local cluster: run `gpudra cluster up` (or pass --dir DIR)") from None
    cluster = ClusterDir(path)
    if not cluster.exists():
        raise ClusterSetupError(f"no local cluster in {cluster.path} (run `gpudra cluster up --dir {cluster.path}`)")
    return cluster
