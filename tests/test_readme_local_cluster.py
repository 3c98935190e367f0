"""The README's "Local cluster" commands, run as written (in a private state home), in order."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from pathlib import Path

from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.layout import ClusterDir
from gpudra.cluster.nodes import down

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Local cluster", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_local_cluster_section_runs(monkeypatch):
    commands = readme_commands()
    assert commands[0] == "gpudra cluster up" and commands[-1] == "gpudra cluster down"
    base = tempfile.mkdtemp(prefix="gdr", dir="/tmp")
    monkeypatch.setenv("XDG_STATE_HOME", base)
    monkeypatch.chdir(ROOT)
    outputs = {}
    try:
        for command in commands:  # in-process (the drivers are still separate processes)
            # a shell expands `~`; the state home is the private one set above (XDG_STATE_HOME)
            args = [arg.replace("~/.local/state", base, 1) if arg.startswith("~/.local/state") else arg
                    for arg in shlex.split(command)]
            assert not any(arg.startswith("~") for arg in args), command
            assert args[0] == "gpudra"
            done = CliRunner().invoke(cli, args[1:])
            assert done.exit_code == 0, (command, done.output)
            outputs[command] = done.stdout
    finally:
        if os.path.exists(os.path.join(base, "gpudra", "cluster", "cluster.yaml")):
            down(ClusterDir(os.path.join(base, "gpudra", "cluster")))
        leftover = os.listdir(os.path.join(base, "gpudra")) if os.path.isdir(os.path.join(base, "gpudra")) else []
        shutil.rmtree(base, ignore_errors=True)
    assert leftover == []  # `cluster down` removed the state directory and the "last cluster" pointer
    assert "nvlink-training" in outputs["gpudra get pods -A -o wide"]
    described = next(out for cmd, out in outputs.items() if cmd.startswith("gpudra describe pod nvlink-training"))
    assert "Scheduled" in described and "Started container trainer" in described
    page = next(out for cmd, out in outputs.items() if cmd == "gpudra cluster view").strip()
    assert page.endswith("view.html")
