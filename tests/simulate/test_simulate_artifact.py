"""`gpudra simulate` against the FGD paper's artifact (hkust-adsl/kubernetes-scheduler-simulator): per-pod
placements, node and GPU indices, on small traces.

tests/data/fgd_artifact/*.json hold what the artifact's own binary placed (built from its vendored sources and
run by tests/oracles/record_fgd_artifact.py: the paper's config, typical pods at 95% popularity, one score
plugin, its kube-scheduler's tie order). gpudra replays the same pods in the same order, with the artifact's
node order for ties, through its real scheduler and allocator, and must place every pod on the same node and
the same GPUs. tests/oracles/fgd_artifact.py (no gpudra import) re-derives the artifact's decisions from its Go
source and must reproduce the same records, so it can stand in for the binary in sim_direct_model.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gpudra.simulate.engine import start
from gpudra.simulate.trace import Task, Trace, TraceNode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "oracles"))

import fgd_artifact  # noqa: E402

RECORDS = Path(__file__).resolve().parent.parent / "data" / "fgd_artifact"
TRACES = sorted(path.stem for path in RECORDS.glob("*.json"))
POLICIES = ("fgd", "bestfit", "dotprod", "gpu-packing", "gpu-clustering")  # RandomScore is not reproducible


def load(trace: str) -> dict[str, Any]:
    return json.loads((RECORDS / f"{trace}.json").read_text())


def gpudra_trace(record: dict[str, Any]) -> Trace:
    nodes = [TraceNode(n["sn"], n["cpu_milli"], n["memory_mib"], n["gpu"], n["model"] if n["gpu"] else "")
             for n in record["nodes"]]
    tasks = [Task(p["name"], p["cpu_milli"], p["memory_mib"], p["num_gpu"], p["gpu_milli"],
                  tuple(m for m in p["gpu_spec"].split("|") if m)) for p in record["pods"]]
    return Trace("artifact", nodes, tasks)


def differences(expected: list[list[Any]], got: list[list[Any]]) -> list[str]:
    return [f"{want[0]}: artifact {want[1]} GPUs {want[2]}, got {have[1]} GPUs {have[2]}"
            for want, have in zip(expected, got) if want != have]


def test_every_trace_is_recorded_for_every_policy_and_fills_its_cluster():
    """The records are not trivial: each policy leaves pods unplaced (demand passes capacity) and the traces
    hold shares, whole and multi-GPU tasks, CPU-only tasks and tasks pinned to GPU models."""
    assert len(TRACES) >= 4
    kinds = set()
    for trace in TRACES:
        record = load(trace)
        assert set(record["placements"]) >= set(POLICIES)
        assert sorted(record["node_rank"].values()) == list(range(len(record["nodes"])))
        for policy in POLICIES:
            placed = record["placements"][policy]
            assert [row[0] for row in placed] == [p["name"] for p in record["pods"]]
            assert any(row[1] is None for row in placed) and any(row[1] for row in placed)
        for pod in record["pods"]:
            kinds.add("cpu" if not pod["num_gpu"] else "share" if pod["gpu_milli"] < 1000 else
                      "multi" if pod["num_gpu"] > 1 else "whole")
            kinds.add("pinned" if pod["gpu_spec"] else "free")
    assert kinds == {"cpu", "share", "whole", "multi", "pinned", "free"}


def replay_against_artifact(trace: str, policy: str, fast: bool = True) -> Any:
    """Replay the artifact's trace with its node order; asserts every pod lands where the artifact's binary put it
    (node and GPU indices). Returns the run."""
    record = load(trace)
    gpudra = gpudra_trace(record)
    run = start(gpudra, [(task.name, task) for task in gpudra.tasks], policy, 0, "dra",
                node_rank=record["node_rank"], fast=fast)
    got = []
    for task in gpudra.tasks:
        placement = run.schedule(task.name)
        got.append([placement.pod, placement.node, list(placement.gpus)])
    wrong = differences(record["placements"][policy], got)
    assert not wrong, f"{len(wrong)} of {len(got)} pods differ from the artifact; first: " + "; ".join(wrong[:5])
    return run


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize("policy", POLICIES)
def test_gpudra_places_every_pod_where_the_artifact_does(trace, policy):
    replay_against_artifact(trace, policy)


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize("policy", POLICIES)
def test_the_python_reimplementation_of_the_artifact_reproduces_its_records(trace, policy):
    record = load(trace)
    got = fgd_artifact.replay(record["nodes"], record["pods"], record["node_rank"], policy)
    wrong = differences(record["placements"][policy], got)
    assert not wrong, f"{len(wrong)} pods differ; first: " + "; ".join(wrong[:5])
