"""The command line an operator meets in the first hour (issue 21): help everywhere, one spelling of shared
options, validate's claim-size warning, mig plan's answer, validate --fix's output, driver prepare's UID message."""

from __future__ import annotations

import re
from pathlib import Path

import click
import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.layout import parse_nodes
from gpudra.discovery.backends import nvml_available

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"


def commands(group: click.Group = cli, path: tuple[str, ...] = ()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        elif command is not None:
            yield (*path, name), command


def run(*args: str, code: int = 0, stdin: str | None = None):
    result = CliRunner().invoke(cli, list(args), input=stdin)
    assert result.exit_code == code, (args, result.output)
    return result


def test_every_option_says_what_it_does():
    missing = [(" ".join(path), option.opts) for path, command in commands() for option in command.params
               if isinstance(option, click.Option) and not option.hidden and not option.help]
    assert missing == []


def test_help_names_only_commands_and_options_that_exist():
    # `cluster up --help` recommended `gpudra discover --list-profiles`, which never existed
    known = dict(commands())
    mentioned = []
    for path, command in known.items():
        texts = [command.help or ""] + [p.help or "" for p in command.params if isinstance(p, click.Option)]
        for text in texts:
            for words, option in re.findall(r"`gpudra ([a-z][a-z -]*?) (--[a-z][a-z-]*)", text):
                mentioned.append((" ".join(path), words, option))
                target = known.get(tuple(words.split()))
                assert target is not None, (path, words)
                assert any(option in p.opts or option in p.secondary_opts for p in target.params), (path, option)
    assert ("explain", "schedule", "--policy") in mentioned  # the scan reads the help texts it should
    nodes_help = next(p.help for p in known[("cluster", "up")].params if "--nodes" in p.opts)
    named = re.search(r"profile names \(([^)]*)\)", nodes_help).group(1).split(", ")
    for profile in named:  # each one a profile `cluster up --nodes` accepts
        assert parse_nodes(profile)[0].profile == profile


def test_bare_gpudra_and_bare_groups_print_help_and_succeed():
    for args in ([], ["driver"], ["cluster"], ["mig"]):
        result = run(*args)
        assert result.stdout.startswith("Usage: ") and "Commands:" in result.stdout
        assert "error" not in result.stderr


def test_a_nodes_name_is_node_name_or_node_in_every_command():
    with_node = [(path, p) for path, command in commands() for p in command.params
                 if isinstance(p, click.Option) and {"--node-name", "--node"} & set(p.opts)]
    assert len(with_node) >= 8  # allocate, discover, driver slices/run, explain, mig apply/manager/slices
    for path, option in with_node:
        assert {"--node-name", "--node"} <= set(option.opts), path
    same = run("mig", "slices", "--gpu", "a100", "--node", "n-1", "-o", "yaml").stdout
    assert same == run("mig", "slices", "--gpu", "a100", "--node-name", "n-1", "-o", "yaml").stdout


def test_backend_has_one_default_and_commands_that_change_gpus_do_not_fall_back():
    backends = [(path, p) for path, command in commands() for p in command.params
                if isinstance(p, click.Option) and "--backend" in p.opts and p.default is not None]
    assert {" ".join(path) for path, _ in backends} >= {"discover", "driver slices", "driver run", "mig apply",
                                                         "mig manager"}
    assert {p.default for _, p in backends} == {"auto"}
    if not nvml_available():  # no NVIDIA driver here: auto would mean simulated GPUs under --root /
        refused = run("mig", "apply", "-f", "-", "-c", "all-disabled", code=2,
                      stdin="version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n    mig-enabled: false\n")
        assert "no NVIDIA driver" in refused.stderr and "--backend simulated" in refused.stderr


def _claim(counts: list[int]) -> str:
    return yaml.safe_dump({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"name": "big", "namespace": "default"},
                           "spec": {"devices": {"requests": [
                               {"name": f"r{i}", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": n}}
                               for i, n in enumerate(counts)]}}})


def test_validate_warns_about_a_claim_the_allocator_can_never_allocate():
    # Upstream's ValidateResourceClaim checks only `count > 0` (pkg/apis/resource/validation/validation.go,
    # validateDeviceAllocationMode): the API server stores count 100. The allocator caps one claim at
    # AllocationResultsMaxSize (32) devices; validate says so as a warning, and allocate's refusal agrees.
    cluster = str(EXAMPLES / "cluster")
    for counts, warned in (([100], "exactly.count: 100 devices"), ([20, 13], "spec.devices.requests: 33 devices"),
                           ([32], None), ([16, 16], None)):
        checked = run("validate", "-f", "-", stdin=_claim(counts))
        allocated = CliRunner().invoke(cli, ["allocate", "-f", cluster, "-f", "-", "--mode", "each"],
                                       input=_claim(counts))
        refused = "exceeds the claim limit of 32" in allocated.output
        if warned:
            assert warned in checked.stderr and "at most 32 devices per claim" in checked.stderr
            assert "1 object on stdin is valid (1 warning)" in checked.stderr
            assert refused and allocated.exit_code == 1
        else:
            assert "warning" not in checked.stderr and not refused


def test_mig_plan_exits_1_when_the_proposed_layout_leaves_claims_unserved(tmp_path):
    too_many = tmp_path / "nine.yaml"
    too_many.write_text(_claim([9]))
    unserved = run("mig", "plan", "-f", str(too_many), "--gpu", "h100-80gb", "--count", "1", code=1)
    assert "leaves 9 devices unserved: default/big/r0 ×9" in unserved.stderr
    run("mig", "plan", "-f", str(EXAMPLES / "workloads" / "claims.yaml"), "--gpu", "h100-80gb", "--count", "8")


def test_validate_fix_prints_the_manifests_not_the_clusters_nodes_and_slices():
    fixed = run("validate", "--fix", "-f", str(EXAMPLES / "article"), "-f", str(EXAMPLES / "cluster"))
    kinds = [doc["kind"] for doc in yaml.safe_load_all(fixed.stdout)]
    assert "Node" not in kinds and "ResourceSlice" not in kinds and "ResourceClaim" in kinds
    assert "not printed: 4 Nodes and 4 ResourceSlices" in fixed.stderr
    assert "allocatable on" in fixed.stderr  # still checked against them
    alone = run("validate", "--fix", "-f", str(EXAMPLES / "cluster" / "resourceslices.yaml"))
    assert {doc["kind"] for doc in yaml.safe_load_all(alone.stdout)} == {"ResourceSlice"}


def test_driver_prepare_says_how_to_give_a_claim_a_uid(tmp_path):
    claim = tmp_path / "claim.yaml"
    claim.write_text(_claim([1]))
    refused = run("driver", "prepare", "--root", str(tmp_path / "no-driver"), str(claim), code=2)
    assert "ResourceClaim default/big has no metadata.uid" in refused.stderr
    uid = re.search(r"`uid: ([0-9a-f-]{36})`", refused.stderr).group(1)
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", uid)
    assert not (tmp_path / "no-driver").exists()
