"""Record the FGD artifact's own per-pod placements on small traces (tests/data/fgd_artifact/<trace>.json).

The artifact is hkust-adsl/kubernetes-scheduler-simulator (Weng et al., "Beware of Fragmentation", USENIX
ATC'23), built from its vendored sources with a stock Go toolchain (Debian's golang-go 1.19 builds it offline):

    git clone https://github.com/hkust-adsl/kubernetes-scheduler-simulator ksim && cd ksim
    GOFLAGS=-mod=vendor GOPROXY=off go build -o bin/simon ./cmd

    python tests/oracles/record_fgd_artifact.py --ksim PATH/TO/ksim [--commit SHA] [--openb DIR]

For each trace (`fgd_traces.py`) and each paper policy, it writes the trace as the artifact's YAML (what its
data/pod_csv_to_yaml.py and node YAML hold), a cluster config and a scheduler config built as its
scripts/generate_config_and_run.py builds them (score plugin weight 1000, gpuSelMethod "best" except FGD's own
and random, typicalPodsConfig: CPU pods included, popularity 95, step 1), no shuffling and no workload tuning,
so pods arrive in name order; runs `bin/simon apply`; and reads the pod snapshot it exports: each pod's node
(with the artifact's "%04d-" tie-order prefix) and GPU indices (the alibabacloud.com/gpu-index annotation).
Nothing here imports gpudra: the JSON is the artifact's answer, not ours.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fgd_traces  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "data" / "fgd_artifact"
SEED = 42  # the artifact's workload-tuning seed; it seeds the node-name permutation (the tie order)
# policy name in gpudra -> (artifact score plugin, gpuSelMethod) as generate_run_scripts.py runs the paper's
# policies; RandomScore is left out: its picks come from Go's math/rand and differ between runs of the binary
POLICIES = {
    "dotprod": ("DotProductScore", "best"),  # dimExtMethod merge: no GPU opinion of its own, so "best"
    "gpu-clustering": ("GpuClusteringScore", "best"),
    "gpu-packing": ("GpuPackingScore", "best"),
    "bestfit": ("BestFitScore", "best"),
    "fgd": ("FGDScore", "FGDScore"),
}
GPU_MILLI = "alibabacloud.com/gpu-milli"
GPU_COUNT = "alibabacloud.com/gpu-count"
GPU_MODEL = "alibabacloud.com/gpu-card-model"
GPU_INDEX = "alibabacloud.com/gpu-index"


def node_yaml(node: dict[str, Any]) -> dict[str, Any]:
    allocatable: dict[str, Any] = {"cpu": f"{node['cpu_milli']}m", "memory": f"{node['memory_mib']}Mi",
                                   "pods": "1001"}
    labels = {"beta.kubernetes.io/os": "linux", "kubernetes.io/hostname": node["sn"], "kubernetes.io/os": "linux"}
    if node["gpu"]:
        allocatable[GPU_COUNT] = str(node["gpu"])
        allocatable[GPU_MILLI] = str(node["gpu"] * 1000)
        labels[GPU_MODEL] = node["model"]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node["sn"], "labels": labels},
            "status": {"allocatable": allocatable, "capacity": dict(allocatable)}}


def pod_yaml(pod: dict[str, Any]) -> dict[str, Any]:
    """As the artifact's data/pod_csv_to_yaml.py writes a row (no creation/deletion time annotations)."""
    requests = {"cpu": f"{pod['cpu_milli']}m", "memory": f"{pod['memory_mib']}Mi"}
    metadata: dict[str, Any] = {"name": pod["name"], "namespace": "paib-gpu"}
    if pod["num_gpu"]:
        milli = pod["gpu_milli"]
        annotations = {GPU_MILLI: str(milli) if 0 < milli <= 1000 else "1000" if milli > 1000 else "0",
                       GPU_COUNT: str(pod["num_gpu"])}
        if pod["gpu_spec"]:
            annotations[GPU_MODEL] = pod["gpu_spec"]
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [{"name": "main", "image": "tensorflow:latest",
                                     "resources": {"requests": requests, "limits": dict(requests)}}],
                     "restartPolicy": "OnFailure", "dnsPolicy": "Default"}}


