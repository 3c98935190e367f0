"""`gpudra driver`: ResourceSlices, DeviceClasses and the node agent (kubelet plugin)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from typing import NoReturn

import click

from gpudra.cli.errors import InputError, warn
from gpudra.cli.inputs import require_generated_valid
from gpudra.vocabulary import COMPUTE_DOMAIN_DRIVER_NAME, DRIVER_NAME
from gpudra.computedomain.daemonstatus import MAX_NODES_PER_IMEX_DOMAIN
from gpudra.cli.options import BACKEND_HELP, backend_option, dns_subdomain_value, node_option
from gpudra.cli.output import output_option, render_data, render_objects, render_table
from gpudra.cli.options import features_option, kubernetes_version_option
from gpudra.discovery import BACKEND_CHOICES, DiscoveryError, read_inventory, resolve_backend



def profile_named() -> bool:
    """Whether the user typed --profile (as opposed to its default)."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source("profile") if ctx is not None else None
    return source in (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)


DRIVER_NAME_HELP = ("The DRA driver's name (ResourceSlices' spec.driver, the DeviceClasses' selectors); default "
                    f"{DRIVER_NAME}, or {COMPUTE_DOMAIN_DRIVER_NAME} with --driver compute-domain.")
RUNNING_DRIVER_HELP = f"The running driver's name ({COMPUTE_DOMAIN_DRIVER_NAME} for the compute-domain plugin)."
DRIVERS = ("gpu", "compute-domain")


def driver_option(help_text: str, default: str = "gpu", choices: tuple[str, ...] = DRIVERS):
    """--driver: which of gpudra's two kubelet plugins (NVIDIA runs them as two containers of one DaemonSet pod)."""
    return click.option("--driver", "driver_kind", type=click.Choice(choices), default=default, show_default=True,
                        help=help_text)


def _driver_name(driver_kind: str, driver_name: str | None) -> str:
    return driver_name or (COMPUTE_DOMAIN_DRIVER_NAME if driver_kind == "compute-domain" else DRIVER_NAME)
REGISTRAR_HELP = "the kubelet's plugin registration directory (the driver's registration socket, under --root)"


def _fail(message: str) -> NoReturn:
    raise InputError(message)


def _backend(backend: str, profile: str | None) -> str:
    chosen, warning = resolve_backend(backend, profile, profile_named())
    if warning:
        warn(warning)
    return chosen


def _published_backend(backend: str, profile: str | None, kubeconfig: str | None, in_cluster: bool) -> str:
    """The backend `driver run` uses. Publishing to an API server (--kubeconfig, KUBECONFIG, --in-cluster), simulated
    GPUs must be asked for by name (`--backend simulated`): `auto` falling back to them (no NVML, or a --profile)
    would have the scheduler place pods on GPUs that do not exist (issue 20), so that is refused."""
    if backend != "auto" or not (kubeconfig or in_cluster):
        return _backend(backend, profile)
    chosen, _ = resolve_backend(backend, profile, profile_named())
    if chosen == "simulated":
        ctx = click.get_current_context(silent=True)
        from_env = ctx is not None and ctx.get_parameter_source("kubeconfig") == click.core.ParameterSource.ENVIRONMENT
        target = "--in-cluster" if in_cluster else "KUBECONFIG" if from_env else "--kubeconfig"
        why = "--profile names a simulated node" if profile_named() else "no NVIDIA driver (NVML) on this machine"
        _fail(f"--backend auto would publish SIMULATED GPUs to the cluster of {target} ({why}), and the scheduler "
              "would place pods on GPUs that do not exist: pass --backend simulated to publish simulated GPUs on "
              "purpose, or --backend nvml for this node's real GPUs")
    return chosen


KUBERNETES_VERSION_HELP = ("Kubernetes release of the cluster (1.33-1.36; default: the API server's /version with "
                           "a kubeconfig, else 1.36): decides whether --dynamic-mig's layout can be allocated there.")


