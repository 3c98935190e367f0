"""MIG GPU-instance profiles per catalog GPU model, adapted from `gpudra.catalog`.

The MIG area owns the profile table; discovery only needs the C == G profiles in the
`MigProfileInfo` shape (unknown engine counts become 0 here).
"""

from __future__ import annotations

from functools import lru_cache

from gpudra import catalog as gpu_catalog

from .model import MigProfileInfo


def _info(profile: gpu_catalog.MigProfile) -> MigProfileInfo:
    return MigProfileInfo(
        name=profile.name,
        gi_profile_id=profile.profile_id,
        compute_slices=profile.compute_slices,
        memory_slices=profile.memory_slices,
        memory_mib=profile.memory_mib,
        multiprocessors=profile.multiprocessors or 0,
        copy_engines=profile.copy_engines or 0,
        decoders=profile.decoders or 0,
        encoders=profile.encoders or 0,
        jpeg_engines=profile.jpeg_engines or 0,
        ofa_engines=profile.ofa_engines or 0,
        placement_starts=tuple(p.start for p in profile.placements),
    )


@lru_cache(maxsize=None)
def mig_profiles(model_key: str) -> tuple[MigProfileInfo, ...]:
    """GPU-instance profiles of a GPU model (catalog key, alias or product name); empty without MIG."""
    model = gpu_catalog.find_gpu_model(model_key) if model_key else None
    if model is None:
        return ()
    return tuple(_info(p) for p in model.profiles)


def mig_profile(model_key: str, *, name: str | None = None, gi_profile_id: int | None = None) -> MigProfileInfo | None:
    for profile in mig_profiles(model_key):
        if name is not None:
            if profile.name.lower() == name.lower():
                return profile
        elif gi_profile_id is not None and profile.gi_profile_id == gi_profile_id:
            return profile
    return None
