"""Where the compute-domain plugin learns about ComputeDomains: the `DomainSource` interface and two sources.

NVIDIA's plugin (cmd/compute-domain-kubelet-plugin/computedomain.go) watches ComputeDomain objects and, preparing a
channel claim: finds the domain by UID (`domainID` of the claim's config), refuses a claim from another namespace,
labels its Node `resource.nvidia.com/computeDomain=<uid>` (the controller's DaemonSet for that domain selects nodes
by this label, so the label is what brings the IMEX daemon to the node; a node labelled for another domain is
refused), and then fails, retryably, until `status.nodes[]` lists this node with status Ready (the daemon sets it
once its IMEX daemon answers). Unprepare removes the label. The daemon's claim needs the domain's name and
namespace (its container's environment).

`DomainSource` is that in four calls, so the ComputeDomain controller and the local cluster can serve it from
their own store; `domain_from_object` reads one ComputeDomain object (resource.nvidia.com/v1beta1,
api/nvidia.com/resource/v1beta1/computedomain.go) into the `DomainInfo` the plugin uses.
`DirectoryDomainSource` reads ComputeDomain objects from files (the local cluster, tests); `KubeDomainSource`
asks an API server.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from gpudra.atomicfile import write_atomic
from gpudra.errors import GpudraError

from .devices import NODE_LABEL

GROUP, VERSION, PLURAL = "resource.nvidia.com", "v1beta1", "computedomains"
READY = "Ready"  # computedomain.go ComputeDomainStatusReady
DOMAIN_FILE_MAX = 4 << 20


class DomainError(GpudraError):
    """The domain cannot be looked up or the node cannot join it now (the kubelet retries the prepare)."""


@dataclass(frozen=True)
class DomainNode:
    """One entry of a ComputeDomain's status.nodes[]: a node whose IMEX daemon joined the domain."""
    name: str
    ip_address: str = ""
    clique_id: str = ""
    index: int = 0
    status: str = ""

    @property
    def ready(self) -> bool:
        return self.status == READY


@dataclass(frozen=True)
class DomainInfo:
    uid: str
    name: str
    namespace: str
    nodes: tuple[DomainNode, ...] = ()

    def node(self, name: str) -> DomainNode | None:
        return next((n for n in self.nodes if n.name == name), None)

    def node_ready(self, name: str) -> bool:
        """Whether the IMEX daemon on node `name` is ready (upstream isCurrentNodeReadyInStatus)."""
        node = self.node(name)
        return node is not None and node.ready

    def peer_addresses(self, clique_id: str) -> list[str]:
        """The IP addresses of the domain's daemons in `clique_id`: the IMEX nodes_config (compute-domain-daemon
        main.go writeDaemonsConfig lists only the daemons of its own clique)."""
        return [n.ip_address for n in self.nodes if n.clique_id == clique_id and n.ip_address]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def domain_from_object(obj: Any) -> DomainInfo | None:
    """A ComputeDomain object as DomainInfo; None when it has no UID. Malformed status entries are skipped."""
    if not isinstance(obj, dict):
        return None
    meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    uid = _text(meta.get("uid"))
    if not uid:
        return None
    status: dict[str, Any] = obj["status"] if isinstance(obj.get("status"), dict) else {}
    entries = status.get("nodes")
    nodes = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not _text(entry.get("name")):
            continue
        index = entry.get("index")
        nodes.append(DomainNode(name=entry["name"], ip_address=_text(entry.get("ipAddress")),
                                clique_id=_text(entry.get("cliqueID")),
                                index=index if isinstance(index, int) and not isinstance(index, bool) else 0,
                                status=_text(entry.get("status"))))
    return DomainInfo(uid=uid, name=_text(meta.get("name")), namespace=_text(meta.get("namespace")) or "default",
                      nodes=tuple(nodes))


class DomainSource(Protocol):
    """What the compute-domain plugin needs to know and do about ComputeDomains. DomainError: try again later."""

    def domain(self, uid: str) -> DomainInfo | None:
        """The ComputeDomain with this metadata.uid, or None when there is none."""

    def node_domain(self, node: str) -> str | None:
        """The UID of the domain `node` is labelled for (NODE_LABEL), or None."""

    def join(self, node: str, uid: str) -> None:
        """Label `node` for the domain (so its IMEX daemon is started there); DomainError when the node is labelled
        for another domain."""

    def leave(self, node: str, uid: str) -> None:
        """Remove the label if it names this domain (a label for another domain stays)."""