def cluster_config(trace_dir: Path, snapshot: Path) -> dict[str, Any]:
    return {"apiVersion": "simon/v1alpha1", "kind": "Config", "metadata": {"name": "simon-openb-config"},
            "spec": {"cluster": {"customConfig": str(trace_dir)},
                     "customConfig": {
                         "shufflePod": False,
                         "exportConfig": {"podSnapshotYamlFilePrefix": str(snapshot),
                                          "nodeSnapshotCSVFilePrefix": str(snapshot)},
                         "workloadInflationConfig": {"ratio": 1, "seed": 233},
                         "workloadTuningConfig": {"ratio": 0, "seed": SEED},
                         "descheduleConfig": {"ratio": 0},
                         "typicalPodsConfig": {"isInvolvedCpuPods": True, "podPopularityThreshold": 95,
                                               "podIncreaseStep": 1, "gpuResWeight": 0}}}}


def scheduler_config(plugin: str, gpu_sel: str) -> dict[str, Any]:
    disabled = ["RandomScore", "DotProductScore", "GpuClusteringScore", "GpuPackingScore", "BestFitScore",
                "FGDScore", "ImageLocality", "NodeAffinity", "PodTopologySpread", "TaintToleration",
                "NodeResourcesBalancedAllocation", "InterPodAffinity", "NodeResourcesLeastAllocated",
                "NodePreferAvoidPods"]
    dim_ext = "merge" if plugin == "DotProductScore" else "share"
    plugins: dict[str, Any] = {
        "filter": {"enabled": [{"name": "Open-Gpu-Share"}]},
        "preScore": {"disabled": [{"name": "RandomScore"}],
                     "enabled": [{"name": "RandomScore"}] if plugin == "RandomScore" else []},
        "score": {"disabled": [{"name": name} for name in disabled], "enabled": [{"name": plugin, "weight": 1000}]},
        "reserve": {"enabled": [{"name": "Open-Gpu-Share"}]},
        "bind": {"disabled": [{"name": "DefaultBinder"}], "enabled": [{"name": "Simon"}]},
    }
    args = {"dimExtMethod": dim_ext, "normMethod": "max"}
    return {"apiVersion": "kubescheduler.config.k8s.io/v1beta1", "kind": "KubeSchedulerConfiguration",
            "percentageOfNodesToScore": 100,
            "profiles": [{"schedulerName": "simon-scheduler", "plugins": plugins,
                          "pluginConfig": [{"name": plugin, "args": args},
                                           {"name": "Open-Gpu-Share", "args": dict(args, gpuSelMethod=gpu_sel)}]}]}


