"""What each node's IMEX daemon writes about itself, and what the controller makes of it: pure functions, one object
in, the object to write back out (None: nothing to write).

The facts are those of kubernetes-sigs/dra-driver-nvidia-gpu (commit 95932046, 2026-08-07):

- cmd/compute-domain-daemon/cdstatus.go (ComputeDomainStatusManager, the path with the `ComputeDomainCliques` gate
  off): the daemon watches only its own ComputeDomain (informer on its namespace, field selector on its name) and
  skips, with a warning, an object whose UID is not its COMPUTE_DOMAIN_UUID (onAddOrUpdate). syncNodeInfoToCD adds
  this node to status.nodes once (name, cliqueID, the next free index, status NotReady) and keeps its ipAddress the
  pod's IP; updateNodeStatus sets its status Ready/NotReady as the pod's readiness changes (podmanager.go);
  removeNodeFromComputeDomain drops the entries with this pod's IP at shutdown. getNextAvailableIndex: the lowest
  index no node of the same clique holds, below maxNodesPerIMEXDomain unless the clique ID is empty.
- cmd/compute-domain-daemon/cdclique.go (ComputeDomainCliqueManager, the gate on, NVIDIA's default since 0.3): the
  daemon keeps a ComputeDomainClique object `<domain UID>.<clique ID>` in the driver's namespace
  (api/nvidia.com/resource/v1beta1/computedomainclique.go), labelled with the domain and the clique
  (`resource.nvidia.com/computeDomain.cliqueID`, common.go), each daemon pod an owner (ensureOwnerReference), its
  `daemons[]` the same entries under the names nodeName/ipAddress/cliqueID/index/status; a clique whose domain
  label is not this daemon's domain is skipped with a warning. Its getNextAvailableIndex has no clique filter (the
  object is one clique) and is always bounded.
- cmd/compute-domain-controller/cdstatus.go (the controller's ComputeDomainStatusManager.syncCD): with the gate on,
  status.nodes = every daemon of the domain's cliques (buildNodesFromCliques) plus one entry per daemon pod whose
  clique label is empty (buildNodesFromPods: no fabric, cliqueID "", index -1); with it off, the entries the daemons
  wrote whose IP is still a fabric daemon pod's (getNonStaleFabricNodes) plus the same non-fabric entries.
  cleanupClique drops a clique's daemons whose node runs no daemon pod of the domain any more.

gpudra refuses, where NVIDIA only skips: a write for another domain raises `ForeignDomain` (the caller logs it), so
a daemon of one tenant's domain can never change another domain's status or clique, even if it is handed one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterable

from gpudra.api.schema.computedomain import API_VERSION, CLIQUE_KIND, NOT_READY, READY
from gpudra.api.schema.computedomain import CLIQUE_PLURAL as CLIQUE_PLURAL  # re-exported: the daemons' REST path
from gpudra.errors import GpudraError

from .devices import DRIVER_NAMESPACE, NODE_LABEL

# cmd/compute-domain-controller/main.go defaultMaxNodesPerIMEXDomain (env MAX_NODES_PER_IMEX_DOMAIN)
MAX_NODES_PER_IMEX_DOMAIN = 18
CLIQUE_LABEL = "resource.nvidia.com/computeDomain.cliqueID"  # common.go computeDomainCliqueLabelKey
NO_FABRIC_INDEX = -1  # controller cdstatus.go buildNodesFromPods


class ForeignDomain(GpudraError):
    """The object handed to a daemon is not its own domain's (or its own domain's clique): nothing is written."""


class NoFreeIndex(GpudraError):
    """Every index below maxNodesPerIMEXDomain is held in the daemon's clique."""


@dataclass(frozen=True)
class DaemonIdentity:
    """Who a daemon is: the environment its claim's CDI edits and the DaemonSet's downward API give it
    (COMPUTE_DOMAIN_UUID/NAME/NAMESPACE, CLIQUE_ID, NODE_NAME, POD_IP, POD_NAME, POD_UID, POD_NAMESPACE)."""

    domain_uid: str
    domain_name: str
    domain_namespace: str
    node_name: str
    pod_ip: str
    clique_id: str
    pod_name: str = ""
    pod_uid: str = ""
    pod_namespace: str = DRIVER_NAMESPACE
    max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN


@dataclass(frozen=True)
class DaemonInfo:
    """One daemon as the API holds it: a ComputeDomainNode in status.nodes[] or a ComputeDomainDaemonInfo in a
    clique's daemons[] (the same five fields; the node's name is `name` in one and `nodeName` in the other)."""

    node_name: str
    ip_address: str
    clique_id: str
    index: int
    status: str = NOT_READY

    def status_node(self) -> dict[str, Any]:
        return {"name": self.node_name, "ipAddress": self.ip_address, "cliqueID": self.clique_id,
                "index": self.index, "status": self.status}

    def clique_daemon(self) -> dict[str, Any]:
        return {"nodeName": self.node_name, "ipAddress": self.ip_address, "cliqueID": self.clique_id,
                "index": self.index, "status": self.status}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _index(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0  # Go's zero value


def daemon_from(entry: Any, name_key: str) -> DaemonInfo | None:
    """An entry of status.nodes (`name_key` "name") or of a clique's daemons ("nodeName"); None when unusable."""
    if not isinstance(entry, dict) or not _text(entry.get(name_key)):
        return None
    return DaemonInfo(node_name=entry[name_key], ip_address=_text(entry.get("ipAddress")),
                      clique_id=_text(entry.get("cliqueID")), index=_index(entry.get("index")),
                      status=_text(entry.get("status")) or NOT_READY)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def next_available_index(used: Iterable[int], max_nodes: int, *, bounded: bool = True) -> int:
    """The lowest index not in `used` (gaps are filled, so the names of daemons that stay never change); NoFreeIndex
    when it is not below `max_nodes` and `bounded` (daemon cdstatus.go/cdclique.go getNextAvailableIndex)."""
    taken = set(used)
    index = 0
    while index in taken:
        index += 1
    if bounded and index >= max_nodes:
        raise NoFreeIndex(f"no available indices within maxNodesPerIMEXDomain ({max_nodes})")
    return index


# -- the ComputeDomainCliques gate off: the daemon writes its domain's status.nodes --------------------------------
def check_own_domain(domain: dict[str, Any], me: DaemonIdentity) -> None:
    """ForeignDomain unless `domain` is the ComputeDomain this daemon serves (UID, name and namespace)."""
    meta = _meta(domain)
    found = (_text(meta.get("uid")), _text(meta.get("name")), _text(meta.get("namespace")))
    if domain.get("kind") != "ComputeDomain" or found != (me.domain_uid, me.domain_name, me.domain_namespace):
        raise ForeignDomain(f"the daemon of ComputeDomain {me.domain_namespace}/{me.domain_name} ({me.domain_uid}) "
                            f"does not write {domain.get('kind')} {found[2]}/{found[1]} ({found[0]})")


def _status_nodes(domain: dict[str, Any]) -> list[dict[str, Any]]:
    status = domain.get("status")
    nodes = status.get("nodes") if isinstance(status, dict) else None
    return [n for n in nodes if isinstance(n, dict)] if isinstance(nodes, list) else []


def _with_nodes(domain: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    updated = copy.deepcopy(domain)
    status = updated.get("status")
    updated["status"] = dict(status if isinstance(status, dict) else {}, nodes=nodes)
    return updated


def sync_node_into_status(domain: dict[str, Any], me: DaemonIdentity) -> dict[str, Any] | None:
    """syncNodeInfoToCD: the domain with this node listed (a new entry NotReady with the clique's next free index)
    and its ipAddress the pod's; None when it already is."""
    check_own_domain(domain, me)
    nodes = copy.deepcopy(_status_nodes(domain))
    mine = next((n for n in nodes if n.get("name") == me.node_name), None)
    if mine is not None and mine.get("ipAddress") == me.pod_ip:
        return None
    if mine is None:
        used = (_index(n.get("index")) for n in nodes if _text(n.get("cliqueID")) == me.clique_id)
        index = next_available_index(used, me.max_nodes, bounded=me.clique_id != "")
        mine = DaemonInfo(me.node_name, me.pod_ip, me.clique_id, index, NOT_READY).status_node()
        nodes.append(mine)
    mine["ipAddress"] = me.pod_ip  # a pod IP: it may change when the daemon's pod is recreated
    return _with_nodes(domain, nodes)


def set_node_status(domain: dict[str, Any], me: DaemonIdentity, ready: bool) -> dict[str, Any] | None:
    """updateNodeStatus: this node's entry Ready or NotReady; None when it already is. ForeignDomain, or
    NoFreeIndex's sibling case: no entry yet (upstream: "waiting for insertion"), raised as LookupError."""
    check_own_domain(domain, me)
    nodes = copy.deepcopy(_status_nodes(domain))
    mine = next((n for n in nodes if n.get("name") == me.node_name), None)
    if mine is None:
        raise LookupError(f"node {me.node_name} not yet listed in ComputeDomain {me.domain_name}")
    wanted = READY if ready else NOT_READY
    if mine.get("status") == wanted:
        return None
    mine["status"] = wanted
    return _with_nodes(domain, nodes)


def remove_node_from_status(domain: dict[str, Any], me: DaemonIdentity) -> dict[str, Any] | None:
    """removeNodeFromComputeDomain: the entries with this pod's IP dropped; None when there are none."""
    check_own_domain(domain, me)
    nodes = _status_nodes(domain)
    kept = [n for n in nodes if n.get("ipAddress") != me.pod_ip]
    return None if len(kept) == len(nodes) else _with_nodes(domain, copy.deepcopy(kept))


# -- the ComputeDomainCliques gate on: the daemon writes its clique's ComputeDomainClique ----------------------------
def clique_name(domain_uid: str, clique_id: str) -> str:
    """cdclique.go cliqueName: `<computeDomainUUID>.<cliqueID>`."""
    return f"{domain_uid}.{clique_id}"


def _pod_owner(me: DaemonIdentity) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "name": me.pod_name, "uid": me.pod_uid}


def new_clique(me: DaemonIdentity) -> dict[str, Any]:
    """ensureCliqueExists: the clique object a daemon creates when none exists yet (no daemons listed)."""
    return {"apiVersion": API_VERSION, "kind": CLIQUE_KIND,
            "metadata": {"name": clique_name(me.domain_uid, me.clique_id), "namespace": me.pod_namespace,
                         "labels": {NODE_LABEL: me.domain_uid, CLIQUE_LABEL: me.clique_id},
                         "ownerReferences": [_pod_owner(me)] if me.pod_uid else []}}


def check_own_clique(clique: dict[str, Any], me: DaemonIdentity) -> None:
    """ForeignDomain unless `clique` is this daemon's: its name, namespace and domain label (onAddOrUpdate)."""
    meta = _meta(clique)
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    assert isinstance(labels, dict)
    if clique.get("kind") != CLIQUE_KIND or meta.get("name") != clique_name(me.domain_uid, me.clique_id) \
            or meta.get("namespace") != me.pod_namespace or labels.get(NODE_LABEL) != me.domain_uid:
        raise ForeignDomain(f"the daemon of ComputeDomain {me.domain_uid} does not write {clique.get('kind')} "
                            f"{meta.get('namespace')}/{meta.get('name')} (domain label {labels.get(NODE_LABEL)!r})")


def _daemons(clique: dict[str, Any]) -> list[dict[str, Any]]:
    daemons = clique.get("daemons")
    return [d for d in daemons if isinstance(d, dict)] if isinstance(daemons, list) else []


def _with_daemons(clique: dict[str, Any], daemons: list[dict[str, Any]], me: DaemonIdentity | None) -> dict[str, Any]:
    updated = copy.deepcopy(clique)
    updated["daemons"] = daemons
    if me is not None and me.pod_uid:  # ensureOwnerReference
        meta = updated.setdefault("metadata", {})
        owners = meta.setdefault("ownerReferences", [])
        if not any(isinstance(o, dict) and o.get("uid") == me.pod_uid for o in owners):
            owners.append(_pod_owner(me))
    return updated


def sync_daemon_into_clique(clique: dict[str, Any], me: DaemonIdentity) -> dict[str, Any] | None:
    """syncDaemonInfoToClique: the clique with this daemon listed and its ipAddress the pod's; None when it is."""
    check_own_clique(clique, me)
    daemons = copy.deepcopy(_daemons(clique))
    mine = next((d for d in daemons if d.get("nodeName") == me.node_name), None)
    if mine is not None and mine.get("ipAddress") == me.pod_ip:
        return None
    if mine is None:
        index = next_available_index((_index(d.get("index")) for d in daemons), me.max_nodes)
        mine = DaemonInfo(me.node_name, me.pod_ip, me.clique_id, index, NOT_READY).clique_daemon()
        daemons.append(mine)
    mine["ipAddress"] = me.pod_ip
    return _with_daemons(clique, daemons, me)


def set_daemon_status_in_clique(clique: dict[str, Any], me: DaemonIdentity, ready: bool) -> dict[str, Any] | None:
    """cdclique.go updateDaemonStatus."""
    check_own_clique(clique, me)
    daemons = copy.deepcopy(_daemons(clique))
    mine = next((d for d in daemons if d.get("nodeName") == me.node_name), None)
    if mine is None:
        raise LookupError(f"daemon of node {me.node_name} not yet listed in clique {_meta(clique).get('name')}")
    wanted = READY if ready else NOT_READY
    if mine.get("status") == wanted:
        return None
    mine["status"] = wanted
    return _with_daemons(clique, daemons, None)


def remove_daemon_from_clique(clique: dict[str, Any], me: DaemonIdentity) -> dict[str, Any] | None:
    """removeDaemonInfoFromClique: the daemons with this pod's IP dropped; None when there are none."""
    check_own_clique(clique, me)
    daemons = _daemons(clique)
    kept = [d for d in daemons if d.get("ipAddress") != me.pod_ip]
    return None if len(kept) == len(daemons) else _with_daemons(clique, copy.deepcopy(kept), None)


# -- the controller's side: status.nodes from what the daemons wrote (controller cdstatus.go) -----------------------
def _pod_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    assert isinstance(status, dict)
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in status.get("conditions") or [])


