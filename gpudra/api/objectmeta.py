"""Small accessors for Kubernetes objects kept as plain dicts, plus deterministic name/uid generation.

The API server fills in `uid`, random name suffixes and timestamps. gpudra has no API server, so it derives
them from a hash of what it was given: the same manifests always produce the same names.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any, Callable

# utilrand.String's alphabet: no vowels (no accidental words) and no confusable characters.
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
GENERATED_SUFFIX_LENGTH = 5
# names.SimpleNameGenerator: generateName is cut so that the name with its suffix fits 63 characters.
MAX_GENERATE_NAME_LENGTH = 63 - GENERATED_SUFFIX_LENGTH

_UID_NAMESPACE = uuid.UUID("6b1f7c2e-5d1a-4c9e-9a57-3f0f5a8d2c41")


# one encoder for every canonical text (json.dumps would build a new encoder per call: a third of its time here)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys, for cache keys and signatures; a value JSON has no type for (a date PyYAML
    read) is written as its str()."""
    return _CANONICAL.encode(value)


def metadata(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        obj["metadata"] = meta
    return meta


def _metadata_or_empty(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}  # unvalidated input may hold anything there


def name_of(obj: dict[str, Any]) -> str:
    return str(_metadata_or_empty(obj).get("name") or "")


def namespace_of(obj: dict[str, Any], default: str = "default") -> str:
    return str(_metadata_or_empty(obj).get("namespace") or default)


def key_of(obj: dict[str, Any]) -> str:
    """`namespace/name`, the key every namespaced object is indexed by (the one spelling of it: a missing or
    null name is "", a missing namespace "default")."""
    return f"{namespace_of(obj)}/{name_of(obj)}"


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels")
    return labels if isinstance(labels, dict) else {}


def stable_digest(*parts: Any) -> bytes:
    hasher = hashlib.sha256()
    for part in parts:
        text = part if isinstance(part, str) else json.dumps(part, sort_keys=True, separators=(",", ":"))
        hasher.update(text.encode())
        hasher.update(b"\0")
    return hasher.digest()


def random_suffix(*seed: Any, length: int = GENERATED_SUFFIX_LENGTH) -> str:
    """A suffix shaped like the API server's (same alphabet and length) but derived from `seed`."""
    digest = stable_digest(*seed)
    return "".join(SUFFIX_ALPHABET[byte % len(SUFFIX_ALPHABET)] for byte in digest[:length])


def stable_uid(*seed: Any) -> str:
    return str(uuid.uuid5(_UID_NAMESPACE, stable_digest(*seed).hex()))


def truncate_generate_name(base: str) -> str:
    return base[:MAX_GENERATE_NAME_LENGTH]


def fnv32a(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return value


def safe_encode(text: str) -> str:
    """rand.SafeEncodeString: map every character onto the vowel-free alphabet (pod-template-hash)."""
    return "".join(SUFFIX_ALPHABET[ord(ch) % len(SUFFIX_ALPHABET)] for ch in text)


def template_hash(template: Any) -> str:
    """Deployment's `pod-template-hash` label: FNV-32a of the pod template, safely encoded."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    return safe_encode(str(fnv32a(data)))


def ensure_uid_of(obj: dict[str, Any]) -> str:
    meta = metadata(obj)
    if not meta.get("uid"):
        meta["uid"] = stable_uid(obj.get("kind", ""), namespace_of(obj), name_of(obj))
    uid: str = meta["uid"]
    return uid


# ----- ownership: controllers and the scheduler alike create objects owned by others ------------------------------
WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job", "DaemonSet")  # kinds that own pods by template


ensure_uid = ensure_uid_of


def owner_reference(owner: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name_of(owner),
        "uid": ensure_uid(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def unique_generated_name(prefix: str, taken: Callable[[str], bool], *seed: Any) -> str:
    base = truncate_generate_name(prefix)
    attempt = 0
    while True:
        name = base + random_suffix(base, attempt, *seed)
        if not taken(name):
            return name
        attempt += 1


def owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> bool:
    uid = (owner.get("metadata") or {}).get("uid")
    return any(
        ref.get("uid") == uid and ref.get("controller")
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
    )


TERMINAL_PHASES = ("Succeeded", "Failed")


def is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES
