"""Issue 32: every row of `gpudra simulate` reads true on its own (time-slicing's served demand within capacity,
fragmentation over GPUs, oversubscription next to the served share, each mode's isolation said), `--path` chooses
the placement path and the estimate knows it, and `--levels` puts demand levels below 100% in the table."""

from __future__ import annotations

import json
import subprocess
import sys

from gpudra.simulate import run_experiment
from gpudra.simulate import budget
from gpudra.simulate.report import html_report
from gpudra.simulate.sweep import Experiment, TraceSource, summarize
from support.traces import NODES_CSV, PODS_CSV, small_trace


def _cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    return subprocess.run([sys.executable, "-m", "gpudra", "simulate", "--nodes", str(tmp_path / "nodes.csv"),
                           "--pods", str(tmp_path / "pods.csv"), "-j", "1", *args],
                          capture_output=True, text=True, timeout=300)


def _table(stdout: str) -> list[dict[str, str]]:
    header, *rows = (line.split() for line in stdout.splitlines())
    return [dict(zip(header, row)) for row in rows]


def test_time_slicing_serves_at_most_the_capacity_and_fragments_only_free_gpus():
    """Replicas isolate nothing, so demand piles past a GPU's capacity. The served share used to count that
    demand (served 100.0025%, UNSERVED-GPUS -0.2) and FGD's measure ran over the free replicas (1,737 fragmented
    GPUs of 194 free). Now: served within capacity, the excess apart, fragmentation at most the free GPUs."""
    trace = small_trace(2)
    result = run_experiment(trace, "kube", 7, "time-slicing", tune=3.0, replicas=4)
    series = result.series
    assert max(series["oversubscribed_ratio"]) > 0  # the case in question: demand beyond capacity was placed
    for served, fragmented in zip(series["served_ratio"], series["fragmented_gpus"]):
        assert 0 <= served <= 100
        free_gpus = trace.gpus * (1 - served / 100)  # what no pod's demand fills
        assert fragmented <= free_gpus + 1e-6
    [row] = summarize([result])
    assert row["unserved_gpus"] >= 0
    assert row["fragmented_gpus"] <= row["unserved_gpus"] + 0.1


def test_default_table_shows_oversubscription_next_to_served_and_the_report_says_what_each_mode_isolates(tmp_path):
    done = _cli(tmp_path, "--mode", "all", "--tune", "3", "--policy", "kube", "--out-dir", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split()
    assert header[header.index("SERVED%@100") + 1] == "OVERSUB%"
    sliced = next(row for row in _table(done.stdout) if row["MODE"] == "time-slicing")
    assert float(sliced["OVERSUB%"]) > 0 and float(sliced["SERVED%@100"]) < 100
    assert float(sliced["UNSERVED-GPUS"]) >= 0
    report = (tmp_path / "out" / "report.html").read_text()
    for words in ("time-slicing gives replicas that isolate neither memory nor compute",
                  "device-plugin gives each task whole GPUs", "dra gives each task its own GPUs"):
        assert words in report
    assert "Isolation" in html_report([], {})


def test_path_switch_chooses_the_path_and_refuses_fast_where_it_does_not_apply(tmp_path):
    runs = {}
    for path in ("auto", "fast", "reference"):
        done = _cli(tmp_path, "--policy", "fgd", "--path", path, "-o", "json")
        assert done.returncode == 0, done.stderr
        runs[path] = json.loads(done.stdout)
    assert runs["auto"]["path"] == runs["fast"]["path"] == "fast" and runs["reference"]["path"] == "reference"
    same = ("allocation_ratio", "served_ratio", "fragmented_gpus", "series")  # the same placements either way
    assert all(runs["fast"][k] == runs["reference"][k] for k in same)
    done = _cli(tmp_path, "--policy", "fgd", "--kubernetes-version", "1.36", "-o", "json")
    assert done.returncode == 0 and json.loads(done.stdout)["path"] == "reference"
    for args, words in ((("--path", "fast", "--mode", "device-plugin"), "DRA mode only"),
                        (("--path", "fast", "--policy", "kube"), "not on the fast path"),
                        (("--path", "fast", "--kubernetes-version", "1.36"), "--kubernetes-version"),
                        (("--path", "fast", "--policy", "fgd-online"), "not on the fast path"),
                        (("--path", "slow",), "Invalid value")):
        done = _cli(tmp_path, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert words in done.stderr and "Traceback" not in done.stderr


def test_the_estimate_knows_which_path_each_experiment_takes():
    """The sweep estimated 'about 3 s' for an experiment that --kubernetes-version forced onto the reference path
    (83 s): the estimate took the fast path's cost for every DRA experiment of a paper policy."""
    trace = small_trace(2)
    source = TraceSource("small")
    fast = Experiment(source, "fgd", 42)
    for slow in (Experiment(source, "fgd", 42, path="reference"),
                 Experiment(source, "fgd", 42, kubernetes_version="1.34")):
        ratio = budget.predicted_cpu_seconds(trace, slow) / budget.predicted_cpu_seconds(trace, fast)
        assert ratio > 10
        assert abs(ratio - budget.REFERENCE_DRA_CPU_MS["fgd"] / budget.PER_TASK_CPU_MS["dra"]["fgd"]) < 1e-9


def test_levels_put_the_served_share_below_100_in_the_table(tmp_path):
    done = _cli(tmp_path, "--policies", "fgd,bestfit", "--seeds", "2", "--levels", "80,50", "--tune", "1.5")
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split()
    assert header[header.index("SERVED%@50"):header.index("SERVED%@50") + 3] == ["SERVED%@50", "SERVED%@80",
                                                                                  "SERVED%@100"]
    results = [json.loads(line) for line in _cli(tmp_path, "--policies", "fgd,bestfit", "--seeds", "2", "--tune",
                                                  "1.5", "-o", "json").stdout.splitlines()]
    for row in _table(done.stdout):
        mine = [r for r in results if r["policy"] == row["POLICY"]]
        for level in (50, 80):
            values = [dict(zip(r["series"]["arrived_percent"], r["series"]["served_ratio"]))[level] for r in mine]
            assert float(row[f"SERVED%@{level}"]) == round(sum(values) / len(values), 2)
    wide = _cli(tmp_path, "--policy", "fgd", "-o", "wide")
    assert {"SERVED%@70", "SERVED%@80", "SERVED%@90"} <= set(wide.stdout.splitlines()[0].split())
    csv = _cli(tmp_path, "--policy", "fgd", "--levels", "60", "-o", "csv")
    assert "served_ratio_at_60" in csv.stdout.splitlines()[0].split(",")
    for bad in ("abc", "0", "70,x"):
        done = _cli(tmp_path, "--levels", bad)
        assert done.returncode == 2 and "--levels" in done.stderr and "Traceback" not in done.stderr
