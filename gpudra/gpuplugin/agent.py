"""The node agent: discovery + reconcile + ResourceSlices + kubelet plugin, wired together."""

from __future__ import annotations

import grp
import json
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, cast


from gpudra.atomicfile import write_atomic
from gpudra.cdi import ContainerEdits
from gpudra.discovery import DiscoveryError, GpuBackend, Inventory, open_backend
from gpudra.discovery.health import RECOVERY_KINDS, HealthEvent, HealthMonitor

from gpudra.errors import GpudraError
from gpudra.regularfile import read_regular_file

from gpudra.kubeletplugin.calls import DEFAULT_DEADLINE_S
from gpudra.kubeletplugin.claims import ClaimSource, KubeClaimSource, LocalClaimStore
from gpudra.kubeletplugin.devicemetadata import MetadataWriter
from .hostdriver import HostDriverFiles, discover_host_driver, host_driver_edits
from .health import DeviceHealth, HealthView
from gpudra.kubeletplugin.metrics import DriverMetrics
from gpudra.kubeletplugin.paths import DriverPaths
from gpudra.kubeletplugin.plugin import KubeletPlugin
from gpudra.kubeletplugin.publisher import KubeSliceClient, PublishError, SliceClient, SlicePublisher
from .taintrules import TaintRulePublisher
from .consumableshares import enabled as consumable_enabled
from .fabricpartitions import FabricPartitioning, SimulatedFabricManager
from .passthrough import Passthrough, SimulatedPciBus, vfio_device, vfio_functions
from .sharing import NvidiaSmiSharing, RecordingSharing, SharingControl
from .slices import DEFAULT_DRIVER_NAME, build_resource_slices
from .state import DeviceState

log = logging.getLogger("gpudra.driver")


class AgentError(GpudraError):
    """Bad configuration the user can fix (printed without a traceback)."""


def node_paths_and_backend(options: "AgentOptions",
                           backend: GpuBackend | None) -> tuple[DriverPaths, GpuBackend]:
    """A kubelet plugin's directories on this node (either driver's agent) and its GPUs: the backend given, else
    the one the options name (simulated GPUs keep their state under the plugin's directory)."""
    paths = DriverPaths(driver_name=options.driver_name, root=options.root, registry_dir=options.registry_dir,
                        plugins_dir=options.plugins_dir, cdi_dir=options.cdi_dir,
                        instance_uid=options.rolling_update_uid or None)
    return paths, backend or open_backend(options.backend, profile=options.profile, node_name=options.node_name,
                                          state_path=paths.simulated_state)


def api_sources(options: "AgentOptions", slice_client: SliceClient | None,
                claims: ClaimSource | None) -> tuple[SliceClient | None, ClaimSource]:
    """The slice client and claim source a kubelet plugin works with (either driver's agent): those given, else
    the API server's from --kubeconfig / --in-cluster, claims from --claims DIR in simulation."""
    if slice_client is None and (options.kubeconfig or options.in_cluster):
        slice_client = KubeSliceClient.from_kubeconfig(options.kubeconfig)
    if claims is None:
        if options.claims_dir:
            claims = LocalClaimStore(options.claims_dir)
        elif slice_client is not None:
            # without a claim source of its own, the client is the API server's (the local cluster passes one)
            claims = KubeClaimSource(cast(KubeSliceClient, slice_client).resource)
        else:
            raise AgentError("no claim source: pass --claims DIR (simulation) or --kubeconfig / --in-cluster")
    return slice_client, claims


