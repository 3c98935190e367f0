"""Which two device records the driver refuses to hand to two claims at once (`gpudra.gpuplugin.state._conflicts`).

The facts are NVIDIA's MIG placements (MIG user guide, A100 40GB: an instance occupies memory slices
[start, start + size) of the GPU's 8): two instances on one GPU collide exactly when those ranges overlap, and the
full GPU collides with every instance on it. Records as the driver keeps them: `slices` is [start, end) or None
for a full GPU.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpudra.gpuplugin.state import _conflicts
from gpudra.kubeletplugin.prepared import ReservedDevice


def _mig(minor: int, start: int, size: int, name: str = "") -> ReservedDevice:
    return ReservedDevice(device=name or f"gpu-{minor}-mig-{start}-{size}", gpu_minor=minor,
                          slices=(start, start + size), mig=None)


def _gpu(minor: int) -> ReservedDevice:
    return ReservedDevice(device=f"gpu-{minor}", gpu_minor=minor, slices=None, mig=None)


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
    assert _conflicts(gpu, replace(gpu))
    assert not _conflicts(replace(gpu, admin_access=True), gpu)
    assert not _conflicts(replace(gpu, share_id="a"), replace(gpu, share_id="b"))  # consumable capacity
    assert _conflicts(replace(gpu, share_id="a"), replace(gpu, share_id="a"))
