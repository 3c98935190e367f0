"""`gpudra schedule` and `gpudra allocate` read a live cluster (a canned API server on loopback) the same way
they read the same objects from files, and only ever GET."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from test_live_explain import SCENARIO, _objects
from support.fake_apiserver import FakeApiServer


EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"
CLAIMS = [str(EXAMPLES / "cluster"), str(EXAMPLES / "workloads" / "claims.yaml")]


def _example_objects() -> list[dict]:
    paths = sorted((EXAMPLES / "cluster").glob("*.yaml")) + [EXAMPLES / "workloads" / "claims.yaml"]
    return [o for path in paths for o in yaml.safe_load_all(path.read_text()) if o]


def _live(tmp_path, args: list[str], objects: list[dict] | None = None):
    with FakeApiServer(objects if objects is not None else _objects(), page_size=3) as server:
        kubeconfig = server.kubeconfig(str(tmp_path / "kc"), context="lab")
        result = CliRunner().invoke(cli, [*args, "--kubeconfig", kubeconfig, "--context", "lab"])
        methods = {method for method, _ in server.requests}
    return result, methods


def test_schedule_on_a_live_cluster_matches_the_manifests(tmp_path):
    from_files = CliRunner().invoke(cli, ["schedule", "-f", SCENARIO, "--no-validate", "-o", "json"])
    live, methods = _live(tmp_path, ["schedule", "-o", "json"])
    # the scenario's pod does not fit: the same negative answer (exit 1) from files and from the cluster
    assert from_files.exit_code == 1, from_files.output
    assert live.exit_code == 1, live.output
    file_objects = json.loads(from_files.stdout)["items"]
    live_objects = json.loads(live.stdout)["items"]
    placed = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o["spec"].get("nodeName")
              for o in file_objects if o["kind"] == "Pod"}
    assert placed == {(o["metadata"].get("namespace"), o["metadata"]["name"]): o["spec"].get("nodeName")
                      for o in live_objects if o["kind"] == "Pod"}
    assert methods == {"GET"}


def test_allocate_on_a_live_cluster_matches_the_manifests(tmp_path):
    args = ["allocate", "--brief", "--mode", "each"]
    from_files = CliRunner().invoke(cli, [*args, *(f"-f{path}" for path in CLAIMS)])
    live, methods = _live(tmp_path, args, _example_objects())
    assert from_files.exit_code == 0, from_files.output
    assert live.exit_code == 0, live.output
    report = yaml.safe_load(live.stdout)
    assert report["results"], "the scenario has pending claims and nodes"
    assert report == yaml.safe_load(from_files.stdout)
    assert methods == {"GET"}


def test_manifests_and_a_cluster_together_are_refused(tmp_path):
    for command in (["allocate"], ["schedule"]):
        result = CliRunner().invoke(cli, [*command, "-f", SCENARIO, "--kubeconfig", str(tmp_path / "kc")])
        assert result.exit_code == 2
        assert "not both" in result.output and "Traceback" not in result.output
