"""The README's "Local cluster" commands, run as written (in a private state home), in order."""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time

from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.layout import ClusterDir
from gpudra.cluster.nodes import down
from support.doc_blocks import ROOT, sh_block, readme_commands, front_door_commands  # noqa: F401


def _tainted_soon(cluster: ClusterDir, node: str, device: str) -> bool:
    """Whether the node's driver republishes `device` with a taint (it polls its event spool)."""
    for _ in range(2400):  # bounded only against a hang: 2 min
        if any(d.get("name") == device and d.get("taints") for s in cluster.store.list("ResourceSlice")
               if s["spec"].get("nodeName") == node for d in s["spec"].get("devices") or []):
            return True
        time.sleep(0.05)
    return False


def _walk(commands: list[str], monkeypatch) -> dict[str, str]:
    assert commands[0] == "gpudra cluster up" and commands[-1] == "gpudra cluster down"
    home = tempfile.mkdtemp(prefix="gdr", dir="/tmp")
    # A private home with the default state directory, so `~/.local/state/…` in the README means what a shell
    # makes of it (shlex does not expand `~`: the event went to a directory named "~" in the checkout).
    monkeypatch.setenv("HOME", home)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    base = os.path.join(home, ".local", "state")
    monkeypatch.chdir(ROOT)
    outputs = {}
    try:
        for command in commands:  # in-process (the drivers are still separate processes)
            args = [os.path.expanduser(arg) for arg in shlex.split(command)]
            assert args[0] == "gpudra"
            done = CliRunner().invoke(cli, args[1:])
            assert done.exit_code == 0 and "warning" not in done.stderr, (command, done.output)
            outputs[command] = done.stdout
            if args[1:3] == ["driver", "inject-event"]:
                assert _tainted_soon(ClusterDir(os.path.join(base, "gpudra", "cluster")), "l4-0", "gpu-0"), command
    finally:
        if os.path.exists(os.path.join(base, "gpudra", "cluster", "cluster.yaml")):
            down(ClusterDir(os.path.join(base, "gpudra", "cluster")))
        leftover = os.listdir(os.path.join(base, "gpudra")) if os.path.isdir(os.path.join(base, "gpudra")) else []
        shutil.rmtree(home, ignore_errors=True)
    assert leftover == []  # `cluster down` removed the state directory and the "last cluster" pointer
    assert "nvlink-training" in outputs["gpudra get pods -A -o wide"]
    return outputs


def test_readme_local_cluster_section_runs(monkeypatch):
    outputs = _walk(readme_commands(), monkeypatch)
    described = next(out for cmd, out in outputs.items() if cmd.startswith("gpudra describe pod nvlink-training"))
    assert "Scheduled" in described and "Started container trainer" in described
    page = next(out for cmd, out in outputs.items() if cmd == "gpudra cluster view").strip()
    assert page.endswith("view.html")


def test_the_readme_front_door_local_cluster_runs(monkeypatch):
    """The README's four lines, in order: up, the article's manifests, its pods bound, down."""
    _walk(front_door_commands(), monkeypatch)
