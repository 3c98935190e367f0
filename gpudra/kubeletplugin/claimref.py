"""What the kubelet names a claim by, and the one error a driver reports back per claim.

Every kubelet plugin (the GPU plugin, the compute-domain plugin) answers NodePrepareResources per claim: the claim's
namespace, name and UID (k8s.io/kubelet/pkg/apis/dra/v1 `Claim`), and either its devices or an error string.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudra.errors import GpudraError


class PrepareError(GpudraError):
    """A per-claim failure reported back to the kubelet in the claim's `error`."""


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"
