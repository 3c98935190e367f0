"""The ComputeDomain controller as a pure function: one domain and the cluster's objects in, the objects the domain
should have (and the ones it should no longer have), its node labels and its status out.

The facts are those of NVIDIA/k8s-dra-driver-gpu's compute-domain controller (cmd/compute-domain-controller):

- computedomain.go: a live domain gets the finalizer `resource.nvidia.com/computeDomain`, an IMEX-daemon DaemonSet
  and the workload's ResourceClaimTemplate; its global status is NotReady while fewer nodes than spec.numNodes
  have joined or any joined node is NotReady, Ready otherwise. A deleted one (deletionTimestamp) loses its
  workload template, its DaemonSet (with its own template), every node label naming it, then their finalizers, and
  only once they are all gone its own finalizer.
- resourceclaimtemplate.go and templates/compute-domain-{workload,daemon}-claim-template.tmpl.yaml: the workload
  template (the domain's namespace, spec.channel.resourceClaimTemplate.name) requests one device of class
  `compute-domain-default-channel.nvidia.com` with the opaque ComputeDomainChannelConfig {domainID: the domain's
  UID, allocationMode}; the daemon template (the driver's namespace, `computedomain-daemon-<uid>`) one of
  `compute-domain-daemon.nvidia.com` with ComputeDomainDaemonConfig {domainID}. Both carry the domain label and the
  target label (Workload / Daemon) and the finalizer.
- daemonset.go and templates/compute-domain-daemon.tmpl.yaml: the DaemonSet selects nodes by the label
  `resource.nvidia.com/computeDomain=<uid>`, which the kubelet plugin puts on a node when it prepares a channel of
  the domain there (cmd/compute-domain-kubelet-plugin/computedomain.go AddNodeLabel; a node labelled for another
  domain refuses it) and takes off when it unprepares it (RemoveNodeLabel, only when the value is this domain's:
  the fix of NVIDIA/k8s-dra-driver-gpu#518).
- cdstatus.go: status.nodes is built from the daemon pods: node name, pod IP, the node's clique, an index unique
  within the clique (the lowest free one, kept once given: cmd/compute-domain-daemon/cdstatus.go
  getNextAvailableIndex), Ready when the pod is Ready. The daemon pods are those of the driver's namespace
  carrying the domain label (daemonsetpods.go: a pod informer restricted to config.driverNamespace with the
  label selector `computeDomainLabelKey exists`, grouped by the label's value). A labelled pod anywhere else is a
  tenant's, not a daemon: it neither counts for the status, nor joins the IMEX peers, nor is deleted.

Owner references: NVIDIA's controller sets none (daemonset.go and resourceclaimtemplate.go create their objects
from the templates, which carry only the domain label and the finalizer); its CleanupManager (cleanup.go) finds
objects labelled for a domain that no longer exists and deletes them and takes their finalizer off. gpudra does
that too (`orphans`), and in addition gives the workload template, which lives in the domain's own namespace, an
owner reference to the domain (controller, blockOwnerDeletion), so the garbage collector removes it with the
domain and `kubectl get -o yaml` shows whose it is. The DaemonSet and the daemon template live in the driver's
namespace: Kubernetes has no cross-namespace owner references (the garbage collector resolves a namespaced
dependent's owner in the dependent's own namespace, finds none there, and deletes the dependent at once), so for
them the label, the finalizer and `orphans` are the link, as in NVIDIA's driver.

Two differences, on purpose: a daemon pod must also be controlled by the domain's DaemonSet (the owner reference
the DaemonSet controller sets), so a pod someone else made in the driver's namespace does not count either; and
the domain's finalizer also waits for its daemon pods to be gone, so a daemon's claim is
never left to unprepare after the domain it names has vanished (NVIDIA/k8s-dra-driver-gpu#380: daemon pods stuck
Terminating forever).

The node label itself is the kubelet plugin's to set and clear (gpudra.computedomain's kubelet plugin, through
the local cluster's store); the controller only clears it when the domain goes, and clears labels that name a
domain that no longer exists (cleanup.go's periodic cleanup: `stale_labels`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from gpudra.api.schema.computedomain import API_VERSION, KIND, NOT_READY, READY, apply_defaults
from gpudra.device_config import CHANNEL_CONFIG, DAEMON_CONFIG
from gpudra.computedomain.devices import CHANNEL_CLASS, DAEMON_CLASS, DRIVER_NAMESPACE, NODE_LABEL
from gpudra.computedomain.daemonstatus import MAX_NODES_PER_IMEX_DOMAIN, cleanup_clique, controller_status_nodes
from gpudra import __version__
from gpudra.vocabulary import COMPUTE_DOMAIN_DRIVER_NAME

DRIVER_NAME = COMPUTE_DOMAIN_DRIVER_NAME
DOMAIN_LABEL = NODE_LABEL  # computeDomainLabelKey: on nodes, the daemons and the templates
FINALIZER = DOMAIN_LABEL  # computeDomainFinalizer = computeDomainLabelKey
TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
TARGET_WORKLOAD, TARGET_DAEMON = "Workload", "Daemon"
# GPU feature discovery's node label for the NVLink clique (docs/install.md), `<clusterUuid>.<cliqueId>`
CLIQUE_NODE_LABEL = "nvidia.com/gpu.clique"
DAEMON_CONTAINER = "compute-domain-daemon"
# NVIDIA's rbac-compute-domain-daemon.yaml ServiceAccount, in the driver's namespace (deploy/ creates it)
DAEMON_SERVICE_ACCOUNT = "compute-domain-daemon-service-account"
DEFAULT_IMAGE = f"ghcr.io/gpudra/gpudra:{__version__}"

Ref = tuple[str, str | None, str]  # (kind, namespace, name)


@dataclass
class World:
    """What the controller reads: every object of these kinds in the cluster (it picks the domain's own)."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    daemonsets: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    cliques: list[dict[str, Any]] = field(default_factory=list)  # ComputeDomainClique objects (daemonstatus.py)


@dataclass(frozen=True)
class StatusSource:
    """Where status.nodes comes from. `daemons_write` False: from the daemon pods (the local cluster, whose daemons
    are pods on paper); True: from what the IMEX daemons wrote themselves (`gpudra driver compute-domain-daemon`,
    NVIDIA's daemons), their ComputeDomainCliques with NVIDIA's `ComputeDomainCliques` gate on, else the entries
    they wrote into status.nodes (daemonstatus.controller_status_nodes)."""

    daemons_write: bool = False
    cliques_gate: bool = True


FROM_DAEMON_PODS = StatusSource()


@dataclass(frozen=True)
class DaemonPod:
    """What the daemons' pod template carries besides the domain (NVIDIA's controller flags image-name/IMAGE_NAME,
    MAX_NODES_PER_IMEX_DOMAIN and its own feature gates, rendered into templates/compute-domain-daemon.tmpl.yaml).
    `feature_gates` are the gates the controller was given explicitly: NVIDIA passes every gate's value
    (featuregates.ToMap), gpudra only the set ones, so the daemon's defaults stay its own (gpudra refuses an
    explicit true for a gate it does not implement)."""

    image: str = DEFAULT_IMAGE
    max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN
    feature_gates: tuple[tuple[str, bool], ...] = ()
    dns_names: bool = True  # IMEXDaemonsWithDNSNames (default on): the daemon keeps /etc/hosts' clique lines

    def feature_gates_env(self) -> str:
        """FEATURE_GATES as NVIDIA's template writes it: `name=value,` per gate, by name (Go ranges a map sorted)."""
        return "".join(f"{name}={'true' if value else 'false'}," for name, value in sorted(self.feature_gates))


DEFAULT_DAEMON_POD = DaemonPod()

@dataclass
class DomainPlan:
    """What one reconcile wants done. `domain` is the ComputeDomain as it should be stored (None: its finalizer
    is removed and it goes); `create` objects that are missing; `delete` objects to delete; `release` objects
    to take the domain's finalizer off; `labels` node -> the domain label's new value (None: removed);
    `problems` (reason, message) to report as Warning events on the domain; `replace` objects to write back
    (cliques without their stale daemons)."""

    domain: dict[str, Any] | None
    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[Ref] = field(default_factory=list)
    release: list[Ref] = field(default_factory=list)
    labels: dict[str, str | None] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)
    replace: list[dict[str, Any]] = field(default_factory=list)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _labels(obj: dict[str, Any]) -> dict[str, Any]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, dict) else {}


