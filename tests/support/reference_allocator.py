"""A literal reference port of upstream's structured allocator, used only to check gpudra's.

Deliberately plain: it follows k8s.io/dynamic-resource-allocation v0.36.2
(structured/internal/{stable,incubating,experimental}/{pools,allocator}_*.go) statement by
statement, on the raw dicts, with no precomputed candidate lists, no combination shortcut beyond
upstream's own startLocation (incubating/experimental), no memo and no caches except the ones upstream
has (the per-call selector results and the per-pool-name counter tables). Speed does not matter here.
CEL selectors are evaluated with gpudra's CEL environment (the search is what is checked).

Not ported (the differential generator does not produce them): list-type attributes, DeviceTaintRules,
timeouts and error wording.
"""

from __future__ import annotations

import uuid

from gpudra.allocator.nodematch import NodeInfo, node_matches
from gpudra.allocator.selection import _cel, compile_expression
from gpudra.api.quantity import Quantity

MAX_RESULTS = 32


class Fatal(Exception):
    """upstream returns (nil, err)"""


class _MaxSize(Exception):
    pass


class TooBig(Exception):
    """The search took more than `max_steps` steps (a test budget, not an upstream concept)."""


def _nanos(value) -> int:
    return Quantity.parse(value).nanos


def _slices_of_variant(slices, node_name, stable):
    if stable:
        return list(slices)
    on_node = [s for s in slices if s["spec"].get("nodeName") and not s["spec"].get("sharedCounters")]
    shared = [s for s in slices if not (s["spec"].get("nodeName") and not s["spec"].get("sharedCounters"))]
    return [s for s in on_node if s["spec"]["nodeName"] == node_name] + shared


def gather_pools(slices, node: NodeInfo, features, stable: bool):
    pools: dict[tuple, list] = {}
    for s in _slices_of_variant(slices, node.name, stable):
        spec = s["spec"]
        if not features.partitionable_devices and (
            spec.get("perDeviceNodeSelection") is not None or spec.get("sharedCounters")
        ):
            continue
        if spec.get("sharedCounters"):
            relevant = True
        elif spec.get("nodeName") or spec.get("allNodes") or spec.get("nodeSelector") is not None:
            relevant = node_matches(node, spec.get("nodeName"), bool(spec.get("allNodes")), spec.get("nodeSelector"))
        elif spec.get("perDeviceNodeSelection"):
            relevant = False
            for d in spec.get("devices") or []:
                if node_matches(node, d.get("nodeName"), bool(d.get("allNodes")), d.get("nodeSelector")):
                    relevant = True
                    break
        else:
            continue
        if not relevant:
            continue
        pid = (spec["driver"], spec["pool"]["name"])
        gen = spec["pool"].get("generation", 0)
        have = pools.get(pid)
        if have is None or gen > have[0]["spec"]["pool"].get("generation", 0):
            pools[pid] = [s]
        elif gen == have[0]["spec"]["pool"].get("generation", 0):
            have.append(s)
    result, with_binding = [], []
    for pid, pool_slices in pools.items():
        count = pool_slices[0]["spec"]["pool"]["resourceSliceCount"]
        gen = pool_slices[0]["spec"]["pool"].get("generation", 0)
        if len(pool_slices) == count:
            pool = build_pool(pid, pool_slices, features, None, stable)
        else:
            obsolete, everything = False, []
            for s in slices:
                if (s["spec"]["driver"], s["spec"]["pool"]["name"]) != pid:
                    continue
                g = s["spec"]["pool"].get("generation", 0)
                if g == gen:
                    everything.append(s)
                elif g > gen:
                    obsolete = True
                    break
            if obsolete:
                continue
            if len(everything) != count:
                result.append({"id": pid, "incomplete": True, "invalid": False})
                continue
            pool = build_pool(pid, pool_slices, features, everything, stable)
        if not stable and not pool["invalid"] and any(
            d.get("bindingConditions") is not None for s in pool["slices"] for d in s["spec"].get("devices") or []
        ):
            with_binding.append(pool)
        else:
            result.append(pool)
    if not stable:
        result.sort(key=lambda p: p["id"])
        with_binding.sort(key=lambda p: p["id"])
    return result + with_binding