def _pod_field(pod: dict[str, Any], part: str, key: str) -> str:
    section = pod.get(part)
    return _text(section.get(key)) if isinstance(section, dict) else ""


def _pod_labels(pod: dict[str, Any]) -> dict[str, Any]:
    labels = _meta(pod).get("labels")
    return labels if isinstance(labels, dict) else {}


def is_fabric_pod(pod: dict[str, Any]) -> bool:
    """controller cdstatus.go sync: a daemon pod without the clique label (not labelled yet) or with a non-empty
    one is a fabric daemon; only an empty clique label marks a node without NVLink fabric."""
    labels = _pod_labels(pod)
    return CLIQUE_LABEL not in labels or labels[CLIQUE_LABEL] != ""


def nodes_from_cliques(cliques: Iterable[dict[str, Any]]) -> list[DaemonInfo]:
    """buildNodesFromCliques: every daemon of every clique, as listed."""
    return [info for clique in cliques for d in _daemons(clique)
            if (info := daemon_from(d, "nodeName")) is not None]


def nodes_from_pods(pods: Iterable[dict[str, Any]]) -> list[DaemonInfo]:
    """buildNodesFromPods: a non-fabric daemon pod that is scheduled and has an IP, with no clique and index -1."""
    return [DaemonInfo(_pod_field(p, "spec", "nodeName"), _pod_field(p, "status", "podIP"), "", NO_FABRIC_INDEX,
                       READY if _pod_ready(p) else NOT_READY)
            for p in pods if _pod_field(p, "spec", "nodeName") and _pod_field(p, "status", "podIP")]


