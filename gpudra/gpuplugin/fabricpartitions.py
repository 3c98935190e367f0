"""Fabric Manager partitions on NVSwitch systems (NVIDIA's `FabricManagerPartitioning` gate), simulated.

Learned from kubernetes-sigs/dra-driver-nvidia-gpu (commit 95932046):
* `pkg/fabricmanager/manager.go` (`Manager`: `recordsPartitions`' checks, `GetPartitionsBySizeByModuleID`,
  `FindPartitionByModuleIDs`, idempotent `ActivatePartition`/`DeactivatePartition`, with their messages);
* `cmd/gpu-kubelet-plugin/deviceinfo.go` `addFabricManagerAttributes`: a full GPU (and its VFIO sibling) carries
  `gpuModuleID` and, per partition size N it belongs to, `partitionN` = that partition's ID, so a claim keeps its
  GPUs in one partition with `matchAttribute: gpu.nvidia.com/partition4`;
* `cmd/gpu-kubelet-plugin/device_state.go` `activateFabricPartition` (prepare: the partition whose members are
  exactly the claim's GPUs, else refused) and `deactivateFabricPartition` (unprepare; skipped while a GPU is still
  shared under consumable shares, and on a set that resolves to no partition).

No NVSwitch system was used. The simulated Fabric Manager keeps its partitions in a JSON file beside the simulated
GPU state; a node's GPUs get module IDs 1..N in PCI order (NVML's nvmlDeviceGetModuleId on HGX boards numbers
them 1..8). Its default table is gpudra's, shaped like an 8-GPU HGX board's: one 8-GPU partition, two of 4, four of
2 and eight of 1 (IDs 0..14).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Any

from gpudra.atomicfile import write_atomic
from gpudra.errors import GpudraError
from gpudra.regularfile import read_regular_file

MAX_TABLE_BYTES = 1 << 20


class FabricManagerError(GpudraError):
    """Fabric Manager refused or a claim's GPUs form no partition."""


@dataclass(frozen=True)
class Partition:
    id: int
    module_ids: tuple[int, ...]
    active: bool = False


def default_partitions(gpu_count: int) -> list[Partition]:
    """Halving partitions over module IDs 1..gpu_count (8: IDs 0..14), numbered biggest first."""
    out: list[Partition] = []
    size = gpu_count
    while size >= 1:
        for start in range(1, gpu_count + 1, size):
            out.append(Partition(len(out), tuple(range(start, min(start + size, gpu_count + 1)))))
        size //= 2
    return out


def check_partitions(partitions: list[Partition]) -> None:
    """NVIDIA's recordsPartitions: no duplicate ID, no empty partition, no module twice in one."""
    seen_ids: set[int] = set()
    for partition in partitions:
        if partition.id in seen_ids:
            raise FabricManagerError(f"fabricmanager: FM returned duplicate partitionId {partition.id}")
        seen_ids.add(partition.id)
        if not partition.module_ids:
            raise FabricManagerError(f"fabricmanager: partition {partition.id} has no GPUs")
        members: set[int] = set()
        for module in partition.module_ids:
            if module in members:
                raise FabricManagerError(f"fabricmanager: partition {partition.id} references gpuModuleID "
                                         f"{module} twice")
            members.add(module)


def partitions_by_size(partitions: list[Partition], module_id: int) -> dict[int, int]:
    """NVIDIA's GetPartitionsBySizeByModuleID: size -> the ID of the partition of that size holding the module."""
    out: dict[int, int] = {}
    for partition in partitions:
        if module_id in partition.module_ids:
            size = len(partition.module_ids)
            if size in out:
                raise FabricManagerError(f"fabricmanager: gpuModuleID {module_id} appears in two partitions of size "
                                         f"{size} ({out[size]} and {partition.id})")
            out[size] = partition.id
    return out


def find_partition(partitions: list[Partition], module_ids: list[int]) -> int | None:
    """NVIDIA's FindPartitionByModuleIDs: the partition whose members are exactly `module_ids` (any order)."""
    wanted = set(module_ids)
    for partition in partitions:
        if wanted and set(partition.module_ids) == wanted and len(partition.module_ids) == len(wanted):
            return partition.id
    return None


def go_int_list(values: list[int]) -> str:
    """Go's %v of an []int: "[1 2 3]"."""
    return "[" + " ".join(map(str, values)) + "]"


class SimulatedFabricManager:
    """The partitions of one simulated node in `path` (JSON); activations are appended to `<path>.log`."""

    def __init__(self, path: str, gpu_count: int):
        self.path = path
        self._lock = threading.Lock()
        if read_regular_file(path, MAX_TABLE_BYTES) is None:
            self._save(default_partitions(gpu_count))
        check_partitions(self.partitions())

    def partitions(self) -> list[Partition]:
        raw = read_regular_file(self.path, MAX_TABLE_BYTES)
        items: list[dict[str, Any]] = json.loads(raw or b"[]")
        return [Partition(int(p["id"]), tuple(int(m) for m in p["gpuModuleIDs"]), bool(p.get("active")))
                for p in items]

    def _save(self, partitions: list[Partition]) -> None:
        data = [{"id": p.id, "gpuModuleIDs": list(p.module_ids), "active": p.active} for p in partitions]
        write_atomic(self.path, json.dumps(data, indent=1).encode(), mode=0o600, label="fabric-partitions",
                     fsync=False, make_dirs=0o700)

    def _set_active(self, partition_id: int, active: bool) -> None:
        """NVIDIA's Activate/DeactivatePartition: an unknown ID is an error, a partition already so is left."""
        with self._lock:
            partitions = self.partitions()
            if partition_id not in {p.id for p in partitions}:
                raise FabricManagerError(f"fabricmanager: unknown partitionId {partition_id}")
            if any(p.id == partition_id and p.active == active for p in partitions):
                return
            self._save([Partition(p.id, p.module_ids, active) if p.id == partition_id else p for p in partitions])
            fd = os.open(self.path + ".log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(f"{'activate' if active else 'deactivate'} {partition_id}\n")

    def activate(self, partition_id: int) -> None:
        self._set_active(partition_id, True)

    def deactivate(self, partition_id: int) -> None:
        self._set_active(partition_id, False)


class FabricPartitioning:
    """What the plugin needs: module IDs by GPU minor, the attributes, and the claim-time partition."""

    def __init__(self, manager: SimulatedFabricManager, module_by_minor: dict[int, int]):
        self.manager = manager
        self.module_by_minor = module_by_minor

    def attributes(self, minor: int) -> dict[str, dict[str, int]]:
        """addFabricManagerAttributes: `gpuModuleID` and `partition<size>` of the GPU with `minor`."""
        module = self.module_by_minor.get(minor)
        if module is None:
            return {}
        attrs = {"gpuModuleID": {"int": module}}
        for size, partition_id in sorted(partitions_by_size(self.manager.partitions(), module).items()):
            attrs[f"partition{size}"] = {"int": partition_id}
        return attrs

    def claim_partition(self, minors: list[int]) -> int:
        """resolveFabricPartition: the partition formed by exactly these GPUs, or FabricManagerError."""
        modules = [self.module_by_minor[m] for m in minors if m in self.module_by_minor]
        found = find_partition(self.manager.partitions(), modules)
        if found is None:
            raise FabricManagerError(f"fabric manager: GPU module set {go_int_list(modules)} does not match any "
                                     "FM partition")
        return found
