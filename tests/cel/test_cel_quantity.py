"""gpudra.cel on quantities: results agree with Kubernetes' CEL libraries (cel-go)."""

import pytest

from gpudra.cel import CELRuntimeError, compile_selector, device_input

DEVICE = device_input("x.com", {"name": "d", "capacity": {"big": {"value": "10E"}, "half": {"value": "500m"},
                                                         "cores": {"value": "8"}}})


# k8s quantity library: "isInteger: returns true if and only if asInteger is safe to call without an error"
# (it is AsInt64's ok flag), so a whole number beyond int64 is not an integer there.
@pytest.mark.parametrize("capacity, expected", [("big", False), ("half", False), ("cores", True)])
def test_is_integer_agrees_with_as_integer(capacity, expected):
    assert compile_selector(f"device.capacity['x.com'].{capacity}.isInteger()").evaluate(DEVICE) is expected
    as_integer = compile_selector(f"device.capacity['x.com'].{capacity}.asInteger() >= 0")
    if expected:
        assert as_integer.evaluate(DEVICE) is True
    else:
        with pytest.raises(CELRuntimeError):
            as_integer.evaluate(DEVICE)
