"""gpudra's ComputeDomain controller as a process of its own against an API server (`gpudra driver
compute-domain-controller`), as NVIDIA runs cmd/compute-domain-controller in a Deployment: the local cluster's
reconcile (gpudra.cluster.computedomains) through KubeStore, every `interval_s` seconds until stopped.

NVIDIA's controller reacts to informer events; this one lists and reconciles every domain each round, as the
local cluster's control loop does: the same code, the same answers, a bounded delay (the interval) instead of a
watch. A round the API server fails (down, a timeout, a refused write) is logged and the next round tries again:
the controller never exits on a server error.
"""

from __future__ import annotations

import datetime
import logging
import threading
from typing import Any

from gpudra.cluster.computedomains import CONTROLLER, reconcile_compute_domains
from gpudra.cluster.store import StoreError
from gpudra.computedomain.controller import DEFAULT_DAEMON_POD, FROM_DAEMON_PODS, DaemonPod, StatusSource

from .kubestore import KubeStore
from .rest import ApiError, Rest, namespaced

log = logging.getLogger(__name__)


def post_event(rest: Rest, obj: dict[str, Any], type_: str, reason: str, message: str, component: str) -> None:
    """A core/v1 Event about `obj`, as client-go's event recorder writes one; best effort (a refused event is
    logged, never fatal), as the recorder treats it."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    host = (obj.get("spec") or {}).get("nodeName", "") if isinstance(obj.get("spec"), dict) else ""
    event = {"apiVersion": "v1", "kind": "Event",
             "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
             "involvedObject": {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", "Pod"),
                                "name": meta.get("name"), "namespace": namespace, "uid": meta.get("uid")},
             "reason": reason, "message": message[:1024], "type": type_, "count": 1,
             "firstTimestamp": stamp, "lastTimestamp": stamp,
             "source": {"component": component, "host": host},
             "reportingComponent": component, "reportingInstance": host}
    try:
        rest.call("POST", namespaced("v1", "events", namespace), event)
    except ApiError as exc:
        log.warning("event %s for %s/%s not recorded: %s", reason, namespace, meta.get("name"), exc)


def run_controller(rest: Rest, stop: threading.Event, interval_s: float,
                   source: StatusSource = FROM_DAEMON_PODS, daemon: DaemonPod = DEFAULT_DAEMON_POD) -> int:
    """Reconcile every ComputeDomain each `interval_s` seconds until `stop` is set; the number of rounds run."""
    store = KubeStore(rest)
    rounds = 0
    while not stop.is_set():
        try:
            reconcile_compute_domains(store, lambda *event: post_event(rest, *event),  # type: ignore[arg-type]
                                      lambda _kind, text: log.info("%s", text), source, daemon)
        except (StoreError, ApiError, OSError) as exc:  # OSError: urllib3's connection errors
            log.warning("%s: round failed, retrying in %ss: %s", CONTROLLER, interval_s, exc)
        rounds += 1
        stop.wait(interval_s)
    return rounds
