"""Device health end to end: an injected XID taints the device, the driver republishes its ResourceSlices with a
new generation (never a moment without the device), the kubelet's health stream reports it, the metrics count it,
and gpudra's allocator, given the republished slices, keeps a new claim off the device unless it tolerates the taint.
The same events from NVML go through the real pynvml wrappers over the C-level fake."""

from __future__ import annotations

import os
import time
import urllib.request

import grpc
import pynvml
import pytest
from click.testing import CliRunner
from support.fake_libnvml import from_simulated, install
from prometheus_client.parser import text_string_to_metric_families
from test_driver_slices import FakeSliceApi

from gpudra.allocator import Allocator, Features
from gpudra.cli import cli
from gpudra.discovery import open_backend
from gpudra.discovery.health import HealthEvent, HealthEventError
from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.gpuplugin.health import DeviceHealth, parse_xid_list
from gpudra.kubeletplugin.protos import (dra_health_v1_pb2, dra_health_v1_pb2_grpc, dra_health_v1alpha1_pb2,
                                  dra_health_v1alpha1_pb2_grpc)
from gpudra.gpuplugin.slices import build_resource_slices, device_classes

NODE = "node-h"
XID_KEY = "gpu.nvidia.com/xid"


class WatchedSliceApi(FakeSliceApi):
    """Records, after every write, which devices of the pool a reader of the API would see."""

    def __init__(self):
        super().__init__()
        self.visible: list[set[str]] = []

    def _store(self, body):
        obj = super()._store(body)
        self.visible.append({d["name"] for o in self.objects.values() for d in o["spec"].get("devices") or []})
        return obj

    def delete(self, name):
        super().delete(name)
        self.visible.append({d["name"] for o in self.objects.values() for d in o["spec"].get("devices") or []})

    def slices(self):
        return [self.objects[name] for name in sorted(self.objects)]


def _until(predicate, what: str, attempts: int = 4800):
    for _ in range(attempts):
        if predicate():
            return
        time.sleep(0.025)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def root(driver_root):
    return driver_root


def _agent(root: str, api=None, **kw) -> DriverAgent:
    options = AgentOptions(node_name=NODE, profile="dgx-h100", root=root, claims_dir=os.path.join(root, "claims"),
                           fsync=False, health_poll_s=0.05, **kw)
    return DriverAgent(options, slice_client=api)


