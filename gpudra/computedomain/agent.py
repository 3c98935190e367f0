"""The compute-domain node agent: the second kubelet plugin (`compute-domain.nvidia.com`), wired together.

As NVIDIA deploys it (a container of its own beside the GPU plugin, helm templates/kubeletplugin.yaml), it is a
separate process with its own plugin directory, checkpoint and registration socket
(`<registry>/compute-domain.nvidia.com-reg.sock`): `gpudra driver run --driver compute-domain`. It reads the node's
NVLink fabric clique once at start (NVML, or the simulated profile; upstream reads it once too), publishes the
channel and daemon devices, and serves prepare/unprepare through the same `KubeletPlugin` and crash-safe
`DeviceState` protocol as the GPU driver (cdstate.py).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from gpudra.discovery import GpuBackend

from gpudra.gpuplugin.agent import (AgentError, AgentOptions, api_sources, group_id, node_paths_and_backend,
                                    save_published_slices)
from gpudra.kubeletplugin.cdispec import read_char_majors
from .state import ComputeDomainState
from gpudra.kubeletplugin.claims import ClaimSource
from .devices import NodeDevices, compute_domain_slices, node_clique, read_node_devices
from .domains import DirectoryDomainSource, DomainSource, KubeDomainSource
from gpudra.kubeletplugin.plugin import KubeletPlugin
from gpudra.kubeletplugin.publisher import SliceClient, SlicePublisher

log = logging.getLogger("gpudra.driver.computedomain")


class ComputeDomainAgent:
    def __init__(self, options: AgentOptions, *, backend: GpuBackend | None = None,
                 claims: ClaimSource | None = None, slice_client: SliceClient | None = None,
                 domains: DomainSource | None = None):
        self.options = options
        self.paths, self.backend = node_paths_and_backend(options, backend)
        self.clique = node_clique(self.backend.inventory())
        self.slice_client, claims = api_sources(options, slice_client, claims)
        if domains is None:
            if options.domains_dir:
                domains = DirectoryDomainSource(options.domains_dir)
            elif options.kubeconfig or options.in_cluster:
                domains = KubeDomainSource.from_kubeconfig(options.kubeconfig, options.in_cluster)
            else:
                raise AgentError("no ComputeDomain source: pass --domains DIR (simulation) or --kubeconfig / "
                                 "--in-cluster")
        self.domains = domains
        node_devices = read_node_devices(read_char_majors()) if self.backend.name == "nvml" else NodeDevices()
        self.state = ComputeDomainState(
            domains=domains, clique=self.clique, node_devices=node_devices,
            ready_wait_s=options.domain_ready_wait_s, dns_names=options.imex_dns_names, driver_name=options.driver_name, node_name=options.node_name,
            backend=self.backend, paths=self.paths, claims=claims, fsync=options.fsync,
            serialize_lock=self.paths.serialize_lock if options.rolling_update_uid else None)
        self.plugin: KubeletPlugin | None = None
        self.publisher: SlicePublisher | None = None
        self.publish_summary: dict[str, Any] | None = None
        self.reconcile_report: dict[str, list[str]] = {}
        self.stopped = threading.Event()

    def build_slices(self, generation: int = 1, node_uid: str | None = None) -> list[dict[str, Any]]:
        return compute_domain_slices(self.options.node_name, self.clique, driver_name=self.options.driver_name,
                                     generation=generation, node_uid=node_uid,
                                     channels=self.options.published_channels)

    def publish(self) -> None:
        save_published_slices(self.paths.plugin_dir, self.build_slices())
        if self.publisher is not None:
            self.publish_summary = self.publisher.publish(self.build_slices)
            log.info("published ResourceSlices: %s", self.publish_summary)

    def start(self) -> None:
        self.paths.make_dirs()
        self.reconcile_report = self.state.reconcile()
        if any(self.reconcile_report.values()):
            log.info("reconciled at start: %s", {k: v for k, v in self.reconcile_report.items() if v})
        log.info("NVLink fabric clique of this node: %s", self.clique or "(none: channels get no IMEX device nodes)")
        if self.slice_client is not None and self.options.publish:
            self.publisher = SlicePublisher(self.slice_client, node_name=self.options.node_name,
                                            driver_name=self.options.driver_name)
        self.publish()
        self.plugin = KubeletPlugin(self.state, driver_name=self.options.driver_name,
                                    dra_socket=self.paths.dra_socket,
                                    registration_socket=self.paths.registration_socket,
                                    healthcheck_port=self.options.healthcheck_port,
                                    socket_group=group_id(self.options.socket_group),
                                    call_deadline_s=self.options.call_deadline_s)
        self.plugin.start()
        log.info("kubelet plugin %s serving on %s (registration %s)", self.options.driver_name,
                 self.paths.dra_socket, self.paths.registration_socket)

    def stop(self) -> None:
        self.stopped.set()
        if self.plugin is not None:
            self.plugin.stop()
            self.plugin = None
        self.backend.close()

    def wait(self) -> None:
        self.stopped.wait()