def _slice_layout(dynamic_mig: bool, kubernetes_version: str | None, features: str,
                  kubeconfig: str | None = None, live: bool = False) -> tuple[bool, str]:
    """(--dynamic-mig when the release allows it, else False with a warning that says why; where the release
    wants counter sets: gpudra.versions.partitionable_layout)."""
    from gpudra.allocator.features import Features
    from gpudra.gpuplugin.slices import dynamic_mig_layout
    from gpudra.kube.inputs import kubernetes_version as cluster_version
    from gpudra.versions import VersionError, parse_version, partitionable_layout

    try:
        if not dynamic_mig:  # the flags decide nothing then, but a typo in them is still an error
            Features.parse(features, parse_version(kubernetes_version))
            return False, partitionable_layout(kubernetes_version)
        version = cluster_version(kubernetes_version, (), kubeconfig) if live else parse_version(kubernetes_version)
        dynamic, note = dynamic_mig_layout(version, features)
    except VersionError as exc:
        _fail(f"--kubernetes-version: {exc}")
    except (InputError, ValueError) as exc:
        _fail(str(exc))
    if note:
        click.echo(f"warning: Kubernetes {version}: {note}", err=True)
    return dynamic, partitionable_layout(version)


def _warn_unless_consumable(kubernetes_version: str | None, features: str) -> None:
    """Consumable sharing's fields (allowMultipleAllocations, requestPolicy) are dropped by an API server whose
    DRAConsumableCapacity gate is off: the GPUs would then be handed out whole, one claim each."""
    from gpudra.allocator.features import Features
    from gpudra.versions import gate_state, parse_version

    version = parse_version(kubernetes_version)  # both flags were checked by _slice_layout
    if not Features.parse(features, version).consumable_capacity:
        click.echo(f"warning: Kubernetes {version}: consumable sharing needs the DRAConsumableCapacity feature gate "
                   f"({gate_state('DRAConsumableCapacity', version).describe()}); without it the API server drops "
                   f"allowMultipleAllocations and each GPU goes to one claim", err=True)


def _driver_gates(text: str, kubernetes_version: str | None, features: str):
    """--feature-gates (NVIDIA's gates: gpudra.gpuplugin.featuregates), with the one gate that needs the cluster's
    own: DRAListTypeAttributes publishes list attributes, which an API server without Kubernetes' gate of that
    name refuses (NVIDIA's featuregates.go says to enable the cluster's first)."""
    from gpudra.allocator.features import Features
    from gpudra.gpuplugin.featuregates import FeatureGateError, parse_feature_gates
    from gpudra.versions import VersionError, gate_state, parse_version

    try:
        gates = parse_feature_gates(text)
        version = parse_version(kubernetes_version)
        cluster_has = (gate_state("DRAListTypeAttributes", version).stage is not None
                       and Features.parse(features, version).list_type_attributes)
        if gates.enabled("DRAListTypeAttributes") and not cluster_has:
            _fail(f"--feature-gates DRAListTypeAttributes=true: Kubernetes {version} needs its DRAListTypeAttributes "
                  f"feature gate ({gate_state('DRAListTypeAttributes', version).describe()}) for list attributes; "
                  "turn it on there (--features +DRAListTypeAttributes) or leave the driver's gate off")
    except FeatureGateError as exc:
        _fail(f"--feature-gates: {exc}")
    except (VersionError, ValueError) as exc:
        _fail(str(exc))
    return gates


def _gated_flag(flag: str, param: str, value: bool, gates, gate: str) -> bool:
    """A gpudra flag that a NVIDIA gate also switches: the gate, when named, decides; both named must agree."""
    if not gates.named(gate):
        return value
    ctx = click.get_current_context(silent=True)
    typed = ctx is not None and ctx.get_parameter_source(param) == click.core.ParameterSource.COMMANDLINE
    if typed and value != gates.enabled(gate):
        _fail(f"{flag} says {str(value).lower()} but --feature-gates {gate}={str(gates.enabled(gate)).lower()}")
    return gates.enabled(gate)


def _dump(objs: list, output: str) -> None:
    if output in ("table", "wide"):
        click.echo(slices_table(objs, output == "wide"), nl=False)
    else:
        click.echo(render_objects(objs, output), nl=False)


