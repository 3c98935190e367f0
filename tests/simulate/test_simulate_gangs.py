"""Multi-node gang jobs on NVL72 racks (issue 25): the placement policies against a brute-force reference on tiny
racks, invariants of placements and replays (hypothesis), a constructed case where clique-blind placement must
lose jobs that clique-aware placement starts, the trace format and `gpudra simulate --workload nvl72`."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra.cli import cli
from gpudra.simulate.gangreplay import run_gangs, size_mix, stranded_for
from gpudra.simulate.gangs import GANG_POLICIES, REPLAY_POLICIES, RackState, fragmented_gpus, place
from gpudra.simulate.nvl72 import (GangJob, GangTrace, TRAYS_PER_NVL72_RACK, gangs_csv, load_gangs, nvl72_racks,
                                   synthetic_gangs)
from gpudra.simulate.trace import TraceError

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


# -- an independent reference: plain lists, every combination of trays ------------------------------------------

def reference_aware(free: list[int], clique: list[int], pods: int, gpus: int) -> tuple[int, ...] | None:
    """Every set of `pods` distinct trays of one clique that each have `gpus` free; the documented best fit: the
    fewest free GPUs left in the clique, then the fewest free GPUs on the chosen trays, then the earlier clique,
    then the lowest tray numbers."""
    best: tuple | None = None
    for trays in itertools.combinations(range(len(free)), pods):
        if len({clique[t] for t in trays}) != 1 or any(free[t] < gpus for t in trays):
            continue
        c = clique[trays[0]]
        left = sum(f for f, k in zip(free, clique) if k == c) - pods * gpus
        key = (left, sum(free[t] for t in trays), c, trays)
        if best is None or key < best:
            best = key
    return None if best is None else best[3]


def reference_any(free: list[int], pods: int, gpus: int) -> bool:
    return any(all(free[t] >= gpus for t in trays) for trays in itertools.combinations(range(len(free)), pods))


@st.composite
def tiny_racks(draw):
    cliques = draw(st.integers(1, 3))
    trays_per_clique = draw(st.integers(1, 4))
    per_tray = draw(st.integers(1, 4))
    topology = nvl72_racks(cliques, trays_per_rack=trays_per_clique, gpus=per_tray)
    free = [draw(st.integers(0, per_tray)) for _ in topology.trays]
    pods = draw(st.integers(1, cliques * trays_per_clique))
    gpus = draw(st.integers(1, per_tray))
    return topology, free, pods, gpus


def _state(topology, free):
    """The state with these free GPUs, reached as a replay reaches it: an empty cluster, then a job per tray
    holding the rest (the index behind a state must follow GPUs going as well as coming back)."""
    state = RackState.empty(topology)
    for tray, gpus in enumerate(free):
        if topology.trays[tray].gpus > gpus:
            state.bind(f"filler-{tray}", (tray,), topology.trays[tray].gpus - gpus)
    assert state.free == list(free)
    return state


@SETTINGS
@given(tiny_racks(), st.integers(0, 2**32))
def test_clique_aware_is_the_brute_force_best_fit(case, seed):
    topology, free, pods, gpus = case
    clique = [topology.cliques.index(t.clique) for t in topology.trays]
    got = place("clique-aware", _state(topology, free), pods, gpus, random.Random(seed))
    expected = reference_aware(free, clique, pods, gpus)
    assert (tuple(sorted(got)) if got else None) == expected


@SETTINGS
@given(tiny_racks(), st.integers(0, 2**32))
def test_every_policy_places_all_pods_or_none_on_distinct_trays_with_room(case, seed):
    topology, free, pods, gpus = case
    clique = [topology.cliques.index(t.clique) for t in topology.trays]
    for policy in REPLAY_POLICIES:  # the replay's own rules (gpudra's scheduler: tests/simulate/test_gangscheduler.py)
        got = place(policy, _state(topology, free), pods, gpus, random.Random(seed))
        if got is None:
            if policy == "clique-blind-binpack":  # it fails only when no trays at all fit
                assert not reference_any(free, pods, gpus)
            if policy == "clique-aware":
                assert reference_aware(free, clique, pods, gpus) is None
            continue
        assert len(got) == pods and len(set(got)) == pods, policy
        assert all(free[t] >= gpus for t in got), policy
        if policy == "clique-aware":
            assert len({clique[t] for t in got}) == 1, policy


@SETTINGS
@given(tiny_racks())
def test_fragmentation_counts_the_free_gpus_of_cliques_too_small(case):
    """Against a plain count: a size's stranded GPUs are the free GPUs of cliques with fewer than `pods` trays
    that have `gpus` free."""
    topology, free, pods, gpus = case
    clique = [topology.cliques.index(t.clique) for t in topology.trays]
    stranded = 0
    for c in set(clique):
        members = [t for t in range(len(free)) if clique[t] == c]
        if sum(1 for t in members if free[t] >= gpus) < pods:
            stranded += sum(free[t] for t in members)
    assert fragmented_gpus(_state(topology, free), {(pods, gpus): 1.0}) == stranded
    assert stranded_for(_state(topology, free), {(pods, gpus)}) == stranded
    assert stranded_for(_state(topology, free), set()) == 0
    # a 1x1 job waiting too: it fits any clique with a free GPU, so only cliques with no free GPU are left
    assert stranded_for(_state(topology, free), {(pods, gpus), (1, 1)}) == 0


@st.composite
def gang_traces(draw):
    cliques = draw(st.integers(1, 3))
    trays = draw(st.integers(1, 4))
    per_tray = draw(st.integers(1, 4))
    topology = nvl72_racks(cliques, trays_per_rack=trays, gpus=per_tray)
    count = draw(st.integers(1, 25))
    jobs = tuple(GangJob(f"j{i}", draw(st.integers(1, cliques * trays + 1)), draw(st.integers(1, per_tray)),
                         draw(st.integers(0, 50)), draw(st.integers(1, 30))) for i in range(count))
    return topology, GangTrace("t", jobs, "hypothesis")


@SETTINGS
@given(gang_traces(), st.integers(0, 1000), st.sampled_from(("events", "tune")), st.integers(0, 40))
def test_replays_account_for_every_job_and_free_everything(case, seed, method, patience):
    topology, trace = case
    for policy in REPLAY_POLICIES:  # through gpudra's scheduler: tests/simulate/test_gangscheduler.py
        r = run_gangs(topology, trace, policy, seed, method, tune=2.0, patience=patience, via_scheduler=False)
        assert r["started"] + r["not_started"] == r["jobs"]
        assert r["started_nvlink"] + r["degraded"] == r["started"]
        assert all(0 <= a <= 100 for a in r["series"]["allocation_ratio"])
        if policy in ("clique-aware", "clique-affinity"):
            assert r["degraded"] == 0  # never spans cliques
        if method == "events":
            assert r["series"]["allocation_ratio"][-1] == 0  # every started job left and gave its GPUs back
            too_big = sum(1 for j in trace.jobs if j.pods > len(topology.trays) // len(topology.cliques))
            assert r["never_fits"] == too_big
        else:
            assert r["never_fits"] <= r["not_started"]


@SETTINGS
@given(gang_traces(), st.integers(0, 1000))
def test_the_index_after_any_binds_and_releases_is_the_index_built_from_scratch(case, seed):
    topology, trace = case
    rng = random.Random(seed)
    state = RackState.empty(topology)
    for job in trace.jobs:
        trays = place("clique-blind-binpack", state, job.pods, job.gpus_per_pod, rng)
        if trays is not None:
            state.bind(job.name, trays, job.gpus_per_pod)
        if state.held and rng.random() < 0.4:
            state.release(rng.choice(sorted(state.held)))
        fresh = RackState(topology, state.free)
        assert (state.clique_free, state.at_least, state.by_free) == (fresh.clique_free, fresh.at_least,
                                                                     fresh.by_free)


def test_bind_refuses_a_pod_on_a_full_tray_or_two_pods_on_one_tray():
    state = RackState.empty(nvl72_racks(1, trays_per_rack=2, gpus=4))
    state.bind("a", (0, 1), 3)
    with pytest.raises(ValueError, match="fewer than 2 free"):
        state.bind("b", (0,), 2)
    with pytest.raises(ValueError, match="two pods on one tray"):
        state.bind("c", (0, 0), 1)
    assert state.free == [1, 1]
    state.release("a")
    assert state.free == [4, 4]


# -- a constructed case: clique-blind must lose a job clique-aware starts ------------------------------------------

def test_clique_blind_spreads_small_jobs_and_strands_the_gang_clique_aware_starts():
    """Two cliques of two trays x 4 GPUs. Four 1-pod x 2-GPU jobs, then one 2-pod x 4-GPU gang, never leaving.
    By hand: clique-aware packs the small jobs onto clique 0's two trays (best fit), leaving clique 1 whole for
    the gang: 5 jobs with NVLink. Kube's default spreads each small job to a tray with the most free GPUs: every
    tray ends with 2 free, and the gang cannot start: 4 jobs. Bin-packing the blind way fills two random trays;
    the gang then starts with NVLink only if they were in one clique."""
    topology = nvl72_racks(2, trays_per_rack=2, gpus=4)
    jobs = tuple(GangJob(f"small-{i}", 1, 2) for i in range(4)) + (GangJob("gang", 2, 4),)
    trace = GangTrace("constructed", jobs, "by hand")
    for seed in range(20):
        aware = _in_order(topology, trace, "clique-aware", seed, via_scheduler=False)
        upstream_aware = _in_order(topology, trace, "clique-aware", seed)
        spread = _in_order(topology, trace, "clique-blind", seed)
        binpack = _in_order(topology, trace, "clique-blind-binpack", seed)
        assert (aware["started_nvlink"], aware["not_started"]) == (5, 0)
        assert (upstream_aware["started_nvlink"], upstream_aware["not_started"]) == (5, 0)
        assert (spread["started_nvlink"], spread["not_started"]) == (4, 1)
        assert binpack["started_nvlink"] <= aware["started_nvlink"]


def _in_order(topology, trace, policy, seed, via_scheduler=None):
    """Submit the jobs in trace order, never leaving (events with one arrival each and endless durations)."""
    timed = GangTrace(trace.name, tuple(GangJob(j.name, j.pods, j.gpus_per_pod, i, 10**6)
                                        for i, j in enumerate(trace.jobs)), trace.source)
    return run_gangs(topology, timed, policy, seed, "events", patience=0, via_scheduler=via_scheduler)


# -- the trace and the racks ----------------------------------------------------------------------------------

def test_nvl72_racks_have_18_trays_of_the_simulated_profile_and_a_clique_each():
    from gpudra.discovery.profiles import GB200_RACK_CLIQUE
    from gpudra.discovery.simulated import SimulatedBackend

    topology = nvl72_racks(3)
    tray_gpus = len(SimulatedBackend("gb200-nvl72").inventory().gpus)
    assert len(topology.trays) == 3 * TRAYS_PER_NVL72_RACK and topology.gpus == 3 * 72 == 3 * 18 * tray_gpus
    assert len(topology.cliques) == 3 and topology.cliques[0] == GB200_RACK_CLIQUE
    assert len({c.split(".")[0] for c in topology.cliques}) == 3  # each rack has its own cluster UUID
    # the same racks as the local cluster's (`gpudra cluster up --racks 3x18`): tray by tray, the same cliques
    from gpudra.cluster.layout import parse_racks

    assert [spec.nvlink_clique for spec in parse_racks("3x18")] == [t.clique for t in topology.trays]
    assert len(nvl72_racks(1, cliques_per_rack=2).cliques) == 2
    with pytest.raises(TraceError, match="does not divide"):
        nvl72_racks(1, cliques_per_rack=4)


def test_the_synthetic_trace_is_seeded_fits_a_clique_and_offers_the_asked_load():
    topology = nvl72_racks(4)
    a, b, c = synthetic_gangs(topology, 1), synthetic_gangs(topology, 1), synthetic_gangs(topology, 2)
    assert a == b and a.jobs != c.jobs
    assert all(1 <= j.pods <= 18 and 1 <= j.gpus_per_pod <= 4 and j.duration >= 60 for j in a.jobs)
    asked = sum(j.gpus * j.duration for j in a.jobs)
    span = a.jobs[-1].arrival - a.jobs[0].arrival
    assert 0.7 < asked / (topology.gpus * span) / 0.9 < 1.4  # offered load 0.9, within the sampling noise
    assert {j.pods for j in a.jobs} <= {1, 2, 4, 8, 16}


def test_a_gang_trace_round_trips_through_csv_and_bad_rows_are_named(tmp_path):
    trace = synthetic_gangs(nvl72_racks(1), 7, jobs=20)
    path = tmp_path / "gangs.csv"
    path.write_text(gangs_csv(trace))
    assert load_gangs(str(path)).jobs == trace.jobs
    path.write_text("name,pods,gpus_per_pod,arrival_s,duration_s\na,2,5,0,10\n")
    with pytest.raises(TraceError, match=r"gangs.csv:2: gpus_per_pod: must be from 1 to 4"):
        load_gangs(str(path))
    path.write_text("name,pods,gpus_per_pod,arrival_s,duration_s\na,2,4,0,10\na,1,1,0,10\n")
    with pytest.raises(TraceError, match="already the name of the job on line 2"):
        load_gangs(str(path))


def test_a_job_size_no_clique_holds_is_not_counted_as_fragmentation():
    topology = nvl72_racks(1, trays_per_rack=2, gpus=4)
    trace = GangTrace("t", (GangJob("too-big", 3, 4, 0, 10), GangJob("fits", 2, 4, 5, 10)), "by hand")
    r = run_gangs(topology, trace, "clique-aware", 1, "events")
    assert (r["never_fits"], r["started"]) == (1, 1)
    assert r["series"]["fragmented_gpus"] == [0.0, 0.0, 0.0]  # the idle clique hosts the only size that can fit


def test_size_mix_weights_sizes_by_their_share_of_the_jobs():
    jobs = [GangJob("a", 2, 4), GangJob("b", 2, 4), GangJob("c", 1, 1), GangJob("d", 4, 4)]
    assert size_mix(jobs) == {(1, 1): 0.25, (2, 4): 0.5, (4, 4): 0.25}


# -- the command ----------------------------------------------------------------------------------------------

def test_simulate_workload_nvl72_prints_one_json_object_per_experiment(tmp_path):
    gangs = tmp_path / "gangs.csv"  # 60 jobs: the scheduler places them (seconds per experiment, not 0.05)
    gangs.write_text(gangs_csv(synthetic_gangs(nvl72_racks(2), 5, jobs=60)))
    result = CliRunner().invoke(cli, ["simulate", "--workload", "nvl72", "--racks", "2", "--seeds", "2",
                                      "--gangs", str(gangs), "--policy", "clique-aware,clique-blind", "-o", "json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["policy"], r["seed"]) for r in rows] == [("clique-aware", 42), ("clique-blind", 42),
                                                        ("clique-aware", 43), ("clique-blind", 43)]
    assert all(r["method"] == "events" and r["gpus"] == 144 and r["cliques"] == 2 for r in rows)
    assert rows[0]["degraded"] == 0 and rows[1]["degraded"] > 0


def test_simulate_workload_nvl72_table_and_out_dir(tmp_path):
    gangs = tmp_path / "gangs.csv"
    gangs.write_text(gangs_csv(synthetic_gangs(nvl72_racks(1), 3, jobs=40)))
    result = CliRunner().invoke(cli, ["simulate", "--workload", "nvl72", "--racks", "1", "--gangs", str(gangs),
                                      "--policy", "all", "--method", "tune", "--tune", "2",
                                      "--out-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    table = [line for line in result.output.splitlines() if line.startswith(("TOPOLOGY", "1x-nvl72"))]
    assert len(table) == 1 + len(GANG_POLICIES) and "NOT-STARTED" in table[0]
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["nvl72-tune-allocation.png", "nvl72-tune-jobs.png", "results.json", "series.csv",
                       "summary.csv"]
    result = CliRunner().invoke(cli, ["simulate", "--workload", "nvl72", "--racks", "1", "--seeds", "2",
                                      "--out-dir", str(tmp_path / "synthetic")])
    assert result.exit_code == 0, result.output
    for seed in (42, 43):  # each generated trace is written, and replays to the same result with --gangs
        again = CliRunner().invoke(cli, ["simulate", "--workload", "nvl72", "--racks", "1", "--seed", str(seed),
                                         "--gangs", str(tmp_path / "synthetic" / f"gangs-seed{seed}.csv"), "-o", "json"])
        assert again.exit_code == 0, again.output
        ran = [r for r in json.loads((tmp_path / "synthetic" / "results.json").read_text()) if r["seed"] == seed]
        replayed = [json.loads(line) for line in again.output.splitlines()]
        keys = ("started", "started_nvlink", "degraded", "not_started", "allocation_ratio", "fragmented_gpus")
        assert [[r[k] for k in keys] for r in replayed] == [[r[k] for k in keys] for r in ran]


@pytest.mark.parametrize("args, message", [
    (["--racks", "2"], "apply to --workload nvl72"),
    (["--workload", "nvl72", "--trace", "default"], "not --trace"),
    (["--workload", "nvl72", "--mode", "device-plugin"], "do not apply"),
    (["--workload", "nvl72", "--policy", "fgd"], "unknown policy 'fgd' for --workload nvl72"),
    (["--workload", "nvl72", "--method", "tune", "--patience", "5"], "--patience applies to --method events"),
    (["--workload", "nvl72", "--tune", "2"], "--tune applies to --method tune"),
    (["--workload", "nvl72", "--racks", "999"], "racks: must be from 1 to 250"),
    (["--workload", "nvl72", "--gangs", "/nonexistent/gangs.csv"], "gangs.csv"),
])
def test_simulate_workload_nvl72_usage_errors(args, message):
    result = CliRunner().invoke(cli, ["simulate", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
