"""`gpudra cluster view`: one self-contained HTML page of a local cluster (no scripts, no external files).

Nodes are boxes holding one box per GPU; a MIG-partitioned GPU holds its MIG devices, a dynamic-MIG GPU says how
much of it its allocated partitions use and shows only those (not each of the dozens it could be cut into). Each
device box says which claim holds it and which pods use that claim, or that it is free or tainted; pending pods are listed with the scheduler's reason; each started
container shows what the CDI edits gave it (device nodes, environment, mounts).
"""

from __future__ import annotations

import html
import http.server
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from .layout import ClusterDir

if TYPE_CHECKING:
    from .kubelet import PodRecord  # the page imports the kubelet (and gRPC) only when it is drawn

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1d2430;background:#f6f7f9}
h1{font-size:1.4rem} h2{font-size:1.1rem;margin-top:1.6rem}
.nodes{display:flex;flex-wrap:wrap;gap:1rem}
.node{background:#fff;border:1px solid #c9ced6;border-radius:8px;padding:.7rem;min-width:16rem}
.node h3{margin:.1rem 0 .5rem;font-size:1rem}
.gpus{display:flex;flex-wrap:wrap;gap:.4rem}
.gpu{border:1px solid #9aa4b2;border-radius:6px;padding:.35rem;font-size:.75rem;width:8.5rem;background:#eef1f5}
.gpu.partitioned{width:100%;background:#f3eefa}
.device{border:1px dashed #9aa4b2;border-radius:4px;padding:.25rem;margin:.15rem 0;font-size:.72rem;background:#fff}
.held{background:#dff3e4;border-style:solid;border-color:#3c9a5f}
.tainted{background:#fbe3e1;border-style:solid;border-color:#c0392b} .taint{color:#a93226;font-weight:600}
.gpu.dynamic{width:17rem;background:#f3eefa} .usage{font-weight:600;margin:.2rem 0}
.name{font-weight:600} .muted{color:#687385}
table{border-collapse:collapse;background:#fff;font-size:.85rem} td,th{border:1px solid #c9ced6;padding:.3rem .5rem;text-align:left;vertical-align:top}
code{font-size:.78rem}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


@dataclass(frozen=True)
class Holder:
    """Who holds an allocated device: the claim (namespace/name) and the pods it is reserved for."""
    claim: str
    pods: tuple[str, ...]


Holders = dict[tuple[str, str], Holder]  # by (pool, device)


@dataclass(frozen=True)
class _PageData:
    holders: Holders
    records: list[PodRecord]  # the kubelet stand-in's records of started pods
    nodes: list[dict[str, Any]]
    slices: list[dict[str, Any]]
    pods: list[dict[str, Any]]


def _collect(cluster: ClusterDir, list_kind: Callable[[str], list[dict[str, Any]]] | None = None) -> _PageData:
    """What the page draws: the objects from the store, or from `list_kind` (a cluster on the real API server),
    and the kubelet stand-in's records of started pods."""
    from gpudra.scheduler.claimstatus import claim_allocation, reserved_for

    from .kubelet import Kubelet

    listed = list_kind or cluster.store.list
    holders: Holders = {}
    for claim in listed("ResourceClaim"):
        for result in ((claim_allocation(claim) or {}).get("devices") or {}).get("results") or []:
            holders[(result.get("pool", ""), result.get("device", ""))] = Holder(
                claim=f"{claim['metadata']['namespace']}/{claim['metadata']['name']}",
                pods=tuple(e.get("name", "") for e in reserved_for(claim)))
    config = cluster.load_config()
    kubelet = Kubelet(cluster, config.driver_name, lambda *_: None)
    records = [r for node in config.nodes for r in kubelet.records(node.name)]
    return _PageData(holders=holders, records=records, nodes=listed("Node"), slices=listed("ResourceSlice"),
                     pods=listed("Pod"))


def _taints(device: dict[str, Any]) -> list[str]:
    return [f"{t.get('key')}{'=' + str(t['value']) if t.get('value') else ''}:{t.get('effect')}"
            for t in device.get("taints") or []]


def _device_box(device: dict[str, Any], pool: str, holders: Holders) -> str:
    """One device: who holds it, free, or tainted (a GPU the driver took out after a health event: the
    scheduler only hands it to claims that tolerate the taint, so it is not free)."""
    holder = holders.get((pool, device.get("name", "")))
    attributes = device.get("attributes") or {}
    label = (attributes.get("profile") or attributes.get("productName") or {}).get("string", "")
    memory = ((device.get("capacity") or {}).get("memory") or {}).get("value", "")
    taints = _taints(device)
    state = ""
    if holder:
        state += f'<div>claim <b>{_e(holder.claim)}</b></div><div>pod {_e(", ".join(holder.pods) or "—")}</div>'
    if taints:
        state += f'<div class="taint">tainted {_e(", ".join(taints))}</div>'
    if not state:
        state = '<div class="muted">free</div>'
    classes = "device" + (" held" if holder else "") + (" tainted" if taints else "")
    return (f'<div class="{classes}" data-device="{_e(pool)}/{_e(device.get("name"))}">'
            f'<div class="name">{_e(device.get("name"))}</div><div class="muted">{_e(label)} {_e(memory)}</div>'
            f"{state}</div>")


def _counter_value(counter: Any) -> float:
    from gpudra.api.quantity import parse_quantity

    try:
        return parse_quantity(str((counter or {}).get("value", "0"))).as_float()
    except (ValueError, TypeError):
        return 0.0


def _partition_usage(devices: list[dict[str, Any]], counter_sets: dict[str, dict[str, Any]], pool: str,
                     holders: Holders) -> str:
    """A dynamic-MIG GPU's capacity and what its allocated partitions use of it: memory slices and
    multiprocessors out of the GPU's counter set (every partition it could still be cut into is not a box)."""
    names = {c.get("counterSet") for d in devices for c in d.get("consumesCounters") or []}
    capacity: dict[str, float] = {}
    for name in names:
        for counter, value in ((counter_sets.get(name) or {}).get("counters") or {}).items():
            capacity[counter] = capacity.get(counter, 0.0) + _counter_value(value)
    used: dict[str, float] = {}
    for device in devices:
        if (pool, device.get("name", "")) in holders:
            for consumed in device.get("consumesCounters") or []:
                for counter, value in (consumed.get("counters") or {}).items():
                    used[counter] = used.get(counter, 0.0) + _counter_value(value)

    def total(values: dict[str, float], prefix: str) -> int:
        return int(sum(v for k, v in values.items() if k.startswith(prefix)))

    parts = []
    if any(k.startswith("memory-slice-") for k in capacity):
        parts.append(f"memory slices {total(used, 'memory-slice-')}/{total(capacity, 'memory-slice-')} used")
    if "multiprocessors" in capacity:
        parts.append(f"SMs {int(used.get('multiprocessors', 0))}/{int(capacity['multiprocessors'])} used")
    if not parts:  # counters of another driver: name them all
        parts = [f"{k} {used.get(k, 0):g}/{v:g}" for k, v in sorted(capacity.items())]
    profiles: dict[str, int] = {}
    for device in devices:
        profile = ((device.get("attributes") or {}).get("profile") or {}).get("string") or device.get("name", "")
        profiles[profile] = profiles.get(profile, 0) + 1
    possible = ", ".join(f"{p} ×{n}" for p, n in profiles.items())
    return (f'<div class="usage">{_e("; ".join(parts))}</div>'
            f'<div class="muted">{len(devices)} partitions it can be cut into: {_e(possible)}</div>')


def _gpu_box(devices: list[dict[str, Any]], pool: str, holders: Holders, counter_sets: dict[str, dict[str, Any]]) -> str:
    first = devices[0]
    title = (first.get("attributes") or {}).get("productName", {}).get("string", "")
    if any(d.get("consumesCounters") for d in devices):  # dynamic MIG: capacity and the partitions in use
        shown = [d for d in devices if (pool, d.get("name", "")) in holders or d.get("taints")]
        inner = "".join(_device_box(d, pool, holders) for d in shown)
        return (f'<div class="gpu dynamic"><div class=name>{_e(title)} (dynamic MIG)</div>'
                f"{_partition_usage(devices, counter_sets, pool, holders)}{inner}</div>")
    partitioned = any((d.get("attributes") or {}).get("type", {}).get("string") == "mig" for d in devices)
    inner = "".join(_device_box(d, pool, holders) for d in devices)
    return (f'<div class="gpu{" partitioned" if partitioned else ""}">'
            f'{f"<div class=name>{_e(title)} (MIG)</div>" if partitioned else ""}{inner}</div>')


def _node_box(node: dict[str, Any], slices: list[dict[str, Any]], holders: Holders) -> str:
    name = node["metadata"]["name"]
    pool = [s for s in slices if (s.get("spec") or {}).get("nodeName") == name]
    counter_sets = {c.get("name"): c for item in pool for c in item["spec"].get("sharedCounters") or []}
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for item in pool:
        for device in item["spec"].get("devices") or []:
            attributes = device.get("attributes") or {}
            parent = (attributes.get("parentUUID") or attributes.get("uuid") or {}).get("string", device["name"])
            by_gpu.setdefault(parent, []).append(device)
    gpus = [_gpu_box(devices, name, holders, counter_sets) for devices in by_gpu.values()]
    profile = (node["metadata"].get("labels") or {}).get("gpudra.local/profile", "")
    return (f'<section class="node" data-node="{_e(name)}"><h3>{_e(name)} <span class="muted">{_e(profile)}</span></h3>'
            f'<div class="gpus">{"".join(gpus) or "<span class=muted>no devices published</span>"}</div></section>')


def render_page(cluster: ClusterDir, list_kind: Callable[[str], list[dict[str, Any]]] | None = None) -> str:
    data = _collect(cluster, list_kind)
    nodes = "".join(_node_box(n, data.slices, data.holders) for n in data.nodes)
    pending = []
    for pod in data.pods:
        if (pod.get("spec") or {}).get("nodeName"):
            continue
        reason = next((c.get("message", "") for c in (pod.get("status") or {}).get("conditions") or []
                       if c.get("type") == "PodScheduled"), "")
        pending.append(f'<tr class="pending"><td>{_e(pod["metadata"]["namespace"])}/{_e(pod["metadata"]["name"])}</td>'
                       f"<td>{_e(reason) or 'waiting for the scheduler'}</td></tr>")
    containers = []
    for record in data.records:
        for view in record["containers"]:
            containers.append(
                f'<tr class="container"><td>{_e(record["pod"])}<br><span class="muted">{_e(view["name"])} on '
                f'{_e(record["node"])}</span></td><td><code>{"<br>".join(_e(i) for i in view["cdiDevices"]) or "—"}</code></td>'
                f'<td><code>{"<br>".join(_e(d) for d in view["deviceNodes"]) or "—"}</code></td>'
                f'<td><code>{"<br>".join(_e(e) for e in view["env"]) or "—"}</code></td>'
                f'<td><code>{"<br>".join(_e(m) for m in view["mounts"]) or "—"}</code></td></tr>')
    summary = {"nodes": len(data.nodes), "pods": len(data.pods), "pending": len(pending),
               "allocatedDevices": len(data.holders)}
    summary_json = json.dumps(summary).replace("</", "<\\/")  # JSON inside <script> is not entity-decoded
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>gpudra local cluster</title>"
        f"<style>{STYLE}</style></head><body>"
        f'<h1>gpudra local cluster <span class="muted">{_e(cluster.path)}</span></h1>'
        f'<script type="application/json" id="summary">{summary_json}</script>'
        f'<h2>Nodes and devices</h2><div class="nodes">{nodes}</div>'
        f'<h2>Pending pods</h2><table id="pending"><tr><th>pod</th><th>reason</th></tr>'
        f'{"".join(pending) or "<tr><td colspan=2 class=muted>none</td></tr>"}</table>'
        f'<h2>Containers and their CDI edits</h2><table id="containers"><tr><th>pod / container</th><th>CDI devices</th>'
        f'<th>device nodes</th><th>environment</th><th>mounts</th></tr>'
        f'{"".join(containers) or "<tr><td colspan=5 class=muted>none</td></tr>"}</table>'
        "</body></html>\n")


def make_server(cluster: ClusterDir, port: int, list_kind: Callable[[str], list[dict[str, Any]]] | None = None) -> http.server.ThreadingHTTPServer:
    """An HTTP server on localhost (port 0: any free port) answering every GET with the page, rendered afresh
    (reload the page to follow the cluster)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = render_page(cluster, list_kind).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)


def serve_page(cluster: ClusterDir, port: int, on_ready: Callable[[str], None],
               list_kind: Callable[[str], list[dict[str, Any]]] | None = None) -> None:
    with make_server(cluster, port, list_kind=list_kind) as server:
        on_ready(f"http://127.0.0.1:{server.server_address[1]}/")
        server.serve_forever()
