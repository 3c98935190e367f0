"""Dynamic-MIG slices through the structured allocator: counters keep MIG instances apart.

For a node with H100s in dynamic-MIG mode the allocator must never hand out two devices whose
placements share a memory slice, a full GPU must exclude every MIG device on it (and the
other way round), and whenever a free placement of the requested profile exists the
allocator must find it.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra.allocator import Allocator, Features  # noqa: E402
from gpudra.api.quantity import Quantity  # noqa: E402
from gpudra.catalog import gpu_model  # noqa: E402
from gpudra.mig.dynamic import DynamicMigGpu, counter_set, gpu_devices, resolve_mig_device, resource_slices  # noqa: E402

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "labels": {"kubernetes.io/hostname": "node-a"}}}
H100 = gpu_model("NVIDIA H100 80GB HBM3")
GPU_COUNT = 2
UUIDS = [f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(GPU_COUNT)]
DEVICE_CLASSES = [
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
     "spec": {"selectors": [{"cel": {"expression":
                                     f"device.driver == 'gpu.nvidia.com' && "
                                     f"device.attributes['gpu.nvidia.com'].type == '{kind}'"}}]}}
    for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig"))
]
GPUS = [DynamicMigGpu(i, H100, UUIDS[i], attributes={"productName": {"string": H100.product_names[0]}})
        for i in range(GPU_COUNT)]
SLICES = resource_slices("node-a", GPUS)


def _claim(name: str, device_class: str, selectors: list[str], count: int = 1) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": [{"name": "req", "exactly": {
                "deviceClassName": device_class, "count": count,
                "selectors": [{"cel": {"expression": s}} for s in selectors]}}]}}}


def _profile_claim(name: str, profile: str, gpu: int | None = None, count: int = 1) -> dict:
    selectors = [f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"]
    if gpu is not None:
        selectors.append(f"device.attributes['gpu.nvidia.com'].parentUUID == '{UUIDS[gpu]}'")
    return _claim(name, "mig.nvidia.com", selectors, count)


def _full_claim(name: str, gpu: int | None = None) -> dict:
    selectors = [] if gpu is None else [f"device.attributes['gpu.nvidia.com'].uuid == '{UUIDS[gpu]}'"]
    return _claim(name, "gpu.nvidia.com", selectors)


class Node:
    """Allocate claims one at a time, as the scheduler does, remembering what is in use."""

    def __init__(self) -> None:
        self.allocated: list[dict] = []
        self.devices: list[str] = []

    def allocate(self, claim: dict) -> bool:
        engine = Allocator(DEVICE_CLASSES, SLICES, self.allocated, features=Features.parse("default"))
        outcome = engine.allocate(NODE, [claim])
        assert outcome.outcome in ("allocated", "unallocatable"), outcome
        if outcome.outcome != "allocated":
            return False
        (allocation,) = outcome.allocations
        done = copy.deepcopy(claim)
        done["status"] = {"allocation": allocation}
        self.allocated.append(done)
        self.devices.extend(r["device"] for r in allocation["devices"]["results"])
        return True

    def per_gpu(self) -> dict[int, list]:
        out: dict[int, list] = {i: [] for i in range(GPU_COUNT)}
        for name in self.devices:
            if name.startswith("gpu-") and "-mig-" not in name:
                out[int(name.split("-")[1])].append("full")
            else:
                ref = resolve_mig_device(name, {i: H100 for i in range(GPU_COUNT)})
                out[ref.parent_minor].append(ref)
        return out

    def check_invariants(self) -> None:
        assert len(self.devices) == len(set(self.devices)), self.devices
        for gpu, items in self.per_gpu().items():
            if "full" in items:
                assert items == ["full"], (gpu, items)
                continue
            for i, a in enumerate(items):
                for b in items[i + 1:]:
                    assert not a.placement.overlaps(b.placement), (gpu, a, b)
            assert sum(r.profile.compute_slices for r in items) <= H100.compute_slices

    def remaining_counters(self, gpu: int) -> dict[str, int]:
        have = {k: Quantity.parse(v["value"]).as_int() for k, v in counter_set(H100, gpu)["counters"].items()}
        device_by_name = {d["name"]: d for d in gpu_devices(GPUS[gpu])}
        for name in self.devices:
            if name in device_by_name:
                for k, v in device_by_name[name]["consumesCounters"][0]["counters"].items():
                    have[k] -= Quantity.parse(v["value"]).as_int()
        return have

    def profile_fits_somewhere(self, profile: str) -> bool:
        for gpu in range(GPU_COUNT):
            have = self.remaining_counters(gpu)
            for device in gpu_devices(GPUS[gpu]):
                ref = resolve_mig_device(device["name"], {gpu: H100})
                if ref is None or ref.profile.name != profile:
                    continue
                need = {k: Quantity.parse(v["value"]).as_int()
                        for k, v in device["consumesCounters"][0]["counters"].items()}
                if all(have[k] >= v for k, v in need.items()):
                    return True
        return False


def test_full_gpu_blocks_every_mig_device_on_it():
    node = Node()
    assert node.allocate(_full_claim("whole", gpu=0))
    for profile in H100.profiles:
        assert not node.allocate(_profile_claim(f"mig-{profile.profile_id}", profile.name, gpu=0)), profile.name
    assert node.allocate(_profile_claim("other-gpu", "1g.10gb", gpu=1))
    node.check_invariants()


@pytest.mark.parametrize("profile", [p.name for p in H100.profiles])
def test_any_mig_device_blocks_the_full_gpu(profile):
    node = Node()
    assert node.allocate(_profile_claim("mig", profile, gpu=0))
    assert not node.allocate(_full_claim("whole", gpu=0))
    assert node.allocate(_full_claim("whole-1", gpu=1))
    node.check_invariants()


def test_seven_1g_then_nothing_else_fits_on_that_gpu():
    node = Node()
    assert node.allocate(_profile_claim("seven", "1g.10gb", gpu=0, count=7))
    assert not node.allocate(_profile_claim("eighth", "1g.10gb", gpu=0))
    assert not node.allocate(_profile_claim("me", "1g.10gb+me", gpu=0))
    node.check_invariants()


def test_two_3g_fill_the_memory_slices():
    node = Node()
    assert node.allocate(_profile_claim("half-a", "3g.40gb", gpu=0))
    assert node.allocate(_profile_claim("half-b", "3g.40gb", gpu=0))
    assert not node.allocate(_profile_claim("tiny", "1g.10gb", gpu=0))
    node.check_invariants()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from([p.name for p in H100.profiles] + ["full"]), st.integers(1, 3)),
                min_size=1, max_size=10))
def test_random_claim_sequences_never_overlap(sequence):
    node = Node()
    for step, (profile, count) in enumerate(sequence):
        if profile == "full":
            ok = node.allocate(_full_claim(f"c{step}"))
            if not ok:
                assert all(items for items in node.per_gpu().values())
        else:
            fits_before = node.profile_fits_somewhere(profile)
            ok = node.allocate(_profile_claim(f"c{step}", profile, count=count))
            if count == 1:
                assert ok == fits_before, (profile, node.devices)
        node.check_invariants()


def _claims_from_file(path: str) -> list[dict]:
    import yaml

    claims = []
    with open(path) as fh:
        for obj in yaml.safe_load_all(fh):
            if not obj:
                continue
            if obj["kind"] == "ResourceClaimTemplate":
                obj = {"apiVersion": obj["apiVersion"], "kind": "ResourceClaim",
                       "metadata": dict(obj["metadata"]), "spec": obj["spec"]["spec"]}
            obj["metadata"]["uid"] = "uid-" + obj["metadata"]["name"]
            claims.append(obj)
    return claims


@pytest.mark.parametrize("model_key, count", [("h100", 2), ("h100", 1), ("a100-40gb", 1)])
def test_planner_dynamic_simulation_matches_the_allocator(model_key, count):
    """`gpudra mig plan` predicts dynamic MIG by simulating the allocator: check it against the real one."""
    import os

    from gpudra.mig.planner import demands_from_objects, simulate_dynamic

    model = gpu_model(model_key)
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "mig", "claims-mix.yaml")
    claims = _claims_from_file(path)
    gpus = [DynamicMigGpu(i, model, f"GPU-{i}", attributes={"productName": {"string": model.product_names[0]}})
            for i in range(count)]
    slices = resource_slices("node-a", gpus)
    allocated: list[dict] = []
    real: list[str] = []
    for claim in claims:
        outcome = Allocator(DEVICE_CLASSES, slices, allocated, features=Features.parse("default")).allocate(
            NODE, [claim])
        if outcome.outcome == "allocated":
            (allocation,) = outcome.allocations
            done = copy.deepcopy(claim)
            done["status"] = {"allocation": allocation}
            allocated.append(done)
            real.extend(r["device"] for r in allocation["devices"]["results"])
    placed, _ = simulate_dynamic(model, count, demands_from_objects(claims, model))
    simulated = [name for gpu in placed for _, name in gpu]
    assert sorted(simulated) == sorted(real)
