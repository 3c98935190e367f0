"""The node stand-in for a real control plane: `python -m gpudra.kubecluster.kubelet DIR`.

It does for gpudra's simulated nodes what KWOK does for fake ones, plus the one part of the kubelet DRA is about:
- Nodes: creates each Node with its labels, capacity and a Ready condition, renews its Lease in kube-node-lease
  every 10 s (what the node lifecycle controller watches) and re-posts the status every minute;
- pods bound to its nodes: waits until every claim the pod names (spec.resourceClaims, through
  status.resourceClaimStatuses for claims from templates, and status.extendedResourceClaimStatus) is allocated and
  reserved for the pod, calls NodePrepareResources on each claim's driver over the kubelet plugin socket, as the
  kubelet's DRA manager does (pkg/kubelet/cm/dra/manager.go: PrepareResources before the containers start),
  applies the CDI devices to each container's OCI spec (gpudra.cluster.kubelet: the same code as the embedded
  cluster's kubelet) and posts the pod Running; with the ResourceHealthStatus gate on, patches a running pod's
  containerStatuses[].allocatedResourcesStatus from its drivers' health streams (gpudra.cluster.kubelet);
- a pod being deleted: NodeUnprepareResources for the claims no other pod of the node still uses
  (UnprepareResources after the containers stop), then the pod is deleted for good (grace period 0, with its uid
  as precondition), as the kubelet does once its containers are gone.
Events go to the API server as the kubelet's (source component "kubelet", host the node).
"""

from __future__ import annotations

import datetime
import logging
import signal
import sys
import threading
import time
from typing import Any

from gpudra.cluster.kubelet import (Kubelet, allocated_resources_status, extended_claim_name, prepared_claims,
                                   resource_health_enabled, running_status, with_resource_health)
from gpudra.cluster.layout import ClusterConfig, ClusterDir, NodeSpec
from gpudra.cluster.nodes import node_object
from gpudra.api.podgroupclaims import is_reserved_for_pod, workload_claims_enabled
from gpudra.versions import parse_version

from .cdcontroller import post_event
from .kubestore import KubeStore
from .rest import ApiError, Rest, cluster_scoped, namespaced

MODULE = "gpudra.kubecluster.kubelet"
LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0
STATUS_REPORT_S = 60.0
POD_POLL_S = 0.5

log = logging.getLogger("gpudra.kubecluster.kubelet")


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_address(index: int) -> str:
    """A node's InternalIP: loopback addresses, one per node (nothing connects to them; they only have to differ)."""
    return f"127.0.{index // 250}.{index % 250 + 2}"


def pod_ip(node_index: int, serial: int) -> str:
    return f"127.{100 + node_index // 250}.{node_index % 250}.{serial % 250 + 2}"


def claim_names(pod: dict[str, Any]) -> dict[str, str] | None:
    """podClaim name -> ResourceClaim name, the extended-resource claim under its own name; None while a claim
    made from a template is not yet named in the pod's status (the resourceclaim controller is behind)."""
    status = pod.get("status") or {}
    generated = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    names: dict[str, str] = {}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if entry.get("resourceClaimName"):
            names[entry["name"]] = entry["resourceClaimName"]
        elif entry.get("resourceClaimTemplateName"):
            if entry["name"] not in generated:
                return None
            if generated[entry["name"]]:  # null: the template was not needed (no claim for this pod)
                names[entry["name"]] = generated[entry["name"]]
    extended = extended_claim_name(pod)
    if extended:  # keyed by no podClaim name: the containers reach it through its requestMappings
        names[""] = extended
    return names