@dataclass
class AgentOptions:
    node_name: str
    backend: str = "simulated"
    profile: str = "dgx-h100"
    driver_name: str = DEFAULT_DRIVER_NAME
    root: str = "/"
    claims_dir: str | None = None
    kubeconfig: str | None = None
    in_cluster: bool = False
    dynamic_mig: bool = False
    slice_layout: str = "split"  # where dynamic MIG's counter sets go: the release's (versions.partitionable_layout)
    numa_list: bool = False  # resource.kubernetes.io/numaNode as a list (NVIDIA's DRAListTypeAttributes gate)
    # sharing strategies prepare accepts (NVIDIA's TimeSlicingSettings, MPSSupport gates; featuregates.py)
    sharing_strategies: frozenset[str] = frozenset({"TimeSlicing", "MPS"})
    # NVIDIA's --consumable-shares (ConsumableShares gate): disabled | memory | unlimited | N (consumableshares.py)
    consumable_shares: str = "disabled"
    passthrough: bool = False  # NVIDIA's PassthroughSupport: gpu-vfio-<i> siblings, bound to vfio-pci at prepare
    device_metadata: bool = False  # NVIDIA's DeviceMetadata: KEP-5304 metadata files in containers
    fabric_partitions: bool = False  # NVIDIA's FabricManagerPartitioning: partitionN attributes, activation
    healthcheck_port: int | None = None
    publish: bool = True
    fsync: bool = True
    registry_dir: str = "/var/lib/kubelet/plugins_registry"
    plugins_dir: str = "/var/lib/kubelet/plugins"
    cdi_dir: str = "/var/run/cdi"
    driver_root: str = "/"  # where this process sees the NVIDIA driver's files (nvml backend only)
    host_driver_root: str | None = None  # that directory's path on the host; default driver_root
    cdi_hook_path: str | None = None  # host path of nvidia-cdi-hook, if not under the driver root
    socket_group: str | None = None  # group (name or GID) allowed on the sockets besides root: mode 0660
    call_deadline_s: float = DEFAULT_DEADLINE_S  # each claim of a prepare/unprepare call is answered by then
    republish_poll_s: float = 1.0  # how often to look for a republish request (MIG repartitioning)
    metrics_port: int | None = None  # serve Prometheus /metrics on this TCP port (0: any free port)
    health_events: bool = True  # watch GPU health events and taint affected devices
    ignored_xids: frozenset[int] = frozenset()  # besides the application XIDs (taint effect None)
    health_taint_effect: str = "NoSchedule"  # NVIDIA's effect for a failed GPU; NoExecute: its pods are evicted
    health_poll_s: float = 0.5  # longest wait for health events before checking for stop
    health_stream: bool = True  # serve the kubelet's DRA resource-health stream (v1alpha1.DRAResourceHealth)
    device_taint_rules: bool = False  # also keep a DeviceTaintRule per tainted device (where the cluster serves them)
    rolling_update_uid: str | None = None  # this driver pod's UID: per-pod sockets, prepares serialized by file lock
    # the compute-domain driver (cdagent.py) only:
    domains_dir: str | None = None  # ComputeDomain objects as files (without it: the API server's, with a kubeconfig)
    domain_ready_wait_s: float = 10.0  # how long a channel prepare waits for the node's IMEX daemon before failing
    published_channels: int = 1  # IMEX channel devices published (NVIDIA publishes channel 0 only)
    imex_dns_names: bool = True  # the daemon's peers by DNS-style names (NVIDIA's IMEXDaemonsWithDNSNames)


def save_published_slices(plugin_dir: str, slices: list[dict[str, Any]]) -> None:
    """The slices last published, as `resourceslices.yaml` in the plugin directory (`driver status` reads it)."""
    # YAML documents in JSON style (JSON is YAML): with dynamic MIG the slices list every
    # placement, and PyYAML's representer took most of the start-up time (seconds)
    text = "".join(f"---\n{json.dumps(s)}\n" for s in slices)  # one line: json's C encoder
    write_atomic(os.path.join(plugin_dir, "resourceslices.yaml"), text.encode(), mode=0o644,
                 label="resourceslices", fsync=False)


def group_id(group: str | None) -> int | None:
    if group is None:
        return None
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise AgentError(f"--socket-group: no group named {group!r}") from None


