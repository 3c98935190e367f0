"""`gpudra cluster up/down/view/device-condition`: a local DRA cluster with real driver processes (see gpudra/cluster)."""

from __future__ import annotations

import os
import sys

import click

from gpudra.cli.objects import DIR_OPTION, _fail
from gpudra.cli.options import kubernetes_version_option
from gpudra.discovery.profiles import PROFILES


@click.group(name="cluster")
def command() -> None:
    """A local DRA cluster: one real driver process per simulated GPU node, a store, a control loop."""


@command.command("up")
@click.option("--dir", "directory", default=None, metavar="DIR",
              help="State directory (default: ~/.local/state/gpudra/cluster, under $XDG_STATE_HOME when set). "
                   "A directory that already holds a cluster is reused: its drivers are restarted where they died.")
@click.option("--nodes", default=None, metavar="PROFILE[:COUNT][+dynamic-mig],…",
              help="Simulated nodes: profile names (" + ", ".join(PROFILES) + ") or YAML profile files. "
                   "Default: dgx-h100:2,hgx-a100-mig+dynamic-mig,l4-node.")
@click.option("--racks", default=None, metavar="RACKSxTRAYS",
              help="Simulated GB200 NVL72 racks (e.g. 2x4: two racks of four 4-GPU trays, rack<r>-tray<t>), each "
                   "rack its own NVLink clique, nodes labelled nvidia.com/gpu.clique as GPU feature discovery does; "
                   "besides --nodes, or alone when --nodes is not given. For ComputeDomains (examples/computedomain).")
@click.option("--policy", type=click.Choice(["kube", "binpack", "spread", "fragmentation"]), default=None,
              help="Scheduler scoring policy (default kube).")
@kubernetes_version_option("Kubernetes release (1.33-1.36, default 1.36): what the nodes report, the scheduler's "
                           "default feature gates and whether drivers can publish dynamic MIG. Fixed when the "
                           "cluster is created.")
@click.option("--features", "features", default=None, metavar="GATES",
              help="Feature gates over the release's defaults, as kube-apiserver's and kube-scheduler's "
                   "--feature-gates set them: default, all, none, Name/+Name, -Name (e.g. "
                   "default,+DRAPartitionableDevices for dynamic MIG on 1.34). Fixed when the cluster is created.")
@click.option("--event-ttl", "event_ttl", type=click.IntRange(min=1), default=None, metavar="SECONDS",
              help="How long events are kept after they were last seen (default 3600, the API server's 1h).")
@click.option("--control-plane/--no-control-plane", default=True, show_default=True,
              help="Run the control-plane process, which acts on changes no gpudra command follows (drivers "
                   "republishing slices, other tools' writes) and resyncs pending pods. Without it, only gpudra "
                   "commands run the control loop.")
@click.option("--device-classes/--no-device-classes", "device_classes", default=True, show_default=True,
              help="Create the drivers' DeviceClasses (`gpudra driver deviceclasses`: gpu.nvidia.com, "
                   "mig.nvidia.com, vfio.gpu.nvidia.com), as NVIDIA's Helm chart installs them; existing ones are "
                   "left as they are.")
@click.option("--api-server", "api_server", type=click.Choice(["embedded", "kubernetes"]), default=None,
              help="embedded (the default): gpudra's own store and control loop, no Go needed. kubernetes: the real "
                   "etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built from Go modules "
                   "(`gpudra kube build`), the nodes joined to it; use it with kubectl and the written kubeconfig. "
                   "Fixed when the cluster is created.")
@click.option("--health-taint-effect", type=click.Choice(["NoSchedule", "NoExecute"]), default=None,
              help="Effect of the drivers' taint on a failed GPU (default NVIDIA's NoSchedule; NoExecute: the device "
                   "taint eviction controller evicts its pods). Fixed when the cluster is created.")
def up_cmd(directory: str | None, nodes: str | None, racks: str | None, policy: str | None,
           kubernetes_version: str | None, features: str | None, event_ttl: int | None, control_plane: bool,
           device_classes: bool, api_server: str | None, health_taint_effect: str | None) -> None:
    """Start the cluster's drivers (or restart the ones that died) and its control plane, then let the control
    loop catch up. Prints the state directory; later commands use this cluster unless given --dir."""
    from gpudra.cluster.controller import reconcile
    from gpudra.cluster.layout import ClusterDir, default_new_dir
    from gpudra.cluster.nodes import install_device_classes, planned_config, up
    from gpudra.errors import GpudraError

    say = lambda text: click.echo(text, err=True)  # noqa: E731 - progress goes to stderr
    try:
        cluster = ClusterDir(directory or default_new_dir())
        if api_server == "kubernetes" and kubernetes_version is None and not cluster.exists():
            from gpudra.kubecluster.lifecycle import release_minor

            kubernetes_version = release_minor()
        config = planned_config(cluster, nodes, policy, kubernetes_version, event_ttl, say, features, racks=racks,
                                api_server=api_server, health_taint_effect=health_taint_effect)
        if config.api_server == "kubernetes":
            _up_kubernetes(cluster, config, device_classes, say)
            click.echo(cluster.path)
            return
        up(cluster, config, say=say, control_plane=control_plane)
        if device_classes:
            install_device_classes(cluster, say)
        reconcile(cluster, lambda kind, text: click.echo(f"  {text}", err=True))
    except GpudraError as exc:
        _fail(str(exc))
    click.echo(cluster.path)


