"""Worst-case searches (issue 12, defect 11): every allocate has kube-scheduler's 10 s Filter timeout by
default, and `schedule` gives a pod one budget over all nodes instead of 10 s per node.

The clock is injected: time.monotonic() in the allocator advances one second per reading, so a search
that would enumerate C(63,7) device subsets hits its deadline after a few thousand steps.
"""

from __future__ import annotations

import copy

import pytest

from gpudra.allocator import FILTER_TIMEOUT_S, TIMED_OUT, Allocator, Features
from gpudra.allocator import allocator as allocator_module
from gpudra.allocator import search as search_module
from gpudra.scheduler import Scheduler
from gpudra.controllers import ManagedCluster
from gpudra.cel import budget
from gpudra.scheduler import scheduler as scheduler_module
from tests.support.builders import DRIVER, claim, device_class, devices, node, pod, resource_slice
from support.clock import SteppingClock  # noqa: F401


@pytest.fixture
def clock(monkeypatch):
    fake = SteppingClock()
    for module in (allocator_module, search_module, scheduler_module, budget):  # every reader of the deadline
        monkeypatch.setattr(module, "time", fake)
    return fake


def hostile_slice(node_name: str) -> dict:
    """63 devices in group 1 and one in group 2: 7 of group 1 plus the group-2 device never match."""
    return resource_slice(node_name, devices(63, group=1) + devices(1, prefix="odd", group=2))


HOSTILE_CLAIM_SPEC = {"devices": {
    "requests": [
        {"name": "many", "exactly": {"deviceClassName": "gpu", "count": 7}},
        {"name": "odd", "exactly": {"deviceClassName": "gpu", "count": 1,
                                    "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].group == 2'}}]}},
    ],
    "constraints": [{"matchAttribute": f"{DRIVER}/group"}],
}}


def test_allocate_has_the_filter_timeout_by_default(clock):
    allocator = Allocator([device_class()], [hostile_slice("n1")], [], Features.parse("default"))
    hostile = claim("c", spec=copy.deepcopy(HOSTILE_CLAIM_SPEC))
    outcome = allocator.allocate("n1", [hostile])  # no timeout given: C(63,7) subsets before this change
    assert (outcome.outcome, outcome.error, outcome.error_node_local) == ("error", TIMED_OUT, True)
    assert FILTER_TIMEOUT_S - 1 <= clock.now <= FILTER_TIMEOUT_S + 2  # stopped at the default, not later


def test_an_ordinary_claim_is_not_affected():
    allocator = Allocator([device_class()], [hostile_slice("n1")], [], Features.parse("default"))
    outcome = allocator.allocate("n1", [claim("c", count=8)])
    assert outcome.outcome == "allocated"


def test_the_timeout_can_be_switched_off(monkeypatch):
    # None: no limit (allocate --timeout 0). A fake clock far past any deadline shows nothing reads it.
    allocator = Allocator([device_class()], [resource_slice("n1", devices(4))], [], Features.parse("default"))
    fake = SteppingClock()
    fake.now = 1e12
    monkeypatch.setattr(search_module, "time", fake)
    assert allocator.allocate("n1", [claim("c", count=2)], timeout=None).outcome == "allocated"


def test_schedule_gives_a_pod_one_budget_over_all_nodes(clock):
    names = ["n1", "n2", "n3", "n4"]
    objects = [device_class(), claim("c", spec=copy.deepcopy(HOSTILE_CLAIM_SPEC)), pod("p", claims={"gpu": "c"})]
    for name in names:
        objects += [node(name), hostile_slice(name)]
    scheduler = Scheduler(ManagedCluster(objects))
    (result,) = scheduler.run()
    assert not result.scheduled
    assert set(result.filtered) == set(names)
    for name in names:
        assert [r.message for r in result.filtered[name].reasons] == [TIMED_OUT]
    # 10 s per node, one after another, was 40 s; now the nodes after the first find the budget spent
    assert clock.now <= FILTER_TIMEOUT_S + 2 * len(names) + 2


def test_a_timed_out_verdict_is_not_reused_for_the_next_pod(clock):
    objects = [device_class(), node("n1"), hostile_slice("n1"),
               claim("c1", spec=copy.deepcopy(HOSTILE_CLAIM_SPEC)), claim("c2", spec=copy.deepcopy(HOSTILE_CLAIM_SPEC)),
               pod("p1", claims={"gpu": "c1"}), pod("p2", claims={"gpu": "c2"})]
    scheduler = Scheduler(ManagedCluster(objects), indexed=False)
    results = scheduler.run()
    assert [r.scheduled for r in results] == [False, False]
    started = clock.now
    # each pod searched for its own budget (a cached verdict would cost no clock readings)
    assert started >= 2 * FILTER_TIMEOUT_S
