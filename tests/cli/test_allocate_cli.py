"""`gpudra allocate`: the brief report against conformance cases, the claims view, input handling."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpudra.allocator import allocator as allocator_module  # noqa: E402
from gpudra.allocator import search as search_module  # noqa: E402
from gpudra.api.quantity import Quantity  # noqa: E402
from gpudra.cel import budget  # noqa: E402
from gpudra.cli.allocate import command  # noqa: E402
from support.clock import SteppingClock  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent
CONFORMANCE = ROOT / "tests" / "data" / "conformance"
DATA = ROOT / "tests" / "data" / "allocate"

# A spread of modes, feature sets and outcomes (allocated, unallocatable, errors, sequential).
CASES = [
    "random/each-0003",
    "random/each-0007",
    "random/sequential-0001",
    "random/together-0003",
    "upstream/admin-access-enabled",
    "upstream/admin-access-disabled",
    "upstream/all-devices-many-plus-another",
]


def normalise(report: dict[str, Any]) -> dict[str, Any]:
    """Drop what the conformance contract does not compare: the oracle header, shareIDs, error
    wording; consumed capacities are compared by value (upstream may print 15G as 15000000000)."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                key: (
                    "<error>"
                    if key == "error"
                    else {k: Quantity.parse(v).nanos for k, v in item.items()}
                    if key == "consumedCapacity"
                    else walk(item)
                )
                for key, item in value.items()
                if key not in ("shareID", "oracle")
            }
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    return walk(report)


def invoke(args: list[str], stdin: str | None = None):
    runner = CliRunner()
    return runner.invoke(command, args, input=stdin, catch_exceptions=False)


def expected_exit_code(expected: dict[str, Any]) -> int:
    """0 when every pending claim of a conformance report was allocated somewhere, else 1 (a "no")."""
    pending = {key for entry in expected.get("results") or [] for key in entry.get("claims") or []}
    if "finalAllocations" in expected or "unallocatedClaims" in expected:
        allocated = set(expected.get("finalAllocations") or {})
    else:
        allocated = {key for entry in expected.get("results") or [] if entry.get("outcome") == "allocated"
                     for key in entry.get("allocations") or {}}
    return 0 if pending <= allocated else 1


def harness_order(args: list[str], input_path: Path) -> list[str]:
    """The conformance harness commits sequential allocations trying the nodes in the input's order; `gpudra
    allocate` tries them in name order unless --node orders them (as every mode chooses): give the harness's."""
    if "sequential" not in args or "--node" in args:
        return args
    from gpudra.allocator.report import default_node_names, split_objects

    objects = [o for o in yaml.safe_load_all(input_path.read_text()) if isinstance(o, dict)]
    return [*args, "--node", ",".join(default_node_names(split_objects(objects)))]


@pytest.mark.parametrize("case", CASES)
def test_brief_report_reproduces_conformance_expected_yaml(case):
    folder = CONFORMANCE / case
    args = harness_order(shlex.split((folder / "args").read_text()), folder / "input.yaml")
    # upstream's cases feed the allocator objects that validation refuses on purpose (it allocates anyway)
    result = invoke(["--brief", "-o", "yaml", "--no-validate", *args, "-f", str(folder / "input.yaml")])
    expected = yaml.safe_load((folder / "expected.yaml").read_text())
    assert result.exit_code == expected_exit_code(expected), result.output
    assert normalise(yaml.safe_load(result.stdout)) == normalise(expected)


