"""The local cluster's object store: plain Kubernetes objects, one JSON file each, in the state directory.

It plays the API server's part for what the control loop and the drivers need: uids, creationTimestamp,
resourceVersion (optimistic concurrency: a replace carrying a stale version is a 409 Conflict), generateName,
graceful deletion of pods (deletionTimestamp) and finalizers, and events. Every write is a write to a temporary
file and an atomic rename under one lock file, so the drivers (separate processes) and the `gpudra` commands can
share it safely.
"""

from __future__ import annotations

import builtins
import fcntl
import json
import os
import random
import secrets
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from gpudra.api.defaults import apply_defaults
from gpudra.api.gates import drop_disabled_fields
from gpudra.atomicfile import write_atomic
from gpudra.copying import copy_object
from gpudra.errors import GpudraError

SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet (no vowels)


@dataclass(frozen=True)
class KindInfo:
    kind: str
    plural: str
    api_version: str
    namespaced: bool
    short: tuple[str, ...] = ()

    @property
    def resource(self) -> str:
        """kubectl's `kind.group` (`resourceclaim.resource.k8s.io`; `pod` in the core group), as `apply` and
        `-o name` print it."""
        group = self.api_version.split("/")[0] if "/" in self.api_version else ""
        return f"{self.kind.lower()}.{group}" if group else self.kind.lower()


KINDS: tuple[KindInfo, ...] = (
    KindInfo("Pod", "pods", "v1", True, ("po",)),
    KindInfo("Node", "nodes", "v1", False, ("no",)),
    KindInfo("Event", "events", "v1", True, ("ev",)),
    KindInfo("Namespace", "namespaces", "v1", False, ("ns",)),
    KindInfo("DeviceClass", "deviceclasses", "resource.k8s.io/v1", False),
    KindInfo("ResourceClaim", "resourceclaims", "resource.k8s.io/v1", True),
    KindInfo("ResourceClaimTemplate", "resourceclaimtemplates", "resource.k8s.io/v1", True),
    KindInfo("ResourceSlice", "resourceslices", "resource.k8s.io/v1", False),
    KindInfo("DeviceTaintRule", "devicetaintrules", "resource.k8s.io/v1alpha3", False),
    KindInfo("Deployment", "deployments", "apps/v1", True, ("deploy",)),
    KindInfo("ReplicaSet", "replicasets", "apps/v1", True, ("rs",)),
    KindInfo("StatefulSet", "statefulsets", "apps/v1", True, ("sts",)),
    KindInfo("DaemonSet", "daemonsets", "apps/v1", True, ("ds",)),
    KindInfo("Job", "jobs", "batch/v1", True),
    KindInfo("PriorityClass", "priorityclasses", "scheduling.k8s.io/v1", False, ("pc",)),
    KindInfo("ConfigMap", "configmaps", "v1", True, ("cm",)),
)
_BY_KIND = {k.kind: k for k in KINDS}


class StoreError(GpudraError):
    """An API-server-like failure; `status` is the HTTP code the API server would answer."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status
        self.reason = message


def kind_info(kind: str) -> KindInfo:
    """The known kind, or a namespaced one with kubectl's lower-case plural (objects gpudra does not model)."""
    return _BY_KIND.get(kind) or KindInfo(kind, kind.lower() + "s", "v1", True)