def _ref(obj: dict[str, Any]) -> Ref:
    meta = _meta(obj)
    return (str(obj.get("kind")), meta.get("namespace"), str(meta.get("name")))


def daemon_name(uid: str) -> str:
    """The DaemonSet's and its claim template's name (daemonset.go: computedomain-daemon-<uid>)."""
    return f"computedomain-daemon-{uid}"


def _owned(objects: list[dict[str, Any]], uid: str) -> list[dict[str, Any]]:
    return [o for o in objects if _labels(o).get(DOMAIN_LABEL) == uid]


def daemon_pods(pods: list[dict[str, Any]], uid: str, daemonsets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The domain's IMEX daemons: pods of the driver's namespace with the domain label (daemonsetpods.go's
    informer) whose controller is the domain's DaemonSet (by name, and by uid while that DaemonSet exists)."""
    name = daemon_name(uid)
    owner = next((d for d in daemonsets if _ref(d) == ("DaemonSet", DRIVER_NAMESPACE, name)), None)
    owner_uid = _meta(owner).get("uid") if owner is not None else None

    def controlled(pod: dict[str, Any]) -> bool:
        refs = _meta(pod).get("ownerReferences")
        controller = next((r for r in refs if isinstance(r, dict) and r.get("controller") is True), None) \
            if isinstance(refs, list) else None
        return controller is not None and controller.get("kind") == "DaemonSet" and controller.get("name") == name \
            and (owner_uid is None or controller.get("uid") == owner_uid)

    return [p for p in _owned(pods, uid) if _meta(p).get("namespace") == DRIVER_NAMESPACE and controlled(p)]


def _opaque_config(kind: str, uid: str, allocation_mode: str | None = None) -> dict[str, Any]:
    parameters: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind, "domainID": uid}
    if allocation_mode is not None:
        parameters["allocationMode"] = allocation_mode
    return {"driver": DRIVER_NAME, "parameters": parameters}


