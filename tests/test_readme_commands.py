"""The README's command table (section "Commands") against the real commands: every command is listed, its
`-o` choices and pipe default are the documented ones, and each documented exit code is produced by a probe."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gpudra.cli import cli

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def readme_table() -> dict[str, tuple[str, str]]:
    """command -> (`-o` cell, exit-code cell)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        match = re.fullmatch(r"\| `([a-z -]+)` \| (.*?) \| (.*?) \|", line.strip())
        if match:
            rows[match.group(1)] = (match.group(2), match.group(3))
    return rows


def leaf_commands(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> dict[str, click.Command]:
    ctx = click.Context(group)
    found: dict[str, click.Command] = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            found.update(leaf_commands(command, (*prefix, name)))
        else:
            found[" ".join((*prefix, name))] = command
    return found


TABLE = readme_table()
COMMANDS = leaf_commands()


def test_the_table_lists_every_command_and_nothing_else() -> None:
    assert len(TABLE) > 20
    assert set(TABLE) == set(COMMANDS)


def _output_option(command: click.Command) -> click.Option | None:
    return next((p for p in command.params if isinstance(p, click.Option) and "-o" in p.opts), None)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_output_choices_match(name: str) -> None:
    cell = TABLE[name][0]
    option = _output_option(COMMANDS[name])
    if cell == "–":
        assert option is None, f"{name} has -o but the README says it has none"
        return
    assert option is not None, f"{name} has no -o but the README lists {cell}"
    documented = cell.split(" (", 1)[0]
    if isinstance(option.type, click.Choice):
        assert documented.split(", ") == list(option.type.choices)
    else:
        assert documented == option.metavar or documented == "FILE"
    pipe = re.search(r"\(pipe: (\w+)\)", cell)
    help_text = option.help or ""
    if pipe:
        assert f"table on a terminal, {pipe.group(1)} otherwise" in help_text
    else:
        assert "otherwise]" not in help_text


def _codes(cell: str) -> set[int]:
    return {int(part.strip()[0]) for part in cell.split(",") if part.strip()[:1].isdigit()}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_documented_exit_codes_are_0_1_2_and_usage_errors_give_2(name: str) -> None:
    codes = _codes(TABLE[name][1])
    assert {0, 2} <= codes <= {0, 1, 2}
    result = CliRunner().invoke(cli, [*name.split(), "--no-such-option"])
    assert result.exit_code == 2
    assert "error: No such option" in result.stderr and "Traceback" not in result.output
    assert CliRunner().invoke(cli, [*name.split(), "--help"]).exit_code == 0


INVALID_CLAIM = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: zero}
spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: -1}}]}}
"""
TOO_BIG = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: nine}
spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 9}}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: big}
spec:
  containers: [{name: c, image: busybox, resources: {claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, resourceClaimName: nine}]
"""
MIG_INFEASIBLE = "version: v1\nmig-configs:\n  bad:\n  - devices: all\n    mig-enabled: true\n" \
                 "    mig-devices: {7g.80gb: 2}\n"


def _negative_probes(tmp_path: Path) -> dict[str, list[str]]:
    from gpudra.cluster.layout import ClusterConfig, ClusterDir

    state = tmp_path / "cluster"
    ClusterDir(str(state)).save_config(ClusterConfig(nodes=[]))  # a local cluster's store without nodes
    (tmp_path / "invalid.yaml").write_text(INVALID_CLAIM)
    (tmp_path / "big.yaml").write_text(TOO_BIG)
    (tmp_path / "mig.yaml").write_text(MIG_INFEASIBLE)
    (tmp_path / "cdi.yaml").write_text("cdiVersion: 0.6.0\nkind: bad\ndevices: []\n")
    cluster, big = str(EXAMPLES / "cluster"), str(tmp_path / "big.yaml")
    return {
        "validate": ["validate", "-f", str(tmp_path / "invalid.yaml")],
        "allocate": ["allocate", "-f", cluster, "-f", big],
        "schedule": ["schedule", "-f", cluster, "-f", big],
        "explain": ["explain", "-f", cluster, "-f", big, "pod/big", "--no-fixes"],
        "cdi validate": ["cdi", "validate", str(tmp_path / "cdi.yaml")],
        "mig validate": ["mig", "validate", "-f", str(tmp_path / "mig.yaml"), "--gpu", "h100-80gb"],
        "apply": ["apply", "--dir", str(state), "-f", str(tmp_path / "invalid.yaml")],
        "get": ["get", "pods", "nosuch", "--dir", str(state)],
        "delete": ["delete", "pod", "nosuch", "--dir", str(state)],
        "describe": ["describe", "pod", "nosuch", "--dir", str(state)],
    }


# Negative answers that need a running node driver, probed by the tests that start one.
NEGATIVE_ELSEWHERE = {
    "driver prepare": ("tests/test_driver_cli.py", "test_tcp_health_endpoint_and_cdi_cli_on_a_running_node"),
    "mig apply": ("tests/test_mig_manager.py", "test_apply_refuses_while_claims_hold_a_gpu_that_would_change"),
}


def test_every_documented_negative_answer_exits_1(tmp_path: Path) -> None:
    probes = _negative_probes(tmp_path)
    documented = {name for name, (_, cell) in TABLE.items() if 1 in _codes(cell)}
    assert documented == set(probes) | set(NEGATIVE_ELSEWHERE)
    for name, args in probes.items():
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, (name, result.output)
        assert "Traceback" not in result.output
    for name, (path, function) in NEGATIVE_ELSEWHERE.items():
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        body = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == function)
        assert "exit_code == 1" in ast.unparse(body), name
