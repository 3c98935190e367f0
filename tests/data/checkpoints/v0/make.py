"""Writes the checkpoint files in this directory with the driver code of the commit they were made at (see
README.md here). Run from the repository root: `PYTHONPATH=$PWD python tests/data/checkpoints/v0/make.py`.

Each scenario prepares claims through the driver's own `DeviceState` / `ComputeDomainState` on simulated GPUs and
keeps what a node upgraded in place would have on disk: the checkpoint (and quarantine file), the simulated GPUs'
state (the MIG devices that exist) and the ResourceClaims. UIDs and the boot ID are fixed so tests can restart the
driver as the same boot of the same node.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import yaml

from gpudra.computedomain.domains import DirectoryDomainSource
from gpudra.computedomain.state import ComputeDomainState
from gpudra.discovery import open_backend
from gpudra.gpuplugin.sharing import RecordingSharing
from gpudra.gpuplugin.state import ClaimRef, DeviceState
from gpudra.kubeletplugin.checkpoint import load_checkpoint, save_checkpoint
from gpudra.kubeletplugin.claims import LocalClaimStore
from gpudra.kubeletplugin.paths import DriverPaths
from tests.support.builders import allocated_claim

HERE = os.path.dirname(os.path.abspath(__file__))
NODE = "n1"
BOOT = "boot-v0"
GPU_DRIVER = "gpu.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"
NV = "resource.nvidia.com/v1beta1"
DOMAIN_UID = "0b7a3c52-6d1e-4f3a-9c8b-2e5f6a7b8c9d"
CLIQUE = "4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f.1"


def uid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def gpu_config(requests: list[str], sharing: dict) -> dict:
    return {"source": "FromClaim", "requests": requests,
            "opaque": {"driver": GPU_DRIVER, "parameters": {"apiVersion": NV, "kind": "GpuConfig",
                                                            "sharing": sharing}}}


class Scenario:
    def __init__(self, name: str, profile: str):
        self.name = name
        self.root = tempfile.mkdtemp(prefix="cp-v0-")
        self.paths = DriverPaths(root=self.root)
        self.claims_dir = os.path.join(self.root, "claims")
        os.makedirs(self.claims_dir)
        self.backend = open_backend("simulated", profile=profile, node_name=NODE,
                                    state_path=self.paths.simulated_state)

    def claim(self, name: str, n: int, results: list[dict], driver: str = GPU_DRIVER, config: list | None = None,
              namespace: str = "default") -> ClaimRef:
        obj = allocated_claim(name, results, namespace=namespace, uid=uid(n), node_name=NODE, driver_name=driver,
                              config=config)
        with open(os.path.join(self.claims_dir, f"{namespace}_{name}.yaml"), "w", encoding="utf-8") as fh:
            yaml.safe_dump(obj, fh)
        return ClaimRef(namespace, name, uid(n))

    def keep(self, extra: dict[str, str] | None = None) -> None:
        out = os.path.join(HERE, self.name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        shutil.copy(self.paths.checkpoint, os.path.join(out, "checkpoint.json"))
        if os.path.exists(self.paths.quarantine):
            shutil.copy(self.paths.quarantine, os.path.join(out, "quarantine.json"))
        shutil.copy(self.paths.simulated_state, os.path.join(out, "simulated-gpus.json"))
        shutil.copytree(self.claims_dir, os.path.join(out, "claims"))
        for name, source in (extra or {}).items():
            shutil.copytree(source, os.path.join(out, name))
        shutil.rmtree(self.root, ignore_errors=True)


def check(answer: list) -> None:
    assert answer, "a prepare answered no devices"


def gpu_dynamic_mig() -> None:
    """Dynamic MIG mode: a full GPU, an admin-access claim on it, two dynamic MIG devices, time-slicing, MPS (with a
    per-device pinned-memory limit), a consumable-capacity share."""
    s = Scenario("gpu-dynamic-mig", "dgx-h100")
    state = DeviceState(driver_name=GPU_DRIVER, node_name=NODE, backend=s.backend, paths=s.paths,
                        claims=LocalClaimStore(s.claims_dir), dynamic_mig=True, fsync=False, boot_id=BOOT,
                        sharing=RecordingSharing(s.paths.simulated_sharing_log))
    state.reconcile()
    check(state.prepare(s.claim("full", 1, [{"request": "gpu", "device": "gpu-0"}])))
    check(state.prepare(s.claim("admin", 2, [{"request": "gpu", "device": "gpu-0", "adminAccess": True}])))
    check(state.prepare(s.claim("mig", 3, [{"request": "mig/small", "device": "gpu-1-mig-1g10gb-19-0"},
                                           {"request": "mig/large", "device": "gpu-1-mig-3g40gb-9-4"}])))
    check(state.prepare(s.claim("sliced", 4, [{"request": "gpu", "device": "gpu-2"}], config=[
        gpu_config(["gpu"], {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})])))
    check(state.prepare(s.claim("mps", 5, [{"request": "gpus", "device": "gpu-3"},
                                           {"request": "gpus", "device": "gpu-4"}], config=[
        gpu_config(["gpus"], {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
                                                               "defaultPinnedDeviceMemoryLimit": "1Gi"}})])))
    check(state.prepare(s.claim("mps-per-device", 6, [{"request": "gpus", "device": "gpu-5"}], config=[
        gpu_config(["gpus"], {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": "2Gi"}}})])))
    check(state.prepare(s.claim("share", 7, [{"request": "gpu", "device": "gpu-6",
                                             "shareID": "11111111-2222-4333-8444-555555555555"}])))
    s.keep()


def gpu_static_mig() -> None:
    """Static MIG mode (MIG devices made by the MIG manager beforehand), and a bad entry quarantined at start-up."""
    s = Scenario("gpu-static-mig", "dgx-h100")
    s.backend.set_mig_mode(0, True)
    small = s.backend.create_mig_device(0, 19, 0)
    big = s.backend.create_mig_device(0, 9, 4)
    state = DeviceState(driver_name=GPU_DRIVER, node_name=NODE, backend=s.backend, paths=s.paths,
                        claims=LocalClaimStore(s.claims_dir), dynamic_mig=False, fsync=False, boot_id=BOOT)
    state.reconcile()
    check(state.prepare(s.claim("mig", 11, [{"request": "mig", "device": small.name},
                                            {"request": "mig", "device": big.name}])))
    check(state.prepare(s.claim("full", 12, [{"request": "gpu", "device": "gpu-1"}])))
    # a damaged entry (a hand edit): start-up moves it to quarantine.json and keeps gpu-2 reserved
    data = load_checkpoint(s.paths.checkpoint)
    data["claims"][uid(13)] = {"state": "PrepareCompleted", "namespace": "default", "name": "damaged", "devices": [
        {"device": "gpu-2", "gpuMinor": "two", "type": "gpu"}]}
    save_checkpoint(s.paths.checkpoint, data, fsync=False)
    report = DeviceState(driver_name=GPU_DRIVER, node_name=NODE, backend=s.backend, paths=s.paths,
                         claims=LocalClaimStore(s.claims_dir), dynamic_mig=False, fsync=False,
                         boot_id=BOOT).reconcile()
    assert report["quarantined"] == [uid(13)], report
    s.keep()


def compute_domain() -> None:
    """The compute-domain plugin: a channel claim (its join recorded) and the IMEX daemon's claim."""
    s = Scenario("compute-domain", "gb200-nvl72")
    domains_dir = os.path.join(s.root, "domains")
    os.makedirs(domains_dir)
    domain = {"apiVersion": NV, "kind": "ComputeDomain",
              "metadata": {"name": "cd", "namespace": "default", "uid": DOMAIN_UID},
              "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "cd-channel"}}},
              "status": {"status": "Ready", "nodes": [{"name": NODE, "ipAddress": "10.0.0.1", "cliqueID": CLIQUE,
                                                        "index": 0, "status": "Ready"}]}}
    with open(os.path.join(domains_dir, f"{DOMAIN_UID}.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(domain, fh)
    state = ComputeDomainState(domains=DirectoryDomainSource(domains_dir), clique=CLIQUE, driver_name=CD_DRIVER,
                               node_name=NODE, backend=s.backend, paths=s.paths,
                               claims=LocalClaimStore(s.claims_dir), fsync=False, boot_id=BOOT)
    state.reconcile()
    channel = {"apiVersion": NV, "kind": "ComputeDomainChannelConfig", "domainID": DOMAIN_UID}
    daemon = {"apiVersion": NV, "kind": "ComputeDomainDaemonConfig", "domainID": DOMAIN_UID}
    check(state.prepare(s.claim("channel", 21, [{"request": "channel", "device": "channel-0"}], driver=CD_DRIVER,
                                config=[{"source": "FromClaim", "requests": ["channel"],
                                         "opaque": {"driver": CD_DRIVER, "parameters": channel}}])))
    check(state.prepare(s.claim("daemon", 22, [{"request": "daemon", "device": "daemon-0"}], driver=CD_DRIVER,
                                config=[{"source": "FromClaim", "requests": ["daemon"],
                                         "opaque": {"driver": CD_DRIVER, "parameters": daemon}}])))
    s.keep({"domains": domains_dir})


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    gpu_dynamic_mig()
    gpu_static_mig()
    compute_domain()
