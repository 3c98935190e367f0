"""The prepare/unprepare core (gpudra/gpuplugin/state.py) against NVIDIA's driver (NVIDIA/k8s-dra-driver-gpu) where
cosmic-ray mutants survived the other driver tests (README, "Mutation testing"): device numbers from the host's
/proc files on a real (nvml) node only, MPS directories for MPS claims only, results of other drivers skipped,
MIG devices and MIG mode left alone without DynamicMIG, a claim's unshared dynamic MIG devices destroyed.
"""

from __future__ import annotations

import functools
import os

import pytest
import yaml

from gpudra.cdi import load_spec_file
from gpudra.discovery import open_backend
from gpudra.gpuplugin import cdiedits
from gpudra.kubeletplugin import cdispec
from gpudra.kubeletplugin.claims import LocalClaimStore
from gpudra.kubeletplugin.paths import DriverPaths
from gpudra.gpuplugin.state import ClaimRef, DeviceState, PrepareError
from tests.support.builders import allocated_claim

NODE = "n1"
DRIVER = "gpu.nvidia.com"


class NvmlNamed:
    """Simulated GPUs behind the `nvml` backend's name: what the driver does on a real node."""

    name = "nvml"

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, attr):
        return getattr(self._inner, attr)


class Node:
    def __init__(self, root, profile="dgx-h100", dynamic_mig=False, nvml=False):
        self.root = str(root)
        self.paths = DriverPaths(root=self.root)
        self.claims_dir = os.path.join(self.root, "claims")
        os.makedirs(self.claims_dir, exist_ok=True)
        simulated = open_backend("simulated", profile=profile, node_name=NODE, state_path=self.paths.simulated_state)
        self.backend = NvmlNamed(simulated) if nvml else simulated
        self.dynamic_mig = dynamic_mig
        self.state = self.restart()

    def restart(self) -> DeviceState:
        self.state = DeviceState(driver_name=DRIVER, node_name=NODE, backend=self.backend, paths=self.paths,
                                 claims=LocalClaimStore(self.claims_dir), dynamic_mig=self.dynamic_mig, fsync=False,
                                 boot_id="boot-1")
        self.state.reconcile()
        return self.state

    def claim(self, name, results, config=None) -> ClaimRef:
        obj = allocated_claim(name, results, node_name=NODE, config=config)
        with open(os.path.join(self.claims_dir, f"default_{name}.yaml"), "w") as fh:
            yaml.safe_dump(obj, fh)
        return ClaimRef("default", name, obj["metadata"]["uid"])

    def spec(self, ref):
        return load_spec_file(os.path.join(self.paths.cdi_spec_dir,
                                           cdispec.claim_spec_file_name(DRIVER, ref.uid) + ".yaml"))

    def mps_dir(self, ref):
        return os.path.join(self.paths.plugin_dir, "mps", ref.uid)

    def mig_names(self):
        return sorted(m.name for g in self.backend.inventory().gpus for m in g.mig_devices)


def sharing_config(strategy: str) -> list[dict]:
    return [{"source": "FromClaim", "requests": ["gpus"],
             "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "resource.nvidia.com/v1beta1",
                                                         "kind": "GpuConfig", "sharing": {"strategy": strategy}}}}]


# -- device numbers: NVIDIA's internal/common/nvcaps.go, /proc/devices and /proc/driver/nvidia-caps/mig-minors ----

@pytest.fixture
def host_proc_files(tmp_path, monkeypatch):
    """A host whose dynamic majors and MIG capability minors are not the simulated defaults: NVIDIA's example
    claim spec (shared/reference/driver.md, section 4.5) has nvidia-caps at major 235 and the MIG device's two
    capability nodes at minors 30 (GPU instance) and 31 (compute instance)."""
    devices = tmp_path / "proc-devices"
    devices.write_text("Character devices:\n  1 mem\n195 nvidia-frontend\n234 nvidia-uvm\n235 nvidia-caps\n\n"
                       "Block devices:\n  8 sd\n")
    minors = tmp_path / "mig-minors"
    minors.write_text("config 1\nmonitor 2\ngpu1/gi3/access 30\ngpu1/gi3/ci0/access 31\n")
    monkeypatch.setattr(cdispec, "read_char_majors", functools.partial(cdispec.read_char_majors, str(devices)))
    monkeypatch.setattr(cdiedits, "read_mig_minors", functools.partial(cdiedits.read_mig_minors, str(minors)))


