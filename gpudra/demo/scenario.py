"""The `gpudra demo` scenario: a bundled GPU cluster, the article's claims (corrected), and why
the article's original manifests are rejected.

Pure apart from reading the bundled data: `run_demo()` returns a `DemoReport`, and
`render_demo()` turns it into text.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from gpudra.demo.table import render_table
from gpudra.api.objectmeta import key_of
from gpudra.vocabulary import NVLINK_CLIQUE_ATTRIBUTE, NVLINK_DOMAIN_ATTRIBUTE

DATA_PACKAGE = "gpudra.demo"
CLUSTER_DIR = "data/cluster"
FIXED_DIR = "data/article-fixed"
ORIGINAL_DIR = "data/article-original"

# Attributes worth showing for a chosen device, in this order (NVIDIA DRA driver names and the
# standard resource.kubernetes.io ones); the first few present are shown.
KEY_ATTRIBUTES = ("productName", "profile", NVLINK_DOMAIN_ATTRIBUTE, NVLINK_CLIQUE_ATTRIBUTE, "parentIndex", "index")
MAX_KEY_ATTRIBUTES = 3
WRAP_WIDTH = 110


@dataclass
class ClaimRow:
    claim: str
    node: str
    devices: list[str]
    details: list[str]
    outcome: str
    source: str = ""  # "from template <name>" when instantiated from a ResourceClaimTemplate
    claim_object: dict[str, Any] = field(default_factory=dict)
    allocation: dict[str, Any] | None = None  # status.allocation as the allocator produced it


@dataclass
class Rejection:
    what: str  # "Kind namespace/name"
    problems: list[str]


@dataclass
class NodeSummary:
    name: str
    devices: str


@dataclass
class DemoReport:
    features: str
    claims_title: str = "The article's claims, corrected, placed one after another on the first node that fits"
    nodes: list[NodeSummary] = field(default_factory=list)
    rows: list[ClaimRow] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- bundled data -----------------------------------------------------------------------------------


def _data_files(relative: str) -> list[tuple[str, str]]:
    """(name, text) of the bundled YAML files under `relative` (a file or a folder), sorted by name."""
    root = resources.files(DATA_PACKAGE).joinpath(relative)
    if root.is_file():
        return [(relative, root.read_text(encoding="utf-8"))]
    entries = sorted((entry for entry in root.iterdir() if entry.name.endswith((".yaml", ".yml"))), key=lambda e: e.name)
    return [(f"{relative}/{entry.name}", entry.read_text(encoding="utf-8")) for entry in entries]


def _load(relative_or_paths: str | list[str]) -> list[Any]:
    from gpudra.api.load import load_paths, load_text

    if isinstance(relative_or_paths, list):
        return load_paths(relative_or_paths)
    documents = []
    for name, text in _data_files(relative_or_paths):
        documents.extend(load_text(text, source=name))
    return documents


# --- claims -----------------------------------------------------------------------------------------


def claim_from_template(template: dict[str, Any]) -> dict[str, Any]:
    """What the resourceclaim controller would create for one pod (name simplified)."""
    meta = template.get("metadata") or {}
    spec = ((template.get("spec") or {}).get("spec")) or {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{meta.get('name', 'template')}-claim",
            "namespace": meta.get("namespace") or "default",
            "annotations": {"gpudra.dev/from-template": meta.get("name", "")},
        },
        "spec": spec,
    }


# --- devices ----------------------------------------------------------------------------------------


def index_devices(slices: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    index: dict[tuple[str, str, str], dict[str, Any]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name", "")
        for device in spec.get("devices") or []:
            index[(spec.get("driver", ""), pool, device.get("name", ""))] = device
    return index


def _attribute_value(value: dict[str, Any]) -> str:
    for kind in ("string", "int", "bool", "version"):
        if kind in value:
            return str(value[kind])
    return "?"


def device_details(device: dict[str, Any] | None) -> str:
    if device is None:
        return ""
    attributes = device.get("attributes") or {}
    by_id = {name.rsplit("/", 1)[-1]: value for name, value in attributes.items()}
    shown = [
        _attribute_value(by_id[name]) if name in ("productName", "profile") else f"{name}={_attribute_value(by_id[name])}"
        for name in KEY_ATTRIBUTES
        if name in by_id
    ][:MAX_KEY_ATTRIBUTES]
    memory = ((device.get("capacity") or {}).get("memory") or {}).get("value")
    if memory is not None:
        shown.append(f"memory {memory}")
    return ", ".join(shown)


def summarise_nodes(nodes: list[dict[str, Any]], slices: list[dict[str, Any]]) -> list[NodeSummary]:
    """One line per node: full GPUs by product (with their NVLink meshes), then MIG partitions by profile."""
    names = [(n.get("metadata") or {}).get("name", "") for n in nodes]
    gpus: dict[str, dict[str, dict[str, int]]] = {}  # node -> product -> mesh -> count
    partitions: dict[str, dict[str, int]] = {}  # node -> "product profile" -> count
    for item in slices:
        spec = item.get("spec") or {}
        node = spec.get("nodeName")
        if not node:
            continue
        if node not in names:
            names.append(node)
        for device in spec.get("devices") or []:
            attributes = {k.rsplit("/", 1)[-1]: _attribute_value(v) for k, v in (device.get("attributes") or {}).items()}
            product = attributes.get("productName", spec.get("driver", "?"))
            if "profile" in attributes:
                label = f"{attributes['profile']}"
                partitions.setdefault(node, {})
                partitions[node][label] = partitions[node].get(label, 0) + 1
                continue
            meshes = gpus.setdefault(node, {}).setdefault(product, {})
            mesh = attributes.get("nvlinkDomain", "")
            meshes[mesh] = meshes.get(mesh, 0) + 1
    summaries = []
    for name in names:
        parts = []
        for product, meshes in gpus.get(name, {}).items():
            text = f"{sum(meshes.values())} × {product}"
            named = {mesh: count for mesh, count in meshes.items() if mesh}
            if named:
                text += " (NVLink " + ", ".join(f"{mesh}: {count}" for mesh, count in named.items()) + ")"
            parts.append(text)
        if name in partitions:
            parts.append("MIG " + ", ".join(f"{count} × {label}" for label, count in partitions[name].items()))
        summaries.append(NodeSummary(name, "\n".join(parts) or "no devices"))
    return summaries


# --- validation of the article's originals -----------------------------------------------------------


def _problems_of(document: Any) -> list[str] | None:
    """The errors the API server would report for one object; None for kinds gpudra does not check."""
    from gpudra.api.validate import validate_document

    texts = []
    checked = True
    for problem in validate_document(document) or ():
        if getattr(problem, "severity", "error") != "error":
            if "not a kind gpudra checks" in getattr(problem, "message", ""):
                checked = False
            continue
        path = getattr(problem, "path", "")
        message = getattr(problem, "message", str(problem))
        texts.append(f"{path}: {message}" if path else message)
    return texts if checked or texts else None


def reject_originals(documents: list[Any]) -> list[Rejection]:
    rejections = []
    for document in documents:
        obj = document.obj if isinstance(document.obj, dict) else {}
        problems = _problems_of(document)
        if problems is None:
            continue
        meta = obj.get("metadata") or {}
        namespace = f"{meta['namespace']}/" if meta.get("namespace") else ""
        what = f"{obj.get('kind', '?')} {namespace}{meta.get('name', '')}"
        rejections.append(Rejection(what, problems))
    return rejections


# --- the scenario -----------------------------------------------------------------------------------


def run_demo(
    features: str = "default",
    cluster: list[str] | None = None,
    claims: list[str] | None = None,
    originals: list[str] | None = None,
    kubernetes_version: str | None = None,
) -> DemoReport:
    """Allocate the corrected claims on the cluster (first fit, committing each claim, node by
    node, like kube-scheduler placing pods one after another) and validate the originals."""
    from gpudra.allocator import Features, build_report

    parsed = Features.parse(features, kubernetes_version)
    cluster_docs = _load(cluster if cluster is not None else CLUSTER_DIR)
    claim_docs = _load(claims if claims is not None else FIXED_DIR)
    # The corrected manifests re-declare the cluster's DeviceClass; one object per (kind, namespace,
    # name), the later one winning, as `kubectl apply` of both would leave it.
    by_identity: dict[tuple[str, str, str], dict[str, Any]] = {}
    for document in cluster_docs + claim_docs:
        obj = document.obj
        if isinstance(obj, dict):
            meta = obj.get("metadata") or {}
            by_identity[(str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = obj
    objects = list(by_identity.values())

    pending: list[dict[str, Any]] = []
    sources: dict[str, str] = {}
    inputs: list[dict[str, Any]] = []
    for obj in objects:
        kind = obj.get("kind")
        if kind == "ResourceClaimTemplate":
            claim = claim_from_template(obj)
            sources[key_of(claim)] = f"from template {(obj.get('metadata') or {}).get('name', '')}"
            inputs.append(claim)
            pending.append(claim)
        elif kind in ("DeviceClass", "ResourceSlice", "Node", "ResourceClaim"):
            inputs.append(obj)
            if kind == "ResourceClaim" and not ((obj.get("status") or {}).get("allocation")):
                pending.append(obj)

    report = build_report(inputs, "sequential", None, None, parsed)
    slices = [o for o in inputs if o.get("kind") == "ResourceSlice"]
    nodes = [o for o in inputs if o.get("kind") == "Node"]
    devices = index_devices(slices)

    placed_on: dict[str, str] = {}
    last_error: dict[str, str] = {}
    for result in report.get("results") or []:
        for key in result.get("claims") or []:
            if result.get("outcome") == "allocated":
                placed_on.setdefault(key, result.get("node", ""))
            elif result.get("outcome") == "error":
                last_error[key] = result.get("error") or "error"

    from gpudra.versions import parse_version

    release = parse_version(kubernetes_version)
    demo = DemoReport(features=f"Kubernetes {release} defaults" if features.strip() == "default"
                      else f"{parsed} (Kubernetes {release})")
    demo.nodes = summarise_nodes(nodes, slices)
    if claims is not None:
        demo.claims_title = "Claims, placed one after another on the first node that fits"
    final = report.get("finalAllocations") or {}
    for claim in pending:
        key = key_of(claim)
        allocation = final.get(key)
        row = ClaimRow(
            claim=key,
            node="",
            devices=[],
            details=[],
            outcome="",
            source=sources.get(key, ""),
            claim_object=claim,
        )
        if allocation:
            row.outcome = "allocated"
            row.allocation = allocation
            row.node = placed_on.get(key, "")
            for result in ((allocation.get("devices") or {}).get("results")) or []:
                device_key = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
                label = result.get("device", "")
                if result.get("pool") and result.get("pool") != row.node:
                    label = f"{result['pool']}/{label}"
                row.devices.append(f"{label} ({result.get('request', '')})")
                row.details.append(device_details(devices.get(device_key)))
        elif key in last_error:
            row.outcome = f"error: {last_error[key]}"
        else:
            row.outcome = "fits no node"
        demo.rows.append(row)

    demo.rejections = reject_originals(_load(originals if originals is not None else ORIGINAL_DIR))
    return demo


def short_request(claim: dict[str, Any]) -> dict[str, str]:
    """request name -> "2 × class" (or "all class", "first of …"), plus selector counts."""
    devices = ((claim.get("spec") or {}).get("devices")) or {}
    out = {}

    def exact(body: dict[str, Any]) -> str:
        cls = body.get("deviceClassName", "?")
        text = f"all {cls}" if body.get("allocationMode") == "All" else f"{body.get('count', 1)} × {cls}"
        selectors = len(body.get("selectors") or [])
        if selectors:
            text += f", {selectors} selector" + ("s" if selectors > 1 else "")
        return text

    for request in devices.get("requests") or []:
        name = request.get("name", "?")
        if request.get("firstAvailable"):
            for sub in request["firstAvailable"]:
                out[f"{name}/{sub.get('name', '?')}"] = exact(sub)
        else:
            out[name] = exact(request.get("exactly") or {})
    return out


def constraint_lines(claim: dict[str, Any]) -> list[str]:
    devices = ((claim.get("spec") or {}).get("devices")) or {}
    lines = []
    for constraint in devices.get("constraints") or []:
        for field_name, word in (("matchAttribute", "same"), ("distinctAttribute", "distinct")):
            if constraint.get(field_name):
                lines.append(f"{word} {constraint[field_name].rsplit('/', 1)[-1]}")
    return lines


def render_demo(demo: DemoReport) -> str:
    out = [f"gpudra demo: kube-scheduler's DRA allocator, offline (features: {demo.features})", ""]
    out.append("Cluster")
    out.append(render_table(["NODE", "DEVICES"], [[n.name, n.devices] for n in demo.nodes], [20, 100]))
    out.append(demo.claims_title)
    rows = []
    for row in demo.rows:
        claim_cell = row.claim + (f"\n({row.source})" if row.source else "")
        requests = short_request(row.claim_object)
        if row.outcome != "allocated":
            request_cell = "\n".join(f"{name}: {text}" for name, text in requests.items())
            rows.append([claim_cell, request_cell, "-", row.outcome, ""])
            continue
        results = ((row.allocation or {}).get("devices") or {}).get("results") or []
        request_lines, device_lines = [], []
        previous = None
        for result, device in zip(results, row.devices):
            name = result.get("request", "")
            request_lines.append(f"{name}: {requests.get(name, '')}" if name != previous else "")
            previous = name
            device_lines.append(device.split(" (")[0])
        extra = constraint_lines(row.claim_object)
        request_lines.extend(extra)
        claim_lines = claim_cell.splitlines()
        height = max(len(request_lines), len(claim_lines))
        pad = lambda lines, height=height: lines + [""] * (height - len(lines))  # noqa: E731
        rows.append(
            [
                "\n".join(pad(claim_lines)),
                "\n".join(pad(request_lines)),
                row.node,
                "\n".join(pad(device_lines)),
                "\n".join(pad(list(row.details))),
            ]
        )
    out.append(render_table(["CLAIM", "REQUEST", "NODE", "DEVICE", "KEY ATTRIBUTES"], rows, [36, 50, 16, 24, 70]))
    allocated = sum(1 for r in demo.rows if r.outcome == "allocated")
    out.append(f"{allocated} of {len(demo.rows)} claims allocated.")
    out.append("")
    out.append("Why the article's original manifests are rejected (by the API server, before any scheduling)")
    for rejection in demo.rejections:
        if not rejection.problems:
            out.append(f"  {rejection.what}: valid as written")
            continue
        out.append(f"  {rejection.what}: rejected")
        for problem in rejection.problems:
            lines = textwrap.wrap(problem, width=WRAP_WIDTH, initial_indent="    - ", subsequent_indent="      ",
                                  break_on_hyphens=False)
            out.extend(lines)
    for note in demo.notes:
        out.append(note)
    return "\n".join(out).rstrip() + "\n"
