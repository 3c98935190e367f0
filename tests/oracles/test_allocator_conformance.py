"""Every conformance case (answers of the upstream 1.36.2 allocator) must be reproduced exactly.

Compared: outcome, node and claims of every result in order; errorNodeLocal for errors; for
allocations the devices in order with request names, adminAccess, tolerations, consumedCapacity
(by value), binding conditions, configs and nodeSelector; in sequential mode finalAllocations and
unallocatedClaims. Not compared: error wording and shareID values (only their presence: the
generated cases' meta.json records how many shareIDs were stripped from the expected file).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpudra.allocator import Features, build_report
from support.conformance import Loader, CASES_ROOT, CASES, parse_args, _split, compare_reports  # noqa: F401
from support.conformance import compare_allocation  # noqa: F401
from support.conformance import _normalize_result  # noqa: F401


def run_case(case: Path) -> tuple[dict, dict]:
    args = parse_args((case / "args").read_text())
    objects = [d for d in yaml.load_all((case / "input.yaml").read_text(), Loader=Loader) if d]
    expected = yaml.load((case / "expected.yaml").read_text(), Loader=Loader)
    report = build_report(
        objects,
        mode=args.mode,
        nodes=_split(args.node),
        claims=_split(args.claims),
        features=Features.parse(args.features).with_variant(args.allocator),
        # upstream's answers come from a search without a deadline; the 10 s Filter timeout is a
        # product default, and a loaded CI runner must not turn a slow stable-variant case into a miss
        timeout=None,
    )
    return report, expected


def test_cases_are_present():
    assert len([c for c in CASES if c.parent.name == "upstream"]) >= 200
    assert len([c for c in CASES if c.parent.name == "random"]) >= 200


def count_new_share_ids(ours: dict, expected: dict) -> int:
    """shareIDs in our results where the expected file had its (random) shareID removed."""

    def count(ours_allocation: dict, expected_allocation: dict) -> int:
        pairs = zip(
            ((ours_allocation or {}).get("devices") or {}).get("results") or [],
            ((expected_allocation or {}).get("devices") or {}).get("results") or [],
        )
        return sum(1 for o, e in pairs if "shareID" in o and "shareID" not in e)

    total = 0
    for o, e in zip(ours.get("results") or [], expected.get("results") or []):
        for label, allocation in (e.get("allocations") or {}).items():
            total += count(o["allocations"][label], allocation)
    for label, allocation in (expected.get("finalAllocations") or {}).items():
        total += count(ours["finalAllocations"][label], allocation)
    return total


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_conformance_case(case: Path):
    report, expected = run_case(case)
    compare_reports(report, expected)
    meta = case / "meta.json"
    if meta.exists():  # generated cases record how many shareIDs were stripped: ours must be there
        removed = json.loads(meta.read_text()).get("shareIDs_removed")
        if removed is not None:
            assert count_new_share_ids(report, expected) == removed, "shareID presence differs"
