"""`gpudra simulate`: traces, the driver's consumable-capacity sharing mode, FGD's fragmentation, experiments
through the real scheduler/allocator, outputs and the HTML report."""

from __future__ import annotations

import io
import math
import json
import random
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.gpuplugin.slices import build_resource_slices, device_classes
from gpudra.scheduler import Scheduler
from gpudra.controllers import ManagedCluster
from gpudra.simulate import bundled_trace, run_experiment
from gpudra.simulate.engine import SimulationError, per_percent, tuned_workload
from gpudra.simulate.fgd import Fragmentation, NodeRes, TypicalTask, fgd_choice, typical_tasks
from gpudra.simulate.objects import node_inventory, pod_objects
from gpudra.simulate.report import write_outputs
from gpudra.simulate.trace import Task, Trace, TraceError, TraceNode, load_trace, read_nodes, read_tasks
from support.sim_direct_model import experiment as artifact_experiment
from support.traces import NODES_CSV, PODS_CSV, small_trace  # noqa: F401


# ----- traces ---------------------------------------------------------------------------------------------
def test_bundled_default_trace_is_the_papers_cluster():
    trace = bundled_trace("default")
    assert len(trace.nodes) == 1213 and trace.gpus == 6212 and len(trace.tasks) == 8152
    assert sum(1 for t in trace.tasks if t.shares_gpu) == 3078


def test_trace_errors_name_file_and_line():
    with pytest.raises(TraceError, match=r"pods:3: num_gpu"):
        read_tasks(io.StringIO("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,500\nb,1,1,-1,0\n"), "pods")
    with pytest.raises(TraceError, match="missing column"):
        read_nodes(io.StringIO("sn,cpu_milli\nx,1\n"))


NODES_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
TASKS_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"


@pytest.mark.parametrize("cpu", ["inf", "1e400", "-inf"])
def test_a_number_too_big_for_an_integer_is_a_trace_error(cpu):
    with pytest.raises(TraceError, match=r"nodes:2: cpu_milli: .* is not a (whole )?number"):
        read_nodes(io.StringIO(f"{NODES_HEADER}n-0,{cpu},1024,1,T4\n"), "nodes")


def test_fractions_and_negative_amounts_are_trace_errors():
    with pytest.raises(TraceError, match=r"pods:2: num_gpu: '1.5' is not a whole number"):
        read_tasks(io.StringIO(f"{TASKS_HEADER}a,1000,1024,1.5,1000\n"), "pods")
    with pytest.raises(TraceError, match=r"pods:2: cpu_milli: must not be negative"):
        read_tasks(io.StringIO(f"{TASKS_HEADER}a,-5,1024,1,1000\n"), "pods")
    with pytest.raises(TraceError, match=r"nodes:2: memory_mib: must not be negative"):
        read_nodes(io.StringIO(f"{NODES_HEADER}n-0,1000,-1,1,T4\n"), "nodes")
    assert read_tasks(io.StringIO(f"{TASKS_HEADER}a,1000.0,1024,1,500\n"))[0].cpu_milli == 1000  # "1000.0" is whole


def test_a_task_list_without_tasks_or_with_a_name_twice_is_a_trace_error():
    with pytest.raises(TraceError, match=r"pods: no tasks"):
        read_tasks(io.StringIO(TASKS_HEADER), "pods")
    with pytest.raises(TraceError, match=r"pods:3: name: 'a' is already the name of the task on line 2"):
        read_tasks(io.StringIO(f"{TASKS_HEADER}a,1000,1024,1,500\na,1000,1024,1,500\n"), "pods")


def test_a_spreadsheet_export_with_a_byte_order_mark_and_crlf_reads_like_plain_csv(tmp_path):
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_bytes(b"\xef\xbb\xbf" + NODES_CSV.replace("\n", "\r\n").encode())  # Excel's "CSV UTF-8"
    pods.write_bytes(b"\xef\xbb\xbf" + PODS_CSV.replace("\n", "\r\n").encode())
    trace = load_trace(str(nodes), str(pods))
    assert trace.nodes == read_nodes(io.StringIO(NODES_CSV)) and trace.tasks == read_tasks(io.StringIO(PODS_CSV))


