"""The online variants (`fgd-online`, `fgd-reserve-online`): task popularity estimated from the tasks arrived so
far (`gpudra/simulate/popularity.py`) instead of the whole trace (the FGD artifact's oracle)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.simulate import run_experiment
from gpudra.simulate.engine import start, tuned_workload
from gpudra.simulate.fgd import typical_tasks
from gpudra.simulate.popularity import REFRESH_INTERVAL, OnlinePopularity
from gpudra.simulate.trace import MILLI, Task, Trace, TraceNode

from support.traces import small_trace

ONLINE = {"fgd": "fgd-online", "fgd-reserve": "fgd-reserve-online"}

shapes = st.tuples(st.sampled_from([0, 1000, 4000, 8000]), st.sampled_from([(0, 0), (1, 250), (1, 500), (1, 1000),
                                                                              (2, 1000), (8, 1000)]),
                   st.sampled_from([(), ("T4",), ("G2", "P100")]))


def _tasks(drawn: list) -> list[Task]:
    return [Task(f"t-{i}", cpu, 1024, count, milli, models if count else ())
            for i, (cpu, (count, milli), models) in enumerate(drawn)]


@settings(max_examples=60, deadline=None)
@given(st.lists(shapes, min_size=1, max_size=300), st.randoms(use_true_random=False), st.integers(1, 40))
def test_the_estimate_after_every_task_is_the_whole_traces_popularity(drawn, rng, interval):
    """Whatever the order and the refresh interval: once every task has arrived, the estimate is the offline
    popularity (the artifact's GetTypicalPods rule, `typical_tasks`), float for float; and every refresh took the
    typical tasks of exactly the tasks arrived until then."""
    tasks = _tasks(drawn)
    order = tasks[:]
    rng.shuffle(order)
    popularity = OnlinePopularity(interval)
    for arrived, task in enumerate(order, start=1):
        version = popularity.version
        popularity.observe(task)
        if popularity.version != version:
            assert popularity.typical == typical_tasks(order[:arrived])
    assert popularity.current() == typical_tasks(tasks)


def test_refreshes_double_until_the_interval_then_follow_it():
    popularity = OnlinePopularity()
    refreshed = []
    for arrived in range(1, 3 * REFRESH_INTERVAL + 1):
        version = popularity.version
        popularity.observe(Task(f"t-{arrived}", 1000, 1024, 1, 500))
        if popularity.version != version:
            refreshed.append(arrived)
    doubling = [2 ** k for k in range(REFRESH_INTERVAL.bit_length()) if 2 ** k <= REFRESH_INTERVAL]
    assert refreshed == doubling + [2 * REFRESH_INTERVAL, 3 * REFRESH_INTERVAL]
    with pytest.raises(ValueError):
        OnlinePopularity(0)


@pytest.mark.parametrize("policy", sorted(ONLINE))
def test_online_equals_offline_when_the_task_mix_never_changes(policy):
    """One task shape: every estimate is the whole trace's popularity, so every placement is the offline one
    (the estimates are refreshed, the measures rebuilt and the cached scores recomputed all along)."""
    trace = small_trace()
    constant = Trace("constant", trace.nodes, [Task(f"t-{i}", 4000, 8192, 1, 500) for i in range(20)])
    offline = run_experiment(constant, policy, seed=5, tune=1.6)
    online = run_experiment(constant, ONLINE[policy], seed=5, tune=1.6)
    assert online.tasks >= 64  # estimates taken again at 1, 2, 4, …, 64 tasks at least
    # offline: fast path; online: reference
    assert replace(online.timeless(), policy="", path=None) == replace(offline.timeless(), policy="", path=None)


@pytest.mark.parametrize("policy", sorted(ONLINE))
def test_a_first_task_unlike_the_trace_misleads_the_online_estimate(policy):
    """The trace is 20 two-GPU tasks and one half-GPU share, which comes first. Offline, the typical task is the
    two-GPU one (95% of the trace), so FGD puts the share on the one-GPU node and keeps the two-GPU node whole for
    the tasks to come. Online, the share is the only task seen: every node scores the same for it, the node order
    puts it on the two-GPU node, and the two-GPU task that follows fits nowhere."""
    nodes = [TraceNode("n-two", 64000, 262144, 2, "G2"), TraceNode("n-one", 64000, 262144, 1, "G2")]
    share = Task("share", 1000, 1024, 1, 500)
    pairs = [Task(f"pair-{i}", 1000, 1024, 2, MILLI) for i in range(20)]
    trace = Trace("misleading", nodes, [share] + pairs)
    workload = [(t.name, t) for t in [share] + pairs[:1]]
    placed = {}
    for name in (policy, ONLINE[policy]):
        run = start(trace, workload, name, 1, "dra", node_rank={"n-two": 0, "n-one": 1})
        placed[name] = [run.schedule(pod).node for pod, _ in workload]
    assert placed[policy] == ["n-one", "n-two"]
    assert placed[ONLINE[policy]] == ["n-two", None]


@pytest.mark.parametrize("indexed", [True, False])
@pytest.mark.parametrize("policy", sorted(ONLINE.values()))
def test_cached_scores_are_the_fresh_ones_across_estimates(policy, indexed):
    """The scheduler caches each node's scoring parts with its verdict until the node changes; a new popularity
    estimate must not leave them stale. At every pod, every feasible node's parts as the policy compares them
    equal those of a policy built afresh (empty memos) on the current estimate."""
    trace = small_trace(4)
    workload = tuned_workload(trace.tasks, trace.gpus * MILLI, 1.6, random.Random(3))
    run = start(trace, workload, policy, 3, "dra", random.Random(3))
    run.scheduler.indexed = indexed
    policy_object = run.scheduler.policy
    compared = {"nodes": 0, "stale": 0, "versions": set()}
    combine = policy_object.combine

    def checked(scheduler, info, feasible):
        version = run.context.popularity.version
        compared["stale"] += sum(1 for e in feasible if e.parts[-1] != version)
        scores = combine(scheduler, info, feasible)
        fresh = type(policy_object)(run.context)
        for evaluation in feasible:
            assert evaluation.parts == fresh.node_parts(scheduler, info, evaluation)
        compared["nodes"] += len(feasible)
        compared["versions"].add(version)
        return scores

    policy_object.combine = checked
    placed = [run.schedule(name).node for name, _ in workload]
    assert sum(1 for node in placed if node) > len(placed) // 2
    assert len(compared["versions"]) >= 5 and compared["stale"] > 0 and compared["nodes"] > len(workload)


def test_the_online_variants_run_by_name_but_not_in_all(tmp_path):
    from support.traces import NODES_CSV, PODS_CSV
    from test_simulate import _cli

    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    done = _cli("--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                "--policies", "fgd-reserve-online,fgd-online", "-j", "1", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert [line.split('"policy":"')[1].split('"')[0] for line in done.stdout.splitlines()] == [
        "fgd-reserve-online", "fgd-online"]
    from gpudra.simulate.engine import ALL_POLICIES

    assert not set(ONLINE.values()) & set(ALL_POLICIES)


def test_the_comparison_tool_reads_simulate_json_and_counts_seeds(tmp_path):
    """tools/frag_vs_fgd.py (the README's table of allocated share by arrived demand): means over the seeds
    every policy ran, differences against FGD and the seeds on which a policy allocated at least FGD's."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    trace = small_trace()
    results = [run_experiment(trace, policy, seed=seed, tune=1.6) for policy in ("fgd", "fgd-reserve-online")
               for seed in (1, 2)]
    extra = replace(results[0], seed=9)  # FGD alone on seed 9: in FGD's mean, not in the paired comparison
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in results + [extra]))
    tool = Path(__file__).resolve().parent.parent.parent / "tools" / "frag_vs_fgd.py"
    done = subprocess.run([sys.executable, str(tool), str(tmp_path / "runs.jsonl"), "--levels", "50,100", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout.splitlines()[-1])["small"]

    def at(policy, seed, level):
        run = next(r for r in results if r.policy == policy and r.seed == seed)
        return run.series["allocation_ratio"][list(run.series["arrived_percent"]).index(level)]

    assert [row["level"] for row in rows] == [50, 100]
    for row in rows:
        fgd = [at("fgd", s, row["level"]) for s in (1, 2)]
        online = [at("fgd-reserve-online", s, row["level"]) for s in (1, 2)]
        assert row["seeds"] == [1, 2, 9] and row["fgd"] == pytest.approx((sum(fgd) + fgd[0]) / 3)
        assert row["fgd-reserve-online"]["seeds"] == [1, 2]
        assert row["fgd-reserve-online"]["mean"] == pytest.approx(sum(online) / 2)
        assert row["fgd-reserve-online"]["difference"] == pytest.approx((sum(online) - sum(fgd)) / 2)
        assert row["fgd-reserve-online"]["at_least_fgd"] == sum(o >= f for o, f in zip(online, fgd))
    table = subprocess.run([sys.executable, str(tool), str(tmp_path / "runs.jsonl"), "--per-trace"],
                           capture_output=True, text=True, timeout=60)
    assert table.returncode == 0 and "| 100% |" in table.stdout and "`fgd-reserve-online` %" in table.stdout
    summary = subprocess.run([sys.executable, str(tool), str(tmp_path / "runs.jsonl")], capture_output=True,
                             text=True, timeout=60)
    difference = rows[-1]["fgd-reserve-online"]
    cell = f"{difference['difference']:+.2f}".replace("-", "−") + f" ({difference['at_least_fgd']}/2) |"
    assert summary.returncode == 0 and summary.stdout.splitlines()[-1].endswith(cell)
    (tmp_path / "bad.jsonl").write_text("{}\n")
    bad = subprocess.run([sys.executable, str(tool), str(tmp_path / "bad.jsonl")], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "bad.jsonl:1" in bad.stderr and "Traceback" not in bad.stderr
