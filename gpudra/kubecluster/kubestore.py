"""The local store's calls answered by the real API server, for the parts of gpudra written against the store.

The ComputeDomain controller (gpudra.cluster.computedomains) and the compute-domain plugin's domain source
(gpudra.cluster.nodeagent.StoreDomainSource) read and write objects through `get`, `list`, `create`, `replace`,
`delete` and `events_for`. This class gives them those calls on a real API server, so the same code runs there:
errors are the store's StoreError with the server's status code, and `replace` of an object with a status writes
the status subresource too (the API server ignores status in a PUT of a CRD with a status subresource, as
ComputeDomain's is, and of the built-in kinds).
"""

from __future__ import annotations

import builtins
from typing import Any

from gpudra.cluster.store import StoreError

from .rest import ApiError, Rest

# kind -> (group/version, resource, namespaced): the kinds those callers touch
KINDS: dict[str, tuple[str, str, bool]] = {
    "Node": ("v1", "nodes", False), "Pod": ("v1", "pods", True), "Event": ("v1", "events", True),
    "Namespace": ("v1", "namespaces", False), "DaemonSet": ("apps/v1", "daemonsets", True),
    "ResourceClaim": ("resource.k8s.io/v1", "resourceclaims", True),
    "ResourceClaimTemplate": ("resource.k8s.io/v1", "resourceclaimtemplates", True),
    "ResourceSlice": ("resource.k8s.io/v1", "resourceslices", False),
    "DeviceClass": ("resource.k8s.io/v1", "deviceclasses", False),
    "ComputeDomain": ("resource.nvidia.com/v1beta1", "computedomains", True),
    "ComputeDomainClique": ("resource.nvidia.com/v1beta1", "computedomaincliques", True),  # the daemons' (#34)
}


class KubeStore:
    def __init__(self, rest: Rest):
        self.rest = rest

    def _path(self, kind: str, namespace: str | None, name: str | None = None, sub: str = "") -> str:
        try:
            group_version, resource, namespaced = KINDS[kind]
        except KeyError:
            raise StoreError(f'no matches for kind "{kind}"', 404) from None
        base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        path = f"{base}/namespaces/{namespace or 'default'}/{resource}" if namespaced and namespace is not None \
            else f"{base}/{resource}"
        return path + (f"/{name}" if name is not None else "") + (f"/{sub}" if sub else "")

    def _call(self, method: str, path: str, body: Any = None, **query: Any) -> Any:
        try:
            return self.rest.call(method, path, body, query=query or None)
        except ApiError as exc:
            status = exc.status_object()
            raise StoreError(str(status.get("message") or exc), exc.status) from None

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            obj = self._call("GET", self._path(kind, namespace if KINDS.get(kind, ("", "", False))[2] else None, name))
        except StoreError as exc:
            if exc.status == 404:
                return None
            raise
        return _with_kind(obj, kind)

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        listed = self._call("GET", self._path(kind, namespace))
        return [_with_kind(item, kind) for item in (listed or {}).get("items") or []]

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        kind, meta = obj.get("kind", ""), obj.get("metadata") or {}
        namespaced = KINDS.get(kind, ("", "", False))[2]
        return _with_kind(self._call("POST", self._path(kind, meta.get("namespace") if namespaced else None), obj), kind)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        kind, meta = obj.get("kind", ""), obj.get("metadata") or {}
        namespace = meta.get("namespace") if KINDS.get(kind, ("", "", False))[2] else None
        written = self._call("PUT", self._path(kind, namespace, meta["name"]), obj)
        if "status" in obj and obj.get("status") != written.get("status") and kind not in ("Node", "Namespace"):
            written = self._call("PUT", self._path(kind, namespace, meta["name"], "status"),
                                 dict(written, status=obj["status"]))
        return _with_kind(written, kind)

    def delete(self, kind: str, namespace: str | None, name: str, *, graceful: bool = True) -> str:
        namespaced = KINDS.get(kind, ("", "", False))[2]
        body = None if graceful else {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        self._call("DELETE", self._path(kind, namespace if namespaced else None, name), body,
                   propagationPolicy="Background")
        return name

    def events_for(self, obj: dict[str, Any]) -> builtins.list[dict[str, Any]]:  # `list` is a method here
        meta = obj.get("metadata") or {}
        listed = self._call("GET", self._path("Event", meta.get("namespace") or "default"),
                            fieldSelector=f"involvedObject.uid={meta.get('uid')}")
        return list((listed or {}).get("items") or [])


def _with_kind(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    obj.setdefault("kind", kind)  # a list's items carry no kind
    obj.setdefault("apiVersion", KINDS[kind][0] if kind in KINDS else "v1")
    return obj