def test_a_real_node_takes_the_mig_device_numbers_from_the_hosts_proc_files(tmp_path, host_proc_files):
    """NVIDIA's nvcaps.go: a MIG device's capability nodes get the `nvidia-caps` major of /proc/devices'
    "Character devices" and the minors the driver lists for gpu<parent>/gi<G>[/ci<C>]/access; the spec-level
    nvidia-uvm nodes the `nvidia-uvm` major."""
    node = Node(tmp_path / "node", profile="hgx-a100-mig", nvml=True)
    (gi, ci), = [(m.gi_id, m.ci_id) for m in node.backend.inventory().gpu_by_minor(1).mig_devices
                 if m.name == "gpu-1-mig-1g10gb-19-2"]
    assert (gi, ci) == (3, 0)
    ref = node.claim("mig", [{"request": "mig", "device": "gpu-1-mig-1g10gb-19-2"}])
    node.state.prepare(ref)
    spec = node.spec(ref)
    nodes = [(n.path, n.type, n.major, n.minor) for n in spec.devices[0].container_edits.device_nodes]
    assert nodes == [("/dev/nvidia1", "c", 195, 1), ("/dev/nvidia-caps/nvidia-cap30", "c", 235, 30),
                     ("/dev/nvidia-caps/nvidia-cap31", "c", 235, 31)]
    uvm = [(n.path, n.major) for n in spec.container_edits.device_nodes if "uvm" in n.path]
    assert uvm == [("/dev/nvidia-uvm", 234), ("/dev/nvidia-uvm-tools", 234)]


def test_simulated_gpus_never_take_the_hosts_device_numbers(tmp_path, host_proc_files):
    """Simulated GPUs on a host with a real NVIDIA driver: the host's numbers belong to other devices."""
    node = Node(tmp_path / "node", profile="hgx-a100-mig")
    ref = node.claim("mig", [{"request": "mig", "device": "gpu-1-mig-1g10gb-19-2"}])
    node.state.prepare(ref)
    spec = node.spec(ref)
    caps = [(n.major, n.minor) for n in spec.devices[0].container_edits.device_nodes if "caps" in n.path]
    assert len(caps) == 2 and not {major for major, _ in caps} & {234, 235} and not {m for _, m in caps} & {30, 31}
    assert not {n.major for n in spec.container_edits.device_nodes} & {234, 235}


# -- MPS directories: NVIDIA's sharing.go (MPS control daemon: mps/<id>/{pipe,shm,log} for MPS claims only) --------

def test_only_an_mps_claim_gets_an_mps_directory_and_unprepare_removes_it(tmp_path):
    node = Node(tmp_path / "node")
    plain = node.claim("plain", [{"request": "gpus", "device": "gpu-0"}])
    sliced = node.claim("sliced", [{"request": "gpus", "device": "gpu-1"}], config=sharing_config("TimeSlicing"))
    mps = node.claim("mps", [{"request": "gpus", "device": "gpu-2"}], config=sharing_config("MPS"))
    for ref in (plain, sliced, mps):
        node.state.prepare(ref)
    assert not os.path.exists(node.mps_dir(plain)) and not os.path.exists(node.mps_dir(sliced))
    assert sorted(os.listdir(node.mps_dir(mps))) == ["log", "pipe", "shm"]
    for ref in (plain, sliced, mps):
        node.state.unprepare(ref)
    assert not os.path.exists(os.path.join(node.paths.plugin_dir, "mps")) or \
        os.listdir(os.path.join(node.paths.plugin_dir, "mps")) == []


def test_a_restart_keeps_the_mps_directory_of_a_prepared_claim_and_removes_orphans(tmp_path):
    """A PrepareCompleted claim survives a driver restart (its MPS daemon keeps serving the pod from that
    pipe directory); a directory no checkpoint entry owns is removed."""
    node = Node(tmp_path / "node")
    mps = node.claim("mps", [{"request": "gpus", "device": "gpu-2"}], config=sharing_config("MPS"))
    node.state.prepare(mps)
    orphan = os.path.join(node.paths.plugin_dir, "mps", "0b7e3c1a-5d7e-4a39-9d4b-2f1f8b1a6c11")
    os.makedirs(os.path.join(orphan, "pipe"))
    node.restart()
    assert sorted(os.listdir(node.mps_dir(mps))) == ["log", "pipe", "shm"]
    assert not os.path.exists(orphan)


