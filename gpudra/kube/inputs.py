"""One entry point for commands that take either manifests (`-f`) or a live cluster (`--kubeconfig`,
`--context`, or the kubeconfig kubectl would use), so `schedule`, `allocate` and `explain` read alike."""

from __future__ import annotations

from typing import Any, Iterable

from gpudra.errors import InputError
from gpudra.kube.reader import ClusterReadError, context_namespace, read_cluster, read_server_version


def load_manifests(paths: Iterable[str]) -> list[dict[str, Any]]:
    """Objects from files, directories or stdin ('-'), `kubectl get … -o yaml` Lists included,
    converted to resource.k8s.io/v1 when the api package knows how."""
    from gpudra.api.load import LoadError, load_paths

    try:
        documents = load_paths(list(paths))
    except LoadError as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise InputError(f"{exc.filename or ''}: {exc.strerror or exc}") from None
    from gpudra.api.convert import to_v1

    return [to_v1(doc.obj) for doc in documents]


def load_inputs(paths: Iterable[str] = (), kubeconfig: str | None = None,
                context: str | None = None, request_timeout: float | None = None) -> list[dict[str, Any]]:
    """Manifests when `paths` is non-empty, otherwise the cluster (read-only)."""
    paths = list(paths)
    if paths and (kubeconfig or context):
        raise InputError("use either -f (manifests) or --kubeconfig/--context (a live cluster), not both")
    if paths:
        return load_manifests(paths)
    try:
        return read_cluster(kubeconfig=kubeconfig, context=context, request_timeout=request_timeout)
    except ClusterReadError as exc:
        raise InputError(str(exc)) from None


def default_namespace(paths: Iterable[str] = (), kubeconfig: str | None = None, context: str | None = None) -> str:
    """`default` for manifests; the context's namespace (as kubectl) for a live cluster."""
    if list(paths):
        return "default"
    return context_namespace(kubeconfig, context) or "default"


def kubernetes_version(flag: str | None, paths: Iterable[str] = (), kubeconfig: str | None = None,
                       context: str | None = None, request_timeout: float | None = None) -> str:
    """The Kubernetes release to behave as: `--kubernetes-version` when given; for a live cluster the
    API server's /version; for manifests gpudra.versions.DEFAULT_KUBERNETES_VERSION."""
    import sys

    from gpudra.versions import VersionError, parse_version, patch_warnings, server_version

    try:
        if flag is not None or list(paths):
            return parse_version(flag)
        try:
            info = read_server_version(kubeconfig, context, request_timeout=request_timeout)
            for line in patch_warnings(str(info.get("gitVersion") or "")):  # the flag's own are the option's
                sys.stderr.write(f"note: the API server's {line[len('Kubernetes '):]}\n")
            return server_version(info)
        except ClusterReadError as exc:
            # The server answered, but not /version: the flag helps. Unreachable or no kubeconfig: it would not
            # (the objects come from the same server).
            answered = getattr(exc, "status", None) is not None
            hint = " (pass --kubernetes-version to skip asking the API server)" if answered else ""
            raise InputError(f"{exc}{hint}") from None
    except VersionError as exc:
        raise InputError(f"--kubernetes-version: {exc}" if flag is not None else str(exc)) from None
