"""Mutation testing of gpudra's central packages with cosmic-ray: do the tests notice a planted bug?

    pip install '.[test,mutation]'
    python tools/mutation.py                                   # every group, every mutant (hours)
    python tools/mutation.py --group driver-health --group cluster-store
    python tools/mutation.py --sample 40 --budget-s 1800 --json   # a seeded sample, within half an hour
    python tools/mutation.py --group allocator --module 'gpudra/allocator/plan.py'   # some of a group's modules

cosmic-ray (an ecosystem tool, `cosmic_ray` on PyPI) finds the mutation points (its operators: comparisons,
boolean and arithmetic operators, numbers, `break`/`continue`, exceptions, …), applies one mutant at a time
and runs a test command. This script adds what this project needs around it: it works on a copy of the tree
(`git ls-files`), never on the checkout; each group of modules is tested by its own focused test files (all of
them would take hours per mutant on a 2-core machine); `--sample N` takes N mutants per group at random with
`--seed`, `--budget-s` stops starting new mutants when the time is spent. The tests must pass unmutated first.
Hypothesis runs its derandomised CI profile (CI=true), so a mutant's verdict is the same on every run.

Results go to one cosmic-ray session per group (`DIR/<group>.sqlite`, DIR from `--out`): `cr-report
DIR/driver-health.sqlite --show-output` lists each mutant with its diff. This script prints a table (killed,
survived, score = killed / (killed + survived)) and the surviving mutants' diffs; `--json` makes the last line
JSON. A timed-out test run counts as killed (cosmic-ray's rule: the mutant made the tests hang).
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from cosmic_ray.commands.init import init as cosmic_init
from cosmic_ray.mutating import mutate_and_test
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkItem, WorkResult

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Group:
    name: str
    modules: tuple[str, ...]  # paths or globs relative to the repository root
    tests: tuple[str, ...]


GROUPS = (
    Group("driver-health", ("gpudra/gpuplugin/health.py",), ("tests/gpuplugin/test_driver_health.py",)),
    Group("driver-config", ("gpudra/device_config.py",),
          ("tests/kubeletplugin/test_driver_hostile.py", "tests/gpuplugin/test_driver_state.py", "tests/gpuplugin/test_driver_sharing.py")),
    Group("driver-state", ("gpudra/gpuplugin/state.py",),
          ("tests/gpuplugin/test_driver_state.py", "tests/kubeletplugin/test_driver_hostile.py", "tests/gpuplugin/test_driver_crash.py",
           "tests/gpuplugin/test_driver_state_conflicts.py", "tests/gpuplugin/test_driver_checkpoint_robust.py",
           "tests/oracles/test_driver_state_upstream.py")),
    Group("cluster-store", ("gpudra/cluster/store.py", "gpudra/atomicfile.py"),
          ("tests/cluster/test_cluster_store.py", "tests/e2e/test_cluster_controlplane.py", "tests/gpuplugin/test_durability.py",
           "tests/oracles/test_cluster_store_upstream.py")),
    Group("allocator", ("gpudra/allocator/*.py",),
          ("tests/allocator/test_allocator_unit.py", "tests/allocator/test_allocator_variants.py", "tests/oracles/test_allocator_conformance.py",
           "tests/oracles/test_allocator_differential.py", "tests/allocator/test_allocator_taint_rules.py", "tests/bounds/test_large_inputs.py",
           "tests/allocator/test_allocator_caches.py", "tests/gpuplugin/test_release_layouts.py")),
    Group("scheduler", ("gpudra/scheduler/*.py",),
          ("tests/scheduler/test_scheduler_filters.py", "tests/scheduler/test_scheduler_claims.py", "tests/scheduler/test_scheduler_policies.py",
           "tests/scheduler/test_scheduler_workloads.py", "tests/scheduler/test_scheduler_queue_run.py")),
    Group("simulate", ("gpudra/simulate/*.py",),
          ("tests/simulate/test_simulate.py", "tests/simulate/test_simulate_manifests.py", "tests/simulate/test_simulate_artifact.py",
           "tests/simulate/test_simulate_artifact_scores.py")),
)
BY_NAME = {g.name: g for g in GROUPS}


@dataclass
class Tally:
    group: str
    mutants: int = 0  # the mutation points cosmic-ray found, less those in type annotations
    annotations: int = 0  # equivalent mutants in type annotations, skipped
    run: int = 0
    killed: int = 0
    survived: int = 0
    other: int = 0  # no mutation possible, or the worker failed: counted in neither
    baseline_s: float = 0.0
    survivors: list[str] = field(default_factory=list)

    @property
    def score(self) -> float | None:
        judged = self.killed + self.survived
        return None if judged == 0 else self.killed / judged


def copy_tree(destination: Path) -> None:
    """The files git knows (tracked, and untracked ones it does not ignore): no caches, no build output."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def test_command(group: Group, per_test_timeout_s: int) -> str:
    return (f"{sys.executable} -m pytest -x -q -p no:cacheprovider -n 0 --timeout={per_test_timeout_s} "
            + " ".join(group.tests))


def module_paths(group: Group, only: list[str] | None = None) -> list[Path]:
    """The group's modules; with `only` (globs), just those of them that match one."""
    paths: list[Path] = []
    for pattern in group.modules:
        paths.extend(sorted(p for p in Path(".").glob(pattern) if p.name != "__init__.py" or "*" not in pattern))
    return [p for p in paths if not only or any(fnmatch.fnmatch(str(p), o) for o in only)]