def slices_table(objs: list, wide: bool) -> str:
    """ResourceSlices: NAME, NODE, POOL, DEVICES (wide: driver and generation); DeviceClasses: NAME and the
    selectors (wide: every selector in full)."""
    if objs and objs[0].get("kind") == "DeviceClass":
        rows = []
        for obj in objs:
            selectors = [((s or {}).get("cel") or {}).get("expression", "") for s in
                         (obj.get("spec") or {}).get("selectors") or []]
            text = " && ".join(selectors)
            rows.append([obj["metadata"]["name"], text if wide or len(text) <= 60 else text[:59] + "…"])
        return render_table(["NAME", "SELECTORS"], rows)
    rows = []
    for obj in objs:
        spec = obj.get("spec") or {}
        pool = spec.get("pool") or {}
        row = [obj["metadata"]["name"], spec.get("nodeName", "-"), pool.get("name", ""),
               str(len(spec.get("devices") or []))]
        rows.append([*row, spec.get("driver", ""), str(pool.get("generation", ""))] if wide else row)
    return render_table(["NAME", "NODE", "POOL", "DEVICES", *(["DRIVER", "GENERATION"] if wide else [])], rows)


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

    driver_name = _driver_name(driver_kind, driver_name)
    if driver_kind == "compute-domain":
        if dynamic_mig or sharing != "none":
            _fail("--dynamic-mig and --sharing are GPU driver options; the compute-domain driver has neither")
        _dump(_compute_domain_slices(backend, profile, node_name, driver_name, generation,
                                     parse_version(kubernetes_version)), output)
        return
    dynamic_mig, layout = _slice_layout(dynamic_mig, kubernetes_version, features)
    if sharing == "consumable":
        _warn_unless_consumable(kubernetes_version, features)
    try:
        inventory = read_inventory(_backend(backend, profile), profile=profile, node_name=node_name)
    except DiscoveryError as exc:
        _fail(str(exc))
    for problem in inventory.problems:
        warn(str(problem))
    try:
        slices = build_resource_slices(inventory, node_name, driver_name=driver_name, generation=generation,
                                       dynamic_mig=dynamic_mig, sharing=sharing, slice_layout=layout)
    except ValueError as exc:
        _fail(str(exc))
    require_generated_valid(slices, "driver slices", parse_version(kubernetes_version))
    _dump(slices, output)


def _compute_domain_slices(backend: str, profile: str, node_name: str, driver_name: str, generation: int,
                           version) -> list:
    from gpudra.computedomain.devices import compute_domain_slices, node_clique

    try:
        clique = node_clique(read_inventory(_backend(backend, profile), profile=profile, node_name=node_name))
    except DiscoveryError as exc:
        _fail(str(exc))
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
    _dump(classes, output)


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
    driver_name = _driver_name(driver_kind, driver_name)
    gates = _driver_gates(feature_gates, kubernetes_version, features)
    from gpudra.gpuplugin.consumableshares import check_option, enabled as consumable_enabled
    try:
        consumable_shares = check_option(consumable_shares, gates.enabled("ConsumableShares"))
    except ValueError as exc:
        _fail(str(exc))
    if consumable_enabled(consumable_shares):
        if driver_kind == "compute-domain":
            _fail("--consumable-shares is a GPU driver option; the compute-domain driver shares no device")
        _warn_unless_consumable(kubernetes_version, features)
    dynamic_mig = _gated_flag("--dynamic-mig", "dynamic_mig", dynamic_mig, gates, "DynamicMIG")
    device_health = _gated_flag("--device-health", "device_health", device_health, gates, "NVMLDeviceHealthCheck")
    passthrough = gates.enabled("PassthroughSupport")
    if passthrough and device_health:  # NVIDIA's gates exclude each other: NVML cannot watch a vfio-bound GPU
        ctx = click.get_current_context(silent=True)
        if ctx is not None and ctx.get_parameter_source("device_health") == click.core.ParameterSource.COMMANDLINE:
            _fail("--device-health cannot be on with --feature-gates PassthroughSupport=true (NVIDIA's gates "
                  "PassthroughSupport and NVMLDeviceHealthCheck are mutually exclusive)")
        device_health = False
    if driver_kind == "compute-domain" and dynamic_mig:
        _fail("--dynamic-mig is a GPU driver option; the compute-domain driver has no MIG devices")
    chosen_backend = _published_backend(backend, profile, kubeconfig, in_cluster)
    dynamic_mig, layout = _slice_layout(dynamic_mig, kubernetes_version, features, kubeconfig,
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
        _fail(str(exc))
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    signal.signal(signal.SIGINT, lambda *_: agent.stop())
    click.echo(f"ready: {agent.paths.dra_socket}", err=True)
    agent.wait()


@command.command("webhook")
@click.option("--tls-cert-file", required=True, type=click.Path(dir_okay=False), metavar="PATH",
              help="x509 certificate for HTTPS (PEM; a CA certificate, if any, concatenated after it)")
@click.option("--tls-private-key-file", required=True, type=click.Path(dir_okay=False), metavar="PATH",
              help="the private key matching --tls-cert-file (PEM)")
@click.option("--port", type=click.IntRange(0, 65535), default=443, show_default=True,
              help="HTTPS port (0: any free port, printed on stderr)")
@click.option("--bind-address", default="", metavar="ADDRESS", help="address to listen on (default: all)")
@click.option("--driver-name", default=DRIVER_NAME, show_default=True, callback=dns_subdomain_value(63),
              help="check the opaque configs of this driver; other drivers' configs are let through")
@click.option("-v", "--verbose", is_flag=True, help="Log every admission review at debug level.")
def webhook_cmd(tls_cert_file: str, tls_private_key_file: str, port: int, bind_address: str, driver_name: str,
                verbose: bool) -> None:
    """Serve the validating admission webhook: refuse ResourceClaims, ResourceClaimTemplates and DeviceClasses whose
    GpuConfig / MigDeviceConfig the driver would refuse at prepare time: `gpudra validate`'s checks of those opaque configs only
    (the rest of the object, its selectors included, is the API server's to check; `gpudra validate` does both).

    POST /validate-resource-claim-parameters takes an admission.k8s.io/v1 AdmissionReview; GET /readyz answers
    ok. deploy/kubernetes/webhook.yaml registers it (the chart: --set webhook.enabled=true)."""
    from gpudra.webhook.server import WebhookError, WebhookServer

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server = WebhookServer((bind_address, port), tls_cert_file, tls_private_key_file, driver_name)
    except WebhookError as exc:
        _fail(str(exc))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    click.echo(f"ready: https://{bind_address or '0.0.0.0'}:{server.port}", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@command.command("compute-domain-controller")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), envvar="KUBECONFIG",
              help="the cluster whose ComputeDomains to reconcile")
