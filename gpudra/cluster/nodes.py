"""Bringing a local cluster up and down: Node objects, one driver process per node, kubelet plugin registration."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Any, Callable

from gpudra.computedomain.controller import CLIQUE_NODE_LABEL
from gpudra.vocabulary import COMPUTE_DOMAIN_DRIVER_NAME
from gpudra.kubeletplugin.paths import check_socket_path
from gpudra.regularfile import read_regular_file_tail

from .layout import (DEFAULT_NODES, ClusterConfig, ClusterDir, ClusterSetupError, NodeSpec, forget, parse_nodes,
                     check_node_count, parse_racks, remember, remove_socket_link)
from . import controlplane
from .processes import POLL_S, process_alive, spawn, stop_process
from .store import StoreError

AGENT_MODULE = "gpudra.cluster.nodeagent"
START_TIMEOUT_S = 60.0
REGISTER_TIMEOUT_S = 10.0


def node_object(node: NodeSpec, kubernetes_version: str) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "gpudra.local/profile": os.path.basename(node.profile)}
    clique = node_clique(node)
    if clique:  # what GPU feature discovery labels an MNNVL node with
        labels[CLIQUE_NODE_LABEL] = clique
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
            "nodeInfo": {"kubeletVersion": f"v{kubernetes_version}.0", "operatingSystem": "linux",
                         "architecture": "amd64"},
        },
    }


def node_clique(node: NodeSpec) -> str | None:
    """The node's NVLink fabric clique: its rack's (--racks), else its profile's (built-in profiles only)."""
    from gpudra.discovery.profiles import PROFILES

    profile = PROFILES.get(node.profile)
    return node.nvlink_clique or (profile.nvlink_clique if profile else None)


def node_drivers(node: NodeSpec, driver_name: str) -> list[str]:
    """The kubelet plugins a node runs: the GPU driver, and on a node with an NVLink fabric clique (a GB200 tray)
    the compute-domain driver beside it, as NVIDIA's DaemonSet pod runs both containers there."""
    return [driver_name] + ([COMPUTE_DOMAIN_DRIVER_NAME] if node_clique(node) else [])


def driver_alive(cluster: ClusterDir, node: str) -> int | None:
    """The pid of this node's driver if it runs (checked by its command line, not just the pid)."""
    return process_alive(cluster.pid_file(node), AGENT_MODULE, node)


def _spawn(cluster: ClusterDir, node: NodeSpec) -> subprocess.Popen[bytes]:
    return spawn(cluster, [AGENT_MODULE, cluster.path, node.name], cluster.pid_file(node.name),
                 cluster.log_file(node.name))


def _tail(path: str, lines: int = 5) -> str:
    try:
        raw = read_regular_file_tail(path, 64 << 10)
    except OSError:
        return ""
    return "" if raw is None else "\n".join(raw.decode("utf-8", "replace").splitlines()[-lines:]).strip()


def _wait_ready(cluster: ClusterDir, nodes: list[NodeSpec], processes: dict[str, subprocess.Popen[bytes]],
                driver_name: str) -> None:
    drivers = {n.name: node_drivers(n, driver_name) for n in nodes}
    waiting = {n.name for n in nodes if n.name in processes}
    deadline = time.monotonic() + START_TIMEOUT_S
    while waiting:
        for name in sorted(waiting):
            process = processes[name]
            if process.poll() is not None:
                raise ClusterSetupError(f"the driver of node {name} exited ({process.returncode}): "
                                        f"{_tail(cluster.log_file(name))}")
            if all(os.path.exists(cluster.driver_paths(name, d).registration_socket) for d in drivers[name]):
                waiting.discard(name)
        if waiting and time.monotonic() > deadline:
            raise ClusterSetupError(f"drivers not ready after {START_TIMEOUT_S:.0f}s: {', '.join(sorted(waiting))}")
        if waiting:
            time.sleep(POLL_S)


def register_plugin(cluster: ClusterDir, node: str, driver_name: str) -> str:
    """What the kubelet's plugin watcher does with a new registration socket; returns the DRA endpoint."""
    import grpc

    from gpudra.kubeletplugin.kubelet_client import KubeletClient

    client = KubeletClient(cluster.driver_paths(node, driver_name).registration_socket)
    deadline = time.monotonic() + REGISTER_TIMEOUT_S
    try:
        while True:
            try:
                info = client.register()
                break
            except grpc.RpcError as exc:
                # the socket file appears when the driver binds it, a moment before it listens (the kubelet's
                # plugin watcher retries too)
                if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    raise ClusterSetupError(f"node {node}: the kubelet could not register the driver: "
                                            f"{exc.details()}") from None
                time.sleep(POLL_S)
            except RuntimeError as exc:
                raise ClusterSetupError(f"node {node}: the kubelet could not register the driver: {exc}") from None
    finally:
        client.close()
    return str(info.endpoint)  # the kubelet registration reply (a protobuf message) names it


