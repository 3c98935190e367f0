"""The one way a claim's identity (namespace, name, UID) becomes a file name in the node driver.

The driver runs as root and these strings come from the kubelet and from the claim itself, so
they are checked against the API's own rules before anything is derived from them: the
namespace is a DNS label, the name a DNS subdomain, the UID what the API server assigns (a
UUID). Such values are single, harmless path components by construction; `path_inside` then
proves every path built from them resolves inside its root, so a symlink planted under the
root cannot redirect a create or a delete either.
"""

from __future__ import annotations

import os

from gpudra.api.schema import names

from gpudra.errors import GpudraError

from .cdispec import claim_spec_file_name

_ECHO_LIMIT = names.ECHO_LIMIT
_problems = names.field_problems  # one rule for every identity that becomes a path (the local store uses it too)


class ClaimPathError(GpudraError, ValueError):
    """A claim identity or derived path that the driver refuses to use."""


def identity_problems(namespace: object, name: object, uid: object) -> list[str]:
    """What is wrong with a claim's namespace, name and UID by the API's rules ([] when nothing)."""
    return (_problems("namespace", namespace, names.dns_label, 63)
            + _problems("name", name, names.dns_subdomain, 253)
            + _problems("uid", uid, names.kubernetes_uid, 36))


def check_claim_identity(namespace: object, name: object, uid: object) -> None:
    problems = identity_problems(namespace, name, uid)
    if problems:
        raise ClaimPathError("; ".join(problems))


def check_uid(uid: object) -> None:
    problems = _problems("uid", uid, names.kubernetes_uid, 36)
    if problems:
        raise ClaimPathError("; ".join(problems))


def path_inside(root: str, *parts: str) -> str:
    """`root/part/…` with symlinks resolved, or ClaimPathError unless it stays inside `root`.

    Each part must be one plain path component (no '/', not '.' or '..', no NUL)."""
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\0" in part:
            raise ClaimPathError(f"{part[:_ECHO_LIMIT]!r} is not a plain file name")
    real_root = os.path.realpath(root)
    path = os.path.realpath(os.path.join(real_root, *parts))
    if os.path.commonpath((real_root, path)) != real_root or path == real_root:
        raise ClaimPathError(f"{os.path.join(root, *parts)} resolves to {path}, outside {root}")
    return path


def uid_path(root: str, uid: str, prefix: str = "", suffix: str = "") -> str:
    """`root/<prefix><uid><suffix>` for a valid UID, proven to stay inside `root`."""
    check_uid(uid)
    return path_inside(root, f"{prefix}{uid}{suffix}")


def cdi_spec_path(cdi_dir: str, driver_name: str, uid: str, ext: str = "yaml") -> str:
    """The claim's CDI spec file, proven to stay inside `cdi_dir`."""
    check_uid(uid)
    return path_inside(cdi_dir, f"{claim_spec_file_name(driver_name, uid)}.{ext}")


def claim_file_candidates(directory: str, namespace: str, name: str) -> list[str]:
    """Where a local claim store keeps the claim `namespace/name` by convention, each proven to stay
    inside `directory` (a candidate that resolves outside, e.g. through a symlink, is left out)."""
    for field, value, rule, limit in (("namespace", namespace, names.dns_label, 63),
                                      ("name", name, names.dns_subdomain, 253)):
        problems = _problems(field, value, rule, limit)
        if problems:
            raise ClaimPathError("; ".join(problems))
    found = []
    for file_name in (f"{namespace}_{name}.yaml", f"{name}.yaml", f"{namespace}_{name}.json"):
        try:
            found.append(path_inside(directory, file_name))
        except ClaimPathError:
            continue
    return found


def is_inside(directory: str, file_name: str) -> bool:
    """Whether the directory entry `file_name` resolves inside `directory`."""
    try:
        path_inside(directory, file_name)
    except ClaimPathError:
        return False
    return True
