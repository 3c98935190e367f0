"""`gpudra driver`: ResourceSlices, DeviceClasses and the node agent (kubelet plugin); the cluster-side processes
(driver_services.py) and the node tools (driver_tools.py) join the group here."""
from __future__ import annotations

import logging
import signal
import sys

import click

from gpudra.cli.errors import warn
from gpudra.cli.inputs import require_generated_valid
from gpudra.vocabulary import COMPUTE_DOMAIN_DRIVER_NAME, DRIVER_NAME
from gpudra.cli.options import BACKEND_HELP, backend_option, dns_subdomain_value, node_option
from gpudra.cli.output import output_option, render_data, render_table
from gpudra.cli.options import features_option, kubernetes_version_option
from gpudra.discovery import BACKEND_CHOICES, DiscoveryError, read_inventory
from gpudra.cli.driver_options import (
    DRIVER_NAME_HELP, DRIVERS, KUBERNETES_VERSION_HELP, REGISTRAR_HELP, chosen_backend, driver_gates, driver_name_for,
    driver_option, dump_objects, fail, gated_flag, published_backend, slice_layout, warn_unless_consumable,
)
from gpudra.cli import driver_services, driver_tools


@click.group(name="driver")
def command() -> None:
    """The node-side GPU DRA driver."""


@command.command("slices")
@backend_option()
@click.option("--profile", default="dgx-h100", show_default=True, help="simulated node profile or YAML file")
@node_option("The Node the slices are published for (spec.nodeName, the pool's name).", dest="node_name",
             required=True, callback=dns_subdomain_value())
@driver_option("gpu: GPUs and MIG devices; compute-domain: the IMEX channel and daemon devices of the "
               "compute-domain.nvidia.com plugin (with the node's NVLink fabric clique)")
@click.option("--driver-name", default=None, callback=dns_subdomain_value(63), help=DRIVER_NAME_HELP)
@click.option("--dynamic-mig", is_flag=True, help="announce MIG partitions as partitionable devices (KEP-4815)")
@click.option("--generation", type=click.IntRange(min=0), default=1, show_default=True,
              help="The pool's generation (spec.pool.generation): a driver raises it with every republication, "
                   "and the scheduler uses only a pool's newest generation.")
@click.option("--sharing", type=click.Choice(["none", "consumable"]), default="none", show_default=True,
              help="consumable: full GPUs allow multiple allocations, sharing a `compute` share and `memory` "
                   "(consumable capacity, KEP-5075)")
@kubernetes_version_option(KUBERNETES_VERSION_HELP.replace("the API server's /version with a kubeconfig, else ", ""))
@features_option()
@output_option(pipe_default="yaml", help="table: one row per slice; yaml/json: the ResourceSlices.")
def slices_cmd(backend: str, profile: str, node_name: str, driver_kind: str, driver_name: str | None,
               dynamic_mig: bool, generation: int, sharing: str, kubernetes_version: str | None, features: str,
               output: str) -> None:
    """Print the ResourceSlices this node would publish."""
    from gpudra.gpuplugin.slices import build_resource_slices
    from gpudra.versions import parse_version

    driver_name = driver_name_for(driver_kind, driver_name)
    if driver_kind == "compute-domain":
        if dynamic_mig or sharing != "none":
            fail("--dynamic-mig and --sharing are GPU driver options; the compute-domain driver has neither")
        dump_objects(_compute_domain_slices(backend, profile, node_name, driver_name, generation,
                                     parse_version(kubernetes_version)), output)
        return
    dynamic_mig, layout = slice_layout(dynamic_mig, kubernetes_version, features)
    if sharing == "consumable":
        warn_unless_consumable(kubernetes_version, features)
    try:
        inventory = read_inventory(chosen_backend(backend, profile), profile=profile, node_name=node_name)
    except DiscoveryError as exc:
        fail(str(exc))
    for problem in inventory.problems:
        warn(str(problem))
    try:
        slices = build_resource_slices(inventory, node_name, driver_name=driver_name, generation=generation,
                                       dynamic_mig=dynamic_mig, sharing=sharing, slice_layout=layout)
    except ValueError as exc:
        fail(str(exc))
    require_generated_valid(slices, "driver slices", parse_version(kubernetes_version))
    dump_objects(slices, output)


