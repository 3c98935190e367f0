"""The local cluster's phases, timed: bring-up, the article's manifests through the control loop, a burst of pods,
a pod deletion, teardown; and `gpudra demo` end to end as a user runs it.

    python benchmarks/cluster.py [--pods 16] [--json]

With --json the last line is a JSON object with the numbers (seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from gpudra.api.load import load_paths, load_text  # noqa: E402
from gpudra.cluster.apply import apply_document  # noqa: E402
from gpudra.cluster.controller import reconcile  # noqa: E402
from gpudra.cluster.layout import DEFAULT_NODES, ClusterConfig, ClusterDir, parse_nodes  # noqa: E402
from gpudra.cluster.nodes import down, up  # noqa: E402

BURST = """
apiVersion: v1
kind: Namespace
metadata: {name: bench}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: bench}
spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: burst, namespace: bench}
spec:
  replicas: %d
  selector: {matchLabels: {app: burst}}
  template:
    metadata: {labels: {app: burst}}
    spec:
      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
      containers: [{name: c, image: busybox, resources: {claims: [{name: gpu}]}}]
"""


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=16, help="replicas of the burst Deployment (one GPU each)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    base = tempfile.mkdtemp(prefix="gdb", dir="/tmp")
    os.environ["XDG_STATE_HOME"] = os.path.join(base, "xdg")
    cluster = ClusterDir(os.path.join(base, "c"))
    numbers: dict[str, float] = {}
    try:
        numbers["up"] = timed(lambda: up(cluster, ClusterConfig(nodes=parse_nodes(DEFAULT_NODES))))
        article = load_paths([os.path.join(REPO, "examples", "article-fixed")])

        def apply_article() -> None:
            for doc in article:
                apply_document(cluster.store, doc)
            reconcile(cluster)

        numbers["article"] = timed(apply_article)
        burst = load_text(BURST % args.pods, "burst.yaml")

        def apply_burst() -> None:
            for doc in burst:
                apply_document(cluster.store, doc)
            reconcile(cluster)

        numbers["burst"] = timed(apply_burst)
        running = [p for p in cluster.store.list("Pod", "bench") if (p.get("status") or {}).get("phase") == "Running"]
        victim = running[0]["metadata"]["name"]
        numbers["delete"] = timed(lambda: (cluster.store.delete("Pod", "bench", victim), reconcile(cluster)))
        numbers["down"] = timed(lambda: down(cluster))
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        numbers["demo"] = timed(lambda: subprocess.run([sys.executable, "-m", "gpudra", "demo"], cwd=base, env=env,
                                                       check=True, capture_output=True))
    finally:
        if cluster.exists():
            down(cluster)
        shutil.rmtree(base, ignore_errors=True)
    rows = [("cluster up (4 driver processes, registered, slices published)", numbers["up"]),
            ("apply the article's manifests (4 pods scheduled, prepared, started)", numbers["article"]),
            (f"a Deployment of {args.pods} one-GPU pods (created, scheduled, prepared, started)", numbers["burst"]),
            ("delete one pod (unprepare, deallocate, replacement started)", numbers["delete"]),
            ("cluster down", numbers["down"]),
            ("`gpudra demo` end to end (new process)", numbers["demo"])]
    width = max(len(name) for name, _ in rows)
    print(f"{'phase':<{width}}  seconds")
    for name, value in rows:
        print(f"{name:<{width}}  {value:7.2f}")
    if args.json:
        print(json.dumps({k: round(v, 3) for k, v in numbers.items()}))


if __name__ == "__main__":
    main()
