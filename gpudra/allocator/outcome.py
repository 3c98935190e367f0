"""What one allocate() call answers, and the limits and messages every stage of the search shares (the
Allocator, the claim plans, the search and the result builder all raise or return these)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpudra.errors import GpudraError

# upstream's resourceapi.AllocationResultsMaxSize: at most 32 devices in one claim's allocation
MAX_RESULTS_PER_CLAIM = 32
# kube-scheduler's message for a node whose Filter ran out of time
TIMED_OUT = "timed out trying to allocate devices"

class AllocationError(GpudraError):
    """Fatal for the whole allocate() call (upstream returns an error)."""

    def __init__(self, message: str, node_local: bool = False):
        super().__init__(message)
        self.node_local = node_local


@dataclass
class AllocationOutcome:
    outcome: str  # "allocated" | "unallocatable" | "error"
    allocations: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    error_node_local: bool = False
    # "allocated" without allocations: `allocate(build=False)`, or `fits` (which may answer from another node
    # in the same device state); `allocate` on this node would find some
    deferred: bool = False

    @property
    def allocated(self) -> bool:
        return self.outcome == "allocated"
