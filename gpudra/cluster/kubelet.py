"""The kubelet stand-in: prepares a bound pod's claims through its node's driver, starts its containers on paper.

For each pod bound to a node it calls `NodePrepareResources` on the node's driver over the kubelet-plugin unix
socket (the real gRPC API), applies the returned CDI device IDs to each container's OCI spec with the CDI
resolver (as containerd/CRI-O do), and records what the container would see. On pod deletion it calls
`NodeUnprepareResources` for the claims no other pod on the node still uses. A pod counts as started once its
record is written, so a pod is started (prepared) once, even across crashes and restarts.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Callable, NotRequired, TypedDict, cast

import grpc

from gpudra.atomicfile import write_atomic
from gpudra.cdi import CdiError, apply_devices, default_oci_spec
from gpudra.kubeletplugin.claimpaths import ClaimPathError, is_inside, uid_path
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from gpudra.kubeletplugin.plugin import HEALTH_SERVICES_OFFERED as HEALTH_SERVICES
from gpudra.kubeletplugin.protos import dra_health_v1alpha1_pb2, dra_health_v1alpha1_pb2_grpc
from gpudra.regularfile import read_regular_file
from gpudra.scheduler.resources import container_requests

from .layout import ClusterDir
from .store import FILE_MODE, now_rfc3339, private_dirs

if TYPE_CHECKING:
    from gpudra.allocator.features import Features

COMPONENT = "kubelet"
MAX_RECORD_BYTES = 16 << 20  # a pod's record: its claims' CDI edits and each container's view, far below this
# the pod API's ResourceHealthStatus values (k8s.io/api core/v1 types.go: ResourceHealthStatusHealthy, …)
HEALTHY, UNHEALTHY, UNKNOWN = "Healthy", "Unhealthy", "Unknown"
HEALTH_GATE = "ResourceHealthStatus"
Emit = Callable[[dict[str, Any], str, str, str, str], None]  # (object, type, reason, message, component)


# A started pod's record, one JSON file per pod in the node's kubelet directory: what it is stands in for the
# kubelet's own state (its claim-info cache and the containers' CDI edits). Readers use .get() for the fields
# records written before them lack.
class PreparedDevice(TypedDict):
    """One device NodePrepareResources returned for a claim."""
    driver: NotRequired[str]  # absent before drivers were recorded: the claim's only driver
    requestNames: list[str]
    pool: str
    device: str
    cdiDeviceIDs: list[str]


class PreparedClaim(TypedDict):
    namespace: str
    name: str
    uid: str
    devices: list[PreparedDevice]
    drivers: NotRequired[list[str]]  # the drivers that prepared it (absent in older records: the cluster's driver)


class ContainerView(TypedDict):
    """What a started container sees once its CDI devices are applied to the OCI spec."""
    name: str
    cdiDevices: list[str]
    deviceNodes: list[str]
    env: list[str]
    mounts: list[str]
    oci: dict[str, Any]  # the OCI runtime spec (JSON)


class PodRecord(TypedDict):
    pod: str  # namespace/name
    uid: str
    node: str
    startedAt: str
    claims: list[PreparedClaim]
    containers: list[ContainerView]


class Kubelet:
    def __init__(self, cluster: ClusterDir, driver_name: str, emit: Emit):
        self.cluster = cluster
        self.driver_name = driver_name
        self.emit = emit
        self._clients: dict[tuple[str, str], KubeletClient] = {}  # (node, driver)

    # ----- records ------------------------------------------------------------------------------
    def record_path(self, node: str, pod: dict[str, Any]) -> str:
        return record_path(self.cluster, node, pod)

    def record(self, node: str, pod: dict[str, Any]) -> PodRecord | None:
        return read_record(self.cluster, node, pod)

    def records(self, node: str) -> list[PodRecord]:
        directory = self.cluster.kubelet_dir(node)
        out = []
        for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
            if name.endswith(".json") and not name.startswith(".") and is_inside(directory, name):
                record = _load_record(os.path.join(directory, name))
                if record is not None:
                    out.append(record)
        return out

    def _write_record(self, node: str, pod: dict[str, Any], record: PodRecord) -> None:
        # atomic: the record is what says "started", so it is there whole or not at all
        path = self.record_path(node, pod)
        private_dirs(os.path.dirname(path))
        write_atomic(path, json.dumps(record, indent=1).encode(), mode=FILE_MODE, label="kubelet-pod", fsync=False)

    # ----- the plugin connection ----------------------------------------------------------------
    def _client(self, node: str, driver: str) -> KubeletClient:
        client = self._clients.get((node, driver))
        if client is None:
            client = KubeletClient(self.cluster.driver_paths(node, driver).registration_socket)
            client.register()
            self._clients[(node, driver)] = client
        return client

    def _call(self, node: str, driver: str, method: str, refs: list[tuple[str, str, str]]) -> tuple[Any, str | None]:
        try:
            client = self._client(node, driver)
            return getattr(client, method)(refs, timeout=10.0), None
        except grpc.RpcError as exc:
            self._clients.pop((node, driver), None)
            return None, f"rpc error: code = {exc.code().name.title().replace('_', '')} desc = {exc.details()}"
        except RuntimeError as exc:
            return None, str(exc)

    def _drivers(self, claim: dict[str, Any]) -> list[str]:
        """The drivers of a claim's allocated devices: each prepares its own (the kubelet calls every one)."""
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        drivers = sorted({r["driver"] for r in results if isinstance(r, dict) and isinstance(r.get("driver"), str)})
        return drivers or [self.driver_name]

    def device_health(self, node: str, driver: str) -> dict[tuple[str, str], str]:
        """(pool, device) -> Healthy | Unhealthy | Unknown as the driver's health stream (NodeWatchResources,
        v1alpha1 as kubelet 1.34 asks for it) reports it now: its first message is the complete device list.
        Nothing reported (a driver without the stream, or an error) is an empty map: every device Unknown, as the
        kubelet's health cache answers for a driver whose stream ended (clearDriver)."""
        try:
            client = self._client(node, driver)
            if not set(HEALTH_SERVICES) & set(client.info.supported_versions):
                return {}
            with grpc.insecure_channel(f"unix://{client.info.endpoint}") as channel:
                stream = dra_health_v1alpha1_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                    dra_health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=10.0)
                try:
                    reply = next(stream)
                finally:
                    stream.cancel()
        except (grpc.RpcError, RuntimeError, StopIteration):
            self._clients.pop((node, driver), None)
            return {}
        names = {dra_health_v1alpha1_pb2.HEALTHY: HEALTHY, dra_health_v1alpha1_pb2.UNHEALTHY: UNHEALTHY}
        return {(d.device.pool_name, d.device.device_name): names.get(d.health, UNKNOWN) for d in reply.devices}

    def record_health(self, record: PodRecord, seen: dict[tuple[str, str], dict[tuple[str, str], str]]
                      ) -> dict[tuple[str, str, str], str]:
        """(driver, pool, device) -> health for the devices of a started pod's claims, each driver's stream read
        once per `seen` (one round of the caller's)."""
        drivers = sorted({device_driver(c, d, self.driver_name) for c in record.get("claims") or []
                          for d in c.get("devices") or []})
        out = {}
        for driver in drivers:
            key = (str(record.get("node")), driver)
            if key not in seen:
                seen[key] = self.device_health(*key)
            out.update({(driver, pool, device): state for (pool, device), state in seen[key].items()})
        return out

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    # ----- pod lifecycle ------------------------------------------------------------------------
    def start_pod(self, pod: dict[str, Any], claims: list[dict[str, Any]], pod_claim_names: dict[str, str]) -> bool:
        """Prepare the pod's claims and start its containers; False when preparing failed (retried later)."""
        node = pod["spec"]["nodeName"]
        refs = [(c["metadata"]["namespace"], c["metadata"]["name"], c["metadata"]["uid"]) for c in claims]
        drivers = {c["metadata"]["uid"]: self._drivers(c) for c in claims}
        prepared: dict[str, list[PreparedDevice]] = {}
        if refs:
            failures = []
            for driver in sorted({d for names in drivers.values() for d in names}):
                mine = [ref for ref in refs if driver in drivers[ref[2]]]
                reply, error = self._call(node, driver, "prepare", mine)
                for _namespace, name, uid in mine:
                    answer = reply.claims[uid] if reply is not None else None
                    if answer is None or answer.error:
                        failures.append(f"NodePrepareResources failed for ResourceClaim {name}: "
                                        f"{answer.error if answer is not None else error}")
                        continue
                    prepared.setdefault(name, []).extend(
                        PreparedDevice(driver=driver, requestNames=list(d.request_names), pool=d.pool_name,
                                       device=d.device_name, cdiDeviceIDs=list(d.cdi_device_ids))
                        for d in answer.devices)
            if failures:
                self.emit(pod, "Warning", "FailedPrepareDynamicResources",
                          "Failed to prepare dynamic resources: " + "; ".join(failures), COMPONENT)
                return False
        containers: list[ContainerView] = []
        paths = self.cluster.driver_paths(node, self.driver_name)
        for container in (pod.get("spec") or {}).get("containers") or []:
            ids: list[str] = []
            uses = [(pod_claim_names.get(use.get("name", ""), ""), use.get("request"))
                    for use in (container.get("resources") or {}).get("claims") or []]
            for claim_name, request in uses + extended_uses(pod, container):
                for device in prepared.get(claim_name, []):
                    if request and request not in device["requestNames"]:
                        continue
                    ids.extend(i for i in device["cdiDeviceIDs"] if i not in ids)
            try:
                oci = apply_devices(default_oci_spec(), ids, paths.cdi_spec_dirs)
            except CdiError as exc:
                self.emit(pod, "Warning", "Failed", f"Error: failed to inject CDI devices: {exc}", COMPONENT)
                return False
            containers.append(ContainerView(
                name=container.get("name"), cdiDevices=ids,
                deviceNodes=[d["path"] for d in (oci.get("linux") or {}).get("devices", [])],
                env=[e for e in oci["process"]["env"] if not e.startswith("PATH=")],
                mounts=[m["destination"] for m in oci.get("mounts", []) if m["destination"] not in ("/proc", "/dev")],
                oci=oci))
        record = PodRecord(pod=f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", uid=pod["metadata"]["uid"],
                           node=node, startedAt=now_rfc3339(),
                           claims=[PreparedClaim(namespace=ns, name=name, uid=uid, devices=prepared.get(name, []),
                                                 drivers=drivers[uid]) for ns, name, uid in refs],
                           containers=containers)
        self._write_record(node, pod, record)
        for view in containers:
            self.emit(pod, "Normal", "Started", f"Started container {view['name']}", COMPONENT)
        return True

    def stop_pod(self, pod: dict[str, Any], still_used: set[str]) -> bool:
        """Unprepare the pod's claims that no other started pod on the node uses; False when that failed."""
        node = pod["spec"]["nodeName"]
        record = self.record(node, pod)
        if record is None:
            return True
        claims = [c for c in record["claims"] if c["uid"] not in still_used]
        failures = []
        for driver in sorted({d for c in claims for d in c.get("drivers") or [self.driver_name]}):
            refs = [(c["namespace"], c["name"], c["uid"]) for c in claims
                    if driver in (c.get("drivers") or [self.driver_name])]
            reply, error = self._call(node, driver, "unprepare", refs)
            failures += [f"NodeUnprepareResources failed for ResourceClaim {name}: "
                         f"{reply.claims[uid].error if reply is not None else error}"
                         for _, name, uid in refs if reply is None or reply.claims[uid].error]
        if failures:
            self.emit(pod, "Warning", "FailedUnprepareDynamicResources", "; ".join(failures), COMPONENT)
            return False
        for view in record["containers"]:
            self.emit(pod, "Normal", "Killing", f"Stopping container {view['name']}", COMPONENT)
        try:
            os.unlink(self.record_path(node, pod))
        except FileNotFoundError:
            pass
        return True


