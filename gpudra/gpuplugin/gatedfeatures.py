"""The GPU plugin's gated node features at prepare time: Fabric Manager partitions, device metadata files and
the siblings passthrough withholds (NVIDIA's FabricManagerPartitioning, DeviceMetadata, PassthroughSupport).

A mixin of `DeviceState` (state.py), kept apart so the prepare/unprepare protocol reads on its own; the facts are
in fabricpartitions.py, gpudra.kubeletplugin.devicemetadata and passthrough.py.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from gpudra.errors import GpudraError
from gpudra.kubeletplugin.claimref import ClaimRef, PrepareError
from gpudra.kubeletplugin.devicemetadata import POD_CLAIM_NAME_ANNOTATION, MetadataDevice, MetadataWriter
from gpudra.kubeletplugin.journal import CheckpointJournal
from .records import GPU_TYPE, VFIO_TYPE, GpuDevice

from .fabricpartitions import FabricManagerError, FabricPartitioning
from .passthrough import Passthrough

log = logging.getLogger("gpudra.driver")
PARTITIONED_TYPES = (GPU_TYPE, VFIO_TYPE)  # NVIDIA partitions full GPUs and passthrough GPUs, never MIG devices


class GatedFeatures:
    """Set up by DeviceState.__init__; all None (off) unless the agent turns a gate on."""

    journal: CheckpointJournal
    driver_name: str
    _releasing: set[str]

    def _init_gated_features(self, passthrough: Passthrough | None) -> None:
        self.passthrough = passthrough  # NVIDIA's PassthroughSupport: gpu-vfio-<i> devices (passthrough.py)
        self.on_devices_changed: Callable[[], None] | None = None  # a sibling was taken or freed: republish
        self.metadata: MetadataWriter | None = None  # NVIDIA's DeviceMetadata gate (KEP-5304 files)
        self.metadata_attributes: Callable[[str], dict[str, Any]] = lambda device: {}  # what a file says of it
        self.fabric: FabricPartitioning | None = None  # NVIDIA's FabricManagerPartitioning gate

    # -- Fabric Manager partitions (fabricpartitions.py) ------------------------------------------------
    @staticmethod
    def _partitioned_minors(records: Sequence[GpuDevice]) -> list[int]:
        """The physical GPUs behind a claim's full-GPU and VFIO devices (NVIDIA's gpuInfosFromPreparedClaim)."""
        return sorted({r.gpu_minor for r in records if r.type in PARTITIONED_TYPES and r.gpu_minor is not None})

    def _activate_partition(self, planned: Sequence[GpuDevice]) -> None:
        """NVIDIA's activateFabricPartition: the partition of exactly the claim's GPUs, or the claim is refused."""
        minors = self._partitioned_minors(planned)
        if self.fabric is None or not minors:
            return
        try:
            partition = self.fabric.claim_partition(minors)
        except FabricManagerError as exc:
            raise PrepareError(f"{exc}; refusing partition activation") from None
        self.fabric.manager.activate(partition)

    def _deactivate_partition(self, uid: str, records: Sequence[GpuDevice]) -> None:
        """NVIDIA's deactivateFabricPartition: not while another claim holds one of the GPUs (a consumable share),
        nor for GPUs that form no partition (a refused prepare activated none)."""
        minors = self._partitioned_minors(records)
        if self.fabric is None or not minors:
            return
        with self.journal.lock:
            held = {d.gpu_minor for other, e in self.journal.claims.items()
                    if other != uid and other not in self._releasing for d in e.devices}
        if held & set(minors):
            log.info("claim %s: its GPUs are still in use by other claims: partition stays active", uid)
            return
        try:
            self.fabric.manager.deactivate(self.fabric.claim_partition(minors))
        except FabricManagerError as exc:
            log.warning("claim %s: %s; skipping partition deactivation", uid, exc)

    def _write_metadata(self, ref: ClaimRef, claim: dict[str, Any], planned: Sequence[GpuDevice]) -> None:
        """The claim's device metadata files (NVIDIA attaches attributes to VFIO devices only)."""
        if self.metadata is None:
            return
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        pod_claim_name = annotations.get(POD_CLAIM_NAME_ANNOTATION) if isinstance(annotations, dict) else None
        devices = [MetadataDevice(r.request, r.pool, r.device,
                                  self.metadata_attributes(r.device) if r.type == VFIO_TYPE else {})
                   for r in planned]
        self.metadata.write_claim(ref.namespace, ref.name, ref.uid,
                                  pod_claim_name if isinstance(pod_claim_name, str) else None, devices)

    def _siblings_changed(self, records: Sequence[GpuDevice]) -> None:
        """With passthrough, a GPU prepared as `gpu` hides its `vfio` sibling and the other way round (NVIDIA's
        RemoveSiblingDevices / discoverSiblingAllocatables): the slices are republished."""
        if self.passthrough is None or self.on_devices_changed is None:
            return
        if any(r.type in (GPU_TYPE, VFIO_TYPE) for r in records):
            try:
                self.on_devices_changed()
            except (GpudraError, OSError) as exc:  # the claim is prepared either way; a later publication catches up
                log.error("republishing after a passthrough change failed: %s", exc)

    def withheld_siblings(self) -> set[str]:
        """Devices not published now: the siblings of prepared GPUs and VFIO devices."""
        if self.passthrough is None:
            return set()
        with self.journal.lock:
            records = [d for e in self.journal.claims.values() for d in e.devices]
        return {name for name in map(self.passthrough.sibling, records) if name}
