"""Differential test: gpudra's allocator against the literal reference port (reference_allocator.py).

Hypothesis builds small clusters and claims around the shapes where a search shortcut or a variant
difference would show: pools split over several slices whose names do not sort in device order,
several pools per node, pools that look incomplete from the node, firstAvailable with
matchAttribute/distinctAttribute, taints and tolerations, shared counters, admin access, consumable
capacity and pre-allocated claims, under every variant and random feature subsets. Both must give the
same outcome and, when allocated, the same results device for device.

A third of the examples are the "partitioned GPUs" shape (one or two GPUs split into partitions that
share a counter set holding fewer units than the partitions take together, spread over slices, and one
claim for two or three of them): there a device that a taint or constraint rejects keeps its counter
units (an upstream quirk), so how often the search revisits devices changes the answer.

Derandomized and bounded (EXAMPLES_PER_VARIANT per variant test, 3,000 in all; about 20 s of CPU) so
that CI runs the same examples every time within its budget. A scenario whose literal search needs
more than MAX_REFERENCE_STEPS steps is skipped (exponential unallocatable searches say nothing about
order and would eat the budget).

Deliberate bugs this test catches (tests/support/differential_mutants.py patches each into the production
allocator and reruns these exact examples; example numbers count across the three variant tests,
stable first, measured 2026-12-02):
  stable-combinations          stable takes the combination shortcut where rejected devices leak
                               counters                                           stable, example 11
  permutations-everywhere      incubating/experimental try permutations      incubating, example 1299
  stable-sorts-slices          stable sorts a pool's slices by name                stable, example 2
  incubating-input-slice-order incubating keeps a pool's slices in input order incubating, ex. 1013
  stable-sorts-pools           stable sorts pools by (driver, name)                stable, example 7
  incubating-pools-reversed    incubating visits pools in reverse order      incubating, example 1013
  binding-pools-not-last       pools with binding conditions not moved last  incubating, example 1054
  stable-binding-pools-last    stable moves pools with binding conditions last    stable, example 7
  subrequests-reversed         firstAvailable subrequests tried last to first      stable, example 2
  taint-returns-counters       a taint-rejected device gives its counters back    stable, example 11
  rollback-keeps-taint-counters  as 1.36.3, a taint-rejected device keeps its counters   stable, example 17
  rollback-keeps-shared-counters as 1.36.3, an undone multi-allocatable device keeps them
                                                                                    incubating, example 1067
(the last two run against test_allocator_agrees_with_the_reference_port_as_1_36_3's rollback; measured 2026-12-07).
Before the partitioned shape and the reference step budget, stable-combinations, permutations-
everywhere and taint-returns-counters went unnoticed in 2,100 examples.
"""

from __future__ import annotations

import dataclasses
import os
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpudra.allocator import Allocator, Features
from gpudra.allocator.features import FEATURE_NAMES, VARIANT_SUPPORT
from gpudra.api.quantity import Quantity
from support.reference_allocator import Reference, TooBig

EXAMPLES_PER_VARIANT = int(os.environ.get("GPUDRA_DIFFERENTIAL_EXAMPLES", "1000"))  # × 3 variants = 3,000 examples per run
MAX_REFERENCE_STEPS = 20_000
GPU, NIC = "gpu.example.com", "nic.example.com"
NODE = {"metadata": {"name": "n1", "labels": {"zone": "a"}}}
ZONE_A = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}

def features_for(rng, variant):
    """A random feature set whose upstream variant is `variant`, sometimes forced on a smaller set."""
    supported = sorted(VARIANT_SUPPORT[variant])
    enabled = [name for name in supported if rng.random() < 0.6]
    chosen = Features.parse("none," + ",".join(sorted(enabled)))
    if chosen.variant_name != variant:
        chosen = chosen.with_variant(variant)
    return chosen