def test_case_runner_command_line_works_as_a_subprocess():
    folder = CONFORMANCE / "random/each-0003"
    args = shlex.split((folder / "args").read_text())
    completed = subprocess.run(
        [sys.executable, "-m", "gpudra", "allocate", "--brief", "-o", "yaml", *args, "-f", str(folder / "input.yaml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    expected = yaml.safe_load((folder / "expected.yaml").read_text())
    assert normalise(yaml.safe_load(completed.stdout)) == normalise(expected)


def test_input_from_stdin_and_json_output_match_the_file_form():
    folder = CONFORMANCE / "random/together-0003"
    args = shlex.split((folder / "args").read_text())
    text = (folder / "input.yaml").read_text()
    from_stdin = invoke(["--brief", "-o", "json", "--no-validate", *args, "-f", "-"], stdin=text)
    from_file = invoke(["--brief", "-o", "yaml", "--no-validate", *args, "-f", str(folder / "input.yaml")])
    assert from_stdin.exit_code == from_file.exit_code == expected_exit_code(yaml.safe_load(from_file.stdout))
    assert normalise(json.loads(from_stdin.stdout)) == normalise(yaml.safe_load(from_file.stdout))


def test_allocator_flag_is_accepted_and_ignored():
    folder = CONFORMANCE / "upstream/admin-access-enabled"
    base = ["--brief", "--no-validate", "--mode", "together", "--node", "node-1", "--features", "none,AdminAccess"]
    plain = invoke([*base, "-f", str(folder / "input.yaml")])
    named = invoke([*base, "--allocator", "stable", "-f", str(folder / "input.yaml")])
    assert plain.exit_code == named.exit_code == expected_exit_code(yaml.safe_load(plain.stdout))
    assert normalise(yaml.safe_load(plain.stdout)) == normalise(yaml.safe_load(named.stdout))


def test_claims_view_fills_status_allocation_from_the_report():
    folder = CONFORMANCE / "random/sequential-0001"
    args = shlex.split((folder / "args").read_text())
    brief = yaml.safe_load(invoke(["--brief", "--no-validate", *args, "-f", str(folder / "input.yaml")]).stdout)
    result = invoke(["--no-validate", "-o", "yaml", *args, "-f", str(folder / "input.yaml")])
    assert result.exit_code == (1 if brief["unallocatedClaims"] else 0)
    view = yaml.safe_load(result.stdout)
    assert view["kind"] == "List"
    items = {f"{c['metadata'].get('namespace', 'default')}/{c['metadata']['name']}": c for c in view["items"]}
    # every pending claim is listed; allocated ones carry exactly the final allocation
    pending = {key for entry in brief["results"] for key in entry["claims"]}
    assert pending == set(items)
    assert set(brief["unallocatedClaims"]) < pending
    for key in pending - set(brief["unallocatedClaims"]):
        assert normalise(items[key]["status"]["allocation"]) == normalise(brief["finalAllocations"][key])
    for key in brief["unallocatedClaims"]:
        assert "allocation" not in (items[key].get("status") or {})
        assert f"{key}: unallocatable" in result.stderr


def test_claims_view_in_each_mode_uses_the_first_node_that_fits():
    folder = CONFORMANCE / "random/each-0003"
    brief = yaml.safe_load(invoke(["--brief", "--mode", "each", "-f", str(folder / "input.yaml")]).stdout)
    view = yaml.safe_load(invoke(["--mode", "each", "-o", "json", "-f", str(folder / "input.yaml")]).stdout)
    first: dict[str, Any] = {}
    for entry in sorted(brief["results"], key=lambda entry: entry["node"]):  # nodes as the scheduler walks them
        if entry["outcome"] == "allocated":
            for key, allocation in entry["allocations"].items():
                first.setdefault(key, allocation)
    got = {
        f"{c['metadata'].get('namespace', 'default')}/{c['metadata']['name']}": c.get("status", {}).get("allocation")
        for c in view["items"]
    }
    assert {k: normalise(v) for k, v in got.items() if v} == {k: normalise(v) for k, v in first.items()}


def test_claims_option_restricts_the_pending_claims():
    folder = CONFORMANCE / "random/each-0003"
    full = yaml.safe_load(invoke(["--brief", "--mode", "each", "-f", str(folder / "input.yaml")]).stdout)
    some = sorted({key for entry in full["results"] for key in entry["claims"]})[:1]
    result = invoke(["--brief", "--mode", "each", "--claims", some[0], "-f", str(folder / "input.yaml")])
    assert result.exit_code == 0
    report = yaml.safe_load(result.stdout)
    assert {key for entry in report["results"] for key in entry["claims"]} == set(some)


# --- unusable input: clean message, exit 2, no traceback ------------------------------------------

MALFORMED = {
    "not-yaml.yaml": "apiVersion: v1\nkind: [unclosed\n",
    "scalar.yaml": "just a string\n",
    "list.yaml": "- 1\n- 2\n",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_files_give_a_clean_error(tmp_path, name):
    path = tmp_path / name
    path.write_text(MALFORMED[name])
    result = CliRunner().invoke(command, ["-f", str(path)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert str(path) in result.stderr


def test_missing_file_gives_a_clean_error(tmp_path):
    result = CliRunner().invoke(command, ["-f", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "nope.yaml" in result.stderr and "Traceback" not in result.output


def test_unknown_feature_token_is_rejected():
    folder = CONFORMANCE / "upstream/admin-access-enabled"
    result = CliRunner().invoke(command, ["--features", "none,NoSuchGate", "-f", str(folder / "input.yaml")])
    assert result.exit_code == 2
    assert "NoSuchGate" in result.stderr


def test_unknown_claim_name_is_rejected():
    folder = CONFORMANCE / "upstream/admin-access-enabled"
    result = CliRunner().invoke(command, ["--claims", "nowhere/nothing", "--no-validate",
                                          "-f", str(folder / "input.yaml")])
    assert result.exit_code == 2
    assert "nowhere/nothing" in result.stderr


def test_bad_mode_is_a_usage_error():
    result = CliRunner().invoke(command, ["--mode", "sideways", "-f", "-"], input="")
    assert result.exit_code == 2


def test_structurally_broken_objects_do_not_crash(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text((DATA / "broken-objects.yaml").read_text())
    refused = CliRunner().invoke(command, ["--brief", "--node", "node-1", "-f", str(path)])
    assert refused.exit_code == 1 and "spec.devices: must be a list" in refused.stderr
    assert refused.stderr.startswith("error: ") and "--no-validate" in refused.stderr
    result = CliRunner().invoke(command, ["--brief", "--node", "node-1", "--no-validate", "-f", str(path)])
    assert "Traceback" not in result.output
    assert result.exit_code in (0, 1, 2)
    if result.exit_code == 2:
        # the field-level problems come first, then one line saying why nothing was printed
        assert "spec.devices: must be a list" in result.stderr
        assert result.stderr.rstrip().splitlines()[-1].startswith("error: the input is malformed")


def test_validation_problems_stop_allocate_unless_no_validate():
    path = DATA / "invalid-but-allocatable.yaml"
    refused = invoke(["--brief", "--node", "node-1", "-f", str(path)])
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr.startswith(f"error: {path}:doc ")
    result = invoke(["--brief", "--node", "node-1", "--no-validate", "-f", str(path)])
    assert result.exit_code == 0, result.stderr
    report = yaml.safe_load(result.stdout)
    assert [entry["outcome"] for entry in report["results"]] == ["allocated"]
    assert "warning" in result.stderr.lower()


# --- scale --------------------------------------------------------------------------------------------


def load_generator():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gen_cluster
    finally:
        sys.path.pop(0)
    return gen_cluster


def test_two_thousand_node_cluster_is_feasible(tmp_path):
    gen = load_generator()
    objects = gen.generate_cluster(2000, nvlink_domains=2)
    objects.append(gen.gpu_claim("train", 4, match_nvlink=True))
    path = tmp_path / "cluster.json"  # JSON: the point is the allocator, not YAML parsing speed
    with open(path, "w") as stream:
        gen.dump_json(objects, stream)
    result = invoke(["--brief", "--mode", "each", "-o", "json", "-f", str(path)])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["results"]) == 2000
    assert {entry["outcome"] for entry in report["results"]} == {"allocated"}
    # first-fit on each node: the first NVLink domain's four GPUs
    last = report["results"][-1]
    devices = [r["device"] for r in last["allocations"]["default/train"]["devices"]["results"]]
    assert last["node"] == gen.node_name(1999)
    assert devices == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_benchmark_script_prints_its_json_summary_last(tmp_path):
    gen = load_generator()
    path = tmp_path / "one-node.json"
    with open(path, "w") as stream:
        gen.dump_json(gen.generate_cluster(1), stream)
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "allocate.py"), str(path), "--node", gen.node_name(0),
         "--seconds", "0.01", "--json", "--no-go"],  # with Go: tests/oracles/test_allocate_benchmark_go.py
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    summary = json.loads(completed.stdout.strip().splitlines()[-1])
    assert summary["allocate_per_s"] > 0 and summary["per_pod_per_s"] > 0
    assert [(s["scenario"], s["outcome"], s["devices_allocated"]) for s in summary["scenarios"]] == [
        ("1 GPU", "allocated", 1),
        ("8 GPUs matchAttribute", "allocated", 8),
    ]


def test_older_api_versions_are_converted_to_v1():
    result = invoke(["--brief", "-f", str(DATA / "v1beta1-claim.yaml")])
    assert result.exit_code == 0, result.stderr
    (entry,) = yaml.safe_load(result.stdout)["results"]
    assert entry["outcome"] == "allocated"
    devices = [r["device"] for r in entry["allocations"]["default/two-gpus"]["devices"]["results"]]
    assert devices == ["gpu-0", "gpu-1"]
    assert "converted from resource.k8s.io/v1beta1" in result.stderr


CLAIM_ONLY = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: lonely}
spec: {devices: {requests: [{name: r, exactly: {deviceClassName: gpu.example.com}}]}}
"""


def test_no_nodes_and_no_claims_are_explained_on_stderr():
    no_nodes = invoke(["--brief", "-f", "-"], stdin=CLAIM_ONLY)
    assert no_nodes.exit_code == 1  # the claim is not allocated
    assert "no nodes to try" in no_nodes.stderr and "--node" in no_nodes.stderr
    empty = CliRunner().invoke(command, ["--brief", "-f", "-"], input="")
    assert empty.exit_code == 2 and "no Kubernetes objects" in empty.stderr
    class_only = invoke(["--brief", "-f", "-"], stdin="apiVersion: resource.k8s.io/v1\nkind: DeviceClass\n"
                                                     "metadata: {name: gpu.example.com}\nspec: {}\n")
    assert class_only.exit_code == 0
    assert "no pending ResourceClaims" in class_only.stderr
    # with a node named, the missing class is the allocator's error for that node
    named = invoke(["--brief", "--node", "node-9", "-f", "-"], stdin=CLAIM_ONLY)
    (entry,) = yaml.safe_load(named.stdout)["results"]
    assert (entry["node"], entry["outcome"], entry["errorNodeLocal"]) == ("node-9", "error", False)


def test_timeout_turns_a_runaway_search_into_a_node_local_error(tmp_path, monkeypatch):
    # 13 one-device claims for 12 devices, jointly: the depth-first search would try every assignment.
    # The deadline's readers get a clock that moves a second per reading, so the 0.2 s limit is met after the
    # first 1024 steps whatever the machine's speed.
    clock = SteppingClock()
    for module in (allocator_module, search_module, budget):
        monkeypatch.setattr(module, "time", clock)
    devices = [{"name": f"gpu-{i}"} for i in range(12)]
    objects = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n1"},
         "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                  "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1}, "devices": devices}},
    ] + [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": f"c{i}", "namespace": "default"},
         "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}
        for i in range(13)
    ]
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    result = CliRunner().invoke(command, ["--brief", "--mode", "together", "--timeout", "0.2", "-f", str(path)])
    assert result.exit_code == 1, result.output  # no allocation: a negative answer
    [entry] = yaml.safe_load(result.stdout)["results"]
    assert entry["outcome"] == "error" and entry["errorNodeLocal"] is True
    assert "timed out" in entry["error"]


def test_sequential_brief_yaml_has_no_anchors_or_aliases():
    # finalAllocations and results share allocation objects; a plain dump writes `&id001`/`*id001`,
    # which the expected.yaml files never contain, so a textual diff against them fails
    case = CONFORMANCE / "random" / "sequential-0001"
    args = (case / "args").read_text().split()
    result = invoke(["--brief", "-o", "yaml", "--no-validate", *args, "-f", str(case / "input.yaml")])
    assert result.exit_code == expected_exit_code(yaml.safe_load((case / "expected.yaml").read_text()))
    assert "finalAllocations" in result.stdout
    assert "&id0" not in result.stdout and "*id0" not in result.stdout


def test_an_unallocatable_claim_points_at_explain_for_the_reason(tmp_path):
    too_big = tmp_path / "too-big.yaml"
    too_big.write_text("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: huge, namespace: team}\n"
                       "spec:\n  devices:\n    requests:\n    - name: gpus\n      exactly:\n"
                       "        deviceClassName: gpu.nvidia.com\n        allocationMode: ExactCount\n        count: 20\n")
    cluster = str(ROOT / "examples" / "cluster")
    for mode in ("each", "sequential"):
        result = invoke(["-f", cluster, "-f", str(too_big), "--mode", mode])
        assert result.exit_code == 1
        assert "team/huge: unallocatable on every node" in result.stderr
        assert "`gpudra explain claim/huge -n team` (same -f) says why" in result.stderr, result.stderr
    fits = invoke(["-f", cluster, "-f", str(ROOT / "examples" / "workloads" / "claims.yaml"), "--mode", "each"])
    assert fits.exit_code == 0 and "gpudra explain" not in fits.stderr
    # claims that fit alone but not together: explain (one claim) would say "fits"; the note says --mode each
    together = invoke(["-f", cluster, "-f", str(ROOT / "examples" / "workloads" / "claims.yaml"), "--mode", "together"])
    assert together.exit_code == 1 and "try --mode each" in together.stderr and "gpudra explain" not in together.stderr
    # no nodes at all: neither "do not fit together on any node" nor a hint at explain, which has none to try
    alone = invoke(["-f", str(too_big)])
    assert alone.exit_code == 1 and "no nodes to try" in alone.stderr
    assert "team/huge: unallocatable: no nodes to try" in alone.stderr, alone.stderr
    assert "together" not in alone.stderr and "gpudra explain" not in alone.stderr


def test_the_default_mode_allocates_the_bundled_workloads_one_claim_after_another():
    # issue 21: the default (then --mode together) said nothing fits for the bundled workloads, which fit one
    # after another as a cluster's scheduler would allocate independent claims
    args = ["-f", str(ROOT / "examples" / "cluster"), "-f", str(ROOT / "examples" / "workloads"), "-o", "yaml"]
    default, sequential = invoke(args), invoke([*args, "--mode", "sequential"])
    assert default.exit_code == 0, default.output
    assert default.stdout == sequential.stdout
    assert invoke([*args, "--mode", "together"]).exit_code == 1


@pytest.mark.parametrize("version, code, devices", [
    ("1.36", 1, None), ("1.36.2", 1, None),
    ("1.36.3", 0, ["gpu-1", "gpu-2", "gpu-3", "gpu-0"]),  # the live v0.36.3 allocator's answer
])
def test_the_patch_release_of_kubernetes_version_selects_the_counter_rollback(version, code, devices):
    """--kubernetes-version keeps the user's spelling down to the allocator: 1.36.3 rolls back the counters of a
    device a constraint rejects (kubernetes/kubernetes#140663), "1.36" answers as 1.36.2 (conformance random/each-0165)."""
    result = invoke(["-f", str(CONFORMANCE / "random" / "each-0165" / "input.yaml"), "--mode", "each",
                     "--claims", "ml-infer/train-0", "--node", "gpu-node-02", "--kubernetes-version", version,
                     "-o", "json"])
    assert result.exit_code == code, result.output
    if devices is not None:
        [claim] = json.loads(result.stdout)["items"]
        assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == devices
