"""docs/performance.md's table is the rendering of the recorded benchmark results (benchmarks/results/*.json):
one copy of each number, never typed by hand."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import perf_table  # noqa: E402


def test_the_table_in_the_document_is_the_rendering_of_the_recorded_results() -> None:
    results = perf_table.all_results()
    assert len(results) >= 5
    text = perf_table.DOC.read_text(encoding="utf-8")
    assert perf_table.rendered_document(text, results) == text
    assert perf_table.main(["render", "--check"]) == 0


def test_every_record_says_command_date_machine_and_load() -> None:
    for path in sorted(perf_table.RESULTS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["command"].startswith("python benchmarks/") and data["command"].endswith("--json"), path
        assert data["date"].endswith(" UTC") and "vCPU" in data["machine"] and "–" in data["load"], path
        assert isinstance(data["output"], dict) and data["output"], path


def test_a_changed_figure_or_a_hand_edit_is_caught() -> None:
    results = perf_table.all_results()
    text = perf_table.DOC.read_text(encoding="utf-8")
    first = results[0]
    key = next(k for k, v in first.output.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    changed = [replace(first, output={**first.output, key: first.output[key] * 2 + 1}), *results[1:]]
    assert perf_table.rendered_document(text, changed) != text
    edited = text.replace(perf_table.END, "| hand | edited | row | | | |\n" + perf_table.END)
    assert perf_table.rendered_document(edited, results) == text  # rendering puts the recorded table back
