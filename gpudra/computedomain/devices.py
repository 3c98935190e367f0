"""The compute-domain driver's node facts: its devices, DeviceClasses, clique ID and the IMEX files and CDI edits.

NVIDIA runs multi-node NVLink (GB200 NVL72) through a second kubelet plugin, `compute-domain.nvidia.com`, beside the
GPU plugin in the same DaemonSet pod (k8s-dra-driver-gpu deployments/helm/.../templates/kubeletplugin.yaml: the
containers `compute-domains` and `gpus`, each registering its own socket). What it publishes and prepares, as read
from cmd/compute-domain-kubelet-plugin/ (facts only; the code here is gpudra's):

- Devices (deviceinfo.go, driver.go): `channel-<id>` with attributes type=channel, id=<int>, and `daemon-0` with
  type=daemon, id=0. The plugin knows 2048 IMEX channels (nvlib.go getImexChannelCount) but publishes only
  channel 0: one workload claim per node at a time; allocationMode All hands that claim every channel.
- DeviceClasses (helm templates deviceclass-compute-domain-*.yaml): `compute-domain-daemon.nvidia.com` selects
  type == 'daemon', `compute-domain-default-channel.nvidia.com` selects type == 'channel' && id == 0.
- The clique ID (nvlib.go getCliqueIDLegacy): `<clusterUuid>.<cliqueId>` from nvmlDeviceGetGpuFabricInfo of
  every GPU whose fabric is attached; none attached: "" (no IMEX: channel claims get no device nodes); two
  different cluster UUIDs or clique IDs on one node: an error.
- A channel's CDI edits: the character devices /dev/nvidia-caps-imex-channels/channel<N> (major of
  `nvidia-caps-imex-channels` in /proc/devices, minor N, mode 0666). A daemon's: env CLIQUE_ID and
  COMPUTE_DOMAIN_UUID/NAME/NAMESPACE, the domain's directory under the plugin directory bind-mounted at /imexd,
  and, with a clique, the fabric-imex-mgmt capability device (/proc/driver/nvidia/capabilities/fabric-imex-mgmt
  gives its minor; internal/common/nvcaps.go).

gpudra adds one attribute NVIDIA's plugin does not publish: `cliqueID` (the node's clique, when it has one), so a
claim or `explain` can see which NVLink partition a node's channel belongs to without the node labels that
NVIDIA's GPU feature discovery sets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gpudra.cdi import ContainerEdits, DeviceNode, Mount
from gpudra.discovery import DiscoveryError, Inventory
from gpudra.vocabulary import COMPUTE_DOMAIN_DRIVER_NAME, NVLINK_CLIQUE_ATTRIBUTE

from gpudra.gpuplugin.slices import resource_slices
from .records import DomainBinding

CHANNEL_TYPE = "channel"
DAEMON_TYPE = "daemon"
IMEX_CHANNEL_COUNT = 2048  # nvlib.go getImexChannelCount (upstream's TODO: read /proc/driver/nvidia/params)
PUBLISHED_CHANNELS = 1  # driver.go publishes channel 0 only
IMEX_CHANNELS_DEVICE = "nvidia-caps-imex-channels"  # its name in /proc/devices
IMEX_CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
IMEX_CHANNEL_MODE = 0o666
SIMULATED_IMEX_MAJOR = 234  # a typical dynamic major, for simulated nodes without /proc/devices entries
NVIDIA_CAPS_DEVICE = "nvidia-caps"
SIMULATED_CAPS_MAJOR = 511  # cdispec.SIMULATED_MAJORS["nvidia-caps"]
FABRIC_IMEX_MGMT = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
DAEMON_DIR_IN_CONTAINER = "/imexd"  # compute-domain-daemon main.go imexDaemonConfigDirPath
DOMAINS_DIR = "domains"  # under the plugin directory: one directory per ComputeDomain UID (computedomain.go)
NODE_LABEL = "resource.nvidia.com/computeDomain"  # computedomain.go computeDomainLabelKey: the node's domain
DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
# the Helm chart's default namespace: where the controller puts the IMEX daemons and their claims
DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"


class CliqueError(DiscoveryError):
    """The node's GPUs disagree about their NVLink fabric clique."""