def test_unreadable_trace_files_are_trace_errors_in_the_loaders_words(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES_CSV)
    binary = tmp_path / "pods.csv"
    binary.write_bytes(b"\xff\xfe\x00name")
    with pytest.raises(TraceError, match=r"pods.csv: not a UTF-8 text file"):
        load_trace(str(nodes), str(binary))
    with pytest.raises(TraceError, match=r"absent.csv: no such file or directory"):
        load_trace(str(nodes), str(tmp_path / "absent.csv"))


@settings(max_examples=40)
@given(st.lists(st.tuples(st.integers(0, 128000), st.integers(0, 10**6), st.sampled_from([0, 1, 2, 4, 8]),
                          st.integers(1, 1000), st.lists(st.sampled_from(["G1", "T4", "V100M16"]), max_size=2)),
                min_size=1, max_size=20))
def test_task_csv_round_trip(rows):
    lines = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    expected = []
    for i, (cpu, memory, count, milli, models) in enumerate(rows):
        milli = 1000 if count > 1 else milli
        lines.append(f"t{i},{cpu},{memory},{count},{milli if count else 0},{'|'.join(models)}")
        expected.append(Task(f"t{i}", cpu, memory, count, milli if count else 0, tuple(models)))
    assert read_tasks(io.StringIO("\n".join(lines) + "\n")) == expected


# ----- the driver's sharing mode through the scheduler and allocator -----------------------------------------
def _cluster_with(tasks: list[Task], gpus: int = 1) -> tuple[ManagedCluster, list[str]]:
    node = TraceNode("node-a", 64000, 262144, gpus, "G2")
    objects = [c for c in device_classes() if c["metadata"]["name"] == "gpu.nvidia.com"]
    objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
                    "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}})
    objects += build_resource_slices(node_inventory(node), "node-a", sharing="consumable")
    keys = []
    for i, task in enumerate(tasks):
        objects += pod_objects(task, f"pod-{i}", "dra")
        keys.append(f"sim/pod-{i}")
    return ManagedCluster(objects), keys


def test_consumable_sharing_slices_publish_shareable_gpus():
    slices = build_resource_slices(node_inventory(TraceNode("n", 1, 1, 2, "G1")), "n", sharing="consumable")
    devices = slices[0]["spec"]["devices"]
    assert [d["allowMultipleAllocations"] for d in devices] == [True, True]
    assert devices[0]["capacity"]["compute"]["value"] == "1000"
    plain = build_resource_slices(node_inventory(TraceNode("n", 1, 1, 2, "G1")), "n")
    assert "allowMultipleAllocations" not in plain[0]["spec"]["devices"][0]
    with pytest.raises(ValueError, match="sharing"):
        build_resource_slices(node_inventory(TraceNode("n", 1, 1, 1, "G1")), "n", sharing="timeslice")


def test_shares_fill_one_gpu_and_whole_gpus_stay_exclusive():
    share = Task("s", 1000, 1024, 1, 400)
    whole = Task("w", 1000, 1024, 1, 1000)
    cluster, keys = _cluster_with([share, share, share, whole])
    scheduler = Scheduler(cluster)
    results = [scheduler.schedule_pod(key) for key in keys]
    assert [r.scheduled for r in results] == [True, True, False, False]  # 400m + 400m fit, 1200m does not
    claim = cluster.claims["sim/pod-0-gpu"]
    result = claim["status"]["allocation"]["devices"]["results"][0]
    assert result["device"] == "gpu-0" and result["consumedCapacity"]["compute"] == "400"
    cluster, keys = _cluster_with([whole, share], gpus=1)
    scheduler = Scheduler(cluster)
    assert [scheduler.schedule_pod(k).scheduled for k in keys] == [True, False]


def test_gpu_spec_selects_the_product_name():
    cluster, keys = _cluster_with([Task("t", 1000, 1024, 1, 1000, ("T4",)), Task("u", 1000, 1024, 1, 1000, ("G2",))])
    scheduler = Scheduler(cluster)
    assert [scheduler.schedule_pod(k).scheduled for k in keys] == [False, True]


# ----- FGD's measure -----------------------------------------------------------------------------------------
def test_fragmentation_counts_gpus_too_small_for_typical_tasks():
    typical = [TypicalTask(1000, 500, 1, (), 0.5), TypicalTask(1000, 0, 0, (), 0.5)]
    frag = Fragmentation(typical)
    # a 500m task fits; the 300m GPU is too small for it; the CPU-only task can use no GPU milli at all
    assert frag.amount(8000, (1000, 300), "G1") == pytest.approx(0.5 * 300 + 0.5 * 1300)
    # no CPU left: nothing fits, all free milli is fragmented
    assert frag.amount(0, (1000, 300), "G1") == pytest.approx(1300)
    # 500m on the idle GPU leaves (500, 600): both still fit a 500m task (F = 0.5·1100); on the 600m GPU it
    # leaves (1000, 100): the 100m are lost (F = 0.5·100 + 0.5·1100); F before = 0.5·1600
    score, gpus = fgd_choice(frag, NodeRes(8000, 8000, (1000, 600), "G1"), 1000, 500, 1)
    assert gpus == (0,) and score == int(100 / (1 + math.exp(-(800 - 550) / 1000)))


def test_cpu_aware_fragmentation_counts_gpus_the_free_cpu_cannot_serve():
    """gpudra's measure: 8 free GPUs next to 4 free cores serve one copy of a 4-core, 1-GPU task, so 7 GPUs are
    fragmented for it (the paper's measure counts none); with the cores for every GPU both agree."""
    typical = [TypicalTask(4000, 1000, 1, (), 1.0)]
    paper, aware = Fragmentation(typical), Fragmentation(typical, cpu_aware=True)
    assert paper.amount(4000, (1000,) * 8, "G2") == 0
    assert aware.amount(4000, (1000,) * 8, "G2") == pytest.approx(7000)
    assert aware.amount(32000, (1000,) * 8, "G2") == paper.amount(32000, (1000,) * 8, "G2") == 0
    # shares: the GPUs with the most free milli are served first; a GPU the task does not fit stays fragmented
    share = [TypicalTask(2000, 400, 1, (), 1.0)]
    assert Fragmentation(share, cpu_aware=True).amount(4000, (300, 500, 1000, 1000), "G2") == pytest.approx(800)
    assert Fragmentation(share).amount(4000, (300, 500, 1000, 1000), "G2") == pytest.approx(300)
    # multi-GPU tasks: copies of its GPU count
    pair = [TypicalTask(8000, 1000, 2, (), 1.0)]
    assert Fragmentation(pair, cpu_aware=True).amount(8000, (1000,) * 4, "G2") == pytest.approx(2000)


def test_typical_tasks_cover_95_percent_and_sum_to_one():
    trace = bundled_trace("default")
    typical = typical_tasks(trace.tasks)
    assert sum(t.weight for t in typical) == pytest.approx(1.0)
    counts = {}
    for task in trace.tasks:
        counts[task.resource_key] = counts.get(task.resource_key, 0) + 1
    covered = sum(counts[(t.cpu, t.milli, t.count, t.models)] for t in typical)
    assert covered >= 0.95 * len(trace.tasks) > covered - min(counts.values()) - max(counts.values())


def test_tuning_reaches_the_target_demand_and_is_seeded():
    trace = small_trace()
    capacity = trace.gpus * 1000
    first = tuned_workload(trace.tasks, capacity, 1.3, random.Random(7))
    again = tuned_workload(trace.tasks, capacity, 1.3, random.Random(7))
    other = tuned_workload(trace.tasks, capacity, 1.3, random.Random(8))
    assert first == again and first != other
    demand = sum(t.total_gpu_milli for _, t in first)
    assert 1.3 * capacity - 8000 <= demand <= 1.3 * capacity + 8000
    assert {t.name for _, t in first} >= {t.name for t in trace.tasks}  # the originals come first, all of them


def test_a_percent_no_task_lands_on_keeps_the_state_of_the_last_task_before_it():
    # a small cluster: one task moves the arrived demand by several percent, so no task lands on 100%
    series = per_percent([(30.0, 10.0), (60.0, 20.0), (90.0, 30.0), (120.0, 40.0)], 120)
    assert series[100] == 30.0 and series[75] == 20.0 and series[120] == 40.0
    assert series[60] == 20.0 and 10 not in series  # nothing arrived yet at 10%


