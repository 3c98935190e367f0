"""MIG: profile catalog (`catalog`), dynamic MIG partitionable devices (`dynamic`), mig-parted configs
(`config`), placement feasibility (`placement`), and the layout planner (`planner`, reading claims
through `demands` and `selectors`)."""

from gpudra.mig.catalog import (
    MODELS,
    MigGpuModel,
    MigProfile,
    Placement,
    UnknownGpuModel,
    UnknownMigProfile,
    find_gpu_model,
    gpu_model,
)

__all__ = [
    "MODELS",
    "MigGpuModel",
    "MigProfile",
    "Placement",
    "UnknownGpuModel",
    "UnknownMigProfile",
    "find_gpu_model",
    "gpu_model",
]