class NodeStandIn:
    """Every node of one local cluster on a real API server."""

    def __init__(self, cluster: ClusterDir, config: ClusterConfig, rest: Rest):
        self.cluster = cluster
        self.config = config
        self.rest = rest
        self.nodes = {n.name: i for i, n in enumerate(config.nodes)}
        self.kubelet = Kubelet(cluster, config.driver_name, self.emit)
        self.store = KubeStore(rest)
        self.health_on = resource_health_enabled(config.feature_gates(), config.kubernetes_version)
        self.group_claims = workload_claims_enabled(parse_version(config.kubernetes_version), config.feature_gates())
        self._serials: dict[str, int] = {}
        # the nodes report the control plane's own patch release, as kubelets built with it would
        self.release = str((rest.get("/version") or {}).get("gitVersion") or f"v{config.kubernetes_version}.0")

    # ----- nodes --------------------------------------------------------------------------------
    def node_status(self, spec: NodeSpec) -> dict[str, Any]:
        status: dict[str, Any] = node_object(spec, self.config.kubernetes_version)["status"]
        stamp = now()
        for condition in status["conditions"]:
            condition.update(lastHeartbeatTime=stamp, lastTransitionTime=condition.get("lastTransitionTime", stamp))
        status["addresses"] = [{"type": "InternalIP", "address": node_address(self.nodes[spec.name])},
                               {"type": "Hostname", "address": spec.name}]
        status["nodeInfo"].update(kubeletVersion=self.release, kernelVersion="simulated", osImage="gpudra simulated node",
                                  containerRuntimeVersion="gpudra://simulated", kubeProxyVersion="",
                                  machineID=spec.name, systemUUID=spec.name, bootID=spec.name)
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 0}}
        return status

    def register_nodes(self) -> None:
        for spec in self.config.nodes:
            node = node_object(spec, self.config.kubernetes_version)
            node.pop("status")
            current = self.rest.get_or_none(cluster_scoped("v1", "nodes", spec.name))
            if current is None:
                try:
                    current = self.rest.call("POST", cluster_scoped("v1", "nodes"), node)
                except ApiError as exc:
                    if exc.status != 409:
                        raise
                    current = self.rest.get(cluster_scoped("v1", "nodes", spec.name))
            self.post_status(spec)
            self.renew_lease(spec.name, current["metadata"]["uid"])

    def post_status(self, spec: NodeSpec) -> None:
        previous = self.rest.get(cluster_scoped("v1", "nodes", spec.name))
        status = self.node_status(spec)
        for condition in status["conditions"]:  # a transition time moves only when the status does
            old = next((c for c in (previous.get("status") or {}).get("conditions") or []
                        if c.get("type") == condition["type"]), None)
            if old and old.get("status") == condition["status"] and old.get("lastTransitionTime"):
                condition["lastTransitionTime"] = old["lastTransitionTime"]
        self.rest.call("PATCH", cluster_scoped("v1", "nodes", spec.name, "status"), {"status": status},
                       content_type="application/merge-patch+json")

    def renew_lease(self, node: str, node_uid: str | None = None) -> None:
        path = namespaced("coordination.k8s.io/v1", "leases", "kube-node-lease", node)
        spec = {"holderIdentity": node, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": _micro_now()}
        lease = self.rest.get_or_none(path)
        if lease is None:
            body: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                    "metadata": {"name": node, "namespace": "kube-node-lease"}, "spec": spec}
            if node_uid:  # owned by its Node, as the kubelet's lease is: deleting the Node removes it
                body["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node,
                                                        "uid": node_uid}]
            self.rest.call("POST", namespaced("coordination.k8s.io/v1", "leases", "kube-node-lease"), body)
            return
        lease["spec"].update(spec)
        self.rest.call("PUT", path, lease)

    # ----- events -------------------------------------------------------------------------------
    def emit(self, obj: dict[str, Any], kind: str, reason: str, message: str, component: str) -> None:
        post_event(self.rest, obj, kind, reason, message, component)

    # ----- pods ---------------------------------------------------------------------------------
    def our_pods(self) -> list[dict[str, Any]]:
        listed = self.rest.get("/api/v1/pods", fieldSelector="spec.nodeName!=")
        return [p for p in listed.get("items") or [] if p["spec"].get("nodeName") in self.nodes]

    def _claims_ready(self, pod: dict[str, Any], names: dict[str, str]) -> list[dict[str, Any]] | None:
        claims = []
        for claim_name in dict.fromkeys(names.values()):
            claim = self.rest.get_or_none(namespaced("resource.k8s.io/v1", "resourceclaims",
                                                     pod["metadata"]["namespace"], claim_name))
            status = (claim or {}).get("status") or {}
            # reserved for the pod, or for its PodGroup (pkg/kubelet/cm/dra/manager.go: IsReservedForPod, 1.36)
            if claim is None or not status.get("allocation") or not is_reserved_for_pod(pod, claim, self.group_claims):
                return None  # the kubelet waits for the scheduler's reservation before it prepares
            claims.append(claim)
        return claims

    def start(self, pod: dict[str, Any]) -> None:
        names = claim_names(pod)
        if names is None:
            return
        claims = self._claims_ready(pod, names)
        if claims is None:
            return
        for claim in claims:
            claim.setdefault("apiVersion", "resource.k8s.io/v1")
        pod.setdefault("kind", "Pod")
        pod.setdefault("apiVersion", "v1")
        node = pod["spec"]["nodeName"]
        if self.kubelet.record(node, pod) is None and not self.kubelet.start_pod(pod, claims, names):
            return  # prepare failed: the event says why; retried on the next round
        record = self.kubelet.record(node, pod)
        if record is None:
            return
        status = running_status(pod, record)
        serial = self._serials.setdefault(pod["metadata"]["uid"], len(self._serials))
        address = pod_ip(self.nodes[node], serial)
        status.update(hostIP=node_address(self.nodes[node]), podIP=address, podIPs=[{"ip": address}],
                      hostIPs=[{"ip": node_address(self.nodes[node])}], qosClass=status.get("qosClass") or "BestEffort")
        try:
            self.rest.call("PATCH", namespaced("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"],
                                               "status"), {"status": status},
                           content_type="application/merge-patch+json")
        except ApiError as exc:
            if exc.status != 404:
                raise

    def stop(self, pod: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        node = pod["spec"]["nodeName"]
        still_used = set()
        for other in pods:
            if other["metadata"]["uid"] != pod["metadata"]["uid"] and other["spec"].get("nodeName") == node:
                record = self.kubelet.record(node, other)
                still_used |= {c["uid"] for c in prepared_claims(record)}
        pod.setdefault("kind", "Pod")
        if not self.kubelet.stop_pod(pod, still_used):
            return
        try:
            self.rest.call("DELETE", namespaced("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"]),
                           {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                            "preconditions": {"uid": pod["metadata"]["uid"]}})
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise

    def sync_compute_domains(self) -> None:
        """NVIDIA's ComputeDomain controller, as the local cluster runs it (gpudra.cluster.computedomains), on the
        real API server: templates, the IMEX daemons' DaemonSet (the real DaemonSet controller makes its pods),
        node labels, status from the daemons' readiness, teardown."""
        from gpudra.cluster.computedomains import reconcile_compute_domains

        reconcile_compute_domains(self.store, self.emit,  # type: ignore[arg-type]
                                  lambda kind, text: log.info("%s", text))

    def report_health(self, pod: dict[str, Any], seen: dict[tuple[str, str], dict[tuple[str, str], str]]) -> None:
        """A running pod's allocatedResourcesStatus from its drivers' health streams, patched when it changed (the
        kubelet's DRA manager: a health change of a device triggers a status update of the pods that use it)."""
        record = self.kubelet.record(pod["spec"]["nodeName"], pod)
        if record is None:
            return
        health = self.kubelet.record_health(record, seen)
        status = with_resource_health(pod["status"], allocated_resources_status(pod, record, health,
                                                                                 self.config.driver_name))
        if status["containerStatuses"] == pod["status"].get("containerStatuses"):
            return
        try:
            self.rest.call("PATCH", namespaced("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"],
                                               "status"), {"status": {"containerStatuses": status["containerStatuses"]}},
                           content_type="application/merge-patch+json")
        except ApiError as exc:
            if exc.status != 404:
                raise

    def sync_pods(self) -> None:
        pods = self.our_pods()
        seen: dict[tuple[str, str], dict[tuple[str, str], str]] = {}  # each driver's health stream, once a round
        for pod in pods:
            try:
                if pod["metadata"].get("deletionTimestamp"):
                    self.stop(pod, pods)
                elif (pod.get("status") or {}).get("phase") in (None, "Pending") or not pod["status"].get("podIP"):
                    self.start(pod)
                elif self.health_on and pod["status"].get("phase") == "Running":
                    self.report_health(pod, seen)
            except ApiError as exc:
                log.warning("pod %s/%s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], exc)
        self.forget_gone(pods)

    def forget_gone(self, pods: list[dict[str, Any]]) -> None:
        """Records of pods the API server no longer has (deleted with --force before we saw it): unprepare."""
        present = {p["metadata"]["uid"] for p in pods}
        for node in self.nodes:
            held = {c["uid"] for p in pods if p["spec"].get("nodeName") == node
                    for c in prepared_claims(self.kubelet.record(node, p))}
            for record in self.kubelet.records(node):
                if record.get("uid") not in present:
                    namespace, _, name = str(record.get("pod", "/")).partition("/")
                    gone = {"apiVersion": "v1", "kind": "Pod", "spec": {"nodeName": node},
                            "metadata": {"uid": record.get("uid"), "namespace": namespace, "name": name}}
                    self.kubelet.stop_pod(gone, held)


def serve(stand_in: NodeStandIn, stopping: threading.Event) -> None:
    stand_in.register_nodes()
    print("node stand-in ready", file=sys.stderr, flush=True)
    last_lease = last_status = time.monotonic()
    while not stopping.is_set():
        try:
            if time.monotonic() - last_lease >= LEASE_RENEW_S:
                for name in stand_in.nodes:
                    stand_in.renew_lease(name)
                last_lease = time.monotonic()
            if time.monotonic() - last_status >= STATUS_REPORT_S:
                for spec in stand_in.config.nodes:
                    stand_in.post_status(spec)
                last_status = time.monotonic()
            stand_in.sync_compute_domains()
            stand_in.sync_pods()
        except Exception:  # noqa: BLE001 - an API server restarting or one odd object must not stop the nodes
            log.exception("node round failed; retried")
        stopping.wait(POD_POLL_S)


def main(argv: list[str]) -> int:
    (directory,) = argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cluster = ClusterDir(directory)
    config = cluster.load_config()
    from .controlplane import KubePaths

    stand_in = NodeStandIn(cluster, config, Rest(KubePaths(cluster).admin_kubeconfig))
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    serve(stand_in, stopping)
    stand_in.kubelet.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