@click.option("--in-cluster", is_flag=True, help="use the pod's service account")
@click.option("--interval", "interval_s", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              metavar="SECONDS", help="seconds between reconcile rounds over every ComputeDomain")
@click.option("--status-from-daemons", is_flag=True,
              help="status.nodes from what the IMEX daemons write (`driver compute-domain-daemon`): their "
                   "ComputeDomainCliques, or with ComputeDomainCliques=false their status.nodes entries; "
                   "default: from the daemon pods")
@click.option("--feature-gates", "feature_gates", default="", envvar="FEATURE_GATES", metavar="NAME=BOOL,...",
              help="NVIDIA's gates (ComputeDomainCliques: where the daemons write); the daemons get the same")
@click.option("--image-name", default=None, envvar="IMAGE_NAME", metavar="IMAGE",
              help="the image of the IMEX daemons' pods (NVIDIA's IMAGE_NAME: the controller's own)  "
                   "[default: ghcr.io/gpudra/gpudra:<version>]")
@click.option("--max-nodes-per-imex-domain", "max_nodes", type=click.IntRange(min=1), default=MAX_NODES_PER_IMEX_DOMAIN,
              show_default=True,
              envvar="MAX_NODES_PER_IMEX_DOMAIN", help="passed to the IMEX daemons (their clique's size limit)")
