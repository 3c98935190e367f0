"""Publishing the node's ResourceSlices through the official Kubernetes client.

The publisher reconciles: it lists the slices of (node, driver), creates/updates the
desired ones (deterministic names, so a restarted driver updates instead of duplicating),
deletes the rest, and bumps the pool generation only when the content changed. Transient
API errors are retried with exponential backoff; invalid objects are not.
"""

from __future__ import annotations

import builtins
import functools
import logging
import time
from typing import Any, Callable, Protocol

from gpudra.copying import copy_object

from gpudra.errors import GpudraError

from .claims import to_plain_dict

log = logging.getLogger("gpudra.driver.publisher")
RETRYABLE = {429, 500, 502, 503, 504}


class PublishError(GpudraError):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class SliceClient(Protocol):
    """What SlicePublisher calls: KubeSliceClient on an API server, the local cluster's store client."""

    def list(self, node_name: str, driver_name: str) -> builtins.list[dict[str, Any]]: ...

    def create(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def replace(self, name: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def delete(self, name: str) -> None: ...

    def node_uid(self, node_name: str) -> str | None: ...


class KubeSliceClient:
    """The few calls the publisher needs, on `ResourceV1Api` / `CoreV1Api`, returning plain dicts."""

    def __init__(self, resource_api: Any, core_api: Any | None = None, taint_rule_apis: dict[str, Any] | None = None):
        self.resource = resource_api
        self.core = core_api
        # API version -> client API object with the *_device_taint_rule calls, most preferred first
        self.taint_rule_apis = taint_rule_apis or {}
        self._taint_api: Any = None

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, context: str | None = None) -> "KubeSliceClient":
        from kubernetes import client, config

        if kubeconfig:
            api_client = config.new_client_from_config(config_file=kubeconfig, context=context)
        else:
            config.load_incluster_config()
            api_client = client.ApiClient()
        apis = {"resource.k8s.io/v1": client.ResourceV1Api(api_client),
                "resource.k8s.io/v1beta2": client.ResourceV1beta2Api(api_client),
                "resource.k8s.io/v1alpha3": client.ResourceV1alpha3Api(api_client)}
        return cls(apis["resource.k8s.io/v1"], client.CoreV1Api(api_client), apis)

    def list(self, node_name: str, driver_name: str) -> list[dict[str, Any]]:
        result = self.resource.list_resource_slice(field_selector=f"spec.nodeName={node_name},spec.driver={driver_name}")
        data = to_plain_dict(self.resource, result)
        return list(data.get("items") or [])

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return to_plain_dict(self.resource, self.resource.create_resource_slice(body))

    def replace(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return to_plain_dict(self.resource, self.resource.replace_resource_slice(name, body))

    def delete(self, name: str) -> None:
        self.resource.delete_resource_slice(name)

    def taint_rule_version(self) -> str | None:
        """The first DeviceTaintRule API version the server serves (None: none; a 404 means not served)."""
        for version, api in self.taint_rule_apis.items():
            try:
                api.list_device_taint_rule(limit=1)
            except Exception as exc:  # noqa: BLE001 - ApiException
                if _status(exc) == 404:
                    continue
                raise
            self._taint_api = api
            return version
        return None

    def list_taint_rules(self, label_selector: str) -> builtins.list[dict[str, Any]]:
        data = to_plain_dict(self._taint_api, self._taint_api.list_device_taint_rule(label_selector=label_selector))
        return list(data.get("items") or [])

    def create_taint_rule(self, body: dict[str, Any]) -> None:
        self._taint_api.create_device_taint_rule(body)

    def replace_taint_rule(self, name: str, body: dict[str, Any]) -> None:
        self._taint_api.replace_device_taint_rule(name, body)

    def delete_taint_rule(self, name: str) -> None:
        try:
            self._taint_api.delete_device_taint_rule(name)
        except Exception as exc:  # noqa: BLE001
            if _status(exc) != 404:
                raise

    def node_uid(self, node_name: str) -> str | None:
        if self.core is None:
            return None
        node = to_plain_dict(self.core, self.core.read_node(node_name))
        return (node.get("metadata") or {}).get("uid")


def _status(exc: Exception) -> int | None:
    return getattr(exc, "status", None)


def with_retries(fn: Callable[[], Any], *, attempts: int = 5, backoff_s: float = 0.1, what: str = "") -> Any:
    delay = backoff_s
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - ApiException and transport errors alike
            status = _status(exc)
            transient = status in RETRYABLE or (status is None and not isinstance(exc, (PublishError, ValueError)))
            if not transient or attempt + 1 == attempts:
                reason = getattr(exc, "reason", "") or exc
                raise PublishError(f"{what}: {status or ''} {reason}".replace(":  ", ": ").strip(), status) from None
            log.warning("%s failed (%s), retrying in %.1fs", what, status or exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
    raise AssertionError("unreachable")  # pragma: no cover


def _comparable(obj: dict[str, Any]) -> Any:
    spec = copy_object(obj.get("spec") or {})
    spec.get("pool", {}).pop("generation", None)
    owners = [(o.get("kind"), o.get("name"), o.get("uid")) for o in (obj.get("metadata") or {}).get("ownerReferences") or []]
    return spec, owners


class SlicePublisher:
    def __init__(self, client: SliceClient, *, node_name: str, driver_name: str, backoff_s: float = 0.1,
                 attempts: int = 5):
        self.client = client
        self.node_name = node_name
        self.driver_name = driver_name
        self.backoff_s = backoff_s
        self.attempts = attempts

    def _retry(self, fn: Callable[[], Any], what: str) -> Any:
        return with_retries(fn, attempts=self.attempts, backoff_s=self.backoff_s, what=what)

    def publish(self, build: Callable[[int, str | None], list[dict[str, Any]]]) -> dict[str, Any]:
        """`build(generation, node_uid)` returns the desired slices. Returns a summary."""
        node_uid = self._retry(lambda: self.client.node_uid(self.node_name), f"reading Node {self.node_name}")
        for _ in range(self.attempts):
            existing = self._retry(lambda: self.client.list(self.node_name, self.driver_name), "listing ResourceSlices")
            ours = [s for s in existing if ((s.get("spec") or {}).get("pool") or {}).get("name") == self.node_name]
            current_gen = max((s["spec"]["pool"].get("generation", 0) for s in ours), default=0)
            desired = build(max(current_gen, 1), node_uid)
            by_name = {s["metadata"]["name"]: s for s in existing}
            unchanged = (
                current_gen > 0
                and len(existing) == len(desired)
                and all(d["metadata"]["name"] in by_name for d in desired)
                and all(_comparable(by_name[d["metadata"]["name"]]) == _comparable(d) for d in desired)
                and all(s["spec"]["pool"].get("generation") == current_gen for s in ours)
            )
            if unchanged:
                return {"generation": current_gen, "created": 0, "updated": 0, "deleted": 0, "unchanged": len(desired)}
            generation = current_gen + 1
            desired = build(generation, node_uid)
            summary = {"generation": generation, "created": 0, "updated": 0, "deleted": 0, "unchanged": 0}
            try:
                for obj in desired:
                    name = obj["metadata"]["name"]
                    if name in by_name:
                        body = copy_object(obj)
                        version = (by_name[name].get("metadata") or {}).get("resourceVersion")
                        if version:
                            body["metadata"]["resourceVersion"] = version
                        self._retry(functools.partial(self.client.replace, name, body), f"updating ResourceSlice {name}")
                        summary["updated"] += 1
                    else:
                        self._retry(functools.partial(self.client.create, obj), f"creating ResourceSlice {name}")
                        summary["created"] += 1
                wanted = {d["metadata"]["name"] for d in desired}
                for name in by_name:
                    if name not in wanted:
                        self._retry(functools.partial(self._delete, name), f"deleting ResourceSlice {name}")
                        summary["deleted"] += 1
            except PublishError as exc:
                if exc.status == 409:
                    continue  # someone changed a slice under us: list again and redo
                raise
            return summary
        raise PublishError("ResourceSlices kept changing while publishing; giving up")

    def _delete(self, name: str) -> None:
        try:
            self.client.delete(name)
        except Exception as exc:  # noqa: BLE001
            if _status(exc) == 404:
                return
            raise

    def unpublish(self) -> int:
        existing = self._retry(lambda: self.client.list(self.node_name, self.driver_name), "listing ResourceSlices")
        for s in existing:
            self._retry(functools.partial(self._delete, s["metadata"]["name"]), "deleting ResourceSlice")
        return len(existing)
