"""The local cluster's object store: plain Kubernetes objects, one JSON file each, in the state directory.

It plays the API server's part for what the control loop and the drivers need: uids, creationTimestamp,
resourceVersion (optimistic concurrency: a replace carrying a stale version is a 409 Conflict), generateName,
graceful deletion of pods (deletionTimestamp) and finalizers, and events. Every write is a write to a temporary
file and an atomic rename under one lock file, so the drivers (separate processes) and the `gpudra` commands can
share it safely.

Every name, namespace and kind that becomes part of a file path is checked as the API server checks it (a known
kind, the kind's name rule, a DNS-label namespace), and every path is proven inside the store before it is opened
or unlinked (`gpudra.kubeletplugin.claimpaths.path_inside`, the driver's one proof). The store assigns uids itself, as
the API server does; a client's `metadata.uid` is ignored. A file in the store that is not a well-formed object
of its folder (written by hand, half a crash, another tool) is reported once and skipped, never fatal. Files are
0600 and directories 0700 whatever the umask: a root control plane acts on what is in them.
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import hashlib
import json
import logging
import os
import random
import secrets
import uuid
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

from gpudra.api.defaults import apply_defaults
from gpudra.api.gates import drop_disabled_fields
from gpudra.api.problems import printable
from gpudra.api.schema import names
from gpudra.atomicfile import NAME_MAX, write_atomic
from gpudra.copying import copy_object
from gpudra.kubeletplugin.claimpaths import ClaimPathError, path_inside
from gpudra.regularfile import read_regular_file, read_regular_file_stat

from .kinds import (KINDS, KindInfo, check_api_version, check_identity, check_served, identity_problems, kind_info)
from . import priority
from .kinds import StoreError as StoreError  # the error every Store method raises: its callers may catch it from here

FILE_MODE = 0o600
# An object file's bound, written and read: the API server's request-body limit (3 MiB, apiserver's
# MaxRequestBodyBytes), which every object a client could create fits.
MAX_OBJECT_BYTES = 3 * 2**20
DIR_MODE = 0o700
# An object's file is `NAME.json` where that fits a file name (NAME_MAX bytes); a longer name (Kubernetes allows
# 253 characters, and more for kinds whose names are path segments) is kept as `~SHA256(NAME).json`: '~' is in no
# DNS name, and the object's own name is checked against its file name when it is read.
HASHED_FILE_PREFIX = "~"
# The API server's generateName: the prefix is cut so that prefix + five random characters fit 63 characters
# (k8s.io/apiserver/pkg/storage/names: maxGeneratedNameLength).
_GENERATED_PREFIX_MAX = 63 - 5

log = logging.getLogger("gpudra.store")

# The namespaces kube-apiserver creates and keeps itself (pkg/controlplane/controller/systemnamespaces)
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet (no vowels)


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stored_form(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server stores: resource.k8s.io objects converted to v1 and defaulted (a request's
    allocationMode/count, tolerations' operator, a taint's timeAdded) and ComputeDomains defaulted by their CRD,
    everything else as given. A copy."""
    if str(obj.get("apiVersion", "")).startswith(("resource.k8s.io/", "resource.nvidia.com/")):
        return apply_defaults(obj, now=now_rfc3339())
    copied: dict[str, Any] = json.loads(json.dumps(obj))  # the JSON form the store writes (a copy; what JSON
    return copied                                          # cannot hold fails)


