"""Deliberate bugs in the production allocator, and whether the differential test catches them.

    PYTHONPATH=. python tests/support/differential_mutants.py [NAME …]

Each mutant patches one behaviour of gpudra.allocator that a search shortcut or a variant mix-up
would get wrong, then runs the CI differential test (tests/oracles/test_allocator_differential.py, the same
derandomized examples CI runs, without shrinking) and prints the example at which it first failed,
or "MISSED". Not collected by pytest: it is the evidence behind the test's docstring.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the support package
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracles"))

from hypothesis import Phase  # noqa: E402

import test_allocator_differential as differential  # noqa: E402
from gpudra.allocator import pools as pools_module  # noqa: E402
from gpudra.allocator import search as search_module  # noqa: E402


def _stable_combinations():
    """stable takes the combination shortcut even where a rejected device leaks its counters."""
    def mark(self):
        for claim in self.claims:
            for rd in self._all_request_data(claim):
                rd.ordered = True
    search_module.Search._mark_order_independent_requests = mark


def _permutations_everywhere():
    """incubating/experimental try permutations (no startLocation)."""
    original = search_module.Search._mark_order_independent_requests

    def mark(self):
        original(self)
        if not self.features.stable_variant:
            for claim in self.claims:
                for rd in self._all_request_data(claim):
                    rd.ordered = False
    search_module.Search._mark_order_independent_requests = mark


def _build_with(sort_for_stable: bool | None, sort_for_others: bool | None):
    original = pools_module.SliceIndex._build

    def build(self, pool_id, pool_slices, everything, node, sort_slices):
        stable = self.features.stable_variant
        wanted = sort_for_stable if stable else sort_for_others
        return original(self, pool_id, pool_slices, everything, node, sort_slices if wanted is None else wanted)
    pools_module.SliceIndex._build = build


def _stable_sorts_slices():
    """stable sorts a pool's slices by name (as incubating does) instead of keeping input order."""
    _build_with(True, None)


def _incubating_input_slice_order():
    """incubating/experimental keep a pool's slices in input order instead of sorting them by name."""
    _build_with(None, False)


def _gather_then(reorder):
    original = pools_module.SliceIndex.gather

    def gather(self, node):
        return reorder(self, original(self, node))
    pools_module.SliceIndex.gather = gather


def _stable_sorts_pools():
    """stable sorts pools by (driver, name) instead of first-seen order."""
    _gather_then(lambda self, pools: sorted(pools, key=lambda p: (p.driver, p.name))
                 if self.features.stable_variant else pools)


def _incubating_pools_reversed():
    """incubating/experimental visit pools in reverse (driver, name) order."""
    _gather_then(lambda self, pools: pools if self.features.stable_variant else pools[::-1])


def _binding_pools_not_last():
    """incubating/experimental do not move pools with binding conditions to the end."""
    _gather_then(lambda self, pools: pools if self.features.stable_variant
                 else sorted(pools, key=lambda p: (p.driver, p.name)))


def _stable_binding_pools_last():
    """stable moves pools with binding conditions to the end (only incubating/experimental do)."""
    _gather_then(lambda self, pools: sorted(pools, key=lambda p: p.has_binding_conditions)
                 if self.features.stable_variant else pools)


def _subrequests_reversed():
    """firstAvailable subrequests tried last to first."""
    original = search_module.Search._allocate_one

    def allocate_one(self, ci, ri, si, di, in_sub):
        if ci < len(self.claims) and ri < len(self.claims[ci].requests):
            slot = self.claims[ci].requests[ri]
            if slot.subrequests is not None and not getattr(slot, "_reversed", False):
                slot.subrequests.reverse()
                slot._reversed = True
        return original(self, ci, ri, si, di, in_sub)
    search_module.Search._allocate_one = allocate_one


def _taint_returns_counters():
    """A device rejected by a taint gives its counters back (upstream keeps them consumed)."""
    original = search_module.Search._allocate_device

    def allocate_device(self, ci, rd, device, must, **rest):
        if (self.features.device_taints and device.taints and device.consumes_counters
                and search_module.taint_prevents_allocation(device.taints, rd.tolerations)):
            return None
        return original(self, ci, rd, device, must, **rest)
    search_module.Search._allocate_device = allocate_device


def _rollback_keeps_taint_counters():
    """1.36.3: a device rejected by a taint keeps its counters (1.36.2's leak)."""
    original = search_module.Search._allocate_device

    def allocate_device(self, ci, rd, device, must, **rest):
        if (self.features.device_taints and self.features.partitionable_devices and device.taints
                and device.consumes_counters and not device.allow_multiple and not self._in_use(ci, rd, device)
                and search_module.taint_prevents_allocation(device.taints, rd.tolerations)):
            self._take_counters(device)  # and never given back
            return None
        return original(self, ci, rd, device, must, **rest)
    search_module.Search._allocate_device = allocate_device


def _rollback_keeps_shared_counters():
    """1.36.3: undoing a multi-allocatable device keeps its counters (1.36.2's leak)."""
    original = search_module.Search._give_counters

    def give_counters(self, device):
        if not (device.allow_multiple and self.features.consumable_capacity):
            original(self, device)
    search_module.Search._give_counters = give_counters


# Run as Kubernetes 1.36.3 (differential._run(rollback=True)): they break its rollback.
ROLLBACK_MUTANTS = frozenset({"rollback-keeps-taint-counters", "rollback-keeps-shared-counters"})

MUTANTS = {
    "stable-combinations": _stable_combinations,
    "permutations-everywhere": _permutations_everywhere,
    "stable-sorts-slices": _stable_sorts_slices,
    "incubating-input-slice-order": _incubating_input_slice_order,
    "stable-sorts-pools": _stable_sorts_pools,
    "incubating-pools-reversed": _incubating_pools_reversed,
    "binding-pools-not-last": _binding_pools_not_last,
    "stable-binding-pools-last": _stable_binding_pools_last,
    "subrequests-reversed": _subrequests_reversed,
    "taint-returns-counters": _taint_returns_counters,
    "rollback-keeps-taint-counters": _rollback_keeps_taint_counters,
    "rollback-keeps-shared-counters": _rollback_keeps_shared_counters,
}


def run_mutant(name: str) -> tuple[str | None, int, float]:
    """(variant that caught it or None, examples run, seconds)."""
    MUTANTS[name]()
    count = 0
    original_check = differential.check

    def counting_check(*args):
        nonlocal count
        count += 1
        original_check(*args)

    differential.check = counting_check
    started = time.monotonic()
    try:
        for variant in differential.VARIANTS:
            try:
                differential._run(variant, rollback=name in ROLLBACK_MUTANTS, phases=[Phase.explicit, Phase.generate])
            except Exception:  # noqa: BLE001 - any failure means the mutant was caught
                return variant, count, time.monotonic() - started
        return None, count, time.monotonic() - started
    finally:
        differential.check = original_check


def main(names: list[str]) -> int:
    import subprocess

    if len(names) == 1 and names[0] in MUTANTS and "--child" in sys.argv:
        caught, count, seconds = run_mutant(names[0])
        verdict = f"caught ({caught}, example {count})" if caught else "MISSED"
        print(f"{names[0]:32} {verdict:40} {seconds:6.1f} s", flush=True)
        return 0 if caught else 1
    missed = 0
    for name in names or list(MUTANTS):
        # A fresh interpreter per mutant: patches must not leak into the next one.
        missed += subprocess.call([sys.executable, __file__, name, "--child"]) != 0
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main([a for a in sys.argv[1:] if a != "--child"]))