class DriverAgent:
    def __init__(self, options: AgentOptions, *, backend: GpuBackend | None = None,
                 claims: ClaimSource | None = None, slice_client: SliceClient | None = None):
        self.options = options
        self.paths, self.backend = node_paths_and_backend(options, backend)
        self.slice_client, claims = api_sources(options, slice_client, claims)
        self.host_driver: HostDriverFiles | None = None
        host_edits = None
        if self.backend.name == "nvml":
            host_edits = self._host_driver_edits()
        self.sharing: SharingControl
        if self.backend.name == "nvml":
            self.sharing = NvidiaSmiSharing(options.driver_root, self.host_driver.libcuda_dir if self.host_driver else None)
        else:  # simulated GPUs: the same steps, recorded
            self.sharing = RecordingSharing(self.paths.simulated_sharing_log)
        passthrough = self._passthrough() if options.passthrough else None
        self.state = DeviceState(driver_name=options.driver_name, node_name=options.node_name, backend=self.backend,
                                 paths=self.paths, claims=claims, dynamic_mig=options.dynamic_mig, fsync=options.fsync,
                                 host_edits=host_edits, sharing=self.sharing,
                                 sharing_strategies=options.sharing_strategies,
                                 consumable_shares=consumable_enabled(options.consumable_shares),
                                 passthrough=passthrough,
                                 serialize_lock=self.paths.serialize_lock if options.rolling_update_uid else None)
        self.state.on_devices_changed = self.publish  # passthrough: a GPU's sibling was taken or freed
        if options.fabric_partitions:
            self.state.fabric = self._fabric_partitioning()
        if options.device_metadata:
            self.state.metadata = MetadataWriter(options.driver_name, self.paths.plugin_dir, self.paths.cdi_spec_dir)
            self.state.metadata_attributes = self._vfio_attributes
        self.plugin: KubeletPlugin | None = None
        self.stopped = threading.Event()
        self.reconcile_report: dict[str, list[str]] = {}
        self.publish_summary: dict[str, Any] | None = None
        self.publisher: SlicePublisher | None = None
        self.taint_rules: TaintRulePublisher | None = None
        self.taint_rule_summary: dict[str, Any] | None = None
        self.republished = 0  # republish requests handled (MIG manager repartitioned the GPUs)
        self._republish_thread: threading.Thread | None = None
        self._published_devices = 0
        self.metrics_port: int | None = None
        self.health = DeviceHealth(options.driver_name, ignored_xids=options.ignored_xids,
                                   blocking_effect=options.health_taint_effect)
        self.health_republished = 0  # republications after health changes
        self._health_monitor: HealthMonitor | None = None
        self._health_thread: threading.Thread | None = None
        self._publish_lock = threading.Lock()
        self._published: list[dict[str, Any]] = []  # the devices last published
        self.metrics = DriverMetrics(self._device_counts, lambda: self.health.counts(self._published))

    def _host_driver_edits(self) -> ContainerEdits:
        """Found once at start: the driver's files only change with a driver upgrade, which
        restarts the node's GPU workloads (and this plugin) anyway."""
        options = self.options
        self.host_driver = discover_host_driver(options.driver_root, version=self.backend.inventory().driver_version)
        for warning in self.host_driver.warnings:
            log.warning("host driver: %s", warning)
        edits = host_driver_edits(self.host_driver, host_driver_root=options.host_driver_root,
                                  hook_path=options.cdi_hook_path)
        log.info("host driver %s under %s: %d mounts, %d hooks in every claim's CDI spec",
                 self.host_driver.version or "?", options.driver_root, len(edits.mounts), len(edits.hooks))
        return edits

    def _passthrough(self) -> Passthrough:
        """The simulated node's PCI functions (a sysfs-shaped tree beside the simulated GPU state)."""
        if self.backend.name != "simulated":
            raise AgentError("PassthroughSupport: gpudra binds simulated GPUs to vfio-pci only (the nvml backend "
                             "would unbind real GPUs with steps gpudra has not implemented)")
        functions = vfio_functions(self.backend.inventory())
        root = os.path.join(os.path.dirname(self.paths.simulated_state), "pci")
        return Passthrough(SimulatedPciBus(root, functions), functions)

    def _vfio_devices(self, inventory: Inventory) -> list[dict[str, Any]]:
        """A `gpu-vfio-<i>` sibling for each GPU without MIG devices (NVIDIA's vfioEnabled)."""
        passthrough = self.state.passthrough
        if passthrough is None:
            return []
        out = []
        for function in passthrough.functions.values():
            gpu = inventory.gpu_by_minor(function.minor)
            if gpu is not None and not gpu.mig_enabled and not gpu.mig_devices:
                out.append(vfio_device(gpu, function, passthrough.iommufd_enabled, self.options.numa_list))
        return out

    def _fabric_partitioning(self) -> FabricPartitioning:
        """The simulated node's Fabric Manager (its partitions in a file beside the simulated GPU state)."""
        if self.backend.name != "simulated":
            raise AgentError("FabricManagerPartitioning: gpudra talks to a simulated Fabric Manager only (no "
                             "libnvfm client)")
        gpus = sorted(self.backend.inventory().gpus, key=lambda g: g.pci_bus_id)
        path = os.path.join(os.path.dirname(self.paths.simulated_state), "fabric-partitions.json")
        return FabricPartitioning(SimulatedFabricManager(path, len(gpus)),
                                  {gpu.minor: index + 1 for index, gpu in enumerate(gpus)})

    def _add_fabric_attributes(self, slices: list[dict[str, Any]]) -> None:
        """gpuModuleID and partitionN on full GPUs and their VFIO siblings (addFabricManagerAttributes)."""
        fabric = self.state.fabric
        if fabric is None:
            return
        minors = {f"gpu-{minor}": minor for minor in fabric.module_by_minor}
        if self.state.passthrough is not None:
            minors.update({name: f.minor for name, f in self.state.passthrough.functions.items()})
        for device in (d for s in slices for d in s["spec"].get("devices") or []):
            kind = device["attributes"].get("type", {}).get("string")
            if kind in ("gpu", "vfio") and device["name"] in minors:
                device["attributes"].update(fabric.attributes(minors[device["name"]]))

    def _vfio_attributes(self, name: str) -> dict[str, Any]:
        """A VFIO device's published attributes (NVIDIA's metadata file carries them for VFIO devices)."""
        for device in self._vfio_devices(self.backend.inventory()):
            if device["name"] == name:
                attributes = dict(device["attributes"])
                function = self.state.passthrough.function(name) if self.state.passthrough else None
                if self.state.fabric is not None and function is not None:
                    attributes.update(self.state.fabric.attributes(function.minor))
                return attributes
        return {}

    def build_slices(self, generation: int = 1, node_uid: str | None = None) -> list[dict[str, Any]]:
        inventory = self.backend.inventory()
        for problem in inventory.problems:
            log.warning("discovery: %s", problem)
        slices = build_resource_slices(inventory, self.options.node_name,
                                       driver_name=self.options.driver_name, generation=generation, node_uid=node_uid,
                                       dynamic_mig=self.options.dynamic_mig, taints_of=self.health.taints_of,
                                       slice_layout=self.options.slice_layout, numa_list=self.options.numa_list,
                                       consumable_shares=self.options.consumable_shares,
                                       extra_devices=self._vfio_devices(inventory),
                                       withheld=frozenset(self.state.withheld_siblings()))
        self._add_fabric_attributes(slices)
        return slices

    def start(self) -> None:
        self.paths.make_dirs()
        self.reconcile_report = self.state.reconcile()
        if any(self.reconcile_report.values()):
            log.info("reconciled at start: %s", {k: v for k, v in self.reconcile_report.items() if v})
        if self.slice_client is not None and self.options.publish:
            self.publisher = SlicePublisher(self.slice_client, node_name=self.options.node_name,
                                            driver_name=self.options.driver_name)
            if self.options.device_taint_rules:
                # DeviceTaintRules live on an API server: the client is KubeSliceClient
                self.taint_rules = TaintRulePublisher(cast(KubeSliceClient, self.slice_client),
                                                      node_name=self.options.node_name,
                                                      driver_name=self.options.driver_name)
        if self.options.health_events:
            self._open_health_monitor()
        self.publish()
        health_view = HealthView(self.health, self.options.node_name, lambda: self._published)
        self.plugin = KubeletPlugin(self.state, driver_name=self.options.driver_name,
                                    dra_socket=self.paths.dra_socket,
                                    registration_socket=self.paths.registration_socket,
                                    healthcheck_port=self.options.healthcheck_port,
                                    socket_group=group_id(self.options.socket_group),
                                    call_deadline_s=self.options.call_deadline_s, metrics=self.metrics,
                                    health_source=health_view if self.options.health_stream else None)
        self.plugin.start()
        log.info("kubelet plugin %s serving on %s (registration %s)", self.options.driver_name,
                 self.paths.dra_socket, self.paths.registration_socket)
        if self.plugin.healthcheck_port is not None:
            log.info("gRPC health (services '' and 'liveness') on port %d", self.plugin.healthcheck_port)
        if self.options.metrics_port is not None:
            self.metrics_port = self.metrics.serve(self.options.metrics_port)
            log.info("Prometheus metrics on port %d (/metrics)", self.metrics_port)
        self._republish_thread = threading.Thread(target=self._watch_republish_requests, name="republish",
                                                  daemon=True)
        self._republish_thread.start()
        if self._health_monitor is not None:
            self._health_thread = threading.Thread(target=self._watch_health, name="health", daemon=True)
            self._health_thread.start()

    def _open_health_monitor(self) -> None:
        try:
            self._health_monitor = self.backend.open_health_monitor()
        except DiscoveryError as exc:
            log.warning("GPU health events unavailable, devices stay untainted: %s", exc)
        if self._health_monitor is not None:
            self.handle_health_events(self._health_monitor.wait(0))  # e.g. GPUs that cannot be monitored

    def handle_health_events(self, events: list[HealthEvent]) -> bool:
        """Taint the devices the events concern; republish when a taint changed. Returns whether it did."""
        if not events:
            return False
        try:
            inventory = self.backend.inventory()
        except DiscoveryError as exc:
            log.error("health events %s: GPU discovery failed: %s", events, exc)
            return False
        changed = False
        for event, event_changed in self.health.record(events, inventory):
            if event.kind in RECOVERY_KINDS:
                self.metrics.health_events.labels(event.kind, "-").inc()
                log.warning("health event %s%s on GPU %s -> %s", event.kind,
                            f" xid {event.xid}" if event.xid is not None else "", event.gpu,
                            "taints removed" if event_changed else "no taint it removes (none, or sticky)")
                changed |= event_changed
                continue
            effect = self.health.taint_for(event)["effect"]
            self.metrics.health_events.labels(event.kind, effect).inc()
            log.warning("health event %s%s -> taint %s (effect %s)%s", event.kind,
                        f" xid {event.xid}" if event.xid is not None else "",
                        self.health.taint_key(event.kind), effect, "" if event_changed else " (unchanged)")
            changed |= event_changed
        if changed and self.plugin is not None:  # at start-up the first publication follows
            self.publish()
            self.health_republished += 1
        return changed

    def _watch_health(self) -> None:
        monitor = self._health_monitor
        assert monitor is not None
        while not self.stopped.is_set():
            try:
                self.handle_health_events(monitor.wait(self.options.health_poll_s))
            except Exception as exc:  # noqa: BLE001 - keep watching; a failed publish is retried by the next change
                log.error("handling health events failed: %s", exc)
                self.stopped.wait(1.0)
            rejected_files: list[Any] = getattr(monitor, "rejected", []) or []  # the file monitor's refused files
            for rejected in rejected_files[:]:
                log.error("ignored health event file %s", rejected)
                rejected_files.remove(rejected)

    def _device_counts(self) -> dict[str, int]:
        counts = {"published": self._published_devices, "prepared": 0, "preparing": 0}
        for entry in self.state.checkpoint().claims.values():
            counts["prepared" if entry.completed else "preparing"] += len(entry.devices)
        return counts

    def publish(self) -> None:
        """Discover the GPUs and publish their ResourceSlices (written to the plugin directory too)."""
        with self._publish_lock:  # health events and MIG repartitioning both republish
            self._publish_locked()

    def _publish_locked(self) -> None:
        slices = self.build_slices()
        self._published = [d for s in slices for d in s["spec"].get("devices") or []]
        self._published_devices = len(self._published)
        self.metrics.publications.inc()
        save_published_slices(self.paths.plugin_dir, slices)
        if self.publisher is not None:
            self.publish_summary = self.publisher.publish(self.build_slices)
            log.info("published ResourceSlices: %s", self.publish_summary)
        if self.taint_rules is not None:
            try:
                self.taint_rule_summary = self.taint_rules.sync(self._published)
            except PublishError as exc:  # the slices carry the taints already; the next change retries
                log.error("DeviceTaintRules: %s", exc)

    def _request_stamp(self) -> str | None:
        try:  # a stamp (a time); anything else there (a FIFO, a huge file) is no request
            raw = read_regular_file(self.paths.republish_request, 4096)
        except OSError:
            return None
        return None if raw is None else raw.decode("ascii", "replace")

    def _watch_republish_requests(self) -> None:
        seen = self._request_stamp()
        while not self.stopped.wait(self.options.republish_poll_s):
            stamp = self._request_stamp()
            if stamp == seen:
                continue
            seen = stamp
            try:
                self.publish()
                self.republished += 1
                log.info("republished ResourceSlices after a MIG change")
            except Exception as exc:  # noqa: BLE001 - keep serving; the next request retries
                log.error("republishing ResourceSlices failed: %s", exc)

    def stop(self) -> None:
        self.stopped.set()
        self.metrics.stop()
        if self.plugin is not None:
            self.plugin.stop()
            self.plugin = None
        if self._health_thread is not None:
            self._health_thread.join(timeout=5)
        if self._health_monitor is not None:
            self._health_monitor.close()
        self.backend.close()

    def wait(self) -> None:
        self.stopped.wait()