@click.option("-v", "--verbose", is_flag=True, help="log every object created, deleted or released")
def compute_domain_controller_cmd(kubeconfig: str | None, in_cluster: bool, interval_s: float,
                                  status_from_daemons: bool, feature_gates: str, image_name: str | None,
                                  max_nodes: int, verbose: bool) -> None:
    """Run the ComputeDomain controller against an API server (NVIDIA's CRD installed): per domain the IMEX
    daemons' DaemonSet and claim templates, status from the daemons, teardown on deletion. Runs until SIGTERM."""
    if not (kubeconfig or in_cluster):
        _fail("give --kubeconfig or --in-cluster: the controller reconciles a cluster's ComputeDomains")
    from kubernetes.config import ConfigException

    from gpudra.computedomain.controller import DEFAULT_IMAGE, DaemonPod, StatusSource
    from gpudra.gpuplugin.featuregates import FeatureGateError, parse_feature_gates
    from gpudra.kubecluster.cdcontroller import run_controller
    from gpudra.kubecluster.rest import Rest

    try:
        gates = parse_feature_gates(feature_gates)
    except FeatureGateError as exc:
        _fail(f"--feature-gates: {exc}")
    source = StatusSource(daemons_write=status_from_daemons, cliques_gate=gates.enabled("ComputeDomainCliques"))
    daemon = DaemonPod(image=image_name or DEFAULT_IMAGE, max_nodes=max_nodes,
                       feature_gates=tuple(sorted(gates.set.items())),
                       dns_names=gates.enabled("IMEXDaemonsWithDNSNames"))

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        rest = Rest(kubeconfig, in_cluster=in_cluster)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        _fail(f"cannot load the cluster configuration: {exc}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        run_controller(rest, stop, interval_s, source, daemon)
    except KeyboardInterrupt:
        pass
    finally:
        rest.close()


@command.command("compute-domain-daemon")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), envvar="KUBECONFIG", help="the cluster to write to")
@click.option("--in-cluster", is_flag=True, help="use the pod's service account")
@click.option("--feature-gates", "feature_gates", default="", envvar="FEATURE_GATES", metavar="NAME=BOOL,...",
              help="NVIDIA's gates; ComputeDomainCliques picks where the daemon writes")
@click.option("--hosts-file", default=None, type=click.Path(dir_okay=False),
              help="keep the clique's IP -> compute-domain-daemon-NNNN lines here (NVIDIA writes /etc/hosts); "
                   "with IMEXDaemonsWithDNSNames only")
@click.option("--interval", "interval_s", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              metavar="SECONDS", help="seconds between rounds")
@click.option("-v", "--verbose", is_flag=True, help="log every write")
def compute_domain_daemon_cmd(kubeconfig: str | None, in_cluster: bool, feature_gates: str, hosts_file: str | None,
                              interval_s: float, verbose: bool) -> None:
    """The IMEX daemon's bookkeeping (NVIDIA's cmd/compute-domain-daemon, without the IMEX process): lists this
    node in its own ComputeDomain's status.nodes, or in its ComputeDomainClique, follows its pod's readiness,
    and takes itself off at SIGTERM. Who it is comes from NVIDIA's environment (COMPUTE_DOMAIN_UUID/NAME/
    NAMESPACE, CLIQUE_ID, NODE_NAME, POD_IP, POD_NAME, POD_UID, POD_NAMESPACE, MAX_NODES_PER_IMEX_DOMAIN)."""
    if not (kubeconfig or in_cluster):
        _fail("give --kubeconfig or --in-cluster: the daemon writes to a cluster's API server")
    from kubernetes.config import ConfigException

    from gpudra.gpuplugin.featuregates import FeatureGateError, parse_feature_gates
    from gpudra.kubecluster.cddaemon import DaemonWriter, identity_from_env, run_daemon
    from gpudra.kubecluster.rest import Rest

    try:
        gates = parse_feature_gates(feature_gates)
        me = identity_from_env(os.environ)
    except FeatureGateError as exc:
        _fail(f"--feature-gates: {exc}")
    except ValueError as exc:
        _fail(str(exc))
    if hosts_file and not gates.enabled("IMEXDaemonsWithDNSNames"):
        _fail("--hosts-file needs the IMEXDaemonsWithDNSNames feature gate")
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        rest = Rest(kubeconfig, in_cluster=in_cluster)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        _fail(f"cannot load the cluster configuration: {exc}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        run_daemon(DaemonWriter(rest, me, cliques=gates.enabled("ComputeDomainCliques")), stop, interval_s,
                   hosts_path=hosts_file)
    except KeyboardInterrupt:
        pass
    finally:
        rest.close()


@command.command("inject-event")
@click.option("--root", default="/", show_default=True, help="the --root the driver runs with")
@click.option("--gpu", "gpu", default=None, help="GPU minor number or UUID (default: every GPU, for --gpu-lost)")
@click.option("--xid", type=click.IntRange(min=0), default=None, help="an XID critical error with this number")
@click.option("--ecc", is_flag=True, help="an uncorrectable (double-bit) ECC error")
@click.option("--gpu-lost", is_flag=True, help="the GPU fell off the bus")
@click.option("--clear", is_flag=True, help="the error cleared (with --xid N: that XID): removes the taints of "
                                            "errors that clear on their own (NVIDIA's XID catalog: IGNORE, RESTART_APP)")