def build_pool(pid, pool_slices, features, everything, stable):
    if not stable:
        pool_slices = sorted(pool_slices, key=lambda s: s["metadata"]["name"])
    if features.partitionable_devices:
        counter_slices = [s for s in pool_slices if s["spec"].get("sharedCounters")]
        device_slices = [s for s in pool_slices if not s["spec"].get("sharedCounters")]
    else:
        counter_slices, device_slices = [], pool_slices
    invalid = {"id": pid, "incomplete": False, "invalid": True}
    names = set()
    for s in device_slices:
        for d in s["spec"].get("devices") or []:
            if d["name"] in names:
                return invalid
            names.add(d["name"])
    pool = {"id": pid, "incomplete": False, "invalid": False, "slices": device_slices, "other": [], "counters": {}}
    if not features.partitionable_devices:
        return pool
    for s in counter_slices:
        for cs in s["spec"]["sharedCounters"]:
            if cs["name"] in pool["counters"]:
                return invalid
            pool["counters"][cs["name"]] = {n: _nanos(c["value"]) for n, c in cs["counters"].items()}

    def consumption_ok(slices_to_check):
        for s in slices_to_check:
            for d in s["spec"].get("devices") or []:
                for use in d.get("consumesCounters") or []:
                    have = pool["counters"].get(use["counterSet"])
                    if have is None or any(n not in have for n in use["counters"]):
                        return False
        return True

    if not consumption_ok(pool_slices):
        return invalid
    if everything is None or len(pool_slices) == len(everything):
        return pool
    seen = {s["metadata"]["name"] for s in pool_slices}
    pool["other"] = [s for s in everything if s["metadata"]["name"] not in seen]
    if not consumption_ok(pool["other"]):
        return invalid
    return pool


def allocated_state(claims, features):
    devices, shared, capacity = set(), set(), {}
    for claim in claims:
        for r in claim["status"]["allocation"]["devices"]["results"]:
            if r.get("adminAccess"):
                continue
            key = (r["driver"], r["pool"], r["device"])
            if r.get("shareID") and features.consumable_capacity:
                shared.add((key, r["shareID"]))
                used = capacity.setdefault(key, {})
                for n, v in (r.get("consumedCapacity") or {}).items():
                    used[n] = used.get(n, 0) + _nanos(v)
            else:
                devices.add(key)
    return devices, shared, capacity


def tolerates(tol, taint):
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if tol.get("key") and tol["key"] != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return (tol.get("value") or "") == (taint.get("value") or "")
    return False


def lookup_attribute(device, driver, name):
    attrs = device.get("attributes") or {}
    if name in attrs:
        return attrs[name]
    domain, _, ident = name.partition("/")
    if domain == driver and ident in attrs:
        return attrs[ident]
    return None


def _typed_value(attribute):
    for kind in ("string", "int", "bool", "version"):
        if kind in attribute:
            return kind, attribute[kind]
    return None


class MatchAttribute:
    def __init__(self, requests, name):
        self.requests, self.name, self.value, self.n = set(requests), name, None, 0

    def applies(self, base, sub):
        return not self.requests or base in self.requests or (sub and f"{base}/{sub}" in self.requests)

    def add(self, base, sub, device, driver):
        if not self.applies(base, sub):
            return True
        attribute = lookup_attribute(device, driver, self.name)
        if attribute is None:
            return False
        value = _typed_value(attribute)
        if value is None:
            return False
        if self.n == 0:
            self.value = value
        elif value != self.value:
            return False
        self.n += 1
        return True

    def remove(self, base, sub, device, driver):
        if not self.applies(base, sub):
            return
        self.n -= 1
        if self.n == 0:
            self.value = None


class DistinctAttribute(MatchAttribute):
    def __init__(self, requests, name):
        super().__init__(requests, name)
        self.seen = {}

    def add(self, base, sub, device, driver):
        if not self.applies(base, sub):
            return True
        attribute = lookup_attribute(device, driver, self.name)
        if attribute is None:
            return False
        value = _typed_value(attribute)
        if value is None or value in self.seen.values():
            return False
        self.seen[base] = value
        return True

    def remove(self, base, sub, device, driver):
        if self.applies(base, sub):
            self.seen.pop(base, None)


