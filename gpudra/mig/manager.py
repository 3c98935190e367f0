"""The MIG manager: follow the node's `nvidia.com/mig.config` label and apply that mig-parted config.

What NVIDIA's GPU Operator MIG manager does (mig-parted `cmd/nvidia-mig-manager/main.go`,
`pkg/mig/reconfigure`), minus the parts a DRA driver makes unnecessary:
* watch the own Node; on a change of `nvidia.com/mig.config` (the value names a config in the file):
  if the GPUs already match (`assert`) set `nvidia.com/mig.config.state=success`; else set `pending`,
  apply, and set `success`, or `failed` on any error;
* NVIDIA pauses the device plugin and other GPU operands around the change; here prepared claims are the
  GPU's users, so a GPU that holds them is not touched (state `failed`, the claims logged) and the next
  resync retries; after a change the driver is told to republish its ResourceSlices.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterator, Protocol

from gpudra.discovery import DiscoveryError, GpuBackend
from gpudra.mig.apply import ApplyError, apply_config, is_applied

log = logging.getLogger(__name__)

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
PENDING, SUCCESS, FAILED = "pending", "success", "failed"


class NodeLabels(Protocol):
    def get(self, node_name: str) -> tuple[dict[str, str], str]:
        """The node's labels and resourceVersion."""

    def set_label(self, node_name: str, key: str, value: str) -> None: ...

    def watch(self, node_name: str, resource_version: str, timeout_s: int) -> Iterator[tuple[dict[str, str], str]]:
        """(labels, resourceVersion) for every change of the node until timeout_s passes."""


class KubeNodeLabels:
    """`NodeLabels` through the official client's CoreV1Api (read_node, patch_node, list_node + watch)."""

    def __init__(self, core_api: Any):
        self.core = core_api

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, in_cluster: bool = False) -> "KubeNodeLabels":
        from kubernetes import client, config  # noqa: PLC0415 - only when talking to a cluster

        if in_cluster:
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=kubeconfig)
        return cls(client.CoreV1Api())

    def get(self, node_name: str) -> tuple[dict[str, str], str]:
        node = self.core.read_node(node_name)
        return dict(node.metadata.labels or {}), node.metadata.resource_version or ""

    def set_label(self, node_name: str, key: str, value: str) -> None:
        self.core.patch_node(node_name, {"metadata": {"labels": {key: value}}})

    def watch(self, node_name: str, resource_version: str, timeout_s: int) -> Iterator[tuple[dict[str, str], str]]:
        from kubernetes import watch  # noqa: PLC0415

        stream = watch.Watch().stream(self.core.list_node, field_selector=f"metadata.name={node_name}",
                                      resource_version=resource_version, timeout_seconds=timeout_s)
        for event in stream:
            node = event["object"]
            if event["type"] in ("ADDED", "MODIFIED"):
                yield dict(node.metadata.labels or {}), node.metadata.resource_version or ""


class MigManager:
    def __init__(self, nodes: NodeLabels, node_name: str, backend: GpuBackend, load_config: Callable[[], Any],
                 read_checkpoint: Callable[[], Any], request_republish: Callable[[], None], *,
                 resync_s: int = 60):
        self.nodes = nodes
        self.node_name = node_name
        self.backend = backend
        self.load_config = load_config  # re-read each time: the ConfigMap behind the file may change
        self.read_checkpoint = read_checkpoint
        self.request_republish = request_republish
        self.resync_s = resync_s
        self.stopped = threading.Event()
        self.last_error: str | None = None

    def _set_state(self, labels: dict[str, str], state: str) -> None:
        if labels.get(STATE_LABEL) != state:
            self.nodes.set_label(self.node_name, STATE_LABEL, state)
            labels[STATE_LABEL] = state
        log.info("%s=%s", STATE_LABEL, state)

    def reconcile(self, labels: dict[str, str]) -> str | None:
        """Bring the GPUs to the labelled config; returns the state it set (None without the label)."""
        name = labels.get(CONFIG_LABEL)
        if not name:
            return None
        try:
            document = self.load_config()
            if is_applied(self.backend, document, name):
                self.last_error = None
                self._set_state(labels, SUCCESS)
                return SUCCESS
            self._set_state(labels, PENDING)
            result = apply_config(self.backend, document, name, self.read_checkpoint())
        except (ApplyError, DiscoveryError, OSError, ValueError) as exc:
            self.last_error = str(exc)
            log.error("applying MIG config %r: %s", name, exc)
            self._set_state(labels, FAILED)
            return FAILED
        for line in result.changed:
            log.info("applied %s: %s", name, line)
        self.request_republish()
        self.last_error = None
        self._set_state(labels, SUCCESS)
        return SUCCESS

    def run(self) -> None:
        """Reconcile now and on every change of the config label; a full resync every `resync_s` retries a
        config that failed (e.g. claims that have since been unprepared)."""
        while not self.stopped.is_set():
            labels, version = self.nodes.get(self.node_name)
            self.reconcile(labels)
            wanted = labels.get(CONFIG_LABEL)
            for labels, _version in self.nodes.watch(self.node_name, version, self.resync_s):
                if self.stopped.is_set():
                    return
                if labels.get(CONFIG_LABEL) != wanted:
                    wanted = labels.get(CONFIG_LABEL)
                    self.reconcile(labels)

    def stop(self) -> None:
        self.stopped.set()
