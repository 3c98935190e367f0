"""`gpudra explain` against a live cluster (a canned API server on loopback) reads the same as files."""

from __future__ import annotations

import json
import os

import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from support.fake_apiserver import FakeApiServer

SCENARIO = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "explain", "held-and-cpu.yaml")


def _objects():
    with open(SCENARIO, encoding="utf-8") as handle:
        return [o for o in yaml.safe_load_all(handle) if o]


def test_live_cluster_explains_like_the_manifests(tmp_path):
    from_files = CliRunner().invoke(cli, ["explain", "-f", SCENARIO, "-n", "ml", "pod/train", "-o", "json"])
    with FakeApiServer(_objects(), page_size=2) as server:
        kubeconfig = server.kubeconfig(str(tmp_path / "kc"), context="lab")
        live = CliRunner().invoke(cli, ["explain", "--kubeconfig", kubeconfig, "--context", "lab",
                                        "-n", "ml", "pod/train", "-o", "json"])
        methods = {method for method, _ in server.requests}
    assert live.exit_code == 1, live.output
    assert json.loads(live.stdout) == json.loads(from_files.stdout)  # the release's patch note goes to stderr
    assert methods == {"GET"}  # read-only


def test_plugin_mode_uses_kubeconfig_env_and_context_namespace(tmp_path, monkeypatch):
    with FakeApiServer(_objects()) as server:
        monkeypatch.setenv("KUBECONFIG", server.kubeconfig(str(tmp_path / "kc"), namespace="ml"))
        result = CliRunner().invoke(cli, ["explain", "pod/train"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("pod ml/train does not fit.")
    assert "node gpu-1 fits if claim ml/old-job is released" in result.output


def test_unreachable_cluster_is_a_clean_error(tmp_path):
    with FakeApiServer([]) as server:
        kubeconfig = server.kubeconfig(str(tmp_path / "kc"))
    result = CliRunner().invoke(cli, ["explain", "--kubeconfig", kubeconfig, "pod/x"])
    assert result.exit_code == 2
    assert "cannot reach the API server" in result.output and "Traceback" not in result.output
