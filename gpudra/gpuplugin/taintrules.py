"""DeviceTaintRules for tainted devices, where the cluster serves them (KEP-5055, DRADeviceTaintRules).

The taints in the driver's own ResourceSlices are what the scheduler needs; with `--device-taint-rules` the
driver also keeps one DeviceTaintRule per (device, taint key) selecting exactly that device (driver, pool,
device) with the same taint. A rule is a cluster object of its own: `kubectl get devicetaintrules` lists the
node's unhealthy GPUs, and an operator can edit its effect (e.g. to NoExecute, evicting the pods using it) without
touching the driver. The API version is the first of resource.k8s.io/v1, v1beta2, v1alpha3 the API server
serves; when it serves none the driver says so once and publishes slice taints only. Rules carry the labels
below, so the driver finds (and deletes) exactly its node's rules when the taints go.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

from gpudra.kubeletplugin.publisher import KubeSliceClient, with_retries

log = logging.getLogger("gpudra.driver.taintrules")
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpudra")
NODE_LABEL = "gpudra/node"
NAME_MAX = 253


def _label_value(text: str) -> str:
    return text if len(text) <= 63 else text[:46] + "-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def rule_name(node_name: str, device: str, key: str) -> str:
    base = re.sub(r"[^a-z0-9.-]", "-", f"{node_name}-{device}-{key.rsplit('/', 1)[-1]}".lower()).strip("-.")
    digest = hashlib.sha256(f"{node_name}\0{device}\0{key}".encode()).hexdigest()[:8]
    return f"{base[:NAME_MAX - 9]}-{digest}"


def desired_rules(devices: list[dict[str, Any]], *, node_name: str, driver_name: str,
                  api_version: str) -> dict[str, dict[str, Any]]:
    rules = {}
    for device in devices:
        for taint in device.get("taints") or []:
            name = rule_name(node_name, device["name"], taint["key"])
            rules[name] = {
                "apiVersion": api_version, "kind": "DeviceTaintRule",
                "metadata": {"name": name, "labels": {MANAGED_BY[0]: MANAGED_BY[1],
                                                      NODE_LABEL: _label_value(node_name)}},
                "spec": {"deviceSelector": {"driver": driver_name, "pool": node_name, "device": device["name"]},
                         "taint": {k: v for k, v in taint.items() if k in ("key", "value", "effect")}},
            }
    return rules


def _comparable(rule: dict[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    """What the driver sets (the API server adds timeAdded to the taint)."""
    spec = rule.get("spec") or {}
    taint = spec.get("taint") or {}
    return spec.get("deviceSelector"), tuple(taint.get(k) for k in ("key", "value", "effect"))


class TaintRulePublisher:
    def __init__(self, client: KubeSliceClient, *, node_name: str, driver_name: str, backoff_s: float = 0.1):
        self.client = client
        self.node_name = node_name
        self.driver_name = driver_name
        self.backoff_s = backoff_s
        self.api_version: str | None = None
        self.supported: bool | None = None  # None: not probed yet

    def _retry(self, fn: Any, what: str) -> Any:
        return with_retries(fn, backoff_s=self.backoff_s, what=what)

    def sync(self, devices: list[dict[str, Any]]) -> dict[str, Any]:
        """Make this node's rules match the devices' taints; returns a summary."""
        if self.supported is None:
            self.api_version = self._retry(self.client.taint_rule_version, "probing DeviceTaintRule versions")
            self.supported = self.api_version is not None
            if not self.supported:
                log.info("the API server serves no DeviceTaintRule version: device taints in ResourceSlices only")
        if not self.supported:
            return {"supported": False}
        assert self.api_version is not None
        selector = f"{MANAGED_BY[0]}={MANAGED_BY[1]},{NODE_LABEL}={_label_value(self.node_name)}"
        existing = {r["metadata"]["name"]: r
                    for r in self._retry(lambda: self.client.list_taint_rules(selector), "listing DeviceTaintRules")}
        wanted = desired_rules(devices, node_name=self.node_name, driver_name=self.driver_name,
                               api_version=self.api_version)
        summary: dict[str, Any] = {"supported": True, "apiVersion": self.api_version, "created": 0, "updated": 0,
                                   "deleted": 0}
        for name, body in wanted.items():
            old = existing.get(name)
            if old is None:
                self._retry(lambda b=body: self.client.create_taint_rule(b), f"creating DeviceTaintRule {name}")
                summary["created"] += 1
            elif _comparable(old) != _comparable(body):
                update = {**body, "metadata": {**body["metadata"],
                                               "resourceVersion": old["metadata"].get("resourceVersion")}}
                self._retry(lambda b=update, n=name: self.client.replace_taint_rule(n, b),
                            f"updating DeviceTaintRule {name}")
                summary["updated"] += 1
        for name in existing.keys() - wanted.keys():
            self._retry(lambda n=name: self.client.delete_taint_rule(n), f"deleting DeviceTaintRule {name}")
            summary["deleted"] += 1
        return summary
