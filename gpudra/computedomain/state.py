"""Prepare / unprepare for the compute-domain driver: `DeviceState`'s crash-safe protocol with its own devices.

Everything about the checkpoint, the per-claim locks, deadlines, conflicts, rollback and start-up reconcile is
`DeviceState`'s (state.py); this class only says what a channel or daemon device is, what preparing one needs and
which CDI edits it gets (computedomain.py has the facts and their upstream sources):

- a channel claim (ComputeDomainChannelConfig): its domain must exist and live in the claim's namespace; the node
  joins the domain (the label that brings the domain's IMEX daemon here); then the prepare fails, retryably, until
  the domain's status lists this node's daemon as Ready (waiting up to `ready_wait_s` first). Prepared, its CDI
  device carries channel 0 (allocationMode Single) or every channel (All); without a clique, none.
- a daemon claim (ComputeDomainDaemonConfig): it must live in the driver's namespace (where the controller's
  daemon template puts it) or in the domain's own; upstream checks no namespace here and relies on who may create
  claims of the daemon class, so a tenant's claim naming another tenant's domain would get that domain's IMEX
  directory and identity. Then the domain's directory under the plugin directory gets the IMEX config
  template and the nodes_config of the peers known now; the CDI device mounts it at /imexd with the daemon's
  environment and, with a clique, the fabric-imex-mgmt capability device.

Which claims joined which domain is kept in the checkpoint (`domainJoins`, written before the node is labelled),
so the label is removed when the last of them is unprepared, even a claim whose prepare never completed (the
kubelet unprepares those too). A domain's directory goes with its last daemon claim; start-up removes directories
no prepared daemon claim owns.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import replace
from typing import Any

from gpudra.atomicfile import ensure_dir, write_atomic
from gpudra.cdi import ContainerEdits, Device, Spec, write_spec
from gpudra.device_config import (COMPUTE_DOMAIN_FAMILY, KIND_FOR_TYPE, ConfigError, DeviceConfig, DomainConfig,
                                  config_for)
from gpudra.discovery import Inventory

from gpudra.kubeletplugin import cdispec
from gpudra.kubeletplugin.calls import CallToken
from gpudra.kubeletplugin.checkpoint import JOINS_KEY as JOINS_KEY  # tests read the joins under this key
from gpudra.kubeletplugin.claimref import ClaimRef, PrepareError
from gpudra.gpuplugin.records import GpuClaimEntry, GpuDevice
from .records import DomainBinding, DomainDevice, domain_of
from .devices import (CHANNEL_TYPE, DAEMON_TYPE, DOMAINS_DIR, DRIVER_NAMESPACE, IMEX_CHANNEL_COUNT,
                            IMEX_CONFIG_TEMPLATE,
                            IMEX_CONFIG_TEMPLATE_FILE, NODES_CONFIG_FILE, NodeDevices, channel_edits, daemon_edits,
                            domain_dir, parse_device_name)
from .dnsnames import HOSTS_FILE, dns_mappings, hosts_file, ip_nodes_config, static_nodes_config
from .daemonstatus import MAX_NODES_PER_IMEX_DOMAIN, DaemonInfo
from .domains import DomainError, DomainInfo, DomainSource
from gpudra.gpuplugin.state import DeviceState

READY_POLL_S = 0.5


def imex_peer_files(domain: DomainInfo | None, clique: str, *, dns_names: bool,
                    max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN) -> dict[str, str]:
    """The files that tell the IMEX daemon its peers, by name in the domain's directory (/imexd in the daemon).
    With IMEXDaemonsWithDNSNames: nodes.cfg lists every DNS-style name (dnsnames.py static_nodes_config) and
    `hosts` maps the IPs of the clique's daemons known now to their names (an entry whose index no name can have
    is left out: upstream's daemon would stop on it); without: nodes.cfg lists their IPs."""
    daemons = [DaemonInfo(n.name, n.ip_address, n.clique_id, n.index, n.status)
               for n in (domain.nodes if domain is not None else ())]
    if not dns_names:
        return {NODES_CONFIG_FILE: ip_nodes_config(daemons, clique)}
    named = [d for d in daemons if 0 <= d.index < max_nodes]
    return {NODES_CONFIG_FILE: static_nodes_config(max_nodes),
            HOSTS_FILE: hosts_file("", dns_mappings(named, clique, max_nodes))}


