"""A kubelet-side client for the plugin sockets (used by tests, the benchmark and demos).

It does what the kubelet's plugin watcher and DRA manager do over gRPC: GetInfo,
pick the first supported API version, NotifyRegistrationStatus, then call
NodePrepareResources / NodeUnprepareResources on the endpoint it was given.
"""

from __future__ import annotations

from typing import Any

import grpc

from .protos import (dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc, pluginregistration_pb2,
                     pluginregistration_pb2_grpc)

KUBELET_SUPPORTED = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
CALL_TIMEOUT_S = 45.0  # the kubelet's per-call timeout


class KubeletClient:
    def __init__(self, registration_socket: str):
        self.registration_socket = registration_socket
        self.info: Any = None
        self.version: str | None = None
        self._channel: grpc.Channel | None = None
        self._stub: Any = None
        self._pb2: Any = None

    def register(self, *, force_version: str | None = None) -> Any:
        with grpc.insecure_channel(f"unix://{self.registration_socket}") as channel:
            reg = pluginregistration_pb2_grpc.RegistrationStub(channel)
            info = reg.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=CALL_TIMEOUT_S)
            wanted = [force_version] if force_version else list(KUBELET_SUPPORTED)
            version = next((v for v in info.supported_versions if v in wanted), None)
            ok = info.type == "DRAPlugin" and version is not None
            error = "" if ok else f"no supported DRA API version in {list(info.supported_versions)}"
            reg.NotifyRegistrationStatus(pluginregistration_pb2.RegistrationStatus(plugin_registered=ok, error=error),
                                         timeout=CALL_TIMEOUT_S)
        if not ok:
            raise RuntimeError(error)
        self.info, self.version = info, version
        self._channel = grpc.insecure_channel(f"unix://{info.endpoint}")
        if version == "v1.DRAPlugin":
            self._stub, self._pb2 = dra_v1_pb2_grpc.DRAPluginStub(self._channel), dra_v1_pb2
        else:
            self._stub, self._pb2 = dra_v1beta1_pb2_grpc.DRAPluginStub(self._channel), dra_v1beta1_pb2
        return info

    def _claims(self, claims: list[tuple[str, str, str]]) -> list[Any]:
        return [self._pb2.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]

    def prepare(self, claims: list[tuple[str, str, str]], timeout: float = CALL_TIMEOUT_S) -> Any:
        return self._stub.NodePrepareResources(self._pb2.NodePrepareResourcesRequest(claims=self._claims(claims)),
                                               timeout=timeout)

    def unprepare(self, claims: list[tuple[str, str, str]], timeout: float = CALL_TIMEOUT_S) -> Any:
        return self._stub.NodeUnprepareResources(
            self._pb2.NodeUnprepareResourcesRequest(claims=self._claims(claims)), timeout=timeout)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