def _up_kubernetes(cluster, config, device_classes: bool, say) -> None:  # type: ignore[no-untyped-def]
    from gpudra.kubecluster import lifecycle
    from gpudra.kubecluster.controlplane import KubePaths

    lifecycle.up(cluster, config, say)
    if device_classes:
        lifecycle.install_device_classes(cluster, config, say)
    paths = KubePaths(cluster)
    say(f"Kubernetes is up. Use it with:\n  export KUBECONFIG={paths.admin_kubeconfig}\n"
        f"  {paths.binary_link}/kubectl get nodes   # the release's own kubectl (or yours)")


@command.command("down")
@DIR_OPTION
def down_cmd(directory: str | None) -> None:
    """Stop the drivers and remove the state directory (nothing left running, no socket, no file)."""
    from gpudra.cluster.layout import ClusterSetupError, resolve_dir
    from gpudra.cluster.nodes import down

    try:
        cluster = resolve_dir(directory)
    except ClusterSetupError as exc:
        # nothing to bring down is the state asked for (as `kind delete cluster` answers 0 when there is none)
        click.echo(f"{str(exc).split(' (run ', 1)[0].split(': run ', 1)[0]}: nothing to bring down", err=True)
        return
    say = lambda text: click.echo(text, err=True)  # noqa: E731 - progress goes to stderr
    try:
        api_server = cluster.load_config().api_server
    except ClusterSetupError:
        api_server = "embedded"
    if api_server == "kubernetes":
        from gpudra.kubecluster.lifecycle import down as down_kubernetes

        down_kubernetes(cluster, say)
    down(cluster, say=say)
    if not os.path.exists(cluster.path):
        click.echo(f"removed {cluster.path}", err=True)


@command.command("view")
@DIR_OPTION
@click.option("-o", "--output", "output", default=None, metavar="FILE",
              help="Where to write the page (default: DIR/view.html).")
@click.option("--serve", is_flag=True, help="Also serve it on http://127.0.0.1:PORT/ until interrupted.")
@click.option("--port", type=click.IntRange(0, 65535), default=8089, show_default=True,
              help="The port --serve listens on, on 127.0.0.1 only (0: any free port).")
def view_cmd(directory: str | None, output: str | None, serve: bool, port: int) -> None:
    """Write one HTML page: nodes, GPUs and MIG slices as boxes, who holds each, pending pods, container edits."""
    import os

    from gpudra.cluster.layout import ClusterSetupError, resolve_dir
    from gpudra.cluster.view import render_page, serve_page

    try:
        cluster = resolve_dir(directory)
    except ClusterSetupError as exc:
        _fail(str(exc))
    from gpudra.atomicfile import write_atomic
    from gpudra.cluster.store import FILE_MODE

    path = output or os.path.join(cluster.path, "view.html")
    list_kind = None
    if cluster.exists() and cluster.load_config().api_server == "kubernetes":
        from gpudra.kubecluster.controlplane import KubePaths
        from gpudra.kubecluster.rest import Rest, lister

        list_kind = lister(Rest(KubePaths(cluster).admin_kubeconfig))
    write_atomic(path, render_page(cluster, list_kind).encode(), mode=FILE_MODE, label="cluster-view", fsync=False)
    click.echo(path)
    if serve:
        try:
            serve_page(cluster, port, on_ready=lambda url: click.echo(f"serving on {url} (Ctrl-C stops)", err=True),
                       list_kind=list_kind)
        except OSError as exc:
            _fail(f"cannot serve on port {port}: {exc}")
        except KeyboardInterrupt:
            sys.exit(0)


@command.command("device-condition")
@DIR_OPTION
@click.option("-n", "--namespace", default="default", show_default=True, help="The claim's namespace.")
@click.option("--reason", default="Set", show_default=True, help="The conditions' reason (CamelCase).")
@click.option("--message", default="", help="The conditions' message.")
@click.option("-v", "--verbose", is_flag=True, help="Print what the control loop did afterwards.")
@click.argument("claim")
@click.argument("device", metavar="DRIVER/POOL/DEVICE")
@click.argument("conditions", nargs=-1, required=True, metavar="TYPE=True|False…")
def device_condition_cmd(directory: str | None, namespace: str, reason: str, message: str, verbose: bool,
                         claim: str, device: str, conditions: tuple[str, ...]) -> None:
    """Set conditions on an allocated device in a claim's status.devices, as the device's driver or controller
    writes them: a pod waiting at PreBind for the device's binding conditions is bound once they are all True,
    and sent back to the queue when a binding failure condition is True. Exit 1 when the claim is missing or
    the device is not allocated in it."""
    from datetime import datetime, timezone

    from gpudra.cli.errors import show_error
    from gpudra.cli.objects import _cluster, _hold_control_loop, _reconcile
    from gpudra.cluster.devicestatus import DeviceCondition, set_device_conditions
    from gpudra.cluster.store import StoreError

    parts = device.split("/")
    if len(parts) < 3 or not all(parts):
        _fail(f"device {device!r}: give DRIVER/POOL/DEVICE (a pool name may hold slashes)")
    driver, pool, name = parts[0], "/".join(parts[1:-1]), parts[-1]
    wanted = []
    for text in conditions:
        kind, _, value = text.partition("=")
        if not kind or value not in ("True", "False"):
            _fail(f"condition {text!r}: give TYPE=True or TYPE=False")
        wanted.append(DeviceCondition(kind, value == "True", reason, message))
    cluster = _cluster(directory)
    _hold_control_loop(cluster)
    try:
        set_device_conditions(cluster.store, namespace, claim, driver, pool, name, wanted, datetime.now(timezone.utc))
    except StoreError as exc:
        show_error(str(exc))
        sys.exit(1)
    click.echo(f'resourceclaim "{claim}" device {device}: ' + ", ".join(conditions))
    _reconcile(cluster, verbose)
