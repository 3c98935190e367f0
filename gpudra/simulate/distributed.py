"""Sweeps on a Dask distributed cluster, when the cores of one machine are not enough (`gpudra[distributed]`).

    dask scheduler                        # on one machine: prints tcp://HOST:8786
    dask worker tcp://HOST:8786           # on every machine that lends its cores (gpudra installed there too)
    gpudra simulate --dask-scheduler tcp://HOST:8786 --policies all --seeds 10

Each trace is parsed here and sent to the workers once (`Client.scatter`), so traces given as CSV files or
manifests need not exist on the workers; every experiment is one task. Results come back in the order of the
experiment list whatever order they finish in, as with local sweeps, so the output does not depend on where
experiments ran.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from gpudra.errors import GpudraError

from .manifests import Manifests
from .results import ExperimentResult
from .trace import Trace

if TYPE_CHECKING:  # pragma: no cover
    from .sweep import Experiment

CONNECT_TIMEOUT_S = 30


class DistributedError(GpudraError, RuntimeError):
    """The cluster cannot be used (not installed, not reachable); a message for the user."""


def _run_on_worker(trace: "Trace | Manifests", experiment: "Experiment") -> ExperimentResult:
    from .sweep import run_one

    return run_one(trace, experiment)


def run_on_dask(experiments: list["Experiment"], address: str, traces: dict[Any, "Trace | Manifests"],
                results: list[ExperimentResult | None],
                on_done: Callable[[int, int, int, ExperimentResult], None] | None = None) -> None:
    """Run every experiment on the Dask cluster at `address`, filling `results` in experiment order as they end;
    `traces` maps each experiment's source to its parsed trace. Ctrl-C cancels what has not finished."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise DistributedError("--dask-scheduler needs Dask distributed: pip install 'gpudra[distributed]'") from None
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as exc:
        raise DistributedError(f"cannot connect to the Dask scheduler at {address}: {exc}") from None
    futures: dict[Any, int] = {}
    try:
        shared = {source: client.scatter(trace, broadcast=False) for source, trace in traces.items()}
        futures = {
            client.submit(_run_on_worker, shared[experiment.source], experiment, pure=False): index
            for index, experiment in enumerate(experiments)
        }
        for finished, future in enumerate(as_completed(futures), start=1):
            index = futures[future]
            results[index] = result = future.result()
            if on_done is not None:
                on_done(index, finished, len(experiments), result)
    except KeyboardInterrupt:
        client.cancel(list(futures))  # the workers stop them; the cluster stays up for the next sweep
        raise
    finally:
        client.close()
