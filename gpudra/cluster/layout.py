"""Where a local cluster keeps things: its state directory, its nodes, and which cluster was brought up last."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any


from gpudra.api.dump import dump_yaml_data
from gpudra.api.schema import names
from gpudra.atomicfile import remove_stale_temps, write_atomic
from gpudra.kubeletplugin.claimpaths import ClaimPathError, path_inside
from gpudra.kubeletplugin.paths import SOCKET_PATH_MAX, DriverPaths
from gpudra.gpuplugin.slices import DEFAULT_DRIVER_NAME
from gpudra.errors import GpudraError
from gpudra.regularfile import read_regular_file
from gpudra.vocabulary import COMPUTE_DOMAIN_DRIVER_NAME

from .store import FILE_MODE, Store, private_dirs

if TYPE_CHECKING:
    from gpudra.allocator.features import Features  # imported where the gates are parsed

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
    # the NVLink fabric clique of a GB200 tray in a rack (`--racks`), instead of its profile's
    nvlink_clique: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "profile": self.profile, "dynamicMig": self.dynamic_mig}
        if self.nvlink_clique:
            out["nvlinkClique"] = self.nvlink_clique
        return out


HEALTH_TAINT_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass
class ClusterConfig:
    nodes: list[NodeSpec] = field(default_factory=list)
    policy: str = "kube"
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    driver_name: str = DEFAULT_DRIVER_NAME
    event_ttl_s: int = DEFAULT_EVENT_TTL_S
    # feature gates over the release's defaults, as `--features` spells them (kube-apiserver's and
    # kube-scheduler's --feature-gates): the API server's dropped fields, the scheduler, the drivers' layout
    features: str = "default"
    # "embedded": gpudra's own store and control loop; "kubernetes": the real control plane built from Go modules
    # (gpudra.kubecluster), the nodes joined to it as KWOK joins fake nodes
    api_server: str = "embedded"
    # the effect of the drivers' taint on a failed GPU: NVIDIA's NoSchedule, or NoExecute (its pods are evicted)
    health_taint_effect: str = "NoSchedule"

    def feature_gates(self) -> Features:
        """These gates as gpudra.allocator.Features (ValueError for a name gpudra does not know)."""
        from gpudra.allocator.features import Features

        return Features.parse(self.features, self.kubernetes_version)


def _short_name(profile: str) -> str:
    base = os.path.splitext(os.path.basename(profile))[0].lower()
    base = re.sub(r"^(dgx|hgx)-", "", base)
    base = re.sub(r"-(node|mig)$", "", base)
    return re.sub(r"[^a-z0-9-]", "-", base).strip("-") or "node"


# A local cluster runs a driver process (two on GB200 trays) per node on this machine: past this many nodes a
# typo (`l4-node:1000000`) would fork until the machine stops, long before any question is answered.
MAX_LOCAL_NODES = 256


def check_node_count(count: int, option: str) -> None:
    if count > MAX_LOCAL_NODES:
        raise ClusterSetupError(f"{option}: {count} nodes; a local cluster runs a driver process per node and "
                                f"takes at most {MAX_LOCAL_NODES} (use `gpudra schedule` or `simulate` for more)")


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
        check_node_count(len(nodes) + count, "--nodes")
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


def parse_racks(text: str) -> list[NodeSpec]:
    """`RACKSxTRAYS` (`2x4`: two racks of four trays) → GB200 NVL72 trays named `rack<r>-tray<t>`, each rack its
    own NVLink clique (gpudra.discovery.profiles.rack_clique)."""
    from gpudra.discovery.profiles import RACK_PROFILE, TRAYS_PER_RACK_MAX, rack_clique

    racks_text, _, trays_text = text.strip().lower().partition("x")
    if not (racks_text.isdigit() and trays_text.isdigit()) or int(racks_text) < 1 or not (
            1 <= int(trays_text) <= TRAYS_PER_RACK_MAX):
        raise ClusterSetupError(f"--racks: {text!r}: expected RACKSxTRAYS, e.g. 2x4 (1 to {TRAYS_PER_RACK_MAX} "
                                "trays per rack)")
    check_node_count(int(racks_text) * int(trays_text), "--racks")
    return [NodeSpec(f"rack{rack}-tray{tray}", RACK_PROFILE, nvlink_clique=rack_clique(rack))
            for rack in range(int(racks_text)) for tray in range(int(trays_text))]


class ClusterDir:
    """A local cluster's state directory."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.store = Store(self.path, release=self.kubernetes_version, features=self.feature_gates)
        self._config_seen: tuple[float, ClusterConfig] | None = None

    def _current_config(self) -> ClusterConfig | None:
        """The config (re-read only when the file changes); None before `up`."""
        try:
            mtime = os.stat(self.config_path).st_mtime
        except FileNotFoundError:
            return None
        if self._config_seen is None or self._config_seen[0] != mtime:
            self._config_seen = (mtime, self.load_config())
        return self._config_seen[1]

    def kubernetes_version(self) -> str | None:
        """The cluster's release from its config; None before `up`."""
        config = self._current_config()
        return None if config is None else config.kubernetes_version

    def feature_gates(self) -> Features | None:
        """The cluster's feature gates (gpudra.allocator.Features); None before `up`."""
        config = self._current_config()
        return None if config is None else config.feature_gates()

    @property
    def config_path(self) -> str:
        return os.path.join(self.path, CONFIG_FILE)

    def exists(self) -> bool:
        return os.path.isfile(self.config_path)

    def load_config(self) -> ClusterConfig:
        from gpudra.api.yaml_files import LoadError, read_yaml  # the manifest loader's limits

        if not os.path.lexists(self.config_path):
            raise ClusterSetupError(f"no local cluster in {self.path} (run `gpudra cluster up --dir {self.path}`)")
        try:
            data = read_yaml(self.config_path) or {}
        except LoadError as exc:
            raise ClusterSetupError(f"cluster config {exc}") from None
        entries = data.get("nodes") or [] if isinstance(data, dict) else None
        if not isinstance(entries, list) or not all(
                isinstance(n, dict) and isinstance(n.get("name"), str) and isinstance(n.get("profile"), str)
                for n in entries):
            raise ClusterSetupError(f"cluster config {self.config_path}: expected a mapping whose `nodes` each "
                                    "have a name and a profile")
        nodes = [NodeSpec(n["name"], n["profile"], bool(n.get("dynamicMig")),
                          n["nvlinkClique"] if isinstance(n.get("nvlinkClique"), str) else None) for n in entries]
        try:
            event_ttl_s = int(data.get("eventTTLSeconds", DEFAULT_EVENT_TTL_S))
        except (TypeError, ValueError):
            raise ClusterSetupError(f"cluster config {self.config_path}: eventTTLSeconds is not a number") from None
        config = ClusterConfig(nodes=nodes, policy=data.get("policy", "kube"),
                               kubernetes_version=str(data.get("kubernetesVersion", DEFAULT_KUBERNETES_VERSION)),
                               driver_name=data.get("driverName", DEFAULT_DRIVER_NAME), event_ttl_s=event_ttl_s,
                               features=str(data.get("featureGates") or "default"),
                               api_server=str(data.get("apiServer") or "embedded"),
                               health_taint_effect=str(data.get("healthTaintEffect") or "NoSchedule"))
        if config.health_taint_effect not in HEALTH_TAINT_EFFECTS:
            raise ClusterSetupError(f"cluster config {self.config_path}: healthTaintEffect must be one of "
                                    f"{', '.join(HEALTH_TAINT_EFFECTS)}")
        try:
            config.feature_gates()
        except ValueError as exc:
            raise ClusterSetupError(f"cluster config {self.config_path}: featureGates: {exc}") from None
        return config

    def save_config(self, config: ClusterConfig) -> None:
        private_dirs(self.path)
        data = {"apiVersion": "gpudra.local/v1", "kind": "LocalCluster", "policy": config.policy,
                "kubernetesVersion": config.kubernetes_version, "driverName": config.driver_name,
                "featureGates": config.features, "eventTTLSeconds": config.event_ttl_s, "apiServer": config.api_server,
                "healthTaintEffect": config.health_taint_effect, "nodes": [n.to_dict() for n in config.nodes]}
        write_atomic(self.config_path, dump_yaml_data(data).encode(), mode=FILE_MODE,
                     label="cluster-config", fsync=False)

    def node_dir(self, node: str) -> str:
        """The node's directory: its name a DNS subdomain (a Node's name rule), the path proven inside."""
        problems = names.field_problems("node name", node, names.dns_subdomain, 253)
        try:
            if problems:
                raise ClaimPathError("; ".join(problems))
            return path_inside(os.path.join(self.path, "nodes"), node)
        except ClaimPathError as exc:
            raise ClusterSetupError(f"{self.config_path}: {exc}") from None

    def make_private(self) -> None:
        """The cluster's own top-level entries 0700/0600 (a cluster brought up by an older gpudra, or under a lax
        umask, gets them too); what lies below a 0700 directory is out of other users' reach anyway. The directory
        itself is left alone: it may be the user's own (`--dir .`)."""
        for entry in self.OWN_ENTRIES:
            path = os.path.join(self.path, entry)
            if os.path.exists(path) and not os.path.islink(path):
                os.chmod(path, 0o700 if os.path.isdir(path) else FILE_MODE)

    def remove_crash_leftovers(self) -> list[str]:
        """Temp files of writes a crash interrupted (store, config, kubelet records) that no live process is
        writing: `cluster up` removes them. Returns their paths."""
        removed = [os.path.join(self.path, name) for name in remove_stale_temps(self.path)]
        nodes = os.path.join(self.path, "nodes")
        # not the drivers' own directories: a running driver's fixed-name temp file is in use (it cleans its own)
        kubelets = [os.path.join(nodes, n, "kubelet") for n in (os.listdir(nodes) if os.path.isdir(nodes) else [])]
        for top in (self.store.root, *kubelets):
            for directory, _subdirs, _ in os.walk(top):  # os.walk follows no symlinked directory
                removed += [os.path.join(directory, name) for name in remove_stale_temps(directory)]
        return removed

    def driver_paths(self, node: str, driver_name: str = DEFAULT_DRIVER_NAME,
                     config: ClusterConfig | None = None) -> DriverPaths:
        """`config`: the one `up` is about to save (default: the saved one)."""
        return DriverPaths(driver_name=driver_name, root=self.driver_root(node, config), registry_dir=REGISTRY_DIR,
                           plugins_dir=PLUGINS_DIR, cdi_dir=CDI_DIR)

    def driver_root(self, node: str, config: ClusterConfig | None = None) -> str:
        """The node's directory as its drivers and the kubelet stand-in address it: the node directory itself, or,
        where the state directory is too long for the nodes' unix sockets (any $HOME of 16 characters or more under
        the default directory), the same directory through the cluster's short link (`socket_link`)."""
        self.node_dir(node)  # a valid node name, inside the cluster
        base = self.path if self._sockets_fit(config or self._current_config()) else ensure_socket_link(self.path)
        return os.path.join(base, "nodes", node)

    def _sockets_fit(self, config: ClusterConfig | None) -> bool:
        if config is None:
            return True
        longest_node = max((len(os.fsencode(n.name)) for n in config.nodes), default=0)
        longest_driver = max(len(os.fsencode(config.driver_name)), len(COMPUTE_DOMAIN_DRIVER_NAME))
        root = os.path.join(self.path, "nodes", "n" * longest_node)
        paths = DriverPaths(driver_name="d" * longest_driver, root=root, registry_dir=REGISTRY_DIR,
                            plugins_dir=PLUGINS_DIR, cdi_dir=CDI_DIR)
        return all(len(os.fsencode(p)) <= SOCKET_PATH_MAX for p in (paths.registration_socket, paths.dra_socket))

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
                   "control-plane.log", "view.html", "kube", "kubeconfig")