def _compute_domain_slices(backend: str, profile: str, node_name: str, driver_name: str, generation: int,
                           version) -> list:
    from gpudra.computedomain.devices import compute_domain_slices, node_clique

    try:
        clique = node_clique(read_inventory(chosen_backend(backend, profile), profile=profile, node_name=node_name))
    except DiscoveryError as exc:
        fail(str(exc))
    slices = compute_domain_slices(node_name, clique, driver_name=driver_name, generation=generation)
    require_generated_valid(slices, "driver slices", version)
    return slices


@command.command("deviceclasses")
@driver_option("which driver's classes: all (as NVIDIA's chart installs them by default), gpu (gpu.nvidia.com, "
               "mig.nvidia.com) or compute-domain (compute-domain-daemon.nvidia.com, "
               "compute-domain-default-channel.nvidia.com)", default="all", choices=("all", *DRIVERS))
@click.option("--driver-name", default=DRIVER_NAME, show_default=True, callback=dns_subdomain_value(63),
              help="The GPU driver's name (its classes' names and selectors).")
@click.option("--compute-domain-driver-name", default=COMPUTE_DOMAIN_DRIVER_NAME, show_default=True,
              callback=dns_subdomain_value(63), help="The compute-domain driver's name (its classes' selectors).")
@kubernetes_version_option("The release to publish for (1.33-1.36; default 1.36): the GPU class names the "
                           "extended resource nvidia.com/gpu only where DRAExtendedResource is on by default.")
@output_option(pipe_default="yaml", help="table: names and selectors; yaml/json: the DeviceClasses.")
def deviceclasses_cmd(driver_kind: str, driver_name: str, compute_domain_driver_name: str,
                      kubernetes_version: str | None, output: str) -> None:
    """Print the DeviceClasses for full GPUs and MIG devices, and for ComputeDomain channels and daemons."""
    from gpudra.computedomain.devices import compute_domain_device_classes
    from gpudra.gpuplugin.slices import device_classes
    from gpudra.versions import gate_state, parse_version

    version = parse_version(kubernetes_version)
    classes = []
    if driver_kind in ("all", "gpu"):
        extended = gate_state("DRAExtendedResource", version)
        if not extended.default:  # the API server would drop the field: do not print what the cluster will not keep
            click.echo(f"warning: Kubernetes {version}: no extendedResourceName on the GPU class: it needs the "
                       f"DRAExtendedResource feature gate ({extended.describe()})", err=True)
        classes += device_classes(driver_name, extended_resource_name="nvidia.com/gpu" if extended.default else None)
    if driver_kind in ("all", "compute-domain"):
        classes += compute_domain_device_classes(compute_domain_driver_name)
    require_generated_valid(classes, "driver deviceclasses", version)
    dump_objects(classes, output)


@command.command("host-driver")
@click.option("--driver-root", default="/", show_default=True, help="where the NVIDIA driver's files are visible")
@click.option("--host-driver-root", default=None, help="the path of --driver-root on the host (default: the same)")
@click.option("--driver-version", default=None, help="the running driver's version (default: from libcuda.so.<version>)")
@click.option("--nvidia-cdi-hook-path", "cdi_hook_path", default=None, help="host path of nvidia-cdi-hook")
@output_option(pipe_default="yaml", help="table: one row per driver file found (wide: with the host path it is "
                                         "mounted from); yaml/json: the files and the CDI edits as data.")
def host_driver_cmd(driver_root: str, host_driver_root: str | None, driver_version: str | None,
                    cdi_hook_path: str | None, output: str) -> None:
    """Show the driver files found under the driver root and the CDI edits every claim spec gets (nvml backend)."""
    from gpudra.gpuplugin.hostdriver import discover_host_driver, host_driver_edits

    files = discover_host_driver(driver_root, version=driver_version)
    for warning in files.warnings:
        warn(warning)
    edits = host_driver_edits(files, host_driver_root=host_driver_root, hook_path=cdi_hook_path)
    if output in ("yaml", "json"):
        out = {"driverRoot": driver_root, "version": files.version, "libcudaDir": files.libcuda_dir,
               "libraries": files.libraries, "binaries": files.binaries, "firmware": files.firmware,
               "ipcSockets": files.ipc_sockets, "hook": files.hook, "containerEdits": edits.to_dict()}
        click.echo(render_data(out, output), nl=False)
        return
    sources = {mount.container_path: mount.host_path for mount in edits.mounts}
    found = [("library", files.libraries), ("binary", files.binaries), ("firmware", files.firmware),
             ("ipc-socket", files.ipc_sockets), ("cdi-hook", [files.hook] if files.hook else [])]
    rows = [[kind, path, *([sources.get(path, "-")] if output == "wide" else [])]
            for kind, paths in found for path in paths]
    if rows:
        click.echo(render_table(["TYPE", "PATH", *(["MOUNT-SOURCE"] if output == "wide" else [])], rows), nl=False)
    click.echo(f"driver {files.version or '(version unknown)'} under {driver_root}: every claim spec gets "
               f"{len(edits.mounts)} mounts, {len(edits.hooks)} hooks, {len(edits.env)} environment variables",
               err=True)


