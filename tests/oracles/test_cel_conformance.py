"""gpudra's DRA CEL environment against cel-go's own answers (tests/data/conformance/cel).

The answers come from k8s.io/dynamic-resource-allocation v0.36.2's `cel` package, unmodified, for the
198 cases of tests/data/cel/expressions.yaml in two readings: the API server's (a new expression,
compiled with cost estimation: an estimated cost over the limit is a rejection) and kube-scheduler's
(a stored expression: no estimate, the runtime cost limit applies). Outcomes are compared (compile
error, runtime error, true, false), not error wording.

tests/data/conformance/cel-derived holds cases in the same format whose answers were derived by hand from
the upstream sources (each case names the files), one class per disagreement found against cel-go: cost
estimates, constant arguments refused when the program is built, versions used as strings, indexOf with an
offset, presence tests on the device's maps, quantities past int64, nesting, string(cidr), the
DRAListTypeAttributes gate, and the environment of each release (`kubernetesVersion`). A case marked
`gpudraKnownDifference` is one gpudra does not reproduce (README, known differences): it must still
differ, so a fix shows up here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpudra.cel import CELCompileError, CELRuntimeError, compile_selector, device_input

ROOT = Path(__file__).parent.parent / "data" / "conformance" / "cel"
DERIVED = Path(__file__).parent.parent / "data" / "conformance" / "cel-derived"
TABLE = yaml.safe_load((Path(__file__).parent.parent / "data" / "cel" / "expressions.yaml").read_text())["cases"]


def _load(reading: str, root: Path = ROOT) -> list[tuple[dict, dict]]:
    cases = json.loads((root / f"cases-{reading}.json").read_text())["cases"]
    answers = {a["id"]: a for a in map(json.loads, (root / f"expected-{reading}.jsonl").read_text().splitlines())}
    return [(case, answers[case["id"]]) for case in cases]


READINGS = {reading: _load(reading) for reading in ("validation", "scheduler")}
DERIVED_READINGS = {reading: _load(reading, DERIVED) for reading in ("validation", "scheduler")}


def upstream_outcome(answer: dict, reading: str):
    if answer.get("compileError") or (reading == "validation" and answer.get("exceedsCostLimit")):
        return "compile error"
    if "runtimeError" in answer:
        return "runtime error"
    return answer["result"]


def gpudra_outcome(case: dict, reading: str):
    stored = reading == "scheduler"
    features = case["features"]
    try:
        # The 1.36 scheduler compiles stored expressions with every field declared, whatever the gates
        # (gpudra.cel.release); DRAListTypeAttributes still types attribute values in both readings.
        selector = compile_selector(case["expression"], consumable_capacity=features["consumableCapacity"],
                                    list_type_attributes=features["listTypeAttributes"], stored=stored,
                                    version=case.get("kubernetesVersion", "1.36"))
    except CELCompileError:
        return "compile error"
    device = device_input(case["driver"], case["device"], list_type_attributes=features["listTypeAttributes"])
    try:
        return selector.evaluate(device)
    except CELRuntimeError:
        return "runtime error"


def test_both_readings_cover_the_whole_table():
    for reading, pairs in READINGS.items():
        assert [case["expression"] for case, _ in pairs] == [case["expression"] for case in TABLE], reading
        assert [case["id"] for case, _ in pairs] == [f"{i:03d}" for i in range(len(TABLE))]


@pytest.mark.parametrize("reading", sorted(READINGS))
def test_every_case_agrees_with_cel_go(reading):
    differences = []
    for case, answer in READINGS[reading]:
        want, got = upstream_outcome(answer, reading), gpudra_outcome(case, reading)
        if want != got:
            differences.append(f"{case['id']} {case['expression']}: cel-go {want}, gpudra {got}")
    assert not differences, "\n".join(differences)


def test_the_table_expectations_are_cel_go_answers():
    """Each expectation of the table is the API server's answer, and `scheduler:` (or, where absent,
    the same expectation) kube-scheduler's."""
    for index, row in enumerate(TABLE):
        for reading, key in (("validation", "expected"), ("scheduler", "scheduler")):
            expected = row.get(key, row["expected"])
            kind = expected if isinstance(expected, bool) else next(iter(expected)).replace("_", " ")
            assert kind == upstream_outcome(READINGS[reading][index][1], reading), f"{index:03d} {reading}"


@pytest.mark.parametrize("reading", sorted(DERIVED_READINGS))
def test_every_derived_case_agrees_with_the_upstream_sources(reading):
    differences = []
    for case, answer in DERIVED_READINGS[reading]:
        want, got = upstream_outcome(answer, reading), gpudra_outcome(case, reading)
        known = case.get("gpudraKnownDifference")
        if known and want == got:
            differences.append(f"{case['id']} {case['expression']}: agrees now; drop gpudraKnownDifference ({known})")
        elif not known and want != got:
            differences.append(f"{case['id']} [{case['class']}] {case['expression']}: upstream {want}, gpudra {got}")
    assert not differences, "\n".join(differences)


def test_the_derived_cases_cover_each_class_and_name_their_sources():
    classes: dict[str, int] = {}
    for case, _ in DERIVED_READINGS["validation"]:
        assert case["source"] and case["expression"], case["id"]
        classes[case["class"]] = classes.get(case["class"], 0) + 1
    assert set(classes) == {"cost", "constants", "versions", "indexOf", "maps", "misc", "gates", "release"}
    assert min(classes.values()) >= 5
    releases = {case.get("kubernetesVersion") for case, _ in DERIVED_READINGS["validation"]}
    assert {"1.33", "1.34", "1.35", "1.36"} <= releases