def owner_reference(domain: dict[str, Any]) -> dict[str, Any]:
    """The domain as the controlling owner of an object in its own namespace."""
    meta = _meta(domain)
    return {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def _claim_template(namespace: str, name: str, uid: str, target: str, request: str, device_class: str,
                    config: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": namespace, "name": name, "finalizers": [FINALIZER],
                     "labels": {DOMAIN_LABEL: uid, TARGET_LABEL: target}},
        "spec": {"spec": {"devices": {
            "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
            "config": [{"requests": [request], "opaque": config}],
        }}},
    }


def workload_template(domain: dict[str, Any]) -> dict[str, Any]:
    """The ResourceClaimTemplate the domain's pods name (compute-domain-workload-claim-template.tmpl.yaml)."""
    meta, spec = _meta(domain), apply_defaults(domain)["spec"]
    channel = spec["channel"]
    template = _claim_template(meta.get("namespace") or "default", channel["resourceClaimTemplate"]["name"],
                               meta["uid"], TARGET_WORKLOAD, "channel", CHANNEL_CLASS,
                               _opaque_config(CHANNEL_CONFIG, meta["uid"], channel["allocationMode"]))
    template["metadata"]["ownerReferences"] = [owner_reference(domain)]  # same namespace: allowed (see above)
    return template


def daemon_template(domain: dict[str, Any]) -> dict[str, Any]:
    """The ResourceClaimTemplate of the IMEX daemons (compute-domain-daemon-claim-template.tmpl.yaml)."""
    uid = _meta(domain)["uid"]
    return _claim_template(DRIVER_NAMESPACE, daemon_name(uid), uid, TARGET_DAEMON, "daemon", DAEMON_CLASS,
                           _opaque_config(DAEMON_CONFIG, uid))


def daemonset(domain: dict[str, Any], daemon: DaemonPod = DEFAULT_DAEMON_POD) -> dict[str, Any]:
    """The IMEX daemons (templates/compute-domain-daemon.tmpl.yaml): a pod on every node labelled for the domain,
    each with a claim from the daemon template, running `gpudra driver compute-domain-daemon` with the environment
    NVIDIA's daemon gets (who it is; the domain and clique come from its claim's CDI edits); every taint tolerated.
    NVIDIA's exec probes (`compute-domain-daemon check`, the IMEX process's state) are left out: gpudra runs no IMEX
    process to check."""
    uid = _meta(domain)["uid"]
    selector = {DOMAIN_LABEL: uid}
    command = ["gpudra", "driver", "compute-domain-daemon", "--in-cluster"]
    if daemon.dns_names:  # dnsnames.go: the daemon keeps its clique's names in the pod's /etc/hosts
        command.append("--hosts-file=/etc/hosts")

    def field_ref(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    env: list[dict[str, Any]] = [
        {"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": str(daemon.max_nodes)},
        field_ref("NODE_NAME", "spec.nodeName"), field_ref("POD_IP", "status.podIP"),
        field_ref("POD_UID", "metadata.uid"), field_ref("POD_NAME", "metadata.name"),
        field_ref("POD_NAMESPACE", "metadata.namespace"),
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},  # runc: no GPU for the daemon itself
    ]
    if daemon.feature_gates:
        env.append({"name": "FEATURE_GATES", "value": daemon.feature_gates_env()})
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"namespace": DRIVER_NAMESPACE, "name": daemon_name(uid), "finalizers": [FINALIZER],
                     "labels": dict(selector)},
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "template": {
                "metadata": {"labels": dict(selector)},
                "spec": {
                    "serviceAccountName": DAEMON_SERVICE_ACCOUNT,
                    "nodeSelector": dict(selector),
                    "containers": [{"name": DAEMON_CONTAINER, "image": daemon.image, "command": command, "env": env,
                                    "resources": {"claims": [{"name": DAEMON_CONTAINER}]}}],
                    "tolerations": [{"operator": "Exists", "effect": effect}
                                    for effect in ("NoSchedule", "NoExecute", "PreferNoSchedule")],
                    "resourceClaims": [{"name": DAEMON_CONTAINER, "resourceClaimTemplateName": daemon_name(uid)}],
                },
            },
        },
    }


