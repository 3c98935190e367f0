"""The kubelet plugin: DRAPlugin (v1 + v1beta1), plugin registration and gRPC health, on unix sockets."""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from typing import Any, Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from .paths import SOCKET_PATH_MAX, check_socket_path  # noqa: F401  (SOCKET_PATH_MAX: tests)
from .calls import DEFAULT_DEADLINE_S, CallAbandoned, CallToken, ClaimCalls
from .metrics import DriverMetrics
from .protos import (dra_health_v1_pb2, dra_health_v1_pb2_grpc, dra_health_v1alpha1_pb2, dra_health_v1alpha1_pb2_grpc,
                     dra_v1_pb2, dra_v1_pb2_grpc,
                     dra_v1beta1_pb2, dra_v1beta1_pb2_grpc, pluginregistration_pb2, pluginregistration_pb2_grpc)
from .claimref import ClaimRef, PrepareError


class ClaimPreparer(Protocol):
    """What a driver's node state offers the kubelet's DRA service (the GPU plugin's `DeviceState`, the
    compute-domain plugin's `ComputeDomainState`): crash-safe, idempotent prepare and unprepare per claim."""

    def prepare(self, ref: ClaimRef, token: CallToken | None = None) -> list[dict[str, Any]]: ...

    def unprepare(self, ref: ClaimRef) -> None: ...

log = logging.getLogger("gpudra.driver.plugin")

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
# Listed after the DRA services: the kubelet picks the first entry it supports as the DRA API version
# and, with its ResourceHealthStatus feature gate, opens the health stream when one of these is listed
# (v1 since 2026-05; v1alpha1 for older kubelets).
HEALTH_SERVICES_OFFERED = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
HEALTH_MESSAGE_MAX = 1024
HEALTH_STREAM_RESEND_S = 30.0  # the full list again even without a change (the kubelet times devices out)
HEALTH_SERVICES = ("", "liveness")
SOCKET_MODE = 0o600  # the kubelet (root) is the only client
GROUP_SOCKET_MODE = 0o660  # with --socket-group: that group's members may connect too


def _bind_private(server: grpc.Server, path: str, group: int | None) -> None:
    """gRPC binds and listens in `add_insecure_port`: create the socket with mode 0600 (a umask
    for that moment; the kubelet cannot know this plugin yet, so no other thread of ours is
    creating files), then widen it for the group if one is given."""
    old = os.umask(0o177)
    try:
        server.add_insecure_port(f"unix://{path}")
    finally:
        os.umask(old)
    os.chmod(path, SOCKET_MODE)
    if group is not None:
        os.chown(path, -1, group)
        os.chmod(path, GROUP_SOCKET_MODE)


def _claim_ref(claim: Any) -> ClaimRef:
    return ClaimRef(namespace=claim.namespace, name=claim.name, uid=claim.uid)


def _error_text(claim: Any, verb: str, outcome: BaseException) -> str:
    if isinstance(outcome, (PrepareError, CallAbandoned)):
        return str(outcome)
    log.error("%s %s/%s", verb, claim.namespace, claim.name, exc_info=outcome)
    return f"internal error {verb} claim: {outcome}"


def _time_remaining(context: grpc.ServicerContext) -> float | None:
    remaining = context.time_remaining() if context is not None else None
    return remaining if remaining is not None and remaining < 1e9 else None  # no deadline: a huge number


