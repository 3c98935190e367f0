"""One node's GPU driver process in a local cluster: `python -m gpudra.cluster.nodeagent DIR NODE`.

It is gpudra's node driver (`gpudra.gpuplugin.agent.DriverAgent`) with two things pointed at the local store instead of
an API server: where it publishes its ResourceSlices and where it reads the ResourceClaims it prepares. Everything
else (simulated GPUs, checkpoint, CDI specs, the kubelet plugin's registration and DRA sockets) is the real driver.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from .layout import CDI_DIR, PLUGINS_DIR, REGISTRY_DIR, ClusterDir
from .store import Store, StoreError

if TYPE_CHECKING:
    from gpudra.computedomain.domains import DomainInfo


class StoreSliceClient:
    """`gpudra.kubeletplugin.publisher.KubeSliceClient`'s calls, answered by the local store."""

    def __init__(self, store: Store):
        self.store = store

    def list(self, node_name: str, driver_name: str) -> list[dict[str, Any]]:
        return [s for s in self.store.list("ResourceSlice")
                if (s.get("spec") or {}).get("nodeName") == node_name and s["spec"].get("driver") == driver_name]

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.store.create(body)

    def replace(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.store.replace(body)

    def delete(self, name: str) -> None:
        self.store.delete("ResourceSlice", None, name, graceful=False)

    def node_uid(self, node_name: str) -> str | None:
        node = self.store.get("Node", None, node_name)
        if node is None:
            raise StoreError(f'nodes "{node_name}" not found', 404)
        uid: str | None = node["metadata"].get("uid")  # the store checked it is a Kubernetes uid
        return uid


class StoreClaimSource:
    """`gpudra.kubeletplugin.claims.ClaimSource` on the local store."""

    def __init__(self, store: Store):
        self.store = store

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        from gpudra.kubeletplugin.claims import ClaimSourceError

        try:
            return self.store.get("ResourceClaim", namespace, name)
        except StoreError as exc:  # an identity the store refuses: the prepare fails with the reason
            raise ClaimSourceError(str(exc)) from None


class StoreDomainSource:
    """`gpudra.computedomain.domains.DomainSource` on the local store: ComputeDomains as the controller keeps them (their
    status.nodes[] from the daemons), and the Node's domain label, set on a channel's prepare and cleared on its
    unprepare as NVIDIA's plugin does (only when it names this domain)."""

    def __init__(self, store: Store):
        self.store = store

    def domain(self, uid: str) -> DomainInfo | None:
        from gpudra.computedomain.domains import domain_from_object

        for obj in self.store.list("ComputeDomain"):
            info = domain_from_object(obj)
            if info is not None and info.uid == uid:
                return info
        return None

    def _node(self, node: str) -> dict[str, Any]:
        from gpudra.computedomain.domains import DomainError

        obj = self.store.get("Node", None, node)
        if obj is None:
            raise DomainError(f'nodes "{node}" not found')
        return obj

    def node_domain(self, node: str) -> str | None:
        from gpudra.computedomain.devices import NODE_LABEL

        value = (self._node(node)["metadata"].get("labels") or {}).get(NODE_LABEL)
        return value if isinstance(value, str) else None

    def _set(self, node: str, uid: str | None, expect: str | None) -> None:
        from gpudra.computedomain.devices import NODE_LABEL
        from gpudra.computedomain.domains import DomainError

        obj = self._node(node)
        labels = obj["metadata"].setdefault("labels", {})
        held = labels.get(NODE_LABEL)
        if uid is not None and held not in (None, uid):
            raise DomainError(f"node {node} is labelled {NODE_LABEL}={held}: it serves another ComputeDomain")
        if held != expect:
            return  # already as wanted, or (leave) another domain's label, which stays
        if uid is None:
            labels.pop(NODE_LABEL, None)
        else:
            labels[NODE_LABEL] = uid
        try:
            self.store.replace(obj)
        except StoreError as exc:  # changed meanwhile: the kubelet retries the prepare
            raise DomainError(f"labelling Node {node}: {exc}") from None

    def join(self, node: str, uid: str) -> None:
        self._set(node, uid, None)

    def leave(self, node: str, uid: str) -> None:
        self._set(node, None, uid)


def _compute_domain_agent(cluster: ClusterDir, node: Any, options: Any, claims: Any = None, slice_client: Any = None,
                          domains: Any = None) -> Any:
    """The compute-domain plugin beside the GPU driver, on a node with an NVLink clique (nodes.node_drivers); its
    claims, slices and domains from the local store unless given (a real API server's)."""
    import dataclasses

    from gpudra.discovery.profiles import node_profile
    from gpudra.discovery.simulated import SimulatedBackend
    from gpudra.computedomain.agent import ComputeDomainAgent
    from gpudra.kubeletplugin.paths import DriverPaths
    from gpudra.vocabulary import COMPUTE_DOMAIN_DRIVER_NAME

    from .nodes import node_clique

    # a prepare must not wait for the daemon: the daemon is started by this very control loop, after the answer
    cd_options = dataclasses.replace(options, driver_name=COMPUTE_DOMAIN_DRIVER_NAME, dynamic_mig=False,
                                     domain_ready_wait_s=0.0)
    paths = DriverPaths(driver_name=COMPUTE_DOMAIN_DRIVER_NAME, root=options.root,
                        registry_dir=options.registry_dir, plugins_dir=options.plugins_dir, cdi_dir=options.cdi_dir)
    backend = SimulatedBackend(dataclasses.replace(node_profile(node.profile), nvlink_clique=node_clique(node)),
                               node_name=node.name, state_path=paths.simulated_state)
    return ComputeDomainAgent(cd_options, backend=backend, claims=claims or StoreClaimSource(cluster.store),
                              slice_client=slice_client or StoreSliceClient(cluster.store),
                              domains=domains or StoreDomainSource(cluster.store))


def main(argv: list[str]) -> int:
    from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
    from gpudra.versions import partitionable_layout

    directory, node_name = argv
    cluster = ClusterDir(directory)
    config = cluster.load_config()
    node = next(n for n in config.nodes if n.name == node_name)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    dynamic_mig = node.dynamic_mig
    if dynamic_mig:
        from gpudra.gpuplugin.slices import dynamic_mig_layout

        dynamic_mig, note = dynamic_mig_layout(config.kubernetes_version, config.feature_gates())
        if note:
            logging.getLogger(__name__).warning("Kubernetes %s: %s", config.kubernetes_version, note)
    options = AgentOptions(node_name=node.name, backend="simulated", profile=node.profile,
                           driver_name=config.driver_name, root=cluster.driver_root(node.name),
                           dynamic_mig=dynamic_mig, slice_layout=partitionable_layout(config.kubernetes_version),
                           registry_dir=REGISTRY_DIR, plugins_dir=PLUGINS_DIR,
                           cdi_dir=CDI_DIR, health_taint_effect=config.health_taint_effect)
    backend = None
    if node.nvlink_clique:  # a tray of a rack (`--racks`): its rack's clique, not the profile's
        import dataclasses

        from gpudra.discovery.profiles import node_profile
        from gpudra.discovery.simulated import SimulatedBackend
        from gpudra.kubeletplugin.paths import DriverPaths

        paths = DriverPaths(driver_name=options.driver_name, root=options.root, registry_dir=options.registry_dir,
                            plugins_dir=options.plugins_dir, cdi_dir=options.cdi_dir)
        backend = SimulatedBackend(dataclasses.replace(node_profile(node.profile), nvlink_clique=node.nvlink_clique),
                                   node_name=node.name, state_path=paths.simulated_state)
    from .nodes import node_clique

    if config.api_server == "kubernetes":  # the real API server: the driver as it runs in a real cluster
        from gpudra.kubeletplugin.claims import KubeClaimSource
        from gpudra.kubeletplugin.publisher import KubeSliceClient

        kubeconfig = os.path.join(cluster.path, "kubeconfig")
        slice_client = KubeSliceClient.from_kubeconfig(kubeconfig)
        agent = DriverAgent(options, backend=backend, claims=KubeClaimSource(slice_client.resource),
                            slice_client=slice_client)
        agents: list[Any] = [agent]
        if node_clique(node):  # the compute-domain plugin as `gpudra driver run --driver compute-domain` runs it
            from gpudra.computedomain.domains import KubeDomainSource

            cd_slices = KubeSliceClient.from_kubeconfig(kubeconfig)
            agents.append(_compute_domain_agent(
                cluster, node, options, claims=KubeClaimSource(cd_slices.resource), slice_client=cd_slices,
                domains=KubeDomainSource.from_kubeconfig(kubeconfig)))
    else:
        agent = DriverAgent(options, backend=backend, claims=StoreClaimSource(cluster.store),
                            slice_client=StoreSliceClient(cluster.store))
        agents = [agent]
        if node_clique(node):
            agents.append(_compute_domain_agent(cluster, node, options))
    for each in agents:
        each.start()

    def stop(*_: Any) -> None:
        for each in agents:
            each.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for each in agents:
        print(f"ready: {each.paths.registration_socket}", file=sys.stderr, flush=True)
    agent.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
