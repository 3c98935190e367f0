"""Fetch cluster objects as plain dicts, read-only.

Raw JSON (`_preload_content=False`) is used instead of the client's generated models: the
models lag behind the API (alpha fields are dropped on deserialisation) and converting them
back with `sanitize_for_serialization` changes nothing we need. Only `list` calls are made.
"""

from __future__ import annotations

import json
import re
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from gpudra.errors import GpudraError

PAGE_SIZE = 500


class ClusterReadError(GpudraError, RuntimeError):
    """The cluster could not be reached or read; `str()` is a message fit for users."""


@dataclass(frozen=True)
class ResourceKind:
    kind: str
    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool
    # Optional kinds (alpha APIs) are skipped when the server does not serve them.
    optional: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self) -> str:
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{prefix}/{self.plural}"


CLUSTER_KINDS: tuple[ResourceKind, ...] = (
    ResourceKind("Node", "", "v1", "nodes", namespaced=False),
    ResourceKind("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", namespaced=False),
    ResourceKind("ResourceSlice", "resource.k8s.io", "v1", "resourceslices", namespaced=False),
    ResourceKind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", namespaced=True),
    ResourceKind("ResourceClaimTemplate", "resource.k8s.io", "v1", "resourceclaimtemplates", namespaced=True),
    # DeviceTaintRule moved from alpha to beta to v1; the first version the server serves is used.
    ResourceKind("DeviceTaintRule", "resource.k8s.io", "v1", "devicetaintrules", namespaced=False, optional=True),
    ResourceKind("DeviceTaintRule", "resource.k8s.io", "v1beta2", "devicetaintrules", namespaced=False,
                 optional=True),
    ResourceKind("DeviceTaintRule", "resource.k8s.io", "v1alpha3", "devicetaintrules", namespaced=False,
                 optional=True),
    ResourceKind("Pod", "", "v1", "pods", namespaced=True),
    # The Workload API (alpha, --runtime-config): 1.36 serves Workload and PodGroup in v1alpha2, 1.35 Workload in
    # v1alpha1; gangs are explained from them.
    ResourceKind("Workload", "scheduling.k8s.io", "v1alpha2", "workloads", namespaced=True, optional=True),
    ResourceKind("Workload", "scheduling.k8s.io", "v1alpha1", "workloads", namespaced=True, optional=True),
    ResourceKind("PodGroup", "scheduling.k8s.io", "v1alpha2", "podgroups", namespaced=True, optional=True),
)


def kubeconfig_path(kubeconfig: str | None = None) -> str:
    """The kubeconfig kubectl would use: the flag, else $KUBECONFIG (read now, not at import), else
    ~/.kube/config. Several paths separated by ':' are merged by the client, as kubectl does."""
    if kubeconfig:
        return kubeconfig
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def context_namespace(kubeconfig: str | None = None, context: str | None = None) -> str | None:
    """The namespace set on the (current or named) context, None when unset or unreadable."""
    from kubernetes import config

    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig_path(kubeconfig))
    except Exception:  # noqa: BLE001 - no or broken kubeconfig: reading the cluster reports it properly
        return None
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return ((chosen or {}).get("context") or {}).get("namespace") or None


def _quiet_insecure_requests() -> None:
    """A kubeconfig with insecure-skip-tls-verify is the user's choice, which kubectl honours silently: urllib3's
    InsecureRequestWarning (its text, once per request) is left out of the command's stderr."""
    import warnings

    import urllib3

    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)