def private_dirs(path: str) -> str:
    """Create `path` and its missing parents as 0700 directories whatever the umask (a mode can only lose bits to
    it); existing directories (the user's own `--dir .`) are left as they are."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
    return path


def open_private(path: str, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """A file descriptor on `path` (created 0600, never through a symlink): locks, pid files, logs."""
    return os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)


_reported: set[tuple[str, int]] = set()


def _report_once(path: str, problem: str) -> None:
    """A corrupt store file, logged once per version of the file (the control plane lists every few seconds)."""
    try:
        stamp = os.lstat(path).st_mtime_ns
    except OSError:
        stamp = 0
    if (path, stamp) not in _reported:
        _reported.add((path, stamp))
        log.warning("store: skipping %s: %s", printable(path), problem)


class Store:
    def __init__(self, directory: str, release: Callable[[], str | None] | None = None,
                 features: Callable[[], Any] | None = None):
        """`release()`: the cluster's Kubernetes release, whose API server drops the fields of gates it leaves
        off (None: keep everything); `features()`: the gates the cluster sets over that release's defaults
        (gpudra.allocator.Features, or None)."""
        self.root = os.path.join(directory, "store")
        self._lock_path = os.path.join(directory, "store.lock")
        self._release = release or (lambda: None)
        self._features = features or (lambda: None)

    def drop_disabled_fields(self, obj: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
        """In place, what this release's API server drops (gated fields, unless `old` uses them); their paths."""
        release = self._release()
        if release and str(obj.get("apiVersion", "")).startswith(("resource.k8s.io/", "scheduling.k8s.io/")):
            return drop_disabled_fields(obj, release, old, self._features())
        return []

    # ----- files --------------------------------------------------------------------------------
    def _path(self, kind: object, namespace: object, name: object) -> str:
        """The object's file, its identity checked and the path proven inside the store (StoreError if not)."""
        info = kind_info(kind)
        if info.namespaced and namespace is None:
            namespace = "default"
        check_identity(info, namespace, name)
        folder = str(namespace) if info.namespaced else "_"  # "_" is no DNS label: no namespace collides with it
        return self._inside(info.plural, folder, object_file_name(str(name)))

    def _inside(self, *parts: str) -> str:
        try:
            return path_inside(self.root, *parts)
        except ClaimPathError as exc:
            raise StoreError(f"store: {exc}", 500) from None

    @contextmanager
    def locked(self) -> Iterator[None]:
        self._make_dirs(self.root)
        fd = open_private(self._lock_path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @staticmethod
    def _make_dirs(path: str) -> None:
        try:
            private_dirs(path)
        except OSError as exc:
            raise StoreError(f"store: cannot create {printable(path)}: {exc.strerror}", 500) from None

    def _next_version(self) -> str:
        path = os.path.join(self.root, ".resourceVersion")
        try:
            current = int((read_regular_file(path, 32) or b"0").strip() or 0)
        except (OSError, ValueError):
            _report_once(path, "not a number; counting on from the newest object")
            # every object's own resourceVersion, not only its creation serial: a replaced object's version is
            # above it, and a version must never be issued twice (etcd's revision only grows)
            current = max([0, *(_newest_version(o) for info in KINDS for o in self.list(info.kind))])
        self._write(path, str(current + 1))
        return str(current + 1)

    def _write(self, path: str, text: str) -> None:
        # atomic (readers in other processes see the old or the new object); no fsync: a scratch cluster
        self._make_dirs(os.path.dirname(path))
        try:
            write_atomic(path, text.encode(), mode=FILE_MODE, label="store", fsync=False)
        except OSError as exc:
            raise StoreError(f"store: cannot write {printable(path)}: {exc.strerror}", 500) from None

    def _write_object(self, path: str, obj: dict[str, Any]) -> None:
        """Write a created or replaced object once it passes `gpudra validate`'s checks (StoreError 422, the API
        server's `is invalid`, otherwise): the store holds nothing the control loop could trip on."""
        problem = _first_error(obj, self._release())
        if problem:
            meta = obj.get("metadata") or {}
            raise StoreError(f'{obj.get("kind")} "{printable(str(meta.get("name")))}" is invalid: {problem}', 422)
        text = json.dumps(obj, indent=1)
        if len(text) > MAX_OBJECT_BYTES:  # what the store writes, it must read back (`_load`'s bound)
            raise StoreError(f"Request entity too large: limit is {MAX_OBJECT_BYTES}", 413)
        self._write(path, text)
        try:
            info = os.lstat(path)
        except OSError:
            return
        # read back without a re-check
        _validated[path] = ((info.st_ino, info.st_mtime_ns, info.st_size, self._release()), None)

    @staticmethod
    def _unlink(path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"store: cannot delete {printable(path)}: {exc.strerror}", 500) from None

    @staticmethod
    def _load(path: str) -> tuple[Any, tuple[int, int, int]]:
        """The parsed file and its version stamp: never through a symlink, never a FIFO or device (which would
        block or flood the control loop), never more than MAX_OBJECT_BYTES; FileNotFoundError when it is not
        there, UnsafeFileError (an OSError) when it is not a file the store wrote."""
        found = read_regular_file_stat(path, MAX_OBJECT_BYTES)
        if found is None:
            raise FileNotFoundError(errno.ENOENT, "not found", path)
        raw, info = found
        return json.loads(raw), (info.st_ino, info.st_mtime_ns, info.st_size)

    def _read(self, path: str, info: KindInfo, namespace: str | None, name: str | None = None
              ) -> dict[str, Any] | None:
        """The object in `path`, or None when there is none or the file is not a valid object of that kind,
        namespace and name (reported once): what the control loop and the drivers see has passed the checks
        `apply` makes, whoever wrote the file."""
        try:
            obj, stamp = self._load(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            problem = "a symlink" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
            _report_once(path, problem)
            return None
        except (ValueError, RecursionError) as exc:  # JSON, UTF-8, or nested past Python's stack
            _report_once(path, f"not a JSON object ({exc})")
            return None
        if not isinstance(obj, dict):
            _report_once(path, "not a JSON object")
            return None
        malformed = _malformed(obj, info, namespace, os.path.basename(path), name) or _invalid(
            path, stamp, obj, self._release())
        if malformed:
            _report_once(path, malformed)
            return None
        return obj

    # ----- reads --------------------------------------------------------------------------------
    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None; StoreError for a kind, namespace or name the API server would refuse."""
        info = kind_info(kind)
        namespace = (namespace or "default") if info.namespaced else None
        return self._read(self._path(kind, namespace, name), info, namespace, name)

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of a kind (in one namespace, or all), by namespace and name as the API server lists them.
        Only plain directories and files are followed (no symlink leads out of the store)."""
        info = kind_info(kind)
        if namespace is not None and info.namespaced:
            check_identity(info, namespace, "x")  # the namespace only
            folders: list[str] | None = [namespace]
        else:
            folders = None
        base = self._inside(info.plural)
        out = []
        for folder in sorted(folders if folders is not None else _entries(base, directories=True)):
            if (folder == "_") == info.namespaced:
                continue  # a namespace folder for a cluster-scoped kind, or the reverse: not the store's
            directory = os.path.join(base, folder)
            for file_name in sorted(_entries(directory, directories=False)):
                if not file_name.endswith(".json") or file_name.startswith("."):
                    continue  # temp files of writes in progress (.NAME.tmp) and anything else
                obj = self._read(os.path.join(directory, file_name), info, folder if info.namespaced else None)
                if obj is not None:
                    out.append(obj)
        return out

    # ----- writes -------------------------------------------------------------------------------
    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = stored_form(obj)
        self.drop_disabled_fields(obj, None)
        info = kind_info(obj.get("kind"))
        obj.setdefault("apiVersion", info.api_version)
        check_api_version(info, obj["apiVersion"])
        check_served(info, obj["apiVersion"], self._release(), self._features())
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise StoreError(f"{info.kind}: metadata must be an object", 422)
        if info.namespaced:
            meta["namespace"] = meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        with self.locked():
            if not meta.get("name"):
                prefix = meta.get("generateName")
                if not prefix or not isinstance(prefix, str):
                    raise StoreError(f"{info.kind}: metadata.name or generateName is required", 422)
                while True:  # the API server's generateName: five random characters
                    meta["name"] = (prefix[:_GENERATED_PREFIX_MAX]
                                    + "".join(random.choice(SUFFIX_ALPHABET) for _ in range(5)))
                    if not os.path.lexists(self._path(info.kind, meta.get("namespace"), meta["name"])):
                        break
            path = self._path(info.kind, meta.get("namespace"), meta["name"])  # the identity checked first
            if info.namespaced and not self._namespace_exists(meta["namespace"]):
                # the NamespaceLifecycle admission plugin's answer (plugin/pkg/admission/namespace/lifecycle)
                raise StoreError(f'namespaces "{meta["namespace"]}" not found', 404)
            if os.path.lexists(path):
                raise StoreError(f'{info.plural} "{meta["name"]}" already exists', 409)
            if info.kind == "Pod":  # the Priority admission plugin
                priority.admit_pod(obj, lambda name: self.get("PriorityClass", None, name),
                                   self.list("PriorityClass"))
            # The API server's FillObjectMetaSystemFields and BeforeCreate: a new uid and creationTimestamp whatever
            # the client sent (a uid names files on the nodes and identifies claims to drivers; the timestamp orders
            # the scheduling queue, which a client must not jump), and nothing deleted yet.
            meta["uid"] = str(uuid.uuid4())
            for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(field, None)
            meta["creationTimestamp"] = now_rfc3339()
            if info.spec_generation:
                meta["generation"] = 1
            meta["resourceVersion"] = self._next_version()
            _stamp_serial(meta, meta["resourceVersion"])
            self._write_object(path, obj)
        return obj

    def _namespace_exists(self, namespace: object) -> bool:
        """A Namespace object of that name, or one the API server makes itself."""
        if namespace in SYSTEM_NAMESPACES:
            return True
        return self._read(self._path("Namespace", None, namespace), kind_info("Namespace"), None) is not None

    def replace(self, obj: dict[str, Any], *, check_version: bool = True) -> dict[str, Any]:
        obj = stored_form(obj)
        meta = obj.setdefault("metadata", {})
        kind = obj.get("kind", "")
        info = kind_info(kind)
        check_served(info, obj.get("apiVersion", info.api_version), self._release(), self._features())
        namespace = (meta.get("namespace") or "default") if info.namespaced else None
        with self.locked():
            path = self._path(kind, namespace, meta.get("name"))
            current = self._read(path, info, namespace, meta["name"])
            if current is None:
                raise StoreError(f'{kind_info(kind).plural} "{meta.get("name")}" not found', 404)
            self.drop_disabled_fields(obj, current)
            cmeta = current.get("metadata", {})
            if check_version and meta.get("resourceVersion") and meta["resourceVersion"] != cmeta.get("resourceVersion"):
                raise StoreError(f'Operation cannot be fulfilled on {kind_info(kind).plural} "{meta.get("name")}": '
                                 "the object has been modified; please apply your changes to the latest version", 409)
            if meta.get("uid") and meta["uid"] != cmeta.get("uid"):  # a copy of an object deleted and created again
                # the registry's update takes a uid in the object as a precondition (rest.DefaultUpdatedObjectInfo,
                # storage.Preconditions.Check), a failed one answers 409
                raise StoreError(f'Operation cannot be fulfilled on {kind_info(kind).plural} "{meta.get("name")}": '
                                 f'Precondition failed: UID in precondition: {meta["uid"]}, UID in object meta: '
                                 f'{cmeta.get("uid")}', 409)
            for field in ("uid", "creationTimestamp"):
                meta[field] = cmeta.get(field)
            _keep_generation(meta, cmeta, info.spec_generation and obj.get("spec") != current.get("spec"))
            _stamp_serial(meta, (cmeta.get("annotations") or {}).get(_SERIAL, "0"))
            if cmeta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = cmeta["deletionTimestamp"]
            if cmeta.get("deletionTimestamp") and not meta.get("finalizers"):
                self._unlink(path)  # the last finalizer is gone: the object goes away
                return obj
            meta["resourceVersion"] = self._next_version()
            self._write_object(path, obj)
        return obj

    def delete(self, kind: str, namespace: str | None, name: str, *, graceful: bool = True,
               grace_period_seconds: int | None = None, now: datetime | None = None) -> str:
        """'deleted', or 'terminating' for an object the control loop must finish (pods with a node,
        objects with finalizers). Raises 404. `grace_period_seconds` (a bound pod's): the API server's graceful
        deletion, deletionTimestamp = `now` + the grace period and deletionGracePeriodSeconds; without it the
        pod is stopped at once (deletionTimestamp = now)."""
        info = kind_info(kind)
        namespace = (namespace or "default") if info.namespaced else None
        with self.locked():
            path = self._path(kind, namespace, name)
            current = self._read(path, info, namespace, name)
            if current is None:
                raise StoreError(f'{info.plural} "{name}" not found', 404)
            meta = current.setdefault("metadata", {})
            bound_pod = kind == "Pod" and (current.get("spec") or {}).get("nodeName")
            if graceful and (bound_pod or meta.get("finalizers")):
                if not meta.get("deletionTimestamp"):
                    meta["deletionTimestamp"] = now_rfc3339()
                    if bound_pod and grace_period_seconds is not None:
                        end = (now or datetime.now(timezone.utc)) + timedelta(seconds=grace_period_seconds)
                        meta["deletionTimestamp"] = end.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                        meta["deletionGracePeriodSeconds"] = grace_period_seconds
                    meta["resourceVersion"] = self._next_version()
                    self._write(path, json.dumps(current, indent=1))
                return "terminating"
            self._unlink(path)
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
        # the kubelet's and the scheduler's `<object>.<hex>`, cut to fit a name (253), and
        # never cut after a '-' or '.' (a DNS subdomain's parts end in a letter or digit)
        stem = str(meta.get("name"))[:253 - 17].rstrip("-.")
        return self.create({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{stem}.{secrets.token_hex(8)}",
                         "namespace": namespace},
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
            return int((read_regular_file(os.path.join(self.root, ".resourceVersion"), 32) or b"0").strip() or 0)
        except (OSError, ValueError):
            return 0

    def events_for(self, obj: dict[str, Any]) -> builtins.list[dict[str, Any]]:  # `list` is a method here
        meta = obj.get("metadata") or {}
        return [e for e in self.list("Event", meta.get("namespace") or "default")
                if (e.get("involvedObject") or {}).get("uid") == meta.get("uid")]


def _entries(directory: str, *, directories: bool) -> list[str]:
    """The plain directories (or plain files) in `directory`, never a symlink; [] when it is not a directory."""
    try:
        with os.scandir(directory) as scan:
            return [e.name for e in scan
                    if (e.is_dir(follow_symlinks=False) if directories else e.is_file(follow_symlinks=False))]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        _report_once(directory, exc.strerror or str(exc))
        return []


def object_file_name(name: str) -> str:
    """The file of the object named `name` in its kind's and namespace's folder."""
    plain = f"{name}.json"
    if len(os.fsencode(plain)) <= NAME_MAX:
        return plain
    return f"{HASHED_FILE_PREFIX}{hashlib.sha256(os.fsencode(name)).hexdigest()}.json"


def _malformed(obj: dict[str, Any], info: KindInfo, namespace: str | None, file_name: str, name: str | None
               ) -> str | None:
    """Why a stored JSON object is not the object its place says it is (None when it is). `name`: the one asked
    for (None: any, as listing reads the folder)."""
    meta = obj.get("metadata")
    if obj.get("kind") != info.kind or not isinstance(meta, dict):
        return f"not a {info.kind} with metadata"
    if (not isinstance(meta.get("name"), str) or object_file_name(meta["name"]) != file_name
            or (name is not None and meta["name"] != name)
            or (info.namespaced and meta.get("namespace") != namespace)):
        return "its metadata names another object than its file name and folder"
    name = meta["name"]
    problems = identity_problems(info, namespace, name) + names.field_problems(
        "metadata.uid", meta.get("uid"), names.kubernetes_uid, 36)
    return "; ".join(problems) or None


# path -> ((file version, release), first error)
_validated: dict[str, tuple[tuple[int, int, int, str | None], str | None]] = {}


def _invalid(path: str, stamp: tuple[int, int, int], obj: dict[str, Any], release: str | None) -> str | None:
    """The first error `gpudra validate` finds in the stored object (None: valid) under the cluster's release,
    once per version of the file: the content check `apply` makes, for files written any other way."""
    seen = _validated.get(path)
    if seen is not None and seen[0] == (*stamp, release):
        return seen[1]
    problem = _first_error(obj, release)
    _validated[path] = ((*stamp, release), problem)
    return problem


def _first_error(obj: dict[str, Any], release: str | None) -> str | None:
    """The first error of `obj` under `release`'s rules (where a ResourceSlice's counter sets may live, …)."""
    from gpudra.api.load import Document
    from gpudra.api.validate import validate_document

    errors = [p for p in validate_document(Document(obj, "store", 1), release) if p.severity == "error"]
    return f"{errors[0].path}: {errors[0].message}" if errors else None


# The store's own creation order (the API server's etcd revision at creation): lists come out oldest first
# even within one second. Stripped from what `gpudra get` prints.
_SERIAL = "gpudra.local/created-revision"
# What `apply` last applied (kubectl's kubectl.kubernetes.io/last-applied-configuration): its three-way merge.
LAST_APPLIED = "gpudra.local/last-applied-configuration"
PRIVATE_ANNOTATIONS = (_SERIAL, LAST_APPLIED)


def _stamp_serial(meta: dict[str, Any], serial: str) -> None:
    """Record the creation order in the object's annotations. `annotations: null` (a YAML `annotations:` with
    nothing under it) is an empty map, as the API server decodes it (a nil map[string]string); anything else
    that is not a map is left for validation to refuse (422)."""
    if meta.get("annotations") is None:
        meta["annotations"] = {}
    if isinstance(meta["annotations"], dict):
        meta["annotations"][_SERIAL] = serial


def _newest_version(obj: dict[str, Any]) -> int:
    """The last version the store gave `obj`: its resourceVersion (its creation serial if that is unreadable)."""
    try:
        version = int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        version = 0
    return max(version, created_serial(obj))


def _keep_generation(meta: dict[str, Any], stored: dict[str, Any], spec_changed: bool) -> None:
    """An update's metadata.generation: the stored one (rest.BeforeUpdate: a client cannot set it), one more when
    the kind counts spec changes and the spec changed."""
    generation = stored.get("generation")
    if spec_changed:
        generation = (generation if isinstance(generation, int) else 0) + 1
    if generation is None:
        meta.pop("generation", None)
    else:
        meta["generation"] = generation


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
