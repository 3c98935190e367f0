"""`gpudra mig`: MIG profile catalog, mig-parted configs, dynamic-MIG slices, layout planning."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click
import yaml

from gpudra.catalog import GpuModel, UnknownGpuModel, find_gpu_model, gpu_model, mig_models

_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _fail(message: str, code: int = 2) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def _models(names: tuple[str, ...]) -> list[GpuModel]:
    models: list[GpuModel] = []
    for name in names:
        try:
            model = gpu_model(name)
        except UnknownGpuModel as exc:
            _fail(str(exc))
        if model not in models:
            models.append(model)
    return models


def _node_groups(backend: str, profile: str | None):
    """GPU groups of a discovered node: one per MIG-capable model, with the PCI IDs seen."""
    from gpudra.mig.config import NodeGpuGroup

    from gpudra.discovery import DiscoveryError, open_backend

    try:
        opened = open_backend(backend, profile=profile)
        try:
            inventory = opened.inventory()
        finally:
            opened.close()
    except DiscoveryError as exc:
        _fail(str(exc))
    ids: dict[str, list[int]] = {}
    models: dict[str, GpuModel] = {}
    for gpu in inventory.gpus:
        if not gpu.mig_capable:
            continue
        model = (find_gpu_model(gpu.model) if gpu.model else None) or find_gpu_model(gpu.product_name)
        if model is None:
            click.echo(f"warning: {gpu.name} ({gpu.product_name}) is MIG capable but not in the MIG catalog; skipped",
                       err=True)
            continue
        models[model.key] = model
        # the simulated GPU's PCI device ID is its catalog row's first one
        device_id = model.pci_device_ids[0]
        if device_id not in ids.setdefault(model.key, []):
            ids[model.key].append(device_id)
    if not models:
        _fail("the node has no MIG-capable GPUs")
    return [NodeGpuGroup(model, tuple(ids[key])) for key, model in models.items()]


@click.group(name="mig")
def command() -> None:
    """MIG: profile catalog, mig-parted configs, dynamic-MIG slices, layout planner."""


@command.command(name="profiles")
@click.option("--gpu", "gpus", multiple=True, help="GPU model (NVML name or alias); default: every catalog GPU")
def profiles_command(gpus: tuple[str, ...]) -> None:
    """List the MIG profiles and placements of GPU models."""
    models = _models(gpus) if gpus else list(mig_models())
    for model in models:
        click.echo(f"{model.display_name} ({model.key}; {', '.join(model.product_names)}): "
                   f"{model.compute_slices} compute / {model.memory_slices} memory slices")
        rows = [("PROFILE", "ID", "G", "MEM-SLICES", "MEMORY", "SM", "CE", "DEC", "ENC", "JPG", "OFA", "MAX",
                 "PLACEMENTS")]
        for p in model.profiles:
            def n(value: int | None) -> str:
                return "?" if value is None else str(value)
            rows.append((p.name, str(p.profile_id), str(p.compute_slices), str(p.memory_slices), f"{p.memory_mib}MiB",
                         n(p.multiprocessors), n(p.copy_engines), n(p.decoders), n(p.encoders), n(p.jpeg_engines),
                         n(p.ofa_engines), str(p.max_instances), " ".join(str(pl) for pl in p.placements)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            click.echo("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        click.echo(f"  source: {model.source}")


@command.command(name="configs")
@click.option("--gpu", "gpus", multiple=True, help="GPU model, e.g. 'NVIDIA H100 80GB HBM3' or h100-80gb (repeatable)")
@click.option("--backend", type=click.Choice(["simulated", "nvml"]), default=None,
              help="discover the node's GPUs with this backend instead of --gpu")
@click.option("--profile", default=None, help="simulated node profile (with --backend simulated)")
def configs_command(gpus: tuple[str, ...], backend: str | None, profile: str | None) -> None:
    """Print the mig-parted config (version v1) the MIG manager would generate for these GPUs."""
    from gpudra.mig.config import generate_config

    if gpus and backend:
        _fail("use either --gpu or --backend, not both")
    if gpus:
        groups: list[Any] = _models(gpus)
    elif backend or profile:
        groups = _node_groups(backend or "simulated", profile)
    else:
        _fail("give --gpu MODEL (repeatable) or --backend nvml|simulated [--profile NAME]")
    click.echo(_dump(generate_config(groups)), nl=False)


@command.command(name="validate")
@click.option("-f", "--filename", "path", required=True, help="mig-parted config file ('-' for stdin)")
@click.option("--gpu", "gpus", multiple=True, help="check against these GPU models (repeatable)")
@click.option("-v", "--verbose", is_flag=True, help="also print the placement found for every entry")
def validate_command(path: str, gpus: tuple[str, ...], verbose: bool) -> None:
    """Check a mig-parted config: format, profiles, counts and a non-overlapping placement."""
    from gpudra.mig.config import configs_in_document, validate_config

    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        document = yaml.load(text, Loader=_Loader)
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror or exc}")
    except yaml.YAMLError as exc:
        _fail(f"{path}: not valid YAML: {exc}")
    try:
        configs = configs_in_document(document)
    except ValueError as exc:
        _fail(f"{path}: {exc}", code=1)
    invalid = False
    for label, config in configs:
        where = f"{path}: {label}" if label else path
        report = validate_config(config, _models(gpus) if gpus else None)
        for finding in report.findings:
            click.echo(f"{label}: {finding}" if label else str(finding), err=finding.severity == "error")
        if verbose:
            for line in report.checked:
                click.echo(f"ok: {line}")
        if not report.valid:
            errors = sum(1 for f in report.findings if f.severity == "error")
            click.echo(f"{where}: invalid ({errors} error{'s' if errors != 1 else ''})", err=True)
            invalid = True
        else:
            click.echo(f"{where}: valid")
    if invalid:
        sys.exit(1)


@command.command(name="slices")
@click.option("--gpu", "gpu", required=True, help="GPU model of every GPU on the node")
@click.option("--count", default=1, show_default=True, type=click.IntRange(1, 8), help="number of GPUs")
@click.option("--node", "node_name", default="node-1", show_default=True)
def slices_command(gpu: str, count: int, node_name: str) -> None:
    """Print the dynamic-MIG ResourceSlices (k8s >= 1.35 layout) of a node with COUNT such GPUs."""
    from gpudra.mig.dynamic import DynamicMigGpu, resource_slices

    model = _models((gpu,))[0]
    gpus = [DynamicMigGpu(minor=i, model=model, uuid=f"GPU-{node_name}-{i:08x}",
                          attributes={"productName": {"string": model.product_names[0]},
                                      "architecture": {"string": model.architecture}})
            for i in range(count)]
    click.echo(yaml.dump_all(resource_slices(node_name, gpus), Dumper=_Dumper, sort_keys=False), nl=False)


@command.command(name="plan")
@click.option("-f", "--filename", "paths", multiple=True, required=True,
              help="ResourceClaim / ResourceClaimTemplate manifests (repeatable)")
@click.option("--gpu", "gpu", required=True, help="GPU model of the node's GPUs")
@click.option("--count", default=1, show_default=True, type=click.IntRange(1, 64), help="number of GPUs")
@click.option("-o", "--output", type=click.Choice(["text", "yaml"]), default="text", show_default=True)
def plan_command(paths: tuple[str, ...], gpu: str, count: int, output: str) -> None:
    """Propose a static MIG layout for a mix of claims and compare it with dynamic MIG."""
    from gpudra.mig.planner import PlanError, demands_from_objects, plan, render_plan

    model = _models((gpu,))[0]
    objects = _load_objects(paths)
    try:
        demands = demands_from_objects(objects, model)
        result = plan(model, count, demands)
    except PlanError as exc:
        _fail(str(exc))
    if output == "yaml":
        click.echo(_dump(result.to_dict()), nl=False)
    else:
        click.echo(render_plan(result))


def _load_objects(paths: tuple[str, ...]) -> list[dict[str, Any]]:
    from gpudra.api.load import LoadError, load_paths

    try:
        return [doc.obj for doc in load_paths(list(paths)) if isinstance(doc.obj, dict)]
    except LoadError as exc:
        _fail(str(exc))