# ----- a short path to a long state directory, for its unix sockets ----------------------------------------


def socket_link(path: str) -> str:
    """`/tmp/gpudra-<uid>/<12 hex digits of the state directory's path>`: a symlink to the state directory, through
    which the nodes' sockets are bound and dialled (a socket's address is the path string, limited to ~105 bytes;
    the link resolves to the socket file in the state directory, where everything else of the node stays). /tmp, not
    $XDG_RUNTIME_DIR: the control plane outlives a logout, which empties the latter."""
    digest = hashlib.sha256(os.fsencode(os.path.abspath(path))).hexdigest()[:12]
    return os.path.join(f"/tmp/gpudra-{os.getuid()}", digest)


def ensure_socket_link(path: str) -> str:
    """The cluster's socket link, (re)made when missing; ClusterSetupError when its directory is not this user's
    own private one (another user could otherwise redirect the sockets)."""
    link = socket_link(path)
    base = os.path.dirname(link)
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ClusterSetupError(f"{base} is not a private directory of this user: the cluster's socket links "
                                f"cannot be kept there (remove it, or use a shorter --dir)")
    _prune_dangling_links(base)
    target = os.path.abspath(path)
    for _ in range(3):  # another command may make it at the same moment
        try:
            if os.readlink(link) == target:
                return link
            os.unlink(link)  # a link left by an earlier cluster of the same digest
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ClusterSetupError(f"{link} is not a link to {target}: {exc.strerror}") from None
        try:
            os.symlink(target, link)
        except FileExistsError:
            continue
        return link
    raise ClusterSetupError(f"{link}: could not be made a link to {target}")


