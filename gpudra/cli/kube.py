"""`gpudra kube build`: the real Kubernetes control plane from Go modules, into a cache outside the checkout."""

from __future__ import annotations

import dataclasses

import click

from gpudra.cli.objects import _fail
from gpudra.cli.options import kubernetes_version_option
from gpudra.cli.output import output_option, render_data, render_table


@click.group(name="kube")
def command() -> None:
    """The real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl),
    built from the repository's Go module k8s/ for `gpudra cluster up --api-server kubernetes` and the tests."""


@command.command("build")
@click.option("--module", default=None, metavar="DIR",
              help="The Go module (default: k8s/ of the checkout gpudra runs from, or of the working directory).")
@kubernetes_version_option("The release to build: the module's own (k8s/go.mod, 1.34) or another it pins "
                           "(k8s/releases/v1.36.mod: 1.36).")
@output_option(pipe_default="yaml", help="table: the binary, its release, whether it was built now; yaml/json: the same.")
def build_cmd(module: str | None, kubernetes_version: str | None, output: str) -> None:
    """Build the control plane's one binary (or reuse it from the cache, keyed on the Go sources, go.sum, the Go
    version and the flags) and print where it is. Cold: minutes; warm: no Go run at all."""
    from gpudra.kubecluster.build import BuildError, build

    try:
        built = build(module, say=lambda text: click.echo(text, err=True), release=kubernetes_version)
    except BuildError as exc:
        _fail(str(exc))
    data = dataclasses.asdict(built)
    if output in ("yaml", "json"):
        click.echo(render_data(data, output), nl=False)
        return
    rows = [[built.release, "built" if built.built else "cached", f"{built.seconds:.1f}s",
             f"{built.size_bytes / 2**20:.0f} MiB", built.binary]]
    click.echo(render_table(["RELEASE", "BUILD", "TIME", "SIZE", "BINARY"], rows), nl=False)
