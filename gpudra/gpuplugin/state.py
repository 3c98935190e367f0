"""Prepare / unprepare: the node driver's core, crash-safe and idempotent.

Protocol for one claim (serialized per claim; different claims run concurrently):

prepare:   checkpoint `PrepareStarted` (reserves the devices) -> create dynamic MIG devices
           -> write the claim's CDI spec -> checkpoint `PrepareCompleted` -> answer.
unprepare: [checkpoint `UnprepareStarted` when hardware must be undone] -> destroy dynamic MIG
           devices -> remove the CDI spec -> drop the checkpoint entry.

`reconcile()` (run at start) rolls back `PrepareStarted` entries (the kubelet never got an
answer and will retry), finishes `UnprepareStarted` ones, rewrites missing CDI specs of
completed claims (/var/run/cdi is a tmpfs), deletes CDI specs nobody owns and, in dynamic
MIG mode, destroys MIG devices that no completed claim owns. So a crash at any point loses
nothing the kubelet was told and leaks nothing it was not.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import zlib
from typing import Any

from gpudra.api.schema.resource import RESULTS_MAX
from gpudra.cdi import ContainerEdits, remove_spec, write_spec
from gpudra.discovery import GpuBackend, Inventory, MigError, parse_mig_canonical_name
from gpudra.discovery.model import DiscoveryError, rfc1123_compliant


from gpudra.kubeletplugin import cdispec

from gpudra.kubeletplugin import claimpaths
from gpudra.kubeletplugin.calls import CallToken
from gpudra.kubeletplugin.claimref import ClaimRef, PrepareError
from gpudra.kubeletplugin.checkpoint import (PREPARE_COMPLETED, PREPARE_STARTED, UNPREPARE_STARTED, current_boot_id,
                         empty_checkpoint, entry_problem, load_checkpoint)
from gpudra.kubeletplugin.claims import ClaimSource, ClaimSourceError
from gpudra.device_config import GPU_FAMILY, ConfigError, DeviceConfig, IommuConfig, claim_configs, config_for
from gpudra.kubeletplugin.devicemetadata import base_request, cdi_device_id as metadata_cdi_id
from gpudra.kubeletplugin.journal import CheckpointJournal
from gpudra.kubeletplugin.paths import DriverPaths
from gpudra.kubeletplugin.quarantine import load_quarantine, quarantine_entry, save_quarantine
from .consumableshares import MPS_REFUSED, conflict_message, conflicting_configuration
from .fabricpartitions import FabricManagerError
from .gatedfeatures import PARTITIONED_TYPES, GatedFeatures
from .featuregates import sharing_gate_error
from .passthrough import NVIDIA_DRIVER, VFIO_DRIVER, VFIO_TYPE, Passthrough, PassthroughError
from .sharing import SharingControl, SharingError, apply_claim_sharing, undo_claim_sharing

log = logging.getLogger("gpudra.driver")
_LOCK_STRIPES = 256




def _conflicts(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two device records that cannot be handed to two different claims at once."""
    if a.get("adminAccess") or b.get("adminAccess"):
        return False
    if a.get("shareID") and b.get("shareID") and a["shareID"] != b["shareID"]:
        return False  # consumable capacity: one device, several allocations told apart by share ID
    if a["device"] == b["device"]:
        return True
    if a["gpuMinor"] is None or a["gpuMinor"] != b["gpuMinor"]:
        return False  # no GPU (a compute-domain channel or daemon) or another GPU: only the same device conflicts
    if a["slices"] is None or b["slices"] is None:  # a full GPU excludes every MIG device on it
        return True
    return a["slices"][0] < b["slices"][1] and b["slices"][0] < a["slices"][1]


