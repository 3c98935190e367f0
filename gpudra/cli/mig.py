"""`gpudra mig`: MIG profile catalog, mig-parted configs, dynamic-MIG slices, layout planning."""

from __future__ import annotations

import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:  # the CLI imports packages only in the command that needs them (start-up time)
    from gpudra.kubeletplugin.checkpoint import Checkpoint

from gpudra.api.dump import dump_yaml_data, dump_yaml_one
from gpudra.catalog import GpuModel, UnknownGpuModel, find_gpu_model, gpu_model, mig_models
from gpudra.cli.errors import NEGATIVE, USAGE, fail
from gpudra.cli.inputs import require_generated_valid
from gpudra.cli.options import (backend_option, dns_subdomain_value, kubeconfig_option, kubernetes_version_option,
                                node_option)
from gpudra.cli.output import output_option, plural, render_data, render_objects, report_problems



def _fail(message: str, code: int = USAGE) -> NoReturn:
    fail(message, code)


def _dump(obj: Any) -> str:
    return dump_yaml_data(obj)


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
@output_option(help="table: one section per GPU model (wide: with each profile's engines); yaml/json: the "
                    "models and their profiles as data.")
def profiles_command(gpus: tuple[str, ...], output: str) -> None:
    """List the MIG profiles and placements of GPU models."""
    models = _models(gpus) if gpus else list(mig_models())
    if output in ("yaml", "json"):
        click.echo(render_data([_model_data(model) for model in models], output), nl=False)
        return
    engines = output == "wide"
    for model in models:
        click.echo(f"{model.display_name} ({model.key}; {', '.join(model.product_names)}): "
                   f"{model.compute_slices} compute / {model.memory_slices} memory slices")
        rows = [("PROFILE", "ID", "G", "MEM-SLICES", "MEMORY", *(ENGINES if engines else ()), "MAX", "PLACEMENTS")]
        for p in model.profiles:
            def n(value: int | None) -> str:
                return "?" if value is None else str(value)
            counts = tuple(p.engine_counts.values())
            rows.append((p.name, str(p.profile_id), str(p.compute_slices), str(p.memory_slices), f"{p.memory_mib}MiB",
                         *((n(c) for c in counts) if engines else ()), str(p.max_instances),
                         " ".join(str(pl) for pl in p.placements)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            click.echo("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        click.echo(f"  source: {model.source}")


ENGINES = ("SM", "CE", "DEC", "ENC", "JPG", "OFA")


def _model_data(model: GpuModel) -> dict[str, Any]:
    return {"model": model.display_name, "key": model.key, "productNames": list(model.product_names),
            "computeSlices": model.compute_slices, "memorySlices": model.memory_slices,
            "profiles": [{"name": p.name, "id": p.profile_id, "computeSlices": p.compute_slices,
                          "memorySlices": p.memory_slices, "memoryMiB": p.memory_mib, "maxInstances": p.max_instances,
                          "placements": [{"start": pl.start, "size": pl.size} for pl in p.placements],
                          **p.engine_counts} for p in model.profiles],
            "source": model.source}


@command.command(name="configs")
@click.option("--gpu", "gpus", multiple=True, help="GPU model, e.g. 'NVIDIA H100 80GB HBM3' or h100-80gb (repeatable)")
@click.option("--backend", type=click.Choice(["simulated", "nvml"]), default=None,
              help="discover the node's GPUs with this backend instead of --gpu")
@click.option("--profile", default=None, help="simulated node profile (with --backend simulated)")
@click.option("-o", "--output", type=click.Choice(["yaml", "json", "configmap"]), default="yaml", show_default=True,
              help="yaml/json: the mig-parted config; configmap: the GPU Operator's ConfigMap holding it (as YAML) "
                   "under data['config.yaml']")
@click.option("--name", "configmap_name", default="default-mig-parted-config", show_default=True,
              help="ConfigMap name (-o configmap)")
@click.option("--namespace", default="gpu-operator", show_default=True, help="ConfigMap namespace (-o configmap)")
def configs_command(gpus: tuple[str, ...], backend: str | None, profile: str | None, output: str,
                    configmap_name: str, namespace: str) -> None:
    """Print the mig-parted config (version v1) the MIG manager would generate for these GPUs."""
    from gpudra.mig.config import config_map, generate_config

    if gpus and backend:
        _fail("use either --gpu or --backend, not both")
    if gpus:
        groups: list[Any] = _models(gpus)
    elif backend or profile:
        groups = _node_groups(backend or "simulated", profile)
    else:
        _fail("give --gpu MODEL (repeatable) or --backend nvml|simulated [--profile NAME]")
    config = generate_config(groups)
    if output == "configmap":
        wrapped = config_map(_dump(config), name=configmap_name, namespace=namespace)
        click.echo(dump_yaml_one(wrapped), nl=False)  # the embedded config as a `|` block
    elif output == "json":
        click.echo(render_data(config, "json"), nl=False)
    else:
        click.echo(_dump(config), nl=False)


def read_driver_checkpoint(path: str) -> Checkpoint | None:
    """The node driver's checkpoint (its prepared claims), for `apply_config` and the MIG manager; None when the
    driver has not written one. Read here, above both packages: gpudra.gpuplugin builds on gpudra.mig."""
    from gpudra.gpuplugin import records as _  # noqa: F401 - registers the GPU plugin's records, read here
    from gpudra.kubeletplugin.checkpoint import CheckpointError, read_checkpoint
    from gpudra.mig.apply import ApplyError

    try:
        return read_checkpoint(path)
    except (CheckpointError, OSError) as exc:
        raise ApplyError(f"the driver's checkpoint {path} cannot be read, so prepared claims are unknown: {exc}"
                         ) from None


def _read_config(path: str) -> Any:
    from gpudra.mig.apply import ApplyError, read_config_file

    try:
        return read_config_file(path)
    except ApplyError as exc:
        _fail(str(exc))


def _node_backend(backend: str, profile: str, node_name: str, root: str | None, plugins_dir: str):
    from gpudra.cli.driver_options import profile_named
    from gpudra.discovery import DiscoveryError, open_backend, resolve_backend
    from gpudra.kubeletplugin.paths import DriverPaths

    backend, fell_back = resolve_backend(backend, profile, profile_named())
    if fell_back:  # changing simulated GPUs under --root (default /) in place of the node's would be a surprise
        _fail("no NVIDIA driver (NVML) on this machine, and this command changes GPUs: give --backend simulated "
              "(with --profile and --root) for simulated ones, or --backend nvml on a GPU node")
    if root is None and backend == "simulated":
        # simulated GPUs live in files under the root, and the driver is asked to republish there: under / that
        # would be this machine's /var/lib (the NVIDIA driver's plugin directory included)
        _fail("--backend simulated changes simulated GPUs kept under --root: give --root DIR, the simulated node "
              "driver's root (a local cluster's is DIR/nodes/NODE)")
    paths = DriverPaths(root=root or "/", plugins_dir=plugins_dir)
    try:
        return paths, open_backend(backend, profile=profile, node_name=node_name, state_path=paths.simulated_state)
    except DiscoveryError as exc:
        _fail(str(exc))


_NODE_OPTIONS = [
    backend_option(help="auto: NVML where an NVIDIA driver is present; without one these commands, which change "
                        "GPUs, refuse rather than fall back (a --profile given asks for simulated GPUs); "
                        "simulated: the --profile's GPUs, kept under --root; nvml: this machine's GPUs"),
    click.option("--profile", default="dgx-h100", show_default=True, help="simulated node profile (simulated)"),
    node_option("This node's name (its Node object's; $NODE_NAME, as a DaemonSet sets it).", dest="node_name",
                default="node", envvar="NODE_NAME", show_default=True),
    click.option("--root", default=None,
                 help="the node driver's --root (its checkpoint and the simulated GPU state live under it); "
                      "default / with --backend nvml, required with --backend simulated"),
    # The driver's checkpoint (prepared claims) lives in its plugin directory: read it where that driver keeps it,
    # or claims go unseen and GPUs in use are repartitioned.
    click.option("--kubelet-plugins-directory-path", "plugins_dir", default="/var/lib/kubelet/plugins",
                 show_default=True, help="the node driver's --kubelet-plugins-directory-path (under --root)"),
]


def _node_options(fn):
    for option in reversed(_NODE_OPTIONS):
        fn = option(fn)
    return fn


@command.command(name="apply")
@click.option("-f", "--filename", "path", required=True, help="mig-parted config file or ConfigMap ('-' for stdin)")
@click.option("-c", "--config", "config_name", required=True, help="name of the config under mig-configs")
@_node_options
def apply_command(path: str, config_name: str, backend: str, profile: str, node_name: str, root: str | None,
                  plugins_dir: str) -> None:
    """Apply a named mig-parted config to this node's GPUs (destroying and creating MIG devices); refuses,
    listing them, while prepared claims hold devices on a GPU that would change. Exit 1 when refused."""
    from gpudra.mig.apply import ApplyError, ApplyRefused, apply_config

    document = _read_config(path)
    paths, opened = _node_backend(backend, profile, node_name, root, plugins_dir)
    try:
        result = apply_config(opened, document, config_name, read_driver_checkpoint(paths.checkpoint))
    except ApplyRefused as exc:
        _fail(str(exc), code=1)
    except ApplyError as exc:
        _fail(str(exc))
    finally:
        opened.close()
    for line in result.changed:
        click.echo(f"changed: {line}")
    for line in result.unchanged:
        click.echo(f"unchanged: {line}")
    if result.changed:
        paths.request_republish()
        click.echo("asked the node driver to republish its ResourceSlices", err=True)


@command.command(name="manager")
@click.option("-f", "--filename", "path", required=True,
              help="mig-parted config file or ConfigMap (re-read at every change, e.g. a mounted ConfigMap)")
@_node_options
@kubeconfig_option(help="follow the Node's labels in this cluster ($KUBECONFIG; or --in-cluster)",
                   envvar="KUBECONFIG")
@click.option("--in-cluster", is_flag=True, help="use the pod's service account")
@click.option("--resync", "resync_s", type=click.IntRange(1), default=60, show_default=True,
              help="seconds between full resyncs (a failed config is retried)")
@click.option("-v", "--verbose", is_flag=True, help="log at debug level (every label change and MIG operation)")
def manager_command(path: str, backend: str, profile: str, node_name: str, root: str | None, plugins_dir: str,
                    kubeconfig: str | None, in_cluster: bool, resync_s: int, verbose: bool) -> None:
    """Follow the node's nvidia.com/mig.config label: apply that config, report nvidia.com/mig.config.state
    (pending, success, failed) and have the node driver republish, as the GPU Operator's MIG manager does."""
    import logging
    import signal

    from gpudra.mig.apply import read_config_file
    from gpudra.mig.manager import KubeNodeLabels, MigManager

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not (kubeconfig or in_cluster):
        _fail("give --kubeconfig or --in-cluster: the manager follows a Node's labels")
    _read_config(path)  # readable now, or a usage error before anything runs
    from kubernetes.config import ConfigException

    try:
        nodes = KubeNodeLabels.from_kubeconfig(kubeconfig, in_cluster)
    except (ConfigException, OSError, ValueError) as exc:
        _fail(f"cannot load the cluster configuration: {exc}")
    paths, opened = _node_backend(backend, profile, node_name, root, plugins_dir)
    manager = MigManager(nodes, node_name, opened,
                         load_config=lambda: read_config_file(path),
                         read_checkpoint=lambda: read_driver_checkpoint(paths.checkpoint),
                         request_republish=paths.request_republish, resync_s=resync_s)
    signal.signal(signal.SIGTERM, lambda *_: manager.stop())
    try:
        manager.run()
    except KeyboardInterrupt:
        pass
    finally:
        opened.close()


@command.command(name="validate")
@click.option("-f", "--filename", "path", required=True, help="mig-parted config file ('-' for stdin)")
@click.option("--gpu", "gpus", multiple=True, help="check against these GPU models (repeatable)")
@click.option("-v", "--verbose", is_flag=True, help="also print the placement found for every entry")
@output_option(help="Format of the problem list, as `gpudra validate` prints it: table (one `error: FILE: field: "
                    "message` line each) or yaml/json records.")
def validate_command(path: str, gpus: tuple[str, ...], verbose: bool, output: str) -> None:
    """Check a mig-parted config: format, profiles, counts and a non-overlapping placement; exit 0 when valid,
    1 when not, 2 when the file cannot be read."""
    from gpudra.api.problems import Problem
    from gpudra.api.yaml_files import LoadError, read_yaml
    from gpudra.mig.config import configs_in_document, validate_config

    try:
        document = read_yaml(path)
    except LoadError as exc:
        _fail(str(exc))
    metadata = document.get("metadata") if isinstance(document, dict) else None
    name = str(metadata.get("name") or "") if isinstance(metadata, dict) else ""

    def problem(field: str, message: str, severity: str = "error", in_configmap: bool = True) -> Problem:
        # a ConfigMap's as `FILE:doc 1 (ConfigMap/name): data['key'].field`, a plain file's as `FILE: field`
        return Problem(path, 1 if in_configmap else None, "ConfigMap" if in_configmap else "",
                       name if in_configmap else "", field, message, "warning" if severity == "warning" else "error")

    problems: list[Problem] = []
    try:
        configs = configs_in_document(document)
    except ValueError as exc:
        configs = []
        problems.append(problem("", str(exc)))
    models = _models(gpus) if gpus else None
    named = 0
    for _, config, field in configs:
        report = validate_config(config, models)
        named += len(config.get("mig-configs") or {}) if isinstance(config, dict) else 0
        problems.extend(problem(f"{field}.{finding.where}" if field else finding.where, finding.message,
                                finding.severity, in_configmap=bool(field)) for finding in report.findings)
        if verbose:
            for line in report.checked:
                click.echo(f"ok: {line}", err=output in ("yaml", "json"))
    if report_problems(problems, output, f"{plural(named, 'MIG config')} in {path}", named):
        sys.exit(NEGATIVE)


@command.command(name="slices")
@click.option("--gpu", "gpu", required=True, help="GPU model of every GPU on the node")
@click.option("--count", default=1, show_default=True, type=click.IntRange(1, 8), help="number of GPUs")
@node_option("The Node the slices are published for (spec.nodeName, the pool's name).", dest="node_name",
             default="node-1", show_default=True, callback=dns_subdomain_value())
@kubernetes_version_option("The release to publish for (1.33-1.36; default 1.36): 1.33 and 1.34 want each GPU's "
                           "counter set in the slice of its devices, 1.35 on in a slice of its own.")
@output_option(formats=("table", "wide", "yaml", "json"), pipe_default="yaml",
               help="table: one row per slice; yaml/json: the ResourceSlices.")
def slices_command(gpu: str, count: int, node_name: str, kubernetes_version: str | None, output: str) -> None:
    """Print the dynamic-MIG ResourceSlices of a node with COUNT such GPUs, in the release's layout."""
    from gpudra.mig.dynamic import DynamicMigGpu, combined_resource_slices, resource_slices
    from gpudra.versions import SPLIT_SLICES, gate_state, parse_version, partitionable_layout

    model = _models((gpu,))[0]
    gpus = [DynamicMigGpu(minor=i, model=model, uuid=f"GPU-{node_name}-{i:08x}",
                          attributes={"productName": {"string": model.product_names[0]},
                                      "architecture": {"string": model.architecture}})
            for i in range(count)]
    version = parse_version(kubernetes_version)
    state = gate_state("DRAPartitionableDevices", version)
    if not state.default:
        click.echo(f"warning: Kubernetes {version}: dynamic MIG needs the DRAPartitionableDevices feature gate "
                   f"({state.describe()}); the API server drops counter sets and consumption while it is off",
                   err=True)
    split = partitionable_layout(version) == SPLIT_SLICES
    slices = resource_slices(node_name, gpus) if split else combined_resource_slices(node_name, gpus)
    require_generated_valid(slices, "mig slices", version)
    if output in ("table", "wide"):
        from gpudra.cli.driver_options import slices_table

        click.echo(slices_table(slices, output == "wide"), nl=False)
    else:
        click.echo(render_objects(slices, output), nl=False)


@command.command(name="plan")
@click.option("-f", "--filename", "paths", multiple=True, required=True,
              help="ResourceClaim / ResourceClaimTemplate manifests (repeatable)")
@click.option("--gpu", "gpu", required=True, help="GPU model of the node's GPUs")
@click.option("--count", default=1, show_default=True, type=click.IntRange(1, 64), help="number of GPUs")
@output_option(help="table: the plan as text (wide: with each MIG device's memory and the claim request it "
                    "serves); yaml/json: as data.")
def plan_command(paths: tuple[str, ...], gpu: str, count: int, output: str) -> None:
    """Propose a static MIG layout for a mix of claims and compare it with dynamic MIG. Exit 0 when the proposed
    layout serves every claim, 1 when it leaves some unserved, 2 when the input cannot be read."""
    from gpudra.mig.planner import PlanError, demands_from_objects, plan, render_plan

    model = _models((gpu,))[0]
    objects = _load_objects(paths)
    try:
        demands = demands_from_objects(objects, model)
        result = plan(model, count, demands)
    except PlanError as exc:
        _fail(str(exc))
    if output in ("yaml", "json"):
        click.echo(render_data(result.to_dict(), output), nl=False)
    else:
        click.echo(render_plan(result, wide=output == "wide"))
    unserved = result.static_usage.unserved
    if unserved:  # the layout proposed does not serve every claim: the answer is no, as allocate's is
        dynamic = " (dynamic MIG would serve them all)" if not result.dynamic_usage.unserved else ""
        counted = Counter(unserved)
        fail(f"the proposed layout of {count} {model.display_name} leaves {plural(len(unserved), 'device')} "
             f"unserved: {', '.join(f'{label} ×{n}' if n > 1 else label for label, n in counted.items())}"
             f"{dynamic}", NEGATIVE)


def _load_objects(paths: tuple[str, ...]) -> list[dict[str, Any]]:
    from gpudra.api.load import LoadError, load_paths

    try:
        return [doc.obj for doc in load_paths(list(paths)) if isinstance(doc.obj, dict)]
    except LoadError as exc:
        _fail(str(exc))
