"""Prometheus metrics of the node driver, served over HTTP with the official client (prometheus_client).

NVIDIA's plugin exposes its metrics on `HTTP_ENDPOINT`/`METRICS_PATH`; here `gpudra driver run
--metrics-port PORT` serves `/metrics` on all addresses. Each agent has its own registry, so several
agents in one process (tests) do not collide.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

# prepare/unprepare latencies: mostly milliseconds (CDI file + checkpoint), seconds with MIG creation
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _DeviceStates:
    """`gpudra_devices{state=...}` computed at scrape time from the driver's own view."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]):
        self.counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("gpudra_devices", "Devices of this node by state: published in ResourceSlices, "
                                   "held by prepared claims, being prepared", labels=["state"])
        for state, value in sorted(self.counts().items()):
            family.add_metric([state], value)
        yield family


class _DeviceHealthStates:
    """`gpudra_device_health{state=healthy|unhealthy|unknown}`: published devices by health state."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]):
        self.counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("gpudra_device_health", "Published devices of this node by health state "
                                   "(unhealthy: a NoSchedule/NoExecute taint; unknown: not monitored)",
                                   labels=["state"])
        for state, value in sorted(self.counts().items()):
            family.add_metric([state], value)
        yield family


class DriverMetrics:
    def __init__(self, device_counts: Callable[[], Mapping[str, int]] | None = None,
                 health_counts: Callable[[], Mapping[str, int]] | None = None):
        self.registry = CollectorRegistry()
        self.requests = Counter("gpudra_claim_requests", "NodePrepareResources/NodeUnprepareResources claims handled",
                                ["operation", "result"], registry=self.registry)
        self.latency = Histogram("gpudra_claim_request_duration_seconds", "Time to prepare or unprepare one claim",
                                 ["operation"], buckets=_BUCKETS, registry=self.registry)
        self.publications = Counter("gpudra_slice_publications", "ResourceSlice publications (start and republish)",
                                    registry=self.registry)
        self.health_events = Counter("gpudra_health_events", "GPU health events received, by kind (xid, ecc, "
                                     "gpu-lost, unmonitored) and the effect of the taint they set",
                                     ["kind", "effect"], registry=self.registry)
        if device_counts is not None:
            self.registry.register(_DeviceStates(device_counts))
        if health_counts is not None:
            self.registry.register(_DeviceHealthStates(health_counts))
        self._server: Any = None

    def timed(self, operation: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` (one claim's prepare/unprepare, run on the claim's own thread) with its duration observed."""
        def run(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.latency.labels(operation).observe(time.perf_counter() - start)
        return run

    def answered(self, operation: str, failed: bool) -> None:
        """One claim answered to the kubelet (an error includes a claim abandoned at the call's deadline)."""
        self.requests.labels(operation, "error" if failed else "success").inc()

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Serve /metrics; returns the port (useful with 0)."""
        self._server, _ = start_http_server(port, addr=addr, registry=self.registry)
        return int(self._server.server_address[1])

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