def _shares_of_one_device(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two consumable-capacity shares of the same device (not admin access, which changes nothing there)."""
    return (bool(a.get("shareID")) and bool(b.get("shareID")) and a["device"] == b["device"]
            and not a.get("adminAccess") and not b.get("adminAccess"))


def _changes_hardware(record: dict[str, Any], applies_sharing: bool, partitions: bool = False) -> bool:
    """Whether preparing the record changes the node (so the checkpoint must say so first)."""
    return bool((record.get("mig") or {}).get("dynamic") or (record.get("sharing") and applies_sharing)
                or record.get("type") == VFIO_TYPE or (partitions and record.get("type") in PARTITIONED_TYPES))


class DeviceState(GatedFeatures):
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
        self._reserved: list[dict[str, Any]] = []  # devices of quarantined checkpoint entries
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
        return self.journal.snapshot()

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
    def _check_same_claim(ref: ClaimRef, entry: dict[str, Any] | None) -> None:
        """A UID the checkpoint holds for another claim is refused: answering with that claim's devices would hand
        one pod another pod's GPU (UIDs are unique in a real cluster; a forged or reused one is an attack)."""
        if entry is None:
            return
        held = (entry.get("namespace"), entry.get("name"))
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
            loaded = load_checkpoint(self.paths.checkpoint)
            if loaded is not None and loaded.get("nodeBootID") and self.boot_id and loaded["nodeBootID"] != self.boot_id:
                log.warning("node rebooted since the checkpoint was written: forgetting %d claims", len(loaded["claims"]))
                loaded = None
            self.journal.replace(loaded or empty_checkpoint(self.boot_id))
            self.journal.data["nodeBootID"] = self.boot_id
            self._quarantine_bad_entries(report)
            for uid, entry in list(self.journal.data["claims"].items()):
                if entry["state"] == PREPARE_STARTED:
                    self._undo(uid, entry, lenient=True)
                    del self.journal.data["claims"][uid]
                    report["rolledBack"].append(uid)
                elif entry["state"] == UNPREPARE_STARTED:
                    self._undo(uid, entry, lenient=True)
                    del self.journal.data["claims"][uid]
                    report["unprepared"].append(uid)
            self.journal.save_now()
            completed = dict(self.journal.data["claims"])
        for uid, entry in completed.items():
            if not self._spec_exists(uid):
                self._write_cdi(uid, entry["devices"])
                report["cdiRewritten"].append(uid)
        prefix = self._spec_name_prefix()
        try:
            names = os.listdir(self.paths.cdi_spec_dir)
        except FileNotFoundError:
            names = []
        for name in names:
            # directory entries: one path component each, whatever the (possibly foreign) UID in them
            if name.startswith(prefix) and name.endswith((".yaml", ".json")):
                uid = name[len(prefix):].rsplit(".", 1)[0]
                if uid not in completed and uid not in self._quarantined_uids:
                    try:
                        os.unlink(os.path.join(self.paths.cdi_spec_dir, name))
                    except FileNotFoundError:
                        pass
                    if uid not in report["cdiRemoved"]:
                        report["cdiRemoved"].append(uid)
        if self.dynamic_mig:
            owned = {(d["gpuMinor"], d["mig"]["giProfileId"], d["mig"]["start"])
                     for e in completed.values() for d in e["devices"] if d.get("mig")}
            owned |= {(r["gpuMinor"], r["mig"]["giProfileId"], r["mig"]["start"])
                      for r in self._reserved if r["mig"] and r["gpuMinor"] is not None}
            for gpu in self.backend.inventory().gpus:
                for mig in gpu.mig_devices:
                    if (gpu.minor, mig.gi_profile_id, mig.placement_start) not in owned:
                        with self._mig_lock:
                            self.backend.destroy_mig_device(gpu.minor, mig.gi_id)
                        report["migDestroyed"].append(mig.name)
        mps_root = os.path.join(self.paths.plugin_dir, "mps")
        if os.path.isdir(mps_root):
            for uid in os.listdir(mps_root):
                if uid not in completed and uid not in self._quarantined_uids:
                    shutil.rmtree(os.path.join(mps_root, uid), ignore_errors=True)
        return report

    def _quarantine_bad_entries(self, report: dict[str, list[str]]) -> None:
        """Move entries that cannot be acted on to the quarantine file (written before the checkpoint
        drops them), and reserve what they and earlier quarantined entries hold. `journal.lock` held."""
        path = self.paths.quarantine
        entries = load_quarantine(path)
        known = len(entries)
        for uid, entry in list(self.journal.data["claims"].items()):
            problem = entry_problem(uid, entry)
            if problem is not None:
                quarantine_entry(entries, uid, entry, problem, self.boot_id)
                del self.journal.data["claims"][uid]
                report["quarantined"].append(uid)
        if len(entries) != known:
            save_quarantine(path, entries, fsync=self.fsync)
        current = [item for item in entries if item.get("nodeBootID") in (None, "", self.boot_id)]
        self._reserved = [record for item in current for record in item["reserved"]]
        self._quarantined_uids = {item["uid"] for item in current if isinstance(item.get("uid"), str)}

    def _spec_exists(self, uid: str) -> bool:
        base = os.path.join(self.paths.cdi_spec_dir, self._spec_name(uid))
        return os.path.exists(base + ".yaml") or os.path.exists(base + ".json")

    def _undo(self, uid: str, entry: dict[str, Any], lenient: bool = False) -> None:
        """Release whatever a (possibly half-done) prepare of `uid` created. Idempotent. `lenient` (start-up):
        a sharing step that fails is logged instead of raised, so one broken GPU tool does not stop the driver."""
        try:
            self._undo_sharing(uid, entry)
        except SharingError as exc:
            if not lenient:
                raise
            log.error("claim %s: undoing its GPU sharing failed: %s", uid, exc)
        self._deactivate_partition(uid, entry.get("devices", []))
        for device in entry.get("devices", []):
            mig = device.get("mig")
            if mig and mig.get("dynamic"):
                # Decide under the MIG lock: a claim that starts sharing the device registers in the
                # checkpoint first and then takes this lock to find it, so it either is seen here or
                # finds the device gone and creates a new one.
                with self._mig_lock:
                    if self._mig_shared(uid, device):
                        continue
                    existing = self.backend.find_mig_device(device["gpuMinor"], mig["giProfileId"], mig["start"])
                    if existing is not None:
                        self.backend.destroy_mig_device(device["gpuMinor"], existing.gi_id)
            if device.get("type") == VFIO_TYPE and self.passthrough is not None:
                self.passthrough.bus.bind(device["pciBusID"], NVIDIA_DRIVER)  # NVIDIA's Unconfigure
        try:
            spec_name = self._spec_name(uid)
        except claimpaths.ClaimPathError:
            return  # no file of ours can carry this UID: prepare refuses such UIDs before writing any
        remove_spec(self.paths.cdi_spec_dir, spec_name)
        if self.metadata is not None:
            try:
                self.metadata.cleanup_claim(str(entry.get("namespace")), str(entry.get("name")), uid)
            except claimpaths.ClaimPathError as exc:  # prepare writes no file for such an identity
                log.warning("claim %s: no device metadata to remove: %s", uid, exc)
        # only MPS records create the directory (start-up removes any that no claim owns)
        if any((d.get("sharing") or {}).get("strategy") == "MPS" for d in entry.get("devices", [])):
            shutil.rmtree(self._mps_dir(uid), ignore_errors=True)

    # -- sharing (time-slicing, MPS: sharing.py) --------------------------------------------------------
    def _apply_sharing(self, uid: str, entry: dict[str, Any]) -> None:
        if self.sharing is None:
            return

        def record(daemon: dict[str, Any]) -> None:  # persisted with PrepareCompleted
            with self.journal.lock:
                entry["mpsDaemon"] = daemon

        def capabilities() -> dict[str, str]:  # for multi-user MPS (Volta or newer)
            return {gpu.uuid: gpu.cuda_compute_capability for gpu in self.backend.inventory().gpus}
        apply_claim_sharing(self.sharing, uid, entry["devices"], self._mps_dir(uid), record, capabilities)

    def _undo_sharing(self, uid: str, entry: dict[str, Any]) -> None:
        if self.sharing is None:
            return
        with self.journal.lock:
            held = {d.get("gpuUUID") for other, e in self.journal.data["claims"].items() if other != uid
                    and other not in self._releasing for d in e.get("devices", [])}
        undo_claim_sharing(self.sharing, uid, entry, self._mps_dir(uid), held)

    def _mig_shared(self, uid: str, device: dict[str, Any]) -> bool:
        """Another claim (admin access) still uses this dynamic MIG device: keep it. Claims being
        released at the same time do not count, or two concurrent unprepares would each keep it."""
        key = (device["gpuMinor"], device["mig"]["giProfileId"], device["mig"]["start"])
        with self.journal.lock:
            return any((d["gpuMinor"], d["mig"]["giProfileId"], d["mig"]["start"]) == key
                       for other_uid, e in self.journal.data["claims"].items()
                       if other_uid != uid and other_uid not in self._releasing
                       for d in e["devices"] if d.get("mig"))

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
            entry = self.journal.data["claims"].get(ref.uid)
            completed = entry is not None and entry["state"] == PREPARE_COMPLETED
        if read is None and not completed:
            read = self._read_claim(ref)
        with self._claim_lock(ref.uid):
            with self.journal.lock:
                entry = self.journal.data["claims"].get(ref.uid)
                self._check_same_claim(ref, entry)
                if entry is not None and entry["state"] == PREPARE_COMPLETED:
                    devices = entry["devices"]
                    done = True
                else:
                    done = False
            if done:
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
              inventory: Inventory) -> list[dict[str, Any]]:
        allocation = claim["status"]["allocation"]
        planned: list[dict[str, Any]] = []
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("driver") != self.driver_name:
                continue
            pool, device = result.get("pool"), result.get("device")
            if pool != self.node_name:
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: device {pool}/{device} belongs to pool "
                                   f"{pool!r}, not to this node ({self.node_name})")
            record = self._resolve_device(device, inventory)
            request = str(result.get("request", ""))
            try:
                config = config_for(configs, request, record["type"], device)
            except ConfigError as exc:
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: {exc}") from None
            if config and config.sharing and config.sharing.strategy not in self.sharing_strategies:
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: {sharing_gate_error(config.sharing.strategy)}")
            if (config and config.sharing and config.sharing.strategy == "MPS"
                    and (self.consumable_shares or result.get("shareID"))):
                # one claim's MPS daemon would put a GPU other claims hold shares of in EXCLUSIVE_PROCESS mode
                raise PrepareError(f"claim {ref.namespace}/{ref.name}: {MPS_REFUSED}")
            record.update({
                "request": request,
                "requestNames": [request.split("/", 1)[0]] if request else [],
                "pool": pool,
                "device": device,
                "adminAccess": bool(result.get("adminAccess")),
                "sharing": config.sharing.to_dict() if config and config.sharing else None,
                "cdiDeviceIDs": [cdispec.cdi_device_id(self.driver_name, ref.uid, device)],
            })
            if result.get("shareID"):
                record["shareID"] = result["shareID"]
            if record["type"] == VFIO_TYPE:  # NVIDIA's DefaultVfioDeviceConfig when the claim has none
                iommu = config.iommu if config and config.iommu else IommuConfig()
                record["iommu"] = {"backendPolicy": iommu.backend_policy, "enableAPIDevice": iommu.enable_api_device}
            planned.append(record)
        if self.metadata is not None:  # upstream's helper adds the metadata device to a request's first device
            first: dict[str, dict[str, Any]] = {}
            for record in planned:
                first.setdefault(base_request(record["request"]), record)
            for record in first.values():
                record["cdiDeviceIDs"].append(metadata_cdi_id(self.driver_name, ref.uid, record["request"]))
        if any(r["type"] == VFIO_TYPE for r in planned) and any(r["type"] != VFIO_TYPE for r in planned):
            # NVIDIA's applyVfioDeviceConfig assumes it: the claim's edits are the VFIO devices' alone
            raise PrepareError(f"claim {ref.namespace}/{ref.name}: VFIO devices cannot share a claim with other "
                               "devices of this driver")
        return planned

    def _resolve_device(self, name: str, inventory: Inventory) -> dict[str, Any]:
        function = self.passthrough.function(name) if self.passthrough is not None else None
        if function is not None:
            parent = inventory.gpu_by_minor(function.minor)
            if parent is None or parent.mig_devices:
                raise PrepareError(f"device {name}: its GPU has MIG devices and cannot be passed through")
            return {"type": VFIO_TYPE, "gpuMinor": function.minor, "gpuUUID": parent.uuid, "slices": None,
                    "mig": None, "pciBusID": function.address}
        for gpu in inventory.gpus:
            if gpu.name == name:
                if gpu.mig_enabled and gpu.mig_devices and not self.dynamic_mig:
                    raise PrepareError(f"device {name} is in MIG mode; only its MIG devices can be allocated")
                return {"type": "gpu", "gpuMinor": gpu.minor, "gpuUUID": gpu.uuid, "slices": None, "mig": None}
            if not self.dynamic_mig:
                for mig in gpu.mig_devices:
                    if mig.name == name:
                        return {"type": "mig", "gpuMinor": gpu.minor, "gpuUUID": gpu.uuid,
                                "slices": [mig.placement_start, mig.placement_start + mig.placement_size],
                                "mig": {"giId": mig.gi_id, "ciId": mig.ci_id, "uuid": mig.uuid,
                                        "giProfileId": mig.gi_profile_id, "start": mig.placement_start,
                                        "size": mig.placement_size, "dynamic": False}}
        parsed = parse_mig_canonical_name(name)
        if self.dynamic_mig and parsed is not None:
            minor, token, profile_id, start = parsed
            parent = inventory.gpu_by_minor(minor)
            if parent is not None:
                for profile in self.backend.mig_profiles(minor):
                    if (profile.gi_profile_id == profile_id and start in profile.placement_starts
                            and rfc1123_compliant(profile.name.replace(".", "")) == token):
                        return {"type": "mig", "gpuMinor": minor, "gpuUUID": parent.uuid,
                                "slices": [start, start + profile.memory_slices],
                                "mig": {"giId": None, "ciId": None, "uuid": None, "giProfileId": profile_id,
                                        "start": start, "size": profile.memory_slices, "dynamic": True}}
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
            for other_uid, other in self.journal.data["claims"].items():
                for mine in planned:
                    for theirs in other["devices"]:
                        if _conflicts(mine, theirs):
                            raise PrepareError(f"device {mine['device']} is already allocated to a different claim "
                                               f"({other.get('namespace')}/{other.get('name')}, {other_uid})"
                                               + (f" holding {theirs['device']}" if theirs['device'] != mine['device'] else ""))
                        if _shares_of_one_device(mine, theirs) and conflicting_configuration(mine, theirs):
                            raise PrepareError(conflict_message(mine["device"], other_uid))
            for mine in planned:
                for reserved in self._reserved:
                    if _conflicts(mine, reserved):
                        raise PrepareError(f"device {mine['device']} is reserved by a quarantined checkpoint entry "
                                           f"(see {self.paths.quarantine})")
            entry = {"state": PREPARE_STARTED, "namespace": ref.namespace, "name": ref.name, "devices": planned}
            self.journal.data["claims"][ref.uid] = entry
            version = self.journal.changed()
        # The in-memory entry already reserves the devices. It must reach the disk before hardware
        # changes; without them a crash leaves at most a CDI spec, which reconcile removes.
        # metadata files live outside the CDI directory reconcile sweeps: only a recorded entry finds them again
        if self.metadata is not None or any(_changes_hardware(d, self.sharing is not None, self.fabric is not None)
                                            for d in planned):
            self.journal.persist(version)
        try:
            self._activate_partition(planned)
            self._create_hardware(ref, planned)
            self._apply_sharing(ref.uid, entry)
            if planned:
                self._write_cdi(ref.uid, planned)
                self._write_metadata(ref, claim, planned)
        except Exception as exc:  # whatever failed, a failed prepare keeps no reservation
            self._roll_back(ref.uid, entry)
            if not isinstance(exc, (PrepareError, MigError, DiscoveryError, OSError, SharingError, PassthroughError,
                                    claimpaths.ClaimPathError, FabricManagerError)):
                raise
            raise PrepareError(f"preparing claim {ref.namespace}/{ref.name}: {exc}") from None
        if token is not None and not token.commit():
            self._roll_back(ref.uid, entry)
            raise PrepareError(f"prepare of claim {ref.namespace}/{ref.name} was abandoned after its deadline")
        with self.journal.lock:
            entry["state"] = PREPARE_COMPLETED
            version = self.journal.changed()
        self.journal.persist(version)
        self._siblings_changed(planned)
        return self._response(planned)

    def _roll_back(self, uid: str, entry: dict[str, Any]) -> None:
        self._release(uid, entry, lenient=True)  # the prepare's own error is the one to report
        with self.journal.lock:
            version = self.journal.changed()
        self.journal.persist(version)

    def _release(self, uid: str, entry: dict[str, Any], lenient: bool = False) -> None:
        """Undo `uid` and drop its entry; while that runs, other releases do not count it as a holder."""
        with self.journal.lock:
            self._releasing.add(uid)
        try:
            self._undo(uid, entry, lenient)
            with self.journal.lock:
                self.journal.data["claims"].pop(uid, None)
        finally:
            with self.journal.lock:
                self._releasing.discard(uid)

    def _create_hardware(self, ref: ClaimRef, planned: list[dict[str, Any]]) -> None:
        for record in planned:
            mig = record.get("mig")
            if mig and mig.get("dynamic"):
                with self._mig_lock:
                    device = self.backend.find_mig_device(record["gpuMinor"], mig["giProfileId"], mig["start"])
                    if device is None:
                        device = self.backend.create_mig_device(record["gpuMinor"], mig["giProfileId"], mig["start"])
                mig.update({"giId": device.gi_id, "ciId": device.ci_id, "uuid": device.uuid})
            elif record["type"] == "gpu" and self.dynamic_mig:
                gpu = self.backend.inventory().gpu_by_minor(record["gpuMinor"])
                if gpu is not None and gpu.mig_enabled and not gpu.mig_devices:
                    with self._mig_lock:
                        self.backend.set_mig_mode(gpu.minor, False)
            if record["type"] == VFIO_TYPE and self.passthrough is not None:
                self.passthrough.bus.bind(record["pciBusID"], VFIO_DRIVER)  # NVIDIA's VfioPciManager.Configure
            if (record.get("sharing") or {}).get("strategy") == "MPS":
                for sub in ("pipe", "shm", "log"):
                    os.makedirs(os.path.join(self._mps_dir(ref.uid), sub), exist_ok=True)

    def _write_cdi(self, uid: str, devices: list[dict[str, Any]]) -> None:
        unique: dict[str, dict[str, Any]] = {}
        for device in devices:
            unique.setdefault(device["device"], device)
        if not unique:
            return
        vfio = [d for d in unique.values() if d["type"] == VFIO_TYPE]
        if vfio and self.passthrough is not None:  # _plan lets no other device into a VFIO claim
            write_spec(self.passthrough.claim_spec(self.driver_name, uid, vfio), self.paths.cdi_spec_dir,
                       self._spec_name(uid), fsync=False)
            return
        mig_minors = cdispec.read_mig_minors() if self.backend.name == "nvml" else None
        spec = cdispec.claim_spec(self.driver_name, uid, list(unique.values()), majors=self.majors,
                                  mps_dir=self._mps_dir(uid), mig_minors=mig_minors, host_edits=self.host_edits)
        # /var/run/cdi is a tmpfs and reconcile rewrites lost specs from the checkpoint: atomic, no fsync
        write_spec(spec, self.paths.cdi_spec_dir, self._spec_name(uid), fsync=False)

    @staticmethod
    def _response(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for d in devices:
            item = {"requestNames": list(d["requestNames"]), "poolName": d["pool"], "deviceName": d["device"],
                    "cdiDeviceIDs": list(d["cdiDeviceIDs"])}
            if d.get("shareID"):
                item["shareID"] = d["shareID"]
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
                entry = self.journal.data["claims"].get(ref.uid)
                self._check_same_claim(ref, entry)  # a forged reference frees no other claim's devices
                if entry is None:
                    done = True
                else:
                    done = False
                    has_hardware = any(_changes_hardware(d, self.sharing is not None, self.fabric is not None)
                                       for d in entry["devices"])
                    version = 0
                    if has_hardware and entry["state"] != UNPREPARE_STARTED:
                        entry["state"] = UNPREPARE_STARTED
                        version = self.journal.changed()
            if not done and version:
                self.journal.persist(version)
            if done:
                remove_spec(self.paths.cdi_spec_dir, self._spec_name(ref.uid))  # stray file from an old crash
                return
            try:
                self._release(ref.uid, entry)
            except (MigError, DiscoveryError, OSError, SharingError, PassthroughError, FabricManagerError) as exc:
                raise PrepareError(f"unpreparing claim {ref}: {exc}") from None
            with self.journal.lock:
                version = self.journal.changed()
            self.journal.persist(version)
            self._siblings_changed(entry["devices"])