def test_a_small_trace_still_reports_its_allocation_at_100_percent():
    trace = small_trace(copies=1)  # 15 GPUs: the arrived demand jumps from about 96% to 101%
    result = run_experiment(trace, "fgd", seed=42)
    assert 0 < result.allocation_ratio <= 100
    index = result.series["arrived_percent"].index(100)
    assert result.allocation_ratio == result.series["allocation_ratio"][index]
    assert result.unallocated_gpus == pytest.approx(trace.gpus * (1 - result.allocation_ratio / 100), abs=0.01)
    assert result.fragmented_gpus is not None and result.served_ratio is not None


# ----- experiments through the real scheduler --------------------------------------------------------------
POLICIES = ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd", "kube", "binpack",
            "fgd-reserve")


@pytest.mark.parametrize("policy", POLICIES)
def test_experiment_is_deterministic_and_consistent(policy):
    trace = small_trace()
    first = run_experiment(trace, policy, seed=3, tune=2.0)
    again = run_experiment(trace, policy, seed=3, tune=2.0)
    assert first.timeless() == again.timeless()
    assert first.scheduled + first.unscheduled == first.tasks
    assert 0 < first.allocation_ratio <= 100
    assert first.unallocated_gpus == pytest.approx(trace.gpus * (1 - first.allocation_ratio / 100), abs=0.01)


@pytest.mark.parametrize("policy", ["kube", "binpack", "bestfit"])
def test_a_replay_does_not_depend_on_the_machines_speed(policy, monkeypatch):
    """A machine so slow (or so loaded) that every clock reading is 100 s after the one before: kube-scheduler's
    10 s Filter timeout would fail every device search there, but a replay is the same on any machine."""
    import time

    trace = small_trace()
    normal = run_experiment(trace, policy, seed=5, tune=2.0, path="reference")
    readings = iter(range(0, 10**12, 100))
    monkeypatch.setattr(time, "monotonic", lambda: float(next(readings)))
    slow = run_experiment(trace, policy, seed=5, tune=2.0, path="reference")
    monkeypatch.undo()
    assert slow.timeless() == normal.timeless() and normal.scheduled > 0


def test_allocations_match_the_tasks_and_fit_the_gpus():
    from gpudra.simulate.engine import start

    trace = small_trace()
    workload = tuned_workload(trace.tasks, trace.gpus * 1000, 2.0, random.Random(1))
    run = start(trace, workload, "fgd", 1, "dra")
    demand = 0
    for name, task in workload:
        result = run.scheduler.schedule_pod(f"sim/{name}")
        if result.scheduled:
            run.refresh(result.node)
            demand += task.total_gpu_milli
            if task.num_gpu:
                devices = run.cluster.claims[f"sim/{name}-gpu"]["status"]["allocation"]["devices"]["results"]
                assert len(devices) == task.num_gpu and {d["pool"] for d in devices} == {result.node}
    assert run.used == demand  # what the allocator holds is exactly the demand placed
    for node in trace.nodes:
        assert all(0 <= left <= 1000 for left in run.context.node_res(node.name).gpu_left)


def test_device_plugin_mode_gives_whole_gpus():
    trace = small_trace()
    result = run_experiment(trace, "bestfit", seed=1, mode="device-plugin", tune=1.3)
    dra = run_experiment(trace, "bestfit", seed=1, mode="dra", tune=1.3)
    # a share costs a whole GPU: the device plugin serves no more demand than DRA
    assert result.served_ratio <= dra.served_ratio
    assert result.allocation_ratio >= result.served_ratio


def test_events_method_follows_creation_and_deletion():
    result = run_experiment(small_trace(), "fgd", seed=1, method="events")
    series = result.series
    assert series["time_s"] == sorted(series["time_s"])
    assert series["allocation_ratio"][-1] == 0.0  # every task was deleted in the end
    assert result.peak_allocation_ratio > 0