def channel_name(channel_id: int) -> str:
    return f"{CHANNEL_TYPE}-{channel_id}"


def daemon_name(daemon_id: int = 0) -> str:
    return f"{DAEMON_TYPE}-{daemon_id}"


def parse_device_name(name: str, channel_count: int = IMEX_CHANNEL_COUNT) -> tuple[str, int] | None:
    """("channel", id) or ("daemon", 0) for a device this plugin can prepare, else None. Every channel below the
    node's count can be prepared (upstream's allocatable set), though only channel 0 is published."""
    kind, _, number = name.partition("-")
    if not number.isdigit() or number != str(int(number)):
        return None
    value = int(number)
    if kind == CHANNEL_TYPE and value < channel_count:
        return CHANNEL_TYPE, value
    if kind == DAEMON_TYPE and value == 0:
        return DAEMON_TYPE, 0
    return None


def node_clique(inventory: Inventory) -> str:
    """The node's NVLink fabric clique ID ("" when no GPU's fabric is attached), by upstream's rules."""
    cliques = {gpu.nvlink_clique for gpu in inventory.gpus if gpu.nvlink_clique}
    if not cliques:
        return ""
    clusters = {clique.rsplit(".", 1)[0] for clique in cliques}
    if len(clusters) != 1:
        raise CliqueError(f"GPUs of this node report {len(clusters)} NVLink fabric cluster UUIDs "
                          f"({', '.join(sorted(clusters))}); expected one")
    if len(cliques) != 1:
        raise CliqueError(f"GPUs of this node report {len(cliques)} NVLink fabric cliques "
                          f"({', '.join(sorted(cliques))}); expected one")
    return cliques.pop()


def compute_domain_devices(clique: str, channels: int = PUBLISHED_CHANNELS) -> list[dict[str, Any]]:
    """The devices the plugin publishes: channels 0..channels-1 and the daemon device."""
    def device(name: str, kind: str, number: int) -> dict[str, Any]:
        attributes: dict[str, Any] = {"type": {"string": kind}, "id": {"int": number}}
        if clique:
            attributes[NVLINK_CLIQUE_ATTRIBUTE] = {"string": clique}
        return {"name": name, "attributes": attributes}

    return [*(device(channel_name(i), CHANNEL_TYPE, i) for i in range(channels)),
            device(daemon_name(0), DAEMON_TYPE, 0)]


def compute_domain_slices(node_name: str, clique: str, *, driver_name: str = COMPUTE_DOMAIN_DRIVER_NAME,
                          generation: int = 1, node_uid: str | None = None,
                          channels: int = PUBLISHED_CHANNELS) -> list[dict[str, Any]]:
    """The node's compute-domain pool as ResourceSlices (resource.k8s.io/v1)."""
    return resource_slices([{"devices": compute_domain_devices(clique, channels)}], node_name,
                           driver_name=driver_name, generation=generation, node_uid=node_uid)


def compute_domain_device_classes(driver_name: str = COMPUTE_DOMAIN_DRIVER_NAME) -> list[dict[str, Any]]:
    """DeviceClasses `compute-domain-daemon.nvidia.com` and `compute-domain-default-channel.nvidia.com`."""
    attrs = f"device.attributes['{driver_name}']"
    selectors = {DAEMON_CLASS: f"device.driver == '{driver_name}' && {attrs}.type == '{DAEMON_TYPE}'",
                 CHANNEL_CLASS: f"device.driver == '{driver_name}' && {attrs}.type == '{CHANNEL_TYPE}' && "
                                f"{attrs}.id == 0"}
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
             "spec": {"selectors": [{"cel": {"expression": expression}}]}} for name, expression in selectors.items()]


