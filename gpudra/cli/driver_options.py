"""What the `gpudra driver` commands share: option helpers, the backend and gate choices, the slices table."""
from __future__ import annotations

from typing import NoReturn

import click

from gpudra.cli.errors import InputError, warn
from gpudra.vocabulary import COMPUTE_DOMAIN_DRIVER_NAME, DRIVER_NAME
from gpudra.cli.output import render_objects, render_table
from gpudra.discovery import resolve_backend


def profile_named() -> bool:
    """Whether the user typed --profile (as opposed to its default)."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source("profile") if ctx is not None else None
    return source in (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)


DRIVER_NAME_HELP = ("The DRA driver's name (ResourceSlices' spec.driver, the DeviceClasses' selectors); default "
                    f"{DRIVER_NAME}, or {COMPUTE_DOMAIN_DRIVER_NAME} with --driver compute-domain.")
RUNNING_DRIVER_HELP = f"The running driver's name ({COMPUTE_DOMAIN_DRIVER_NAME} for the compute-domain plugin)."
DRIVERS = ("gpu", "compute-domain")


def driver_option(help_text: str, default: str = "gpu", choices: tuple[str, ...] = DRIVERS):
    """--driver: which of gpudra's two kubelet plugins (NVIDIA runs them as two containers of one DaemonSet pod)."""
    return click.option("--driver", "driver_kind", type=click.Choice(choices), default=default, show_default=True,
                        help=help_text)


def driver_name_for(driver_kind: str, driver_name: str | None) -> str:
    return driver_name or (COMPUTE_DOMAIN_DRIVER_NAME if driver_kind == "compute-domain" else DRIVER_NAME)
REGISTRAR_HELP = "the kubelet's plugin registration directory (the driver's registration socket, under --root)"


def fail(message: str) -> NoReturn:
    raise InputError(message)


def chosen_backend(backend: str, profile: str | None) -> str:
    chosen, warning = resolve_backend(backend, profile, profile_named())
    if warning:
        warn(warning)
    return chosen


def published_backend(backend: str, profile: str | None, kubeconfig: str | None, in_cluster: bool) -> str:
    """The backend `driver run` uses. Publishing to an API server (--kubeconfig, KUBECONFIG, --in-cluster), simulated
    GPUs must be asked for by name (`--backend simulated`): `auto` falling back to them (no NVML, or a --profile)
    would have the scheduler place pods on GPUs that do not exist (issue 20), so that is refused."""
    if backend != "auto" or not (kubeconfig or in_cluster):
        return chosen_backend(backend, profile)
    chosen, _ = resolve_backend(backend, profile, profile_named())
    if chosen == "simulated":
        ctx = click.get_current_context(silent=True)
        from_env = ctx is not None and ctx.get_parameter_source("kubeconfig") == click.core.ParameterSource.ENVIRONMENT
        target = "--in-cluster" if in_cluster else "KUBECONFIG" if from_env else "--kubeconfig"
        why = "--profile names a simulated node" if profile_named() else "no NVIDIA driver (NVML) on this machine"
        fail(f"--backend auto would publish SIMULATED GPUs to the cluster of {target} ({why}), and the scheduler "
              "would place pods on GPUs that do not exist: pass --backend simulated to publish simulated GPUs on "
              "purpose, or --backend nvml for this node's real GPUs")
    return chosen


KUBERNETES_VERSION_HELP = ("Kubernetes release of the cluster (1.33-1.36; default: the API server's /version with "
                           "a kubeconfig, else 1.36): decides whether --dynamic-mig's layout can be allocated there.")


def slice_layout(dynamic_mig: bool, kubernetes_version: str | None, features: str,
                  kubeconfig: str | None = None, live: bool = False) -> tuple[bool, str]:
    """(--dynamic-mig when the release allows it, else False with a warning that says why; where the release
    wants counter sets: gpudra.versions.partitionable_layout)."""
    from gpudra.allocator.features import Features
    from gpudra.gpuplugin.slices import dynamic_mig_layout
    from gpudra.kube.inputs import kubernetes_version as cluster_version
    from gpudra.versions import VersionError, parse_version, partitionable_layout

    try:
        if not dynamic_mig:  # the flags decide nothing then, but a typo in them is still an error
            Features.parse(features, parse_version(kubernetes_version))
            return False, partitionable_layout(kubernetes_version)
        version = cluster_version(kubernetes_version, (), kubeconfig) if live else parse_version(kubernetes_version)
        dynamic, note = dynamic_mig_layout(version, features)
    except VersionError as exc:
        fail(f"--kubernetes-version: {exc}")
    except (InputError, ValueError) as exc:
        fail(str(exc))
    if note:
        click.echo(f"warning: Kubernetes {version}: {note}", err=True)
    return dynamic, partitionable_layout(version)


