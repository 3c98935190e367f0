"""The small traces the FGD artifact's placements are recorded on (`record_fgd_artifact.py`) and that
`tests/simulate/test_simulate_artifact.py` replays through gpudra. Plain data, no gpudra import: each trace is a node
list and a pod list in submission order, in the openb CSV columns.

Pods are named so that name order is submission order: the artifact, run without shuffling and without
creation times, submits the pods sorted by name (pkg/simulator/simulator.go SortClusterPods). Node names have
two dash-separated parts, so the artifact's "%04d-" prefix (its tie order) survives in its pod snapshot.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

OPENB = Path("/work/shared/data/openb")  # where the recorder reads openb from (override with --openb)

Node = dict[str, Any]  # sn, cpu_milli, memory_mib, gpu, model
Pod = dict[str, Any]  # name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as stream:
        return list(csv.DictReader(stream))


def _node(name: str, row: dict[str, str]) -> Node:
    return {"sn": name, "cpu_milli": int(row["cpu_milli"]), "memory_mib": int(row["memory_mib"]),
            "gpu": int(row["gpu"]), "model": row.get("model") or ""}


def _pod(index: int, row: dict[str, str]) -> Pod:
    return {"name": f"p{index:04d}", "cpu_milli": int(row["cpu_milli"]), "memory_mib": int(row["memory_mib"]),
            "num_gpu": int(row["num_gpu"]), "gpu_milli": int(row["gpu_milli"]),
            "gpu_spec": row.get("gpu_spec") or ""}


def _sample_nodes(openb: Path, wanted: dict[str, int], cpu_only: int, rng: random.Random) -> list[Node]:
    rows = _read(openb / "openb_node_list_all_node.csv")
    nodes: list[Node] = []
    for model, count in wanted.items():
        pool = [r for r in rows if r["model"] == model and int(r["gpu"]) > 0]
        nodes.extend(_node("", r) for r in rng.sample(pool, count))
    pool = [r for r in rows if int(r["gpu"]) == 0]
    nodes.extend(_node("", r) for r in rng.sample(pool, cpu_only))
    for index, node in enumerate(nodes):
        node["sn"] = f"node{index:02d}"
    return nodes


def _sample_pods(openb: Path, csv_name: str, count: int, rng: random.Random) -> list[Pod]:
    rows = rng.sample(_read(openb / csv_name), count)
    return [_pod(index, row) for index, row in enumerate(rows)]


def openb_mix(openb: Path) -> tuple[list[Node], list[Pod]]:
    """openb's default trace on a 19-node slice of its cluster (models G2, T4, P100, V100M16, G3 and two
    CPU-only nodes): shares, whole and multi-GPU tasks, CPU-only tasks; demand past capacity."""
    rng = random.Random(1)
    nodes = _sample_nodes(openb, {"G2": 6, "T4": 5, "P100": 3, "V100M16": 2, "G3": 1}, 2, rng)
    return nodes, _sample_pods(openb, "openb_pod_list_default.csv", 110, rng)


def openb_gpuspec(openb: Path) -> tuple[list[Node], list[Pod]]:
    """openb's gpuspec10 trace (tasks pinned to GPU models) on a slice with every model it names."""
    rng = random.Random(2)
    nodes = _sample_nodes(openb, {"G2": 4, "T4": 4, "P100": 3, "V100M16": 2, "V100M32": 2, "G3": 1}, 1, rng)
    rows = _read(openb / "openb_pod_list_gpuspec10.csv")
    pinned = [r for r in rows if r["gpu_spec"]]
    free = [r for r in rows if not r["gpu_spec"]]
    chosen = rng.sample(pinned, 45) + rng.sample(free, 55)
    rng.shuffle(chosen)
    return nodes, [_pod(index, row) for index, row in enumerate(chosen)]


def openb_multigpu(openb: Path) -> tuple[list[Node], list[Pod]]:
    """openb's multigpu30 trace (more 2-, 4- and 8-GPU tasks) on 8-GPU and 2-GPU nodes."""
    rng = random.Random(3)
    nodes = _sample_nodes(openb, {"G2": 5, "G3": 2, "T4": 3, "V100M32": 1}, 0, rng)
    return nodes, _sample_pods(openb, "openb_pod_list_multigpu30.csv", 90, rng)


def synthetic_ties(_openb: Path) -> tuple[list[Node], list[Pod]]:
    """Many equal nodes (ties everywhere) and few task shapes, so the typical tasks, FGD's integer score and
    every policy's tie order decide most placements."""
    nodes: list[Node] = []
    for index in range(6):
        nodes.append({"sn": f"node{index:02d}", "cpu_milli": 64000, "memory_mib": 262144, "gpu": 8, "model": "G2"})
    for index in range(6, 10):
        nodes.append({"sn": f"node{index:02d}", "cpu_milli": 16000, "memory_mib": 65536, "gpu": 2, "model": "T4"})
    nodes.append({"sn": "node10", "cpu_milli": 32000, "memory_mib": 131072, "gpu": 0, "model": ""})
    shapes = [  # (cpu, memory, gpus, milli per GPU, spec), weights below
        (4000, 8192, 1, 500, ""), (2000, 4096, 1, 250, ""), (6000, 12288, 1, 330, ""), (8000, 16384, 1, 1000, ""),
        (16000, 32768, 2, 1000, ""), (32000, 65536, 4, 1000, ""), (2000, 4096, 0, 0, ""),
        (4000, 8192, 1, 700, "T4"), (12000, 16384, 1, 1000, "T4|G2"), (3000, 4096, 1, 100, ""),
    ]
    weights = [30, 20, 12, 10, 5, 3, 8, 6, 4, 2]
    rng = random.Random(4)
    pods = []
    for index in range(100):
        cpu, memory, gpus, milli, spec = rng.choices(shapes, weights)[0]
        pods.append({"name": f"p{index:04d}", "cpu_milli": cpu, "memory_mib": memory, "num_gpu": gpus,
                     "gpu_milli": milli, "gpu_spec": spec})
    return nodes, pods