class ComputeDomainState(DeviceState):
    config_family = COMPUTE_DOMAIN_FAMILY

    def __init__(self, *, domains: DomainSource, clique: str, node_devices: NodeDevices | None = None,
                 channel_count: int = IMEX_CHANNEL_COUNT, ready_wait_s: float = 0.0,
                 driver_namespace: str = DRIVER_NAMESPACE, dns_names: bool = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.dns_names = dns_names  # NVIDIA's IMEXDaemonsWithDNSNames gate (imex_peer_files)
        self.driver_namespace = driver_namespace
        self.domains = domains
        self.clique = clique
        self.node_devices = node_devices or NodeDevices()
        self.channel_count = channel_count
        self.ready_wait_s = ready_wait_s
        self._calls = threading.local()

    @property
    def domains_root(self) -> str:
        return os.path.join(self.paths.plugin_dir, DOMAINS_DIR)

    # -- plan: what each allocated device is, and whether it can be prepared now ------------------------------
    def _plan(self, ref: ClaimRef, claim: dict[str, Any], configs: list[DeviceConfig],
              inventory: Inventory) -> list[GpuDevice]:
        planned: list[tuple[DomainDevice, DomainConfig]] = []
        results = (claim["status"]["allocation"].get("devices") or {}).get("results") or []
        for result in results:
            if result.get("driver") != self.driver_name:
                continue
            pool, device = result.get("pool"), str(result.get("device"))
            if pool != self.node_name:
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: device {pool}/{device} belongs to pool "
                                   f"{pool!r}, not to this node ({self.node_name})")
            parsed = parse_device_name(device, self.channel_count)
            if parsed is None:
                raise PrepareError(f"device {device} does not exist on node {self.node_name}")
            kind, number = parsed
            if any(p.type == kind for p, _ in planned):  # upstream: one device per config (applyComputeDomain*)
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: more than one {kind} device of "
                                   f"{self.driver_name}; a claim gets one")
            request = str(result.get("request", ""))
            try:
                config = config_for(configs, request, kind, device)
            except ConfigError as exc:
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: {exc}") from None
            if config is None or config.domain is None:  # upstream's default config fails Validate()
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: request {request!r} has no "
                                   f"{KIND_FOR_TYPE[kind]}: domainID cannot be empty")
            binding = DomainBinding(domain_id=config.domain.domain_id)
            cdi_device_ids: tuple[str, ...] = (cdispec.cdi_device_id(self.driver_name, ref.uid, device),)
            if kind == CHANNEL_TYPE:
                mode = config.domain.allocation_mode
                # upstream injects channel 0 for Single (the only one it publishes); here: the allocated channel
                binding = replace(binding, allocation_mode=mode, imex_channels=(0, 0) if not self.clique else
                                  (0, self.channel_count) if mode == "All" else (number, number + 1))
                if not self.clique:  # no IMEX here: nothing to inject, no CDI device (cdi.go GetClaimDevice)
                    cdi_device_ids = ()
            share_id = result.get("shareID")
            record = DomainDevice(type=kind, device=device, pool=str(pool), request=request,
                                    request_names=(request.split("/", 1)[0],) if request else (),
                                    admin_access=bool(result.get("adminAccess")), cdi_device_ids=cdi_device_ids,
                                    share_id=str(share_id) if share_id else None, domain=binding)
            planned.append((record, config.domain))
        prepared: list[GpuDevice] = []
        for record, _ in planned:  # lookups and the node label last: nothing is labelled for a claim refused above
            # a channel's claim lives in its domain's namespace (device_state.go applyComputeDomainChannelConfig); a
            # daemon's in the driver's namespace, where the controller's template puts it (or the domain's own)
            assert record.domain is not None
            also = self.driver_namespace if record.type == DAEMON_TYPE else None
            domain = self._domain_for(ref, record.domain.domain_id, also_allowed=also)
            if record.type == CHANNEL_TYPE:
                self._join_and_wait(ref, domain)
            else:
                record = replace(record, domain=replace(record.domain, clique=self.clique, domain_name=domain.name,
                                                        domain_namespace=domain.namespace))
            prepared.append(record)
        return prepared

    def _domain_for(self, ref: ClaimRef, uid: str, also_allowed: str | None = None) -> DomainInfo:
        """The claim's domain, which must live in the claim's namespace unless the claim is in `also_allowed`
        (upstream AssertComputeDomainNamespace)."""
        try:
            domain = self.domains.domain(uid)
        except DomainError as exc:
            raise PrepareError(f"claim {ref.namespace}/{ref.name}: ComputeDomain {uid}: {exc}") from None
        if domain is None:
            raise PrepareError(f"claim {ref.namespace}/{ref.name}: ComputeDomain not found: {uid} (retrying)")
        if domain.namespace != ref.namespace and ref.namespace != also_allowed:
            raise PrepareError(f"claim {ref.namespace}/{ref.name}: the ResourceClaim's namespace is different than "
                               f"the ComputeDomain's namespace ({domain.namespace})")
        return domain

    def _join_and_wait(self, ref: ClaimRef, domain: DomainInfo) -> None:
        """Label the node for the domain (the join recorded first), then wait until its daemon here is ready."""
        with self.journal.lock:
            joins = self.journal.domain_joins
            new = joins.get(ref.uid) != domain.uid
            joins[ref.uid] = domain.uid
            version = self.journal.changed()
        if new:
            self.journal.persist(version)
        try:
            self.domains.join(self.node_name, domain.uid)
        except DomainError as exc:
            self._forget_join(ref.uid, leave=False)
            raise PrepareError(f"claim {ref.namespace}/{ref.name}: {exc}") from None
        deadline = time.monotonic() + self.ready_wait_s
        current: DomainInfo | None = domain
        while not (current is not None and current.node_ready(self.node_name)):
            token: CallToken | None = getattr(self._calls, "token", None)
            if time.monotonic() >= deadline or (token is not None and token.abandoned):
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: ComputeDomain {domain.namespace}/"
                                   f"{domain.name}: the IMEX daemon on node {self.node_name} is not ready yet "
                                   "(retrying)")
            time.sleep(min(READY_POLL_S, max(0.0, deadline - time.monotonic())))
            try:
                current = self.domains.domain(domain.uid)
            except DomainError:
                current = None

    def prepare(self, ref: ClaimRef, token: CallToken | None = None) -> list[dict[str, Any]]:
        self._calls.token = token  # each claim's call runs on a thread of its own (calls.py): the wait's token
        return super().prepare(ref, token)

    # -- hardware: the daemon's directory ----------------------------------------------------------------------
    def _create_hardware(self, ref: ClaimRef, planned: tuple[GpuDevice, ...]) -> tuple[GpuDevice, ...]:
        for record in planned:
            binding = domain_of(record)
            if record.type == DAEMON_TYPE and binding is not None:
                self._write_domain_files(binding.domain_id)
        return planned

    def _write_domain_files(self, domain_id: str) -> None:
        ensure_dir(self.domains_root, 0o755)
        directory = domain_dir(self.paths.plugin_dir, domain_id)
        ensure_dir(directory, 0o755)
        write_atomic(os.path.join(directory, IMEX_CONFIG_TEMPLATE_FILE), IMEX_CONFIG_TEMPLATE.encode(), mode=0o644,
                     label="imex-config", fsync=False)
        try:
            domain = self.domains.domain(domain_id)
        except DomainError:
            domain = None
        for name, text in imex_peer_files(domain, self.clique, dns_names=self.dns_names).items():
            write_atomic(os.path.join(directory, name), text.encode(), mode=0o644, label="imex-nodes", fsync=False)

    # -- CDI ---------------------------------------------------------------------------------------------------
    def _write_cdi(self, uid: str, devices: tuple[GpuDevice, ...]) -> None:
        if not devices:
            return
        cdi_devices = []
        for record in devices:
            binding = domain_of(record)
            if not record.cdi_device_ids or binding is None:
                continue
            edits: ContainerEdits
            if record.type == CHANNEL_TYPE:
                first, end = binding.imex_channels or (0, 0)
                edits = channel_edits(first, end, self.node_devices)
            else:
                edits = daemon_edits(binding, domain_dir(self.paths.plugin_dir, binding.domain_id), self.node_devices)
            cdi_devices.append(Device(name=cdispec.cdi_device_name(uid, record.device), container_edits=edits))
        if not cdi_devices:
            return
        vendor, cls = cdispec.vendor_and_class(self.driver_name)
        spec = Spec(kind=f"{vendor}/{cls}", devices=cdi_devices)
        write_spec(spec, self.paths.cdi_spec_dir, self._spec_name(uid), fsync=False)

    def _spec_exists(self, uid: str) -> bool:
        """A claim without CDI devices (channels of a node without IMEX) has no spec to miss."""
        with self.journal.lock:
            entry = self.journal.claims.get(uid)
            needs_spec = entry is None or any(d.cdi_device_ids for d in entry.devices)
        return super()._spec_exists(uid) if needs_spec else True

    # -- release ---------------------------------------------------------------------------------------------
    def _undo(self, uid: str, entry: GpuClaimEntry, lenient: bool = False) -> None:
        super()._undo(uid, entry, lenient)
        for record in entry.devices:
            binding = domain_of(record)
            if record.type == DAEMON_TYPE and binding is not None and not self._domain_held(uid, binding.domain_id):
                shutil.rmtree(domain_dir(self.paths.plugin_dir, binding.domain_id), ignore_errors=True)

    def _domain_held(self, uid: str, domain_id: str) -> bool:
        """Whether a daemon claim other than `uid` (and not being released) still uses the domain's directory."""
        with self.journal.lock:
            return any(d.type == DAEMON_TYPE and (binding := domain_of(d)) is not None and binding.domain_id == domain_id
                       for other, e in self.journal.claims.items()
                       if other != uid and other not in self._releasing for d in e.devices)

    def unprepare(self, ref: ClaimRef) -> None:
        super().unprepare(ref)
        self._forget_join(ref.uid, leave=True)

    def _forget_join(self, uid: str, *, leave: bool) -> None:
        """Drop the claim's join; the node leaves the domain when no other claim joined it (upstream
        RemoveNodeLabel on unprepare of a channel claim). The label goes first, the join after: a crash in between
        leaves a join without a label (the retried unprepare drops it), never a label nobody accounts for."""
        with self.journal.lock:
            joins = self.journal.domain_joins
            domain_id = joins.get(uid)
            if domain_id is None:
                return
            remaining = any(domain == domain_id for other, domain in joins.items() if other != uid)
        if leave and not remaining:
            try:
                self.domains.leave(self.node_name, domain_id)
            except DomainError as exc:
                raise PrepareError(f"unpreparing claim {uid}: leaving ComputeDomain {domain_id}: {exc}") from None
        with self.journal.lock:
            self.journal.domain_joins.pop(uid, None)
            version = self.journal.changed()
        self.journal.persist(version)

    # -- start-up ----------------------------------------------------------------------------------------------
    def _reconcile(self) -> dict[str, list[str]]:
        report = super()._reconcile()
        with self.journal.lock:
            daemons = [binding.domain_id for e in self.journal.claims.values() if e.completed
                       for d in e.devices if d.type == DAEMON_TYPE and (binding := domain_of(d)) is not None]
        owned = set(daemons)
        report["domainDirsRewritten"] = []
        for domain_id in daemons:  # a crash inside an unprepare may have removed it before the entry went
            if not os.path.isfile(os.path.join(domain_dir(self.paths.plugin_dir, domain_id),
                                               IMEX_CONFIG_TEMPLATE_FILE)):
                self._write_domain_files(domain_id)
                report["domainDirsRewritten"].append(domain_id)
        report["domainDirsRemoved"] = []
        try:
            names = os.listdir(self.domains_root)
        except FileNotFoundError:
            names = []
        for name in names:
            if name not in owned:
                shutil.rmtree(os.path.join(self.domains_root, name), ignore_errors=True)
                report["domainDirsRemoved"].append(name)
        return report

