"""The real kube-scheduler on benchmarks/schedule.py's workload: the same objects, written to a real control plane.

etcd, kube-apiserver and kube-controller-manager (its resourceclaim controller makes each pod's claim from its
template) run from the binary `gpudra kube build` makes (or reuses), in a temporary directory, on loopback. As
upstream's scheduler_perf sets its cluster up (test/integration/scheduler_perf/util.go, `mustSetupCluster`): the
API server without the ServiceAccount, TaintNodesByCondition and Priority admission plugins, no node lifecycle
controller (no kubelet renews the nodes' leases; it would taint them unreachable after its grace period), and
clients at 5,000 QPS (the components' defaults, 50 for the scheduler and 20 for the controller-manager, would cap
the scheduler at about 25 pods/s: two writes per pod, the claim's status and the binding). Nodes (Ready, with
capacity and allocatable) and ResourceSlices are created through the API with no driver, as scheduler_perf's
`createResourceDriver` does.

Phases, so that only scheduling is timed:
1. everything but the scheduler; the init pods; wait until the controller has made every init pod's claim;
2. start kube-scheduler, wait until every init pod is bound (untimed: the cluster 0 -> 50% full); stop it;
3. create the measured pods, wait for their claims (claim creation is reported apart, as gpudra's side reports
   its template claims apart); start kube-scheduler again and time, from a watch on the measured namespace, from
   the first bind to the last. Upstream's throughput collector samples pods bound per second from an informer
   while pods are still being created; timing a full queue from first to last bind measures the same work without
   the creation, and without the scheduler's own start-up (informer sync) before its first bind.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpudra.kubecluster import controlplane  # noqa: E402
from gpudra.kubecluster.rest import ApiError, Rest, cluster_scoped, namespaced  # noqa: E402

CLIENT_QPS = ("--kube-api-qps=5000", "--kube-api-burst=5000")  # scheduler_perf's clients: QPS and burst 5000
EXTRA_ARGS = {
    "kube-apiserver": ("--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,Priority",),
    "kube-controller-manager": ("--controllers=*,-node-lifecycle-controller", *CLIENT_QPS),
    "kube-scheduler": CLIENT_QPS,
}
WRITERS = 8  # concurrent creates: the API server, not this client, should be the limit
STALL_S = 120.0  # no progress for this long: stop waiting and report what was done
POLL_S = 1.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class KubeUnavailable(Exception):
    """No Go toolchain or binary, or the control plane did not start: the benchmark times gpudra alone.
    `refused`: the API server refused part of the workload, which is a finding rather than a missing tool."""

    def __init__(self, message: str, refused: bool = False):
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True)
class KubeRun:
    release: str
    create_s: float  # creating nodes, slices, classes, templates and the init pods, and their claims
    init_s: float  # scheduling the init pods (untimed in the rate), from the scheduler's start
    measured_claims_s: float  # creating the measured pods and the controller making their claims
    measured: int
    measured_scheduled: int
    elapsed_s: float  # from the first to the last bind of the measured pods
    scheduler_cpu_s: float  # kube-scheduler's CPU time in that window
    control_plane_cpu_s: float  # kube-scheduler, kube-apiserver, etcd and kube-controller-manager in that window
    scheduled: int  # pods with spec.nodeName at the end, both namespaces

    @property
    def pods_per_s(self) -> float:
        """Binds after the first per second of the window (n binds span n - 1 intervals)."""
        return (self.measured_scheduled - 1) / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


class _Plane:
    def __init__(self, directory: str, say: Callable[[str], None]):
        from gpudra.cluster.layout import ClusterConfig, ClusterDir
        from gpudra.kubecluster.build import BuildError, build

        try:
            self.built = build(say=say)
        except BuildError as exc:
            raise KubeUnavailable(str(exc)) from None
        self.cluster = ClusterDir(directory)
        minor = ".".join(self.built.release.lstrip("v").split(".")[:2])
        self.config = ClusterConfig(nodes=[], kubernetes_version=minor, features="default")
        self.cluster.save_config(self.config)
        self.paths = controlplane.KubePaths(self.cluster)
        self.say = say

    def start(self, *components: str) -> None:
        controlplane.start(self.cluster, self.config, self.built, components=components, extra_args=EXTRA_ARGS)

    def stop(self, *components: str) -> None:
        controlplane.stop(self.cluster, components=components or controlplane.COMPONENTS)

    def cpu(self, *components: str) -> float:
        return sum(_cpu_seconds(controlplane.alive(self.paths, c)) for c in components)


RESOURCES = {"Namespace": "namespaces", "Node": "nodes", "DeviceClass": "deviceclasses",
             "ResourceSlice": "resourceslices", "ResourceClaimTemplate": "resourceclaimtemplates", "Pod": "pods"}


def _create_all(rest: Rest, objects: list[dict[str, Any]]) -> None:
    def create(obj: dict[str, Any]) -> None:
        group_version, resource = obj["apiVersion"], RESOURCES[obj["kind"]]
        namespace = obj["metadata"].get("namespace")
        path = (namespaced(group_version, resource, namespace) if namespace
                else cluster_scoped(group_version, resource))
        rest.call("POST", path, obj)

    with ThreadPoolExecutor(WRITERS) as pool:
        for _ in pool.map(create, objects):
            pass


def _wait(progress: Callable[[], int], target: int, what: str, say: Callable[[str], None]) -> int:
    """Poll `progress` until it reaches `target` or stalls for STALL_S; returns the last value."""
    last, last_change = -1, time.monotonic()
    while True:
        done = progress()
        if done >= target:
            return done
        if done != last:
            last, last_change = done, time.monotonic()
        elif time.monotonic() - last_change > STALL_S:
            say(f"kube: {what}: {done} of {target}, no progress for {STALL_S:.0f} s; giving up")
            return done
        time.sleep(POLL_S)


def _count(rest: Rest, path: str, **query: Any) -> int:
    return len(rest.get(path, **query)["items"])


def _total(rest: Rest, path: str) -> int:
    """How many objects `path` lists, from a one-item page (cheap where a full list of thousands is not)."""
    page = rest.get(path, limit=1)
    return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)


def _wait_for_claims(rest: Rest, namespace: str, expected: int, say: Callable[[str], None]) -> None:
    """Until the resourceclaim controller has made every pod's claim and written its name into the pod's status
    (the scheduler finds the claim by that name)."""
    _wait(lambda: _total(rest, namespaced("resource.k8s.io/v1", "resourceclaims", namespace)), expected,
          f"claims made in {namespace}", say)

    def named() -> int:
        pods = rest.get(namespaced("v1", "pods", namespace))["items"]
        return sum(1 for pod in pods if (pod.get("status") or {}).get("resourceClaimStatuses"))

    _wait(named, expected, f"pods of {namespace} naming their claim", say)


class _BindWatch(threading.Thread):
    """Times the binds of a namespace's pods from a watch that starts at `resource_version`."""

    def __init__(self, plane: _Plane, namespace: str, resource_version: str, expected: int,
                 on_first: Callable[[], None]):
        super().__init__(daemon=True)
        ports = controlplane.endpoints(plane.paths)
        self.url = (f"{ports.server}{namespaced('v1', 'pods', namespace)}?watch=1&timeoutSeconds=3600"
                    f"&resourceVersion={resource_version}")
        self.context: ssl.SSLContext = controlplane.tls_context(plane.paths)
        self.expected = expected
        self.on_first = on_first
        self.bound: set[str] = set()
        self.first: float | None = None
        self.last: float | None = None
        self.error: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            if self.expected == 0:
                return
            with urllib.request.urlopen(self.url, context=self.context, timeout=STALL_S + 60) as stream:
                for line in stream:
                    event = json.loads(line)
                    if event.get("type") == "ERROR":  # e.g. 410 Gone: the watch cannot go on
                        self.error = json.dumps(event.get("object"))[:300]
                        return
                    pod = event.get("object") or {}
                    name = str((pod.get("metadata") or {}).get("name"))
                    if (pod.get("spec") or {}).get("nodeName") and name not in self.bound:
                        now = time.perf_counter()
                        if self.first is None:
                            self.first = now
                            self.on_first()
                        self.bound.add(name)
                        self.last = now
                        if len(self.bound) >= self.expected:
                            return
        except (OSError, ValueError) as exc:
            self.error = str(exc)
        finally:
            self.done.set()


