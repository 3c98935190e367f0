"""Review findings in `gpudra allocate`."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from gpudra.cli.allocate import command

CASE = Path(__file__).resolve().parent / "data" / "conformance" / "random" / "sequential-0001"


def test_sequential_brief_yaml_has_no_anchors_or_aliases():
    # finalAllocations and results share allocation objects; a plain dump writes `&id001`/`*id001`,
    # which the expected.yaml files never contain, so a textual diff against them fails
    args = (CASE / "args").read_text().split()
    result = CliRunner().invoke(command, ["--brief", "-o", "yaml", *args, "-f", str(CASE / "input.yaml")],
                                catch_exceptions=False)
    assert result.exit_code == 0
    assert "finalAllocations" in result.stdout
    assert "&id0" not in result.stdout and "*id0" not in result.stdout
