#!/usr/bin/env python3
"""Loading and validating one large `List` manifest (issue 12: a 58 MB List used to take 55 s and be refused).

    python benchmarks/load.py [--megabytes 50] [--format json|yaml] [--json]

Writes a `kind: List` of ResourceSlices (the bundled cluster's slices, renamed) of about the given size
to a temporary file, then times `gpudra validate -f FILE` end to end in a subprocess (CPU and wall
clock) and `load_paths` alone in this process. With --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gpudra.api.load import load_paths  # noqa: E402


def big_list(megabytes: float) -> list[dict]:
    seed = [d.obj for d in load_paths([os.path.join(ROOT, "examples", "cluster", "resourceslices.yaml")])]
    unit = len(json.dumps(seed))
    items = []
    for copy in range(max(1, int(megabytes * 1e6 / unit))):
        for obj in seed:
            item = json.loads(json.dumps(obj))
            item["metadata"]["name"] = f"{obj['metadata']['name']}-{copy}"
            item["spec"]["pool"]["name"] = f"{obj['spec']['pool']['name']}-{copy}"
            items.append(item)
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=50.0)
    parser.add_argument("--format", choices=("json", "yaml"), default="json")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    document = {"apiVersion": "v1", "kind": "List", "items": big_list(args.megabytes)}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"list.{args.format}")
        with open(path, "w", encoding="utf-8") as handle:
            if args.format == "json":
                json.dump(document, handle)
            else:
                import yaml

                yaml.dump(document, handle, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
        size = os.path.getsize(path)
        start, cpu = time.perf_counter(), time.process_time()
        documents = load_paths([path])
        load_s, load_cpu = time.perf_counter() - start, time.process_time() - cpu
        env = dict(os.environ, PYTHONPATH=ROOT)
        start = time.perf_counter()
        before = os.times()
        done = subprocess.run([sys.executable, "-m", "gpudra", "validate", "-f", path], env=env,
                              capture_output=True, text=True)
        after = os.times()
        validate_s = time.perf_counter() - start
        validate_cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    rows = [("file", f"{size / 1e6:.1f} MB {args.format}, {len(documents)} objects"),
            ("load_paths", f"{load_s:.2f} s wall, {load_cpu:.2f} s CPU"),
            ("gpudra validate", f"{validate_s:.2f} s wall, {validate_cpu:.2f} s CPU, exit {done.returncode}")]
    for name, value in rows:
        print(f"{name:<16} {value}")
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
    if args.json:
        print(json.dumps({"megabytes": round(size / 1e6, 1), "format": args.format, "objects": len(documents),
                          "load_s": round(load_s, 2), "load_cpu_s": round(load_cpu, 2),
                          "validate_s": round(validate_s, 2), "validate_cpu_s": round(validate_cpu, 2),
                          "validate_exit": done.returncode}))


if __name__ == "__main__":
    main()
