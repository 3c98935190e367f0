"""The simulated discovery backend reports the catalog's MIG facts (on hardware, NVML wins)."""

from __future__ import annotations

import pytest

from gpudra.catalog import find_gpu_model

from gpudra.discovery import backends as backend_module  # noqa: E402
from gpudra.discovery import profiles as profiles_module  # noqa: E402

MIG_NODE_PROFILES = ["dgx-h100", "dgx-h200", "dgx-b200", "hgx-a100", "h100-nvl-pair", "a30-mig", "a100-40gb-node"]


@pytest.mark.parametrize("node_profile", [p for p in MIG_NODE_PROFILES if p in profiles_module.PROFILES])
def test_simulated_backend_reports_catalog_profiles(node_profile):
    backend = backend_module.open_backend("simulated", profile=node_profile)
    try:
        inventory = backend.inventory()
        checked = 0
        for gpu in inventory.gpus:
            if not gpu.mig_capable:
                continue
            model = find_gpu_model(gpu.product_name)
            assert model is not None, gpu.product_name
            reported = {p.name: p for p in backend.mig_profiles(gpu.minor)}
            assert set(reported) == {p.name for p in model.profiles}
            for profile in model.profiles:
                seen = reported[profile.name]
                assert seen.gi_profile_id == profile.profile_id
                assert (seen.compute_slices, seen.memory_slices) == (profile.compute_slices, profile.memory_slices)
                assert tuple(seen.placement_starts) == tuple(p.start for p in profile.placements)
                assert seen.memory_mib == profile.memory_mib
                for ours, theirs in ((profile.multiprocessors, seen.multiprocessors),
                                     (profile.copy_engines, seen.copy_engines),
                                     (profile.decoders, seen.decoders),
                                     (profile.jpeg_engines, seen.jpeg_engines),
                                     (profile.ofa_engines, seen.ofa_engines)):
                    if ours is not None:  # None: unknown to the catalog
                        assert theirs == ours, profile.name
            checked += 1
        assert checked
    finally:
        backend.close()


def test_static_mig_layouts_of_node_profiles_are_feasible():
    from gpudra.mig.placement import find_placement

    for profile in profiles_module.PROFILES.values():
        for slot in profile.gpus:
            if not slot.mig:
                continue
            model = find_gpu_model(slot.model)
            counts: dict[str, int] = {}
            placements = []
            for name, start in slot.mig:
                placements.append(model.profile(name).placement_at(start))  # a real placement of that profile
                counts[name] = counts.get(name, 0) + 1
            for i, a in enumerate(placements):
                assert not any(a.overlaps(b) for b in placements[i + 1:]), (profile.name, slot.mig)
            assert find_placement(model, counts).feasible, (profile.name, slot.mig)
