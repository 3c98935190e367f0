"""`gpudra demo`: the article's whole flow on a local cluster (or, with --allocate-only, the allocator report)."""

from __future__ import annotations

import click

from gpudra.cli.errors import InputError, UsageError, warn
from gpudra.cli.options import kubernetes_version_option


@click.command("demo", short_help="Run the article's DRA flow on a local cluster of simulated GPU nodes.")
@click.option("--keep", "keep_dir", default=None, metavar="DIR",
              help="Bring the cluster up in DIR and leave it running (then `gpudra get pods -A`, "
                   "`gpudra cluster view`, `gpudra cluster down`).")
@click.option("--allocate-only", is_flag=True,
              help="Only run the allocator on a bundled cluster (no processes) and explain the rejected originals.")
@click.option("--features", default="default", show_default=True,
              help="Feature gates over the release's defaults (--allocate-only).")
@kubernetes_version_option("Kubernetes release the demo behaves as (1.33-1.36, default 1.36): default feature "
                           "gates, dynamic MIG only where the release can allocate it.")
@click.option("--cluster", "cluster", multiple=True, metavar="PATH",
              help="--allocate-only: use this cluster (DeviceClasses, ResourceSlices, Nodes) instead of the bundled one.")
@click.option("--claims", "claims", multiple=True, metavar="PATH",
              help="--allocate-only: use these claims/templates instead of the article's corrected ones.")
@click.option("--originals", "originals", multiple=True, metavar="PATH",
              help="--allocate-only: validate these manifests instead of the article's originals.")
def command(keep_dir: str | None, allocate_only: bool, features: str, kubernetes_version: str | None,
            cluster: tuple[str, ...], claims: tuple[str, ...], originals: tuple[str, ...]) -> None:
    """Bring up a local cluster (a GPU driver process per simulated node: 2×DGX H100, an HGX A100 with dynamic
    MIG, an L4 node), apply the article's corrected DeviceClass, claims, template, pods and a Deployment, and show
    each step as it happens: slices published, claims created from the template, pods scheduled to nodes and
    devices, prepare → CDI devices, what each container sees; then delete a pod (unprepare, deallocation) and tear
    everything down. Works offline from any directory; the manifests ship inside the package."""
    from gpudra.versions import VersionError, parse_version

    try:
        kubernetes_version = parse_version(kubernetes_version)
    except VersionError as exc:
        raise UsageError(f"--kubernetes-version: {exc}") from None
    if allocate_only or cluster or claims or originals or features != "default":
        if not allocate_only:  # say why there is no cluster: these options belong to the allocator-only demo
            given = [name for name, value in (("--cluster", cluster), ("--claims", claims),
                                              ("--originals", originals), ("--features", features != "default"))
                     if value]
            warn(f"{', '.join(given)}: the local-cluster flow runs with the release's default gates and the "
                 "article's manifests; showing the allocator-only demo (--allocate-only) instead")
        _allocate_only(features, cluster, claims, originals, kubernetes_version)
        return
    from gpudra.cluster.demo import run_flow
    from gpudra.cluster.layout import ClusterSetupError

    try:
        path = run_flow(keep_dir, click.echo, keep=keep_dir is not None, kubernetes_version=kubernetes_version)
    except ClusterSetupError as exc:
        raise InputError(str(exc)) from None
    if keep_dir:
        click.echo(f"\nThe cluster runs on in {path}: gpudra get pods -A --dir {path}; "
                   f"gpudra cluster view --dir {path}; gpudra cluster down --dir {path}")
    warn_next_step()


def warn_next_step() -> None:
    """Where a newcomer goes after the demo: the same manifests as files to change and apply (stderr, so the
    timeline on stdout stays what it was)."""
    click.echo("\nnext: gpudra examples --all --dir examples   # the demo's manifests and more, as files; then "
               "gpudra validate -f examples/article", err=True)


def _allocate_only(features: str, cluster: tuple[str, ...], claims: tuple[str, ...], originals: tuple[str, ...],
                   kubernetes_version: str | None = None) -> None:
    from gpudra.api.load import LoadError, LoadErrors
    from gpudra.demo import render_demo, run_demo

    try:
        report = run_demo(features, cluster=list(cluster) or None, claims=list(claims) or None,
                          originals=list(originals) or None, kubernetes_version=kubernetes_version)
    except LoadErrors as exc:
        raise InputError(str(exc.errors[0]), details=[f"error: {error}" for error in exc.errors[1:]]) from None
    except (LoadError, ValueError) as exc:
        raise InputError(str(exc)) from None
    click.echo(render_demo(report), nl=False)
