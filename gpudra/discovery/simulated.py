"""Simulated GPUs built from the model catalog and a node profile.

MIG state (mode + GPU/compute instances) is mutable through the `GpuBackend` MIG API.
With a `state_path` that state lives in a JSON file guarded by a lock file, so it
survives a driver crash exactly like real GPU state would, and several processes (a
driver and a test checking it) see the same "hardware".
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import threading
import uuid
from contextlib import contextmanager
from typing import Any, Iterator

from gpudra.atomicfile import ensure_dir, write_atomic
from gpudra.regularfile import UnsafeFileError, read_regular_file

from .backend import GpuBackend, MigError
from .health import HealthEventError, SpoolMonitor, spool_dir_for
from .migprofiles import mig_profile, mig_profiles
from .model import Gpu, Inventory, MigDevice, MigProfileInfo
from .profiles import GpuSlot, NodeProfile, gpu_model, node_profile

_HOPPER_OR_LATER = ("Hopper", "Blackwell", "Rubin")
STATE_FILE_MODE = 0o644  # "hardware" state: tests and tools on the node read it
STATE_DIR_MODE = 0o700
MAX_STATE_BYTES = 16 << 20  # every GPU of a node with its MIG devices: a few kB each


class SimulatedBackend(GpuBackend):
    name = "simulated"

    def __init__(self, profile: str | NodeProfile, *, node_name: str = "node", state_path: str | None = None):
        self.profile = profile if isinstance(profile, NodeProfile) else node_profile(profile)
        self.node_name = node_name
        self.state_path = state_path
        self._mutex = threading.Lock()
        self._memory_state: dict[str, Any] | None = None
        self._static = [self._static_gpu(i, slot) for i, slot in enumerate(self.profile.gpus)]
        self._cached: tuple[bytes, Inventory] | None = None
        self.health_monitor: SpoolMonitor | None = None

    @property
    def event_spool(self) -> str | None:
        """Where `gpudra driver inject-event` drops health events for this node (beside the GPU state)."""
        return spool_dir_for(self.state_path) if self.state_path else None

    def gpu_uuid(self, gpu: object) -> str:
        """A GPU named by minor number (int or digits) or UUID, as its UUID; HealthEventError if unknown."""
        text = str(gpu)
        for static in self._static:
            if text == static.uuid or (text.isdigit() and int(text) == static.minor):
                return static.uuid
        raise HealthEventError(f"no GPU {text!r} on this node (minors 0..{len(self._static) - 1})")

    # -- static description -------------------------------------------------------------------
    def _static_gpu(self, index: int, slot: GpuSlot) -> Gpu:
        model = gpu_model(slot.model)
        gpu_uuid = "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.node_name}/{self.profile.name}/{index}"))
        return Gpu(
            index=index,
            minor=index,
            uuid=gpu_uuid,
            product_name=model.product_name,
            brand=model.brand,
            architecture=model.architecture,
            cuda_compute_capability=model.compute_capability,
            memory_bytes=model.memory_bytes,
            pci_bus_id=f"0000:{slot.pci_bus:02x}:00.0",
            pcie_root=f"pci0000:{slot.pci_bus & 0xF0:02x}",
            numa_node=slot.numa_node,
            mig_capable=model.mig_capable,
            model=model.display_name,
            # GPUs of one NVLink fabric clique share the multi-node NVLink domain (as the NVML backend reports it)
            nvlink_domain=self.profile.nvlink_clique
            or (f"{self.node_name}-nvlink-0" if self.profile.nvlink_domain else None),
            nvlink_clique=self.profile.nvlink_clique,
        )

    def _gpu(self, minor: int) -> Gpu:
        if not 0 <= minor < len(self._static):
            raise MigError(f"no GPU with minor {minor} on this node")
        return self._static[minor]

    # -- state persistence --------------------------------------------------------------------
    def _initial_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"version": 1, "profile": self.profile.name, "serial": 0, "gpus": {}}
        for gpu, slot in zip(self._static, self.profile.gpus):
            state["gpus"][str(gpu.minor)] = {"migEnabled": bool(slot.mig), "instances": []}
        for gpu, slot in zip(self._static, self.profile.gpus):
            for profile_name, start in slot.mig or ():
                profile = mig_profile(gpu.model or "", name=profile_name)
                if profile is None:
                    raise MigError(f"profile {self.profile.name}: GPU {gpu.index} ({gpu.model}) has no MIG profile {profile_name}")
                self._create_in_state(state, gpu, profile, start)
        return state

    @contextmanager
    def _locked(self, write: bool) -> Iterator[None]:
        """The lock that guards the state file: this object's mutex and a file lock across processes."""
        with self._mutex:
            assert self.state_path is not None  # only a backend with a state file locks it (see _state)
            ensure_dir(os.path.dirname(os.path.abspath(self.state_path)), STATE_DIR_MODE)
            with open(f"{self.state_path}.lock", "a+") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
                try:
                    yield
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)

    @contextmanager
    def _state(self, write: bool) -> Iterator[dict[str, Any]]:
        """The state, under its lock; written back on exit when `write` (or when it was just created)."""
        if self.state_path is None:
            with self._mutex:
                if self._memory_state is None:
                    self._memory_state = self._initial_state()
                yield self._memory_state
                self._cached = None
            return
        with self._locked(write):
            raw = self._read_raw()
            fresh = raw is None
            state = self._initial_state() if raw is None else self._parse(raw)
            yield state
            if write or fresh:
                self._write_state(state)

    def _read_raw(self) -> bytes | None:
        try:  # never through a symlink, never a FIFO that would block every driver call
            return read_regular_file(self.state_path, MAX_STATE_BYTES)  # type: ignore[arg-type]
        except UnsafeFileError as exc:
            raise MigError(f"simulated GPU state {self.state_path} {exc.problem}") from None

    def _parse(self, raw: bytes) -> dict[str, Any]:
        try:
            state = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than Python's stack
            raise MigError(f"simulated GPU state {self.state_path} is unreadable: {exc}") from None
        profile = state.get("profile") if isinstance(state, dict) else None
        if not isinstance(state, dict) or profile != self.profile.name:
            raise MigError(f"simulated GPU state {self.state_path} belongs to profile {profile!r}, "
                           f"not {self.profile.name!r}")
        return state

    def _write_state(self, state: dict[str, Any]) -> None:
        # Atomic but not fsynced: like GPU state, it must survive a driver crash, not a power cut.
        write_atomic(self.state_path, json.dumps(state, sort_keys=True).encode(),  # type: ignore[arg-type]
                     mode=STATE_FILE_MODE, label="simulated-gpus", fsync=False)

    # -- MIG mechanics on a state dict -------------------------------------------------------------
    def _create_in_state(self, state: dict[str, Any], gpu: Gpu, profile: MigProfileInfo, start: int) -> dict[str, Any]:
        gpu_state = state["gpus"][str(gpu.minor)]
        if start not in profile.placement_starts:
            raise MigError(f"GPU {gpu.minor}: placement start {start} is not valid for profile {profile.name} "
                           f"(valid: {list(profile.placement_starts)})")
        wanted = set(range(start, start + profile.memory_slices))
        used_compute = 0
        for inst in gpu_state["instances"]:
            if wanted & set(range(inst["start"], inst["start"] + inst["size"])):
                raise MigError(f"GPU {gpu.minor}: insufficient resources: placement {start}:{profile.memory_slices} "
                               f"overlaps GPU instance {inst['giId']} ({inst['profile']} at {inst['start']})")
            used_compute += inst["computeSlices"]
        total_compute = max(p.compute_slices for p in mig_profiles(gpu.model or ""))
        if used_compute + profile.compute_slices > total_compute:
            raise MigError(f"GPU {gpu.minor}: insufficient resources: no compute slices left for {profile.name}")
        taken = {inst["giId"] for inst in gpu_state["instances"]}
        gi_id = next(i for i in range(1, 64) if i not in taken)
        state["serial"] += 1
        instance = {
            "giId": gi_id,
            "ciId": 0,
            "giProfileId": profile.gi_profile_id,
            "profile": profile.name,
            "start": start,
            "size": profile.memory_slices,
            "computeSlices": profile.compute_slices,
            "uuid": "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{gpu.uuid}/{state['serial']}")),
        }
        gpu_state["instances"].append(instance)
        gpu_state["instances"].sort(key=lambda i: i["start"])
        return instance

    def _mig_device(self, gpu: Gpu, inst: dict[str, Any]) -> MigDevice:
        profile = mig_profile(gpu.model or "", name=inst["profile"])
        assert profile is not None
        return MigDevice(
            parent_minor=gpu.minor, parent_uuid=gpu.uuid, uuid=inst["uuid"], profile=profile.name,
            gi_profile_id=profile.gi_profile_id, placement_start=inst["start"], placement_size=inst["size"],
            gi_id=inst["giId"], ci_id=inst["ciId"], memory_bytes=profile.memory_bytes,
            multiprocessors=profile.multiprocessors, copy_engines=profile.copy_engines, decoders=profile.decoders,
            encoders=profile.encoders, jpeg_engines=profile.jpeg_engines, ofa_engines=profile.ofa_engines,
        )

    # -- GpuBackend ---------------------------------------------------------------------------------
    def inventory(self) -> Inventory:
        """Current state; the returned object is shared between calls until the state changes (read-only).

        The cache is checked and filled under the state lock, keyed by the very bytes of the state:
        a snapshot taken outside the lock, or a key that a rewrite can repeat (inode numbers are
        reused, mtimes are coarse), lets the driver destroy a MIG device by a stale GPU instance ID."""
        if self.state_path is not None:
            with self._locked(write=False):
                raw = self._read_raw()
                if raw is not None:
                    cached = self._cached
                    if cached is None or cached[0] != raw:
                        cached = self._cached = (raw, self._build_inventory(self._parse(raw)["gpus"]))
                    return cached[1]
        with self._state(write=False) as state:  # in memory, or no state file yet (this creates it)
            return self._build_inventory(state["gpus"])

    def _build_inventory(self, gpu_states: dict[str, Any]) -> Inventory:
        gpus = []
        for static in self._static:
            gpu = copy.copy(static)
            gpu_state = gpu_states[str(gpu.minor)]
            gpu.mig_enabled = bool(gpu_state["migEnabled"])
            gpu.mig_devices = [self._mig_device(static, inst) for inst in gpu_state["instances"]]
            gpus.append(gpu)
        return Inventory(backend=self.name, driver_version=self.profile.driver_version,
                         cuda_driver_version=self.profile.cuda_driver_version, gpus=gpus, profile=self.profile.name)

    def mig_profiles(self, minor: int) -> tuple[MigProfileInfo, ...]:
        gpu = self._gpu(minor)
        return mig_profiles(gpu.model or "") if gpu.mig_capable else ()

    def open_health_monitor(self) -> SpoolMonitor:
        if self.health_monitor is None:
            self.health_monitor = SpoolMonitor(self.event_spool, self.gpu_uuid)
        return self.health_monitor

    def set_mig_mode(self, minor: int, enabled: bool) -> None:
        gpu = self._gpu(minor)
        if not gpu.mig_capable:
            raise MigError(f"GPU {minor} ({gpu.product_name}) is not MIG capable")
        with self._state(write=True) as state:
            gpu_state = state["gpus"][str(minor)]
            if gpu_state["migEnabled"] == enabled:
                return
            if not enabled and gpu_state["instances"]:
                raise MigError(f"GPU {minor}: cannot disable MIG mode while {len(gpu_state['instances'])} MIG devices exist")
            if gpu.architecture not in _HOPPER_OR_LATER:
                raise MigError(f"GPU {minor} ({gpu.architecture}): changing MIG mode requires a GPU reset")
            gpu_state["migEnabled"] = enabled

    def create_mig_device(self, minor: int, gi_profile_id: int, placement_start: int) -> MigDevice:
        gpu = self._gpu(minor)
        if not gpu.mig_capable:
            raise MigError(f"GPU {minor} ({gpu.product_name}) is not MIG capable")
        profile = next((p for p in mig_profiles(gpu.model or "") if p.gi_profile_id == gi_profile_id), None)
        if profile is None:
            raise MigError(f"GPU {minor} ({gpu.product_name}) has no GPU instance profile id {gi_profile_id}")
        with self._state(write=True) as state:
            gpu_state = state["gpus"][str(minor)]
            if not gpu_state["migEnabled"]:
                if gpu.architecture not in _HOPPER_OR_LATER:
                    raise MigError(f"GPU {minor} ({gpu.architecture}): MIG mode is disabled and enabling it needs a reset")
                gpu_state["migEnabled"] = True
            instance = self._create_in_state(state, gpu, profile, placement_start)
        return self._mig_device(gpu, instance)

    def destroy_mig_device(self, minor: int, gi_id: int) -> bool:
        gpu = self._gpu(minor)
        with self._state(write=True) as state:
            gpu_state = state["gpus"][str(minor)]
            before = len(gpu_state["instances"])
            gpu_state["instances"] = [i for i in gpu_state["instances"] if i["giId"] != gi_id]
            removed = len(gpu_state["instances"]) != before
            # Hopper+ leaves MIG mode when the last dynamic instance goes, like the NVIDIA driver does.
            slot = self.profile.gpus[minor]
            if removed and not gpu_state["instances"] and not slot.mig and gpu.architecture in _HOPPER_OR_LATER:
                gpu_state["migEnabled"] = False
        return removed
