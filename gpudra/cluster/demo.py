"""`gpudra demo`: the article's flow on a local cluster, shown as a timeline.

Brings a cluster up (real driver processes on simulated GPUs), applies the article's corrected DeviceClass, claims,
template, pods and Deployment, lets the control loop schedule, prepare and start them, deletes one pod to show
unprepare and deallocation (and the Deployment replacing it), then tears the cluster down unless kept.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from importlib import resources
from typing import Callable

from gpudra.api.load import Document, load_text
from gpudra.gpuplugin.slices import device_classes

from .apply import apply_document
from .controller import holding, reconcile
from .layout import DEFAULT_NODES, ClusterConfig, ClusterDir, ClusterSetupError, parse_nodes
from .nodes import down, up

ARTICLE_DIR = "data/article-fixed"
MIG_DIR = "data/local-cluster"
STEP_LABELS = {"claim": "claim", "pod": "pod", "scheduled": "schedule", "unschedulable": "pending",
               "prepared": "prepare", "container": "container", "unprepared": "unprepare",
               "deallocated": "dealloc", "deleted": "delete"}


def bundled_documents(folder: str = ARTICLE_DIR) -> list[Document]:
    root = resources.files("gpudra.demo").joinpath(folder)
    docs = []
    for entry in sorted((e for e in root.iterdir() if e.name.endswith(".yaml")), key=lambda e: e.name):
        docs.extend(load_text(entry.read_text(encoding="utf-8"), f"{folder.rsplit('/', 1)[-1]}/{entry.name}"))
    return docs


def mig_documents(driver_name: str) -> list[Document]:
    """The driver's MIG DeviceClass and a pod on one MIG slice."""
    classes = [c for c in device_classes(driver_name) if c["metadata"]["name"].startswith("mig.")]
    return [Document(c, "gpudra driver deviceclasses", i + 1) for i, c in enumerate(classes)] + bundled_documents(MIG_DIR)


class Timeline:
    def __init__(self, out: Callable[[str], None]):
        self.out = out
        self.start = time.monotonic()

    def __call__(self, label: str, text: str) -> None:
        self.out(f"{time.monotonic() - self.start:5.1f}s  {STEP_LABELS.get(label, label):<9} {text}")


def run_flow(directory: str | None, out: Callable[[str], None], keep: bool = False,
             kubernetes_version: str | None = None) -> str:
    """The whole demo; returns the state directory (removed again unless `keep`). `kubernetes_version`:
    the release the new cluster behaves as (default 1.36)."""
    timeline = Timeline(out)
    path = directory or tempfile.mkdtemp(prefix="gpudra-demo-")
    cluster = ClusterDir(path)
    if cluster.exists():  # the demo applies, deletes and (without --keep) tears down: never on a cluster in use
        raise ClusterSetupError(f"{cluster.path} already holds a local cluster; the demo needs a new directory "
                                f"(or `gpudra cluster down --dir {cluster.path}` first)")
    try:
        config = ClusterConfig(nodes=parse_nodes(DEFAULT_NODES))
        if kubernetes_version:
            config.kubernetes_version = kubernetes_version
        up(cluster, config, say=lambda text: timeline("node", text),
           control_plane=keep)
        devices = Counter(s["spec"]["nodeName"] for s in cluster.store.list("ResourceSlice")
                          for _ in s["spec"].get("devices") or [])
        for node, count in sorted(devices.items()):
            timeline("slices", f"node {node}: {count} devices published in ResourceSlices by its driver")
        with holding(cluster):  # a kept cluster's control plane must not take the steps from the timeline
            for doc in bundled_documents():
                timeline("apply", apply_document(cluster.store, doc))
            reconcile(cluster, timeline)
        with holding(cluster):
            for doc in mig_documents(cluster.load_config().driver_name):
                timeline("apply", apply_document(cluster.store, doc))
            reconcile(cluster, timeline)
        victim = next((p for p in cluster.store.list("Pod", "ai-serving")
                       if (p.get("spec") or {}).get("nodeName") and p["metadata"]["name"].startswith("inference-")),
                      None)
        if victim is not None:
            name = victim["metadata"]["name"]
            timeline("delete", f"pod ai-serving/{name} (its Deployment creates a replacement)")
            with holding(cluster):
                cluster.store.delete("Pod", "ai-serving", name)
                reconcile(cluster, timeline)
    finally:
        if not keep:
            down(cluster)
            timeline("down", "drivers stopped, state directory removed")
    return cluster.path
