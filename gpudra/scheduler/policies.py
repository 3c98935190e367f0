"""The scoring policies by name (`schedule --policy`): kube-scheduler's own, binpack, spread, and FGD's
fragmentation adapted to DRA. Above both scoring.py (the Policy interface and the simple policies) and
fragmentation.py (which builds on that interface)."""

from __future__ import annotations

from .fragmentation import FragmentationPolicy
from .scoring import BinpackPolicy, KubePolicy, Policy, SpreadPolicy

POLICIES = ("kube", "binpack", "spread", "fragmentation")


def get_policy(name: "str | Policy") -> Policy:
    if isinstance(name, Policy):  # a policy object from elsewhere (gpudra.simulate's paper policies)
        return name
    if name == "kube":
        return KubePolicy()
    if name == "binpack":
        return BinpackPolicy()
    if name == "spread":
        return SpreadPolicy()
    if name == "fragmentation":
        return FragmentationPolicy()
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