# ----- CLI, outputs, report -----------------------------------------------------------------------------------
def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpudra", "simulate", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_cli_json_has_the_fields_and_usage_errors_exit_2(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    done = _cli("--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                "--policies", "fgd,bestfit", "--seeds", "2", "-j", "1", "-o", "json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["policy"], r["seed"]) for r in lines] == [("fgd", 42), ("fgd", 43), ("bestfit", 42), ("bestfit", 43)]
    for r in lines:
        assert {"trace", "mode", "policy", "seed", "gpus", "allocation_ratio", "unallocated_gpus", "series"} <= set(r)
        assert r["gpus"] == 15 and "\x1b" not in done.stderr
    assert _cli("--trace", "nope").returncode == 2
    (tmp_path / "bad.csv").write_text("name,cpu_milli\n")
    bad = _cli("--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "bad.csv"))
    assert bad.returncode == 2 and "missing column" in bad.stderr and "Traceback" not in bad.stderr
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00")
    for pods, message in (("binary.csv", "not a UTF-8 text file"), ("absent.csv", "no such file or directory"),
                          ("-", "not stdin")):
        bad = _cli("--nodes", str(tmp_path / "nodes.csv"), "--pods", pods, cwd=tmp_path)
        assert bad.returncode == 2 and bad.stderr.startswith("error: ") and message in bad.stderr, bad.stderr


@pytest.mark.parametrize("tune", ["inf", "nan", "-1", "1e308"])
def test_a_tune_that_never_ends_or_is_negative_is_a_usage_error(tmp_path, tune):
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    done = subprocess.run([sys.executable, "-m", "gpudra", "simulate", "--nodes", str(tmp_path / "nodes.csv"),
                           "--pods", str(tmp_path / "pods.csv"), "--tune", tune], capture_output=True, text=True,
                          timeout=60)  # before the fix, inf and nan sampled tasks forever
    assert done.returncode == 2 and done.stderr.startswith("error: --tune: "), done.stderr
    with pytest.raises(ValueError, match="tune"):
        run_experiment(small_trace(copies=1), "fgd", tune=float(tune))


def test_an_out_dir_that_cannot_be_written_is_refused_before_the_run(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    (tmp_path / "file").write_text("")
    done = _cli("--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                "--out-dir", str(tmp_path / "file" / "out"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: --out-dir {tmp_path / 'file' / 'out'}: "), done.stderr
    assert done.stdout == ""  # refused before any experiment ran


def test_a_run_that_never_reaches_100_percent_says_why_its_columns_are_empty(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    done = _cli("--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--tune", "0.5")
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()
    cells = dict(zip(header.split(), row.split()))
    assert cells["SERVED%@100"] == "-" and cells["UNSERVED-GPUS"] == "-" and cells["RESERVED%"] == "-"
    assert "note: pods dra fgd: the arrived GPU demand reached " in done.stderr and "--tune 0.5" in done.stderr
    events = _cli("--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--method", "events")
    assert events.returncode == 0 and "--method events" in events.stderr and "peak" in events.stderr, events.stderr


def test_simulate_takes_every_output_format_of_the_cli_contract(tmp_path):
    import yaml

    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    args = ("--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--seeds", "2", "-j", "1")
    as_json = [json.loads(line) for line in _cli(*args, "-o", "json").stdout.splitlines()]
    as_yaml = list(yaml.safe_load_all(_cli(*args, "-o", "yaml").stdout))
    for result in as_json + as_yaml:
        result.pop("seconds"), result.pop("cpu_seconds")
    assert as_yaml == as_json and len(as_json) == 2
    table, wide = (_cli(*args, "-o", output).stdout.splitlines() for output in ("table", "wide"))
    assert set(table[0].split()) < set(wide[0].split())
    assert {"TASKS", "SCHEDULED", "CPU-SECONDS"} <= set(wide[0].split())
    cells = dict(zip(wide[0].split(), wide[1].split()))
    assert float(cells["TASKS"]) == sum(r["tasks"] for r in as_json) / 2
    assert float(cells["SCHEDULED"]) == sum(r["scheduled"] for r in as_json) / 2


def test_the_events_method_writes_its_series_over_time_and_plots_them(tmp_path):
    import csv as csv_module

    results = [run_experiment(small_trace(), policy, seed=1, method="events") for policy in ("fgd", "bestfit")]
    written = {path.rsplit("/", 1)[1] for path in write_outputs(results, str(tmp_path))}
    assert "small-over-time.png" in written and "events.csv" in written
    rows = list(csv_module.DictReader(open(tmp_path / "events.csv", encoding="utf-8")))
    assert len(rows) == sum(len(r.series["time_s"]) for r in results)
    first = results[0].series
    mine = [row for row in rows if row["policy"] == "fgd"]
    assert [int(row["time_s"]) for row in mine] == first["time_s"]
    assert [float(row["allocation_ratio"]) for row in mine] == first["allocation_ratio"]
    assert 'data-plot="small-over-time.png"' in (tmp_path / "report.html").read_text()


def test_tune_with_the_events_method_is_a_usage_error(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    done = _cli("--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--method", "events",
                "--tune", "2")  # events replay the trace's own times: a tune would be ignored without a word
    assert done.returncode == 2 and done.stderr.startswith("error: --tune applies to --method tune"), done.stderr


def test_a_policy_named_twice_runs_once(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    done = _cli("--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                "--policies", "fgd,bestfit", "--policy", "fgd", "-o", "json")
    assert done.returncode == 0, done.stderr
    # twice would be two identical experiments, summarised as two "seeds" with a standard deviation of 0
    assert [json.loads(line)["policy"] for line in done.stdout.splitlines()] == ["fgd", "bestfit"]


def test_html_report_shows_every_plot_in_headless_chromium(tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (CI installs Debian's chromium)")
    trace = small_trace()
    results = [run_experiment(trace, policy, seed=1, mode=mode, tune=1.5)
               for mode in ("dra", "device-plugin") for policy in ("fgd", "bestfit")]
    written = write_outputs(results, str(tmp_path))
    pngs = [p for p in written if p.endswith(".png")]
    assert {p.rsplit("/", 1)[1] for p in pngs} == {"small-allocation.png", "small-fragmentation.png",
                                                    "small-models.png", "small-device-plugin-vs-dra.png"}
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                           "--dump-dom", f"file://{tmp_path}/report.html"], capture_output=True, text=True,
                          timeout=120)
    assert f'data-plots-shown="{len(pngs)}/{len(pngs)}"' in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize("policy", ["fgd", "bestfit", "gpu-packing", "gpu-clustering", "dotprod"])
def test_tuned_experiment_places_every_task_as_the_artifact_would(policy):
    """A tune experiment (tasks sampled with replacement, the seed's tie order) through the real scheduler and
    allocator, pod by pod, node and GPU indices, against the FGD artifact's decisions on the same workload
    (tests/oracles/fgd_artifact.py, which imports nothing from gpudra and reproduces the artifact binary's
    recorded placements: tests/simulate/test_simulate_artifact.py). The small trace pins tasks to T4 and to G2|P100."""
    from gpudra.simulate.engine import start

    trace = small_trace()
    expected = artifact_experiment(trace, policy, 5, 1.6)["placements"]
    tuning = random.Random(5)
    workload = tuned_workload(trace.tasks, trace.gpus * 1000, 1.6, tuning)
    run = start(trace, workload, policy, 5, "dra", tuning)
    got = []
    for name, _ in workload:
        placement = run.schedule(name)
        got.append([name, placement.node, list(placement.gpus)])
    assert len(got) > len(trace.tasks) and any(p[1] is None for p in got)  # tuned past capacity
    assert got == expected


def test_ties_follow_one_random_node_order_per_seed():
    """The artifact's selectHost takes the smallest of the "%04d-"-prefixed node names: with every node idle
    and equal, FGD puts every task on the same node until it is full, and which node that is depends on the
    seed."""
    nodes = [TraceNode(f"n-{i}", 64000, 262144, 8, "G2") for i in range(12)]
    trace = Trace("ties", nodes, [Task(f"t-{i}", 1000, 1024, 1, 1000) for i in range(4)])
    from gpudra.simulate.engine import start

    firsts = set()
    for seed in range(6):
        tuning = random.Random(seed)
        workload = tuned_workload(trace.tasks, trace.gpus * 1000, 0, tuning)
        run = start(trace, workload, "fgd", seed, "dra", tuning)
        placed = [run.schedule(name).node for name, _ in workload]
        assert len(set(placed)) == 1  # packed on one node, not spread by random ties
        assert [p[1] for p in artifact_experiment(trace, "fgd", seed, 0)["placements"]] == placed
        firsts.add(placed[0])
    assert len(firsts) > 1


def test_fgd_reserve_breaks_fgds_ties_where_the_free_cpu_strands_gpus():
    """The typical task wants 8 cores per GPU. A 1-core, 1-GPU task scores the same with FGD on both nodes (it
    fits both before and after), so FGD's node order decides; `fgd-reserve` takes the GPU that node n-y's
    12 cores could not serve (only one 8-core copy fits there), whatever the order."""
    from gpudra.simulate.engine import start

    nodes = [TraceNode("n-x", 16000, 65536, 2, "G2"), TraceNode("n-y", 12000, 65536, 2, "G2")]
    typical = [Task(f"t-{i}", 8000, 1024, 1, 1000) for i in range(20)]
    probe = Task("probe", 1000, 1024, 1, 1000)
    trace = Trace("cpu-strands", nodes, typical + [probe])
    chosen = {"fgd": set(), "fgd-reserve": set()}
    for seed in range(8):
        for policy in chosen:
            run = start(trace, [("probe", probe)], policy, seed, "dra", random.Random(seed))
            chosen[policy].add(run.scheduler.schedule_pod("sim/probe").node)
    assert chosen["fgd"] == {"n-x", "n-y"}  # a tie: the seed's node order decides
    assert chosen["fgd-reserve"] == {"n-y"}


def test_fgd_reserve_leaves_the_model_pinned_tasks_need_to_them():
    """openb gpuspec25's pattern: T4 GPUs are scarce for the tasks pinned to them, and the T4 node is short of
    CPU (its GPUs look stranded), so the CPU-aware growth alone does not keep an unpinned task off it. Among FGD's
    equals `fgd-reserve` ranks the G2 node first for an unpinned task; for a task pinned to T4 only the CPU
    rule counts."""
    from types import SimpleNamespace

    from gpudra.simulate.fgd import fragmentation_growth
    from gpudra.simulate.policies import FgdReservePolicy

    typical = ([Task(f"pinned-{i}", 4000, 1024, 1, 1000, ("T4",)) for i in range(2)]
               + [Task(f"pinned-g2-{i}", 4000, 1024, 1, 1000, ("G2",)) for i in range(2)]
               + [Task(f"any-{i}", 4000, 1024, 1, 1000) for i in range(16)])
    fragmentation = Fragmentation(typical_tasks(typical))
    # as many tasks pinned to each model, but ten times as many G2 GPUs: T4 is the scarce one
    policy = FgdReservePolicy(SimpleNamespace(fragmentation=fragmentation, model_gpus={"T4": 8, "G2": 80},
                                                 node_gpus={}, tasks={}))  # no whole-node shape to reserve
    t4, g2 = NodeRes(8000, 8000, (1000,) * 8, "T4"), NodeRes(64000, 64000, (1000,) * 8, "G2")
    unpinned, pinned = Task("probe", 4000, 1024, 1, 1000), Task("pinned-probe", 4000, 1024, 1, 1000, ("T4",))
    cpu_aware = policy.cpu_aware()
    growth = {res.model: fragmentation_growth(cpu_aware, res, 4000, 1000, policy.gpus(res, unpinned))
              for res in (t4, g2)}
    assert growth["T4"] <= growth["G2"]  # the CPU rule alone does not prefer the G2 node
    assert policy.tie_key(g2, unpinned) > policy.tie_key(t4, unpinned)  # the pinned tasks' model is left to them
    assert policy.tie_key(t4, pinned)[0] == policy.tie_key(g2, pinned)[0] == 0.0


def test_pinned_demand_spreads_each_pinned_task_over_the_gpus_it_accepts():
    from gpudra.simulate.fgd import TypicalTask, pinned_demand_per_gpu

    typical = [TypicalTask(1000, 1000, 1, ("T4",), 0.5), TypicalTask(1000, 500, 2, ("T4", "P100"), 0.25),
               TypicalTask(1000, 1000, 1, (), 0.25)]
    demand = pinned_demand_per_gpu(typical, {"T4": 4, "P100": 1, "G2": 10})
    assert demand["G2"] == 0.0  # nobody is pinned to it; the unpinned task counts nowhere
    assert demand["P100"] == pytest.approx(0.25 * 500 * 2 / 5)
    assert demand["T4"] == pytest.approx(0.5 * 1000 / 4 + 0.25 * 500 * 2 / 5)


def test_both_modes_report_demand_served_first_and_reserved_gpus_apart(tmp_path):
    """Issue 21: device-plugin rows used to lead with the GPUs they reserve (a share holds a whole GPU), which
    made them look fuller than DRA. The table leads with the same measure for both modes, the demand served, and
    the per-experiment JSON says independently what that is: the tasks' own demand over the capacity."""
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    args = ("--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--mode", "both",
            "--seeds", "3", "--tune", "1.5")
    table = _cli(*args, "-o", "wide")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    at = header.split().index("SERVED%@100")  # issue 32: the oversubscription next to it (wide: in GPUs too)
    assert header.split()[at:at + 5] == ["SERVED%@100", "OVERSUB%", "OVERSUB-GPUS", "STD", "UNSERVED-GPUS"]
    cells = {row.split()[1]: dict(zip(header.split(), row.split())) for row in rows}
    results = [json.loads(line) for line in _cli(*args, "-o", "json").stdout.splitlines()]
    for mode, row in cells.items():
        mine = [r for r in results if r["mode"] == mode]
        served = sum(r["served_ratio"] for r in mine) / len(mine)
        assert float(row["SERVED%@100"]) == round(served, 2)
        assert float(row["UNSERVED-GPUS"]) == round(sum(r["gpus"] * (1 - r["served_ratio"] / 100) for r in mine)
                                                    / len(mine), 1)
    # DRA: a share takes its own milli-GPUs, so what is reserved is what is served
    assert cells["dra"]["RESERVED%"] == cells["dra"]["SERVED%@100"]
    # device plugin: a share holds a whole GPU
    assert float(cells["device-plugin"]["RESERVED%"]) >= float(cells["device-plugin"]["SERVED%@100"])


def test_plots_are_zoomed_to_the_data_show_the_seed_spread_and_say_what_they_show(tmp_path, monkeypatch):
    """Issue 21: a 0-100 axis hid sub-point differences, nothing showed the seeds, and captions were file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpudra.simulate import report
    from gpudra.simulate.sweep import Experiment, TraceSource, run_sweep

    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    source = TraceSource("tiny", str(tmp_path / "nodes.csv"), str(tmp_path / "pods.csv"))
    results = run_sweep([Experiment(source, policy, seed, mode, 1.5) for mode in ("dra", "device-plugin")
                         for policy in ("fgd", "bestfit") for seed in (1, 2, 3)], jobs=1)
    seen: dict[str, tuple[tuple[float, float], list[str], str, int]] = {}

    def capture(draw):
        figure, axes = plt.subplots()
        draw(axes)
        legend = axes.get_legend()
        seen[axes.get_title()] = (axes.get_ylim(), [t.get_text() for t in legend.get_texts()] if legend else [],
                                  axes.get_xlabel(), len(axes.collections))
        plt.close(figure)
        return b"png"

    monkeypatch.setattr(report, "_figure_png", capture)
    images = report.plots(results)
    allocation = seen["tiny: GPU allocation vs arrived demand"]
    shown = [v for r in results if r.mode == "dra" for x, v in zip(r.series["arrived_percent"],
                                                                          r.series["allocation_ratio"]) if x >= 60]
    low, high = allocation[0]
    assert min(shown) - 10 < low <= min(shown) and max(shown) <= high < max(shown) + 10
    assert all("(3 seeds, band: lowest to highest)" in text for text in allocation[1])
    assert allocation[3] == 2  # one band per policy
    assert seen["tiny: utilisation per GPU model at 100% arrived demand"][2] == "GPU model"
    html = report.html_report(results, images)
    for name in images:
        caption = report.plot_caption(name)
        assert caption != name and f"<figcaption>{caption}</figcaption>" in html.replace("&#x27;", "'")


def test_tuning_refuses_a_trace_whose_tasks_request_no_gpu():
    """Sampling tasks up to a multiple of the GPU capacity never ends when no task adds GPU demand."""
    cpu_only = [Task(f"t-{i}", 1000, 1024, 0, 0, ()) for i in range(3)]
    with pytest.raises(SimulationError, match="no task of the trace requests a GPU"):
        tuned_workload(cpu_only, 8 * 1000, 1.3, random.Random(0))
    assert len(tuned_workload(cpu_only, 8 * 1000, 0, random.Random(0))) == 3  # --tune 0 submits them as they are