class _DraServicer:
    """Implements both API versions; `pb2` selects the message module. Each claim runs on its own
    thread and is answered by the deadline (`calls.py`): one slow or hostile claim holds up neither
    the others nor this server's health service."""

    def __init__(self, state: ClaimPreparer, pb2: Any, with_share_id: bool, calls: ClaimCalls,
                 metrics: DriverMetrics | None = None):
        self.state = state
        self.pb2 = pb2
        self.with_share_id = with_share_id
        self.calls = calls
        self.metrics = metrics

    def _timed(self, operation: str, fn: Any) -> Any:
        return self.metrics.timed(operation, fn) if self.metrics is not None else fn

    def _answered(self, operation: str, outcome: Any) -> None:
        if self.metrics is not None:
            self.metrics.answered(operation, isinstance(outcome, BaseException))

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = self.pb2.NodePrepareResourcesResponse()
        claims = list(request.claims)
        outcomes = self.calls.run(
            [(("prepare", claim.uid),
              self._timed("prepare", lambda token, ref=_claim_ref(claim):  # noqa: B008 - binds this claim's ref
                          self.state.prepare(ref, token)))
             for claim in claims], _time_remaining(context))
        for claim, outcome in zip(claims, outcomes):
            self._answered("prepare", outcome)
            answer = response.claims[claim.uid]  # every claim gets an entry, even on error
            if isinstance(outcome, BaseException):
                answer.error = _error_text(claim, "preparing", outcome)
                del answer.devices[:]
                continue
            for device in outcome:
                item = answer.devices.add(request_names=device["requestNames"], pool_name=device["poolName"],
                                          device_name=device["deviceName"], cdi_device_ids=device["cdiDeviceIDs"])
                if self.with_share_id and device.get("shareID"):
                    item.share_id = device["shareID"]
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = self.pb2.NodeUnprepareResourcesResponse()
        claims = list(request.claims)
        outcomes = self.calls.run(
            [(("unprepare", claim.uid),
              self._timed("unprepare", lambda token, ref=_claim_ref(claim):  # noqa: B008 - binds this claim's ref
                          self.state.unprepare(ref)))
             for claim in claims], _time_remaining(context))
        for claim, outcome in zip(claims, outcomes):
            self._answered("unprepare", outcome)
            answer = response.claims[claim.uid]
            if isinstance(outcome, BaseException):
                answer.error = _error_text(claim, "unpreparing", outcome)
        return response


class _V1(_DraServicer, dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self, state: ClaimPreparer, calls: ClaimCalls, metrics: DriverMetrics | None = None):
        super().__init__(state, dra_v1_pb2, True, calls, metrics)


