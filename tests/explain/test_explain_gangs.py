"""`gpudra explain` on a pod of a gang that cannot be placed whole (gpudra.explain.gangs): one line with the group's
numbers. The verdict itself is kube-scheduler's GangScheduling plugin's (kubernetes v1.36.0 / v1.35.0
pkg/scheduler/framework/plugins/gangscheduling/gangscheduling.go, checked against its test tables in
tests/scheduler/test_gangs.py); the local-cluster case with a ComputeDomain's clique is
tests/cluster/test_cluster_gangs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.explain.gangs import GangShortfall, node_cliques
from gpudra.explain.simulate import build_cluster

DATA = Path(__file__).parent.parent / "data" / "gang"
GANG_GATES = "default,+GenericWorkload,+GangScheduling"


@pytest.mark.parametrize("release, group", [("1.36", "ml/trainers"), ("1.35", "ml/training/trainers")])
def test_the_group_line_counts_the_pods_needed_and_placed(release, group):
    result = CliRunner().invoke(cli, ["explain", "pod/train-1", "-n", "ml", "-f", str(DATA / f"gang-{release}.yaml"),
                                      "--kubernetes-version", release, "--features", GANG_GATES, "--no-fixes",
                                      "-o", "json"], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    notes = [n for n in json.loads(result.stdout)["notes"] if n.startswith("group ")]
    assert notes == [f"group {group} needs 3 of its 3 pods placed at once; 2 could be placed: each needs a node "
                     "with 8 free gpu.nvidia.com devices, and 2 nodes have them (node-a, node-b)"]


def test_without_the_gates_there_is_no_group_to_explain():
    result = CliRunner().invoke(cli, ["explain", "pod/train-2", "-n", "ml", "-f", str(DATA / "gang-1.36.yaml"),
                                      "--kubernetes-version", "1.36", "--no-fixes", "-o", "json"],
                                catch_exceptions=False)
    # kube-scheduler without GangScheduling places two pods one by one; the third does not fit on its own
    assert result.exit_code == 1, result.output
    assert not [n for n in json.loads(result.stdout)["notes"] if n.startswith("group ")]


def _shortfall(**changes):
    base = dict(group="ns/g", min_count=8, members=8, placed=6, devices="4 free gpu.nvidia.com devices",
                fitting=tuple(f"t{i}" for i in range(6)), one_clique="its pods share ComputeDomain ns/d",
                cliques=(("c.1", 5), ("c.2", 1)))
    base.update(changes)
    return GangShortfall(**base)


def test_the_clique_line_names_the_largest_clique():
    assert _shortfall().line() == ("group ns/g needs 8 pods on one NVLink clique (its pods share ComputeDomain ns/d); "
                                   "6 could be placed; the largest clique has 5 nodes free (clique c.1, of 2 cliques)")
    assert _shortfall(cliques=(("c.1", 1),)).line().endswith("the largest clique has 1 node free (clique c.1)")
    assert _shortfall(cliques=()).line().endswith("no node it may use is in an NVLink clique with room for one of "
                                                  "its pods")


def test_a_node_s_clique_is_its_label_else_what_its_gpus_publish():
    def node(name, labels=None):
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}

    def gpus(node_name, clique):
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": node_name},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": node_name,
                         "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": "gpu-0", "attributes": {"cliqueID": {"string": clique}}}]}}

    cluster = build_cluster([node("a"), node("b", {"nvidia.com/gpu.clique": "u.7"}), node("c"),
                             gpus("a", "u.1"), gpus("b", "u.1")])
    assert node_cliques(cluster) == {"a": "u.1", "b": "u.7"}


def test_a_pod_left_over_by_a_group_that_met_its_quorum_is_explained_node_by_node(tmp_path):
    """minCount 2 of 3: Permit lets the two placed pods through (gangscheduling.go), the third is an ordinary
    unschedulable pod; no group line (it would say the group needs pods it already has)."""
    manifest = tmp_path / "gang.yaml"
    manifest.write_text((DATA / "gang-1.36.yaml").read_text().replace("gang: {minCount: 3}", "gang: {minCount: 2}"))
    result = CliRunner().invoke(cli, ["explain", "pod/train-2", "-n", "ml", "-f", str(manifest), "--features",
                                      GANG_GATES, "--no-fixes", "-o", "json"], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    explanation = json.loads(result.stdout)
    assert not [n for n in explanation.get("notes", []) if n.startswith("group ")]
    assert {node["node"] for node in explanation["nodes"]} == {"node-a", "node-b", "node-c"}