def planned_config(cluster: ClusterDir, nodes: str | None, policy: str | None, kubernetes_version: str | None,
                   event_ttl_s: int | None, say: Callable[[str], None] = lambda _: None,
                   features: str | None = None, racks: str | None = None,
                   api_server: str | None = None, health_taint_effect: str | None = None) -> ClusterConfig:
    """What `cluster up` runs: a new cluster from the options (defaults where not given), or the cluster already in
    the directory, which it says it reuses; --policy and --event-ttl change there, its nodes, release and feature
    gates cannot (objects the API server stored under other gates would be left as they are)."""
    from gpudra.versions import VersionError, parse_version

    if kubernetes_version is not None:
        try:
            kubernetes_version = parse_version(kubernetes_version)
        except VersionError as exc:
            raise ClusterSetupError(f"--kubernetes-version: {exc}") from None
    wanted_nodes = parse_nodes(nodes) if nodes else None
    if racks:  # GB200 NVL72 trays, besides --nodes (alone when --nodes is not given)
        wanted_nodes = (wanted_nodes or []) + parse_racks(racks)
        check_node_count(len(wanted_nodes), "--nodes and --racks")
    if not cluster.exists():
        config = ClusterConfig(nodes=wanted_nodes or parse_nodes(DEFAULT_NODES))
        config.policy = policy or config.policy
        config.kubernetes_version = kubernetes_version or config.kubernetes_version
        config.event_ttl_s = event_ttl_s or config.event_ttl_s
        config.features = features or config.features
        config.api_server = api_server or config.api_server
        config.health_taint_effect = health_taint_effect or config.health_taint_effect
        try:
            config.feature_gates()
        except ValueError as exc:
            raise ClusterSetupError(str(exc)) from None
        gates = "" if config.features == "default" else f" (feature gates {config.features})"
        say(f"creating a local cluster in {cluster.path}: Kubernetes {config.kubernetes_version}{gates}, "
            f"{_node_list(config.nodes)}")
        return config
    config = cluster.load_config()
    redo = f"`gpudra cluster down --dir {cluster.path}` it first, or give another --dir"
    if wanted_nodes is not None and [n.to_dict() for n in wanted_nodes] != [n.to_dict() for n in config.nodes]:
        raise ClusterSetupError(f"{cluster.path} already holds a cluster with other nodes "
                                f"({', '.join(n.name for n in config.nodes)}): {redo}")
    if kubernetes_version is not None and kubernetes_version != config.kubernetes_version:
        raise ClusterSetupError(f"{cluster.path} already holds a Kubernetes {config.kubernetes_version} cluster; "
                                f"its release cannot change: {redo}")
    if api_server is not None and api_server != config.api_server:
        raise ClusterSetupError(f"{cluster.path} already holds a cluster on the {config.api_server} API server; "
                                f"it cannot change: {redo}")
    if features is not None and features != config.features:
        raise ClusterSetupError(f"{cluster.path} already holds a cluster with feature gates {config.features!r}; "
                                f"they cannot change: {redo}")
    if health_taint_effect is not None and health_taint_effect != config.health_taint_effect:
        raise ClusterSetupError(f"{cluster.path} already holds a cluster whose drivers taint failed GPUs "
                                f"{config.health_taint_effect}; it cannot change: {redo}")
    config.policy = policy or config.policy
    config.event_ttl_s = event_ttl_s or config.event_ttl_s
    say(f"reusing the local cluster in {cluster.path}: Kubernetes {config.kubernetes_version}, "
        f"{_node_list(config.nodes)}, policy {config.policy} (`gpudra cluster down` first for a new one)")
    return config


def _node_list(nodes: list[NodeSpec]) -> str:
    return f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} ({', '.join(n.name for n in nodes)})"


def install_device_classes(cluster: ClusterDir, say: Callable[[str], None] = lambda _: None) -> list[str]:
    """Create the drivers' DeviceClasses that the store does not hold yet (NVIDIA's Helm chart installs its
    classes with the driver); returns the names created. Classes that exist, the user's edits included, stay."""
    from gpudra.computedomain.devices import compute_domain_device_classes
    from gpudra.gpuplugin.slices import device_classes

    created = []
    # the chart's defaults install the compute-domain driver's classes too (values.yaml resources.computeDomains)
    for obj in device_classes(cluster.load_config().driver_name) + compute_domain_device_classes():
        name = obj["metadata"]["name"]
        if cluster.store.get("DeviceClass", None, name) is not None:
            continue
        try:
            cluster.store.create(obj)  # as the API server keeps it: a 1.34 cluster drops extendedResourceName
        except StoreError:
            continue  # created meanwhile by another command
        created.append(name)
    if created:
        say(f"DeviceClasses {', '.join(created)} created, as the driver's Helm chart installs them "
            "(--no-device-classes leaves them out)")
    return created


