"""The command table (docs/cli.md, section "Commands") against the real commands: every command is listed, its
`-o` choices and pipe default are the documented ones, and each documented exit code is produced by a probe; and
every command in the code blocks of the README and of docs/*.md is run."""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from tests.support.builders import claim, pod

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"


def readme_table() -> dict[str, tuple[str, str]]:
    """command -> (`-o` cell, exit-code cell)."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
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


INVALID_CLAIM = yaml.safe_dump(claim("zero", count=-1, device_class_name="gpu.nvidia.com"))
TOO_BIG = yaml.safe_dump_all([claim("nine", count=9, device_class_name="gpu.nvidia.com"),
                              pod("big", claims={"gpu": "nine"})])
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
        "mig plan": ["mig", "plan", "-f", big, "--gpu", "h100-80gb", "--count", "1"],
        "apply": ["apply", "--dir", str(state), "-f", str(tmp_path / "invalid.yaml")],
        "get": ["get", "pods", "nosuch", "--dir", str(state)],
        "delete": ["delete", "pod", "nosuch", "--dir", str(state)],
        "describe": ["describe", "pod", "nosuch", "--dir", str(state)],
        "simulate": ["simulate", "-f", str(tmp_path / "invalid.yaml")],
    }


# Negative answers that need a running node driver, probed by the tests that start one.
NEGATIVE_ELSEWHERE = {
    "driver prepare": ("tests/gpuplugin/test_driver_cli.py", "test_tcp_health_endpoint_and_cdi_cli_on_a_running_node"),
    "mig apply": ("tests/mig/test_mig_manager.py", "test_apply_refuses_while_claims_hold_a_gpu_that_would_change"),
    "cluster device-condition": ("tests/cluster/test_binding_conditions_cluster.py",
                                 "test_the_pod_waits_for_its_nic_and_binds_when_the_condition_is_true"),
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


# --- every command in the README's code blocks is run ------------------------------------------------------------


# Run only with GPUDRA_README_FULL=1: full-scale trace replays (minutes to hours); the suite checks their options.
# (The NVL72 gang replay goes through gpudra's scheduler: about two CPU minutes for 4 racks; its tests use small racks.)
FULL_SCALE = {
    "gpudra simulate",
    "gpudra simulate --workload nvl72 --racks 4 --policy all",
    "gpudra simulate --policies fgd,bestfit,fgd-reserve --seeds 2 --out-dir out",
    "gpudra simulate --mode both --policies fgd,bestfit --out-dir out",
}
# Not run by a test, and why: the environment's own setup and the suite itself (.ci/run runs that line).
NOT_RUN = {
    "pip install .": "installing gpudra is the test environment's setup",
    "pip install '.[test]' -c test-constraints.txt": "installing the pinned test environment is the suite's setup",
    "python -m pytest -n auto": "the suite itself: .ci/run runs exactly this line (checked below)",
}
# Daemons that follow a real cluster: their options are checked here, and they run elsewhere against fakes.
DAEMONS_ELSEWHERE = {
    "gpudra mig manager -f /config/config.yaml --in-cluster --backend nvml":
        "tests/mig/test_mig_manager.py runs the manager against a fake API server",
}


# The documents whose commands are run, in this order: the README first (it writes the examples the others use).
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Blocks run elsewhere, each in order as one walkthrough: (document, heading) -> the test that runs it.
RUN_ELSEWHERE = {
    ("README.md", "3. Run a local cluster with real driver processes"):
        "tests/e2e/test_readme_local_cluster.py::test_the_readme_front_door_local_cluster_runs",
    ("local-cluster.md", "Walkthrough"): "tests/e2e/test_readme_local_cluster.py::test_readme_local_cluster_section_runs",
    ("driver.md", "ComputeDomains on the local cluster (multi-node NVLink, simulated GB200 NVL72 racks)"):
        "tests/e2e/test_computedomain_flow.py::test_readme_computedomain_commands_run",
    # needs Go and a Kubernetes build (a cold one takes many minutes): that test brings the control plane up as this
    # block does and drives it with the release's kubectl; the block's gpudra lines are parsed here
    ("real-control-plane.md", "Build and start"):
        "tests/oracles/test_kube_cluster.py::test_gpu_nodes_on_the_real_control_plane",
}


def readme_code_commands() -> list[tuple[str, str, str]]:
    """(document: section, command, comment) for every line of every ```sh block, in order."""
    found = []
    for document in DOCUMENTS:
        section = ""
        in_block = False
        for line in document.read_text(encoding="utf-8").splitlines():
            if line.startswith(("## ", "### ")):
                section = line.lstrip("#").strip()
            if line.startswith("```"):
                in_block = line.strip() == "```sh" and not in_block
                continue
            if in_block and line.strip():
                command, _, comment = line.partition("  #")
                found.append((f"{document.name}: {section}", command.strip(), comment.strip()))
    return found


