"""The upstream allocator's conformance cases (tests/data/conformance): reading a case's arguments and comparing
reports. Used by the conformance oracle and the tests that replay its cases elsewhere."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import yaml


Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


CASES_ROOT = Path(__file__).parent.parent / "data" / "conformance"


CASES = sorted(p.parent for p in CASES_ROOT.glob("*/*/expected.yaml"))


def parse_args(text: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="together")
    parser.add_argument("--node", default=None)
    parser.add_argument("--claims", default=None)
    parser.add_argument("--features", default="default")
    parser.add_argument("--allocator", default=None)  # upstream variant; only "stable" changes anything
    tokens = shlex.split(text)
    # "--features -PrioritizedList" must not be mistaken for an option.
    joined = []
    for token in tokens:
        if joined and joined[-1] in ("--features", "--node", "--claims"):
            joined[-1] = f"{joined[-1]}={token}"
        else:
            joined.append(token)
    return parser.parse_args(joined)


def _split(value: str | None) -> list[str] | None:
    return [v for v in value.split(",") if v] if value else None


def compare_reports(ours: dict, expected: dict) -> None:
    ours_results = ours.get("results") or []
    exp_results = expected.get("results") or []
    summary = [(r["node"], r["claims"], r["outcome"]) for r in ours_results]
    wanted = [(r["node"], r["claims"], r["outcome"]) for r in exp_results]
    assert summary == wanted, "outcomes differ:\n" + "\n".join(
        f"{'  ' if a == b else '!!'} ours={a} expected={b}" for a, b in zip(summary, wanted)
    )
    for i, (o, e) in enumerate(zip(ours_results, exp_results)):
        where = f"result #{i} ({e['node']} {e['claims']})"
        if e["outcome"] == "error":
            assert o.get("errorNodeLocal") == e.get("errorNodeLocal"), f"{where}: errorNodeLocal; ours: {o.get('error')}"
        if e["outcome"] == "allocated":
            assert sorted(o["allocations"]) == sorted(e["allocations"]), where
            for label, allocation in e["allocations"].items():
                compare_allocation(o["allocations"][label], allocation, f"{where} {label}")
    if "finalAllocations" in expected or "unallocatedClaims" in expected:
        assert (ours.get("unallocatedClaims") or []) == (expected.get("unallocatedClaims") or [])
        final_ours = ours.get("finalAllocations") or {}
        final_expected = expected.get("finalAllocations") or {}
        assert sorted(final_ours) == sorted(final_expected)
        for label, allocation in final_expected.items():
            compare_allocation(final_ours[label], allocation, f"finalAllocations {label}")


def compare_allocation(ours: dict, expected: dict, where: str) -> None:
    ours_devices = (ours or {}).get("devices") or {}
    exp_devices = (expected or {}).get("devices") or {}
    ours_results = ours_devices.get("results") or []
    exp_results = exp_devices.get("results") or []
    assert len(ours_results) == len(exp_results), f"{where}: results differ\nours: {ours_results}\nexpected: {exp_results}"
    for i, (o, e) in enumerate(zip(ours_results, exp_results)):
        assert _normalize_result(o, e) == e, f"{where}: result #{i} differs"
    assert (ours_devices.get("config") or []) == (exp_devices.get("config") or []), f"{where}: config differs"
    assert ours.get("nodeSelector") == expected.get("nodeSelector"), f"{where}: nodeSelector differs"


def _normalize_result(ours: dict, expected: dict) -> dict:
    ours = dict(ours)
    if "shareID" in expected:
        assert ours.get("shareID"), f"shareID missing in {ours}"
        ours["shareID"] = expected["shareID"]
    else:
        # Upstream's random shareIDs were removed from the expected files of new allocations.
        ours.pop("shareID", None)
    return ours