def _consumed_one(requested, cap):
    """upstream calculateConsumedCapacity"""
    policy = cap.get("requestPolicy")
    if requested is None:
        if policy and policy.get("default") is not None:
            return _nanos(policy["default"])
        return _nanos(cap["value"])
    amount = _nanos(requested)
    if not policy:
        return amount
    rng = policy.get("validRange")
    if rng is not None and rng.get("min") is not None:
        low = _nanos(rng["min"])
        if amount < low:
            return low
        if rng.get("step") is None:
            return amount
        step = _nanos(rng["step"])
        n, mod = divmod(amount - low, step)
        return low + step * (n + (1 if mod else 0))
    if policy.get("validValues") is not None:
        for v in policy["validValues"]:
            if amount <= _nanos(v):
                return _nanos(v)
    return amount


def consumed_capacity(requests, capacity):
    """upstream GetConsumedCapacityFromRequest"""
    return {name: _consumed_one(requests.get(name), cap) for name, cap in capacity.items()}


def violates_policy(amount, policy):
    if not policy:
        return False
    if policy.get("default") is not None and amount == _nanos(policy["default"]):
        return False
    rng = policy.get("validRange")
    if rng is not None:
        if rng.get("max") is not None and amount > _nanos(rng["max"]):
            return True
        if rng.get("step") is not None and (amount - _nanos(rng["min"])) % _nanos(rng["step"]):
            return True
        return False
    if policy.get("validValues"):
        return amount not in [_nanos(v) for v in policy["validValues"]]
    return False