def _run_elsewhere(section: str) -> bool:
    document, _, heading = section.partition(": ")
    return (document, heading) in RUN_ELSEWHERE


def _expected_exit(comment: str) -> int:
    match = re.search(r"\bexit (\d)\b", comment)
    return int(match.group(1)) if match else 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory that looks like the repository's root to the README's relative paths."""
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")  # examples/: the README's `gpudra examples` writes it
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _split(command: str) -> tuple[list[str], str | None]:
    args = shlex.split(command)
    if ">" in args:
        at = args.index(">")
        return args[:at], args[at + 1]
    return args, None


def _run_in_process(args: list[str], redirect: str | None, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> tuple[int, str]:
    if args[:2] == ["kubectl", "gpudra"]:
        args = ["gpudra", *args[2:]]
    assert args[0] == "gpudra", args
    args = args[1:]
    with contextlib.ExitStack() as stack:
        if "--context" in args:  # a live cluster: a loopback API server with examples/ in it
            from support.fake_apiserver import FakeApiServer

            from gpudra.kube.reader import CLUSTER_KINDS

            served = {kind.kind for kind in CLUSTER_KINDS}  # what a cluster has (a Deployment's pods, not it)
            objects = [o for folder in ("cluster", "workloads") for path in sorted((EXAMPLES / folder).glob("*.yaml"))
                       for o in yaml.safe_load_all(path.read_text()) if o and o["kind"] in served]
            server = stack.enter_context(FakeApiServer(objects))
            context = args[args.index("--context") + 1]
            monkeypatch.setenv("KUBECONFIG", server.kubeconfig(str(tmp / "kubeconfig"), context=context))
        if "nvml" in args:  # an NVIDIA driver: the real pynvml on a fake libnvidia-ml with simulated GPUs
            from support.fake_libnvml import from_simulated, install

            install(monkeypatch, from_simulated("dgx-h100"))
            if args[:2] == ["mig", "apply"]:
                args = [*args, "--root", str(tmp / "node")]  # the node driver's state, not this machine's
        result = CliRunner().invoke(cli, args, prog_name="gpudra")
    if redirect:
        Path(redirect).write_text(result.stdout)
    return result.exit_code, result.output


def _run_driver(command: str, tmp: Path,
                while_serving: list[str] | None = None) -> tuple[int, str, dict[str, tuple[int, str]]]:
    """`driver run` serves until SIGTERM: start it, wait until ready, read /metrics, run the README's commands
    that talk to it (`driver inject-event --root /tmp/n1`: a root without a driver is an error), stop it."""
    port = _free_port()
    root = Path(tempfile.mkdtemp(prefix="gdr", dir="/tmp"))  # short: unix socket paths end at 107 bytes
    command = command.replace("/tmp/n1", str(root / "n1")).replace("--metrics-port 9400", f"--metrics-port {port}")
    args = shlex.split(command)
    (root / "n1" / "claims").mkdir(parents=True)
    process = subprocess.Popen([sys.executable, "-m", "gpudra", *args[1:]], stderr=subprocess.PIPE, text=True,
                               stdout=subprocess.DEVNULL, env={**os.environ, "KUBECONFIG": ""})
    assert process.stderr is not None
    try:
        deadline = time.monotonic() + 120
        log = []
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            log.append(line)
            if not line or line.startswith("ready:"):
                break
        assert log[-1].startswith("ready:"), "".join(log)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            metrics = response.read().decode()
        assert "gpudra" in metrics
        followers = {}
        for follower in while_serving or []:
            done = subprocess.run([sys.executable, "-m", "gpudra",
                                   *shlex.split(follower.replace("/tmp/n1", str(root / "n1")))[1:]],
                                  capture_output=True, text=True, timeout=120, check=False)
            followers[follower] = (done.returncode, done.stdout + done.stderr)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)
    return process.returncode, metrics, followers


def _check_options(command: str) -> None:
    """The command line parses (names a command; its options and values are accepted), without running it."""
    args, _ = _split(command)
    args = args[1:]
    command_obj: click.Command = cli
    ctx = click.Context(cli, info_name="gpudra")
    while isinstance(command_obj, click.Group):
        sub = command_obj.get_command(ctx, args[0])
        assert sub is not None, command
        ctx = click.Context(sub, info_name=args[0], parent=ctx)
        command_obj, args = sub, args[1:]
    command_obj.make_context(ctx.info_name, list(args), parent=ctx.parent)


def test_every_readme_command_runs(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from support.doc_blocks import readme_commands as local_cluster_commands

    commands = readme_code_commands()
    assert len(commands) > 30
    ran = []
    # commands that need the README's running driver (its --root /tmp/n1) run while `driver run` serves
    with_driver = [command for _, command, _ in commands if command.startswith("gpudra driver inject-event")
                   and "/tmp/n1" in command]
    ran_with_driver: dict[str, tuple[int, str]] = {}
    for section, command, comment in commands:
        if _run_elsewhere(section):
            if section.startswith("real-control-plane.md"):  # Go and minutes: its gpudra lines parse, at least
                for part in command.split("&&"):
                    if part.strip().startswith("gpudra "):
                        _check_options(part.strip())
            continue  # run, in order, by the test RUN_ELSEWHERE names
        parts = [part.strip() for part in command.split("&&")]
        for part in parts:
            if part in NOT_RUN:
                continue
            if part in DAEMONS_ELSEWHERE or (part in FULL_SCALE and not os.environ.get("GPUDRA_README_FULL")):
                _check_options(part)
                continue
            if part.startswith("python benchmarks/"):
                done = subprocess.run([sys.executable, *shlex.split(part.replace("/tmp/", f"{workdir}/"))[1:]],
                                      capture_output=True, text=True, timeout=600, check=False)
                code, output = done.returncode, done.stdout + done.stderr
            elif part.startswith("gpudra driver run"):
                code, output, ran_with_driver = _run_driver(part, workdir, with_driver)
            elif part in ran_with_driver:
                code, output = ran_with_driver[part]
            else:
                # the node's --root of the README (/tmp/n1) is the test's own directory
                args, redirect = _split(part.replace("/tmp/n1", str(workdir / "n1")))
                code, output = _run_in_process(args, redirect, monkeypatch, workdir)
            assert code == _expected_exit(comment), (part, output[-3000:])
            assert "Traceback" not in output, part
            ran.append(part)
    # the walkthroughs, each run in order by its own test
    from support.doc_blocks import computedomain_commands
    from support.doc_blocks import front_door_commands

    elsewhere = [command for section, command, _ in commands if _run_elsewhere(section)
                 and not section.startswith("real-control-plane.md")]
    assert elsewhere == front_door_commands() + computedomain_commands() + local_cluster_commands()
    assert {(document, heading) for document, _, heading in
            (section.partition(": ") for section, _, _ in commands)} >= set(RUN_ELSEWHERE)
    for test in RUN_ELSEWHERE.values():
        path, _, function = test.partition("::")
        assert (ROOT / path).exists() and f"def {function}(" in (ROOT / path).read_text(encoding="utf-8"), test
    every = {part.strip() for _, command, _ in commands for part in command.split("&&")}
    assert set(NOT_RUN) | set(DAEMONS_ELSEWHERE) | FULL_SCALE <= every, "a listed exception left the README"
    assert len(ran) >= 20


def test_ci_runs_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "grep -m1 -E \"^pip install '\\.\\[test\\]'\" README.md" in script
    first = next(command for _, command, _ in readme_code_commands() if command.startswith("pip install '.[test]'"))
    assert first == "pip install '.[test]' -c test-constraints.txt && python -m pytest -n auto"


def test_mig_manager_runs_against_a_fake_api_server_elsewhere() -> None:
    for reason in DAEMONS_ELSEWHERE.values():
        path = ROOT / reason.split()[0]
        assert path.exists() and '"manager"' in path.read_text(encoding="utf-8")


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    """The README sends readers to docs/; a moved or renamed file must not leave a dead link behind."""
    dead = []
    for document in DOCUMENTS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", document.read_text(encoding="utf-8")):
            if "://" not in target and not (document.parent / target).exists():
                dead.append(f"{document.relative_to(ROOT)}: {target}")
    assert dead == []
