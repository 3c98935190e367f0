"""The paper policies' score arithmetic and the fragmentation ratio, where the recorded artifact traces
(tests/simulate/test_simulate_artifact.py) do not reach: cosmic-ray mutants that survived them (README, "Mutation
testing"). Expected answers come from the FGD artifact (hkust-adsl/kubernetes-scheduler-simulator): its own Go
test table, its Go score code worked by hand in int64 arithmetic (written out in each docstring), its analysis
script, and tests/oracles/fgd_artifact.py (no gpudra import; checked against the artifact binary's records).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from gpudra.simulate import run_experiment
from gpudra.simulate.engine import start
from gpudra.simulate.fgd import NodeRes
from gpudra.simulate.policies import GpuPackingPolicy
from gpudra.simulate.trace import Task, Trace, TraceNode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "oracles"))

import fgd_artifact  # noqa: E402

PAPER_POLICIES = ("fgd", "bestfit", "dotprod", "gpu-packing", "gpu-clustering")


def node(name: str, gpus: int, model: str, cpu: int = 64000) -> dict[str, Any]:
    return {"sn": name, "cpu_milli": cpu, "memory_mib": 262144, "gpu": gpus, "model": model if gpus else ""}


def pod(name: str, milli: int, spec: str = "", count: int = 1, cpu: int = 1000) -> dict[str, Any]:
    return {"name": name, "cpu_milli": cpu, "memory_mib": 1024, "num_gpu": count, "gpu_milli": milli,
            "gpu_spec": spec}


def gpudra_placements(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], rank: dict[str, int], policy: str,
                      fast: bool = True) -> list[list[Any]]:
    trace = Trace("crafted", [TraceNode(n["sn"], n["cpu_milli"], n["memory_mib"], n["gpu"], n["model"]) for n in nodes],
                  [Task(p["name"], p["cpu_milli"], p["memory_mib"], p["num_gpu"], p["gpu_milli"],
                        tuple(m for m in p["gpu_spec"].split("|") if m)) for p in pods])
    run = start(trace, [(t.name, t) for t in trace.tasks], policy, 0, "dra", node_rank=rank, fast=fast)
    out = []
    for task in trace.tasks:
        placement = run.schedule(task.name)
        out.append([placement.pod, placement.node, list(placement.gpus)])
    return out


# ----- GpuPacking: pkg/simulator/plugin/gpu_packing_score.go ----------------------------------------------------

@pytest.mark.parametrize("gpu_left, milli, count, expected", [
    # the artifact's own table, pkg/simulator/plugin/gpu_packing_score_test.go (TestGpuPackingScorePlugin_Score)
    ((200, 1000, 1000, 500), 1000, 2, 48),  # case-2: two fully free GPUs on a used node: 100/2 - 2
    ((1000,) * 4, 1000, 2, 29),  # case-3: an idle 4-GPU node: 100/3 - 4
    ((1000,) * 8, 1000, 2, 25),  # case-3: an idle 8-GPU node: 100/3 - 8
    ((200, 1000, 1000, 500), 200, 2, 93),  # case-1: GPUs 0 and 3: 200*100/1000 + 500*100/1000 = 70; 100 - 70/10
    # case-1 where Go's int64 division truncates: 250*100/1000 = 25, 100 - 25/10 = 100 - 2 = 98 (not 97.5)
    ((250, 1000), 200, 1, 98),
    # 10 milli left: 10*100/1000 = 1, 100 - 1/10 = 100 (a shift or a product of the ratio would change it)
    ((10, 1000), 10, 1, 100),
])
def test_gpu_packing_scores_are_the_artifacts_own_test_table(gpu_left, milli, count, expected):
    task = Task("p", 100, 0, count, milli)
    score, _gpus = GpuPackingPolicy(None).node_score(NodeRes(1000, 96000, gpu_left, "1080"), task, "n")
    assert score == expected and isinstance(score, int)


@pytest.mark.parametrize("fast", [True, False])
def test_gpu_packing_ties_within_one_tenth_of_free_milli_go_to_the_node_order(fast):
    """Node a (rank 0) keeps 750 milli on its used GPU, node b (rank 1) 720. For a 100-milli share the artifact
    scores both 100 - (75 or 72)/10 = 93 in int64, a tie that selectHost gives to the lower rank: a. A score kept
    fractional (92.5 against 92.8) would send it to b."""
    nodes = [node("a", 2, "T4"), node("b", 2, "V100")]
    pods = [pod("p0", 250, "T4"), pod("p1", 280, "V100"), pod("p2", 100)]
    rank = {"a": 0, "b": 1}
    expected = [["p0", "a", [0]], ["p1", "b", [0]], ["p2", "a", [0]]]
    assert fgd_artifact.replay(nodes, pods, rank, "gpu-packing") == expected
    assert gpudra_placements(nodes, pods, rank, "gpu-packing", fast) == expected


# ----- GpuClustering: pkg/simulator/plugin/gpu_clustering_score.go ----------------------------------------------

@pytest.mark.parametrize("fast", [True, False])
def test_gpu_clustering_fill_is_integer_so_nearly_equal_nodes_tie(fast):
    """Both 8-GPU nodes hold one share pod (affinity {share} only). For another share the artifact scores
    MaxNodeScore/4*(MaxSpecGpu - left)/MaxSpecGpu + MaxNodeScore*3/4 in int64: a (7,900 milli left) 25*100/8000
    + 75 = 75, b (7,800 left) 25*200/8000 + 75 = 75; the tie goes to rank 0, a. A fractional fill (75.3 against
    75.6) would send it to b."""
    nodes = [node("a", 8, "T4"), node("b", 8, "V100")]
    pods = [pod("p0", 100, "T4"), pod("p1", 200, "V100"), pod("p2", 100)]
    rank = {"a": 0, "b": 1}
    expected = [["p0", "a", [0]], ["p1", "b", [0]], ["p2", "a", [0]]]
    assert fgd_artifact.replay(nodes, pods, rank, "gpu-clustering") == expected
    assert gpudra_placements(nodes, pods, rank, "gpu-clustering", fast) == expected


# ----- small random clusters against the oracle -----------------------------------------------------------------

def random_cluster(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, int]]:
    rng = random.Random(seed)
    nodes = []
    for i in range(rng.randint(2, 5)):
        gpus = rng.choice([0, 2, 4, 8])
        nodes.append(node(f"n{i}", gpus, rng.choice(["T4", "V100", "P100"]), rng.choice([32000, 64000, 96000])))
    pods = []
    for j in range(rng.randint(10, 40)):
        count, milli = rng.choice([(0, 0), (1, rng.choice([100, 200, 250, 300, 500, 550, 700])), (1, 1000),
                                   (rng.choice([2, 4, 8]), 1000)])
        pods.append(pod(f"p{j:04d}", milli, rng.choice(["", "", "T4", "V100|P100"]) if count else "", count,
                        rng.choice([1000, 4000, 8000, 16000])))
    order = list(range(len(nodes)))
    rng.shuffle(order)
    return nodes, pods, {n["sn"]: order[i] for i, n in enumerate(nodes)}


@pytest.mark.parametrize("policy", PAPER_POLICIES)
def test_small_random_clusters_place_every_pod_as_the_artifact_oracle_does(policy):
    """200 seeded clusters of 2-5 nodes and 10-40 pods (shares, whole, multi-GPU, CPU-only, pinned models, node
    orders): every placement equals tests/oracles/fgd_artifact.py's. Near ties that the recorded traces seldom
    meet are common here."""
    for seed in range(200):
        nodes, pods, rank = random_cluster(seed)
        expected = fgd_artifact.replay(nodes, pods, rank, policy)
        assert gpudra_placements(nodes, pods, rank, policy) == expected, f"seed {seed}"


# ----- the fragmentation ratio: experiments/analysis/merge_frag_ratio_discrete.py ---------------------------------

def test_fragmentation_ratio_is_fragmented_milli_over_idle_milli():
    """The artifact's analysis reads the ratio as `frag_milli = idle_milli * frag_ratio`. One node with two GPUs,
    every task a 600-milli share (so the only typical task): the first share leaves GPU 0 with 400 milli, which
    no typical task fits, GPU 1 whole: 400 of 1,400 idle milli fragmented, 28.57% (at 30% arrived demand). The
    second share leaves 400 on each GPU: 800 of 800, 100% (at 60%, and at 100% after a third share that fits
    nowhere)."""
    trace = Trace("two-gpus", [TraceNode("n", 64000, 262144, 2, "T4")],
                  [Task(f"t{i}", 1000, 1024, 1, 600) for i in range(4)])
    result = run_experiment(trace, "fgd", seed=1, tune=1.3)
    series = dict(zip(result.series["arrived_percent"], result.series["fragmentation_ratio"]))
    assert series[30] == pytest.approx(100 * 400 / 1400, abs=1e-4)
    assert series[60] == pytest.approx(100.0)
    assert result.fragmentation_ratio == pytest.approx(100.0)
    assert result.fragmented_gpus == pytest.approx(0.8)
