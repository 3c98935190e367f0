"""`gpudra cdi`: validate CDI specs, list CDI devices, show what a container would get."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from gpudra.cdi import (DEFAULT_SPEC_DIRS, CdiError, ContainerEdits, Registry, apply_edits, default_oci_spec,
                        load_spec_file, validate_spec)
from gpudra.cli.errors import NEGATIVE, OK, USAGE, InputError, show_error, warn
from gpudra.cli.output import output_option, plural, render_data, render_table, report_problems


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
@click.option("-o", "--output", type=click.Choice(["json", "yaml"]), default="json", show_default=True,
              help="Format of the OCI runtime spec (a runtime reads config.json: JSON).")
def apply_cmd(device_ids: tuple[str, ...], spec_dirs: tuple[str, ...], root: str | None, oci_spec,
              output: str) -> None:
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
    click.echo(render_data(result, output), nl=False)


@command.command("validate")
@click.argument("files", nargs=-1, required=True)
@output_option(help="Format of the problem list, as `gpudra validate` prints it: table (one `error: FILE: message` "
                    "line each) or yaml/json records.")
def validate_cmd(files: tuple[str, ...], output: str) -> None:
    """Check CDI spec files against the spec's rules: exit 0 when all are valid, 1 when one is not, 2 when
    one cannot be read."""
    from gpudra.api.problems import Problem

    unreadable = [path for path in files if not os.path.isfile(path)]
    for path in unreadable:
        show_error(f"{path}: {'is a directory' if os.path.isdir(path) else 'no such file or directory'}")
    problems: list[Problem] = []
    read = [path for path in files if path not in unreadable]
    for path in read:
        try:
            messages = validate_spec(load_spec_file(path))
        except CdiError as exc:  # names the file already
            messages = [str(exc).removeprefix(f"{path}: ")]
        problems.extend(Problem(path, None, "", "", "", message) for message in messages)
    failed = bool(read) and report_problems(problems, output, plural(len(read), "CDI spec"), len(read),
                                            unreadable=len(unreadable))
    sys.exit(USAGE if unreadable else NEGATIVE if failed else OK)


@command.command("list")
@click.option("--spec-dir", "spec_dirs", multiple=True,
              help="CDI spec directory, lowest priority first (default: /etc/cdi then /var/run/cdi)")
@click.option("--root", help="prefix for the spec directories (as used by `gpudra driver run --root`)")
@output_option(help="table: one row per device (wide: with its CDI version and how many env entries, mounts and "
                    "hooks it brings); yaml/json: the devices with their container edits.")
def list_cmd(spec_dirs: tuple[str, ...], root: str | None, output: str) -> None:
    """List the fully-qualified CDI devices visible to a runtime."""
    registry = Registry.load(_dirs(root, spec_dirs))
    for problem in registry.errors:
        warn(str(problem))
    names = sorted(registry.devices)
    if output in ("yaml", "json"):
        click.echo(render_data([_device_record(registry, name) for name in names], output), nl=False)
        return
    rows = []
    for name in names:
        spec, index = registry.devices[name]
        # what a container gets for the device: the spec's own edits and the device's (as Registry.resolve)
        edits = ContainerEdits().append(spec.container_edits).append(spec.devices[index].container_edits)
        nodes = ",".join(node.path for node in edits.device_nodes) or "-"
        counts = [str(len(edits.env)), str(len(edits.mounts)), str(len(edits.hooks))]
        rows.append([name, spec.cdi_version, nodes, *counts] if output == "wide" else [name, nodes])
        rows[-1].append(registry.spec_files[name])
    headers = ["NAME", "CDI-VERSION", "DEVICE-NODES", "ENV", "MOUNTS", "HOOKS"] if output == "wide" \
        else ["NAME", "DEVICE-NODES"]
    if rows:
        click.echo(render_table([*headers, "SPEC"], rows), nl=False)
    else:
        click.echo(f"No CDI devices in {', '.join(registry.spec_dirs)}.", err=True)


def _device_record(registry: Registry, name: str) -> dict[str, Any]:
    spec, index = registry.devices[name]
    device = spec.devices[index]
    record: dict[str, Any] = {"name": name, "kind": spec.kind, "device": device.name,
                              "specFile": registry.spec_files[name], "cdiVersion": spec.cdi_version,
                              "containerEdits": device.container_edits.to_dict()}
    if not spec.container_edits.is_empty():
        record["specContainerEdits"] = spec.container_edits.to_dict()
    return record