# -- CDI edits -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeDevices:
    """Majors of the IMEX channel and capability devices, and the fabric-imex-mgmt capability's node (None
    without IMEX support)."""
    imex_major: int = SIMULATED_IMEX_MAJOR
    caps_major: int = SIMULATED_CAPS_MAJOR
    imex_mgmt: DeviceNode | None = None


def parse_nvcap(text: str, caps_major: int) -> DeviceNode | None:
    """A /proc/driver/nvidia/capabilities file ("DeviceFileMinor: 4", "DeviceFileMode: 256", decimal) as the
    device node /dev/nvidia-caps/nvidia-cap<minor>."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip().isdigit():
            values[key.strip()] = int(value.strip())
    if "DeviceFileMinor" not in values:
        return None
    minor = values["DeviceFileMinor"]
    return DeviceNode(path=f"/dev/nvidia-caps/nvidia-cap{minor}", type="c", major=caps_major, minor=minor,
                      file_mode=values.get("DeviceFileMode", 0o400) & 0o7777)


def read_node_devices(majors: dict[str, int], nvcap_path: str = FABRIC_IMEX_MGMT) -> NodeDevices:
    """The real node's devices: majors from /proc/devices (`cdispec.read_char_majors`), the capability file."""
    caps_major = majors.get(NVIDIA_CAPS_DEVICE, SIMULATED_CAPS_MAJOR)
    try:
        with open(nvcap_path, encoding="ascii", errors="replace") as fh:
            mgmt = parse_nvcap(fh.read(4096), caps_major)
    except OSError:
        mgmt = None
    return NodeDevices(majors.get(IMEX_CHANNELS_DEVICE, SIMULATED_IMEX_MAJOR), caps_major, mgmt)


def channel_edits(first: int, end: int, devices: NodeDevices) -> ContainerEdits:
    return ContainerEdits(device_nodes=[
        DeviceNode(path=f"{IMEX_CHANNEL_DIR}/channel{n}", type="c", major=devices.imex_major, minor=n,
                   file_mode=IMEX_CHANNEL_MODE) for n in range(first, end)])


def daemon_edits(binding: DomainBinding, domain_dir: str, devices: NodeDevices) -> ContainerEdits:
    clique = binding.clique or ""
    edits = ContainerEdits(
        env=[f"CLIQUE_ID={clique}", f"COMPUTE_DOMAIN_UUID={binding.domain_id}",
             f"COMPUTE_DOMAIN_NAME={binding.domain_name or ''}",
             f"COMPUTE_DOMAIN_NAMESPACE={binding.domain_namespace or ''}"],
        mounts=[Mount(host_path=domain_dir, container_path=DAEMON_DIR_IN_CONTAINER,
                      options=["rw", "nosuid", "nodev", "bind"])])
    if clique and devices.imex_mgmt is not None:
        edits.device_nodes.append(devices.imex_mgmt)
    return edits


# -- the IMEX daemon's files ---------------------------------------------------------------------------------
# The settings of NVIDIA's IMEX config template (templates/compute-domain-daemon-config.tmpl.cfg) that differ from
# IMEX's defaults or that the daemon fills in; the daemon renders the two Go template fields with its pod IP.
IMEX_CONFIG_TEMPLATE = """\
LOG_LEVEL=4
LOG_FILE_NAME=
STATS_FILE_NAME=/var/log/nvidia-imex-stats.log
LOG_APPEND_TO_LOG=0
DAEMONIZE=0
SERVER_PORT=50000
IMEX_NODE_CONFIG_FILE={{ .IMEXDaemonNodesConfigPath }}
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_ENABLE_AUTH_ENCRYPTION=0
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}
IMEX_CMD_PORT=50005
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
"""
IMEX_CONFIG_TEMPLATE_FILE = "imexd.cfg.tmpl"
NODES_CONFIG_FILE = "nodes.cfg"


def domain_dir(plugin_dir: str, domain_id: str) -> str:
    """The domain's directory; `domain_id` was checked to be a UID (device_config), so it is one path component."""
    return os.path.join(plugin_dir, DOMAINS_DIR, domain_id)