@command.command("run")
@click.option("--backend", type=click.Choice(BACKEND_CHOICES), default="auto", show_default=True, help=BACKEND_HELP)
@click.option("--profile", default="dgx-h100", show_default=True, help="simulated node profile or YAML file")
@node_option("This node's name (the Node object; $NODE_NAME, as the driver's DaemonSet sets it).", dest="node_name",
             required=True, envvar="NODE_NAME")
@driver_option("gpu: the GPU plugin (gpu.nvidia.com); compute-domain: the compute-domain.nvidia.com plugin (IMEX "
               "channels and daemons of ComputeDomains), a second process with its own sockets, as NVIDIA runs it")
@click.option("--driver-name", default=None, callback=dns_subdomain_value(63), help=DRIVER_NAME_HELP)
@click.option("--root", default="/", show_default=True,
              help="place every absolute path (sockets, checkpoint, CDI dirs) under this directory")
@click.option("--claims", "claims_dir", type=click.Path(file_okay=False),
              help="directory of allocated ResourceClaim YAML files (used without a kubeconfig)")
@click.option("--domains", "domains_dir", type=click.Path(file_okay=False),
              help="--driver compute-domain: directory of ComputeDomain objects (YAML/JSON, with status.nodes[]) "
                   "used without a kubeconfig; the node labels go to node-labels.json there")
@click.option("--domain-ready-wait", "domain_ready_wait_s", type=click.FloatRange(min=0), default=10.0,
              show_default=True, metavar="SECONDS",
              help="--driver compute-domain: how long a channel prepare waits for this node's IMEX daemon to be "
                   "Ready before failing (the kubelet retries)")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), envvar="KUBECONFIG",
              help="read claims from and publish ResourceSlices to this cluster")
@click.option("--in-cluster", is_flag=True, help="use the pod's service account")
@click.option("--dynamic-mig", is_flag=True, help="create MIG devices on demand at prepare time")
@click.option("--healthcheck-port", type=int, default=None, help="also serve gRPC health on TCP PORT (all addresses) for kubelet probes")
@click.option("--kubelet-registrar-directory-path", "registry_dir", default="/var/lib/kubelet/plugins_registry",
              show_default=True, help=REGISTRAR_HELP)
@click.option("--kubelet-plugins-directory-path", "plugins_dir", default="/var/lib/kubelet/plugins", show_default=True,
              help="the kubelet's plugin directory: the driver's DRA socket and checkpoint go in DIR/DRIVER-NAME")
@click.option("--cdi-root", "cdi_dir", default="/var/run/cdi", show_default=True,
              help="where the driver writes a CDI spec per prepared claim (the container runtime reads it)")
@click.option("--driver-root", default="/", show_default=True,
              help="where the NVIDIA driver's libraries and binaries are visible to this process (nvml backend); "
                   "they are bind-mounted read-only into GPU containers")
@click.option("--host-driver-root", default=None,
              help="the path of --driver-root on the host (default: --driver-root), e.g. / when the host's root is "
                   "mounted at /driver-root")
@click.option("--nvidia-cdi-hook-path", "cdi_hook_path", default=None,
              help="host path of nvidia-cdi-hook (default: looked up under the driver root; without it no hooks)")
@click.option("--socket-group", default=None,
              help="group (name or GID) whose members may also use the plugin sockets (mode 0660; default 0600, root only)")
@click.option("--claim-timeout", "call_deadline_s", type=click.FloatRange(min=0.1), default=40.0, show_default=True,
              metavar="SECONDS",
              help="answer each claim of a prepare/unprepare call within SECONDS (an error after it; the kubelet "
                   "gives up at 45)")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="serve Prometheus metrics on this TCP port (all addresses, path /metrics)")
