"""CEL under hostile values (issue 12, defect 8): quantity() of a huge exponent is bounded at validation and
at run time, evaluations run under Kubernetes' runtime cost limit and under the search's deadline."""

from __future__ import annotations

import pytest

from gpudra.allocator import TIMED_OUT, Allocator, Features
from gpudra.api.schema.cel_check import compile_outcome
from gpudra.cel import CELRuntimeError, budget, compile_selector, device_input
from gpudra.cel.budget import COST_LIMIT_EXCEEDED, EvaluationDeadlineExceeded

DEVICE = {"name": "gpu-0", "attributes": {"big": {"string": "100000000"}}, "capacity": {"memory": {"value": "80Gi"}}}


def fresh_device():
    return device_input("gpu.nvidia.com", DEVICE)


def test_huge_quantity_literal_is_bounded_at_validation():
    # used to hang: the constant is folded at compile time and the parser built 10**100000000
    assert compile_outcome('sign(quantity("1e100000000")) == 1') is None  # valid CEL, as for Kubernetes
    selector = compile_selector('sign(quantity("1e100000000")) == 1')
    with pytest.raises(CELRuntimeError, match="too large"):
        selector.evaluate(fresh_device())


@pytest.mark.parametrize("expression", [
    'sign(quantity("1e" + device.attributes["gpu.nvidia.com"].big)) == 1',
    'isQuantity("1e" + device.attributes["gpu.nvidia.com"].big)',
    'sign(quantity("1" + device.attributes["gpu.nvidia.com"].big + "e3999")) == 1',
])
def test_huge_quantities_built_at_run_time_are_bounded(expression):
    selector = compile_selector(expression)
    try:
        result = selector.evaluate(fresh_device())
    except CELRuntimeError as error:
        assert "too large" in error.message
    else:
        assert result is False  # isQuantity: not a quantity gpudra can hold


def test_cost_limit_ends_the_evaluation_even_inside_an_or(monkeypatch):
    call = 'sign(quantity(device.attributes["gpu.nvidia.com"].big)) == 1'  # a run-time call, cost 1
    expression = f"{call} && {call} && {call} && ({call} || true)"
    selector = compile_selector(expression)
    assert selector.evaluate(fresh_device()) is True
    monkeypatch.setattr(budget, "MAX_COST", 3)
    # the fourth call goes over the limit; its error alone would be absorbed by `|| true`
    with pytest.raises(CELRuntimeError, match=COST_LIMIT_EXCEEDED):
        selector.evaluate(fresh_device())


def test_a_passed_deadline_is_no_outcome():
    selector = compile_selector('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) > 0')
    device = fresh_device()
    with pytest.raises(EvaluationDeadlineExceeded):
        selector.evaluate(device, deadline=0.0)  # long past
    assert selector.evaluate(device) is True  # not cached as an error


def test_allocation_stops_at_the_deadline_in_cel_and_recovers(monkeypatch):
    from gpudra.allocator import allocator as allocator_module

    expression = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) > 0'
    device_class = {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}
    slices = [{"spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
                        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                        "devices": [dict(DEVICE, name=f"gpu-{i}") for i in range(4)]}}]
    claim = {"metadata": {"name": "c", "namespace": "d"},
             "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}}
    allocator = Allocator([device_class], slices, [], Features.parse("default"))

    class Late:  # the allocator computes the deadline, then the CEL evaluation finds it passed
        readings = 0

        @classmethod
        def monotonic(cls):
            cls.readings += 1
            return 0.0 if cls.readings == 1 else 1e9

    monkeypatch.setattr(allocator_module, "time", Late)
    monkeypatch.setattr(budget, "time", Late)
    outcome = allocator.allocate("n1", [claim])
    assert (outcome.outcome, outcome.error) == ("error", TIMED_OUT)
    monkeypatch.undo()
    assert allocator.allocate("n1", [claim]).outcome == "allocated"