def devices(rng, prefix, driver, counters, partitioned):
    """partitioned: like the MIG devices of one GPU, each takes one unit of the pool's counter set."""
    found = []
    for i in range(rng.randint(2, 4) if partitioned else rng.randint(1, 3)):
        device = {"name": f"{prefix}{i}"}
        if driver == GPU:
            device["attributes"] = {
                "numa": {"int": rng.randint(0, 1)},
                "model": {"string": rng.choice((["a", "b"]))},
            }
        else:
            device["attributes"] = {"gpu.example.com/numa": {"int": rng.randint(0, 1)}}
        if rng.randint(0, 3) == 0:
            device["taints"] = [{"key": rng.choice((["k1", "k2"])), "value": "v",
                                 "effect": rng.choice((["NoSchedule", "NoExecute", "None"]))}]
        if partitioned:
            device["consumesCounters"] = [{"counterSet": "cs", "counters": {"mem": {"value": "1"}}}]
        elif counters and (rng.random() < 0.75):
            device["consumesCounters"] = [{"counterSet": "cs", "counters": {"mem": {"value": str(rng.randint(1, 3))}}}]
        if rng.randint(0, 3) == 0:
            device["allowMultipleAllocations"] = True
            capacity = {"value": str(rng.randint(2, 8))}
            policy = rng.choice(([None, "range", "values"]))
            if policy == "range":
                capacity["requestPolicy"] = {"default": "2", "validRange": {"min": "2", "step": "2"}}
            elif policy == "values":
                capacity["requestPolicy"] = {"default": "1", "validValues": ["1", "3"]}
            device["capacity"] = {"bw": capacity}
        if rng.randint(0, 9) == 0:
            device["bindingConditions"] = ["ready"]
            device["bindingFailureConditions"] = ["failed"]
        if rng.randint(0, 9) == 0:
            device["bindsToNode"] = True
        found.append(device)
    return found


def pool(rng, driver, name, partitioned=None):
    slice_names = rng.sample(["s-z", "s-a", "s-m", "s-b"], rng.randint(1, 3))
    counters = partitioned or rng.randint(0, 1) == 0
    # A partitioned pool's counter set holds fewer units than its devices take together: devices that
    # taints or constraints reject keep their units (an upstream quirk), so how often the search
    # revisits them (permutations or combinations, slice and pool order) decides what still fits.
    partitioned = counters and (rng.random() < 0.5 if partitioned is None else partitioned)
    where = rng.choice((["node", "node", "node", "all", "selector", "split"]))
    total = len(slice_names) + (1 if counters else 0)
    count = total + (0 if partitioned else rng.choice([0, 0, 0, 0, 1, -1]))  # the partitioned shape: complete
    slices = []
    for index, slice_name in enumerate(slice_names):
        spec = {"driver": driver, "pool": {"name": name, "generation": 1, "resourceSliceCount": max(count, 1)},
                "devices": devices(rng, f"{slice_name[-1]}{index}-", driver, counters, partitioned)}
        if where == "node" or (where == "split" and index == 0):
            spec["nodeName"] = "n1"
        elif where == "split":
            spec["nodeName"] = "n2"
        elif where == "all":
            spec["allNodes"] = True
        else:
            spec["nodeSelector"] = ZONE_A
        slices.append({"metadata": {"name": f"{driver}-{name}-{slice_name}"}, "spec": spec})
    if counters:
        wanted = sum(int(c["counters"]["mem"]["value"]) for s in slices for d in s["spec"]["devices"]
                     for c in d.get("consumesCounters") or [])
        capacity = rng.randint(2, max(2, min(6, wanted - 1)))
        slices.append({"metadata": {"name": f"{driver}-{name}-counters"},
                       "spec": {"driver": driver, "pool": {"name": name, "generation": 1,
                                                           "resourceSliceCount": max(count, 1)},
                                "sharedCounters": [{"name": "cs", "counters": {"mem": {"value": str(capacity)}}}]}})
    if rng.randint(0, 9) == 0:  # a stale slice of an older generation
        slices.append({"metadata": {"name": f"{driver}-{name}-old"},
                       "spec": {"driver": driver, "nodeName": "n1", "pool": {"name": name, "generation": 0, "resourceSliceCount": 1},
                                "devices": [{"name": "old0"}]}})
    order = rng.sample(range(len(slices)), len(slices))
    return [slices[i] for i in order]