def test_validate_checks_selectors_in_the_release_s_api_server():
    """`gpudra validate` for a release refuses a DeviceClass selector exactly when that release's API server
    (with its default gates) does, per the derived release cases."""
    from gpudra.api.load import Document
    from gpudra.api.validate import validate_documents
    from gpudra.versions import default_gates

    checked = 0
    for case, answer in DERIVED_READINGS["validation"]:
        version = case.get("kubernetesVersion")
        gates = default_gates(version) if version else {}
        features = case["features"]
        if not version or features["consumableCapacity"] != gates["DRAConsumableCapacity"] or (
                features["listTypeAttributes"] != gates["DRAListTypeAttributes"]):
            continue  # validate uses the release's default gates
        device_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c"},
                        "spec": {"selectors": [{"cel": {"expression": case["expression"]}}]}}
        problems = validate_documents([Document(device_class, "c.yaml", 1)], version)
        refused = any(p.severity == "error" and "CEL compile error" in p.message for p in problems)
        assert refused == (upstream_outcome(answer, "validation") == "compile error"), (version, case["expression"])
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("reading", sorted(READINGS))
def test_cost_estimates_are_cel_go_s(reading):
    """gpudra.cel.estimate against the estimate cel-go itself computed for every case it compiled (exact)."""
    compared, differences = 0, []
    for case, answer in READINGS[reading]:
        if answer.get("compileError") or answer.get("estimatedCost") is None:
            continue
        features = case["features"]
        selector = compile_selector(case["expression"], consumable_capacity=features["consumableCapacity"],
                                    list_type_attributes=features["listTypeAttributes"], stored=True)
        compared += 1
        if selector.estimated_cost != answer["estimatedCost"]:
            differences.append(f"{case['id']} {case['expression']}: cel-go {answer['estimatedCost']}, "
                               f"gpudra {selector.estimated_cost}")
    assert compared > 150 and not differences, "\n".join(differences)


# ----- the recorded answers re-derived from the live CEL environment of the release -----

# Go ranges over a map in random order: an `exists` over the attribute map stops at the match, so its actual cost
# differs from run to run (the outcome does not)
MAP_ORDER_COSTS = {"035", "163"}


def live_answers(cases: list[dict], release: str | None) -> dict[str, dict]:
    """k8s/cmd/cel-oracle built against `release` ("1.36": k8s/releases/v1.36.mod; None: k8s/go.mod's 1.34)."""
    import subprocess

    from support.realkube import require_go

    from gpudra.kubecluster.build import build_command

    require_go()  # skipped without Go, naming it; where Go is, .ci/run makes a skip a failure
    binary = build_command("cel-oracle", str(Path(__file__).resolve().parents[2] / "k8s"), release=release).binary
    run = subprocess.run([str(binary)], input=json.dumps({"cases": cases}), capture_output=True, text=True,
                         timeout=600, check=True)
    return {answer["id"]: answer for answer in map(json.loads, run.stdout.splitlines())}


@pytest.mark.timeout(3600)  # the harness may need a build (a minute with the 1.36 control plane's Go cache)
@pytest.mark.parametrize("reading", sorted(READINGS))
def test_the_recorded_answers_are_the_live_1_36_environment_s(reading):
    """cases-*.json through the real 1.36 CEL environment now: outcome, actual cost and (API server's reading)
    estimated cost as recorded from v0.36.2."""
    pairs = READINGS[reading]
    fresh = live_answers([case for case, _ in pairs], "1.36")
    differences = []
    for case, answer in pairs:
        live = fresh[case["id"]]
        if upstream_outcome(live, reading) != upstream_outcome(answer, reading):
            differences.append(f"{case['id']}: live {upstream_outcome(live, reading)}, "
                               f"recorded {upstream_outcome(answer, reading)}")
        if case["id"] not in MAP_ORDER_COSTS and live.get("actualCost") != answer.get("actualCost"):
            differences.append(f"{case['id']}: actual cost live {live.get('actualCost')}, "
                               f"recorded {answer.get('actualCost')}")
        if live.get("estimatedCost") is not None and live["estimatedCost"] != answer.get("estimatedCost"):
            differences.append(f"{case['id']}: estimate live {live['estimatedCost']}, "
                               f"recorded {answer.get('estimatedCost')}")
    assert not differences, "\n".join(differences)


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("reading", sorted(DERIVED_READINGS))
@pytest.mark.parametrize("release", ["1.36", "1.34"])
def test_the_derived_answers_are_the_live_environment_s(reading, release):
    """The hand-derived answers of cel-derived for a release gpudra's Go module pins (1.36, 1.34), asked of that
    release's real CEL environment: the same outcome in every case (1.33 and 1.35 have no harness here)."""
    pairs = [(case, answer) for case, answer in DERIVED_READINGS[reading]
             if case.get("kubernetesVersion", "1.36") == release]
    fresh = live_answers([case for case, _ in pairs], None if release == "1.34" else release)
    differences = [f"{case['id']} [{case['class']}] {case['expression']}: "
                   f"live {upstream_outcome(fresh[case['id']], reading)}, derived {upstream_outcome(answer, reading)}"
                   for case, answer in pairs
                   if upstream_outcome(fresh[case["id"]], reading) != upstream_outcome(answer, reading)]
    assert len(pairs) >= 3 and not differences, "\n".join(differences)
