"""Which two device records the driver refuses to hand to two claims at once (`gpudra.gpuplugin.state._conflicts`).

The facts are NVIDIA's MIG placements (MIG user guide, A100 40GB: an instance occupies memory slices
[start, start + size) of the GPU's 8): two instances on one GPU collide exactly when those ranges overlap, and the
full GPU collides with every instance on it. Records as the driver keeps them: `slices` is [start, end) or None
for a full GPU.
"""

from __future__ import annotations

import pytest

from gpudra.gpuplugin.state import _conflicts


def _mig(minor: int, start: int, size: int, name: str = "") -> dict:
    return {"device": name or f"gpu-{minor}-mig-{start}-{size}", "gpuMinor": minor, "slices": [start, start + size]}


def _gpu(minor: int) -> dict:
    return {"device": f"gpu-{minor}", "gpuMinor": minor, "slices": None}


@pytest.mark.parametrize("a, b, collide", [
    (_gpu(0), _mig(0, 4, 4), True),  # the full GPU and a 3g.20gb at 4 on it
    (_mig(0, 6, 1), _gpu(0), True),  # ... in either order
    (_gpu(0), _mig(1, 0, 1), False),  # another GPU
    (_gpu(0), _gpu(1), False),
    (_mig(0, 0, 4), _mig(0, 4, 4), False),  # 3g at 0 and 3g at 4: [0,4) and [4,8) touch, no overlap
    (_mig(0, 4, 4), _mig(0, 0, 4), False),
    (_mig(0, 4, 4), _mig(0, 4, 2), True),  # 3g at 4 and 2g at 4
    (_mig(0, 4, 2), _mig(0, 4, 4), True),
    (_mig(0, 0, 8), _mig(0, 6, 1), True),  # 7g (8 slices) and a 1g at 6
    (_mig(0, 6, 1), _mig(0, 0, 8), True),
    (_mig(0, 2, 2), _mig(0, 3, 1), True),  # 2g at 2 and 1g at 3
    (_mig(0, 1, 1), _mig(0, 2, 1), False),  # neighbouring 1g instances
    (_mig(0, 2, 1), _mig(0, 1, 1), False),
    (_mig(0, 0, 4), _mig(1, 0, 4), False),  # same placement, different GPUs
])
def test_two_devices_collide_exactly_when_their_memory_slices_overlap(a, b, collide):
    assert _conflicts(a, b) is collide


def test_the_same_device_collides_unless_shared_by_admin_access_or_share_ids():
    gpu = _gpu(0)
    assert _conflicts(gpu, dict(gpu))
    assert not _conflicts({**gpu, "adminAccess": True}, gpu)
    assert not _conflicts({**gpu, "shareID": "a"}, {**gpu, "shareID": "b"})  # consumable capacity
    assert _conflicts({**gpu, "shareID": "a"}, {**gpu, "shareID": "a"})