def connect(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An `ApiClient` for the kubeconfig (default locations when None) or, failing that, in-cluster."""
    from kubernetes import client, config

    explicit = kubeconfig is not None
    kubeconfig = kubeconfig_path(kubeconfig)
    if explicit and not os.path.exists(kubeconfig):  # the client would say "No configuration found"
        raise ClusterReadError(f"cannot load kubeconfig {kubeconfig}: no such file or directory")
    try:
        if not explicit and context is None and not any(os.path.exists(p) for p in kubeconfig.split(os.pathsep)):
            configuration = client.Configuration()
            try:
                config.load_incluster_config(client_configuration=configuration)
            except config.ConfigException:
                raise ClusterReadError(
                    "no kubeconfig found (set KUBECONFIG or pass --kubeconfig) and not running in a cluster"
                ) from None
            configuration.retries = 0
            return client.ApiClient(configuration)
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
        # urllib3 retries a read that timed out three more times: --request-timeout would last four times
        # as long as asked. kubectl does not retry reads either.
        configuration.retries = 0
        if not configuration.verify_ssl:
            _quiet_insecure_requests()
        return client.ApiClient(configuration)
    except ClusterReadError:
        raise
    except config.ConfigException as exc:
        raise ClusterReadError(f"cannot load kubeconfig: {exc}") from None
    except (OSError, ValueError, TypeError) as exc:
        where = kubeconfig or "default kubeconfig"
        raise ClusterReadError(f"cannot load kubeconfig {where}: {exc}") from None


def _get_json(api_client: Any, path: str, query: list[tuple[str, Any]],
              request_timeout: float | None = None) -> dict[str, Any]:
    data = _get_text(api_client, path, query, request_timeout)
    try:
        parsed = json.loads(data)
    except (TypeError, json.JSONDecodeError):
        raise ClusterReadError(f"{path}: the API server did not return JSON") from None
    if not isinstance(parsed, dict):
        raise ClusterReadError(f"{path}: unexpected response (not a JSON object)")
    return parsed


def _get_text(api_client: Any, path: str, query: list[tuple[str, Any]],
              request_timeout: float | None = None) -> str:
    from kubernetes.client.exceptions import ApiException

    try:
        response = api_client.call_api(
            path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=request_timeout,
        ) if _legacy_call_api(api_client) else _call_api_v2(api_client, path, query, request_timeout)
    except ApiException as exc:
        raise _api_error(path, exc.status, exc.reason, getattr(exc, "body", None)) from None
    except Exception as exc:  # urllib3 connection errors and friends
        if request_timeout and ("timeout" in type(exc).__name__.lower() or "timed out" in str(exc)):
            raise ClusterReadError(f"the API server did not answer GET {path} within {request_timeout:g} s "
                                   "(--request-timeout)") from None
        if type(exc).__module__.startswith(("urllib3", "socket", "ssl")) or isinstance(exc, OSError):
            server = getattr(getattr(api_client, "configuration", None), "host", None)
            where = f"the API server {server}" if server else "the API server"
            raise ClusterReadError(f"cannot reach {where} (GET {path}): {_root_cause(exc)}") from None
        raise
    data = response.data if hasattr(response, "data") else response
    if isinstance(data, (bytes, bytearray)):
        data = data.decode("utf-8", "replace")
    return data if isinstance(data, str) else ""


# kube-apiserver's /metrics has one sample per feature gate: kubernetes_feature_enabled{name="X",stage="ALPHA"} 1
# (component-base/metrics/prometheus/feature); the only place a client can read the gates the server runs with.
_FEATURE_SAMPLE = re.compile(r'^kubernetes_feature_enabled\{([^}]*)\}\s+(\S+)\s*$', re.MULTILINE)
_NAME_LABEL = re.compile(r'(?:^|,)name="([^"]+)"')


def read_feature_gates(kubeconfig: str | None = None, context: str | None = None, *,
                       api_client: Any = None, request_timeout: float | None = None) -> dict[str, bool]:
    """The API server's feature gates, gate -> on, from its /metrics (ClusterReadError when it may not be read:
    /metrics needs the `get` verb on that non-resource URL, which cluster admins have)."""
    owns_client = api_client is None
    if owns_client:
        api_client = connect(kubeconfig, context)
    try:
        text = _get_text(api_client, "/metrics", [], request_timeout)
    finally:
        if owns_client:
            close = getattr(api_client, "close", None)
            if close is not None:
                close()
    gates: dict[str, bool] = {}
    for labels, value in _FEATURE_SAMPLE.findall(text):
        name = _NAME_LABEL.search(labels)
        if name:
            try:
                gates[name.group(1)] = float(value) == 1.0
            except ValueError:
                continue
    return gates


def _root_cause(exc: BaseException) -> str:
    """The operating system's words for a failed connection ("connection refused", "name or service not
    known"), not urllib3's wrapping of them ("HTTPSConnectionPool(host=…): Max retries exceeded …")."""
    cause: BaseException | None = exc
    reason = str(exc)
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.strerror:
            reason = cause.strerror
        nested = getattr(cause, "reason", None)  # urllib3's MaxRetryError keeps the real error here
        cause = nested if isinstance(nested, BaseException) else (cause.__cause__ or cause.__context__)
    return reason[:1].lower() + reason[1:]


