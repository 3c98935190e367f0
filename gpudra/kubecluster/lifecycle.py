"""`gpudra cluster up/down --api-server kubernetes`: the real control plane, the node stand-in, the drivers.

Up: build (or reuse) the binary, start etcd, kube-apiserver, kube-controller-manager and kube-scheduler, start the
node stand-in (it registers the Nodes, so the drivers find their Node's uid for their slices' owner), start one
real driver process per node pointed at the API server (gpudra.cluster.nodeagent, as the embedded cluster runs
them), and create the drivers' DeviceClasses as NVIDIA's chart installs them. Down stops them in the reverse
order and removes the directory, so nothing is left running.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from gpudra.cluster.layout import ClusterConfig, ClusterDir, ClusterSetupError
from gpudra.cluster.processes import process_alive, spawn, stop_process

from . import controlplane
from .build import Built, build, kubernetes_release, module_dir
from .kubelet import MODULE as STAND_IN_MODULE

STAND_IN_TIMEOUT_S = 60.0


def release_minor(module: str | None = None) -> str:
    """The minor release ("1.34") of the binary the Go module builds."""
    return ".".join(kubernetes_release(module_dir(module)).lstrip("v").split(".")[:2])


def _stand_in_files(cluster: ClusterDir) -> tuple[str, str]:
    paths = controlplane.KubePaths(cluster)
    return os.path.join(paths.root, "kubelet.pid"), os.path.join(paths.root, "kubelet.log")


def _stand_in_alive(cluster: ClusterDir) -> int | None:
    pid_file, _ = _stand_in_files(cluster)
    return process_alive(pid_file, STAND_IN_MODULE, cluster.path)


def start_stand_in(cluster: ClusterDir, say: Callable[[str], None]) -> None:
    if _stand_in_alive(cluster) is not None:
        return
    pid_file, log_file = _stand_in_files(cluster)
    process = spawn(cluster, [STAND_IN_MODULE, cluster.path], pid_file, log_file)
    deadline = time.monotonic() + STAND_IN_TIMEOUT_S
    while True:
        try:
            with open(log_file, "rb") as f:
                if b"node stand-in ready" in f.read():
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise ClusterSetupError(f"the node stand-in did not come up; see {log_file}")
        time.sleep(0.1)
    say(f"nodes {', '.join(n.name for n in cluster.load_config().nodes)} registered (node stand-in, log {log_file})")


def install_compute_domain_api(cluster: ClusterDir, say: Callable[[str], None]) -> None:
    """NVIDIA's ComputeDomain CRD (the chart installs it; gpudra.computedomain keeps NVIDIA's own file) and the
    driver's namespace, where the controller puts each domain's IMEX daemon DaemonSet."""
    from gpudra.api.yaml_files import read_yaml
    from gpudra.computedomain.devices import DRIVER_NAMESPACE

    from .rest import ApiError, Rest

    here = os.path.join(os.path.dirname(os.path.dirname(__file__)), "computedomain")
    crd: dict[str, Any] = read_yaml(os.path.join(here, "computedomains.crd.yaml"))
    clique_crd: dict[str, Any] = read_yaml(os.path.join(here, "computedomaincliques.crd.yaml"))  # the daemons' (#34)
    rest = Rest(controlplane.KubePaths(cluster).admin_kubeconfig)
    try:
        namespace: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRIVER_NAMESPACE}}
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        installs: list[tuple[str, dict[str, Any]]] = [(crds, crd), (crds, clique_crd), ("/api/v1/namespaces", namespace)]
        for path, obj in installs:
            try:
                rest.call("POST", path, obj)
            except ApiError as exc:
                if exc.status != 409:
                    raise ClusterSetupError(f"installing {obj['kind']} {obj['metadata']['name']}: {exc}") from None
        deadline = time.monotonic() + STAND_IN_TIMEOUT_S
        while not all(_established(rest, c["metadata"]["name"]) for c in (crd, clique_crd)):
            if time.monotonic() > deadline:
                raise ClusterSetupError(f"CRD {crd['metadata']['name']} not established")
            time.sleep(0.1)
    finally:
        rest.close()
    say(f"ComputeDomain CRDs ({crd['metadata']['name']}, {clique_crd['metadata']['name']}) and namespace "
        f"{DRIVER_NAMESPACE} installed")


def _established(rest, name: str) -> bool:  # type: ignore[no-untyped-def]
    crd = rest.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


def install_device_classes(cluster: ClusterDir, config: ClusterConfig, say: Callable[[str], None]) -> list[str]:
    from gpudra.computedomain.devices import compute_domain_device_classes
    from gpudra.gpuplugin.slices import device_classes

    from .rest import ApiError, Rest, cluster_scoped

    rest = Rest(controlplane.KubePaths(cluster).admin_kubeconfig)
    created = []
    try:
        # the chart's defaults install the compute-domain driver's classes too (values.yaml resources.computeDomains)
        for obj in device_classes(config.driver_name) + compute_domain_device_classes():
            try:
                rest.call("POST", cluster_scoped("resource.k8s.io/v1", "deviceclasses"), obj)
                created.append(obj["metadata"]["name"])
            except ApiError as exc:
                if exc.status != 409:  # 409: the class exists (the user's edits stay)
                    raise ClusterSetupError(f"creating DeviceClass {obj['metadata']['name']}: {exc}") from None
    finally:
        rest.close()
    if created:
        say(f"DeviceClasses {', '.join(created)} created, as the driver's Helm chart installs them")
    return created


def up(cluster: ClusterDir, config: ClusterConfig, say: Callable[[str], None] = lambda _: None,
       module: str | None = None) -> Built:
    from gpudra.cluster import nodes

    built = build(module, say, release=config.kubernetes_version)  # an unpinned release: BuildError names those pinned
    cluster.save_config(config)
    cluster.make_private()
    controlplane.start(cluster, config, built, say)
    install_compute_domain_api(cluster, say)
    start_stand_in(cluster, say)
    nodes.up(cluster, config, say=say, control_plane=False)
    return built


def down(cluster: ClusterDir, say: Callable[[str], None] = lambda _: None) -> None:
    """Stop the node stand-in, the drivers and the control plane; `gpudra.cluster.nodes.down` then removes the
    directory."""
    from gpudra.cluster import nodes

    pid_file, _ = _stand_in_files(cluster)
    if stop_process(pid_file, STAND_IN_MODULE, cluster.path):
        say("node stand-in stopped")
    try:
        names = [n.name for n in cluster.load_config().nodes]
    except ClusterSetupError:
        names = []
    for name in names:
        if nodes.stop_driver(cluster, name):
            say(f"node {name}: driver stopped")
    controlplane.stop(cluster, say)
