"""The discovery interface shared by the `nvml` and `simulated` backends.

Besides reporting an `Inventory`, a backend can change MIG state, which the driver
needs for dynamic MIG (create a GPU instance + compute instance at a placement when a
claim is prepared, destroy it on unprepare) and for start-up cleanup of MIG devices
no prepared claim owns.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from .health import HealthMonitor
from .model import DiscoveryError, Inventory, MigDevice, MigProfileInfo

class MigError(DiscoveryError):
    """A MIG operation failed (placement taken, unknown profile, MIG mode cannot change…)."""


class GpuBackend(ABC):
    name: str = "?"

    @abstractmethod
    def inventory(self) -> Inventory:
        """Current view of the node's GPUs, including existing MIG devices."""

    @abstractmethod
    def mig_profiles(self, minor: int) -> tuple[MigProfileInfo, ...]:
        """GPU-instance profiles (C == G) available on the GPU with this minor; empty if not MIG capable."""

    @abstractmethod
    def set_mig_mode(self, minor: int, enabled: bool) -> None:
        """Enable/disable MIG mode. Raises MigError when the change needs a GPU reset (Ampere)
        or when disabling with MIG devices still present."""

    @abstractmethod
    def create_mig_device(self, minor: int, gi_profile_id: int, placement_start: int) -> MigDevice:
        """Create a GPU instance with `gi_profile_id` at `placement_start` plus one compute instance
        spanning it. Enables MIG mode first on GPUs that can switch without a reset (Hopper+).
        Raises MigError if the placement is invalid or overlaps an existing instance."""

    @abstractmethod
    def destroy_mig_device(self, minor: int, gi_id: int) -> bool:
        """Destroy the compute instances and the GPU instance `gi_id`. Returns False when it was
        already gone (callers rely on this being idempotent)."""

    def find_mig_device(self, minor: int, gi_profile_id: int, placement_start: int) -> MigDevice | None:
        gpu = self.inventory().gpu_by_minor(minor)
        if gpu is None:
            return None
        for mig in gpu.mig_devices:
            if mig.gi_profile_id == gi_profile_id and mig.placement_start == placement_start:
                return mig
        return None

    def open_health_monitor(self) -> HealthMonitor | None:
        """A source of GPU health events (XID, ECC, fallen off the bus); None when the backend has none."""
        return None

    def close(self) -> None:  # noqa: B027 - optional: only backends holding library handles override it
        """Release library handles."""