CLASSES = [
    {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}],
                                           "config": [{"opaque": {"driver": GPU, "parameters": {"a": 1}}}]}},
    {"metadata": {"name": "nic"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC}"'}}]}},
]


def request_body(rng, allow_admin, least=1):
    body = {"deviceClassName": rng.choice((["gpu", "gpu", "nic"]))}
    mode = rng.choice((["ExactCount"] * 6 + ["All"]))
    if mode == "All":
        body["allocationMode"] = "All"
    else:
        body["count"] = rng.randint(least, 3)
    if body["deviceClassName"] == "gpu" and rng.randint(0, 2) == 0:
        body["selectors"] = [{"cel": {"expression": f'device.attributes["{GPU}"].model == "{rng.choice("ab")}"'}}]
    elif rng.randint(0, 5) == 0:
        body["selectors"] = [{"cel": {"expression": "!device.allowMultipleAllocations"}}]
    if allow_admin and rng.randint(0, 4) == 0:
        body["adminAccess"] = True
    if rng.randint(0, 2) == 0:
        body["tolerations"] = [rng.choice(([
            {"key": "k1", "operator": "Exists"},
            {"key": "k2", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
            {"operator": "Exists", "effect": "NoExecute"},
        ]))]
    if rng.randint(0, 4) == 0:
        body["capacity"] = {"requests": {"bw": str(rng.randint(1, 5))}}
    return body


def claim(rng, name, stable=False, requests_count=None, least=1):
    requests = []
    for r in range(requests_count or rng.randint(1, 3)):
        if rng.randint(0, 2) == 0:
            subs = [{"name": f"s{i}", **request_body(rng, False, least)} for i in range(rng.randint(1, 3))]
            requests.append({"name": f"r{r}", "firstAvailable": subs})
        else:
            requests.append({"name": f"r{r}", "exactly": request_body(rng, True, least)})
    devices_spec = {"requests": requests}
    constraints = []
    for _ in range(rng.randint(0, 2)):
        # stable does not know distinctAttribute (an error for the whole claim): rarely there.
        kind = rng.choice(["matchAttribute"] * (6 if stable else 2) + ["distinctAttribute"])
        constraint = {kind: f"{GPU}/numa"}
        if (rng.random() < 0.5):
            names = [r["name"] for r in requests] + [
                f"{r['name']}/{s['name']}" for r in requests for s in r.get("firstAvailable", [])]
            constraint["requests"] = rng.sample(names, min(len(names), rng.randint(1, 2)))
        constraints.append(constraint)
    if constraints:
        devices_spec["constraints"] = constraints
    if rng.randint(0, 3) == 0:
        devices_spec["config"] = [{"requests": [requests[0]["name"]], "opaque": {"driver": GPU, "parameters": {"b": 2}}}]
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": devices_spec}}


def preallocated(rng, slices):
    found = []
    devices = [(s["spec"]["driver"], s["spec"]["pool"]["name"], d) for s in slices for d in s["spec"].get("devices") or []]
    for n in range(rng.randint(0, 2) if devices else 0):
        driver, pool_name, device = rng.choice((devices))
        result = {"request": "r0", "driver": driver, "pool": pool_name, "device": device["name"]}
        if device.get("allowMultipleAllocations"):
            result["shareID"] = f"00000000-0000-0000-0000-00000000000{n}"
            result["consumedCapacity"] = {"bw": "1"}
        elif rng.randint(0, 3) == 0:
            result["adminAccess"] = True
        found.append({"metadata": {"name": f"old-{n}", "namespace": "default"},
                      "spec": {"devices": {"requests": [{"name": "r0", "exactly": {"deviceClassName": "gpu"}}]}},
                      "status": {"allocation": {"devices": {"results": [result]}}}})
    return found


def partitioned_gpus(rng, features):
    """One or two GPUs split into partitions (like MIG devices) spread over slices, and one claim with
    one request for two or three of them: where a rejected partition's leaked counter units make the
    search's visiting order (permutations or combinations, slice and pool order) change the answer."""
    slices = []
    for name in rng.sample(["p-b", "p-a"], rng.randint(1, 2)):
        slices.extend(pool(rng, GPU, name, partitioned=True))
    features = dataclasses.replace(features, partitionable_devices=True)  # supported by every variant
    claims = [claim(rng, "c0", features.stable_variant, requests_count=1, least=2)]
    for body in request_bodies(claims[0]):
        body["deviceClassName"] = "gpu"
    return features, slices, claims, preallocated(rng, slices)


def request_bodies(claim):
    for request in claim["spec"]["devices"]["requests"]:
        yield from request.get("firstAvailable") or [request["exactly"]]


def scenario(rng, variant):
    features = features_for(rng, variant)
    if rng.randint(0, 2) == 0:
        return partitioned_gpus(rng, features)
    slices = []
    pool_ids = rng.sample([(GPU, "n1"), (GPU, "p-b"), (GPU, "p-a"), (NIC, "n1"), (NIC, "p-a")], rng.randint(1, 3))
    for driver, name in pool_ids:
        slices.extend(pool(rng, driver, name))
    slices = [slices[i] for i in rng.sample(range(len(slices)), len(slices))] if (rng.random() < 0.5) else slices
    claims = [claim(rng, f"c{i}", features.stable_variant) for i in range(rng.randint(1, 2))]
    return features, slices, claims, preallocated(rng, slices)


def _nanos(value) -> int:
    return Quantity.parse(value).nanos


def normalized(results):
    out = []
    for result in results:
        result = dict(result)
        if "shareID" in result:
            result["shareID"] = True
        if "consumedCapacity" in result:
            result["consumedCapacity"] = {k: v if isinstance(v, int) else _nanos(v)
                                          for k, v in result["consumedCapacity"].items()}
        out.append(result)
    return out


def check(features, slices, claims, allocated):
    """Reference first: a scenario whose literal search needs more than MAX_REFERENCE_STEPS is skipped
    (an exponential unallocatable search says nothing about order, and would eat the CI budget)."""
    try:
        kind, payload = Reference(features, CLASSES, slices, allocated, MAX_REFERENCE_STEPS).allocate(NODE, claims)
    except TooBig:
        assume(False)
    ours = Allocator(CLASSES, slices, allocated, features).allocate(NODE, claims, timeout=None)
    assert ours.outcome == kind, f"{features.variant_name}: ours {ours.outcome} ({ours.error}), reference {kind} ({payload})"
    if kind != "allocated":
        return
    for mine, theirs in zip(ours.allocations, payload, strict=True):
        assert normalized(mine["devices"]["results"]) == normalized(theirs["devices"]["results"])
        assert mine["devices"].get("config") == theirs["devices"].get("config")
        assert mine.get("nodeSelector") == theirs.get("nodeSelector")


VARIANTS = ("stable", "incubating", "experimental")


def _run(variant, rollback=False, examples=EXAMPLES_PER_VARIANT, **overrides):
    """`rollback`: as Kubernetes 1.36.3, which rolls back a rejected device's counters (the reference port follows
    v0.36.3's allocateDevice there)."""
    # Hypothesis draws one seed per example and plain `random` builds the scenario from it: drawing
    # each of the scenario's ~150 choices through hypothesis would cost ten times more per example.
    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much], **overrides)
    @given(st.integers(min_value=0, max_value=2**63 - 1))
    def run(seed):
        features, *rest = scenario(random.Random(seed), variant)
        if rollback:
            features = dataclasses.replace(features, rollback_rejected_devices=True)
        check(features, *rest)

    run()


@pytest.mark.parametrize("variant", VARIANTS)
def test_allocator_agrees_with_the_reference_port(variant):
    _run(variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_allocator_agrees_with_the_reference_port_as_1_36_3(variant):
    """1.36.3's rollback, with stable's combination shortcut on everywhere (nothing leaks): a third of the
    examples, the same seeds as above."""
    _run(variant, rollback=True, examples=max(1, EXAMPLES_PER_VARIANT // 3))


def test_the_generator_covers_every_variant_and_feature():
    assert set(VARIANT_SUPPORT) == {"stable", "incubating", "experimental"}
    assert set().union(*VARIANT_SUPPORT.values()) == set(FEATURE_NAMES)