def synthetic_cut(_openb: Path) -> tuple[list[Node], list[Pod]]:
    """40 pods of four shapes, 16 + 12 + 10 + 2: the three most popular cover exactly 95% (38 pods), so the cut
    stops there and the 2-pod shape is no typical task; a cut that goes on until strictly past 95% counts it,
    and FGD's placements change."""
    nodes = [{"sn": f"node{index:02d}", "cpu_milli": 32000, "memory_mib": 131072, "gpu": 2, "model": "T4"}
             for index in range(3)]
    nodes.append({"sn": "node03", "cpu_milli": 64000, "memory_mib": 262144, "gpu": 4, "model": "G2"})
    shapes = [(6000, 8192, 1, 330)] * 16 + [(2000, 4096, 1, 250)] * 12 + [(4000, 8192, 1, 200)] * 10 + \
        [(4000, 8192, 1, 500)] * 2
    random.Random(5).shuffle(shapes)
    pods = [{"name": f"p{index:04d}", "cpu_milli": cpu, "memory_mib": memory, "num_gpu": gpus, "gpu_milli": milli,
             "gpu_spec": ""} for index, (cpu, memory, gpus, milli) in enumerate(shapes)]
    return nodes, pods


def synthetic_tight(_openb: Path) -> tuple[list[Node], list[Pod]]:
    """Nodes short of CPU or memory for their GPUs (GPUs stranded: FGD's lack-CPU kinds), 8-GPU and pinned
    multi-GPU tasks, CPU-only tasks big enough to fill a node's CPU or memory."""
    specs = [(16000, 65536, 8, "G2"), (16000, 65536, 8, "G2"), (96000, 393216, 8, "G3"), (8000, 32768, 4, "T4"),
             (8000, 32768, 4, "T4"), (32000, 49152, 2, "V100M32"), (64000, 131072, 0, ""), (24000, 98304, 2, "P100")]
    nodes = [{"sn": f"node{index:02d}", "cpu_milli": cpu, "memory_mib": memory, "gpu": gpus, "model": model}
             for index, (cpu, memory, gpus, model) in enumerate(specs)]
    shapes = [  # (cpu, memory, gpus, milli, spec), weights
        ((4000, 16384, 1, 500, ""), 14), ((2000, 8192, 1, 300, ""), 10), ((8000, 16384, 1, 1000, ""), 8),
        ((16000, 65536, 0, 0, ""), 4), ((4000, 40960, 0, 0, ""), 3), ((32000, 131072, 8, 1000, ""), 2),
        ((8000, 24576, 2, 1000, "T4|P100"), 3), ((6000, 12288, 1, 1000, "V100M32"), 3),
        ((12000, 49152, 4, 1000, ""), 2), ((1000, 2048, 1, 100, "G2|G3"), 5), ((4000, 16384, 0, 0, ""), 4),
    ]
    rng = random.Random(6)
    pods = []
    for index in range(80):
        cpu, memory, gpus, milli, spec = rng.choices([s for s, _ in shapes], [w for _, w in shapes])[0]
        pods.append({"name": f"p{index:04d}", "cpu_milli": cpu, "memory_mib": memory, "num_gpu": gpus,
                     "gpu_milli": milli, "gpu_spec": spec})
    return nodes, pods


def synthetic_float(_openb: Path) -> tuple[list[Node], list[Pod]]:
    """Many shapes with uneven counts on five G2 nodes, so the typical tasks' shares are uneven floats. When a
    CPU-only task takes a node's CPU, some typical tasks move from one kind of fragment to another (lack GPU ->
    lack both, CPU fits -> CPU short) with the same amount: the fragmentation is unchanged, but the artifact sums
    it per kind (FragAmount.Data, then FragAmountSumExceptQ3), so it can come out an ulp apart, and
    int(sigmoid(ΔF/1000)·100) is 49 instead of 50 (found by a search; drawn as the search drew it)."""
    rng = random.Random(30)
    nodes = []
    for index in range(5):
        gpus = rng.choice([2, 4, 8])
        nodes.append({"sn": f"node{index:02d}", "cpu_milli": rng.choice([32000, 48000, 64000, 96000]),
                      "memory_mib": 10**6, "gpu": gpus, "model": "G2"})
    shapes = []
    for _ in range(rng.randint(15, 30)):
        kind = rng.random()
        cpu = rng.choice(range(500, 30000, 500))
        if kind < 0.3:
            shapes.append((cpu, 0, 0))
        elif kind < 0.8:
            shapes.append((cpu, 1, rng.choice(range(50, 1000, 10))))
        else:
            shapes.append((cpu, rng.choice([1, 2, 4]), 1000))
    weights = [rng.randint(1, 12) for _ in shapes]
    pods = []
    for index in range(rng.randint(90, 160)):
        cpu, gpus, milli = rng.choices(shapes, weights)[0]
        pods.append({"name": f"p{index:04d}", "cpu_milli": cpu, "memory_mib": 1024, "num_gpu": gpus,
                     "gpu_milli": milli, "gpu_spec": ""})
    return nodes, pods


TRACES = {
    "openb-mix": openb_mix,
    "openb-gpuspec": openb_gpuspec,
    "openb-multigpu": openb_multigpu,
    "synthetic-ties": synthetic_ties,
    "synthetic-cut": synthetic_cut,
    "synthetic-tight": synthetic_tight,
    "synthetic-float": synthetic_float,
}