def channel_domain(claim: dict[str, Any]) -> str | None:
    """The domain UID of a claim's ComputeDomainChannelConfig (None: the claim holds no channel)."""
    devices = ((claim.get("spec") or {}).get("devices") or {}) if isinstance(claim.get("spec"), dict) else {}
    for config in devices.get("config") or [] if isinstance(devices, dict) else []:
        opaque = config.get("opaque") if isinstance(config, dict) else None
        if not isinstance(opaque, dict) or opaque.get("driver") != DRIVER_NAME:
            continue
        parameters = opaque.get("parameters")
        domain_id = parameters.get("domainID") if isinstance(parameters, dict) else None
        if isinstance(parameters, dict) and parameters.get("kind") == CHANNEL_CONFIG and isinstance(domain_id, str):
            return domain_id
    return None


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def status_nodes(domain: dict[str, Any], daemons: list[dict[str, Any]],
                 nodes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """status.nodes from the daemon pods: one entry per node with a daemon (the first pod by name where a node has
    two, as a DaemonSet briefly may: the API server refuses two entries of one name), its index kept once given."""
    before = {n.get("name"): n for n in (domain.get("status") or {}).get("nodes") or [] if isinstance(n, dict)}
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    for pod in sorted(daemons, key=lambda p: (str((p.get("spec") or {}).get("nodeName")),
                                                  str(_meta(p).get("name")))):
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or _meta(pod).get("deletionTimestamp") or node in seen:
            continue
        seen.add(node)
        clique = str(_labels(nodes.get(node) or {}).get(CLIQUE_NODE_LABEL, ""))
        entries.append({"name": node, "ipAddress": str((pod.get("status") or {}).get("podIP") or ""),
                        "cliqueID": clique, "index": None, "status": READY if _ready(pod) else NOT_READY})
    for entry in entries:  # kept indices first, so a new node never takes one a joined node holds
        old = before.get(entry["name"])
        if old is not None and old.get("cliqueID") == entry["cliqueID"] and isinstance(old.get("index"), int):
            entry["index"] = old["index"]
    for entry in entries:
        if entry["index"] is None:
            used = {e["index"] for e in entries if e["cliqueID"] == entry["cliqueID"] and e["index"] is not None}
            entry["index"] = next(i for i in range(len(entries) + 1) if i not in used)
    return entries


def global_status(num_nodes: int, nodes: list[dict[str, Any]]) -> str:
    """computedomain.go calculateGlobalStatus."""
    if len(nodes) < num_nodes or any(n.get("status") == NOT_READY for n in nodes):
        return NOT_READY
    return READY


def plan(domain: dict[str, Any], world: World, source: StatusSource = FROM_DAEMON_PODS,
         daemon: DaemonPod = DEFAULT_DAEMON_POD) -> DomainPlan:
    """One reconcile of one stored ComputeDomain (it has its uid)."""
    domain = apply_defaults(domain)
    meta = _meta(domain)
    uid = str(meta.get("uid"))
    owned = _owned(world.templates, uid) + _owned(world.daemonsets, uid)
    daemons = daemon_pods(world.pods, uid, world.daemonsets)
    labelled = {str(_meta(n).get("name")): _labels(n).get(DOMAIN_LABEL) for n in world.nodes}
    if meta.get("deletionTimestamp"):
        return _teardown(domain, uid, owned, daemons, labelled)
    result = DomainPlan(domain=copy.deepcopy(domain))
    stored = result.domain
    assert stored is not None
    finalizers = _meta(stored).setdefault("finalizers", [])
    if FINALIZER not in finalizers:
        finalizers.append(FINALIZER)
    spec = stored.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("channel"), dict):
        existing = {_ref(o) for o in owned}
        for desired in (daemon_template(stored), daemonset(stored, daemon), workload_template(stored)):
            if _ref(desired) in existing:
                continue
            clash = next((o for o in world.templates if _ref(o) == _ref(desired)), None)
            if clash is not None:  # a template of that name that is not this domain's: the create would fail
                result.problems.append(("FailedCreate", f"{desired['kind']} {_ref(desired)[1]}/{_ref(desired)[2]} "
                                        "already exists and does not belong to this ComputeDomain"))
                continue
            result.create.append(desired)
    # the DaemonSet controller's part for the domain's daemons: none on a node that lost the label
    for pod in daemons:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and labelled.get(node) != uid and not _meta(pod).get("deletionTimestamp"):
            result.delete.append(_ref(pod))
    live = [p for p in daemons if _ref(p) not in result.delete]
    if source.daemons_write:
        entries = _written_status_nodes(stored, uid, world, live, source, result)
    else:
        entries = status_nodes(stored, live, {str(_meta(n).get("name")): n for n in world.nodes})
    num_nodes = spec.get("numNodes", 0) if isinstance(spec, dict) else 0
    status: dict[str, Any] = {"status": global_status(num_nodes, entries)}
    if entries:
        status["nodes"] = entries
    stored["status"] = status
    return result


