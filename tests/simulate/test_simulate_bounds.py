"""`gpudra simulate`'s hostile input (issue 20, finding 7): bounded traces, and CSV a spreadsheet cannot run."""

from __future__ import annotations

import csv
import io
import os

import pytest
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.simulate import trace as trace_module
from gpudra.simulate.report import events_csv, series_csv, spreadsheet_safe, summary_csv
from gpudra.simulate.results import ExperimentResult
from gpudra.simulate.trace import MAX_GPUS_PER_NODE, MAX_TRACE_NODES

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn-0,32000,131072,2,T4\nn-1,64000,262144,4,G2\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np-0,4000,8192,1,500\np-1,2000,4096,2,1000\n"


def _simulate(tmp_path, nodes: str, pods: str, *args: str, pods_name: str = "pods.csv"):
    (tmp_path / "nodes.csv").write_text(nodes)
    (tmp_path / pods_name).write_text(pods)
    before = sorted(os.listdir(tmp_path))
    result = CliRunner().invoke(cli, ["simulate", "--nodes", str(tmp_path / "nodes.csv"),
                                      "--pods", str(tmp_path / pods_name), *args])
    return result, before


def _assert_refused(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)


def test_a_node_with_a_hundred_million_gpus_is_refused_at_once(tmp_path):
    """Was: 45 s, 1.9 GB, then MemoryError."""
    result, before = _simulate(tmp_path, "sn,cpu_milli,memory_mib,gpu,model\nn-0,1000,1000,100000000,T4\n", PODS,
                               "--out-dir", str(tmp_path / "out"))
    _assert_refused(result, f"nodes.csv:2: gpu: 100000000 GPUs on one node; the largest real nodes have 16 "
                            f"(gpudra takes at most {MAX_GPUS_PER_NODE})")
    assert sorted(os.listdir(tmp_path)) == before  # no output directory, nothing else


def test_a_task_asking_for_more_gpus_than_any_node_has_is_refused(tmp_path):
    result, _ = _simulate(tmp_path, NODES, PODS + f"p-9,1000,1000,{MAX_GPUS_PER_NODE + 1},1000\n")
    _assert_refused(result, f"pods.csv:4: num_gpu: {MAX_GPUS_PER_NODE + 1} GPUs for one task")


def test_more_nodes_than_kubernetes_supports_are_refused(tmp_path):
    rows = "".join(f"n-{i},1000,1000,1,T4\n" for i in range(MAX_TRACE_NODES + 1))
    result, _ = _simulate(tmp_path, "sn,cpu_milli,memory_mib,gpu,model\n" + rows, PODS)
    _assert_refused(result, f"nodes.csv: more than {MAX_TRACE_NODES:,} nodes (line {MAX_TRACE_NODES + 2})")


def test_more_tasks_than_the_limit_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_module, "MAX_TRACE_TASKS", 3)
    pods = PODS + "p-2,1000,1000,0,0\np-3,1000,1000,0,0\n"
    result, _ = _simulate(tmp_path, NODES, pods)
    _assert_refused(result, "pods.csv: more than 3 tasks (line 5)")


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1+1", "@SUM(A1)", "\tx", "\rx", "=HYPERLINK(\"http://x\")"])
def test_formula_cells_are_escaped(text):
    assert spreadsheet_safe(text) == "'" + text
    assert spreadsheet_safe(-1.5) == -1.5 and spreadsheet_safe("fgd") == "fgd"


def test_a_trace_named_like_a_formula_writes_no_formula(tmp_path):
    result, _ = _simulate(tmp_path, NODES, PODS, "--policies", "bestfit", "--seeds", "1", "-j", "1",
                          "--out-dir", str(tmp_path / "out"), "-o", "csv", pods_name="=1+1.csv")
    assert result.exit_code == 0, result.output
    written = {name: (tmp_path / "out" / name).read_text() for name in ("summary.csv", "series.csv")}
    written["stdout"] = result.output
    for name, text in written.items():
        rows = list(csv.reader(io.StringIO(text)))
        cells = [cell for row in rows[1:] for cell in row]
        assert "'=1+1" in cells, name
        assert not [cell for cell in cells if cell.startswith(("=", "+", "@", "\t", "\r"))], name


def test_every_csv_writer_escapes():
    result = ExperimentResult(
        trace="=t", mode="+m", policy="@p", seed=1, method="events", tune=None, nodes=1, gpus=1, tasks=1,
        scheduled=1, unscheduled=0, allocation_ratio=None, unallocated_gpus=None, seconds=0.0, cpu_seconds=0.0,
        series={"arrived_percent": [10], "allocation_ratio": [0.5], "served_ratio": [0.5], "fragmented_gpus": [-1],
                "fragmentation_ratio": [0.1], "time_s": [-3]})
    for text in (series_csv([result]), events_csv([result]),
                 summary_csv([{"trace": "=t", "mode": "+m", "policy": "@p", "gpus": -2}])):
        rows = list(csv.reader(io.StringIO(text)))
        assert rows[1][:3] == ["'=t", "'+m", "'@p"]
        assert "-1" in rows[1] or "-3" in rows[1] or "-2" in rows[1]  # numbers stay numbers