class DirectoryDomainSource:
    """ComputeDomain objects (YAML or JSON, one or more per file) in a directory, read on each lookup; the node
    labels in `node-labels.json` there ({node: domain UID}). Whoever runs the domain (the local cluster's
    controller, a test) writes the objects and their status.nodes[]."""

    LABELS_FILE = "node-labels.json"

    def __init__(self, directory: str):
        self.directory = directory
        self._lock = threading.Lock()

    def _objects(self) -> list[Any]:
        from gpudra.api.load import LoadError, load_text

        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise DomainError(f"ComputeDomain directory {self.directory}: {exc.strerror}") from None
        found: list[Any] = []
        for name in names:
            if name.startswith(".") or name == self.LABELS_FILE or not name.endswith((".yaml", ".yml", ".json")):
                continue
            path = os.path.join(self.directory, name)
            try:
                with open(path, "rb") as fh:
                    raw = fh.read(DOMAIN_FILE_MAX + 1)
                if len(raw) > DOMAIN_FILE_MAX:
                    raise DomainError(f"ComputeDomain file {path} is larger than {DOMAIN_FILE_MAX} bytes")
                found.extend(doc.obj for doc in load_text(raw.decode("utf-8", errors="replace"), path))
            except FileNotFoundError:
                continue
            except (OSError, LoadError) as exc:
                raise DomainError(f"ComputeDomain file {path}: {exc}") from None
        return found

    def domain(self, uid: str) -> DomainInfo | None:
        for obj in self._objects():
            if isinstance(obj, dict) and obj.get("kind") == "ComputeDomain":
                info = domain_from_object(obj)
                if info is not None and info.uid == uid:
                    return info
        return None

    def _labels(self) -> dict[str, str]:
        try:
            with open(os.path.join(self.directory, self.LABELS_FILE), encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise DomainError(f"node labels {self.LABELS_FILE}: {exc}") from None
        return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}

    def _save(self, labels: dict[str, str]) -> None:
        os.makedirs(self.directory, exist_ok=True)
        write_atomic(os.path.join(self.directory, self.LABELS_FILE), json.dumps(labels, sort_keys=True).encode(),
                     mode=0o644, label="node-labels", fsync=False)

    def node_domain(self, node: str) -> str | None:
        return self._labels().get(node)

    def join(self, node: str, uid: str) -> None:
        with self._lock:
            labels = self._labels()
            held = labels.get(node)
            if held not in (None, uid):
                raise DomainError(f"node {node} is labelled {NODE_LABEL}={held}: it serves another ComputeDomain")
            if held is None:
                labels[node] = uid
                self._save(labels)

    def leave(self, node: str, uid: str) -> None:
        with self._lock:
            labels = self._labels()
            if labels.get(node) == uid:
                del labels[node]
                self._save(labels)


class KubeDomainSource:
    """ComputeDomains and Node labels through the official client (CustomObjectsApi, CoreV1Api)."""

    def __init__(self, custom_api: Any, core_api: Any):
        self.custom = custom_api
        self.core = core_api

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, in_cluster: bool = False) -> "KubeDomainSource":
        from kubernetes import client, config

        if in_cluster:
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=kubeconfig)
        return cls(client.CustomObjectsApi(), client.CoreV1Api())

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise DomainError(f"{what}: {exc.status} {exc.reason}") from None
        except OSError as exc:  # urllib3's connection errors
            raise DomainError(f"{what}: {exc}") from None

    def domain(self, uid: str) -> DomainInfo | None:
        listed = self._call("listing ComputeDomains", self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
        for obj in (listed or {}).get("items") or []:
            info = domain_from_object(obj)
            if info is not None and info.uid == uid:
                return info
        return None

    def node_domain(self, node: str) -> str | None:
        obj = self._call(f"reading Node {node}", self.core.read_node, node)
        labels = getattr(getattr(obj, "metadata", None), "labels", None) or {}
        value = labels.get(NODE_LABEL)
        return value if isinstance(value, str) else None

    def join(self, node: str, uid: str) -> None:
        held = self.node_domain(node)
        if held not in (None, uid):
            raise DomainError(f"node {node} is labelled {NODE_LABEL}={held}: it serves another ComputeDomain")
        if held is None:
            self._call(f"labelling Node {node}", self.core.patch_node, node,
                       {"metadata": {"labels": {NODE_LABEL: uid}}})

    def leave(self, node: str, uid: str) -> None:
        if self.node_domain(node) == uid:
            self._call(f"unlabelling Node {node}", self.core.patch_node, node,
                       {"metadata": {"labels": {NODE_LABEL: None}}})
