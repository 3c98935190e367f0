"""One name per algorithm (issue 31): the simulator's FGD with the hosting-reserve tie-break is `fgd-reserve`
(and `fgd-reserve-online`); `fragmentation` is only the scheduler's policy (FGD adapted to DRA, allocator
searches per workload class), which `gpudra schedule` and `simulate -f` run. The simulator's old names are refused
with the new one, never silently run as the other algorithm."""

from __future__ import annotations

import pytest

from gpudra.scheduler.scoring import POLICIES as SCHEDULER_POLICIES
from gpudra.simulate.engine import ALL_POLICIES, KNOWN_POLICIES, SimulationError, run_experiment
from gpudra.simulate.policies import FgdReservePolicy, paper_policy_class

from test_simulate import NODES_CSV, PODS_CSV, _cli, small_trace


@pytest.mark.parametrize("old, new", [("fragmentation", "fgd-reserve"),
                                      ("fragmentation-online", "fgd-reserve-online")])
def test_the_old_simulator_name_is_a_usage_error_naming_the_new_one(tmp_path, old, new):
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    done = _cli("--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                "--policies", f"fgd,{old}", "-j", "1", "-o", "json")
    assert done.returncode == 2
    assert done.stdout == ""  # nothing ran, not even fgd
    assert done.stderr.startswith(f"error: policy '{old}' was renamed '{new}'"), done.stderr
    assert "Traceback" not in done.stderr


def test_the_library_refuses_the_old_name_too():
    with pytest.raises(SimulationError, match="renamed 'fgd-reserve'"):
        run_experiment(small_trace(2), "fragmentation", 42)


def test_each_name_is_one_algorithm():
    assert paper_policy_class("fgd-reserve") is FgdReservePolicy
    assert "fragmentation" in SCHEDULER_POLICIES  # the scheduler's own, unchanged
    assert "fragmentation" not in KNOWN_POLICIES and "fragmentation-online" not in KNOWN_POLICIES
    assert "fgd-reserve" in ALL_POLICIES and "fgd-reserve-online" in KNOWN_POLICIES

