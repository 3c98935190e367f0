"""`kubectl apply`'s create-or-update on the local store, for `gpudra apply` and the demo.

As kubectl's client-side apply, the store keeps the configuration last applied (a private annotation) and merges
three ways: fields the manifest sets are set, fields it dropped since the last apply are removed, and fields
written by others (a pod's `spec.nodeName` from binding, a claim's status) are kept. A manifest that changes
nothing is `unchanged` and writes nothing. What the API server keeps immutable is refused, not rewritten: a
pod's spec except its containers' images (the scheduler's binding stays), a ResourceClaim's and a
ResourceClaimTemplate's spec, a ComputeDomain's spec (its CRD's rule).
"""

from __future__ import annotations

import json
from typing import Any

from gpudra.api.load import Document
from gpudra.api.schema import computedomain

from .kinds import kind_info
from .store import LAST_APPLIED, PRIVATE_ANNOTATIONS, Store, StoreError, stored_form

_NOT_CONFIGURATION = ("apiVersion", "kind", "metadata", "status")
# k8s.io/kubernetes pkg/apis/core/validation ValidatePodSpecUpdate's message, as kubectl prints it
_POD_SPEC_FORBIDDEN = ("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                       "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only "
                       "additions to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be "
                       "set to 1 if it was previously negative)")
_IMMUTABLE_SPEC = ("ResourceClaim", "ResourceClaimTemplate")


def configuration(obj: dict[str, Any]) -> dict[str, Any]:
    """What `apply` manages of an object: everything but status and the system's metadata; labels and
    annotations (without the store's private ones) of the metadata."""
    out = {k: v for k, v in obj.items() if k not in _NOT_CONFIGURATION}
    meta = obj.get("metadata") or {}
    kept: dict[str, Any] = {}
    if meta.get("labels"):
        kept["labels"] = meta["labels"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in PRIVATE_ANNOTATIONS}
    if annotations:
        kept["annotations"] = annotations
    if kept:
        out["metadata"] = kept
    return out


def merge(current: dict[str, Any], last: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Three-way merge of mappings (lists and scalars are replaced): `new` over `current`, removing what `last`
    had and `new` no longer has."""
    out = dict(current)
    for key in last:
        if key not in new:
            out.pop(key, None)
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            before = last.get(key)
            out[key] = merge(out[key], before if isinstance(before, dict) else {}, value)
        else:
            out[key] = value
    return out


def _last_applied(current: dict[str, Any]) -> dict[str, Any]:
    text = ((current.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    try:
        last = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    return last if isinstance(last, dict) else {}


def _without_images(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    out = dict(spec)
    for field in ("containers", "initContainers"):
        if isinstance(out.get(field), list):
            out[field] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                          for c in out[field]]
    return out


def _check_immutable(kind: str, name: str, current: dict[str, Any], merged: dict[str, Any]) -> None:
    old, new = current.get("spec"), merged.get("spec")
    if old == new:
        return
    if kind == "Pod" and _without_images(old) != _without_images(new):
        raise StoreError(f'Pod "{name}" is invalid: {_POD_SPEC_FORBIDDEN}', 422)
    if kind in _IMMUTABLE_SPEC:
        raise StoreError(f'{kind} "{name}" is invalid: spec: Invalid value: field is immutable', 422)
    if kind == computedomain.KIND:
        problem = computedomain.spec_update_problem(current, merged)
        if problem:
            raise StoreError(f'{kind} "{name}" is invalid: {problem}', 422)


def apply_document(store: Store, doc: Document, namespace: str | None = None) -> str:
    """Create or update one object; returns kubectl's line (`pod/x created|configured|unchanged`).
    Raises StoreError."""
    obj = stored_form(doc.obj)  # defaulted as the store keeps it, so an unchanged manifest compares equal
    info = kind_info(doc.kind)
    meta = obj.setdefault("metadata", {})
    if info.namespaced:
        meta["namespace"] = meta.get("namespace") or namespace or "default"
    label = info.resource
    current = store.get(info.kind, meta.get("namespace"), meta["name"]) if meta.get("name") else None
    store.drop_disabled_fields(obj, current)  # as the store keeps it, so an unchanged manifest compares equal
    applied = configuration(obj)
    if current is None:
        if meta.get("annotations") is None:  # `annotations:` with nothing under it: an empty map
            meta["annotations"] = {}
        if isinstance(meta["annotations"], dict):  # anything else: the store refuses it as invalid
            meta["annotations"][LAST_APPLIED] = json.dumps(applied, sort_keys=True)
        created = store.create(obj)
        return f"{label}/{created['metadata']['name']} created"
    merged_configuration = merge(configuration(current), _last_applied(current), applied)
    if merged_configuration == configuration(current):
        return f"{label}/{meta['name']} unchanged"
    merged = {**{k: v for k, v in current.items() if k in _NOT_CONFIGURATION},
              **{k: v for k, v in merged_configuration.items() if k != "metadata"}}
    _check_immutable(info.kind, meta["name"], current, merged)
    merged_meta = dict(current["metadata"])
    for field in ("labels", "annotations"):
        merged_meta[field] = (merged_configuration.get("metadata") or {}).get(field) or {}
    private = {k: v for k, v in (current["metadata"].get("annotations") or {}).items() if k in PRIVATE_ANNOTATIONS}
    merged_meta["annotations"].update(private)
    merged_meta["annotations"][LAST_APPLIED] = json.dumps(applied, sort_keys=True)
    if not merged_meta["labels"]:
        merged_meta.pop("labels")
    merged["metadata"] = merged_meta
    store.replace(merged)
    return f"{label}/{meta['name']} configured"
