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
from dataclasses import dataclass
from typing import Any, Callable

from gpudra.computedomain.daemonstatus import (CLIQUE_PLURAL, DaemonIdentity, ForeignDomain, NoFreeIndex,
                                               clique_name, new_clique, remove_daemon_from_clique,
                                               remove_node_from_status, set_daemon_status_in_clique, set_node_status,
                                               sync_daemon_into_clique, sync_node_into_status)
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