def resolve_kind(word: str) -> KindInfo | None:
    """`pods`, `pod`, `po`, `Pod`, `resourceclaims.resource.k8s.io` → the kind, as kubectl resolves them."""
    text = word.split(".", 1)[0].lower()
    for info in KINDS:
        if text in (info.plural, info.kind.lower(), *info.short):
            return info
    return None


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stored_form(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server stores: resource.k8s.io objects converted to v1 and defaulted (a request's
    allocationMode/count, tolerations' operator, a taint's timeAdded), everything else as given. A copy."""
    if str(obj.get("apiVersion", "")).startswith("resource.k8s.io/"):
        return apply_defaults(obj, now=now_rfc3339())
    return json.loads(json.dumps(obj))  # the JSON form the store writes (a copy, and what JSON cannot hold fails)


def _safe(part: str) -> str:
    if not part or "/" in part or part.startswith("."):
        raise StoreError(f"invalid object name {part!r}", 422)
    return part


class Store:
    def __init__(self, directory: str, release: Callable[[], str | None] | None = None):
        """`release()`: the cluster's Kubernetes release, whose API server drops the fields of gates it leaves
        off (None: keep everything)."""
        self.root = os.path.join(directory, "store")
        self._lock_path = os.path.join(directory, "store.lock")
        self._release = release or (lambda: None)

    def drop_disabled_fields(self, obj: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
        """In place, what this release's API server drops (gated fields, unless `old` uses them); their paths."""
        release = self._release()
        if release and str(obj.get("apiVersion", "")).startswith("resource.k8s.io/"):
            return drop_disabled_fields(obj, release, old)
        return []

    # ----- files --------------------------------------------------------------------------------
    def _path(self, kind: str, namespace: str | None, name: str) -> str:
        info = kind_info(kind)
        folder = os.path.join(self.root, info.plural, (namespace or "default") if info.namespaced else "_")
        return os.path.join(folder, _safe(name) + ".json")

    @contextmanager
    def locked(self) -> Iterator[None]:
        os.makedirs(self.root, exist_ok=True)
        with open(self._lock_path, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _next_version(self) -> str:
        path = os.path.join(self.root, ".resourceVersion")
        try:
            with open(path, encoding="utf-8") as fh:
                current = int(fh.read().strip() or 0)
        except FileNotFoundError:
            current = 0
        self._write(path, str(current + 1))
        return str(current + 1)

    @staticmethod
    def _write(path: str, text: str) -> None:
        # atomic (readers in other processes see the old or the new object); no fsync: a scratch cluster
        write_atomic(path, text.encode(), mode=0o644, label="store", fsync=False, make_dirs=0o755)

    @staticmethod
    def _read(path: str) -> dict[str, Any] | None:
        try:
            with open(path, encoding="utf-8") as fh:
                return json.load(fh)
        except FileNotFoundError:
            return None

    # ----- reads --------------------------------------------------------------------------------
    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self._read(self._path(kind, namespace, name))
        except StoreError:
            return None

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of a kind (in one namespace, or all), by namespace and name as the API server lists them."""
        base = os.path.join(self.root, kind_info(kind).plural)
        try:
            folders = sorted(os.listdir(base)) if namespace is None or not kind_info(kind).namespaced else [namespace]
        except FileNotFoundError:
            return []
        out = []
        for folder in folders:
            try:
                names = sorted(os.listdir(os.path.join(base, folder)))
            except FileNotFoundError:
                continue
            for name in names:
                if name.endswith(".json"):
                    obj = self._read(os.path.join(base, folder, name))
                    if obj is not None:
                        out.append(obj)
        return out

    # ----- writes -------------------------------------------------------------------------------
    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = stored_form(obj)
        self.drop_disabled_fields(obj, None)
        meta = obj.setdefault("metadata", {})
        info = kind_info(obj.get("kind", ""))
        obj.setdefault("apiVersion", info.api_version)
        if info.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        with self.locked():
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise StoreError(f"{info.kind}: metadata.name or generateName is required", 422)
                while True:  # the API server's generateName: five random characters
                    meta["name"] = meta["generateName"] + "".join(random.choice(SUFFIX_ALPHABET) for _ in range(5))
                    if not os.path.exists(self._path(info.kind, meta.get("namespace"), meta["name"])):
                        break
            path = self._path(info.kind, meta.get("namespace"), meta["name"])
            if os.path.exists(path):
                raise StoreError(f'{info.plural} "{meta["name"]}" already exists', 409)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            meta["resourceVersion"] = self._next_version()
            meta.setdefault("annotations", {})
            meta["annotations"][_SERIAL] = meta["resourceVersion"]
            self._write(path, json.dumps(obj, indent=1))
        return obj

    def replace(self, obj: dict[str, Any], *, check_version: bool = True) -> dict[str, Any]:
        obj = stored_form(obj)
        meta = obj.setdefault("metadata", {})
        kind = obj.get("kind", "")
        with self.locked():
            path = self._path(kind, meta.get("namespace"), meta.get("name", ""))
            current = self._read(path)
            if current is None:
                raise StoreError(f'{kind_info(kind).plural} "{meta.get("name")}" not found', 404)
            self.drop_disabled_fields(obj, current)
            cmeta = current.get("metadata", {})
            if check_version and meta.get("resourceVersion") and meta["resourceVersion"] != cmeta.get("resourceVersion"):
                raise StoreError(f'Operation cannot be fulfilled on {kind_info(kind).plural} "{meta.get("name")}": '
                                 "the object has been modified; please apply your changes to the latest version", 409)
            for field in ("uid", "creationTimestamp"):
                meta[field] = cmeta.get(field)
            annotations = meta.setdefault("annotations", {})
            annotations[_SERIAL] = (cmeta.get("annotations") or {}).get(_SERIAL, "0")
            if cmeta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = cmeta["deletionTimestamp"]
            if cmeta.get("deletionTimestamp") and not meta.get("finalizers"):
                os.unlink(path)  # the last finalizer is gone: the object goes away
                return obj
            meta["resourceVersion"] = self._next_version()
            self._write(path, json.dumps(obj, indent=1))
        return obj

    def delete(self, kind: str, namespace: str | None, name: str, *, graceful: bool = True) -> str:
        """'deleted', or 'terminating' for an object the control loop must finish (pods with a node,
        objects with finalizers). Raises 404."""
        with self.locked():
            path = self._path(kind, namespace, name)
            current = self._read(path)
            if current is None:
                raise StoreError(f'{kind_info(kind).plural} "{name}" not found', 404)
            meta = current.setdefault("metadata", {})
            bound_pod = kind == "Pod" and (current.get("spec") or {}).get("nodeName")
            if graceful and (bound_pod or meta.get("finalizers")):
                if not meta.get("deletionTimestamp"):
                    meta["deletionTimestamp"] = now_rfc3339()
                    meta["resourceVersion"] = self._next_version()
                    self._write(path, json.dumps(current, indent=1))
                return "terminating"
            os.unlink(path)
        return "deleted"

    # ----- events -------------------------------------------------------------------------------
    def record_event(self, involved: dict[str, Any], type_: str, reason: str, message: str, component: str
                     ) -> dict[str, Any]:
        """An Event like the components' event recorders write; a repeat of the same one bumps its count."""
        meta = involved.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        for event in self.list("Event", namespace):
            ref = event.get("involvedObject") or {}
            if (ref.get("uid") == meta.get("uid") and event.get("reason") == reason
                    and event.get("message") == message):
                event["count"] = int(event.get("count", 1)) + 1
                event["lastTimestamp"] = now_rfc3339()
                return self.replace(event, check_version=False)
        stamp = now_rfc3339()
        return self.create({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{secrets.token_hex(8)}", "namespace": namespace},
            "involvedObject": {"kind": involved.get("kind"), "namespace": meta.get("namespace"),
                               "name": meta.get("name"), "uid": meta.get("uid"),
                               "apiVersion": involved.get("apiVersion")},
            "reason": reason, "message": message, "type": type_, "source": {"component": component},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        })

    def expire_events(self, ttl_s: float, now: datetime | None = None) -> int:
        """Delete events last seen more than `ttl_s` ago, as the API server's event TTL does; returns how many."""
        now = now or datetime.now(timezone.utc)
        expired = 0
        for event in self.list("Event"):
            stamp = event.get("lastTimestamp") or event.get("firstTimestamp") or ""
            try:
                seen = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
            except ValueError:
                continue  # not written by the store: left alone
            if (now - seen).total_seconds() > ttl_s:
                meta = event.get("metadata") or {}
                try:
                    self.delete("Event", meta.get("namespace"), meta.get("name", ""), graceful=False)
                    expired += 1
                except StoreError:
                    pass  # deleted meanwhile
        return expired

    def version(self) -> int:
        """The store's current resourceVersion: it changes with every write (a cheap 'has anything changed')."""
        try:
            with open(os.path.join(self.root, ".resourceVersion"), encoding="utf-8") as fh:
                return int(fh.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def events_for(self, obj: dict[str, Any]) -> builtins.list[dict[str, Any]]:  # `list` is a method here
        meta = obj.get("metadata") or {}
        return [e for e in self.list("Event", meta.get("namespace") or "default")
                if (e.get("involvedObject") or {}).get("uid") == meta.get("uid")]


# The store's own creation order (the API server's etcd revision at creation): lists come out oldest first
# even within one second. Stripped from what `gpudra get` prints.
_SERIAL = "gpudra.local/created-revision"
PRIVATE_ANNOTATIONS = (_SERIAL,)


def created_serial(obj: dict[str, Any]) -> int:
    try:
        return int(((obj.get("metadata") or {}).get("annotations") or {}).get(_SERIAL, 0))
    except (TypeError, ValueError):
        return 0


def public_view(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as `get` prints it: without the store's private bookkeeping."""
    obj = copy_object(obj)  # read from the store: already JSON
    annotations = (obj.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict):
        for key in PRIVATE_ANNOTATIONS:
            annotations.pop(key, None)
        if not annotations:
            obj["metadata"].pop("annotations")
    return obj
