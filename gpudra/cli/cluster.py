"""`gpudra cluster up/down/view`: a local DRA cluster with real driver processes (see gpudra/cluster)."""

from __future__ import annotations

import os
import sys

import click

from gpudra.cli.objects import DIR_OPTION, _fail
from gpudra.cli.options import kubernetes_version_option


@click.group(name="cluster")
def command() -> None:
    """A local DRA cluster: one real driver process per simulated GPU node, a store, a control loop."""


@command.command("up")
@click.option("--dir", "directory", default=None, metavar="DIR",
              help="State directory (default: the cluster brought up last, else ~/.local/state/gpudra/cluster).")
@click.option("--nodes", default=None, metavar="PROFILE[:COUNT][+dynamic-mig],…",
              help="Simulated nodes (`gpudra discover --list-profiles` names or YAML profile files). "
                   "Default: dgx-h100:2,hgx-a100-mig+dynamic-mig,l4-node.")
@click.option("--policy", type=click.Choice(["kube", "binpack", "spread", "fragmentation"]), default=None,
              help="Scheduler scoring policy (default kube).")
@kubernetes_version_option("Kubernetes release (1.33-1.36, default 1.36): what the nodes report, the scheduler's "
                           "default feature gates and whether drivers can publish dynamic MIG.")
@click.option("--event-ttl", "event_ttl", type=click.IntRange(min=1), default=None, metavar="SECONDS",
              help="How long events are kept after they were last seen (default 3600, the API server's 1h).")
@click.option("--control-plane/--no-control-plane", default=True, show_default=True,
              help="Run the control-plane process, which acts on changes no gpudra command follows (drivers "
                   "republishing slices, other tools' writes) and resyncs pending pods. Without it, only gpudra "
                   "commands run the control loop.")
def up_cmd(directory: str | None, nodes: str | None, policy: str | None, kubernetes_version: str | None,
           event_ttl: int | None, control_plane: bool) -> None:
    """Start the cluster's drivers (or restart the ones that died) and its control plane, then let the control
    loop catch up."""
    from gpudra.cluster.controller import reconcile
    from gpudra.cluster.layout import (DEFAULT_NODES, ClusterConfig, ClusterDir, ClusterSetupError,
                                       current_pointer, default_new_dir, parse_nodes)
    from gpudra.cluster.nodes import up

    try:
        if kubernetes_version is not None:
            from gpudra.versions import VersionError, parse_version

            try:
                kubernetes_version = parse_version(kubernetes_version)
            except VersionError as exc:
                raise ClusterSetupError(f"--kubernetes-version: {exc}") from None
        if directory is None:
            try:
                with open(current_pointer(), encoding="utf-8") as fh:
                    directory = fh.read().strip() or None
            except FileNotFoundError:
                pass
        cluster = ClusterDir(directory or default_new_dir())
        config = None
        if not cluster.exists() or nodes or policy or kubernetes_version or event_ttl:
            config = ClusterConfig(nodes=parse_nodes(nodes or DEFAULT_NODES))
            if cluster.exists():
                existing = cluster.load_config()
                config.nodes = config.nodes if nodes else existing.nodes
                config.policy, config.kubernetes_version = existing.policy, existing.kubernetes_version
                config.event_ttl_s = existing.event_ttl_s
            config.policy = policy or config.policy
            config.kubernetes_version = kubernetes_version or config.kubernetes_version
            config.event_ttl_s = event_ttl or config.event_ttl_s
        up(cluster, config, say=lambda text: click.echo(text, err=True), control_plane=control_plane)
        reconcile(cluster, lambda kind, text: click.echo(f"  {text}", err=True))
    except ClusterSetupError as exc:
        _fail(str(exc))
    click.echo(cluster.path)


@command.command("down")
@DIR_OPTION
def down_cmd(directory: str | None) -> None:
    """Stop the drivers and remove the state directory (nothing left running, no socket, no file)."""
    from gpudra.cluster.layout import ClusterSetupError, resolve_dir
    from gpudra.cluster.nodes import down

    try:
        cluster = resolve_dir(directory)
    except ClusterSetupError as exc:
        _fail(str(exc))
    down(cluster, say=lambda text: click.echo(text, err=True))
    if not os.path.exists(cluster.path):
        click.echo(f"removed {cluster.path}", err=True)


@command.command("view")
@DIR_OPTION
@click.option("-o", "--output", "output", default=None, metavar="FILE",
              help="Where to write the page (default: DIR/view.html).")
@click.option("--serve", is_flag=True, help="Also serve it on http://127.0.0.1:PORT/ until interrupted.")
@click.option("--port", type=int, default=8089, show_default=True)
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
    write_atomic(path, render_page(cluster).encode(), mode=FILE_MODE, label="cluster-view", fsync=False)
    click.echo(path)
    if serve:
        try:
            serve_page(cluster, port, on_ready=lambda url: click.echo(f"serving on {url} (Ctrl-C stops)", err=True))
        except OSError as exc:
            _fail(f"cannot serve on port {port}: {exc}")
        except KeyboardInterrupt:
            sys.exit(0)