@click.option("--reset", is_flag=True, help="the GPU was reset: removes every taint but those needing a reboot "
                                            "(XID 79, a lost or unmonitored GPU)")
@click.option("--gi", "gi_id", type=click.IntRange(min=0), default=None, help="GPU instance ID (one MIG device)")
@click.option("--ci", "ci_id", type=click.IntRange(min=0), default=None, help="compute instance ID (with --gi)")
def inject_event_cmd(root: str, gpu: str | None, xid: int | None, ecc: bool,
                     gpu_lost: bool, clear: bool, reset: bool, gi_id: int | None, ci_id: int | None) -> None:
    """Inject a GPU health event into a driver running with the simulated backend: it taints the device
    (or, with --clear/--reset, removes the taints that recovery removes) and republishes its ResourceSlices
    (a GPU it does not have is logged and ignored)."""
    from gpudra.discovery.health import HealthEvent, HealthEventError, spool_dir_for, write_spooled_event
    from gpudra.kubeletplugin.paths import DriverPaths

    if clear or reset:
        kinds = [k for k, on in (("recovered", clear), ("gpu-reset", reset), ("ecc", ecc), ("gpu-lost", gpu_lost))
                 if on]
        if len(kinds) != 1 or (reset and xid is not None):
            _fail("give one of --clear [--xid N] or --reset (not with --ecc or --gpu-lost)")
    else:
        kinds = [k for k, on in (("xid", xid is not None), ("ecc", ecc), ("gpu-lost", gpu_lost)) if on]
        if len(kinds) != 1:
            _fail("give exactly one of --xid N, --ecc, --gpu-lost, --clear, --reset")
    if gpu is None and kinds[0] != "gpu-lost":
        _fail("--gpu is required for --clear and --reset" if clear or reset else "--gpu is required for --xid and --ecc")
    if ci_id is not None and gi_id is None:
        _fail("--ci needs --gi")
    state = DriverPaths(root=root).simulated_state
    if not os.path.exists(state):  # most likely a mistyped --root: nothing would ever read the event
        _fail(f"no simulated GPUs under {root} ({state} does not exist): give the --root of a driver started "
              f"with --backend simulated (a local cluster's node: DIR/nodes/NODE, DIR as `gpudra cluster up` "
              f"printed it); nothing was written")
    try:
        event = HealthEvent(kinds[0], gpu=gpu, gi_id=gi_id, ci_id=ci_id, xid=xid)
        path = write_spooled_event(spool_dir_for(state), event)
    except (HealthEventError, OSError) as exc:
        _fail(str(exc))
    click.echo(json.dumps({"event": event.to_dict(), "spooled": path}))


def _claim_refs(claim_files: tuple[str, ...]) -> list[tuple[str, str, str]]:
    from gpudra.cli.inputs import read_documents

    refs = []
    # the one loader: files, directories, stdin, `List`s (what `gpudra allocate` prints), JSON and YAML
    for document in read_documents(claim_files):
        doc = document.obj
        if isinstance(doc, dict) and doc.get("kind") == "ResourceClaim":
            meta = doc.get("metadata") or {}
            refs.append((meta.get("namespace") or "default", meta.get("name", ""), meta.get("uid", "")))
    if not refs:
        _fail("no ResourceClaim in the given files")
    missing = [f"{ns}/{name}" for ns, name, uid in refs if not uid]
    if missing:  # the driver would refuse each one ("uid: must not be empty"): say how to give them one
        import uuid

        _fail(f"ResourceClaim {', '.join(missing)} has no metadata.uid: the kubelet names a claim by the UID the "
              f"API server gave it, and the driver prepares it only when its copy (--claims DIR) has the same UID. "
              f"A claim printed by `gpudra allocate` has none: add one under metadata in both, e.g. "
              f"`uid: {uuid.uuid4()}` (any RFC 4122 UUID, as `uuidgen` prints)")
    return refs


def _kubelet(root: str, driver_name: str, registry_dir: str):
    import grpc

    from gpudra.kubeletplugin.kubelet_client import KubeletClient
    from gpudra.kubeletplugin.paths import DriverPaths

    paths = DriverPaths(driver_name=driver_name, root=root, registry_dir=registry_dir)
    sockets = paths.registration_sockets()  # rolling updates: one per driver pod; the kubelet takes the newest
    client = KubeletClient(sockets[0] if sockets else paths.registration_socket)
    try:
        client.register()
    except (grpc.RpcError, RuntimeError) as exc:
        _fail(f"cannot register with the plugin at {client.registration_socket}: "
              f"{exc.details() if isinstance(exc, grpc.RpcError) else exc}")
    return client, paths


