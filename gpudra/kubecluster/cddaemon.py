"""What an IMEX daemon writes to the API server about itself, through `Rest`: the I/O edge of
gpudra.computedomain.daemonstatus (which has the rules and their upstream sources).

With NVIDIA's `ComputeDomainCliques` gate off the daemon reads its ComputeDomain by namespace and name (as
cmd/compute-domain-daemon/cdstatus.go's informer, a field selector on the name) and writes the `status`
subresource; with it on it creates or updates the ComputeDomainClique `<domain UID>.<clique ID>` in its pod's
namespace (cdclique.go ensureCliqueExists / syncDaemonInfoToClique). Each write is a PUT of the object it read,
resourceVersion and uid included, so a concurrent writer (another node's daemon, the controller) makes the API
server answer 409 and the step is simply tried again (upstream retries through its work queue), and a domain
deleted and recreated under the same name is never written by the daemon of the old one.

A write for a domain that is not the daemon's own is refused before anything is sent and logged as a warning
(`Outcome.REFUSED`): cdstatus.go's onAddOrUpdate skips such an object with a warning too.
"""

from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gpudra.atomicfile import write_atomic
from gpudra.computedomain.daemonstatus import (CLIQUE_PLURAL, MAX_NODES_PER_IMEX_DOMAIN, DaemonIdentity, DaemonInfo,
                                               ForeignDomain, NoFreeIndex, clique_name, daemon_from, new_clique,
                                               remove_daemon_from_clique,
                                               remove_node_from_status, set_daemon_status_in_clique, set_node_status,
                                               sync_daemon_into_clique, sync_node_into_status)
from gpudra.computedomain.dnsnames import DNSNameError, dns_mappings, hosts_file
from gpudra.computedomain.domains import GROUP, PLURAL, VERSION

from .rest import ApiError, Rest, namespaced

log = logging.getLogger(__name__)
GROUP_VERSION = f"{GROUP}/{VERSION}"


class Outcome(enum.Enum):
    WRITTEN = "written"
    UNCHANGED = "unchanged"
    REFUSED = "refused"  # not the daemon's own domain or clique: nothing sent
    RETRY = "retry"  # a conflict, the object not there (yet), no free index: the next round tries again


Change = Callable[[dict[str, Any], DaemonIdentity], "dict[str, Any] | None"]


@dataclass
class DaemonWriter:
    """One daemon's writes: `join` (listed, its pod IP current), `ready(bool)`, `leave` (at shutdown)."""

    rest: Rest
    me: DaemonIdentity
    cliques: bool = True  # NVIDIA's ComputeDomainCliques gate (default on)

    def _domain_path(self) -> str:
        return namespaced(GROUP_VERSION, PLURAL, self.me.domain_namespace, self.me.domain_name)

    def _clique_path(self, name: str | None = None) -> str:
        return namespaced(GROUP_VERSION, CLIQUE_PLURAL, self.me.pod_namespace, name)

    def _apply(self, path: str, write_path: str, change: Change, *, create: dict[str, Any] | None = None) -> Outcome:
        try:
            current = self.rest.get_or_none(path)
            if current is None and create is not None:
                try:
                    current = self.rest.call("POST", self._clique_path(), create)
                except ApiError as exc:
                    if exc.status != 409:  # 409: another daemon of the clique created it first
                        raise
                    current = self.rest.get(path)
            if not isinstance(current, dict):
                log.info("%s not found: trying again later", path)
                return Outcome.RETRY
            updated = change(current, self.me)
            if updated is None:
                return Outcome.UNCHANGED
            self.rest.call("PUT", write_path, updated)
        except ForeignDomain as exc:
            log.warning("refused: %s", exc)
            return Outcome.REFUSED
        except (NoFreeIndex, LookupError) as exc:
            log.warning("%s: trying again later", exc)
            return Outcome.RETRY
        except ApiError as exc:
            if exc.status in (404, 409):
                log.info("%s: %s; trying again later", write_path, exc)
                return Outcome.RETRY
            raise
        return Outcome.WRITTEN

    def _step(self, status_change: Change, clique_change: Change, *, create: bool = False) -> Outcome:
        if not self.me.clique_id:  # main.go run: no clique, no IMEX daemon; the controller lists it from its pod
            return Outcome.UNCHANGED
        if self.cliques:
            path = self._clique_path(clique_name(self.me.domain_uid, self.me.clique_id))
            return self._apply(path, path, clique_change, create=new_clique(self.me) if create else None)
        return self._apply(self._domain_path(), self._domain_path() + "/status", status_change)

    def join(self) -> Outcome:
        return self._step(sync_node_into_status, sync_daemon_into_clique, create=True)

    def ready(self, ready: bool) -> Outcome:
        return self._step(lambda d, me: set_node_status(d, me, ready),
                          lambda c, me: set_daemon_status_in_clique(c, me, ready))

    def leave(self) -> Outcome:
        return self._step(remove_node_from_status, remove_daemon_from_clique)

    def write_foreign(self, namespace: str, name: str) -> Outcome:
        """What the daemon does if handed another ComputeDomain (a watch without its field selector, a tenant's
        object of the same name elsewhere): refused and logged, never written."""
        path = namespaced(GROUP_VERSION, PLURAL, namespace, name)
        return self._apply(path, path + "/status", sync_node_into_status)

    def pod_ready(self) -> bool | None:
        """podmanager.go isPodReady: the daemon's own pod's Ready condition (None: the pod cannot be read now)."""
        pod = self.rest.get_or_none(namespaced("v1", "pods", self.me.pod_namespace, self.me.pod_name))
        if not isinstance(pod, dict):
            return None
        conditions = (pod.get("status") or {}).get("conditions") or []
        return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
                   for c in conditions)

    def daemons(self) -> list[DaemonInfo]:
        """The daemons listed where this one writes (its clique's daemons[], or its domain's status.nodes)."""
        if self.cliques:
            obj = self.rest.get_or_none(self._clique_path(clique_name(self.me.domain_uid, self.me.clique_id)))
            entries, key = (obj or {}).get("daemons"), "nodeName"
        else:
            obj = self.rest.get_or_none(self._domain_path())
            if isinstance(obj, dict) and (obj.get("metadata") or {}).get("uid") != self.me.domain_uid:
                return []  # the same name, another domain: not this daemon's peers
            entries, key = ((obj or {}).get("status") or {}).get("nodes"), "name"
        return [info for e in entries if (info := daemon_from(e, key)) is not None] \
            if isinstance(entries, list) else []