def controller_status_nodes(domain: dict[str, Any], cliques: Iterable[dict[str, Any]],
                            pods: Iterable[dict[str, Any]], *, cliques_gate: bool) -> list[DaemonInfo]:
    """syncCD: status.nodes as the controller writes it, from the domain's cliques (gate on) or the entries its
    daemons wrote whose IP still belongs to a fabric daemon pod (gate off: getNonStaleFabricNodes), plus the
    non-fabric daemon pods. `cliques` and `pods` are the domain's own (its domain label)."""
    pods = list(pods)
    fabric_ips = {_pod_field(p, "status", "podIP") for p in pods if is_fabric_pod(p)} - {""}
    if cliques_gate:
        fabric = nodes_from_cliques(cliques)
    else:
        fabric = [info for n in _status_nodes(domain) if (info := daemon_from(n, "name")) is not None
                  and info.clique_id != "" and info.ip_address in fabric_ips]
    return fabric + nodes_from_pods(p for p in pods if not is_fabric_pod(p))


def cleanup_clique(clique: dict[str, Any], pods: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """cleanupClique: the clique without the daemons whose node runs no daemon pod now; None when none is stale.
    Upstream counts the daemon pods of every domain; gpudra's callers pass the clique's own domain's, so a node
    that left this domain for another is dropped here too."""
    running = {_pod_field(p, "spec", "nodeName") for p in pods} - {""}
    daemons = _daemons(clique)
    kept = [d for d in daemons if d.get("nodeName") in running]
    return None if len(kept) == len(daemons) else _with_daemons(clique, copy.deepcopy(kept), None)
