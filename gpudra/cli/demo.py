"""`gpudra demo`: allocate the article's corrected claims on a bundled GPU cluster."""

from __future__ import annotations

import os
import sys

import click


@click.command("demo", short_help="Allocate the article's claims on a bundled GPU cluster and explain the rejects.")
@click.option("--features", default="default", show_default=True, help="Feature gates (as for `gpudra allocate`).")
@click.option("--cluster", "cluster", multiple=True, metavar="PATH", help="Use this cluster (DeviceClasses, ResourceSlices, Nodes) instead of the bundled one.")
@click.option("--claims", "claims", multiple=True, metavar="PATH", help="Use these claims/templates instead of the article's corrected ones.")
@click.option("--originals", "originals", multiple=True, metavar="PATH", help="Validate these manifests instead of the article's originals.")
def command(features: str, cluster: tuple[str, ...], claims: tuple[str, ...], originals: tuple[str, ...]) -> None:
    """Run kube-scheduler's DRA allocator on a bundled cluster (8×H100 on two NVLink meshes,
    8×A100 with MIG partitions, an L4 node) against the corrected claims from the article in
    examples/, print which devices each claim gets, and why the article's original manifests
    are rejected. Works offline; the data ships inside the package."""
    from gpudra.api.load import LoadError
    from gpudra.demo import render_demo, run_demo

    try:
        report = run_demo(
            features,
            cluster=list(cluster) or None,
            claims=list(claims) or None,
            originals=list(originals) or None,
        )
    except (LoadError, ValueError) as exc:
        click.echo(f"gpudra demo: {exc}", err=True)
        sys.exit(2)
    except Exception as exc:
        if os.environ.get("GPUDRA_DEBUG"):
            raise
        click.echo(f"gpudra demo: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)
    click.echo(render_demo(report), nl=False)
