"""Plain JSON calls to an API server through the official client's connection (TLS, client certificates, retries).

The node stand-in reads and writes whole objects as the API server serves them: going through the client's typed
models would drop the fields a model of another release does not know (the client's release is not the
cluster's) and costs a conversion both ways. So it sends and receives JSON over the client's own ApiClient.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str = ""):
        super().__init__(f"{status} {reason}: {body[:300]}")
        self.status = status
        self.reason = reason
        self.body = body

    def status_object(self) -> dict[str, Any]:
        """The API server's Status answer ({} when the body is not one)."""
        try:
            parsed = json.loads(self.body)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}


class Rest:
    def __init__(self, kubeconfig: str | None, in_cluster: bool = False):
        """The cluster of `kubeconfig`, or with `in_cluster` the pod's service account (token and CA)."""
        from kubernetes import client, config

        from gpudra.kube.reader import connect

        if in_cluster:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            self.client = client.ApiClient(configuration)
        else:
            self.client = connect(kubeconfig)  # the one way gpudra connects (kubeconfig, TLS, no silent retries)

    def call(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None,
             content_type: str = "application/json", timeout: float = 30.0) -> Any:
        from kubernetes.client.exceptions import ApiException

        configuration = self.client.configuration
        url = configuration.host + path + ("?" + urlencode(query) if query else "")
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        # a token (kubeconfig `token`, the pod's service account): the client's auth settings, which run its refresh
        # hook and add the "Bearer" prefix (client 37 keeps it under api_key["BearerToken"], not "authorization")
        for auth in configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        try:
            # the REST layer alone (its keyword arguments are the same from client 33 to 39; the generated
            # call_api above it changed its signature in 35)
            response = self.client.rest_client.request(method, url, headers=headers, body=body,
                                                       _request_timeout=timeout)
        except ApiException as exc:
            raise ApiError(int(exc.status or 0), str(exc.reason), str(exc.body or "")) from None
        if hasattr(response, "read"):
            response.read()
        raw = response.data
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")
        if not 200 <= int(response.status) < 300:
            raise ApiError(int(response.status), str(response.reason), text)
        return json.loads(text) if text else None

    def get(self, path: str, **query: Any) -> Any:
        return self.call("GET", path, query=query or None)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def close(self) -> None:
        self.client.close()


def namespaced(group_version: str, resource: str, namespace: str, name: str | None = None, sub: str = "") -> str:
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    path = f"{base}/namespaces/{quote(namespace, safe='')}/{resource}"
    if name is not None:
        path += "/" + quote(name, safe="")
    return path + (f"/{sub}" if sub else "")


def cluster_scoped(group_version: str, resource: str, name: str | None = None, sub: str = "") -> str:
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    path = f"{base}/{resource}" + ("/" + quote(name, safe="") if name is not None else "")
    return path + (f"/{sub}" if sub else "")


# the kinds the local cluster's page and tools read, by their list paths
LIST_PATHS = {"Node": "/api/v1/nodes", "Pod": "/api/v1/pods", "Event": "/api/v1/events",
              "ResourceSlice": "/apis/resource.k8s.io/v1/resourceslices",
              "ResourceClaim": "/apis/resource.k8s.io/v1/resourceclaims",
              "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses"}


def lister(rest: Rest):  # type: ignore[no-untyped-def]
    """kind -> its objects on the API server, as the local store's `list(kind)` answers."""
    def list_kind(kind: str) -> list[dict[str, Any]]:
        items = (rest.get(LIST_PATHS[kind]) or {}).get("items") or []
        for item in items:  # a list's items carry no kind of their own
            item.setdefault("kind", kind)
        return list(items)

    return list_kind
