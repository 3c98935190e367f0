"""Prepare / unprepare: the node driver's core, crash-safe and idempotent.

Protocol for one claim (serialized per claim; different claims run concurrently):

prepare:   checkpoint `PrepareStarted` (reserves the devices) -> create dynamic MIG devices
           -> write the claim's CDI spec -> checkpoint `PrepareCompleted` -> answer.
unprepare: [checkpoint `UnprepareStarted` when hardware must be undone] -> destroy dynamic MIG
           devices -> remove the CDI spec -> drop the checkpoint entry.

`reconcile()` (run at start) rolls back `PrepareStarted` entries (the kubelet never got an
answer and will retry), finishes `UnprepareStarted` ones, rewrites missing CDI specs of
completed claims (/var/run/cdi is a tmpfs), deletes CDI specs nobody owns and, in dynamic
MIG mode, destroys MIG devices that no completed claim owns (those clean-ups and the quarantine are in
leftovers.py). So a crash at any point loses nothing the kubelet was told and leaks nothing it was not.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import zlib
from dataclasses import replace
from typing import Any, Callable

from gpudra.api.schema.resource import RESULTS_MAX
from gpudra.cdi import ContainerEdits, remove_spec, write_spec
from gpudra.discovery import GpuBackend, Inventory, MigError, parse_mig_canonical_name
from gpudra.discovery.model import DiscoveryError, rfc1123_compliant


from gpudra.kubeletplugin import cdispec
from . import cdiedits

from gpudra.kubeletplugin import claimpaths
from gpudra.kubeletplugin.calls import CallToken
from gpudra.kubeletplugin.claimref import ClaimRef as ClaimRef  # the plugins' shared names, re-exported
from gpudra.kubeletplugin.claimref import PrepareError as PrepareError
from gpudra.kubeletplugin.checkpoint import (Checkpoint, CheckpointVersionError, current_boot_id,
                                             read_checkpoint)
from gpudra.kubeletplugin.prepared import PREPARE_COMPLETED, PREPARE_STARTED, UNPREPARE_STARTED, ReservedDevice
from .records import (GPU_TYPE, MIG_TYPE, VFIO_TYPE, GpuClaimEntry, GpuDevice, MigPlacement, MpsDaemon, SharingRecord,
                      VfioBinding, conflicts)
from gpudra.kubeletplugin.claims import ClaimSource, ClaimSourceError
from gpudra.device_config import GPU_FAMILY, ConfigError, DeviceConfig, IommuConfig, claim_configs, config_for
from gpudra.kubeletplugin.devicemetadata import base_request, cdi_device_id as metadata_cdi_id
from gpudra.kubeletplugin.journal import CheckpointJournal
from gpudra.kubeletplugin.paths import DriverPaths
from .consumableshares import MPS_REFUSED, conflict_message, conflicting_configuration, shares_of_one_device
from .fabricpartitions import FabricManagerError
from .gatedfeatures import PARTITIONED_TYPES, GatedFeatures
from .leftovers import StartupLeftovers
from .featuregates import sharing_gate_error
from .passthrough import NVIDIA_DRIVER, VFIO_DRIVER, Passthrough, PassthroughError
from .sharing import SharingControl, SharingError, apply_claim_sharing, undo_claim_sharing

log = logging.getLogger("gpudra.driver")
_LOCK_STRIPES = 256




_conflicts = conflicts  # tests name it here, where the driver refuses conflicting claims


class DeviceState(GatedFeatures, StartupLeftovers):
    config_family = GPU_FAMILY  # which opaque config kinds this driver decodes (device_config.FAMILY_KINDS)

    def __init__(self, *, driver_name: str, node_name: str, backend: GpuBackend, paths: DriverPaths,
                 claims: ClaimSource, dynamic_mig: bool = False, fsync: bool = True, boot_id: str | None = None,
                 host_edits: ContainerEdits | None = None, sharing: SharingControl | None = None,
                 serialize_lock: str | None = None,
                 sharing_strategies: frozenset[str] = frozenset({"TimeSlicing", "MPS"}),
                 consumable_shares: bool = False, passthrough: Passthrough | None = None):
        self.driver_name = driver_name
        self._init_gated_features(passthrough)  # passthrough, metadata files, partitions (gatedfeatures.py)
        self.consumable_shares = consumable_shares  # NVIDIA's --consumable-shares is on (consumableshares.py)
        self.sharing_strategies = sharing_strategies  # those whose NVIDIA feature gate is on (featuregates.py)
        self.sharing = sharing  # applies time-slicing and MPS (None: configs are only recorded)
        self.node_name = node_name
        self.backend = backend
        self.paths = paths
        self.claims = claims
        self.dynamic_mig = dynamic_mig
        self.boot_id = current_boot_id() if boot_id is None else boot_id
        self.majors = cdispec.read_char_majors() if backend.name == "nvml" else {}
        self.host_edits = host_edits  # the host driver's libraries/binaries/hooks, in every claim spec
        self._stripes = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self.journal = CheckpointJournal(paths.checkpoint, self.boot_id, fsync=fsync, serialize_lock=serialize_lock)
        self._mig_lock = threading.Lock()  # MIG create/destroy on one node is not concurrent in NVML either
        self._releasing: set[str] = set()  # claims whose undo runs now (under journal.lock)
        self._reserved: list[ReservedDevice] = []  # devices of quarantined checkpoint entries
        self._quarantined_uids: set[str] = set()

    @property
    def fsync(self) -> bool:
        """Whether checkpoint and quarantine writes are fsynced (tests and `--no-fsync` turn it off)."""
        return self.journal.fsync

    @fsync.setter
    def fsync(self, value: bool) -> None:
        self.journal.fsync = value

    def _claim_lock(self, uid: str) -> threading.Lock:
        return self._stripes[zlib.crc32(uid.encode()) % _LOCK_STRIPES]

    def checkpoint_snapshot(self) -> dict[str, Any]:
        """The checkpoint's data as JSON (what `gpudra driver status` and tests read)."""
        return self.journal.snapshot()

    def checkpoint(self) -> Checkpoint:
        return self.journal.checkpoint()

    def _spec_name(self, uid: str) -> str:
        """The claim's CDI spec file name (without extension); ClaimPathError for an unusable UID."""
        claimpaths.cdi_spec_path(self.paths.cdi_spec_dir, self.driver_name, uid)
        return cdispec.claim_spec_file_name(self.driver_name, uid)

    def _spec_name_prefix(self) -> str:
        return cdispec.claim_spec_file_name(self.driver_name, "")

    def _mps_dir(self, uid: str) -> str:
        """ClaimPathError for an unusable UID."""
        return claimpaths.uid_path(os.path.join(self.paths.plugin_dir, "mps"), uid)

    @staticmethod
    def _check_ref(ref: ClaimRef) -> None:
        try:
            claimpaths.check_claim_identity(ref.namespace, ref.name, ref.uid)
        except claimpaths.ClaimPathError as exc:
            raise PrepareError(f"invalid claim reference: {exc}") from None

    @staticmethod
    def _check_same_claim(ref: ClaimRef, entry: GpuClaimEntry | None) -> None:
        """A UID the checkpoint holds for another claim is refused: answering with that claim's devices would hand
        one pod another pod's GPU (UIDs are unique in a real cluster; a forged or reused one is an attack)."""
        if entry is None:
            return
        held = (entry.namespace, entry.name)
        if held != (ref.namespace, ref.name):
            raise PrepareError(f"claim UID {ref.uid} is already prepared for ResourceClaim {held[0]}/{held[1]}, "
                               f"not {ref.namespace}/{ref.name}: refused")

    # -- start-up --------------------------------------------------------------------------------
    def reconcile(self) -> dict[str, list[str]]:
        """Bring checkpoint, CDI specs and MIG devices into agreement; returns what was done."""
        self.paths.make_dirs()
        with self.journal.serialized():  # an older driver pod may be mid-prepare: wait for it
            return self._reconcile()

    def _reconcile(self) -> dict[str, list[str]]:
        report: dict[str, list[str]] = {"rolledBack": [], "unprepared": [], "cdiRewritten": [], "cdiRemoved": [],
                                        "migDestroyed": [], "quarantined": []}
        self.paths.make_dirs()
        self.paths.remove_stale_temps()
        with self.journal.lock:
            try:
                loaded = read_checkpoint(self.paths.checkpoint)
            except CheckpointVersionError as exc:
                loaded = self._set_aside_newer_checkpoint(exc)
            if loaded is not None and loaded.node_boot_id and self.boot_id and loaded.node_boot_id != self.boot_id:
                log.warning("node rebooted since the checkpoint was written: forgetting %d claims",
                            len(loaded.claims) + len(loaded.unusable))
                loaded = None
            self.journal.replace(loaded)
            self._quarantine_bad_entries(loaded, report)
            for uid, entry in list(self.journal.claims.items()):
                if entry.state == PREPARE_STARTED:
                    self._undo(uid, entry, lenient=True)
                    del self.journal.claims[uid]
                    report["rolledBack"].append(uid)
                elif entry.state == UNPREPARE_STARTED:
                    self._undo(uid, entry, lenient=True)
                    del self.journal.claims[uid]
                    report["unprepared"].append(uid)
            self.journal.save_now()
            completed = dict(self.journal.claims)
        for uid, entry in completed.items():
            if not self._spec_exists(uid):
                self._write_cdi(uid, entry.devices)
                report["cdiRewritten"].append(uid)
        self._remove_leftovers(completed, report)
        return report

    def _undo(self, uid: str, entry: GpuClaimEntry, lenient: bool = False) -> None:
        """Release whatever a (possibly half-done) prepare of `uid` created. Idempotent. `lenient` (start-up):
        a sharing step that fails is logged instead of raised, so one broken GPU tool does not stop the driver."""
        try:
            self._undo_sharing(uid, entry)
        except SharingError as exc:
            if not lenient:
                raise
            log.error("claim %s: undoing its GPU sharing failed: %s", uid, exc)
        self._deactivate_partition(uid, entry.devices)
        for device in entry.devices:
            mig = device.dynamic_mig
            if mig is not None and device.gpu_minor is not None:
                # Decide under the MIG lock: a claim that starts sharing the device registers in the
                # checkpoint first and then takes this lock to find it, so it either is seen here or
                # finds the device gone and creates a new one.
                with self._mig_lock:
                    if self._mig_shared(uid, device):
                        continue
                    existing = self.backend.find_mig_device(device.gpu_minor, mig.gi_profile_id, mig.start)
                    if existing is not None:
                        self.backend.destroy_mig_device(device.gpu_minor, existing.gi_id)
            if device.vfio is not None and self.passthrough is not None:
                self.passthrough.bus.bind(device.vfio.pci_bus_id, NVIDIA_DRIVER)  # NVIDIA's Unconfigure
        try:
            spec_name = self._spec_name(uid)
        except claimpaths.ClaimPathError:
            return  # no file of ours can carry this UID: prepare refuses such UIDs before writing any
        remove_spec(self.paths.cdi_spec_dir, spec_name)
        if self.metadata is not None:
            try:
                self.metadata.cleanup_claim(entry.namespace, entry.name, uid)
            except claimpaths.ClaimPathError as exc:  # prepare writes no file for such an identity
                log.warning("claim %s: no device metadata to remove: %s", uid, exc)
        # only MPS records create the directory (start-up removes any that no claim owns)
        if any(d.sharing is not None and d.sharing.is_mps for d in entry.devices):
            shutil.rmtree(self._mps_dir(uid), ignore_errors=True)

    # -- sharing (time-slicing, MPS: sharing.py) --------------------------------------------------------
    def _update_entry(self, uid: str, change: Callable[[GpuClaimEntry], GpuClaimEntry]) -> int:
        """Replace the claim's entry by `change(entry)` (entries are frozen); returns the checkpoint version to
        persist."""
        with self.journal.lock:
            self.journal.claims[uid] = change(self.journal.claims[uid])
            return self.journal.changed()

    def _apply_sharing(self, uid: str, devices: tuple[GpuDevice, ...]) -> None:
        if self.sharing is None:
            return

        def record(daemon: MpsDaemon) -> None:  # persisted with PrepareCompleted
            self._update_entry(uid, lambda entry: replace(entry, payload=daemon))

        def capabilities() -> dict[str, str]:  # for multi-user MPS (Volta or newer)
            return {gpu.uuid: gpu.cuda_compute_capability for gpu in self.backend.inventory().gpus}
        apply_claim_sharing(self.sharing, uid, devices, self._mps_dir(uid), record, capabilities)

    def _undo_sharing(self, uid: str, entry: GpuClaimEntry) -> None:
        if self.sharing is None:
            return
        with self.journal.lock:
            held = {d.gpu_uuid for other, e in self.journal.claims.items() if other != uid
                    and other not in self._releasing for d in e.devices if d.gpu_uuid is not None}
        undo_claim_sharing(self.sharing, uid, entry, self._mps_dir(uid), held)

    def _mig_shared(self, uid: str, device: GpuDevice) -> bool:
        """Another claim (admin access) still uses this MIG device: keep it. Claims being
        released at the same time do not count, or two concurrent unprepares would each keep it."""
        if device.mig is None:
            return False
        key = device.mig.key
        with self.journal.lock:
            return any(d.gpu_minor == device.gpu_minor and d.mig.key == key
                       for other_uid, e in self.journal.claims.items()
                       if other_uid != uid and other_uid not in self._releasing
                       for d in e.devices if d.mig is not None)

    # -- prepare ---------------------------------------------------------------------------------
    def prepare(self, ref: ClaimRef, token: CallToken | None = None) -> list[dict[str, Any]]:
        """`token` (from `calls.ClaimCalls`) tells a prepare that outlived its deadline to reserve
        nothing and roll back instead of completing."""
        self._check_ref(ref)
        if self.journal.serialize_lock is not None:
            try:
                read = self._read_claim(ref)  # slow API reads before serializing, as upstream's helper does
            except PrepareError:
                read = None  # fine for a claim prepared already; otherwise read again (and fail) under the lock
            with self.journal.serialized():
                return self._prepare(ref, token, read)
        return self._prepare(ref, token, None)

    def _prepare(self, ref: ClaimRef, token: CallToken | None,
                 read: tuple[dict[str, Any], list[DeviceConfig]] | None) -> list[dict[str, Any]]:
        # The claim's content is hostile input: it is read and decoded before the claim's lock is
        # taken, so however long that takes it holds up no other claim sharing the lock stripe.
        with self.journal.lock:
            entry = self.journal.claims.get(ref.uid)
            completed = entry is not None and entry.completed
        if read is None and not completed:
            read = self._read_claim(ref)
        with self._claim_lock(ref.uid):
            with self.journal.lock:
                entry = self.journal.claims.get(ref.uid)
                self._check_same_claim(ref, entry)
                devices = entry.devices if entry is not None and entry.completed else None
            if devices is not None:
                if not self._spec_exists(ref.uid):  # e.g. /var/run/cdi lost on reboot without a kubelet re-prepare
                    self._write_cdi(ref.uid, devices)
                return self._response(devices)
            if entry is not None:  # a failed earlier attempt in this process: start over cleanly
                self._release(ref.uid, entry)
            return self._prepare_new(ref, read or self._read_claim(ref), token)

    def _read_claim(self, ref: ClaimRef) -> tuple[dict[str, Any], list[DeviceConfig]]:
        """The allocated claim and this driver's decoded configs, within the API's size limits."""
        try:
            claim = self.claims.get(ref.namespace, ref.name)
        except ClaimSourceError as exc:
            raise PrepareError(str(exc)) from None
        if claim is None:
            raise PrepareError(f"ResourceClaim {ref.namespace}/{ref.name} not found")
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            raise PrepareError(f"ResourceClaim {ref.namespace}/{ref.name} has UID {uid}, not {ref.uid}: it was replaced")
        status = claim.get("status")
        allocation = status.get("allocation") if isinstance(status, dict) else None
        if not allocation:
            raise PrepareError(f"ResourceClaim {ref.namespace}/{ref.name} is not allocated")
        devices = allocation.get("devices") or {} if isinstance(allocation, dict) else None
        results = devices.get("results") or [] if isinstance(devices, dict) else None
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise PrepareError(f"ResourceClaim {ref.namespace}/{ref.name}: status.allocation.devices.results "
                               "must be a list of objects")
        if len(results) > RESULTS_MAX:
            raise PrepareError(f"ResourceClaim {ref.namespace}/{ref.name}: at most {RESULTS_MAX} allocation "
                               f"results (has {len(results)})")
        try:
            configs = claim_configs(allocation, self.driver_name, self.config_family)
        except ConfigError as exc:
            raise PrepareError(f"claim {ref.namespace}/{ref.name}: {exc}") from None
        return claim, configs

    def _plan(self, ref: ClaimRef, claim: dict[str, Any], configs: list[DeviceConfig],
              inventory: Inventory) -> list[GpuDevice]:
        allocation = claim["status"]["allocation"]
        planned: list[GpuDevice] = []
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("driver") != self.driver_name:
                continue
            pool, device = result.get("pool"), result.get("device")
            if pool != self.node_name:
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: device {pool}/{device} belongs to pool "
                                   f"{pool!r}, not to this node ({self.node_name})")
            request = str(result.get("request", ""))
            hardware = self._resolve_device(str(device), inventory)
            try:
                config = config_for(configs, request, hardware.type, device)
            except ConfigError as exc:
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: {exc}") from None
            if config and config.sharing and config.sharing.strategy not in self.sharing_strategies:
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: {sharing_gate_error(config.sharing.strategy)}")
            if (config and config.sharing and config.sharing.strategy == "MPS"
                    and (self.consumable_shares or result.get("shareID"))):
                # one claim's MPS daemon would put a GPU other claims hold shares of in EXCLUSIVE_PROCESS mode
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: {MPS_REFUSED}")
            share_id = result.get("shareID")
            vfio = hardware.vfio
            if vfio is not None:  # NVIDIA's DefaultVfioDeviceConfig when the claim has none
                iommu = config.iommu if config and config.iommu else IommuConfig()
                vfio = replace(vfio, backend_policy=iommu.backend_policy, enable_api_device=iommu.enable_api_device)
            planned.append(replace(
                hardware, request=request, request_names=(request.split("/", 1)[0],) if request else (),
                pool=str(pool), admin_access=bool(result.get("adminAccess")),
                sharing=SharingRecord.from_json(config.sharing.to_dict(), str(device))
                if config and config.sharing else None,
                cdi_device_ids=(cdispec.cdi_device_id(self.driver_name, ref.uid, str(device)),),
                share_id=str(share_id) if share_id else None, vfio=vfio))
        if self.metadata is not None:  # upstream's helper adds the metadata device to a request's first device
            first: dict[str, int] = {}
            for index, record in enumerate(planned):
                first.setdefault(base_request(record.request), index)
            for index in first.values():
                record = planned[index]
                planned[index] = replace(record, cdi_device_ids=record.cdi_device_ids + (
                    metadata_cdi_id(self.driver_name, ref.uid, record.request),))
        if any(r.type == VFIO_TYPE for r in planned) and any(r.type != VFIO_TYPE for r in planned):
            # NVIDIA's applyVfioDeviceConfig assumes it: the claim's edits are the VFIO devices' alone
            raise PrepareError(f"claim {ref.namespace}/{ref.name}: VFIO devices cannot share a claim with other "
                               "devices of this driver")
        return planned

    def _resolve_device(self, name: str, inventory: Inventory) -> GpuDevice:
        """The device's hardware facts; `_plan` fills in the allocation's (request, pool, ...)."""
        def hardware(kind: str, gpu_minor: int, gpu_uuid: str, slices: tuple[int, int] | None = None,
                     mig: MigPlacement | None = None, vfio: VfioBinding | None = None) -> GpuDevice:
            return GpuDevice(type=kind, device=name, pool="", request="", request_names=(), admin_access=False,
                                  cdi_device_ids=(), gpu_minor=gpu_minor, gpu_uuid=gpu_uuid, slices=slices, mig=mig,
                                  vfio=vfio)

        function = self.passthrough.function(name) if self.passthrough is not None else None
        if function is not None:
            parent = inventory.gpu_by_minor(function.minor)
            if parent is None or parent.mig_devices:
                raise PrepareError(f"device {name}: its GPU has MIG devices and cannot be passed through")
            return hardware(VFIO_TYPE, function.minor, parent.uuid, vfio=VfioBinding(pci_bus_id=function.address))
        for gpu in inventory.gpus:
            if gpu.name == name:
                if gpu.mig_enabled and gpu.mig_devices and not self.dynamic_mig:
                    raise PrepareError(f"device {name} is in MIG mode; only its MIG devices can be allocated")
                return hardware(GPU_TYPE, gpu.minor, gpu.uuid)
            if not self.dynamic_mig:
                for mig in gpu.mig_devices:
                    if mig.name == name:
                        return hardware(MIG_TYPE, gpu.minor, gpu.uuid,
                                        (mig.placement_start, mig.placement_start + mig.placement_size),
                                        MigPlacement(gi_profile_id=mig.gi_profile_id, start=mig.placement_start,
                                                     size=mig.placement_size, dynamic=False, gi_id=mig.gi_id,
                                                     ci_id=mig.ci_id, uuid=mig.uuid))
        parsed = parse_mig_canonical_name(name)
        if self.dynamic_mig and parsed is not None:
            minor, token, profile_id, start = parsed
            parent = inventory.gpu_by_minor(minor)
            if parent is not None:
                for profile in self.backend.mig_profiles(minor):
                    if (profile.gi_profile_id == profile_id and start in profile.placement_starts
                            and rfc1123_compliant(profile.name.replace(".", "")) == token):
                        return hardware(MIG_TYPE, minor, parent.uuid, (start, start + profile.memory_slices),
                                        MigPlacement(gi_profile_id=profile_id, start=start,
                                                     size=profile.memory_slices, dynamic=True))
        raise PrepareError(f"device {name} does not exist on node {self.node_name}")

    def _prepare_new(self, ref: ClaimRef, read: tuple[dict[str, Any], list[DeviceConfig]],
                     token: CallToken | None) -> list[dict[str, Any]]:
        claim, configs = read
        try:
            inventory = self.backend.inventory()
        except DiscoveryError as exc:
            raise PrepareError(f"GPU discovery failed: {exc}") from None
        planned = self._plan(ref, claim, configs, inventory)
        with self.journal.lock:
            if token is not None and token.abandoned:
                raise PrepareError(f"prepare of claim {ref.namespace}/{ref.name} was abandoned after its deadline")
            for other_uid, other in self.journal.claims.items():
                for mine in planned:
                    for theirs in other.devices:
                        if conflicts(mine, theirs):
                            raise PrepareError(f"device {mine.device} is already allocated to a different claim "
                                               f"({other.namespace}/{other.name}, {other_uid})"
                                               + (f" holding {theirs.device}" if theirs.device != mine.device else ""))
                        if shares_of_one_device(mine, theirs) and conflicting_configuration(mine, theirs):
                            raise PrepareError(conflict_message(mine.device, other_uid))
            for mine in planned:
                for reserved in self._reserved:
                    if conflicts(mine, reserved):
                        raise PrepareError(f"device {mine.device} is reserved by a quarantined checkpoint entry "
                                           f"(see {self.paths.quarantine})")
            entry = GpuClaimEntry(state=PREPARE_STARTED, namespace=ref.namespace, name=ref.name, devices=tuple(planned))
            self.journal.claims[ref.uid] = entry
            version = self.journal.changed()
        # The in-memory entry already reserves the devices. It must reach the disk before hardware
        # changes; without them a crash leaves at most a CDI spec, which reconcile removes.
        # metadata files live outside the CDI directory reconcile sweeps: only a recorded entry finds them again
        if self.metadata is not None or self._changes_hardware(entry):
            self.journal.persist(version)
        try:
            self._activate_partition(entry.devices)
            devices = self._create_hardware(ref, entry.devices)
            if devices != entry.devices:  # dynamic MIG devices now have their instance IDs
                self._update_entry(ref.uid, lambda entry: replace(entry, devices=devices))
            self._apply_sharing(ref.uid, devices)
            if devices:
                self._write_cdi(ref.uid, devices)
                self._write_metadata(ref, claim, devices)
        except Exception as exc:  # whatever failed, a failed prepare keeps no reservation
            self._roll_back(ref.uid, entry)
            if not isinstance(exc, (PrepareError, MigError, DiscoveryError, OSError, SharingError, PassthroughError,
                                    claimpaths.ClaimPathError, FabricManagerError)):
                raise
            raise PrepareError(f"preparing claim {ref.namespace}/{ref.name}: {exc}") from None
        if token is not None and not token.commit():
            self._roll_back(ref.uid, entry)
            raise PrepareError(f"prepare of claim {ref.namespace}/{ref.name} was abandoned after its deadline")
        self.journal.persist(self._update_entry(ref.uid, lambda entry: replace(entry, state=PREPARE_COMPLETED)))
        self._siblings_changed(devices)
        return self._response(devices)

    def _changes_hardware(self, entry: GpuClaimEntry) -> bool:
        """Whether preparing (or unpreparing) the entry changes the node, so the checkpoint must say so first:
        dynamic MIG devices, applied sharing, a GPU bound to vfio-pci, a Fabric Manager partition."""
        return any(d.dynamic_mig is not None or (d.sharing is not None and self.sharing is not None)
                   or d.vfio is not None or (self.fabric is not None and d.type in PARTITIONED_TYPES)
                   for d in entry.devices)

    def _roll_back(self, uid: str, started: GpuClaimEntry) -> None:
        with self.journal.lock:
            entry = self.journal.claims.get(uid, started)  # with what the prepare recorded since (MPS daemon)
        self._release(uid, entry, lenient=True)  # the prepare's own error is the one to report
        with self.journal.lock:
            version = self.journal.changed()
        self.journal.persist(version)

    def _release(self, uid: str, entry: GpuClaimEntry, lenient: bool = False) -> None:
        """Undo `uid` and drop its entry; while that runs, other releases do not count it as a holder."""
        with self.journal.lock:
            self._releasing.add(uid)
        try:
            self._undo(uid, entry, lenient)
            with self.journal.lock:
                self.journal.claims.pop(uid, None)
        finally:
            with self.journal.lock:
                self._releasing.discard(uid)

    def _create_hardware(self, ref: ClaimRef, planned: tuple[GpuDevice, ...]) -> tuple[GpuDevice, ...]:
        """Create what the devices need; returns them as created (a dynamic MIG device with its IDs)."""
        created = []
        for record in planned:
            mig = record.dynamic_mig
            if mig is not None and record.gpu_minor is not None:
                with self._mig_lock:
                    device = self.backend.find_mig_device(record.gpu_minor, mig.gi_profile_id, mig.start)
                    if device is None:
                        device = self.backend.create_mig_device(record.gpu_minor, mig.gi_profile_id, mig.start)
                record = replace(record, mig=replace(mig, gi_id=device.gi_id, ci_id=device.ci_id, uuid=device.uuid))
            elif record.type == GPU_TYPE and self.dynamic_mig and record.gpu_minor is not None:
                gpu = self.backend.inventory().gpu_by_minor(record.gpu_minor)
                if gpu is not None and gpu.mig_enabled and not gpu.mig_devices:
                    with self._mig_lock:
                        self.backend.set_mig_mode(gpu.minor, False)
            if record.vfio is not None and self.passthrough is not None:
                self.passthrough.bus.bind(record.vfio.pci_bus_id, VFIO_DRIVER)  # NVIDIA's VfioPciManager.Configure
            if record.sharing is not None and record.sharing.is_mps:
                for sub in ("pipe", "shm", "log"):
                    os.makedirs(os.path.join(self._mps_dir(ref.uid), sub), exist_ok=True)
            created.append(record)
        return tuple(created)

    def _write_cdi(self, uid: str, devices: tuple[GpuDevice, ...]) -> None:
        unique: dict[str, GpuDevice] = {}
        for device in devices:
            unique.setdefault(device.device, device)
        if not unique:
            return
        vfio = [d for d in unique.values() if d.type == VFIO_TYPE]
        if vfio and self.passthrough is not None:  # _plan lets no other device into a VFIO claim
            write_spec(self.passthrough.claim_spec(self.driver_name, uid, vfio), self.paths.cdi_spec_dir,
                       self._spec_name(uid), fsync=False)
            return
        mig_minors = cdiedits.read_mig_minors() if self.backend.name == "nvml" else None
        spec = cdiedits.claim_spec(self.driver_name, uid, list(unique.values()), majors=self.majors,
                                  mps_dir=self._mps_dir(uid), mig_minors=mig_minors, host_edits=self.host_edits)
        # /var/run/cdi is a tmpfs and reconcile rewrites lost specs from the checkpoint: atomic, no fsync
        write_spec(spec, self.paths.cdi_spec_dir, self._spec_name(uid), fsync=False)

    @staticmethod
    def _response(devices: tuple[GpuDevice, ...]) -> list[dict[str, Any]]:
        """The prepare's answer, in the shape the gRPC layer (plugin.py) turns into the kubelet's message."""
        out = []
        for d in devices:
            item: dict[str, Any] = {"requestNames": list(d.request_names), "poolName": d.pool,
                                    "deviceName": d.device, "cdiDeviceIDs": list(d.cdi_device_ids)}
            if d.share_id:
                item["shareID"] = d.share_id
            out.append(item)
        return out

    # -- unprepare -------------------------------------------------------------------------------
    def unprepare(self, ref: ClaimRef) -> None:
        self._check_ref(ref)
        with self.journal.serialized():
            self._unprepare(ref)

    def _unprepare(self, ref: ClaimRef) -> None:
        with self._claim_lock(ref.uid):
            with self.journal.lock:
                entry = self.journal.claims.get(ref.uid)
                self._check_same_claim(ref, entry)  # a forged reference frees no other claim's devices
                version = 0
                if entry is not None and self._changes_hardware(entry) and entry.state != UNPREPARE_STARTED:
                    entry = replace(entry, state=UNPREPARE_STARTED)
                    self.journal.claims[ref.uid] = entry
                    version = self.journal.changed()
            if entry is None:
                remove_spec(self.paths.cdi_spec_dir, self._spec_name(ref.uid))  # stray file from an old crash
                return
            if version:
                self.journal.persist(version)
            try:
                self._release(ref.uid, entry)
            except (MigError, DiscoveryError, OSError, SharingError, PassthroughError, FabricManagerError) as exc:
                raise PrepareError(f"unpreparing claim {ref}: {exc}") from None
            with self.journal.lock:
                version = self.journal.changed()
            self.journal.persist(version)
            self._siblings_changed(entry.devices)
