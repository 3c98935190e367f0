"""Replay GPU cluster traces (the openb trace of the FGD paper, bundled) through gpudra's scheduler and allocator.

    from gpudra.simulate import bundled_trace, run_experiment
    result = run_experiment(bundled_trace("default"), policy="fgd", seed=42)   # an ExperimentResult
    result.allocation_ratio, result.to_json()                                   # its figures; its JSON form
"""

from .engine import ALL_POLICIES, DEFAULT_TUNE, METHODS, SimulationError, run_experiment
from .results import ExperimentResult
from .trace import BUNDLED_TRACES, DEFAULT_TRACE, Trace, TraceError, bundled_trace, load_trace

__all__ = [
    "ALL_POLICIES",
    "BUNDLED_TRACES",
    "DEFAULT_TRACE",
    "DEFAULT_TUNE",
    "ExperimentResult",
    "METHODS",
    "SimulationError",
    "Trace",
    "TraceError",
    "bundled_trace",
    "load_trace",
    "run_experiment",
]