def _written_status_nodes(domain: dict[str, Any], uid: str, world: World, daemons: list[dict[str, Any]],
                          source: StatusSource, result: DomainPlan) -> list[dict[str, Any]]:
    """status.nodes from the daemons' own writes (controller cdstatus.go syncCD), and each of the domain's cliques
    without the daemons whose node runs no daemon pod of the domain now (cleanupClique)."""
    cliques = [c for c in _owned(world.cliques, uid) if _meta(c).get("namespace") == DRIVER_NAMESPACE] \
        if source.cliques_gate else []
    for clique in cliques:
        cleaned = cleanup_clique(clique, daemons)
        if cleaned is not None:
            result.replace.append(cleaned)
    return [n.status_node() for n in controller_status_nodes(domain, cliques, daemons,
                                                             cliques_gate=source.cliques_gate)]


def stale_labels(domain_uids: set[str], nodes: list[dict[str, Any]]) -> dict[str, None]:
    """Nodes labelled for a domain that no longer exists (a label written while its domain was being deleted):
    their label goes (node.go's label cleanup)."""
    return {str(_meta(n).get("name")): None for n in nodes
            if DOMAIN_LABEL in _labels(n) and _labels(n)[DOMAIN_LABEL] not in domain_uids}


def orphans(domain_uids: set[str], world: World) -> DomainPlan:
    """Templates and DaemonSets labelled for a domain that no longer exists (its finalizer was taken off by hand,
    or the garbage collector deleted a workload template): deleted and released, as cleanup.go's CleanupManager
    does. Only the driver's objects count: the target label (templates) or the driver's namespace (DaemonSets)."""
    result = DomainPlan(domain=None)
    candidates = [t for t in world.templates if _labels(t).get(TARGET_LABEL) in (TARGET_WORKLOAD, TARGET_DAEMON)] \
        + [d for d in world.daemonsets if _meta(d).get("namespace") == DRIVER_NAMESPACE]
    for obj in candidates:
        uid = _labels(obj).get(DOMAIN_LABEL)
        if uid is None or uid in domain_uids:
            continue
        if not _meta(obj).get("deletionTimestamp"):
            result.delete.append(_ref(obj))
        if FINALIZER in (_meta(obj).get("finalizers") or []):
            result.release.append(_ref(obj))
    return result


def _teardown(domain: dict[str, Any], uid: str, owned: list[dict[str, Any]], daemons: list[dict[str, Any]],
              labelled: dict[str, Any]) -> DomainPlan:
    """A deleted domain: delete what it owns, unlabel its nodes, take the finalizers off; its own goes last."""
    result = DomainPlan(domain=copy.deepcopy(domain))
    for obj in owned:
        if not _meta(obj).get("deletionTimestamp"):
            result.delete.append(_ref(obj))
        if FINALIZER in (_meta(obj).get("finalizers") or []):
            result.release.append(_ref(obj))
    for pod in daemons:
        if not _meta(pod).get("deletionTimestamp"):
            result.delete.append(_ref(pod))
    result.labels = {node: None for node, value in labelled.items() if value == uid}
    if not owned and not daemons:  # AssertRemoved, the daemons included (#380)
        stored = result.domain
        assert stored is not None
        _meta(stored)["finalizers"] = [f for f in _meta(stored).get("finalizers") or [] if f != FINALIZER]
        if not _meta(stored)["finalizers"]:
            result.domain = None
    return result


def is_domain(obj: dict[str, Any]) -> bool:
    return obj.get("kind") == KIND and obj.get("apiVersion") == API_VERSION