@command.command("prepare")
@click.argument("claim_files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--root", default="/", show_default=True, help="the --root the driver runs with")
@click.option("--driver-name", default=DRIVER_NAME, show_default=True, help=RUNNING_DRIVER_HELP)
@click.option("--kubelet-registrar-directory-path", "registry_dir", default="/var/lib/kubelet/plugins_registry",
              show_default=True, help=REGISTRAR_HELP)
@click.option("--unprepare", is_flag=True, help="call NodeUnprepareResources instead")
@click.option("--show-container", is_flag=True, help="also print the OCI spec a container would get")
@output_option(pipe_default="yaml", help="table: one row per claim (wide: with its CDI device IDs); yaml/json: the "
                                         "kubelet's answer per claim as data.")
def prepare_cmd(claim_files: tuple[str, ...], root: str, driver_name: str, registry_dir: str, unprepare: bool,
                show_container: bool, output: str) -> None:
    """Act as the kubelet: register with a running driver and (un)prepare the claims in CLAIM_FILES."""
    refs = _claim_refs(claim_files)
    client, paths = _kubelet(root, driver_name, registry_dir)
    try:
        reply = client.unprepare(refs) if unprepare else client.prepare(refs)
    finally:
        client.close()
    failed = False
    out = []
    for ns, name, uid in refs:
        answer = reply.claims[uid]
        entry: dict = {"claim": f"{ns}/{name}", "uid": uid}
        if answer.error:
            entry["error"] = answer.error
            failed = True
        elif not unprepare:
            entry["devices"] = [{"requestNames": list(d.request_names), "pool": d.pool_name, "device": d.device_name,
                                 "cdiDeviceIDs": list(d.cdi_device_ids)} for d in answer.devices]
            if show_container:
                from gpudra.cdi import CdiError, apply_devices, default_oci_spec

                ids = [i for d in answer.devices for i in d.cdi_device_ids]
                try:
                    oci = apply_devices(default_oci_spec(), ids, paths.cdi_spec_dirs)
                    entry["container"] = {"env": oci["process"]["env"],
                                          "devices": [d["path"] for d in oci["linux"].get("devices", [])],
                                          "mounts": [m["destination"] for m in oci.get("mounts", [])]}
                except CdiError as exc:
                    entry["container"] = {"error": str(exc)}
        out.append(entry)
    if output in ("yaml", "json"):
        click.echo(render_data(out, output), nl=False)
    else:
        _prepare_table(out, output == "wide", show_container, "Unprepared" if unprepare else "Prepared")
    if failed:
        sys.exit(1)


def _prepare_table(entries: list[dict], wide: bool, show_container: bool, done: str) -> None:
    """CLAIM, UID, DEVICES (wide: CDI-DEVICE-IDS; --show-container: CONTAINER-DEVICES), then STATUS last: `Prepared`
    or the driver's error, which can be long and wraps."""
    rows = []
    for entry in entries:
        devices = entry.get("devices") or []
        row = [entry["claim"], entry["uid"], ",".join(d["device"] for d in devices) or "-"]
        if wide:
            row.append(",".join(i for d in devices for i in d["cdiDeviceIDs"]) or "-")
        if show_container:
            container = entry.get("container") or {}
            row.append(",".join(container.get("devices") or []) or container.get("error", "-"))
        rows.append([*row, f"error: {entry['error']}" if "error" in entry else done])
    headers = ["CLAIM", "UID", "DEVICES", *(["CDI-DEVICE-IDS"] if wide else []),
               *(["CONTAINER-DEVICES"] if show_container else []), "STATUS"]
    click.echo(render_table(headers, rows), nl=False)


@command.command("status")
@click.option("--root", default="/", show_default=True, help="the --root the driver runs with")
@click.option("--driver-name", default=DRIVER_NAME, show_default=True, help=RUNNING_DRIVER_HELP)
@click.option("--kubelet-plugins-directory-path", "plugins_dir", default="/var/lib/kubelet/plugins",
              show_default=True, help="the driver's --kubelet-plugins-directory-path, where its checkpoint is (a "
                                      "local cluster's nodes: /plugins)")
