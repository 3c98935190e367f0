#!/usr/bin/env python3
"""The command line on a big cluster: 2,000 nodes of 8 GPUs and 1,000 pending pods, as a user would run it.

    python benchmarks/large_cluster.py [--nodes 2000] [--pods 1000] [--keep DIR] [--json]

The cluster (benchmarks/gen_cluster.py: the driver's attributes, two NVLink domains per node) and the pods are
written to one YAML file, then each command runs as `python -m gpudra …` in a fresh process (imports, YAML
loading and validation included), like a user's shell:

- load + validate: `gpudra validate -f cluster.yaml`
- allocate --mode each: every pending claim alone on every node
- schedule: every pending pod in queue order
- explain pod/X (fixes included): X is the last pod in the queue and does not fit, so the fix search runs

`--format json` writes one JSON List instead (what `kubectl get … -o json` gives); the table also shows each
command's CPU seconds, which say more than wall-clock seconds on a shared machine (they include the child process
that validates alongside `schedule` and `explain` on a machine with a second core, gpudra/cli/background.py).

The package's bytecode is compiled first, as `pip install` does: a checkout run with PYTHONDONTWRITEBYTECODE set
(as some sandboxes set it) would otherwise compile every module from source in every command, about 0.5 s each.

Targets (issue 11): load + validate <= 3 s, allocate --mode each <= 5 s, schedule <= 10 s, explain <= 5 s.
With --json the last line is {"load_validate_s": …, "allocate_each_s": …, "schedule_s": …, "explain_s": …}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from gen_cluster import CLASS_NAME, DRIVER, dump_json, dump_yaml, generate_cluster  # noqa: E402

TARGETS = {"load_validate_s": 3.0, "allocate_each_s": 5.0, "schedule_s": 10.0, "explain_s": 5.0}
# (GPUs, same NVLink domain) per pending pod, in turn: mostly single GPUs, some pairs and full nodes.
POD_SHAPES = [(1, False)] * 6 + [(2, True)] * 3 + [(8, False)]
UNFIT_POD = "too-big"  # asks for more GPUs on one NVLink domain than any node has: explain searches fixes


def claim(name: str, count: int, same_domain: bool) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": {"deviceClassName": CLASS_NAME,
                                                                          "count": count}}]}
    if same_domain:
        devices["constraints"] = [{"requests": ["gpus"], "matchAttribute": f"{DRIVER}/nvlinkDomain"}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"devices": devices}}


def pod(name: str, claim_name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"claims": [{"name": "gpus"}]}}],
                     "resourceClaims": [{"name": "gpus", "resourceClaimName": claim_name}]}}


def build_objects(nodes: int, pods: int) -> list[dict[str, Any]]:
    objects = generate_cluster(nodes, gpus=8, nvlink_domains=2)
    for index in range(pods - 1):
        count, same_domain = POD_SHAPES[index % len(POD_SHAPES)]
        objects.append(claim(f"claim-{index:04d}", count, same_domain))
        objects.append(pod(f"pod-{index:04d}", f"claim-{index:04d}"))
    objects.append(claim(f"{UNFIT_POD}-claim", 6, True))  # one NVLink domain has 4 GPUs
    objects.append(pod(UNFIT_POD, f"{UNFIT_POD}-claim"))
    return objects


def timed(command: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall-clock seconds, CPU seconds (user + system) of the command's process, and its result."""
    env = dict(os.environ, PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gpudra", *command], capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--keep", metavar="DIR", help="write the cluster here and keep it (default: a temp dir)")
    parser.add_argument("--format", choices=("yaml", "json"), default="yaml",
                        help="write the cluster as a YAML stream or as one JSON List (`kubectl get -o json`)")
    parser.add_argument("--json", action="store_true", help="print the seconds as one JSON object, last line")
    args = parser.parse_args()

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(HERE.parent / "gpudra")], check=True)
    directory = args.keep or tempfile.mkdtemp(prefix="gpudra-large-")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"cluster.{args.format}")
    with open(path, "w", encoding="utf-8") as stream:
        (dump_json if args.format == "json" else dump_yaml)(build_objects(args.nodes, args.pods), stream)
    size_mb = os.path.getsize(path) / 1e6

    runs = {
        "load_validate_s": ["validate", "-q", "-f", path],
        "allocate_each_s": ["allocate", "-f", path, "--mode", "each", "-o", "json"],
        "schedule_s": ["schedule", "-f", path, "-o", "table"],
        "explain_s": ["explain", "-f", path, f"pod/{UNFIT_POD}"],
    }
    seconds: dict[str, float] = {}
    cpu_seconds: dict[str, float] = {}
    failed = False
    for key, command in runs.items():
        elapsed, cpu, done = timed(command)
        seconds[key], cpu_seconds[key] = round(elapsed, 2), round(cpu, 2)
        if done.returncode not in (0, 1) or (not done.stdout and key != "load_validate_s"):
            failed = True
            print(f"{key}: `gpudra {' '.join(command)}` exited {done.returncode}:\n{done.stderr[-2000:]}",
                  file=sys.stderr)

    print(f"cluster: {args.nodes} nodes x 8 GPUs, {args.pods} pending pods, {size_mb:.1f} MB {args.format.upper()} "
          f"({path})")
    print(f"{'measure':<18} {'seconds':>8} {'cpu s':>8} {'target':>8}")
    for key, value in seconds.items():
        mark = "" if value <= TARGETS[key] else "  over target"
        print(f"{key:<18} {value:>8.2f} {cpu_seconds[key]:>8.2f} {TARGETS[key]:>8.1f}{mark}")
    if not args.keep:
        os.remove(path)
        os.rmdir(directory)
    if args.json:
        print(json.dumps(seconds))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
