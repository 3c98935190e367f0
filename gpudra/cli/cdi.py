"""`gpudra cdi`: validate CDI specs, list CDI devices, show what a container would get."""

from __future__ import annotations

import json
import os
import sys

import click

from gpudra.cdi import DEFAULT_SPEC_DIRS, CdiError, Registry, apply_edits, default_oci_spec, load_spec_file, validate_spec
from gpudra.cli.errors import NEGATIVE, OK, USAGE, InputError, show_error, warn


def _dirs(root: str | None, spec_dirs: tuple[str, ...]) -> list[str]:
    dirs = list(spec_dirs) or list(DEFAULT_SPEC_DIRS)
    if root:
        dirs = [os.path.join(root, d.lstrip("/")) for d in dirs]
    return dirs


@click.group(name="cdi")
def command() -> None:
    """Container Device Interface specs."""


@command.command("apply")
@click.argument("device_ids", nargs=-1, required=True)
@click.option("--spec-dir", "spec_dirs", multiple=True,
              help="CDI spec directory, lowest priority first (default: /etc/cdi then /var/run/cdi)")
@click.option("--root", help="prefix for the spec directories (as used by `gpudra driver run --root`)")
@click.option("--oci-spec", type=click.File("r"), help="OCI runtime spec (config.json) to start from")
def apply_cmd(device_ids: tuple[str, ...], spec_dirs: tuple[str, ...], root: str | None, oci_spec) -> None:
    """Resolve DEVICE_IDS (vendor/class=name) and print the OCI runtime spec a container would run with."""
    try:
        base = json.load(oci_spec) if oci_spec else default_oci_spec()
    except ValueError as exc:
        raise InputError(f"--oci-spec is not valid JSON: {exc}") from None
    registry = Registry.load(_dirs(root, spec_dirs))
    for problem in registry.errors:
        warn(str(problem))
    try:
        result = apply_edits(base, registry.resolve(list(device_ids)))
    except CdiError as exc:
        raise InputError(str(exc)) from None
    click.echo(json.dumps(result, indent=2))


@command.command("validate")
@click.argument("files", nargs=-1, required=True)
def validate_cmd(files: tuple[str, ...]) -> None:
    """Check CDI spec files against the spec's rules: exit 0 when all are valid, 1 when one is not, 2 when
    one cannot be read."""
    failed = False
    unreadable = [path for path in files if not os.path.isfile(path)]
    for path in unreadable:
        show_error(f"{path}: {'is a directory' if os.path.isdir(path) else 'no such file or directory'}")
    for path in files:
        if path in unreadable:
            continue
        try:
            problems = [f"{path}: {problem}" for problem in validate_spec(load_spec_file(path))]
        except CdiError as exc:
            problems = [str(exc)]  # names the file already
        for problem in problems:
            show_error(problem)
        failed |= bool(problems)
        if not problems:
            click.echo(f"{path}: ok")
    sys.exit(USAGE if unreadable else NEGATIVE if failed else OK)


@command.command("list")
@click.option("--spec-dir", "spec_dirs", multiple=True)
@click.option("--root")
def list_cmd(spec_dirs: tuple[str, ...], root: str | None) -> None:
    """List the fully-qualified CDI devices visible to a runtime."""
    registry = Registry.load(_dirs(root, spec_dirs))
    for problem in registry.errors:
        warn(str(problem))
    for name in sorted(registry.devices):
        click.echo(name)
