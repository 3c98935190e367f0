"""A queue run keeps Python's cycle collector out of the way and puts it back as it found it."""

from __future__ import annotations

import gc
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from large_cluster import build_objects  # noqa: E402

from gpudra.api.load import freeze_input, thaw_input  # noqa: E402
from gpudra.scheduler import Scheduler  # noqa: E402
from gpudra.controllers import ManagedCluster


def _collections() -> list[int]:
    return [generation["collections"] for generation in gc.get_stats()]


def test_a_run_collects_nothing_not_even_when_the_collector_comes_back():
    threshold = gc.get_threshold()
    cluster = ManagedCluster(build_objects(4, 40))
    scheduler = Scheduler(cluster)
    freeze_input()  # as a CLI command does with what it read
    gc.set_threshold(50)  # dozens of collections in this run, unless paused
    try:
        gc.collect(0)
        before = _collections()
        results = scheduler.run()
        assert _collections() == before  # none while the run was paused, none when the collector came back
        assert gc.isenabled()
        assert len(results) == 40 and any(result.scheduled for result in results)
    finally:
        thaw_input()
        gc.set_threshold(*threshold)


def test_without_a_frozen_input_nothing_is_frozen_and_a_disabled_collector_stays_disabled():
    cluster = ManagedCluster(build_objects(4, 10))
    gc.disable()
    try:
        Scheduler(cluster).run()
        assert not gc.isenabled()
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


_REPLAY_GARBAGE = """
import gc, sys
from large_cluster import build_objects
from gpudra.explain import simulate

objects = build_objects(6, 30)
simulate.run_until(simulate.working_copy(objects), "default/too-big")  # first-use imports and caches
gc.collect()
run = simulate.run_until(simulate.working_copy(objects), "default/too-big")
assert run.result is not None and not run.result.scheduled
del run
print(gc.collect())
"""


def test_a_replay_leaves_no_cyclic_garbage_so_pausing_the_collector_keeps_nothing_alive():
    # In a fresh interpreter: threads other tests of this process left running (servers, watchers) make garbage
    # of their own between the two collections.
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "benchmarks")])}
    done = subprocess.run([sys.executable, "-c", _REPLAY_GARBAGE], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]