def identity_from_env(env: Mapping[str, str]) -> DaemonIdentity:
    """The daemon's identity from NVIDIA's environment names (cmd/compute-domain-daemon/main.go flags' EnvVars);
    ValueError names what is missing (COMPUTE_DOMAIN_UUID missing: upstream's "CDI container edits did not
    apply")."""
    required = ("COMPUTE_DOMAIN_UUID", "COMPUTE_DOMAIN_NAME", "COMPUTE_DOMAIN_NAMESPACE", "NODE_NAME", "POD_IP",
                "POD_NAME", "POD_NAMESPACE")
    missing = [name for name in required if not env.get(name)]
    if missing:
        raise ValueError(f"missing environment: {', '.join(missing)}")
    max_nodes = env.get("MAX_NODES_PER_IMEX_DOMAIN") or str(MAX_NODES_PER_IMEX_DOMAIN)
    if not max_nodes.isdigit() or int(max_nodes) < 1:
        raise ValueError(f"MAX_NODES_PER_IMEX_DOMAIN={max_nodes}: not a positive integer")
    return DaemonIdentity(domain_uid=env["COMPUTE_DOMAIN_UUID"], domain_name=env["COMPUTE_DOMAIN_NAME"],
                          domain_namespace=env["COMPUTE_DOMAIN_NAMESPACE"], node_name=env["NODE_NAME"],
                          pod_ip=env["POD_IP"], clique_id=env.get("CLIQUE_ID", ""), pod_name=env["POD_NAME"],
                          pod_uid=env.get("POD_UID", ""), pod_namespace=env["POD_NAMESPACE"],
                          max_nodes=int(max_nodes))


def _update_hosts(path: str, writer: DaemonWriter) -> None:
    """dnsnames.go UpdateDNSNameMappings + updateHostsFile: the clique's IP -> name lines in `path`."""
    try:
        mappings = dns_mappings(writer.daemons(), writer.me.clique_id, writer.me.max_nodes)
    except DNSNameError as exc:
        log.warning("hosts file not updated: %s", exc)
        return
    try:
        with open(path, encoding="utf-8") as fh:
            existing = fh.read(1 << 20)
    except FileNotFoundError:
        existing = ""
    updated = hosts_file(existing, mappings)
    if updated != existing:
        write_atomic(path, updated.encode(), mode=0o644, label="hosts", fsync=False)


def run_daemon(writer: DaemonWriter, stop: threading.Event, interval_s: float,
               hosts_path: str | None = None) -> int:
    """The daemon's bookkeeping until `stop`: list itself (join), follow its pod's readiness, keep `hosts_path`
    current (IMEXDaemonsWithDNSNames), and take itself off at the end (leave). The IMEX process itself is not run
    (no IMEX hardware). Returns the number of rounds; an API error is logged and the next round retries."""
    rounds = 0
    while not stop.is_set():
        try:
            if writer.join() is not Outcome.RETRY:
                ready = writer.pod_ready()
                if ready is not None:
                    writer.ready(ready)
            if hosts_path is not None:
                _update_hosts(hosts_path, writer)
        except (ApiError, OSError) as exc:
            log.warning("round failed, retrying in %ss: %s", interval_s, exc)
        rounds += 1
        stop.wait(interval_s)
    try:
        writer.leave()
    except (ApiError, OSError) as exc:  # Stop(): logged, the shutdown goes on
        log.error("failed to remove this daemon's entry during shutdown: %s", exc)
    return rounds