def run_artifact(ksim: Path, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], policy: str,
                 work: Path) -> tuple[dict[str, int], list[list[Any]]]:
    """(node -> tie-order rank, [pod, node or None, GPU indices] in submission order)."""
    plugin, gpu_sel = POLICIES[policy]
    trace_dir = work / "trace"
    trace_dir.mkdir(exist_ok=True)
    (trace_dir / "nodes.yaml").write_text(yaml.safe_dump_all([node_yaml(n) for n in nodes]))
    (trace_dir / "pods.yaml").write_text(yaml.safe_dump_all([pod_yaml(p) for p in pods]))
    snapshot = work / f"snapshot-{policy}"
    cc, sc = work / f"cc-{policy}.yaml", work / f"sc-{policy}.yaml"
    cc.write_text(yaml.safe_dump(cluster_config(trace_dir, snapshot)))
    sc.write_text(yaml.safe_dump(scheduler_config(plugin, gpu_sel)))
    done = subprocess.run([str(ksim / "bin" / "simon"), "apply", "--extended-resources", "gpu", "-f", str(cc),
                           "--default-scheduler-config", str(sc)], cwd=ksim, capture_output=True, text=True)
    (work / f"log-{policy}.txt").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise SystemExit(f"simon failed for {policy}: {(done.stdout + done.stderr)[-3000:]}")
    placed: dict[str, tuple[str | None, list[int]]] = {}
    rank: dict[str, int] = {}
    with (snapshot / "InitSchedule" / "node-snapshot.csv").open(newline="") as stream:
        for row in csv.DictReader(stream):  # every node, named "%04d-<name>": the tie order
            prefix, node = row["name"].split("-", 1)
            rank[node] = int(prefix)
    for doc in yaml.safe_load_all((snapshot / "InitSchedule" / "pod-snapshot.yaml").read_text()):
        if not doc:
            continue
        name = doc["metadata"]["name"]
        host = (doc["spec"].get("nodeSelector") or {}).get("kubernetes.io/hostname")
        annotations = doc["metadata"].get("annotations") or {}
        if host is None or name in placed:
            placed.setdefault(name, (None, []))
            continue
        prefix, node = host.split("-", 1)
        if rank.get(node) != int(prefix):
            raise SystemExit(f"{policy}: pod {name} on {host}, not in the node snapshot")
        index = annotations.get(GPU_INDEX, "")
        placed[name] = (node, [int(i) for i in index.split("-")] if index else [])
    missing = [p["name"] for p in pods if p["name"] not in placed]
    if missing:
        raise SystemExit(f"{policy}: pods missing from the snapshot: {missing[:5]}")
    return rank, [[p["name"], placed[p["name"]][0], placed[p["name"]][1]] for p in pods]


def dump(record: dict[str, Any]) -> str:
    """JSON with one line per node, pod and placement (diffs stay readable)."""
    lines = ["{"]
    items = list(record.items())
    for position, (key, value) in enumerate(items):
        comma = "," if position < len(items) - 1 else ""
        if isinstance(value, list):
            rows = [json.dumps(row) for row in value]
            lines.append(f" {json.dumps(key)}: [\n  " + ",\n  ".join(rows) + f"\n ]{comma}")
        elif key == "placements":
            policies = [f"  {json.dumps(policy)}: [\n   " + ",\n   ".join(json.dumps(row) for row in rows) + "\n  ]"
                        for policy, rows in value.items()]
            lines.append(f" {json.dumps(key)}: {{\n" + ",\n".join(policies) + f"\n }}{comma}")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}{comma}")
    return "\n".join(lines) + "\n}\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ksim", type=Path, required=True, help="the artifact's checkout with bin/simon built")
    parser.add_argument("--commit", default="", help="the artifact commit the binary was built from")
    parser.add_argument("--openb", type=Path, default=fgd_traces.OPENB)
    parser.add_argument("--traces", default=",".join(fgd_traces.TRACES))
    parser.add_argument("--keep", type=Path, help="keep the artifact's inputs and logs here")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for trace in args.traces.split(","):
        nodes, pods = fgd_traces.TRACES[trace](args.openb)
        record: dict[str, Any] = {
            "source": "hkust-adsl/kubernetes-scheduler-simulator" + (f"@{args.commit}" if args.commit else ""),
            "recorded_by": "tests/oracles/record_fgd_artifact.py (bin/simon apply, pod snapshot)",
            "config": {"seed": SEED, "shufflePod": False, "tune": 0, "podPopularityThreshold": 95,
                       "podIncreaseStep": 1, "isInvolvedCpuPods": True},
            "nodes": nodes, "pods": pods, "node_rank": None, "placements": {}}
        with tempfile.TemporaryDirectory() as tmp:
            work = args.keep / trace if args.keep else Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            for policy in POLICIES:
                rank, placements = run_artifact(args.ksim, nodes, pods, policy, work)
                if record["node_rank"] is None:
                    record["node_rank"] = rank
                elif record["node_rank"] != rank:
                    raise SystemExit(f"{trace}: the node order differs between policies")
                record["placements"][policy] = placements
                print(f"{trace:<16}{policy:<16}{sum(1 for p in placements if p[1]):>4}/{len(pods)} placed",
                      flush=True)
        (OUT / f"{trace}.json").write_text(dump(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