def up(cluster: ClusterDir, config: ClusterConfig | None, say: Callable[[str], None] = lambda _: None,
       control_plane: bool = False) -> list[str]:
    """Start (or restart after a crash) the cluster's drivers, and with `control_plane` the control-plane process;
    returns the nodes whose driver was started."""
    if config is None:
        config = cluster.load_config()
    elif cluster.exists():
        existing = cluster.load_config()
        if [n.to_dict() for n in existing.nodes] != [n.to_dict() for n in config.nodes]:
            raise ClusterSetupError(f"{cluster.path} already holds a cluster with other nodes "
                                    f"({', '.join(n.name for n in existing.nodes)}); `gpudra cluster down` it first")
    for node in config.nodes:
        try:
            for driver in node_drivers(node, config.driver_name):
                paths = cluster.driver_paths(node.name, driver, config)
                for socket_path in (paths.registration_socket, paths.dra_socket):
                    check_socket_path(socket_path)  # the driver's own limit, checked before anything starts
        except ValueError:
            raise ClusterSetupError(f"node name {node.name!r} is too long for the node's unix sockets "
                                    f"({socket_path})") from None
    cluster.save_config(config)
    cluster.make_private()
    for path in cluster.remove_crash_leftovers():
        say(f"removed {path}: a write interrupted by a crash")
    for node in config.nodes if config.api_server == "embedded" else []:  # else the node stand-in registers them
        if cluster.store.get("Node", None, node.name) is None:
            try:
                cluster.store.create(node_object(node, config.kubernetes_version))
            except StoreError:
                pass  # created by a concurrent `up`
    from gpudra.computedomain.devices import DRIVER_NAMESPACE

    if cluster.store.get("Namespace", None, DRIVER_NAMESPACE) is None:  # where the drivers' DaemonSets run
        try:
            cluster.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRIVER_NAMESPACE}})
        except StoreError:
            pass  # created by a concurrent `up`
    processes: dict[str, subprocess.Popen[bytes]] = {}
    for node in config.nodes:
        if driver_alive(cluster, node.name) is None:
            for driver in node_drivers(node, config.driver_name):
                paths = cluster.driver_paths(node.name, driver)
                for stale in (paths.registration_socket, paths.dra_socket):  # left by a driver that was killed
                    if os.path.exists(stale):
                        os.unlink(stale)
            processes[node.name] = _spawn(cluster, node)
    _wait_ready(cluster, config.nodes, processes, config.driver_name)
    for node in config.nodes:
        drivers = node_drivers(node, config.driver_name)
        for driver in drivers:
            register_plugin(cluster, node.name, driver)
        say(f"node {node.name} ({node.profile}{_mig_layout(node, config)}): driver"
            + (f"s {', '.join(drivers)}" if len(drivers) > 1 else "")
            + f" {'started' if node.name in processes else 'running'}, registered with the kubelet")
    if control_plane and config.api_server == "embedded":
        started = controlplane.start(cluster)
        say(f"control plane (controllers, scheduler, kubelets) {'started' if started else 'running'}")
    remember(cluster.path)
    return sorted(processes)


def _mig_layout(node: NodeSpec, config: ClusterConfig) -> str:
    """', dynamic MIG' where the node's driver publishes it; where the release cannot allocate it, the driver
    falls back to full GPUs and existing MIG devices (nodeagent.py), and this says why."""
    if not node.dynamic_mig:
        return ""
    from gpudra.gpuplugin.slices import dynamic_mig_layout

    dynamic, note = dynamic_mig_layout(config.kubernetes_version, config.feature_gates())
    return ", dynamic MIG" if dynamic else f"; no dynamic MIG in Kubernetes {config.kubernetes_version}: {note}"


def stop_driver(cluster: ClusterDir, node: str, sig: int = signal.SIGTERM) -> bool:
    return stop_process(cluster.pid_file(node), AGENT_MODULE, node, sig=sig)


def down(cluster: ClusterDir, say: Callable[[str], None] = lambda _: None) -> None:
    """Stop every driver and remove the state directory: nothing running, no socket, no file left."""
    try:
        config = cluster.load_config()
        nodes = [n.name for n in config.nodes]
    except ClusterSetupError:
        nodes = sorted(os.listdir(os.path.join(cluster.path, "nodes"))) if os.path.isdir(
            os.path.join(cluster.path, "nodes")) else []
    if controlplane.stop(cluster):  # first, so it does not act on drivers going away
        say("control plane stopped")
    for node in nodes:
        try:
            if stop_driver(cluster, node):
                say(f"node {node}: driver stopped")
        except ClusterSetupError:
            pass  # not a node name (a directory someone else made): no driver of ours runs for it
    forget(cluster.path)
    remove_socket_link(cluster.path)
    if cluster.exists() or os.path.isdir(os.path.join(cluster.path, "store")):
        for entry in ClusterDir.OWN_ENTRIES:
            path = os.path.join(cluster.path, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.unlink(path)
        try:
            os.rmdir(cluster.path)  # only when nothing of the user's is left in it
        except OSError:
            say(f"kept {cluster.path}: it holds files the cluster did not create")