def annotation_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the module's type annotations are: with `from __future__ import annotations` they are never
    evaluated, so a mutant there (`str | None` -> `str - None`) is equivalent and not worth a test run."""
    spans = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        annotations = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            annotations.append(node.returns)
        elif isinstance(node, ast.arg):
            annotations.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for annotation in filter(None, annotations):
            spans.append(((annotation.lineno, annotation.col_offset),
                          (annotation.end_lineno or annotation.lineno, annotation.end_col_offset or 0)))
    return spans


def in_annotation(item: WorkItem, spans: dict[Path, list[tuple[tuple[int, int], tuple[int, int]]]]) -> bool:
    mutation = item.mutations[0]
    path = Path(mutation.module_path)
    if path not in spans:
        spans[path] = annotation_spans(path)
    start = tuple(mutation.start_pos)
    return any(low <= start < high for low, high in spans[path])


def describe(item: WorkItem, result: WorkResult) -> str:
    mutation = item.mutations[0]
    where = f"{mutation.module_path}:{mutation.start_pos[0]} ({mutation.definition_name or 'module'})"
    return f"{where} {mutation.operator_name} #{mutation.occurrence}\n{result.diff or ''}"


def run_group(group: Group, out: Path, args: argparse.Namespace, stop_at: float) -> Tally:
    tally = Tally(group.name)
    modules = module_paths(group, args.module)
    if not modules:
        raise SystemExit(f"{group.name}: no module matches --module {' '.join(args.module)}")
    per_test = 300
    started = time.monotonic()
    baseline = subprocess.run(test_command(group, per_test).split(), capture_output=True, text=True, check=False)
    tally.baseline_s = time.monotonic() - started
    if baseline.returncode != 0:
        raise SystemExit(f"{group.name}: the tests fail without any mutant:\n{baseline.stdout[-3000:]}")
    timeout = args.timeout_s or max(60.0, 3 * tally.baseline_s + 30)
    with use_db(str(out / f"{group.name}.sqlite"), WorkDB.Mode.create) as db:
        cosmic_init(modules, db, {})
        every = sorted(db.work_items, key=lambda w: (str(w.mutations[0].module_path), w.mutations[0].operator_name,
                                                     w.mutations[0].occurrence))
        spans: dict[Path, list[tuple[tuple[int, int], tuple[int, int]]]] = {}
        items = [w for w in every if not in_annotation(w, spans)]
        tally.annotations = len(every) - len(items)
        db.set_multiple_results([w.job_id for w in every if in_annotation(w, spans)],
                                WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
        tally.mutants = len(items)
        chosen = random.Random(f"{args.seed}:{group.name}").sample(items, min(args.sample, len(items))) \
            if args.sample else items
        chosen_ids = {w.job_id for w in chosen}
        db.set_multiple_results([w.job_id for w in items if w.job_id not in chosen_ids],
                                WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
        for item in chosen:
            if time.monotonic() >= stop_at:
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
                continue
            result = mutate_and_test(item.mutations, test_command(group, per_test), timeout)
            db.set_result(item.job_id, result)
            tally.run += 1
            if result.worker_outcome != WorkerOutcome.NORMAL or result.test_outcome == TestOutcome.INCOMPETENT:
                tally.other += 1
            elif result.test_outcome == TestOutcome.KILLED:
                tally.killed += 1
            else:
                tally.survived += 1
                tally.survivors.append(describe(item, result))
            print(f"{group.name}: {tally.run}/{len(chosen)} {result.test_outcome or result.worker_outcome}",
                  file=sys.stderr, flush=True)
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", action="append", choices=[g.name for g in GROUPS],
                        help="a group of modules with its tests (repeatable; default: all)")
    parser.add_argument("--module", action="append",
                        help="mutate only the group's modules matching this glob (repeatable), e.g. "
                             "'gpudra/allocator/plan.py'")
    parser.add_argument("--sample", type=int, default=0, help="mutants per group, chosen at random (0: all)")
    parser.add_argument("--seed", default="gpudra", help="seed of the sample")
    parser.add_argument("--budget-s", type=float, default=0, help="start no mutant after this many seconds")
    parser.add_argument("--timeout-s", type=float, default=0,
                        help="one mutant's test run (default: 3 x the unmutated run + 30 s)")
    parser.add_argument("--out", default="mutation-results", help="folder for the cosmic-ray sessions")
    parser.add_argument("--json", action="store_true", help="last line: the results as JSON")
    args = parser.parse_args(argv)
    groups = [BY_NAME[n] for n in args.group] if args.group else list(GROUPS)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stop_at = time.monotonic() + args.budget_s if args.budget_s else float("inf")
    tallies = []
    with tempfile.TemporaryDirectory(prefix="gpudra-mutation-") as work:
        copy_tree(Path(work))
        os.chdir(work)  # cosmic-ray mutates files in place: the copy's
        os.environ.update(PYTHONPATH=work, CI="true", PYTHONDONTWRITEBYTECODE="1")
        for group in groups:
            tallies.append(run_group(group, out, args, stop_at))
    print(f"{'group':<15} {'mutants':>7} {'run':>5} {'killed':>6} {'survived':>8} {'other':>5} {'score':>6}")
    for t in tallies:
        score = "-" if t.score is None else f"{t.score:.0%}"
        print(f"{t.group:<15} {t.mutants:>7} {t.run:>5} {t.killed:>6} {t.survived:>8} {t.other:>5} {score:>6}")
    for t in tallies:
        for survivor in t.survivors:
            print(f"\nSURVIVED [{t.group}] {survivor}")
    if args.json:
        print(json.dumps([{"group": t.group, "mutants": t.mutants, "annotations": t.annotations, "run": t.run, "killed": t.killed,
                           "survived": t.survived, "other": t.other, "score": t.score,
                           "baseline_s": round(t.baseline_s, 1)} for t in tallies]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
