"""`kubectl apply`'s create-or-update on the local store, for `gpudra apply` and the demo."""

from __future__ import annotations

from typing import Any

from gpudra.api.load import Document

from .store import Store, kind_info, stored_form


def _same_content(current: dict[str, Any], new: dict[str, Any]) -> bool:
    fields = [f for f in set(current) | set(new) if f not in ("metadata", "status", "apiVersion")]

    def labels(obj: dict[str, Any]) -> dict[str, Any]:
        return (obj.get("metadata") or {}).get("labels") or {}

    return all(current.get(f) == new.get(f) for f in fields) and labels(current) == labels(new)


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
    if current is None:
        created = store.create(obj)
        return f"{label}/{created['metadata']['name']} created"
    if _same_content(current, obj):
        return f"{label}/{meta['name']} unchanged"
    merged = {**current, **{k: v for k, v in obj.items() if k not in ("metadata", "status")}}
    merged["metadata"] = {**current["metadata"], **{k: v for k, v in meta.items() if k in ("labels", "annotations")}}
    store.replace(merged)
    return f"{label}/{meta['name']} configured"
