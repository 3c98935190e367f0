"""The edits of a GPU claim's transient CDI spec (`k8s.gpu.nvidia.com/claim`), as the NVIDIA driver writes it:
the GPU's device node, a MIG device's two capability nodes, the MPS pipe and shm mounts, and the spec-wide
nvidiactl/nvidia-uvm nodes. The spec's and devices' names are the helper's (gpudra/kubeletplugin/cdispec.py).

Device nodes carry type/major/minor so a runtime (and our resolver) need not stat the
host. Majors: `nvidia` is fixed at 195; `nvidia-uvm` and `nvidia-caps` are dynamic and read
from /proc/devices when present (simulation uses typical values).
"""

from __future__ import annotations

from typing import Sequence

from gpudra.cdi import ContainerEdits, Device, DeviceNode, Mount, Spec
from gpudra.kubeletplugin.cdispec import cdi_device_name, vendor_and_class

from .records import GpuDevice

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
SIMULATED_MAJORS = {"nvidia-uvm": 510, "nvidia-caps": 511}
CAPS_FILE_MODE = 0o444
MPS_PIPE_IN_CONTAINER = "/tmp/nvidia-mps"
MPS_LOG_IN_CONTAINER = "/var/log/nvidia-mps"  # the claim's daemon log, read-only: why a client was refused


MIG_MINORS_FILE = "/proc/driver/nvidia-caps/mig-minors"


def read_mig_minors(path: str = MIG_MINORS_FILE) -> dict[str, int]:
    """The driver's table of nvidia-caps minors: `gpu0/gi1/access 12`, `gpu0/gi1/ci0/access 13`, …"""
    minors: dict[str, int] = {}
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 2 and parts[1].isdigit():
                    minors[parts[0]] = int(parts[1])
    except OSError:
        pass
    return minors


def mig_cap_minors(parent_minor: int, gi_id: int, ci_id: int,
                   table: dict[str, int] | None = None) -> tuple[int, int]:
    """Minors of `gpu<P>/gi<G>/access` and `gpu<P>/gi<G>/ci<C>/access`: from the driver's table when
    given, else the numbering the driver uses (config=1, monitor=2, then 9 per GI, 15 GIs per GPU)."""
    gi_key, ci_key = f"gpu{parent_minor}/gi{gi_id}/access", f"gpu{parent_minor}/gi{gi_id}/ci{ci_id}/access"
    if table and gi_key in table and ci_key in table:
        return table[gi_key], table[ci_key]
    gi_minor = 3 + parent_minor * 135 + gi_id * 9
    return gi_minor, gi_minor + 1 + ci_id


def _char(path: str, major: int, minor: int, *, host: bool = True, mode: int | None = None) -> DeviceNode:
    return DeviceNode(path=path, host_path=path if host else "", type="c", major=major, minor=minor, file_mode=mode)


def device_edits(prepared: GpuDevice, majors: dict[str, int], mps_dir: str | None,
                 mig_minors: dict[str, int] | None = None) -> ContainerEdits:
    """Edits for one prepared GPU or MIG device."""
    gpu_minor = prepared.gpu_minor
    if gpu_minor is None:
        raise ValueError(f"device {prepared.device} is not a GPU")
    edits = ContainerEdits(device_nodes=[_char(f"/dev/nvidia{gpu_minor}", NVIDIA_MAJOR, gpu_minor)])
    mig = prepared.mig
    if mig is not None:
        if mig.gi_id is None or mig.ci_id is None:
            raise ValueError(f"MIG device {prepared.device} has no instance IDs yet")
        caps_major = majors.get("nvidia-caps", SIMULATED_MAJORS["nvidia-caps"])
        gi_minor, ci_minor = mig_cap_minors(gpu_minor, mig.gi_id, mig.ci_id, mig_minors)
        for minor in (gi_minor, ci_minor):
            edits.device_nodes.append(_char(f"/dev/nvidia-caps/nvidia-cap{minor}", caps_major, minor, host=False,
                                            mode=CAPS_FILE_MODE))
    sharing = prepared.sharing
    if sharing is not None and sharing.is_mps and mps_dir:
        edits.env.append(f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_IN_CONTAINER}")
        if sharing.mps_active_thread_percentage is not None:
            edits.env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={sharing.mps_active_thread_percentage}")
        # gpudra's, not NVIDIA's (its CDI edits set only the pipe directory): the client-side limit names CUDA
        # ordinal 0, so it is set only when no per-device limit could make device 0's differ from the default
        if sharing.mps_pinned_memory_limit_mib is not None and not sharing.mps_per_device_pinned_memory_mib:
            edits.env.append(f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={sharing.mps_pinned_memory_limit_mib}M")
        edits.mounts.append(Mount(host_path=f"{mps_dir}/pipe", container_path=MPS_PIPE_IN_CONTAINER,
                                  options=["rw", "nosuid", "nodev", "bind"]))
        edits.mounts.append(Mount(host_path=f"{mps_dir}/shm", container_path="/dev/shm",
                                  options=["rw", "nosuid", "nodev", "bind"]))
        edits.mounts.append(Mount(host_path=f"{mps_dir}/log", container_path=MPS_LOG_IN_CONTAINER,
                                  options=["ro", "nosuid", "nodev", "bind"]))
    return edits


def common_edits(majors: dict[str, int]) -> ContainerEdits:
    uvm = majors.get("nvidia-uvm", SIMULATED_MAJORS["nvidia-uvm"])
    return ContainerEdits(
        env=["NVIDIA_VISIBLE_DEVICES=void"],
        device_nodes=[
            _char("/dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR),
            _char("/dev/nvidia-uvm", uvm, 0),
            _char("/dev/nvidia-uvm-tools", uvm, 1),
        ],
    )


def claim_spec(driver_name: str, claim_uid: str, prepared_devices: Sequence[GpuDevice], *,
               majors: dict[str, int] | None = None, mps_dir: str | None = None,
               mig_minors: dict[str, int] | None = None, host_edits: ContainerEdits | None = None) -> Spec:
    """`host_edits` (driver libraries, binaries, hooks: see `hostdriver.py`) join the spec-level
    edits, as in the NVIDIA driver's per-claim specs: each claim spec stays self-contained."""
    majors = majors or {}
    vendor, cls = vendor_and_class(driver_name)
    devices = [Device(name=cdi_device_name(claim_uid, p.device),
                      container_edits=device_edits(p, majors, mps_dir, mig_minors))
               for p in prepared_devices]
    common = common_edits(majors)
    if host_edits is not None:
        common.append(host_edits)  # shares the (never mutated) entries: a prepare writes this often
    return Spec(kind=f"{vendor}/{cls}", devices=devices, container_edits=common)