def _legacy_call_api(api_client: Any) -> bool:
    # Clients up to v33 expose call_api(resource_path, method, ...); newer (OpenAPI generator 7)
    # ones split it into param_serialize + call_api(method, url, ...).
    return not hasattr(api_client, "param_serialize")


def _call_api_v2(api_client: Any, path: str, query: list[tuple[str, Any]],
                 request_timeout: float | None = None) -> Any:
    method, url, headers, body, post_params = api_client.param_serialize(
        method="GET",
        resource_path=path,
        query_params=query,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(method, url, header_params=headers, body=body, post_params=post_params,
                                   _request_timeout=request_timeout)
    response.read()
    if not 200 <= response.status <= 299:
        body_text = response.data.decode("utf-8", "replace") if response.data else ""
        raise _api_error(path, response.status, response.reason, body_text)
    return response


def _api_error(path: str, status: int | None, reason: str | None, body: Any) -> ClusterReadError:
    message = reason or "error"
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            message = json.loads(body).get("message") or message
        except (json.JSONDecodeError, AttributeError):
            pass
    error = ClusterReadError(f"GET {path}: {status} {message}")
    error.status = status  # type: ignore[attr-defined]
    return error


def read_kind(api_client: Any, kind: ResourceKind, request_timeout: float | None = None) -> list[dict[str, Any]]:
    """Every object of one kind, all namespaces, following `continue` tokens."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        query: list[tuple[str, Any]] = [("limit", PAGE_SIZE)]
        if token:
            query.append(("continue", token))
        page = _get_json(api_client, kind.path(), query, request_timeout)
        for item in page.get("items") or []:
            if isinstance(item, dict):
                # List items from the API carry neither apiVersion nor kind.
                items.append({"apiVersion": kind.api_version, "kind": kind.kind, **item})
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


def read_server_version(kubeconfig: str | None = None, context: str | None = None, *,
                        api_client: Any = None, request_timeout: float | None = None) -> dict[str, Any]:
    """The API server's GET /version answer ({"major": "1", "minor": "34", "gitVersion": "v1.34.2", …})."""
    owns_client = api_client is None
    if owns_client:
        api_client = connect(kubeconfig, context)
    try:
        return _get_json(api_client, "/version", [], request_timeout)
    finally:
        if owns_client:
            close = getattr(api_client, "close", None)
            if close is not None:
                close()


def read_cluster(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    api_client: Any = None,
    kinds: Iterable[ResourceKind] = CLUSTER_KINDS,
    on_skip: Callable[[ResourceKind, str], None] | None = None,
    request_timeout: float | None = None,
) -> list[dict[str, Any]]:
    """All objects gpudra reasons about, in `kinds` order. Nothing is written to the cluster.

    Optional kinds the server does not serve (404) or that we may not list (403) are skipped and
    reported through `on_skip`; any other failure raises ClusterReadError.
    """
    owns_client = api_client is None
    if owns_client:
        api_client = connect(kubeconfig, context)
    try:
        objects: list[dict[str, Any]] = []
        done: set[str] = set()
        for kind in kinds:
            if kind.kind in done:
                continue
            try:
                objects.extend(read_kind(api_client, kind, request_timeout))
                done.add(kind.kind)
            except ClusterReadError as exc:
                if kind.optional and getattr(exc, "status", None) in (403, 404):
                    if on_skip is not None:
                        on_skip(kind, str(exc))
                    continue
                raise
        return objects
    finally:
        if owns_client:
            close = getattr(api_client, "close", None)
            if close is not None:
                close()