def _claim(name: str, count: int, *, tolerate: bool = False) -> dict:
    exactly = {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": count}
    if tolerate:
        exactly["tolerations"] = [{"key": XID_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def _allocated(slices: list[dict], claim: dict) -> list[str] | None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
    outcome = Allocator(device_classes(), slices, [], Features.parse("default")).allocate(node, [claim])
    if outcome.outcome != "allocated":
        return None
    return [r["device"] for a in outcome.allocations for r in a["devices"]["results"]]


def _scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_injected_xid_taints_republishes_and_the_allocator_avoids_the_device(root):
    api = WatchedSliceApi()
    agent = _agent(root, api, metrics_port=0)
    agent.start()
    try:
        first = api.slices()
        assert {s["spec"]["pool"]["generation"] for s in first} == {1}
        everything = {d["name"] for s in first for d in s["spec"]["devices"]}
        assert len(everything) == 8 and not any("taints" in d for s in first for d in s["spec"]["devices"])
        assert _allocated(first, _claim("one", 1)) == ["gpu-0"]  # first fit, before the error

        result = CliRunner().invoke(cli, ["driver", "inject-event", "--root", root, "--gpu", "0", "--xid", "79"])
        assert result.exit_code == 0, result.output
        _until(lambda: agent.health_republished == 1, "the republication after the XID")

        slices = api.slices()
        assert {s["spec"]["pool"]["generation"] for s in slices} == {2}
        devices = {d["name"]: d for s in slices for d in s["spec"]["devices"]}
        assert set(devices) == everything
        taints = devices["gpu-0"]["taints"]
        assert [(t["key"], t["value"], t["effect"]) for t in taints] == [(XID_KEY, "79", "NoSchedule")]
        assert all("taints" not in d for name, d in devices.items() if name != "gpu-0")
        assert all(seen == everything for seen in api.visible), "a reader saw the pool without some device"

        # a new claim, allocated by gpudra's allocator against the republished slices, avoids gpu-0 ...
        assert _allocated(slices, _claim("one", 1)) == ["gpu-1"]
        assert _allocated(slices, _claim("all", 8)) is None
        # ... unless it tolerates the taint
        assert _allocated(slices, _claim("all", 8, tolerate=True)) == [f"gpu-{i}" for i in range(8)]

        metrics = _scrape(agent.metrics_port)
        assert metrics[("gpudra_health_events_total", (("effect", "NoSchedule"), ("kind", "xid")))] == 1
        assert metrics[("gpudra_device_health", (("state", "unhealthy"),))] == 1
        assert metrics[("gpudra_device_health", (("state", "healthy"),))] == 7

        # the same XID again changes nothing: no new generation
        CliRunner().invoke(cli, ["driver", "inject-event", "--root", root, "--gpu", "0", "--xid", "79"])
        _until(lambda: _scrape(agent.metrics_port)[
            ("gpudra_health_events_total", (("effect", "NoSchedule"), ("kind", "xid")))] == 2, "the second event")
        assert agent.health_republished == 1 and {s["spec"]["pool"]["generation"] for s in api.slices()} == {2}
    finally:
        agent.stop()


def test_application_xids_get_effect_none_and_block_nothing(root):
    agent = _agent(root, ignored_xids=parse_xid_list("48, x, 63"))
    agent.start()
    try:
        backend = agent.backend
        uuid = agent.backend.inventory().gpus[1].uuid
        backend.health_monitor.inject(HealthEvent("xid", gpu=uuid, xid=13))  # Graphics Engine Exception
        _until(lambda: agent.health_republished == 1, "the republication")
        tainted = {d["name"]: d.get("taints") for d in agent._published}
        assert tainted["gpu-1"][0]["effect"] == "None" and tainted["gpu-1"][0]["value"] == "13"
        backend.health_monitor.inject(HealthEvent("xid", gpu=uuid, xid=48))  # ignored by the flag
        _until(lambda: agent.health_republished == 2, "the second republication")
        taint = next(d for d in agent._published if d["name"] == "gpu-1")["taints"][0]
        assert (taint["value"], taint["effect"]) == ("48", "None"), "one taint per key, the later value"
        slices = agent.build_slices()
        assert _allocated(slices, _claim("all", 8)) == [f"gpu-{i}" for i in range(8)]
    finally:
        agent.stop()


# NVIDIA's hard-coded application XIDs, copied from the upstream driver (not from gpudra):
# NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/device_health.go, xidsToSkip (commit 22407113, 2026-05-15),
# which cites https://docs.nvidia.com/deploy/xid-errors/ "application errors: the GPU should still be healthy".
NVIDIA_APPLICATION_XIDS = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    68: "Video processor exception",
    109: "Context Switch Timeout Error",
}


@pytest.mark.parametrize("xid", sorted(NVIDIA_APPLICATION_XIDS))
def test_each_of_nvidias_application_xids_taints_with_effect_none(xid):
    """Every XID on NVIDIA's list leaves the GPU schedulable (effect None), with no flag given."""
    inventory = open_backend("simulated", profile="dgx-h100", node_name=NODE).inventory()
    health = DeviceHealth("gpu.nvidia.com")
    health.record([HealthEvent("xid", gpu=inventory.gpus[0].uuid, xid=xid)], inventory)
    devices = [d for s in build_resource_slices(inventory, NODE, taints_of=health.taints_of)
               for d in s["spec"]["devices"]]
    taints = [t for d in devices for t in d.get("taints", [])]
    assert [(t["key"], t["value"], t["effect"]) for t in taints] == [(XID_KEY, str(xid), "None")]
    assert health.counts(devices)["unhealthy"] == 0


@pytest.mark.parametrize("xid", [48, 63, 64, 74, 79, 94, 95, 119])
def test_xids_off_nvidias_list_block_the_gpu(xid):
    """The rest (double-bit ECC 48, row remapping 63/64, NVLink 74, fallen off the bus 79, contained/uncontained
    ECC 94/95, GSP timeout 119) taint NoSchedule: the list is exactly NVIDIA's, not a superset."""
    assert xid not in NVIDIA_APPLICATION_XIDS
    inventory = open_backend("simulated", profile="dgx-h100", node_name=NODE).inventory()
    health = DeviceHealth("gpu.nvidia.com")
    health.record([HealthEvent("xid", gpu=inventory.gpus[0].uuid, xid=xid)], inventory)
    assert health.taint_for(HealthEvent("xid", gpu=inventory.gpus[0].uuid, xid=xid))["effect"] == "NoSchedule"


@pytest.mark.parametrize("event, value, effect, state", [
    (HealthEvent("ecc", gpu="GPU-X"), "double-bit", "NoSchedule", "unhealthy"),
    (HealthEvent("gpu-lost", gpu="GPU-X"), None, "NoSchedule", "unhealthy"),
    (HealthEvent("unmonitored", gpu="GPU-X"), None, "None", "unknown"),
    (HealthEvent("xid", gpu="GPU-X", xid=79), "79", "NoSchedule", "unhealthy"),
    (HealthEvent("xid", gpu="GPU-X", xid=109), "109", "None", "healthy"),
])
def test_each_kind_of_event_gives_its_taint_and_health_state(event, value, effect, state):
    """The module docstring's table (NVIDIA's keys and effects; `ecc` is gpudra's own), one row at a time."""
    inventory = open_backend("simulated", profile="dgx-h100", node_name=NODE).inventory()
    event = HealthEvent(event.kind, gpu=inventory.gpus[0].uuid, xid=event.xid)
    health = DeviceHealth("gpu.nvidia.com")
    health.record([event], inventory)
    device = next(d for s in build_resource_slices(inventory, NODE, taints_of=health.taints_of)
                  for d in s["spec"]["devices"] if d["name"] == "gpu-0")
    [taint] = device["taints"]
    assert (taint["key"], taint.get("value"), taint["effect"]) == (f"gpu.nvidia.com/{event.kind}", value, effect)
    assert health.state_of(device)[0] == state


def test_the_same_event_again_changes_nothing():
    """A repeated event is no change: no new version (so no republication) and the taint keeps its timeAdded."""
    inventory = open_backend("simulated", profile="dgx-h100", node_name=NODE).inventory()
    now = [1_000_000.0]
    health = DeviceHealth("gpu.nvidia.com", clock=lambda: now[0])
    event = HealthEvent("xid", gpu=inventory.gpus[0].uuid, xid=79)
    assert health.record([event], inventory) == [(event, True)]
    device = next(d for s in build_resource_slices(inventory, NODE) for d in s["spec"]["devices"]
                  if d["name"] == "gpu-0")
    before, version = health.taints_of(device), health.version
    now[0] += 3600
    assert health.record([event], inventory) == [(event, False)]
    assert health.version == version and health.taints_of(device) == before
    later = HealthEvent("xid", gpu=inventory.gpus[0].uuid, xid=48)  # a new value for the key: a change
    assert health.record([later], inventory) == [(later, True)] and health.version == version + 1
    assert health.taints_of(device)[0]["value"] == "48"


def _tainted(inventory, health) -> list[str]:
    return sorted(d["name"] for s in build_resource_slices(inventory, NODE, taints_of=health.taints_of)
                  for d in s["spec"]["devices"] if d.get("taints"))


def test_events_name_gpus_and_instances_by_value_not_by_object():
    """NVML hands over a new string for the UUID and new ints for GI/CI ids: matching must compare values.
    An event for a GPU instance without a compute instance (ci_id None) taints every MIG device of that GI."""
    inventory = open_backend("simulated", profile="hgx-a100-mig", node_name=NODE).inventory()
    gpu = next(g for g in inventory.gpus if g.mig_devices)
    target = gpu.mig_devices[1]
    fresh_uuid = "".join(list(gpu.uuid))  # equal, but another object
    assert fresh_uuid == gpu.uuid and fresh_uuid is not gpu.uuid
    health = DeviceHealth("gpu.nvidia.com")
    health.record([HealthEvent("xid", gpu=fresh_uuid, gi_id=int(str(target.gi_id)), xid=94)], inventory)
    assert _tainted(inventory, health) == [target.name]
    health = DeviceHealth("gpu.nvidia.com")
    health.record([HealthEvent("ecc", gpu=fresh_uuid)], inventory)
    on_gpu = sorted(d["name"] for s in build_resource_slices(inventory, NODE) for d in s["spec"]["devices"]
                    if gpu.uuid in (d["attributes"].get("uuid", {}).get("string"),
                                    d["attributes"].get("parentUUID", {}).get("string")))
    assert len(on_gpu) > 1 and _tainted(inventory, health) == on_gpu


def test_ignoring_an_application_xid_again_keeps_it_ignored():
    """`--additional-xids-to-ignore 13,48` adds 48 to NVIDIA's list; naming 13, already on it, changes nothing."""
    health = DeviceHealth("gpu.nvidia.com", ignored_xids=parse_xid_list("13,48"))
    assert health.ignored_xids == frozenset(NVIDIA_APPLICATION_XIDS) | {48}
    for xid in (13, 48, 109):
        assert health.taint_for(HealthEvent("xid", gpu="GPU-X", xid=xid))["effect"] == "None"
    assert health.taint_for(HealthEvent("xid", gpu="GPU-X", xid=79))["effect"] == "NoSchedule"


def test_gpu_lost_and_ecc_taint_and_mig_events_taint_one_instance():
    backend = open_backend("simulated", profile="hgx-a100-mig", node_name=NODE)
    inventory = backend.inventory()
    health = DeviceHealth("gpu.nvidia.com")
    mig_gpu = next(g for g in inventory.gpus if g.mig_devices)
    target = mig_gpu.mig_devices[0]
    health.record([HealthEvent("xid", gpu=mig_gpu.uuid, gi_id=target.gi_id, ci_id=target.ci_id, xid=94)], inventory)
    devices = {d["name"]: d for s in build_resource_slices(inventory, NODE, taints_of=health.taints_of)
               for d in s["spec"]["devices"]}
    assert [n for n, d in devices.items() if d.get("taints")] == [target.name]
    health.record([HealthEvent("ecc", gpu=mig_gpu.uuid)], inventory)  # whole GPU: every MIG device on it
    devices = {d["name"]: d for s in build_resource_slices(inventory, NODE, taints_of=health.taints_of)
               for d in s["spec"]["devices"]}
    on_gpu = {m.name for m in mig_gpu.mig_devices}
    assert {n for n, d in devices.items() if any(t["key"] == "gpu.nvidia.com/ecc" for t in d.get("taints", []))} \
        == on_gpu
    assert len(devices[target.name]["taints"]) == 2
    health.record([HealthEvent("gpu-lost")], inventory)
    assert all(any(t["key"] == "gpu.nvidia.com/gpu-lost" for t in health.taints_of(d)) for d in devices.values())
    assert health.counts(devices.values()) == {"healthy": 0, "unhealthy": len(devices), "unknown": 0}
    with pytest.raises(HealthEventError):
        HealthEvent("xid", gpu=mig_gpu.uuid)  # an XID event needs its number


def test_inject_event_usage_errors(root):
    runner = CliRunner()
    agent = _agent(root)
    agent.start()
    try:
        assert runner.invoke(cli, ["driver", "inject-event", "--root", root, "--xid", "79"]).exit_code == 2
        assert runner.invoke(cli, ["driver", "inject-event", "--root", root, "--gpu", "0"]).exit_code == 2
        both = runner.invoke(cli, ["driver", "inject-event", "--root", root, "--gpu", "0", "--xid", "1", "--ecc"])
        assert both.exit_code == 2 and "exactly one" in both.output
        assert runner.invoke(cli, ["driver", "inject-event", "--root", root, "--gpu-lost"]).exit_code == 0
    finally:
        agent.stop()


def test_inject_event_refuses_a_root_without_simulated_gpus_and_writes_nothing(root, tmp_path):
    # A mistyped --root would otherwise spool an event no driver ever reads (issue 21: it created directories
    # and exited 0).
    runner = CliRunner()
    wrong = str(tmp_path / "no-driver")
    for where in (root, wrong):
        before = sorted(os.walk(root)) if where == root else None
        lonely = runner.invoke(cli, ["driver", "inject-event", "--root", where, "--gpu", "0", "--xid", "79"])
        assert lonely.exit_code == 2 and "error: no simulated GPUs under" in lonely.stderr, lonely.output
        assert (sorted(os.walk(root)) == before) if where == root else not os.path.exists(wrong)
    agent = _agent(root)
    agent.start()
    try:
        served = runner.invoke(cli, ["driver", "inject-event", "--root", root, "--gpu", "0", "--xid", "79"])
        assert served.exit_code == 0 and "warning" not in served.stderr, served.output
    finally:
        agent.stop()


@pytest.mark.parametrize("pb2, grpc_module, service", [
    (dra_health_v1alpha1_pb2, dra_health_v1alpha1_pb2_grpc, "v1alpha1.DRAResourceHealth"),
    (dra_health_v1_pb2, dra_health_v1_pb2_grpc, "v1.DRAResourceHealth")])
def test_the_kubelet_health_stream_reports_every_device_and_then_the_change(root, pb2, grpc_module, service):
    agent = _agent(root)
    agent.start()
    try:
        from gpudra.kubeletplugin.kubelet_client import KubeletClient

        kubelet = KubeletClient(agent.paths.registration_socket)
        info = kubelet.register()
        kubelet.close()
        assert service in info.supported_versions
        assert info.supported_versions[0] == "v1.DRAPlugin"
        with grpc.insecure_channel(f"unix://{info.endpoint}") as channel:
            stub = grpc_module.DRAResourceHealthStub(channel)
            stream = stub.NodeWatchResources(pb2.NodeWatchResourcesRequest(), timeout=30)
            first = next(stream)
            assert len(first.devices) == 8
            assert {d.health for d in first.devices} == {pb2.HEALTHY}
            assert {d.device.pool_name for d in first.devices} == {NODE}
            uuid = agent.backend.inventory().gpus[3].uuid
            agent.backend.health_monitor.inject(HealthEvent("gpu-lost", gpu=uuid))
            second = next(stream)
            states = {d.device.device_name: (d.health, d.message) for d in second.devices}
            assert states["gpu-3"] == (pb2.UNHEALTHY, "gpu.nvidia.com/gpu-lost")
            assert sum(h == pb2.HEALTHY for h, _ in states.values()) == 7
            stream.cancel()
    finally:
        agent.stop()


def test_no_health_stream_is_advertised_without_device_health(root):
    agent = _agent(root, health_events=False, health_stream=False)
    agent.start()
    try:
        from gpudra.kubeletplugin.kubelet_client import KubeletClient

        kubelet = KubeletClient(agent.paths.registration_socket)
        assert list(kubelet.register().supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        kubelet.close()
        assert agent.backend.health_monitor is None
    finally:
        agent.stop()


# -- NVML: the real pynvml wrappers over the C-level fake -------------------------------------------------------


def test_nvml_events_become_health_events(monkeypatch):
    lib = install(monkeypatch, from_simulated("hgx-a100-mig", node_name=NODE))
    lib.gpu(2).supported_events = pynvml.nvmlEventTypeXidCriticalError  # no ECC reporting on this one
    lib.fail("nvmlDeviceRegisterEvents", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=5)
    backend = open_backend("nvml", node_name=NODE)
    monitor = backend.open_health_monitor()
    try:
        registered = lib.registered_events()
        assert registered[0] == (pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
                                 | pynvml.nvmlEventTypeSingleBitEccError)
        assert registered[2] == pynvml.nvmlEventTypeXidCriticalError, "limited to the supported types"
        assert 5 not in registered
        first = monitor.wait(0)
        assert [(e.kind, e.gpu) for e in first] == [("unmonitored", lib.gpu(5).uuid)]
        assert monitor.wait(0.01) == [], "nothing queued: a timeout, no event"
        lib.emit(1, pynvml.nvmlEventTypeXidCriticalError, 79)
        assert monitor.wait(1) == [HealthEvent("xid", gpu=lib.gpu(1).uuid, xid=79)]
        lib.emit(0, pynvml.nvmlEventTypeXidCriticalError, 94, gi=3, ci=0)
        assert monitor.wait(1) == [HealthEvent("xid", gpu=lib.gpu(0).uuid, gi_id=3, ci_id=0, xid=94)]
        lib.emit(0, pynvml.nvmlEventTypeSingleBitEccError)
        assert monitor.wait(1) == [], "single-bit ECC is corrected by the hardware"
        lib.emit(3, pynvml.nvmlEventTypeDoubleBitEccError)
        assert monitor.wait(1) == [HealthEvent("ecc", gpu=lib.gpu(3).uuid)]
        lib.emit(2, pynvml.nvmlEventTypeDoubleBitEccError)  # not registered for GPU 2
        assert monitor.wait(0.01) == []
        lib.lose_gpu()
        assert [e.kind for e in monitor.wait(1)] == ["gpu-lost"]
    finally:
        monitor.close()
        backend.close()
    assert lib.registered_events() == {}, "the event set is freed"


# -- DeviceTaintRules ---------------------------------------------------------------------------------------------


class NotServed(Exception):
    status = 404


class FakeTaintRuleApi:
    """One API version's *_device_taint_rule calls (as the official client's Resource*Api has them)."""

    def __init__(self, served: bool):
        self.served = served
        self.rules: dict[str, dict] = {}
        self.version = 0

    def _check(self):
        if not self.served:
            raise NotServed()

    def list_device_taint_rule(self, limit=None, label_selector=None):
        self._check()
        wanted = dict(p.split("=", 1) for p in label_selector.split(",")) if label_selector else {}
        return {"items": [r for r in self.rules.values()
                          if all(r["metadata"]["labels"].get(k) == v for k, v in wanted.items())]}

    def create_device_taint_rule(self, body):
        self._check()
        assert body["metadata"]["name"] not in self.rules
        self.version += 1
        stored = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        stored["spec"] = {**body["spec"], "taint": {**body["spec"]["taint"], "timeAdded": "2026-01-01T00:00:00Z"}}
        self.rules[body["metadata"]["name"]] = stored

    def replace_device_taint_rule(self, name, body):
        assert self.rules[name]["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]
        del self.rules[name]
        self.create_device_taint_rule(body)

    def delete_device_taint_rule(self, name):
        del self.rules[name]


def test_device_taint_rules_follow_the_taints_in_the_served_version(root):
    from gpudra.kubeletplugin.publisher import KubeSliceClient
    from gpudra.gpuplugin.taintrules import TaintRulePublisher

    v1, v1beta2 = FakeTaintRuleApi(served=False), FakeTaintRuleApi(served=True)
    client = KubeSliceClient(None, None, {"resource.k8s.io/v1": v1, "resource.k8s.io/v1beta2": v1beta2})
    publisher = TaintRulePublisher(client, node_name=NODE, driver_name="gpu.nvidia.com", backoff_s=0.001)
    backend = open_backend("simulated", profile="dgx-h100", node_name=NODE)
    inventory = backend.inventory()
    health = DeviceHealth("gpu.nvidia.com")

    def devices():
        return [d for s in build_resource_slices(inventory, NODE, taints_of=health.taints_of) for d in s["spec"]["devices"]]

    assert publisher.sync(devices()) == {"supported": True, "apiVersion": "resource.k8s.io/v1beta2", "created": 0,
                                         "updated": 0, "deleted": 0}
    health.record([HealthEvent("xid", gpu=inventory.gpus[2].uuid, xid=79)], inventory)
    assert publisher.sync(devices())["created"] == 1
    (rule,) = v1beta2.rules.values()
    assert rule["apiVersion"] == "resource.k8s.io/v1beta2"
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-2"}
    assert (rule["spec"]["taint"]["key"], rule["spec"]["taint"]["value"]) == (XID_KEY, "79")
    assert publisher.sync(devices())["created"] == 0, "unchanged (the server's timeAdded is not a change)"
    health.record([HealthEvent("xid", gpu=inventory.gpus[2].uuid, xid=13)], inventory)
    assert publisher.sync(devices())["updated"] == 1
    assert next(iter(v1beta2.rules.values()))["spec"]["taint"]["effect"] == "None"
    health = DeviceHealth("gpu.nvidia.com")  # a restarted driver: no taints any more
    assert publisher.sync(devices())["deleted"] == 1 and v1beta2.rules == {}

    nowhere = TaintRulePublisher(KubeSliceClient(None, None, {"resource.k8s.io/v1": FakeTaintRuleApi(served=False)}),
                                 node_name=NODE, driver_name="gpu.nvidia.com")
    assert nowhere.sync(devices()) == {"supported": False}


def test_the_agent_keeps_device_taint_rules_with_its_slices(root):
    api = WatchedSliceApi()
    rules = FakeTaintRuleApi(served=True)
    api.taint_rule_version = lambda: "resource.k8s.io/v1"
    api.list_taint_rules = lambda selector: rules.list_device_taint_rule(label_selector=selector)["items"]
    api.create_taint_rule = rules.create_device_taint_rule
    api.replace_taint_rule = rules.replace_device_taint_rule
    api.delete_taint_rule = rules.delete_device_taint_rule
    agent = _agent(root, api, device_taint_rules=True)
    agent.start()
    try:
        assert agent.taint_rule_summary["supported"] and rules.rules == {}
        agent.backend.health_monitor.inject(HealthEvent("ecc", gpu=agent.backend.inventory().gpus[5].uuid))
        _until(lambda: agent.health_republished == 1, "the republication")
        (rule,) = rules.rules.values()
        assert rule["spec"]["deviceSelector"]["device"] == "gpu-5"
        assert rule["spec"]["taint"]["key"] == "gpu.nvidia.com/ecc"
    finally:
        agent.stop()


def test_the_agent_on_nvml_taints_what_nvml_reports(monkeypatch, root):
    lib = install(monkeypatch, from_simulated("dgx-h100", node_name=NODE))
    lib.fail("nvmlDeviceRegisterEvents", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=5)
    agent = _agent(root, backend="nvml", driver_root=os.path.join(root, "no-driver"), health_stream=False)
    agent.start()
    try:
        taints = {d["name"]: d.get("taints") for d in agent._published}
        assert taints["gpu-5"] == [{"key": "gpu.nvidia.com/unmonitored", "effect": "None",
                                    "timeAdded": taints["gpu-5"][0]["timeAdded"]}], "known before the first publication"
        assert agent.health_republished == 0
        lib.emit(1, pynvml.nvmlEventTypeXidCriticalError, 48)
        _until(lambda: agent.health_republished == 1, "the republication after the NVML event")
        taint = next(d for d in agent._published if d["name"] == "gpu-1")["taints"][0]
        assert (taint["key"], taint["value"], taint["effect"]) == (XID_KEY, "48", "NoSchedule")
        assert agent.health.counts(agent._published) == {"healthy": 6, "unhealthy": 1, "unknown": 1}
    finally:
        agent.stop()


def test_a_malformed_spool_file_is_reported_and_later_events_still_apply(tmp_path):
    """Issue 20, finding 7: `"xid": "79"` (a string) raised a TypeError the monitor did not catch, the file stayed,
    and every later event sat behind it. Each bad file is now reported and removed; the events after it arrive."""
    from gpudra.discovery.health import SpoolMonitor, write_spooled_event

    spool = tmp_path / "events"
    spool.mkdir()
    uuids = {"0": "GPU-a", "1": "GPU-b"}

    def resolve(gpu):
        if str(gpu) in uuids.values():
            return gpu
        if str(gpu) not in uuids:
            raise HealthEventError(f"no GPU {gpu!r}")
        return uuids[str(gpu)]

    # named to sort before the good event (nanosecond names): each bad file is read first
    bad = {"0000-0-string-xid": '{"kind": "xid", "gpu": 0, "xid": "79"}', "0000-1-bool-gi": '{"kind": "ecc", "gi_id": true}',
           "0000-2-list-gpu": '{"kind": "ecc", "gpu": [0]}', "0000-3-deep": "[" * 100000 + "]" * 100000,
           "0000-4-binary": "\udcff", "0000-5-huge": '{"kind": "ecc", "detail": "' + "x" * 70000 + '"}'}
    for name, text in bad.items():
        (spool / f"{name}.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    os.mkfifo(spool / "0000-6-fifo.json")
    good = write_spooled_event(str(spool), HealthEvent(kind="xid", gpu="GPU-b", xid=48))
    monitor = SpoolMonitor(str(spool), resolve)
    events = monitor.wait(0)
    assert events == [HealthEvent(kind="xid", gpu="GPU-b", xid=48)]
    assert [line.split(":")[0] for line in monitor.rejected] == [f"{name}.json" for name in bad] + ["0000-6-fifo.json"]
    assert "xid must be an integer" in monitor.rejected[0] and "not a regular file" in monitor.rejected[-1]
    assert os.listdir(spool) == [] and not os.path.exists(good)