class _V1beta1(_DraServicer, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    def __init__(self, state: ClaimPreparer, calls: ClaimCalls, metrics: DriverMetrics | None = None):
        super().__init__(state, dra_v1beta1_pb2, False, calls, metrics)


class HealthStreamServicer:
    """`NodeWatchResources`: the complete device list at once, then after every health change (and every
    HEALTH_STREAM_RESEND_S), until the kubelet hangs up or the plugin stops. `source` has `version`,
    `wait_for_change(version, timeout)` and `snapshot()` -> [{pool, device, health, message, updated}]."""

    def __init__(self, source: Any, stopping: threading.Event, pb2: Any = dra_health_v1alpha1_pb2,
                 resend_s: float = HEALTH_STREAM_RESEND_S):
        self.pb2 = pb2  # dra_health_v1_pb2 or dra_health_v1alpha1_pb2: the same messages in two packages
        self.source = source
        self.stopping = stopping
        self.resend_s = resend_s

    def _response(self) -> Any:
        pb2 = self.pb2
        codes = {"healthy": pb2.HEALTHY, "unhealthy": pb2.UNHEALTHY, "unknown": pb2.UNKNOWN}
        response = pb2.NodeWatchResourcesResponse()
        for item in self.source.snapshot():
            message = item["message"]
            if len(message) > HEALTH_MESSAGE_MAX:
                message = message[:HEALTH_MESSAGE_MAX - 3] + "..."
            response.devices.add(device=pb2.DeviceIdentifier(pool_name=item["pool"], device_name=item["device"]),
                                 health=codes[item["health"]], last_updated_time=int(item["updated"]),
                                 message=message)
        return response

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        version = self.source.version
        yield self._response()
        waited = 0.0
        while context.is_active() and not self.stopping.is_set():
            step = 0.2  # short steps: notice a gone client or a stopping plugin soon
            new = self.source.wait_for_change(version, step)
            waited += step
            if new != version or waited >= self.resend_s:
                version, waited = new, 0.0
                yield self._response()


class RegistrationServicer(pluginregistration_pb2_grpc.RegistrationServicer):
    def __init__(self, driver_name: str, endpoint: str, versions: tuple[str, ...] = SUPPORTED_VERSIONS):
        self.driver_name = driver_name
        self.endpoint = endpoint
        self.versions = versions
        self.registered = threading.Event()
        self.last_status: tuple[bool, str] | None = None

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pluginregistration_pb2.PluginInfo(type=PLUGIN_TYPE, name=self.driver_name, endpoint=self.endpoint,
                                                 supported_versions=list(self.versions))

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.last_status = (request.plugin_registered, request.error)
        if request.plugin_registered:
            log.info("registered with the kubelet")
            self.registered.set()
        else:
            log.error("kubelet rejected the plugin registration: %s", request.error)
            self.registered.clear()
        return pluginregistration_pb2.RegistrationStatusResponse()


def _remove_socket(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class KubeletPlugin:
    """Owns the two gRPC servers (DRA socket with health, registration socket)."""

    def __init__(self, state: ClaimPreparer, *, driver_name: str, dra_socket: str, registration_socket: str,
                 healthcheck_port: int | None = None, max_workers: int = 32, socket_group: int | None = None,
                 call_deadline_s: float = DEFAULT_DEADLINE_S, metrics: DriverMetrics | None = None,
                 health_source: Any = None):
        check_socket_path(dra_socket)
        check_socket_path(registration_socket)
        self.socket_group = socket_group
        self.state = state
        self.dra_socket = dra_socket
        self.registration_socket = registration_socket
        self.health = health.HealthServicer()
        versions = SUPPORTED_VERSIONS + (HEALTH_SERVICES_OFFERED if health_source is not None else ())
        self.registration = RegistrationServicer(driver_name, dra_socket, versions)
        self.stopping = threading.Event()
        self.calls = ClaimCalls(call_deadline_s)
        self._dra_server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="dra"))
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_V1(state, self.calls, metrics), self._dra_server)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(_V1beta1(state, self.calls, metrics), self._dra_server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._dra_server)
        if health_source is not None:
            dra_health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(
                HealthStreamServicer(health_source, self.stopping, dra_health_v1_pb2), self._dra_server)
            dra_health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(
                HealthStreamServicer(health_source, self.stopping, dra_health_v1alpha1_pb2), self._dra_server)
        self._reg_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="reg"))
        pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(self.registration, self._reg_server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._reg_server)
        self.healthcheck_port = healthcheck_port
        self._health_server: grpc.Server | None = None

    def start(self) -> None:
        for path in (self.dra_socket, self.registration_socket):
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            _remove_socket(path)  # stale socket from a previous (crashed) run
        _bind_private(self._dra_server, self.dra_socket, self.socket_group)
        self._dra_server.start()
        if self.healthcheck_port is not None:
            self._health_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self._health_server)
            # kubelet gRPC probes connect to the pod IP, so listen on all addresses (health only)
            self.healthcheck_port = self._health_server.add_insecure_port(f"0.0.0.0:{self.healthcheck_port}")
            self._health_server.start()
        for service in HEALTH_SERVICES:
            self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        # The registration socket goes last: once it appears the kubelet may call us.
        _bind_private(self._reg_server, self.registration_socket, self.socket_group)
        self._reg_server.start()

    def stop(self, grace: float = 2.0) -> None:
        self.stopping.set()  # ends open health streams
        for service in HEALTH_SERVICES:
            self.health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        self._reg_server.stop(grace).wait()
        _remove_socket(self.registration_socket)
        self._dra_server.stop(grace).wait()
        _remove_socket(self.dra_socket)
        if self._health_server is not None:
            self._health_server.stop(grace).wait()
