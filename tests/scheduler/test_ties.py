"""How the scheduler breaks equal top scores (gpudra.scheduler.ties) against kube-scheduler's selectHost.

Sources: kubernetes v1.34.4 pkg/scheduler/schedule_one_test.go Test_SelectHost (the table: which nodes each case may
select), v1.36.0 pkg/scheduler/schedule_one.go (nodeScoreHeap: the highest TotalScore, then the highest random
Randomizer). kube-scheduler draws from Go's global generator, so its own tests only check the selected node is one
of the possible ones; a seeded random.Random makes gpudra's draws reproducible, and a count over many draws shows
each tied node is chosen.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gpudra.controllers import ManagedCluster
from gpudra.scheduler.scheduler import Scheduler
from gpudra.scheduler.ties import BY_NAME, pick

# Test_SelectHost (v1.34.4): (name, list of (node, TotalScore), nodes selectHost may return)
SELECT_HOST = [
    ("unique properly ordered scores", [("node1", 1), ("node2", 2)], {"node2"}),
    ("numberOfNodeScoresToReturn > len(list)", [("node1", 1), ("node2", 2)], {"node2"}),
    ("equal scores", [("node2.1", 2), ("node2.2", 2), ("node2.3", 2)], {"node2.1", "node2.2", "node2.3"}),
    ("out of order scores", [("node3.1", 3), ("node2.1", 2), ("node1.1", 1), ("node3.2", 3)], {"node3.1", "node3.2"}),
]


def _pick(scores, ties):
    return pick(scores, lambda s: s[1], lambda s: s[0], ties)[0]


@pytest.mark.parametrize("name,scores,possible", SELECT_HOST, ids=[case[0] for case in SELECT_HOST])
def test_select_host_table(name, scores, possible):
    rng = random.Random(7)
    seen = {_pick(scores, rng) for _ in range(200)}
    assert seen == possible  # only the top-scored nodes, and every one of them
    assert _pick(scores, BY_NAME) == min(possible)  # gpudra's reproducible default: the first name


def test_select_host_empty_list_is_an_error():
    with pytest.raises(ValueError):
        pick([], lambda s: 0, str, BY_NAME)  # selectHost's errEmptyPriorityList


def test_each_tied_node_is_chosen_about_equally_often():
    scores = [("a", 5), ("b", 7), ("c", 7), ("d", 3), ("e", 7)]
    rng = random.Random(2026)
    counts = Counter(_pick(scores, rng) for _ in range(3000))
    assert set(counts) == {"b", "c", "e"}
    # 1,000 expected each; a binomial's standard deviation is about 26: 10 of them either side
    assert all(740 <= counts[node] <= 1260 for node in "bce"), counts


def test_the_same_seed_draws_the_same_nodes():
    scores = [("x", 1), ("y", 1), ("z", 1)]
    first, second = random.Random(5), random.Random(5)
    assert [_pick(scores, first) for _ in range(50)] == [_pick(scores, second) for _ in range(50)]


def _cluster(nodes=6, pods=4):
    objects = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}"},
                "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}} for i in range(nodes)]
    objects += [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default", "uid": f"p{i}"},
                 "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
                for i in range(pods)]
    return ManagedCluster(objects)


def _placements(ties, indexed=True):
    scheduler = Scheduler(_cluster(), ties=ties, indexed=indexed)
    return tuple(result.node for result in scheduler.run())


def test_the_scheduler_breaks_ties_by_name_unless_given_a_generator():
    # equal nodes, LeastAllocated: each pod's top score is shared by every node still empty
    assert _placements(BY_NAME) == ("node-0", "node-1", "node-2", "node-3")
    drawn = {_placements(random.Random(seed)) for seed in range(40)}
    assert len(drawn) > 10  # the first pod lands on every node over the seeds, and the others follow suit
    assert {placement[0] for placement in drawn} == {f"node-{i}" for i in range(6)}
    assert all(len(set(placement)) == 4 for placement in drawn)  # still the least allocated: one pod per node


@pytest.mark.parametrize("seed", range(8))
def test_the_indexed_path_draws_as_the_linear_scan(seed):
    # the later pods share a shape and go through the shape index; same candidates in the same order, same draws
    assert _placements(random.Random(seed), indexed=True) == _placements(random.Random(seed), indexed=False)


def test_an_unknown_tie_rule_is_refused():
    with pytest.raises(ValueError, match="ties"):
        Scheduler(_cluster(), ties="random")