def warn_unless_consumable(kubernetes_version: str | None, features: str) -> None:
    """Consumable sharing's fields (allowMultipleAllocations, requestPolicy) are dropped by an API server whose
    DRAConsumableCapacity gate is off: the GPUs would then be handed out whole, one claim each."""
    from gpudra.allocator.features import Features
    from gpudra.versions import gate_state, parse_version

    version = parse_version(kubernetes_version)  # both flags were checked by slice_layout
    if not Features.parse(features, version).consumable_capacity:
        click.echo(f"warning: Kubernetes {version}: consumable sharing needs the DRAConsumableCapacity feature gate "
                   f"({gate_state('DRAConsumableCapacity', version).describe()}); without it the API server drops "
                   f"allowMultipleAllocations and each GPU goes to one claim", err=True)


def driver_gates(text: str, kubernetes_version: str | None, features: str):
    """--feature-gates (NVIDIA's gates: gpudra.gpuplugin.featuregates), with the one gate that needs the cluster's
    own: DRAListTypeAttributes publishes list attributes, which an API server without Kubernetes' gate of that
    name refuses (NVIDIA's featuregates.go says to enable the cluster's first)."""
    from gpudra.allocator.features import Features
    from gpudra.gpuplugin.featuregates import FeatureGateError, parse_feature_gates
    from gpudra.versions import VersionError, gate_state, parse_version

    try:
        gates = parse_feature_gates(text)
        version = parse_version(kubernetes_version)
        cluster_has = (gate_state("DRAListTypeAttributes", version).stage is not None
                       and Features.parse(features, version).list_type_attributes)
        if gates.enabled("DRAListTypeAttributes") and not cluster_has:
            fail(f"--feature-gates DRAListTypeAttributes=true: Kubernetes {version} needs its DRAListTypeAttributes "
                  f"feature gate ({gate_state('DRAListTypeAttributes', version).describe()}) for list attributes; "
                  "turn it on there (--features +DRAListTypeAttributes) or leave the driver's gate off")
    except FeatureGateError as exc:
        fail(f"--feature-gates: {exc}")
    except (VersionError, ValueError) as exc:
        fail(str(exc))
    return gates


def gated_flag(flag: str, param: str, value: bool, gates, gate: str) -> bool:
    """A gpudra flag that a NVIDIA gate also switches: the gate, when named, decides; both named must agree."""
    if not gates.named(gate):
        return value
    ctx = click.get_current_context(silent=True)
    typed = ctx is not None and ctx.get_parameter_source(param) == click.core.ParameterSource.COMMANDLINE
    if typed and value != gates.enabled(gate):
        fail(f"{flag} says {str(value).lower()} but --feature-gates {gate}={str(gates.enabled(gate)).lower()}")
    return gates.enabled(gate)


def dump_objects(objs: list, output: str) -> None:
    if output in ("table", "wide"):
        click.echo(slices_table(objs, output == "wide"), nl=False)
    else:
        click.echo(render_objects(objs, output), nl=False)


def slices_table(objs: list, wide: bool) -> str:
    """ResourceSlices: NAME, NODE, POOL, DEVICES (wide: driver and generation); DeviceClasses: NAME and the
    selectors (wide: every selector in full)."""
    if objs and objs[0].get("kind") == "DeviceClass":
        rows = []
        for obj in objs:
            selectors = [((s or {}).get("cel") or {}).get("expression", "") for s in
                         (obj.get("spec") or {}).get("selectors") or []]
            text = " && ".join(selectors)
            rows.append([obj["metadata"]["name"], text if wide or len(text) <= 60 else text[:59] + "…"])
        return render_table(["NAME", "SELECTORS"], rows)
    rows = []
    for obj in objs:
        spec = obj.get("spec") or {}
        pool = spec.get("pool") or {}
        row = [obj["metadata"]["name"], spec.get("nodeName", "-"), pool.get("name", ""),
               str(len(spec.get("devices") or []))]
        rows.append([*row, spec.get("driver", ""), str(pool.get("generation", ""))] if wide else row)
    return render_table(["NAME", "NODE", "POOL", "DEVICES", *(["DRIVER", "GENERATION"] if wide else [])], rows)
