"""Where prepare reads ResourceClaims from: a local directory (simulation) or the API server."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from typing import Any, Protocol

from gpudra.api.load import MAX_INPUT_BYTES, LoadError
from gpudra.api.load_json import load_json_document
from gpudra.api.yaml_files import load_yaml_documents

from gpudra.errors import GpudraError
from gpudra.plain import as_dict

from .claimpaths import ClaimPathError, claim_file_candidates, is_inside

# A claim larger than this cannot be in a cluster: etcd's default --max-request-bytes (1.5 MiB) bounds every object
# the API server stores. A bigger one in a local store is refused, and nothing of it is kept in the cache.
MAX_CLAIM_BYTES = 3 * 2**19


def _size(claim: dict[str, Any]) -> int:
    """The claim's size as compact JSON, as the API server would store it (UTF-8 counted as characters)."""
    return len(json.dumps(claim, ensure_ascii=False, separators=(",", ":"), default=str))


def _documents(text: str, path: str) -> list[Any]:
    """A store file's documents, read within the manifest loader's limits (size, nesting, aliases, duplicates)."""
    if not path.endswith(".json"):
        return load_yaml_documents(text, path)
    return [load_json_document(text, path)]


class ClaimSourceError(GpudraError):
    """The claim could not be read (not a "not found": that is None)."""


class ClaimSource(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim as a dict, or None when it does not exist."""


def _claims_in(obj: Any) -> list[dict[str, Any]]:
    if not isinstance(obj, dict):
        return []
    if obj.get("kind") == "ResourceClaim":
        return [obj]
    if str(obj.get("kind", "")).endswith("List") and isinstance(obj.get("items"), list):
        return [i for i in obj["items"] if isinstance(i, dict) and i.get("kind", "ResourceClaim") == "ResourceClaim"]
    return []


class LocalClaimStore:
    """A directory of YAML/JSON files holding allocated ResourceClaims, read on every call.

    Files are re-parsed only when their mtime/size changed; `<namespace>_<name>.yaml` (or
    `<name>.yaml`) is looked at first so big stores stay fast.
    """

    def __init__(self, directory: str):
        self.directory = directory
        # path -> ((mtime, size), its claims, {(namespace, name): size} of the claims too large to keep)
        self._cache: dict[str, tuple[tuple[int, int], list[dict[str, Any]], dict[tuple[str, str], int]]] = {}
        self._lock = threading.Lock()

    def _parse(self, path: str) -> tuple[list[dict[str, Any]], dict[tuple[str, str], int]]:
        """The claims of one file, and the names and sizes of those too large to be claims (not kept)."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return [], {}
        key = (st.st_mtime_ns, st.st_size)
        with self._lock:
            cached = self._cache.get(path)
        if cached and cached[0] == key:
            return cached[1], cached[2]
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device node would block or never end
            return [], {}
        try:
            with open(path, "rb") as fh:  # binary: a text-mode file object costs more than the read
                raw = fh.read(MAX_INPUT_BYTES + 1)
            if len(raw) > MAX_INPUT_BYTES:
                raise ClaimSourceError(f"claim store file {path}: larger than {MAX_INPUT_BYTES // 2**20} MiB")
            docs = _documents(raw.decode("utf-8"), path)
        except FileNotFoundError:
            return [], {}
        except LoadError as exc:
            raise ClaimSourceError(f"claim store file {exc}") from None
        except (OSError, ValueError) as exc:
            raise ClaimSourceError(f"claim store file {path}: {exc}") from None
        claims: list[dict[str, Any]] = []
        too_large: dict[tuple[str, str], int] = {}
        for claim in (c for doc in docs for c in _claims_in(doc)):
            size = _size(claim)
            if size <= MAX_CLAIM_BYTES:
                claims.append(claim)
                continue
            meta = as_dict(claim.get("metadata"))
            too_large[(str(meta.get("namespace") or "default"), str(meta.get("name")))] = size
        del docs
        with self._lock:
            self._cache[path] = (key, claims, too_large)
        return claims, too_large

    def _find(self, path: str, namespace: str, name: str) -> dict[str, Any] | None:
        claims, too_large = self._parse(path)
        if (namespace, name) in too_large:
            raise ClaimSourceError(f"claim {namespace}/{name} in {path} is {too_large[(namespace, name)]} bytes as "
                                   f"JSON, larger than any API server stores ({MAX_CLAIM_BYTES} bytes)")
        for claim in claims:
            if self._matches(claim, namespace, name):
                return claim
        return None

    @staticmethod
    def _matches(claim: dict[str, Any], namespace: str, name: str) -> bool:
        meta = claim.get("metadata") or {}
        return meta.get("name") == name and (meta.get("namespace") or "default") == namespace

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Only a valid namespace/name is looked up, and only in files that resolve inside the directory."""
        try:
            candidates = claim_file_candidates(self.directory, namespace, name)
        except ClaimPathError as exc:
            raise ClaimSourceError(f"claim {exc}") from None
        for candidate in candidates:
            found = self._find(candidate, namespace, name)
            if found is not None:
                return found
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            raise ClaimSourceError(f"claim store directory {self.directory} does not exist") from None
        for entry in names:
            if entry.startswith(".") or not entry.endswith((".yaml", ".yml", ".json")):
                continue
            if not is_inside(self.directory, entry):
                continue
            found = self._find(os.path.join(self.directory, entry), namespace, name)
            if found is not None:
                return found
        return None


class KubeClaimSource:
    """Reads claims through the official client's `ResourceV1Api` (retrying transient errors)."""

    def __init__(self, resource_api: Any, *, attempts: int = 4, backoff_s: float = 0.2):
        self.api = resource_api
        self.attempts = attempts
        self.backoff_s = backoff_s

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        delay = self.backoff_s
        for attempt in range(self.attempts):
            try:
                obj = self.api.read_namespaced_resource_claim(name, namespace)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                if exc.status in (429, 500, 502, 503, 504) and attempt + 1 < self.attempts:
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise ClaimSourceError(f"reading ResourceClaim {namespace}/{name}: {exc.status} {exc.reason}") from None
            return to_plain_dict(self.api, obj)
        return None  # pragma: no cover


def to_plain_dict(api: Any, obj: Any) -> dict[str, Any]:
    """Client model -> the JSON-shaped dict the rest of gpudra uses."""
    if isinstance(obj, dict):
        return obj
    client = getattr(api, "api_client", None)
    if client is None:
        from kubernetes.client import ApiClient

        client = ApiClient()
    plain: dict[str, Any] = client.sanitize_for_serialization(obj)  # the client's JSON form of a model object
    return plain
