"""The local cluster's control-plane process: it acts on store changes that no gpudra command follows, resyncs,
expires events, never races a command's own rounds, and leaves nothing behind."""

from __future__ import annotations

import fcntl
import multiprocessing
import threading
from datetime import datetime, timedelta, timezone

import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster import controlplane
from gpudra.cluster.controller import holding
from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_nodes
from gpudra.cluster.nodes import down, up
from gpudra.cluster.store import Store

from test_cluster_flow import ARTICLE, assert_nothing_left, get, gpudra, state  # noqa: F401 - fixture

HANG_GUARD_S = 120  # waits end on an answer; this bounds only a hang
POLLS = 1500  # × 0.02 s: generous on a loaded 2-core CI machine; the test counts polls, it does not time anything

POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "written-by-another-tool", "namespace": "default"},
    "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-l4"}],
             "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}]},
}
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-l4", "namespace": "default"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}},
}


def wait_for(predicate) -> bool:
    stop = threading.Event()
    for _ in range(POLLS):
        if predicate():
            return True
        stop.wait(0.02)
    return False


def pod_phase(store: Store, name: str) -> str | None:
    pod = store.get("Pod", "default", name)
    return ((pod or {}).get("status") or {}).get("phase")


def test_control_plane_schedules_and_starts_a_pod_that_no_gpudra_command_reconciled(state):
    cluster = ClusterDir(state)
    up(cluster, ClusterConfig(nodes=parse_nodes("l4-node")), control_plane=True)
    assert controlplane.alive(cluster) is not None
    gpudra("apply", "-f", str(ARTICLE / "01-deviceclass.yaml"), "--dir", state)
    # another tool writes straight into the store: no reconcile follows, only the control plane sees it
    cluster.store.create(TEMPLATE)
    cluster.store.create(POD)
    assert wait_for(lambda: pod_phase(cluster.store, "written-by-another-tool") == "Running")
    pod = cluster.store.get("Pod", "default", "written-by-another-tool")
    assert pod["spec"]["nodeName"] == "l4-0"
    claims = [c for c in cluster.store.list("ResourceClaim", "default")
              if c["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]]
    assert len(claims) == 1 and claims[0]["status"]["reservedFor"][0]["uid"] == pod["metadata"]["uid"]
    down(cluster)
    assert_nothing_left(state)


def test_control_plane_places_a_pending_pod_when_a_driver_publishes_new_devices(state):
    cluster = ClusterDir(state)
    up(cluster, ClusterConfig(nodes=parse_nodes("l4-node")), control_plane=True)
    gpudra("apply", "-f", str(ARTICLE / "01-deviceclass.yaml"), "--dir", state)
    slices = cluster.store.list("ResourceSlice")
    saved = [dict(s) for s in slices]
    for s in slices:  # the node's devices vanish (as if the driver unpublished them) ...
        cluster.store.delete("ResourceSlice", None, s["metadata"]["name"], graceful=False)
    cluster.store.create(TEMPLATE)
    cluster.store.create(POD)
    assert wait_for(lambda: any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                                for c in ((cluster.store.get("Pod", "default", "written-by-another-tool") or {})
                                          .get("status") or {}).get("conditions") or []))
    assert pod_phase(cluster.store, "written-by-another-tool") != "Running"
    for s in saved:  # ... and come back, as a driver republishes them: the pending pod is placed without any command
        s["metadata"] = {"name": s["metadata"]["name"], "ownerReferences": s["metadata"].get("ownerReferences")}
        cluster.store.create(s)
    assert wait_for(lambda: pod_phase(cluster.store, "written-by-another-tool") == "Running")
    reasons = [e["reason"] for e in get(state, "events")["items"]
               if e["involvedObject"]["name"] == "written-by-another-tool"]
    assert "FailedScheduling" in reasons and "Scheduled" in reasons


def test_cluster_up_starts_the_control_plane_and_down_stops_it(state):
    result = CliRunner().invoke(cli, ["cluster", "up", "--dir", state, "--nodes", "l4-node"])
    assert result.exit_code == 0, result.output
    assert "control plane (controllers, scheduler, kubelets) started" in result.stderr
    cluster = ClusterDir(state)
    pid = controlplane.alive(cluster)
    assert pid is not None
    again = CliRunner().invoke(cli, ["cluster", "up", "--dir", state])
    assert "control plane (controllers, scheduler, kubelets) running" in again.stderr
    assert controlplane.alive(cluster) == pid
    result = CliRunner().invoke(cli, ["cluster", "down", "--dir", state])
    assert result.exit_code == 0 and "control plane stopped" in result.stderr
    assert_nothing_left(state)


def test_cluster_up_without_control_plane_runs_none(state):
    result = CliRunner().invoke(cli, ["cluster", "up", "--dir", state, "--nodes", "l4-node", "--no-control-plane"])
    assert result.exit_code == 0, result.output
    assert controlplane.alive(ClusterDir(state)) is None


class Ticks:
    """`serve`'s stop event, counting its watch ticks instead of sleeping: stops after `count` ticks and calls
    `on_tick(n)` at each, so the test decides what happens between two ticks and no verdict waits on a clock."""

    def __init__(self, count: int, on_tick=lambda n: None):
        self.count, self.on_tick, self.ticks = count, on_tick, 0

    def is_set(self) -> bool:
        return self.ticks >= self.count

    def wait(self, timeout: float) -> bool:
        self.ticks += 1
        self.on_tick(self.ticks)
        return self.is_set()


def test_serve_runs_a_round_per_outside_change_and_not_for_its_own_writes(state):
    cluster = ClusterDir(state)
    up(cluster, ClusterConfig(nodes=parse_nodes("l4-node")))
    idle = Ticks(20)  # idle: its own first round's writes must not make it spin
    assert controlplane.serve(cluster, idle, watch_s=0.01, resync_s=3600) == 1
    assert idle.ticks == 20

    def outside_change(tick: int) -> None:
        if tick in (5, 12):
            cluster.store.create({**TEMPLATE, "metadata": {"name": f"from-outside-{tick}", "namespace": "default"}})

    assert controlplane.serve(cluster, Ticks(20, outside_change), watch_s=0.01, resync_s=3600) == 3


def _lock_prober(path: str, requests, answers) -> None:
    """Another process: on "probe", whether the control loop's lock is free right now (a non-blocking flock on
    the same file, so the answer does not depend on how fast either process runs); on "take", `holding` itself."""
    cluster = ClusterDir(path)
    for request in iter(requests.get, "stop"):
        if request == "probe":
            with open(cluster.controller_lock(), "a+") as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    answers.put("busy")
                    continue
                fcntl.flock(fh, fcntl.LOCK_UN)
                answers.put("free")
        else:
            with holding(cluster):
                answers.put("took it")


def test_holding_is_reentrant_in_one_process_and_exclusive_across_processes(state):
    cluster = ClusterDir(state)
    cluster.save_config(ClusterConfig(nodes=parse_nodes("l4-node")))
    context = multiprocessing.get_context("spawn")
    requests, answers = context.Queue(), context.Queue()
    other = context.Process(target=_lock_prober, args=(state, requests, answers))
    other.start()

    def ask(request: str) -> str:
        requests.put(request)
        return answers.get(timeout=HANG_GUARD_S)  # only against a hang: the answer is the verdict, not the time

    try:
        assert ask("probe") == "free"
        with holding(cluster):
            assert ask("probe") == "busy"
            with holding(cluster):  # a command holding it calls reconcile, which takes it again: no self-deadlock
                assert ask("probe") == "busy"
            assert ask("probe") == "busy", "leaving the inner block must not release the outer one's lock"
        assert ask("probe") == "free"
        assert ask("take") == "took it"
        requests.put("stop")
        other.join(timeout=HANG_GUARD_S)
        assert other.exitcode == 0
    finally:
        if other.is_alive():
            other.kill()


def test_events_expire_after_the_ttl_as_the_api_server_drops_them(tmp_path):
    store = Store(str(tmp_path))
    pod = store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}})
    old = store.record_event(pod, "Normal", "Scheduled", "old news", "default-scheduler")
    store.record_event(pod, "Normal", "Started", "fresh", "kubelet")
    later = datetime.strptime(old["lastTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert store.expire_events(3600, now=later + timedelta(seconds=3599)) == 0
    assert store.expire_events(3600, now=later + timedelta(seconds=3601)) == 2
    assert store.list("Event") == []
    # a repeat refreshes lastTimestamp: the event lives on from its last sighting, not its first
    first = store.record_event(pod, "Warning", "FailedScheduling", "no GPU", "default-scheduler")
    first["lastTimestamp"] = (later + timedelta(seconds=3000)).strftime("%Y-%m-%dT%H:%M:%SZ")
    store.replace(first, check_version=False)
    assert store.expire_events(3600, now=later + timedelta(seconds=3601)) == 0
    assert store.expire_events(3600, now=later + timedelta(seconds=6601)) == 1


def test_event_ttl_is_kept_in_the_cluster_config(state):
    result = CliRunner().invoke(cli, ["cluster", "up", "--dir", state, "--nodes", "l4-node", "--event-ttl", "60",
                                      "--no-control-plane"])
    assert result.exit_code == 0, result.output
    assert ClusterDir(state).load_config().event_ttl_s == 60
    result = CliRunner().invoke(cli, ["cluster", "up", "--dir", state, "--policy", "binpack", "--no-control-plane"])
    assert result.exit_code == 0, result.output
    config = ClusterDir(state).load_config()
    assert (config.event_ttl_s, config.policy) == (60, "binpack")


def test_the_store_keeps_objects_as_the_api_server_does_converted_and_defaulted(tmp_path):
    store = Store(str(tmp_path))
    claim = store.create({"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim",
                          "metadata": {"name": "c", "namespace": "default"},
                          "spec": {"devices": {"requests": [{"name": "g", "deviceClassName": "gpu.nvidia.com"}]}}})
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    assert claim["spec"]["devices"]["requests"] == [
        {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]
    rule = store.create({"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule", "metadata": {"name": "r"},
                         "spec": {"taint": {"key": "gpu.nvidia.com/xid", "effect": "NoSchedule"}}})
    assert rule["spec"]["taint"]["timeAdded"]
    spec = {"containers": [{"name": "c", "image": "x"}]}
    pod = store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": dict(spec)})
    # as given, plus what the Priority admission plugin sets (no PriorityClass: 0, PreemptLowerPriority)
    assert pod["spec"] == {**spec, "priority": 0, "preemptionPolicy": "PreemptLowerPriority"}


def test_reapplying_an_undefaulted_manifest_is_unchanged(state):
    up(ClusterDir(state), ClusterConfig(nodes=parse_nodes("l4-node")))
    manifest = str(ARTICLE / "02-resourceclaim-gpu.yaml")
    first = gpudra("apply", "-f", manifest, "--dir", state)
    assert "created" in first
    assert "unchanged" in gpudra("apply", "-f", manifest, "--dir", state)


def test_describe_lists_events_oldest_first_like_kubectl(tmp_path):
    # Event names end in random hex, so the store lists them in no particular order; kubectl describe sorts them
    # by time, and within one second the store's creation order is the only order there is.
    from gpudra.cluster.printers import describe

    store = Store(str(tmp_path))
    pod = store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                        "spec": {"containers": [{"name": "c", "image": "x"}]}})
    reasons = ["Scheduled", "Pulled", "Created", "Started", "Killing", "Stopped", "Unprepared", "Deleted"]
    for reason in reasons:
        store.record_event(pod, "Normal", reason, reason.lower(), "kubelet")
    text = describe(pod, store.events_for(pod))
    shown = [line.split()[1] for line in text.split("Events:", 1)[1].splitlines()[2:]]
    assert shown == reasons, text


def test_a_1_34_cluster_drops_fields_its_api_server_does_not_know_and_apply_says_so(cluster_state, tmp_path):
    """kube-apiserver drops the fields of feature gates that are off (dropDisabledFields): a 1.34 cluster keeps no
    DeviceClass extendedResourceName (DRAExtendedResource alpha), keeps it in a 1.36 one, and keeps a field the
    stored object already used on update."""
    cluster = ClusterDir(cluster_state)
    cluster.save_config(ClusterConfig(nodes=parse_nodes("l4-node"), kubernetes_version="1.34"))
    manifest = tmp_path / "class.yaml"
    manifest.write_text("apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpus}\n"
                        "spec:\n  extendedResourceName: example.com/gpu\n"
                        "  selectors: [{cel: {expression: 'device.driver == \"gpu.nvidia.com\"'}}]\n")
    first = CliRunner().invoke(cli, ["apply", "-f", str(manifest), "--dir", cluster_state])
    assert first.exit_code == 0, first.output
    assert "spec.extendedResourceName: needs the DRAExtendedResource feature gate (alpha, off by default in 1.34)" \
        in first.stderr
    stored = cluster.store.get("DeviceClass", None, "gpus")
    assert "extendedResourceName" not in stored["spec"] and stored["spec"]["selectors"]
    again = CliRunner().invoke(cli, ["apply", "-f", str(manifest), "--dir", cluster_state])
    assert "unchanged" in again.stdout  # compared as the store keeps it
    # an object that already holds the field keeps it on update (written while the gate was on)
    cluster.store.delete("DeviceClass", None, "gpus", graceful=False)
    cluster.save_config(ClusterConfig(nodes=parse_nodes("l4-node"), kubernetes_version="1.36"))
    kept = cluster.store.create(yaml.safe_load(manifest.read_text()))
    assert kept["spec"]["extendedResourceName"] == "example.com/gpu"
    cluster.save_config(ClusterConfig(nodes=parse_nodes("l4-node"), kubernetes_version="1.34"))
    kept["metadata"].setdefault("labels", {})["touched"] = "yes"
    assert cluster.store.replace(kept)["spec"]["extendedResourceName"] == "example.com/gpu"