# -- results of other drivers: NVIDIA's device_state.go prepareDevices (`if result.Driver != DriverName { continue }`) --

def test_a_result_of_another_driver_is_skipped_and_the_results_after_it_are_prepared(tmp_path):
    node = Node(tmp_path / "node")
    ref = node.claim("mixed", [{"request": "nic", "device": "eth1", "driver": "net.example.com", "pool": "n1-net"},
                               {"request": "gpus", "device": "gpu-3"},
                               {"request": "nic2", "device": "eth2", "driver": "net.example.com", "pool": "n1-net"},
                               {"request": "gpus2", "device": "gpu-4"}])
    devices = node.state.prepare(ref)
    assert [d["deviceName"] for d in devices] == ["gpu-3", "gpu-4"]
    assert [d.name for d in node.spec(ref).devices] == [f"{ref.uid}-gpu-3", f"{ref.uid}-gpu-4"]


# -- without DynamicMIG: only published devices, MIG mode untouched ------------------------------------------------

def test_without_dynamic_mig_a_mig_device_that_does_not_exist_is_refused(tmp_path):
    """device_state.go: a result whose device is not among the published (allocatable) ones is refused
    ("requested device is not allocatable"); only the DynamicMIG path creates MIG devices."""
    node = Node(tmp_path / "node", dynamic_mig=False)
    ref = node.claim("ghost", [{"request": "mig", "device": "gpu-1-mig-1g10gb-19-0"}])
    with pytest.raises(PrepareError, match="does not exist"):
        node.state.prepare(ref)
    assert node.mig_names() == [] and node.state.checkpoint_snapshot()["claims"] == {}


def test_without_dynamic_mig_preparing_a_full_gpu_leaves_its_mig_mode_alone(tmp_path):
    """MIG mode belongs to the operator (nvidia-mig-parted) unless DynamicMIG is on: NVIDIA's driver disables it
    only on the DynamicMIG path (maybeDisableMigMode)."""
    node = Node(tmp_path / "node", dynamic_mig=False)
    node.backend.set_mig_mode(3, True)
    ref = node.claim("whole", [{"request": "gpus", "device": "gpu-3"}])
    node.state.prepare(ref)
    assert node.backend.inventory().gpu_by_minor(3).mig_enabled


# -- DynamicMIG unprepare: the claim's MIG devices are destroyed unless another claim still uses them ----------------

def test_unprepare_destroys_the_claims_unshared_mig_devices_after_a_shared_one(tmp_path):
    """Claims a and b both hold MIG device X with admin access; b also holds Y. Unpreparing b keeps X (a uses it)
    and destroys Y, which nobody else holds (NVIDIA's unprepare destroys the claim's dynamic MIG devices)."""
    node = Node(tmp_path / "node", dynamic_mig=True)
    shared, own = "gpu-1-mig-1g10gb-19-0", "gpu-1-mig-1g10gb-19-1"
    a = node.claim("a", [{"request": "mig", "device": shared, "adminAccess": True}])
    b = node.claim("b", [{"request": "mig", "device": shared, "adminAccess": True},
                         {"request": "mig2", "device": own}])
    node.state.prepare(a)
    node.state.prepare(b)
    assert node.mig_names() == [shared, own]
    node.state.unprepare(b)
    assert node.mig_names() == [shared]
    node.state.unprepare(a)
    assert node.mig_names() == []


def test_with_dynamic_mig_a_full_gpu_that_cannot_do_mig_is_prepared_without_touching_mig_mode(tmp_path):
    """DynamicMIG on a node whose GPUs have no MIG (L4): a full GPU is prepared as usual. NVIDIA's driver turns
    MIG mode off only where it is on (maybeDisableMigMode); NVML refuses nvmlDeviceSetMigMode on a GPU without
    MIG (NOT_SUPPORTED), so calling it there would fail the prepare."""
    node = Node(tmp_path / "node", profile="l4-node", dynamic_mig=True)
    assert not node.backend.inventory().gpu_by_minor(0).mig_capable
    ref = node.claim("whole", [{"request": "gpus", "device": "gpu-0"}])
    assert [d["deviceName"] for d in node.state.prepare(ref)] == ["gpu-0"]
    node.state.unprepare(ref)
    assert node.state.checkpoint_snapshot()["claims"] == {}