def _prune_dangling_links(base: str) -> None:
    """Links to state directories that are gone (a cluster removed without `cluster down`): every use of a link
    makes it again, so removing one whose directory is missing meanwhile costs nothing."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        link = os.path.join(base, name)
        if os.path.islink(link) and not os.path.exists(link):
            try:
                os.unlink(link)
            except OSError:
                pass


def remove_socket_link(path: str) -> None:
    link = socket_link(path)
    try:
        if os.readlink(link) == os.path.abspath(path):
            os.unlink(link)
    except OSError:
        pass


# ----- the cluster brought up last -------------------------------------------------------------------


def _state_home() -> str:
    return os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")


def current_pointer() -> str:
    return os.path.join(_state_home(), "gpudra", "current-cluster")


def default_new_dir() -> str:
    return os.path.join(_state_home(), "gpudra", "cluster")


def remember(path: str) -> None:
    pointer = current_pointer()
    private_dirs(os.path.dirname(pointer))  # 0700: no other user may point this user's commands elsewhere
    write_atomic(pointer, (os.path.abspath(path) + "\n").encode(), mode=FILE_MODE, label="cluster-pointer",
                 fsync=False)


def _read_pointer(pointer: str) -> str:
    """The directory a pointer file names ('' when there is none); UnsafeFileError (an OSError) for anything but a
    small regular file."""
    raw = read_regular_file(pointer, 4096)
    return "" if raw is None else raw.decode("utf-8", "replace").strip()


def forget(path: str) -> None:
    pointer = current_pointer()
    try:
        current = _read_pointer(pointer)
    except OSError:
        return
    if current == os.path.abspath(path):
        os.unlink(pointer)


def current_dir() -> str | None:
    """The cluster brought up last, else the default directory when it holds a cluster; None when neither."""
    try:
        path = _read_pointer(current_pointer())
        if path:
            return path
    except OSError:
        pass
    return default_new_dir() if ClusterDir(default_new_dir()).exists() else None


def resolve_dir(path: str | None) -> ClusterDir:
    """`--dir DIR`, else the cluster brought up last; it must hold a cluster."""
    path = path or current_dir()
    if not path:
        raise ClusterSetupError("no local cluster: run `gpudra cluster up` (or pass --dir DIR)")
    cluster = ClusterDir(path)
    if not cluster.exists():
        raise ClusterSetupError(f"no local cluster in {cluster.path} (run `gpudra cluster up --dir {cluster.path}`)")
    return cluster