class Reference:
    def __init__(self, features, classes, slices, allocated_claims, max_steps=None):
        self.features = features
        self.max_steps = max_steps
        self.steps = 0
        self.stable = features.stable_variant
        self.classes = {c["metadata"]["name"]: c for c in classes}
        self.slices = slices
        self.allocated, self.shared, self.aggregated = allocated_state(allocated_claims, features)
        self.available_counters = {}  # per Allocator, keyed by pool *name*, as upstream

    # ------------------------------------------------------------------------------------------
    def allocate(self, node, claims):
        """("allocated", [allocation...]) | ("unallocatable", None) | ("error", message)"""
        try:
            return self._allocate(NodeInfo.of(node), claims)
        except Fatal as err:
            return "error", str(err)

    def _allocate(self, node, claims):
        f = self.features
        self.node, self.claims = node, claims
        self.pools = gather_pools(self.slices, node, f, self.stable)
        self.matches, self.consumed_counters = {}, {}
        self.allocating, self.allocating_capacity = {}, {}
        self.request_data, self.constraints = {}, []
        self.results = [[] for _ in claims]
        for ci, claim in enumerate(claims):
            min_devices = 0
            for ri, request in enumerate(claim["spec"]["devices"]["requests"]):
                subs = request.get("firstAvailable") or []
                if subs and not f.prioritized_list:
                    raise Fatal("has subrequests, but the DRAPrioritizedList feature is disabled")
                if not f.consumable_capacity and not self.stable:
                    if request.get("exactly") is not None and request["exactly"].get("capacity") is not None:
                        raise Fatal("capacity requests, but the DRAConsumableCapacity feature is disabled")
                    if any(s.get("capacity") is not None for s in subs):
                        raise Fatal("capacity requests, but the DRAConsumableCapacity feature is disabled")
                if subs:
                    least = None
                    for si, sub in enumerate(subs):
                        data = self._validate(ci, sub, request, f"{request['name']}/{sub['name']}")
                        self.request_data[(ci, ri, si)] = data
                        least = data["num"] if least is None else min(least, data["num"])
                    min_devices += least
                else:
                    data = self._validate(ci, request.get("exactly") or {}, None, request["name"])
                    self.request_data[(ci, ri, 0)] = data
                    min_devices += data["num"]
            if min_devices > MAX_RESULTS:
                raise Fatal("exceeds the claim limit")
            constraints = []
            for c in claim["spec"]["devices"].get("constraints") or []:
                if c.get("matchAttribute") is not None:
                    constraints.append(MatchAttribute(c.get("requests") or [], c["matchAttribute"]))
                elif c.get("distinctAttribute") is not None and not self.stable:
                    constraints.append(DistinctAttribute(c.get("requests") or [], c["distinctAttribute"]))
                else:
                    raise Fatal("empty constraint (unsupported constraint type?)")
            self.constraints.append(constraints)
        try:
            done = self._allocate_one(0, 0, 0, 0, False, (0, 0, 0))
        except _MaxSize:
            done = False
        if not done:
            if any(p["invalid"] for p in self.pools):
                return "error", "invalid resource pools were encountered"
            return "unallocatable", None
        return "allocated", [self._result(ci) for ci in range(len(claims))]

    def _validate(self, ci, request, parent, name):
        f = self.features
        for selector in request.get("selectors") or []:
            if not (selector.get("cel") or {}).get("expression"):
                raise Fatal("CEL expression empty (unsupported selector type?)")
        if not f.admin_access and request.get("adminAccess") is not None:
            raise Fatal("admin access is requested, but the feature is disabled")
        class_name = request.get("deviceClassName")
        if not class_name:
            raise Fatal("missing device class name (unsupported request type?)")
        if class_name not in self.classes:
            raise Fatal(f"could not retrieve device class {class_name}")
        data = {"request": request, "parent": parent, "name": name, "class": self.classes[class_name],
                "admin": bool(request.get("adminAccess")) and parent is None, "selected": 0,
                "all": None}
        mode = request.get("allocationMode") or "ExactCount"
        if mode == "ExactCount":
            data["num"] = request.get("count") or 1
        elif mode == "All":
            data["all"] = []
            for pool in self.pools:
                if pool["incomplete"] or pool["invalid"]:
                    raise Fatal("asks for all devices, but a resource pool is being updated or invalid")
                for s in pool["slices"]:
                    for d in s["spec"].get("devices") or []:
                        if self._selectable(ci, data, s, d):
                            if f.consumable_capacity and not self._capacity_ok(data, s, d):
                                continue
                            data["all"].append((pool, s, d))
            data["num"] = len(data["all"])
        else:
            raise Fatal(f"unsupported count mode {mode}")
        return data

    # search -------------------------------------------------------------------------------------
    def _allocate_one(self, ci, ri, si, di, in_sub, start):
        self.steps += 1
        if self.max_steps is not None and self.steps > self.max_steps:
            raise TooBig()
        if ci >= len(self.claims):
            return True
        claim = self.claims[ci]
        if ri >= len(claim["spec"]["devices"]["requests"]):
            try:
                return self._allocate_one(ci + 1, 0, 0, 0, False, (0, 0, 0))
            except _MaxSize:
                return False
        data = self.request_data[(ci, ri, si)]
        if not in_sub and data["parent"] is not None:
            all_exceeded = True
            s = 0
            while (ci, ri, s) in self.request_data:
                try:
                    ok = self._allocate_one(ci, ri, s, di, True, (0, 0, 0))
                except _MaxSize:
                    s += 1
                    continue
                all_exceeded = False
                if ok:
                    self.request_data[(ci, ri, 0)]["selected"] = s
                    return True
                s += 1
            if all_exceeded:
                raise _MaxSize()
            return False
        if data["all"] is not None and not data["all"]:
            return False
        if di >= data["num"]:
            return self._allocate_one(ci, ri + 1, 0, 0, False, (0, 0, 0))
        if len(self.results[ci]) + data["num"] - di > MAX_RESULTS:
            raise _MaxSize()
        if data["all"] is not None:
            pool, s, d = data["all"][di]
            ok, undo = self._allocate_device(ci, ri, si, pool, s, d, True)
            if not ok:
                return False
            try:
                done = self._allocate_one(ci, ri, si, di + 1, in_sub, (0, 0, 0))
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done
        admin = data["admin"]
        first_pool, first_slice, first_device = (0, 0, 0) if self.stable else start
        for pi in range(first_pool, len(self.pools)):
            pool = self.pools[pi]
            if pool["incomplete"] or pool["invalid"]:
                continue
            slice_start = first_slice if pi == first_pool else 0
            for sli in range(slice_start, len(pool["slices"])):
                s = pool["slices"][sli]
                devices = s["spec"].get("devices") or []
                device_start = first_device if (pi == first_pool and sli == first_slice) else 0
                for dvi in range(device_start, len(devices)):
                    d = devices[dvi]
                    key = (pool["id"][0], pool["id"][1], d["name"])
                    if admin and ci in self.allocating.get(key, set()):
                        continue
                    if not admin and self._in_use(key):
                        continue
                    if not self._selectable(ci, data, s, d):
                        continue
                    if self.features.consumable_capacity and not self._capacity_ok(data, s, d):
                        continue
                    ok, undo = self._allocate_device(ci, ri, si, pool, s, d, False)
                    if not ok:
                        continue
                    try:
                        done = self._allocate_one(ci, ri, si, di + 1, in_sub, (pi, sli, dvi + 1))
                    except BaseException:
                        undo()
                        raise
                    if done:
                        return True
                    undo()
        return False

    def _in_use(self, key):
        return key in self.allocated or bool(self.allocating.get(key))

    def _selectable(self, ci, data, s, d):
        if not self.features.device_binding_and_status and d.get("bindingConditions"):
            return False
        key = (id(d), ci, id(data))
        if key in self.matches:
            return self.matches[key]
        driver = s["spec"]["driver"]
        for owner, selectors in (("class", data["class"]["spec"].get("selectors") or []),
                                 ("claim", data["request"].get("selectors") or [])):
            for selector in selectors:
                compiled = compile_expression(selector["cel"]["expression"], True)
                if isinstance(compiled, Exception):
                    raise Fatal(f"{owner}: CEL compile error: {compiled}")
                raw = d if not self.stable else {
                    k: v for k, v in d.items() if k != "allowMultipleAllocations"}
                device_input = _cel().device_input(driver, raw, list_type_attributes=False)
                try:
                    if not compiled.evaluate(device_input):
                        self.matches[key] = False
                        return False
                except _cel().CELRuntimeError as err:
                    raise Fatal(f"{owner}: CEL runtime error: {err}") from None
        matched = True
        if s["spec"].get("perDeviceNodeSelection"):
            matched = node_matches(self.node, d.get("nodeName"), bool(d.get("allNodes")), d.get("nodeSelector"))
        self.matches[key] = matched
        return matched

    def _capacity_ok(self, data, s, d):
        """upstream CmpRequestOverCapacity (False also for its error: an unknown capacity)"""
        key = (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        requests = ((data["request"].get("capacity") or {}).get("requests")) or {}
        capacity = d.get("capacity") or {}
        if any(name not in capacity for name in requests):
            return False
        for name, cap in capacity.items():
            amount = _consumed_one(requests.get(name), cap)
            if violates_policy(amount, cap.get("requestPolicy")):
                return False
            total = amount + self.aggregated.get(key, {}).get(name, 0) + self.allocating_capacity.get(key, {}).get(name, 0)
            if total > _nanos(cap["value"]):
                return False
        return True

    def _allocate_device(self, ci, ri, si, pool, s, d, must):
        f = self.features
        data = self.request_data[(ci, ri, si)]
        key = (pool["id"][0], pool["id"][1], d["name"])
        driver = s["spec"]["driver"]
        multi = f.consumable_capacity and d.get("allowMultipleAllocations") is True
        if not multi and data["admin"] and ci in self.allocating.get(key, set()):
            return False, None
        if not data["admin"] and self._in_use(key):
            return False, None
        if not f.partitionable_devices and d.get("consumesCounters"):
            return False, None
        skip_counters = multi and (key in self.aggregated or key in self.allocating_capacity)
        took_counters = False
        if not skip_counters and d.get("consumesCounters"):
            if not self._take_counters(pool, d):
                return False, None
            took_counters = True
        if f.rollback_rejected_devices:
            return self._allocate_device_v0_36_3(ci, data, pool, s, d, must, key, multi, took_counters)
        base = data["parent"]["name"] if data["parent"] is not None else data["name"]
        sub = data["request"]["name"] if data["parent"] is not None else ""
        if f.device_taints and self._taint_rejects(data, d):
            return False, None
        constraints = self.constraints[ci]
        for i, constraint in enumerate(constraints):
            if not constraint.add(base, sub, d, driver):
                if must:
                    raise Fatal("cannot add device because a claim constraint would not be satisfied")
                for e in range(i):
                    constraints[e].remove(base, sub, d, driver)
                return False, None
        self.allocating.setdefault(key, set())
        if not multi:
            self.allocating[key].add(ci)
        consumed, share = None, None
        if f.consumable_capacity:
            if not self._capacity_ok(data, s, d):
                return False, None
            if multi:
                requests = ((data["request"].get("capacity") or {}).get("requests")) or {}
                consumed = consumed_capacity(requests, d.get("capacity") or {})
                share = str(uuid.uuid4())
                used = self.allocating_capacity.setdefault(key, {})
                for n, v in consumed.items():
                    used[n] = used.get(n, 0) + v
        result = {"request": data["name"], "driver": key[0], "pool": key[1], "device": key[2],
                  "data": data, "device_obj": d, "slice": s, "share": share, "consumed": consumed or None}
        self.results[ci].append(result)
        count = len(self.results[ci]) - 1

        def undo():
            for constraint in constraints:
                constraint.remove(base, sub, d, driver)
            self.allocating[key].discard(ci)
            if multi:
                # upstream removes only a non-empty consumption, and drops the entry once all zero
                # (a device without capacities stays "capacity in use" for the rest of the call)
                if consumed:
                    used = self.allocating_capacity[key]
                    for n, v in consumed.items():
                        used[n] -= v
                    if not any(used.values()):
                        del self.allocating_capacity[key]
            elif f.partitionable_devices and d.get("consumesCounters"):
                self._give_counters(pool, d)
            del self.results[ci][count:]

        return True, undo

    def _taint_rejects(self, data, d):
        return any(taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
            tolerates(t, taint) for t in data["request"].get("tolerations") or []) for taint in d.get("taints") or [])

    def _allocate_device_v0_36_3(self, ci, data, pool, s, d, must, key, multi, took_counters):
        """allocateDevice from the counter check on as v0.36.3 has it: every rejection and the undo go through one
        rollback of what this call did (rollbackDevice, deviceRollbackState)."""
        f = self.features
        base = data["parent"]["name"] if data["parent"] is not None else data["name"]
        sub = data["request"]["name"] if data["parent"] is not None else ""
        driver = s["spec"]["driver"]
        constraints = self.constraints[ci]
        state = {"constraints": 0, "marked": False, "capacity": None, "existed": False, "result": None}

        def rollback():
            if state["result"] is not None:
                del self.results[ci][state["result"]:]
            if state["capacity"] is not None:
                used = self.allocating_capacity[key]
                for n, v in state["capacity"].items():
                    used[n] -= v
                if not any(used.values()):
                    del self.allocating_capacity[key]
                if state["existed"] and key not in self.allocating_capacity:
                    self.allocating_capacity[key] = {}
            if state["marked"]:
                self.allocating[key].discard(ci)
            for e in reversed(range(state["constraints"])):
                constraints[e].remove(base, sub, d, driver)
            if took_counters:
                self._give_counters(pool, d)

        if f.device_taints and self._taint_rejects(data, d):
            rollback()
            return False, None
        for constraint in constraints:
            if not constraint.add(base, sub, d, driver):
                rollback()
                if must:
                    raise Fatal("cannot add device because a claim constraint would not be satisfied")
                return False, None
            state["constraints"] += 1
        if not multi:
            self.allocating.setdefault(key, set()).add(ci)
            state["marked"] = True
        consumed, share = None, None
        if f.consumable_capacity:
            if not self._capacity_ok(data, s, d):
                rollback()
                return False, None
            if multi:
                requests = ((data["request"].get("capacity") or {}).get("requests")) or {}
                consumed = consumed_capacity(requests, d.get("capacity") or {})
                share = str(uuid.uuid4())
                state["existed"] = key in self.allocating_capacity
                used = self.allocating_capacity.setdefault(key, {})
                for n, v in consumed.items():
                    used[n] = used.get(n, 0) + v
                state["capacity"] = consumed
        self.results[ci].append({"request": data["name"], "driver": key[0], "pool": key[1], "device": key[2],
                                 "data": data, "device_obj": d, "slice": s, "share": share, "consumed": consumed or None})
        state["result"] = len(self.results[ci]) - 1
        return True, rollback

    def _take_counters(self, pool, d):
        name = pool["id"][1]
        available = self.available_counters.get(name)
        if available is None:
            available = {n: dict(c) for n, c in pool["counters"].items()}
            for s in pool["slices"] + pool["other"]:
                for other in s["spec"].get("devices") or []:
                    key = (s["spec"]["driver"], s["spec"]["pool"]["name"], other["name"])
                    if not self._is_allocated(key):
                        continue
                    for use in other.get("consumesCounters") or []:
                        target = available.get(use["counterSet"], {})
                        for n, c in use["counters"].items():
                            if n in target:
                                target[n] -= _nanos(c["value"])
            self.available_counters[name] = available
        consumed = self.consumed_counters.setdefault(name, {})
        for use in d["consumesCounters"]:
            target = consumed.setdefault(use["counterSet"], {})
            for n, c in use["counters"].items():
                target[n] = target.get(n, 0) + _nanos(c["value"])
        for set_name, counters in available.items():
            for n, amount in counters.items():
                if amount < consumed.get(set_name, {}).get(n, 0):
                    self._give_counters(pool, d)
                    return False
        return True

    def _give_counters(self, pool, d):
        consumed = self.consumed_counters[pool["id"][1]]
        for use in d["consumesCounters"]:
            for n, c in use["counters"].items():
                consumed[use["counterSet"]][n] -= _nanos(c["value"])

    def _is_allocated(self, key):
        if self.stable:
            return key in self.allocated
        return key in self.allocated or any(k == key for k, _ in self.shared) or key in self.aggregated

    # results -----------------------------------------------------------------------------------------
    def _result(self, ci):
        claim = self.claims[ci]
        results = []
        for r in self.results[ci]:
            data = r["data"]
            out = {"request": r["request"], "driver": r["driver"], "pool": r["pool"], "device": r["device"]}
            if data["admin"]:
                out["adminAccess"] = True
            if data["request"].get("tolerations"):
                out["tolerations"] = [dict(t, operator=t.get("operator") or "Equal")
                                      for t in data["request"]["tolerations"]]
            if self.features.device_binding_and_status:
                if r["device_obj"].get("bindingConditions"):
                    out["bindingConditions"] = list(r["device_obj"]["bindingConditions"])
                if r["device_obj"].get("bindingFailureConditions"):
                    out["bindingFailureConditions"] = list(r["device_obj"]["bindingFailureConditions"])
            if r["share"] is not None:
                out["shareID"] = r["share"]
                if r["consumed"]:
                    out["consumedCapacity"] = {n: v for n, v in r["consumed"].items()}  # nanos
            results.append(out)
        allocation = {"devices": {"results": results}}
        configs = []
        by_class = {}
        for ri, _request in enumerate(claim["spec"]["devices"]["requests"]):
            data = self.request_data[(ci, ri, 0)]
            if data["parent"] is not None:
                data = self.request_data[(ci, ri, data["selected"])]
            class_name = data["class"]["metadata"]["name"]
            if class_name in by_class:
                for entry in by_class[class_name]:
                    entry["requests"].append(data["name"])
                continue
            by_class[class_name] = []
            for config in data["class"]["spec"].get("config") or []:
                entry = {"source": "FromClass", "requests": [data["name"]],
                         **{k: v for k, v in config.items() if k != "requests"}}
                by_class[class_name].append(entry)
                configs.append(entry)
        for config in claim["spec"]["devices"].get("config") or []:
            entry = {"source": "FromClaim", **config}
            if not config.get("requests"):
                configs.append(dict(entry))
                continue
            for ri, request in enumerate(claim["spec"]["devices"]["requests"]):
                if request["name"] in config["requests"]:
                    configs.append(dict(entry))
                    continue
                data = self.request_data[(ci, ri, 0)]
                if data["parent"] is None:
                    continue
                chosen = self.request_data[(ci, ri, data["selected"])]
                if chosen["name"] in config["requests"]:
                    configs.append(dict(entry))
        if configs:
            allocation["devices"]["config"] = configs
        selector = self._node_selector(self.results[ci])
        if selector is not None:
            allocation["nodeSelector"] = selector
        return allocation

    def _node_selector(self, results):
        term = {"matchFields": [], "matchExpressions": []}
        for r in results:
            s, d = r["slice"], r["device_obj"]
            source = d if s["spec"].get("perDeviceNodeSelection") else s["spec"]
            binds = d.get("bindsToNode") is True and not self.stable
            if source.get("nodeName") or binds:
                return {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [self.node.name]}]}]}
            selector = source.get("nodeSelector")
            if selector is not None:
                terms = selector.get("nodeSelectorTerms") or []
                if len(terms) > 1:
                    raise Fatal("unsupported ResourceSlice.NodeSelector")
                for kind in ("matchFields", "matchExpressions") if terms else ():
                    for requirement in terms[0].get(kind) or []:
                        if not any(_same_requirement(requirement, have) for have in term[kind]):
                            term[kind].append(requirement)
        term = {k: v for k, v in term.items() if v}
        return {"nodeSelectorTerms": [term]} if term else None


def _same_requirement(a, b):
    return (a.get("key"), a.get("operator"), sorted(a.get("values") or [])) == (
        b.get("key"), b.get("operator"), sorted(b.get("values") or []))
