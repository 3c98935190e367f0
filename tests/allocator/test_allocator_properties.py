"""Allocator invariants on random small clusters (hypothesis).

The checks here do not trust gpudra's CEL or allocator: every selector used is generated
from a tiny grammar that this module evaluates itself, and for inputs without admin access
a brute-force search decides whether a solution exists at all (the allocator's depth-first
search with backtracking must find one whenever one exists).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra import allocator  # noqa: E402
from gpudra.api.quantity import Quantity  # noqa: E402

DRIVER = "gpu.nvidia.com"
NODE = "node-1"
OTHER_NODE = "node-2"
PRODUCTS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB")

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- devices and a selector grammar we can evaluate without CEL --------------------------------


@dataclass
class Dev:
    name: str
    pool: str
    index: int
    product: str
    nvlink: str
    numa: int
    memory_gi: int
    tag: str | None = None
    consumes: dict[str, dict[str, int]] = field(default_factory=dict)  # counter set -> counter -> amount
    multi: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return (DRIVER, self.pool, self.name)

    def to_api(self) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "type": {"string": "gpu"},
            "index": {"int": self.index},
            "productName": {"string": self.product},
            "nvlinkDomain": {"string": self.nvlink},
            "numaNode": {"int": self.numa},
        }
        if self.tag is not None:
            attributes["tag"] = {"string": self.tag}
        capacity: dict[str, Any] = {"memory": {"value": f"{self.memory_gi}Gi"}}
        device: dict[str, Any] = {"name": self.name, "attributes": attributes, "capacity": capacity}
        if self.multi:
            device["allowMultipleAllocations"] = True
            capacity["memory"]["requestPolicy"] = {"default": "8Gi", "validRange": {"min": "2Gi", "step": "2Gi"}}
        if self.consumes:
            device["consumesCounters"] = [
                {"counterSet": name, "counters": {c: {"value": str(v)} for c, v in counters.items()}}
                for name, counters in self.consumes.items()
            ]
        return device


# (kind, parameter) -> CEL text and a Python predicate
def selector_cel(selector: tuple[str, Any]) -> str:
    kind, value = selector
    attrs = f'device.attributes["{DRIVER}"]'
    if kind == "index_ge":
        return f"{attrs}.index >= {value}"
    if kind == "product_eq":
        return f'{attrs}.productName == "{value}"'
    if kind == "memory_ge":
        return f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{value}Gi")) >= 0'
    if kind == "numa_in":
        return f"{attrs}.numaNode in {list(value)}"
    if kind == "tag_eq":
        return f'has({attrs}.tag) && {attrs}.tag == "{value}"'
    raise AssertionError(kind)


def selector_holds(selector: tuple[str, Any], dev: Dev) -> bool:
    kind, value = selector
    if kind == "index_ge":
        return dev.index >= value
    if kind == "product_eq":
        return dev.product == value
    if kind == "memory_ge":
        return dev.memory_gi >= value
    if kind == "numa_in":
        return dev.numa in value
    if kind == "tag_eq":
        return dev.tag == value
    raise AssertionError(kind)


selectors_st = st.one_of(
    st.tuples(st.just("index_ge"), st.integers(0, 4)),
    st.tuples(st.just("product_eq"), st.sampled_from(PRODUCTS)),
    st.tuples(st.just("memory_ge"), st.sampled_from([40, 80])),
    st.tuples(st.just("numa_in"), st.lists(st.integers(0, 1), min_size=1, max_size=2, unique=True)),
    st.tuples(st.just("tag_eq"), st.sampled_from(["a", "b"])),
)

# device class name -> its selectors (in our grammar) besides the driver check
CLASSES: dict[str, list[tuple[str, Any]]] = {
    "gpu": [],
    "big-gpu": [("memory_ge", 80)],
}


def device_classes() -> list[dict[str, Any]]:
    objects = []
    for name, selectors in CLASSES.items():
        exprs = [f'device.driver == "{DRIVER}"'] + [selector_cel(s) for s in selectors]
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]},
            }
        )
    return objects


# --- claims ----------------------------------------------------------------------------------------


@dataclass
class Req:
    name: str
    device_class: str
    count: int | None  # None: allocationMode All
    selectors: list[tuple[str, Any]]
    admin: bool = False
    memory_gi: int | None = None  # consumable capacity request

    def to_api(self) -> dict[str, Any]:
        exactly: dict[str, Any] = {"deviceClassName": self.device_class}
        if self.count is None:
            exactly["allocationMode"] = "All"
        else:
            exactly["allocationMode"] = "ExactCount"
            exactly["count"] = self.count
        if self.selectors:
            exactly["selectors"] = [{"cel": {"expression": selector_cel(s)}} for s in self.selectors]
        if self.admin:
            exactly["adminAccess"] = True
        if self.memory_gi is not None:
            exactly["capacity"] = {"requests": {"memory": f"{self.memory_gi}Gi"}}
        return {"name": self.name, "exactly": exactly}

    def accepts(self, dev: Dev) -> bool:
        return all(selector_holds(s, dev) for s in CLASSES[self.device_class] + self.selectors)


@dataclass
class Claim:
    name: str
    requests: list[Req]
    match: tuple[str, list[str] | None] | None = None  # (attribute id, request names or None for all)

    @property
    def key(self) -> str:
        return f"default/{self.name}"

    def to_api(self) -> dict[str, Any]:
        devices: dict[str, Any] = {"requests": [r.to_api() for r in self.requests]}
        if self.match is not None:
            attribute, names = self.match
            constraint: dict[str, Any] = {"matchAttribute": f"{DRIVER}/{attribute}"}
            if names is not None:
                constraint["requests"] = names
            devices["constraints"] = [constraint]
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": self.name, "namespace": "default", "uid": f"uid-{self.name}"},
            "spec": {"devices": devices},
        }


def allocated_claim(name: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": len(results)}}]}},
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                    ]
                },
            }
        },
    }


def device_slice(name: str, pool: str, node: str, devices: list[Dev], slice_count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": slice_count},
            "devices": [d.to_api() for d in devices],
        },
    }


# --- running the allocator -------------------------------------------------------------------------


def run_allocator(slices, allocated, claims, features="default"):
    alloc = allocator.Allocator(device_classes(), slices, allocated, allocator.Features.parse(features))
    return alloc.allocate(NODE, [c.to_api() for c in claims])


def allocations_by_claim(outcome, claims: list[Claim]) -> dict[str, dict[str, Any]]:
    allocations = outcome.allocations
    if isinstance(allocations, dict):
        return allocations
    assert len(allocations) == len(claims)
    return {c.key: a for c, a in zip(claims, allocations)}


def results_of(allocation: dict[str, Any]) -> list[dict[str, Any]]:
    return allocation["devices"]["results"]


def request_of(result: dict[str, Any]) -> str:
    return result["request"].split("/")[0]


# --- strategies ------------------------------------------------------------------------------------


@st.composite
def node_devices(draw, pool: str, min_devices: int = 2, max_devices: int = 8) -> list[Dev]:
    count = draw(st.integers(min_devices, max_devices))
    devices = []
    for i in range(count):
        devices.append(
            Dev(
                name=f"gpu-{i}",
                pool=pool,
                index=i,
                product=draw(st.sampled_from(PRODUCTS)),
                nvlink=f"{pool}-nvl-{draw(st.integers(0, 1))}",
                numa=draw(st.integers(0, 1)),
                memory_gi=draw(st.sampled_from([40, 80])),
                tag=draw(st.sampled_from([None, "a", "b"])),
            )
        )
    return devices


@st.composite
def claim_st(draw, name: str, allow_admin: bool, allow_all: bool) -> Claim:
    n_requests = draw(st.integers(1, 2))
    requests = []
    for i in range(n_requests):
        all_mode = allow_all and draw(st.integers(0, 9)) == 0
        requests.append(
            Req(
                name=f"req-{i}",
                device_class=draw(st.sampled_from(sorted(CLASSES))),
                count=None if all_mode else draw(st.integers(1, 2)),
                selectors=draw(st.lists(selectors_st, max_size=2)),
                admin=allow_admin and draw(st.integers(0, 4)) == 0,
            )
        )
    match = None
    if draw(st.booleans()):
        attribute = draw(st.sampled_from(["nvlinkDomain", "productName", "numaNode"]))
        names = None
        if n_requests > 1 and draw(st.booleans()):
            names = draw(st.lists(st.sampled_from([r.name for r in requests]), min_size=1, unique=True))
        match = (attribute, names)
    return Claim(name, requests, match)


@st.composite
def scenario_st(draw, allow_admin: bool = True, allow_all: bool = True):
    devices = draw(node_devices(NODE))
    # a second node's pool: its devices must never be picked for node-1
    other = draw(node_devices(OTHER_NODE, min_devices=1, max_devices=2))
    in_use = draw(st.lists(st.sampled_from(devices), unique_by=lambda d: d.name, max_size=2))
    allocated = []
    if in_use:
        allocated.append(
            allocated_claim(
                "running",
                [{"request": "r", "driver": DRIVER, "pool": d.pool, "device": d.name} for d in in_use],
            )
        )
    claims = [draw(claim_st(f"claim-{i}", allow_admin, allow_all)) for i in range(draw(st.integers(1, 2)))]
    slices = [device_slice("s-node-1", NODE, NODE, devices), device_slice("s-node-2", OTHER_NODE, OTHER_NODE, other)]
    return devices, in_use, allocated, claims, slices


# --- invariants --------------------------------------------------------------------------------------


def check_basic_invariants(devices: list[Dev], in_use: list[Dev], claims: list[Claim], allocations) -> None:
    by_key = {d.key: d for d in devices}
    used = {d.key for d in in_use}
    for claim in claims:
        results = results_of(allocations[claim.key])
        requests = {r.name: r for r in claim.requests}
        seen_in_claim: set[tuple[str, str, str]] = set()
        for result in results:
            key = (result["driver"], result["pool"], result["device"])
            assert key in by_key, f"{claim.key} got {key}, which is not on {NODE}"
            request = requests[request_of(result)]
            assert request.accepts(by_key[key]), f"{claim.key}/{request.name}: selector false for {key}"
            assert key not in seen_in_claim, f"{claim.key} got {key} twice"
            seen_in_claim.add(key)
            if request.admin:
                assert result.get("adminAccess") is True
            else:
                assert key not in used, f"{claim.key} got {key}, which is already in use"
        # admin-access picks are in use for later claims of the same run too; only
        # already-allocated admin results are ignored
        used |= seen_in_claim
        # the requested number of devices, request by request
        for request in claim.requests:
            got = [r for r in results if request_of(r) == request.name]
            if request.count is not None:
                assert len(got) == request.count, f"{claim.key}/{request.name}: {len(got)} != {request.count}"
            else:
                matching = [d for d in devices if request.accepts(d)]
                assert len(got) == len(matching) > 0
        # matchAttribute: every device of the constrained requests has the same value
        if claim.match is not None:
            attribute, names = claim.match
            values = {
                getattr(by_key[(r["driver"], r["pool"], r["device"])], {"nvlinkDomain": "nvlink", "productName": "product", "numaNode": "numa"}[attribute])
                for r in results
                if names is None or request_of(r) in names
            }
            assert len(values) <= 1, f"{claim.key}: matchAttribute {attribute} violated: {values}"


def brute_force_feasible(devices: list[Dev], in_use: list[Dev], claims: list[Claim]) -> bool:
    """Is there any assignment (no admin access, ExactCount and All) that satisfies everything?"""
    used0 = frozenset(d.key for d in in_use)

    def claim_options(claim: Claim, used: frozenset) -> list[frozenset]:
        free = [d for d in devices if d.key not in used]
        per_request = []
        for request in claim.requests:
            eligible = [d for d in free if request.accepts(d)]
            if request.count is None:
                if any(request.accepts(d) and d.key in used for d in devices) or not eligible:
                    return []
                per_request.append([tuple(eligible)])
            else:
                per_request.append(list(itertools.combinations(eligible, request.count)))
        options = []
        for combo in itertools.product(*per_request):
            keys = [d.key for group in combo for d in group]
            if len(set(keys)) != len(keys):
                continue
            if claim.match is not None:
                attribute, names = claim.match
                field_name = {"nvlinkDomain": "nvlink", "productName": "product", "numaNode": "numa"}[attribute]
                values = {
                    getattr(d, field_name)
                    for request, group in zip(claim.requests, combo)
                    if names is None or request.name in names
                    for d in group
                }
                if len(values) > 1:
                    continue
            options.append(frozenset(keys))
        return options

    def search(i: int, used: frozenset) -> bool:
        if i == len(claims):
            return True
        return any(search(i + 1, used | option) for option in set(claim_options(claims[i], used)))

    return search(0, used0)


def may_fail_fatally(claims: list[Claim]) -> bool:
    """An All-mode request whose device breaks a matchAttribute constraint is an error upstream."""
    return any(c.match is not None and any(r.count is None for r in c.requests) for c in claims)


def check_outcome_kind(outcome, claims: list[Claim]) -> None:
    allowed = ("allocated", "unallocatable", "error") if may_fail_fatally(claims) else ("allocated", "unallocatable")
    assert outcome.outcome in allowed, outcome.error
    if outcome.outcome == "error":
        assert "constraint" in outcome.error


@SETTINGS
@given(scenario_st())
def test_allocations_respect_selectors_usage_counts_and_constraints(scenario):
    devices, in_use, allocated, claims, slices = scenario
    outcome = run_allocator(slices, allocated, claims)
    check_outcome_kind(outcome, claims)
    if outcome.outcome == "allocated":
        check_basic_invariants(devices, in_use, claims, allocations_by_claim(outcome, claims))


@SETTINGS
@given(scenario_st(allow_admin=False))
def test_allocator_finds_a_solution_whenever_one_exists(scenario):
    devices, in_use, allocated, claims, slices = scenario
    outcome = run_allocator(slices, allocated, claims)
    check_outcome_kind(outcome, claims)
    if outcome.outcome == "error":
        return
    feasible = brute_force_feasible(devices, in_use, claims)
    assert (outcome.outcome == "allocated") == feasible
    if feasible:
        check_basic_invariants(devices, in_use, claims, allocations_by_claim(outcome, claims))


# --- partitionable devices: shared counters ---------------------------------------------------------

# A MIG-like layout: each physical GPU has 7 memory slices; partitions consume contiguous slices.
PARTITIONS = {"full": (0, 7), "3g": (0, 4), "3g-b": (4, 3), "2g": (0, 2), "2g-b": (2, 2), "1g": (0, 1), "1g-b": (6, 1)}


def partitioned_gpu(gpu: int, pool: str, kinds: list[str]) -> list[Dev]:
    devices = []
    for kind in kinds:
        first, size = PARTITIONS[kind]
        counters = {f"slice-{s}": 1 for s in range(first, first + size)}
        counters["memory"] = size * 10
        devices.append(
            Dev(
                name=f"gpu-{gpu}-{kind}",
                pool=pool,
                index=gpu,
                product=PRODUCTS[0],
                nvlink=f"{pool}-nvl-0",
                numa=gpu % 2,
                memory_gi=size * 10,
                consumes={f"gpu-{gpu}-counters": counters},
            )
        )
    return devices


def counter_set_slice(pool: str, gpus: int, slice_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{pool}-counters"},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": slice_count},
            "sharedCounters": [
                {
                    "name": f"gpu-{g}-counters",
                    "counters": {**{f"slice-{s}": {"value": "1"} for s in range(7)}, "memory": {"value": "70"}},
                }
                for g in range(gpus)
            ],
        },
    }


@st.composite
def partitioned_scenario(draw):
    gpus = draw(st.integers(1, 2))
    devices: list[Dev] = []
    for g in range(gpus):
        kinds = draw(st.lists(st.sampled_from(sorted(PARTITIONS)), min_size=1, max_size=4, unique=True))
        devices.extend(partitioned_gpu(g, NODE, kinds))
    in_use = draw(st.lists(st.sampled_from(devices), unique_by=lambda d: d.name, max_size=1))
    allocated = []
    if in_use:
        allocated.append(
            allocated_claim("running", [{"request": "r", "driver": DRIVER, "pool": NODE, "device": d.name} for d in in_use])
        )
    claims = []
    for i in range(draw(st.integers(1, 2))):
        requests = [
            Req(f"req-{j}", "gpu", draw(st.integers(1, 2)), draw(st.lists(st.tuples(st.just("memory_ge"), st.sampled_from([10, 20, 40])), max_size=1)))
            for j in range(draw(st.integers(1, 2)))
        ]
        claims.append(Claim(f"claim-{i}", requests))
    slices = [device_slice(f"{NODE}-devices", NODE, NODE, devices, slice_count=2), counter_set_slice(NODE, gpus, 2)]
    return devices, in_use, allocated, claims, slices


def counters_fit(chosen: list[Dev]) -> bool:
    totals: dict[tuple[str, str], int] = {}
    for dev in chosen:
        for counter_set, counters in dev.consumes.items():
            for name, value in counters.items():
                totals[(counter_set, name)] = totals.get((counter_set, name), 0) + value
    return all(value <= (70 if name == "memory" else 1) for (_, name), value in totals.items())


@SETTINGS
@given(partitioned_scenario())
def test_shared_counters_are_never_overcommitted(scenario):
    devices, in_use, allocated, claims, slices = scenario
    outcome = run_allocator(slices, allocated, claims)
    assert outcome.outcome in ("allocated", "unallocatable"), outcome.error
    by_key = {d.key: d for d in devices}
    if outcome.outcome == "allocated":
        allocations = allocations_by_claim(outcome, claims)
        check_basic_invariants(devices, in_use, claims, allocations)
        chosen = list(in_use) + [
            by_key[(r["driver"], r["pool"], r["device"])] for c in claims for r in results_of(allocations[c.key])
        ]
        assert counters_fit(chosen), f"counters overcommitted by {[d.name for d in chosen]}"
    else:
        # no combination of free devices satisfies the requests and the counters
        free = [d for d in devices if d not in in_use]
        needs = [(r, r.count) for c in claims for r in c.requests]

        def search(i: int, taken: list[Dev]) -> bool:
            if i == len(needs):
                return True
            request, count = needs[i]
            options = [d for d in free if d not in taken and request.accepts(d)]
            return any(
                counters_fit(list(in_use) + taken + list(combo)) and search(i + 1, taken + list(combo))
                for combo in itertools.combinations(options, count)
            )

        assert not search(0, []), "a counter-respecting solution exists but the allocator found none"


# --- consumable capacity: one device shared by several claims ---------------------------------------


@st.composite
def shared_scenario(draw):
    devices = [
        Dev(f"gpu-{i}", NODE, i, PRODUCTS[0], f"{NODE}-nvl-0", 0, 80, multi=True) for i in range(draw(st.integers(1, 2)))
    ]
    in_use_results = []
    for i, dev in enumerate(draw(st.lists(st.sampled_from(devices), max_size=2))):
        in_use_results.append(
            {
                "request": "r",
                "driver": DRIVER,
                "pool": dev.pool,
                "device": dev.name,
                "shareID": f"00000000-0000-0000-0000-00000000000{i}",
                "consumedCapacity": {"memory": f"{draw(st.integers(1, 40))}Gi"},
            }
        )
    allocated = [allocated_claim("running", in_use_results)] if in_use_results else []
    claims = []
    for i in range(draw(st.integers(1, 3))):
        memory = draw(st.one_of(st.none(), st.integers(1, 60)))
        claims.append(Claim(f"claim-{i}", [Req("req-0", "gpu", 1, [], memory_gi=memory)]))
    slices = [device_slice("s-node-1", NODE, NODE, devices)]
    return devices, in_use_results, allocated, claims, slices


@SETTINGS
@given(shared_scenario())
def test_consumable_capacity_never_exceeds_device_capacity(scenario):
    devices, in_use_results, allocated, claims, slices = scenario
    outcome = run_allocator(slices, allocated, claims, features="all")
    assert outcome.outcome in ("allocated", "unallocatable"), outcome.error
    consumed: dict[str, Quantity] = {d.name: Quantity.parse(0) for d in devices}
    for result in in_use_results:
        consumed[result["device"]] = consumed[result["device"]].add(Quantity.parse(result["consumedCapacity"]["memory"]))
    if outcome.outcome != "allocated":
        return
    allocations = allocations_by_claim(outcome, claims)
    step, minimum = Quantity.parse("2Gi"), Quantity.parse("2Gi")
    for claim in claims:
        (result,) = results_of(allocations[claim.key])
        assert result.get("shareID"), "a shared device's result needs a shareID"
        amount = Quantity.parse(result["consumedCapacity"]["memory"])
        asked = Quantity.parse(f"{claim.requests[0].memory_gi}Gi" if claim.requests[0].memory_gi else "8Gi")
        assert amount.cmp(asked) >= 0, "consumed less than requested"
        # rounded up onto the policy's range: min + k*step
        assert (amount.nanos - minimum.nanos) % step.nanos == 0
        consumed[result["device"]] = consumed[result["device"]].add(amount)
    for name, total in consumed.items():
        assert total.cmp(Quantity.parse("80Gi")) <= 0, f"{name}: {total} consumed of 80Gi"


def test_the_invariant_checker_catches_a_broken_allocation():
    """The checks above must be able to fail: feed them a wrong answer on purpose."""
    devices = [Dev(f"gpu-{i}", NODE, i, PRODUCTS[i % 2], f"{NODE}-nvl-{i % 2}", 0, 80) for i in range(3)]
    claim = Claim("c", [Req("req-0", "gpu", 2, [])], match=("nvlinkDomain", None))
    wrong_domain = {claim.key: {"devices": {"results": [
        {"request": "req-0", "driver": DRIVER, "pool": NODE, "device": "gpu-0"},
        {"request": "req-0", "driver": DRIVER, "pool": NODE, "device": "gpu-1"},
    ]}}}
    with pytest.raises(AssertionError, match="matchAttribute"):
        check_basic_invariants(devices, [], [claim], wrong_domain)
    in_use = {claim.key: {"devices": {"results": [
        {"request": "req-0", "driver": DRIVER, "pool": NODE, "device": "gpu-0"},
        {"request": "req-0", "driver": DRIVER, "pool": NODE, "device": "gpu-2"},
    ]}}}
    with pytest.raises(AssertionError, match="already in use"):
        check_basic_invariants(devices, [devices[2]], [claim], in_use)
    assert brute_force_feasible(devices, [], [claim])
    assert not brute_force_feasible(devices, [devices[2]], [claim])