def run(objects: list[dict[str, Any]], init_namespace: str, measured_namespace: str,
        say: Callable[[str], None] = lambda _: None) -> KubeRun:
    """Schedule `objects` (benchmarks/schedule.py's `build_objects`) with the real kube-scheduler."""
    directory = tempfile.mkdtemp(prefix="gsb", dir="/tmp")  # short: unix socket paths stay within limits
    try:
        plane = _Plane(directory, say)
        try:
            return _run(plane, objects, init_namespace, measured_namespace, say)
        finally:
            plane.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _run(plane: _Plane, objects: list[dict[str, Any]], init_namespace: str, measured_namespace: str,
         say: Callable[[str], None]) -> KubeRun:
    from gpudra.cluster.layout import ClusterSetupError

    pods = [o for o in objects if o["kind"] == "Pod"]
    init_pods = [p for p in pods if p["metadata"]["namespace"] == init_namespace]
    measured_pods = [p for p in pods if p["metadata"]["namespace"] == measured_namespace]
    setup = [o for o in objects if o["kind"] != "Pod"]
    try:
        plane.start("etcd", "kube-apiserver", "kube-controller-manager")
    except ClusterSetupError as exc:
        raise KubeUnavailable(f"the control plane did not start: {exc}") from None
    say(f"kube: {plane.built.release} control plane up in {plane.cluster.path}")
    rest = Rest(plane.paths.admin_kubeconfig)
    try:
        started = time.perf_counter()
        for kind in ("Namespace", "Node", "DeviceClass", "ResourceSlice", "ResourceClaimTemplate"):
            _create_all(rest, [o for o in setup if o["kind"] == kind])
        _create_all(rest, init_pods)
        _wait_for_claims(rest, init_namespace, len(init_pods), say)
        create_s = time.perf_counter() - started
        say(f"kube: objects and {len(init_pods)} init pods' claims in {create_s:.1f} s")

        started = time.perf_counter()
        plane.start("kube-scheduler")
        unbound = namespaced("v1", "pods", init_namespace)
        _wait(lambda: len(init_pods) - _count(rest, unbound, fieldSelector="spec.nodeName="), len(init_pods),
              "init pods bound", say)
        init_s = time.perf_counter() - started
        plane.stop("kube-scheduler")
        say(f"kube: {len(init_pods)} init pods scheduled in {init_s:.1f} s (untimed)")

        started = time.perf_counter()
        _create_all(rest, measured_pods)
        _wait_for_claims(rest, measured_namespace, len(measured_pods), say)
        measured_claims_s = time.perf_counter() - started
        listed = rest.get(namespaced("v1", "pods", measured_namespace))
        cpu_at_first: dict[str, float] = {}
        everything = controlplane.COMPONENTS

        def first_bind() -> None:
            cpu_at_first["scheduler"] = plane.cpu("kube-scheduler")
            cpu_at_first["all"] = plane.cpu(*everything)

        watch = _BindWatch(plane, measured_namespace, listed["metadata"]["resourceVersion"], len(measured_pods),
                           first_bind)
        watch.start()
        plane.start("kube-scheduler")
        scheduler_started = time.perf_counter()
        while not watch.done.wait(POLL_S):
            if time.perf_counter() - (watch.last or scheduler_started) > STALL_S:
                say(f"kube: {len(watch.bound)} of {len(measured_pods)} measured pods bound, "
                    f"none for {STALL_S:.0f} s; giving up")
                break
        scheduler_cpu = plane.cpu("kube-scheduler") - cpu_at_first.get("scheduler", 0.0)
        all_cpu = plane.cpu(*everything) - cpu_at_first.get("all", 0.0)
        if watch.error:
            say(f"kube: the watch ended: {watch.error}")
        scheduled = sum(1 for pod in rest.get("/api/v1/pods")["items"] if (pod.get("spec") or {}).get("nodeName"))
        elapsed = (watch.last - watch.first) if watch.first is not None and watch.last is not None else 0.0
        return KubeRun(release=plane.built.release, create_s=create_s, init_s=init_s,
                       measured_claims_s=measured_claims_s, measured=len(measured_pods),
                       measured_scheduled=len(watch.bound), elapsed_s=elapsed, scheduler_cpu_s=scheduler_cpu,
                       control_plane_cpu_s=all_cpu, scheduled=scheduled)
    except ApiError as exc:
        raise KubeUnavailable(f"the API server refused the workload: {exc}", refused=True) from None
    finally:
        rest.close()
