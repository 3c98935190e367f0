"""API limits: a hostile selector can neither hang an evaluation nor exhaust memory."""

from __future__ import annotations


import pytest

from gpudra.cel import MAX_COST, MAX_EXPRESSION_BYTES, CELCompileError, CELRuntimeError, compile_selector, device_input

DEVICE = device_input(
    "gpu.nvidia.com",
    {"name": "gpu-0", "attributes": {"productName": {"string": "NVIDIA H100"}}, "capacity": {"memory": {"value": "80Gi"}}},
)


def test_expression_length_limit_is_10_kib_in_bytes():
    padding = " " * (MAX_EXPRESSION_BYTES - len("true"))
    assert compile_selector("true" + padding).evaluate(DEVICE) is True
    with pytest.raises(CELCompileError, match="may not be more than 10240 bytes"):
        compile_selector("true " + padding)
    # multi-byte characters count as bytes, as in the API server
    with pytest.raises(CELCompileError, match="Too long"):
        compile_selector('"' + "é" * (MAX_EXPRESSION_BYTES // 2) + '" != ""')


HOSTILE = {
    "nested ranges": "lists.range(1000).all(i, lists.range(1000).all(j, lists.range(1000).all(k, i + j + k >= 0)))",
    "large literal loops": "[" + ",".join(["0"] * 1200) + "].all(x, [" + ",".join(["0"] * 1200) + "].all(y, x == y))",
    "string doubling": 'cel.bind(a, "xxxxxxxxxxxxxxxx", '
    + "cel.bind(a, a + a, " * 28
    + "size(a) > 0"
    + ")" * 29,
    "unbounded range": 'lists.range(int(device.attributes["gpu.nvidia.com"].productName.size()) * 100000000).size() > 0',
    "replace blow-up": 'cel.bind(a, device.attributes["gpu.nvidia.com"].productName, '
    + 'cel.bind(a, a.replace("", a), ' * 6
    + "size(a) > 0"
    + ")" * 7,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_expressions_are_refused_at_compile_time(name):
    # refused by the static estimate: nothing is evaluated (no wall-clock limit: a loaded runner is slow)
    with pytest.raises(CELCompileError) as caught:
        compile_selector(HOSTILE[name])
    assert "exceeds cost limit" in str(caught.value) or "recursion" in str(caught.value)


LIST_DOUBLING = "cel.bind(a, lists.range(64), " + "cel.bind(a, a + a, " * 28 + "size(a) > 0" + ")" * 29


def test_list_doubling_is_accepted_as_cel_go_estimates_it_but_never_built():
    # cel-go v0.26.0 checker/cost.go: list concatenation (add_list) costs 1 whatever the sizes, so the API
    # server accepts this; cel-go concatenates lazily, cel-cpp would copy 64 x 2^28 elements, so gpudra's
    # own bound stops the evaluation first (a known difference: cel-go answers true)
    for stored in (False, True):
        selector = compile_selector(LIST_DOUBLING, stored=stored)
        assert selector.estimated_cost <= MAX_COST
        with pytest.raises(CELRuntimeError, match="actual cost limit exceeded"):
            selector.evaluate(DEVICE)


def test_ordinary_selectors_stay_far_below_the_limit():
    for expression in (
        'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100"',
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
        'device.attributes["gpu.nvidia.com"].all(k, v, k != "")',
        'device.attributes.exists(d, device.attributes[d].exists(k, k == "x"))',
        "lists.range(100).map(x, x * 2).filter(y, y > 10).size() > 0",
    ):
        assert compile_selector(expression).estimated_cost < MAX_COST / 10


def test_costly_accepted_expressions_evaluate_quickly_or_hit_the_runtime_limit():
    selector = compile_selector("lists.range(90).all(i, lists.range(90).all(j, i + j >= 0))")
    assert selector.estimated_cost <= MAX_COST
    # 90 x 90 = 8,100 comprehension iterations: under cel-cpp's budget of 10,000, so it completes
    assert selector.evaluate(DEVICE) is True
    # 40,000 iterations: past cel-cpp's budget of 10,000 per evaluation, but within cel-go's cost limit, so the
    # outermost macro is evaluated part by part (gpudra.cel.chunked)
    selector = compile_selector("lists.range(200).all(i, lists.range(200).all(j, i + j >= 0))")
    assert selector.evaluate(DEVICE) is True
    # elsewhere in the expression, and nested deeper, the closed macros are evaluated part by part first
    selector = compile_selector('device.driver != "" && lists.range(200).all(i, lists.range(200).all(j, i + j >= 0))')
    assert selector.evaluate(DEVICE) is True
    selector = compile_selector("lists.range(3).all(k, lists.range(100).all(m, lists.range(100).all(n, k + m + n >= 0)))")
    assert selector.evaluate(DEVICE) is True
    # past cel-go's estimate, kube-scheduler's reading still stops at the runtime limit (cel-go: actual cost 1000001)
    selector = compile_selector('device.driver != "" && lists.range(1000).all(i, lists.range(1000).all(j, i >= 0))',
                                stored=True)
    with pytest.raises(CELRuntimeError, match="actual cost limit exceeded"):
        selector.evaluate(DEVICE)