@click.option("--device-health/--no-device-health", default=True, show_default=True,
              help="watch GPU health events (NVML XID/ECC/GPU lost; simulated: `driver inject-event`), taint affected "
                   "devices in the ResourceSlices and stream device health to the kubelet")
@click.option("--additional-xids-to-ignore", envvar="ADDITIONAL_XIDS_TO_IGNORE", default="", metavar="LIST",
              help="comma-separated XIDs treated like application errors (taint effect None) besides 13,31,43,45,68,109")
@click.option("--health-taint-effect", type=click.Choice(["NoSchedule", "NoExecute"]), default="NoSchedule",
              show_default=True,
              help="effect of the taint on a failed GPU (NVIDIA's NoSchedule; NoExecute: the device taint eviction "
                   "controller evicts the pods using it)")
@click.option("--device-taint-rules", is_flag=True,
              help="also keep one DeviceTaintRule per tainted device (resource.k8s.io v1/v1beta2/v1alpha3, whichever "
                   "the cluster serves)")
@click.option("--rolling-update-pod-uid", "rolling_update_uid", envvar="POD_UID", default=None, metavar="UID",
              help="this driver pod's UID (downward API): per-pod socket names so a new driver pod registers while "
                   "the old one still serves (kubelet >= 1.33); prepares of both are serialized by a file lock")
@kubernetes_version_option(KUBERNETES_VERSION_HELP)
@features_option()
@click.option("--feature-gates", "feature_gates", default="", metavar="NAME=BOOL,...",
              help="NVIDIA's driver feature gates, with its names and defaults (TimeSlicingSettings, MPSSupport, "
                   "DynamicMIG, NVMLDeviceHealthCheck, DRAListTypeAttributes, ConsumableShares, PassthroughSupport, "
                   "DeviceMetadata, FabricManagerPartitioning; AllAlpha/AllBeta). A gate whose feature gpudra lacks "
                   "(HostManagedIMEXDaemon, ...) is accepted only as =false.")
@click.option("--consumable-shares", "consumable_shares", envvar="CONSUMABLE_SHARES", default="disabled",
              show_default=True, metavar="disabled|memory|unlimited|N",
              help="NVIDIA's consumable shares (needs --feature-gates ConsumableShares=true): GPUs and MIG devices "
                   "allow multiple allocations, sharing `memory` (memory: each claim takes all of it unless it asks "
                   "for less; unlimited: none unless asked) or N `shares` as well; MPS claims are refused")
@click.option("--no-fsync", is_flag=True, hidden=True, help="skip fsync (benchmarks on slow disks only)")
@click.option("-v", "--verbose", is_flag=True, help="log at debug level (every gRPC call, publication and health "
                                                    "event)")
