"""MIG: dynamic MIG partitionable devices (`dynamic`), mig-parted configs (`config`), placement
feasibility (`placement`), and the layout planner (`planner`, reading claims through `demands`). The GPU
models and their MIG profiles are the GPU catalog's (`gpudra.catalog`)."""

from gpudra.catalog import (
    GpuModel,
    MigProfile,
    Placement,
    UnknownGpuModel,
    UnknownMigProfile,
    find_gpu_model,
    gpu_model,
    mig_models,
)

__all__ = [
    "GpuModel",
    "MigProfile",
    "Placement",
    "UnknownGpuModel",
    "UnknownMigProfile",
    "find_gpu_model",
    "gpu_model",
    "mig_models",
]