def extended_claim_name(pod: dict[str, Any]) -> str | None:
    """The claim the scheduler created for the pod's extended-resource requests (status.extendedResourceClaimStatus,
    k8s.io/api core/v1 PodExtendedResourceClaimStatus), or None."""
    name = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    return name if isinstance(name, str) and name else None


def extended_uses(pod: dict[str, Any], container: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(claim name, request name) for each extended resource the container requests that the pod's extended claim
    serves: the kubelet's DRA manager gives a container the devices of the requestMappings entry that names it and
    a resource it requests (pkg/kubelet/cm/dra/manager.go, GetResources)."""
    claim = extended_claim_name(pod)
    if claim is None:
        return []
    requested = {name for name, value in container_requests(container).items() if value > 0}
    mappings = (pod.get("status") or {}).get("extendedResourceClaimStatus", {}).get("requestMappings") or []
    return [(claim, m.get("requestName")) for m in mappings if isinstance(m, dict) and m.get("requestName")
            and m.get("containerName") == container.get("name") and m.get("resourceName") in requested]


def prepared_claims(record: PodRecord | None) -> list[PreparedClaim]:
    """The claims a started pod's record says were prepared (none without a record)."""
    return (record.get("claims") or []) if record is not None else []


def running_status(pod: dict[str, Any], record: PodRecord) -> dict[str, Any]:
    """The pod status the kubelet reports once the containers run."""
    status = dict(pod.get("status") or {})
    started = record["startedAt"]
    status["phase"] = "Running"
    status["startTime"] = status.get("startTime") or started
    scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
    # the kubelet's order (kubectl get pod -o yaml on a running pod): PodScheduled, written by the scheduler, last
    status["conditions"] = [{"type": kind, "status": "True", "lastTransitionTime": started}
                            for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
                            ] + scheduled
    status["containerStatuses"] = [
        {"name": c.get("name"), "image": c.get("image", ""), "ready": True, "started": True, "restartCount": 0,
         "state": {"running": {"startedAt": started}}}
        for c in (pod.get("spec") or {}).get("containers") or []]
    return status


def device_driver(claim: PreparedClaim, device: PreparedDevice, default: str) -> str:
    """The driver that prepared a recorded device (records before drivers were kept: the claim's only driver)."""
    return str(device.get("driver") or next(iter(claim.get("drivers") or []), default))


def allocated_resources_status(pod: dict[str, Any], record: PodRecord,
                               health: dict[tuple[str, str, str], str], default_driver: str
                               ) -> dict[str, list[dict[str, Any]]]:
    """Container name -> its `allocatedResourcesStatus` (KEP-4680), as the kubelet's DRA manager writes it
    (pkg/kubelet/cm/dra/manager.go, UpdateAllocatedResourcesStatus, v1.34): per entry of the container's
    `resources.claims`, named `claim:<name>` or `claim:<name>/<request>`, every device prepared for the claim
    (all its requests, not only the named one), each as its first CDI device ID (else `driver/pool/device`) with
    Healthy, Unhealthy or Unknown (never reported). Like upstream, the claim is found through
    `status.resourceClaimStatuses` only, so a claim the pod names directly (`resourceClaimName`) gets no entry;
    containers without claims and entries without devices are left out. Upstream's order is a Go map's (random);
    here it is by name."""
    generated = {s.get("name"): s.get("resourceClaimName")
                 for s in (pod.get("status") or {}).get("resourceClaimStatuses") or [] if isinstance(s, dict)}
    claims = {c.get("name"): c for c in record.get("claims") or []}
    out: dict[str, list[dict[str, Any]]] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        entries: dict[str, list[dict[str, Any]]] = {}
        for use in (container.get("resources") or {}).get("claims") or []:
            claim = claims.get(generated.get(use.get("name")) or "")
            if claim is None:
                continue
            name = f"claim:{use.get('name')}" + (f"/{use['request']}" if use.get("request") else "")
            entries[name] = [
                {"resourceID": next(iter(device.get("cdiDeviceIDs") or []), None)
                 or f"{device_driver(claim, device, default_driver)}/{device.get('pool')}/{device.get('device')}",
                 "health": health.get((device_driver(claim, device, default_driver), str(device.get("pool")),
                                       str(device.get("device"))), UNKNOWN)}
                for device in claim.get("devices") or []]
        statuses = [{"name": name, "resources": resources} for name, resources in sorted(entries.items()) if resources]
        if statuses:
            out[str(container.get("name"))] = statuses
    return out


def with_resource_health(status: dict[str, Any], by_container: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """`status` with each container status's allocatedResourcesStatus set from `by_container` (removed where the
    container has none)."""
    status = dict(status)
    containers = []
    for entry in status.get("containerStatuses") or []:
        entry = {k: v for k, v in entry.items() if k != "allocatedResourcesStatus"}
        if by_container.get(str(entry.get("name"))):
            entry["allocatedResourcesStatus"] = by_container[entry["name"]]
        containers.append(entry)
    status["containerStatuses"] = containers
    return status


def resource_health_enabled(features: Features | None, version: str) -> bool:
    """Whether the cluster's ResourceHealthStatus gate is on (`--features` names it, else the release's default):
    the kubelet fills allocatedResourcesStatus, and the API server keeps it, only then."""
    from gpudra.versions import gate_state

    named = features.gate_enabled(HEALTH_GATE) if features is not None else None
    return bool(gate_state(HEALTH_GATE, version).default if named is None else named)


def waiting_status(pod: dict[str, Any]) -> dict[str, Any]:
    status = dict(pod.get("status") or {})
    status["containerStatuses"] = [
        {"name": c.get("name"), "image": c.get("image", ""), "ready": False, "started": False, "restartCount": 0,
         "state": {"waiting": {"reason": "ContainerCreating"}}}
        for c in (pod.get("spec") or {}).get("containers") or []]
    return status


def record_path(cluster: ClusterDir, node: str, pod: dict[str, Any]) -> str:
    """Where the kubelet stand-in keeps what it did for a started pod (claims prepared, each container's view):
    named by the pod's uid, which must be one (the store assigns them) and is proven to stay inside the node's
    directory (ClaimPathError otherwise)."""
    return uid_path(cluster.kubelet_dir(node), str((pod.get("metadata") or {}).get("uid")), suffix=".json")


def _load_record(path: str) -> PodRecord | None:
    try:
        raw = read_regular_file(path, MAX_RECORD_BYTES)
        record = None if raw is None else json.loads(raw)
    except (OSError, ValueError, RecursionError):  # a symlink, a FIFO, half a crash: as if the pod had not started
        return None
    # the parsing edge: a JSON object in the kubelet's own directory is taken as the record it wrote
    return cast(PodRecord, record) if isinstance(record, dict) else None


def read_record(cluster: ClusterDir, node: str, pod: dict[str, Any]) -> PodRecord | None:
    try:
        return _load_record(record_path(cluster, node, pod))
    except ClaimPathError:
        return None