def run_cmd(backend: str, profile: str, node_name: str, driver_kind: str, driver_name: str | None, root: str,
            claims_dir: str | None, domains_dir: str | None, domain_ready_wait_s: float, kubeconfig: str | None, in_cluster: bool, dynamic_mig: bool, healthcheck_port: int | None,
            registry_dir: str, plugins_dir: str, cdi_dir: str, driver_root: str, host_driver_root: str | None,
            cdi_hook_path: str | None, socket_group: str | None, call_deadline_s: float, metrics_port: int | None,
            device_health: bool, additional_xids_to_ignore: str, health_taint_effect: str, device_taint_rules: bool,
            rolling_update_uid: str | None, kubernetes_version: str | None, features: str, feature_gates: str,
            consumable_shares: str, no_fsync: bool, verbose: bool) -> None:
    """Run the node agent: reconcile, publish ResourceSlices, serve the kubelet plugin until SIGTERM."""
    driver_name = driver_name_for(driver_kind, driver_name)
    gates = driver_gates(feature_gates, kubernetes_version, features)
    from gpudra.gpuplugin.consumableshares import check_option, enabled as consumable_enabled
    try:
        consumable_shares = check_option(consumable_shares, gates.enabled("ConsumableShares"))
    except ValueError as exc:
        fail(str(exc))
    if consumable_enabled(consumable_shares):
        if driver_kind == "compute-domain":
            fail("--consumable-shares is a GPU driver option; the compute-domain driver shares no device")
        warn_unless_consumable(kubernetes_version, features)
    dynamic_mig = gated_flag("--dynamic-mig", "dynamic_mig", dynamic_mig, gates, "DynamicMIG")
    device_health = gated_flag("--device-health", "device_health", device_health, gates, "NVMLDeviceHealthCheck")
    passthrough = gates.enabled("PassthroughSupport")
    if passthrough and device_health:  # NVIDIA's gates exclude each other: NVML cannot watch a vfio-bound GPU
        ctx = click.get_current_context(silent=True)
        if ctx is not None and ctx.get_parameter_source("device_health") == click.core.ParameterSource.COMMANDLINE:
            fail("--device-health cannot be on with --feature-gates PassthroughSupport=true (NVIDIA's gates "
                  "PassthroughSupport and NVMLDeviceHealthCheck are mutually exclusive)")
        device_health = False
    if driver_kind == "compute-domain" and dynamic_mig:
        fail("--dynamic-mig is a GPU driver option; the compute-domain driver has no MIG devices")
    chosen_backend = published_backend(backend, profile, kubeconfig, in_cluster)
    dynamic_mig, layout = slice_layout(dynamic_mig, kubernetes_version, features, kubeconfig,
                                        live=bool(kubeconfig or in_cluster))
    from gpudra.gpuplugin.agent import AgentError, AgentOptions, DriverAgent
    from gpudra.computedomain.agent import ComputeDomainAgent
    from gpudra.kubeletplugin.checkpoint import CheckpointError
    from gpudra.gpuplugin.health import parse_xid_list
    from gpudra.kubeletplugin.publisher import PublishError

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    lacking = gates.unimplemented_defaults()
    if lacking:  # said once at start, so a reader of the log knows where gpudra parts from NVIDIA's defaults
        logging.getLogger("gpudra.driver").warning(
            "feature gates on by NVIDIA's default that gpudra does not implement (it behaves as if off): %s",
            "; ".join(f"{g.name} ({g.gpudra})" for g in lacking))
    options = AgentOptions(node_name=node_name, backend=chosen_backend, profile=profile, driver_name=driver_name, root=root,
                           claims_dir=claims_dir, kubeconfig=kubeconfig, in_cluster=in_cluster,
                           dynamic_mig=dynamic_mig, slice_layout=layout, healthcheck_port=healthcheck_port,
                           numa_list=gates.enabled("DRAListTypeAttributes"),
                           sharing_strategies=gates.sharing_strategies(), consumable_shares=consumable_shares,
                           passthrough=passthrough and driver_kind != "compute-domain",
                           device_metadata=gates.enabled("DeviceMetadata") and driver_kind != "compute-domain",
                           fabric_partitions=gates.enabled("FabricManagerPartitioning")
                           and driver_kind != "compute-domain",
                           fsync=not no_fsync,
                           registry_dir=registry_dir, plugins_dir=plugins_dir, cdi_dir=cdi_dir,
                           driver_root=driver_root, host_driver_root=host_driver_root, cdi_hook_path=cdi_hook_path,
                           socket_group=socket_group, call_deadline_s=call_deadline_s, metrics_port=metrics_port,
                           health_events=device_health, health_stream=device_health,
                           ignored_xids=parse_xid_list(additional_xids_to_ignore),
                           health_taint_effect=health_taint_effect,
                           rolling_update_uid=rolling_update_uid, device_taint_rules=device_taint_rules,
                           domains_dir=domains_dir, domain_ready_wait_s=domain_ready_wait_s,
                           imex_dns_names=gates.enabled("IMEXDaemonsWithDNSNames"))
    try:
        agent: DriverAgent | ComputeDomainAgent
        if driver_kind == "compute-domain":
            agent = ComputeDomainAgent(options)
        else:
            agent = DriverAgent(options)
        agent.start()
    except (AgentError, DiscoveryError, CheckpointError, PublishError, ValueError, OSError) as exc:
        fail(str(exc))
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    signal.signal(signal.SIGINT, lambda *_: agent.stop())
    click.echo(f"ready: {agent.paths.dra_socket}", err=True)
    agent.wait()


command.add_command(driver_services.webhook_cmd)
command.add_command(driver_services.compute_domain_controller_cmd)
command.add_command(driver_services.compute_domain_daemon_cmd)
command.add_command(driver_tools.inject_event_cmd)
command.add_command(driver_tools.prepare_cmd)
command.add_command(driver_tools.status_cmd)
