"""The NVL72 gang replay's placements through gpudra's scheduler (gpudra.simulate.gangscheduler), the default for the
policies kube-scheduler has: the pods' required anti-affinity (InterPodAffinity) keeps a gang to one pod per tray,
GangScheduling binds a gang's pods all or none, clique-aware is kube-scheduler 1.36's topology-aware placement on the
clique label (the fuller clique wins), clique-affinity a pod affinity on it, equal scores are drawn from the replay's
seed, and the replay's tray accounting (RackState.bind, which refuses two pods on one tray or a tray without the
GPUs) stays in step with the scheduler's devices over a whole replay."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpudra.simulate.gangreplay import GangSimulationError, run_gangs
from gpudra.simulate.gangs import SCHEDULER_POLICIES
from gpudra.simulate.gangscheduler import SchedulerPlacer
from gpudra.simulate.nvl72 import GangJob, nvl72_racks, synthetic_gangs


def test_one_pod_per_tray_even_where_the_gpus_would_fit_on_fewer() -> None:
    topology = nvl72_racks(1, trays_per_rack=2, gpus=4)
    placer = SchedulerPlacer(topology)
    # three 1-GPU pods fit the GPUs of one tray, but the anti-affinity gives each a tray: two trays, no gang
    assert placer.place(GangJob("three", 3, 1)) is None
    assert not placer.cluster.pods and not placer.cluster.claims  # nothing left bound or allocated
    assert not placer.cluster.other_objects  # nor its PodGroup
    trays = placer.place(GangJob("two", 2, 1))
    assert trays is not None and sorted(trays) == [0, 1]
    # another job's pods may share those trays (the anti-affinity is per job)
    assert placer.place(GangJob("other", 2, 3)) is not None
    assert placer.place(GangJob("full", 1, 1)) is None  # every GPU is taken
    placer.release("two")
    assert placer.place(GangJob("full", 1, 1)) is not None


def _cliques(topology, trays):
    return {topology.trays[t].clique for t in trays}


@pytest.mark.parametrize("seed", range(6))
def test_clique_aware_puts_the_gang_in_the_fuller_clique_where_blind_spreads_it(seed: int) -> None:
    topology = nvl72_racks(2, trays_per_rack=3, gpus=4)
    got = {}
    for policy in ("clique-aware", "clique-blind", "clique-affinity"):
        placer = SchedulerPlacer(topology, policy)
        rng = random.Random(seed)
        small = placer.place(GangJob("small", 1, 4), rng)
        gang = placer.place(GangJob("gang", 2, 4), rng)
        assert small is not None and gang is not None
        got[policy] = (small, gang)
    small, gang = got["clique-aware"]
    # both cliques hold the gang; NodeResourcesFit's placement score (MostAllocated) prefers the one in use
    assert _cliques(topology, gang) == _cliques(topology, small)
    assert len(_cliques(topology, got["clique-affinity"][1])) == 1  # the affinity keeps the pods together


def test_blind_gangs_span_cliques_for_some_seeds_and_the_same_seed_places_the_same() -> None:
    topology = nvl72_racks(2, trays_per_rack=3, gpus=4)

    def gang(seed):
        placer = SchedulerPlacer(topology, "clique-blind")
        return placer.place(GangJob("gang", 3, 4), random.Random(seed))

    assert gang(5) == gang(5)
    assert any(len(_cliques(topology, gang(seed))) > 1 for seed in range(10))  # selectHost's random ties
    by_name = SchedulerPlacer(topology, "clique-blind").place(GangJob("gang", 3, 4))
    assert by_name == (0, 1, 2)  # ties by node name: the first trays, one rack


@pytest.mark.parametrize("method", ["events", "tune"])
@pytest.mark.parametrize("policy", SCHEDULER_POLICIES)
def test_a_replay_through_the_scheduler_keeps_the_report_and_the_racks_in_step(method: str, policy: str) -> None:
    topology = nvl72_racks(2, trays_per_rack=6, gpus=4)
    trace = synthetic_gangs(topology, seed=3, jobs=30)
    scheduled = run_gangs(topology, trace, policy, 1, method)  # RackState.bind checks every placement
    replay = run_gangs(topology, trace, "clique-aware", 1, method, via_scheduler=False)
    assert (scheduled.pop("placement"), replay.pop("placement")) == ("scheduler", "replay")
    assert scheduled.keys() == replay.keys()
    assert scheduled["jobs"] == replay["jobs"] and scheduled["never_fits"] == replay["never_fits"]
    assert scheduled["started"] + scheduled["not_started"] == scheduled["jobs"]
    if policy != "clique-blind":
        assert scheduled["degraded"] == 0  # never spans cliques
    if method == "events":
        assert scheduled["series"]["allocation_ratio"][-1] == 0  # every GPU back at the end
    again = run_gangs(topology, trace, policy, 1, method)  # the seed decides the ties: the same report
    for report in (again, scheduled):
        for key in ("seconds", "cpu_seconds", "placement"):
            report.pop(key, None)
    assert again == scheduled


def test_each_policy_goes_where_it_has_a_rule() -> None:
    topology = nvl72_racks(1, trays_per_rack=2, gpus=4)
    trace = synthetic_gangs(topology, seed=1, jobs=5)
    with pytest.raises(GangSimulationError, match="the scheduler places only clique-aware, clique-blind, clique-affinity"):
        run_gangs(topology, trace, "clique-blind-binpack", 1, "events", via_scheduler=True)
    with pytest.raises(GangSimulationError, match="the replay's own rules place only clique-aware, clique-blind-binpack"):
        run_gangs(topology, trace, "clique-blind", 1, "events", via_scheduler=False)
    assert run_gangs(topology, trace, "clique-blind-binpack", 1, "events")["placement"] == "replay"
    assert run_gangs(topology, trace, "clique-affinity", 1, "events")["placement"] == "scheduler"


def test_simulate_gang_placement_on_the_command_line(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from gpudra.cli import cli
    from gpudra.simulate.nvl72 import gangs_csv

    gangs = tmp_path / "gangs.csv"
    gangs.write_text(gangs_csv(synthetic_gangs(nvl72_racks(1), 3, jobs=20)))
    args = ["simulate", "--workload", "nvl72", "--racks", "1", "--gangs", str(gangs), "-o", "json"]
    result = CliRunner().invoke(cli, [*args, "--policy", "all"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["policy"], r["placement"]) for r in rows] == [
        ("clique-aware", "scheduler"), ("clique-blind", "scheduler"), ("clique-blind-binpack", "replay"),
        ("clique-affinity", "scheduler")]
    replay = CliRunner().invoke(cli, [*args, "--gang-placement", "replay"])
    assert replay.exit_code == 2 and "error: --gang-placement replay places only clique-aware" in replay.output
    refused = CliRunner().invoke(cli, [*args, "--gang-placement", "scheduler", "--policy", "clique-blind-binpack"])
    assert refused.exit_code == 2 and "error: --gang-placement scheduler places only" in refused.output
    elsewhere = CliRunner().invoke(cli, ["simulate", "--gang-placement", "scheduler"])
    assert elsewhere.exit_code == 2 and "apply to --workload nvl72" in elsewhere.output
