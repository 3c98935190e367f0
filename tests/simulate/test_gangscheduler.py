"""The NVL72 gang replay's clique-blind placements through gpudra's scheduler (gpudra.simulate.gangscheduler): the
pods' required anti-affinity (InterPodAffinity) keeps a gang to one pod per tray, a gang places all its pods or
none, and the replay's tray accounting (RackState.bind, which refuses two pods on one tray or a tray without the
GPUs) stays in step with the scheduler's devices over a whole replay."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpudra.simulate.gangreplay import GangSimulationError, run_gangs
from gpudra.simulate.gangscheduler import SchedulerPlacer
from gpudra.simulate.nvl72 import GangJob, nvl72_racks, synthetic_gangs


def test_one_pod_per_tray_even_where_the_gpus_would_fit_on_fewer() -> None:
    topology = nvl72_racks(1, trays_per_rack=2, gpus=4)
    placer = SchedulerPlacer(topology)
    # three 1-GPU pods fit the GPUs of one tray, but the anti-affinity gives each a tray: two trays, no gang
    assert placer.place(GangJob("three", 3, 1)) is None
    assert not placer.cluster.pods and not placer.cluster.claims  # nothing left bound or allocated
    trays = placer.place(GangJob("two", 2, 1))
    assert trays is not None and sorted(trays) == [0, 1]
    # another job's pods may share those trays (the anti-affinity is per job)
    assert placer.place(GangJob("other", 2, 3)) is not None
    assert placer.place(GangJob("full", 1, 1)) is None  # every GPU is taken
    placer.release("two")
    assert placer.place(GangJob("full", 1, 1)) is not None


@pytest.mark.parametrize("method", ["events", "tune"])
def test_a_replay_through_the_scheduler_keeps_the_report_and_the_racks_in_step(method: str) -> None:
    topology = nvl72_racks(2, trays_per_rack=6, gpus=4)
    trace = synthetic_gangs(topology, seed=3, jobs=40)
    replay = run_gangs(topology, trace, "clique-blind", 1, method)
    scheduled = run_gangs(topology, trace, "clique-blind", 1, method, via_scheduler=True)  # RackState.bind checks
    assert scheduled.pop("placement") == "scheduler"
    assert scheduled.keys() == replay.keys()
    assert scheduled["jobs"] == replay["jobs"] and scheduled["never_fits"] == replay["never_fits"]


def test_only_the_blind_policy_goes_through_the_scheduler() -> None:
    topology = nvl72_racks(1, trays_per_rack=2, gpus=4)
    trace = synthetic_gangs(topology, seed=1, jobs=5)
    with pytest.raises(GangSimulationError, match="the scheduler places only clique-blind"):
        run_gangs(topology, trace, "clique-aware", 1, "events", via_scheduler=True)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_scheduler_places_as_the_replay_does_with_ties_to_the_first_tray(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The only difference between the two: the replay breaks equal scores at random (as kube-scheduler's selectHost
    does), gpudra's scheduler to the first node name (tray order here). With the replay's ties sent to the first
    candidate too, every number of the report is the same, placement by placement."""
    topology = nvl72_racks(2, trays_per_rack=6, gpus=4)
    trace = synthetic_gangs(topology, seed=seed, jobs=60)
    scheduled = run_gangs(topology, trace, "clique-blind", seed, "events", via_scheduler=True)
    monkeypatch.setattr(random.Random, "choice", lambda self, candidates: candidates[0])
    replay = run_gangs(topology, trace, "clique-blind", seed, "events")
    for key in ("seconds", "cpu_seconds", "placement"):
        scheduled.pop(key, None), replay.pop(key, None)
    assert scheduled == replay


def test_simulate_gang_placement_scheduler_on_the_command_line(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from gpudra.cli import cli
    from gpudra.simulate.nvl72 import gangs_csv

    gangs = tmp_path / "gangs.csv"
    gangs.write_text(gangs_csv(synthetic_gangs(nvl72_racks(1), 3, jobs=20)))
    args = ["simulate", "--workload", "nvl72", "--racks", "1", "--gangs", str(gangs), "-o", "json"]
    result = CliRunner().invoke(cli, [*args, "--gang-placement", "scheduler"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["policy"], r["placement"]) for r in rows] == [("clique-blind", "scheduler")]
    refused = CliRunner().invoke(cli, [*args, "--gang-placement", "scheduler", "--policy", "clique-aware"])
    assert refused.exit_code == 2 and "error: --gang-placement scheduler places only clique-blind" in refused.output
    elsewhere = CliRunner().invoke(cli, ["simulate", "--gang-placement", "scheduler"])
    assert elsewhere.exit_code == 2 and "apply to --workload nvl72" in elsewhere.output