@output_option(pipe_default="yaml", help="table: one row per prepared claim (wide: with its CDI device IDs and "
                                         "spec file); yaml/json: the checkpoint's report.")
def status_cmd(root: str, driver_name: str, plugins_dir: str, output: str) -> None:
    """Show the prepared claims recorded in the driver's checkpoint and their CDI specs. A --root where no driver
    ever ran (no plugin directory) is an error, exit 2."""
    from gpudra.kubeletplugin.checkpoint import CheckpointError, read_checkpoint
    from gpudra.kubeletplugin.claimpaths import ClaimPathError, cdi_spec_path
    from gpudra.kubeletplugin.paths import DriverPaths
    from gpudra.kubeletplugin.quarantine import load_quarantine

    paths = DriverPaths(driver_name=driver_name, root=root, plugins_dir=plugins_dir)
    if not os.path.isdir(paths.plugin_dir):  # a mistyped --root: "no prepared claims" would be a wrong answer
        _fail(f"no {driver_name} driver under {root} ({paths.plugin_dir} does not exist): give the --root (and "
              f"--kubelet-plugins-directory-path) the driver runs with; a local cluster's node: --root "
              f"DIR/nodes/NODE --kubelet-plugins-directory-path /plugins")
    try:
        data = read_checkpoint(paths.checkpoint)
        quarantined = load_quarantine(paths.quarantine)
    except CheckpointError as exc:
        _fail(str(exc))
    claims = []
    # the driver quarantines unusable entries at its next start
    invalid = sorted(({"uid": bad.uid, "reason": bad.reason} for bad in data.unusable), key=lambda i: i["uid"]) \
        if data is not None else []
    for uid, entry in sorted((data.claims if data is not None else {}).items()):
        try:
            spec: str | None = cdi_spec_path(paths.cdi_spec_dir, driver_name, uid)
        except ClaimPathError:  # not a UID the driver would write a file for
            spec = None
        claims.append({"uid": uid, "claim": f"{entry.namespace}/{entry.name}", "state": entry.state,
                       "devices": [d.device for d in entry.devices],
                       "cdiDeviceIDs": [i for d in entry.devices for i in d.cdi_device_ids],
                       "cdiSpec": spec if spec and os.path.exists(spec) else None})
    result: dict = {"checkpoint": paths.checkpoint, "exists": data is not None, "claims": claims}
    if invalid:
        result["invalid"] = invalid
    if quarantined:
        result["quarantine"] = paths.quarantine
        result["quarantined"] = [{"uid": q.uid, "reason": q.reason,
                                  "reservedDevices": [r.device or f"gpu minor {r.gpu_minor}" for r in q.reserved]}
                                 for q in quarantined]
    if output in ("yaml", "json"):
        click.echo(render_data(result, output), nl=False)
    else:
        _status_table(result, output == "wide")


def _status_table(result: dict, wide: bool) -> None:
    """The report's rows: prepared claims, then entries the driver cannot use (Invalid: quarantined at its next
    start; Quarantined: set aside, their devices still reserved), whose reasons are warnings on stderr."""
    rows = []
    for claim in result["claims"]:
        row = [claim["claim"], claim["uid"], claim["state"], ",".join(claim["devices"]) or "-"]
        rows.append([*row, ",".join(claim["cdiDeviceIDs"]) or "-", claim["cdiSpec"] or "-"] if wide else row)
    for state, entries in (("Invalid", result.get("invalid", [])), ("Quarantined", result.get("quarantined", []))):
        for entry in entries:
            warn(f"checkpoint entry {entry['uid']}: {entry['reason']}"
                 + (" (quarantined: its devices stay reserved)" if state == "Quarantined" else ""))
            row = ["-", str(entry["uid"]), state, ",".join(entry.get("reservedDevices") or []) or "-"]
            rows.append([*row, "-", "-"] if wide else row)
    if not rows:
        where = result["checkpoint"] if result["exists"] else f"{result['checkpoint']} (it does not exist)"
        click.echo(f"no prepared claims in {where}", err=True)
        return
    headers = ["CLAIM", "UID", "STATE", "DEVICES", *(["CDI-DEVICE-IDS", "CDI-SPEC"] if wide else [])]
    click.echo(render_table(headers, rows), nl=False)
