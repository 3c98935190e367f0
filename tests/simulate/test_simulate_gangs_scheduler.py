"""The NVL72 gang replay's all-or-nothing verdicts (gpudra.simulate.gangs) against gpudra's scheduler, the reference:
each gang is built as kube-scheduler 1.36 sees it (a PodGroup with gang minCount = its pods, pods joined by
spec.schedulingGroup, a claim of `gpus` GPUs each) on trays published as the GPU driver publishes them (each tray a
node labelled with its NVLink clique, its free GPUs in its ResourceSlice with their cliqueID), and the scheduler's
GangScheduling Permit (kubernetes v1.36.0 pkg/scheduler/framework/plugins/gangscheduling/gangscheduling.go) binds
the pods all together or none.

Where the two can be compared: pods that need more than half a tray's GPUs (so two never share a tray, as the
replay lays a gang out one pod per tray; gpudra.simulate.gangscheduler says so with a pod anti-affinity instead,
tests/simulate/test_gangscheduler.py), and the
clique given to the scheduler by a nodeSelector (kube-scheduler picks no clique by itself: without the 1.36
TopologyAwareWorkloadScheduling placement, gpudra.scheduler.workloadplacement, which tests/simulate/test_gangscheduler.py
checks, the replay's best-fit `clique-aware` rule is the replay's choice).
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra.controllers import ManagedCluster
from gpudra.scheduler.scheduler import Scheduler
from gpudra.simulate.gangs import RackState, place
from gpudra.simulate.nvl72 import nvl72_racks

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
GANG_GATES = "default,+GenericWorkload,+GangScheduling"
CLIQUE_LABEL = "nvidia.com/gpu.clique"


def _trays(topology, free):
    objects = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}}]
    for tray, gpus in zip(topology.trays, free):
        objects.append({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": tray.name, "labels": {CLIQUE_LABEL: tray.clique}},
                        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}})
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                        "metadata": {"name": f"{tray.name}-gpus"},
                        "spec": {"driver": "gpu.nvidia.com", "nodeName": tray.name,
                                 "pool": {"name": tray.name, "generation": 1, "resourceSliceCount": 1},
                                 "devices": [{"name": f"gpu-{i}", "attributes": {"cliqueID": {"string": tray.clique}}}
                                             for i in range(gpus)]}})
    return objects


def _gang(pods, gpus, clique=None):
    objects = [{"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                "metadata": {"name": "job", "namespace": "default"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": pods}}}},
               {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "gpus", "namespace": "default"},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": gpus}}]}}}}]
    for index in range(pods):
        spec = {"schedulingGroup": {"podGroupName": "job"},
                "containers": [{"name": "worker", "image": "w", "resources": {"claims": [{"name": "gpus"}]}}],
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]}
        if clique is not None:
            spec["nodeSelector"] = {CLIQUE_LABEL: clique}
        objects.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"job-{index}", "namespace": "default", "uid": f"job-{index}"},
                        "spec": spec})
    return objects


def scheduler_binds(topology, free, pods, gpus, clique=None) -> bool:
    cluster = ManagedCluster(_trays(topology, free) + _gang(pods, gpus, clique), features=GANG_GATES,
                             kubernetes_version="1.36")
    results = Scheduler(cluster).run()
    bound = [r for r in results if r.scheduled]
    assert len(bound) in (0, pods)  # all or nothing
    assert len({r.node for r in bound}) == len(bound)  # more than half a tray each: one pod per tray
    return bool(bound)


@st.composite
def cases(draw):
    cliques, trays, per_tray = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    topology = nvl72_racks(cliques, trays_per_rack=trays, gpus=per_tray)
    free = [draw(st.integers(0, per_tray)) for _ in topology.trays]
    gpus = draw(st.integers(per_tray // 2 + 1, per_tray))
    pods = draw(st.integers(1, cliques * trays + 1))
    return topology, free, pods, gpus


def _state(topology, free):
    state = RackState.empty(topology)
    for tray, gpus in enumerate(free):
        if topology.trays[tray].gpus > gpus:
            state.bind(f"filler-{tray}", (tray,), topology.trays[tray].gpus - gpus)
    return state


@SETTINGS
@given(cases(), st.integers(0, 2**16))
def test_the_replay_s_blind_gang_starts_exactly_when_the_scheduler_binds_it(case, seed):
    topology, free, pods, gpus = case
    replay = place("clique-blind-binpack", _state(topology, free), pods, gpus, random.Random(seed)) is not None
    assert replay == scheduler_binds(topology, free, pods, gpus)


@SETTINGS
@given(cases())
def test_a_clique_hosts_a_gang_exactly_when_the_scheduler_binds_it_there(case):
    topology, free, pods, gpus = case
    state = _state(topology, free)
    for index, clique in enumerate(topology.cliques):
        assert state.hosts(index, (pods, gpus)) == scheduler_binds(topology, free, pods, gpus, clique), clique
