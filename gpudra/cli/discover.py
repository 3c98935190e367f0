"""`gpudra discover`: print the GPUs a discovery backend finds."""

from __future__ import annotations

import json

import click

from gpudra.api.dump import dump_yaml_data
from gpudra.cli.driver_options import profile_named
from gpudra.cli.errors import InputError, warn
from gpudra.cli.options import backend_option, node_option
from gpudra.cli.output import output_option
from gpudra.discovery import PROFILES, DiscoveryError, read_inventory, resolve_backend


def _table(inventory) -> str:
    rows = [("NAME", "PRODUCT", "ARCH", "CC", "MEMORY", "PCI", "NUMA", "MIG", "UUID")]
    for gpu in inventory.gpus:
        mig = "on" if gpu.mig_enabled else ("off" if gpu.mig_capable else "-")
        memory = f"{gpu.memory_bytes // 2**20}MiB" if gpu.memory_bytes else "-"
        rows.append((gpu.name, gpu.product_name, gpu.architecture, gpu.cuda_compute_capability, memory,
                     gpu.pci_bus_id, "-" if gpu.numa_node is None else str(gpu.numa_node), mig, gpu.uuid))
        for m in gpu.mig_devices:
            rows.append(("  " + m.name, m.profile, "", "", f"{m.memory_bytes // 2**20}MiB",
                         f"placement {m.placement_start}:{m.placement_size}", "", f"gi{m.gi_id}/ci{m.ci_id}", m.uuid))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    header = f"driver {inventory.driver_version}, CUDA {inventory.cuda_driver_version}, backend {inventory.backend}"
    if inventory.profile:
        header += f", profile {inventory.profile}"
    return header + "\n" + "\n".join(lines)


@click.command(name="discover")
@backend_option()
@click.option("--profile", default="dgx-h100", show_default=True,
              help=f"simulated node profile ({', '.join(PROFILES)}) or a YAML profile file")
@node_option("The node's name; it seeds the simulated UUIDs.", dest="node_name", default="node", show_default=True)
@output_option(help="table: one row per GPU and MIG device (wide: the same); yaml/json: the inventory.")
def command(backend: str, profile: str, node_name: str, output: str) -> None:
    """Print the GPUs (and MIG devices) found on this node."""
    backend, simulated_warning = resolve_backend(backend, profile, profile_named())
    if simulated_warning:
        warn(simulated_warning)
    try:
        inventory = read_inventory(backend, profile=profile, node_name=node_name)
    except DiscoveryError as exc:
        raise InputError(str(exc)) from None
    for problem in inventory.problems:
        warn(str(problem))
    if output == "json":
        click.echo(json.dumps(inventory.to_dict(), indent=2))
    elif output == "yaml":
        click.echo(dump_yaml_data(inventory.to_dict()), nl=False)
    else:
        click.echo(_table(inventory))
