"""The options that several commands share, defined once so they are spelled, defaulted and explained alike.

Each is a decorator; `cluster_options` bundles what reading a live cluster needs (kubectl's flags).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import click

Decorator = Callable[[Any], Any]

# kubectl waits forever by default (`--request-timeout=0`); an API server that accepts connections and
# never answers would hang gpudra with it, so gpudra gives up after this long unless told otherwise.
DEFAULT_REQUEST_TIMEOUT_S = 30.0


def filename_option(required: bool = False, help: str | None = None, dest: str = "paths") -> Decorator:
    return click.option(
        "-f", "--filename", dest, multiple=True, required=required, metavar="PATH",
        help=help or "Manifest file or directory (recursive *.yaml, *.yml, *.json); '-' reads stdin. Repeatable.")


def namespace_option(help: str | None = None) -> Decorator:
    return click.option("-n", "--namespace", default=None,
                        help=help or "Namespace (default: 'default', or the kubeconfig context's namespace "
                                     "for a live cluster).")


def kubeconfig_option(help: str | None = None, **extra: Any) -> Decorator:
    return click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None, metavar="PATH",
                        help=help or "Read a live cluster with this kubeconfig (nothing is changed there).",
                        **extra)


def context_option() -> Decorator:
    return click.option("--context", default=None, help="The kubeconfig context to use.")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float | None:
    """kubectl's `--request-timeout` values: `30`, `30s`, `1m`, `500ms`; 0 means no limit (None)."""
    match = _DURATION.match(str(text))
    if match is None:
        raise ValueError(f"{text!r} is not a duration (e.g. 30s, 1m, 500ms; 0 for no limit)")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    return seconds or None


def _duration(ctx: click.Context, param: click.Parameter, value: Any) -> float | None:
    if value is None:
        return DEFAULT_REQUEST_TIMEOUT_S
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def request_timeout_option() -> Decorator:
    return click.option("--request-timeout", "request_timeout", default=None, metavar="DURATION",
                        callback=_duration,
                        help=f"Give up on an API server call after this long (30s, 1m; 0: wait forever).  "
                             f"[default: {DEFAULT_REQUEST_TIMEOUT_S:g}s]")


def cluster_options(kubeconfig_help: str | None = None) -> Decorator:
    """--kubeconfig, --context and --request-timeout, as kubectl spells them."""
    decorators = [kubeconfig_option(kubeconfig_help), context_option(), request_timeout_option()]

    def apply(function: Any) -> Any:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return apply


def _checked_version(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An explicit version must name a modelled release: `--kubernetes-version ""` (an unset shell variable) is a
    usage error, not silently the newest release. The command still receives the user's spelling. A patch release
    with a known DRA issue (1.34.0, 1.34.1: gpudra.versions.KNOWN_PATCH_ISSUES) is named in a note on stderr (the
    input's warnings, which commands count, are the input's)."""
    from gpudra.versions import VersionError, parse_version, patch_warnings

    if value is None:
        return None
    if not value.strip():
        raise click.BadParameter("must not be empty (omit the option for the default release)")
    try:
        parse_version(value)
    except VersionError as error:
        raise click.BadParameter(str(error)) from None
    for line in patch_warnings(value):  # about the release, not the input: a note, outside the input's warnings
        click.echo(f"note: {line}", err=True)
    return value


def kubernetes_version_option(help: str | None = None) -> Decorator:
    return click.option("--kubernetes-version", "kubernetes_version", default=None, metavar="VERSION",
                        callback=_checked_version,
                        help=(help or "Behave as this Kubernetes release's components do (1.33-1.36: its default "
                                      "feature gates and API validation; default: a live cluster's /version, "
                                      "else 1.36, the newest gpudra knows).")
                        + " A patch release (1.34.1) with a known DRA issue is named in a note; 1.36.3 and later "
                          "1.36 patches also allocate as 1.36.3 does (counters of rejected devices rolled back).")


def _runtime_config(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, bool]:
    from gpudra.versions import RuntimeConfigError, parse_runtime_config

    try:
        return parse_runtime_config(value)
    except RuntimeConfigError as error:
        raise click.BadParameter(str(error).removeprefix("--runtime-config: ")) from None


def runtime_config_option() -> Decorator:
    """kube-apiserver's --runtime-config: the beta resource.k8s.io versions the cluster serves besides v1."""
    return click.option("--runtime-config", "runtime_config", default=None, metavar="GROUP/VERSION=true,…",
                        callback=_runtime_config,
                        help="The API versions the cluster's kube-apiserver enables with its --runtime-config, e.g. "
                             "resource.k8s.io/v1beta2=true: objects in such a beta version are then served as "
                             "written (without it they are a warning: the release serves only v1 by default).")


def features_option(default: str = "default") -> Decorator:
    return click.option("--features", "features", default=default, show_default=True, metavar="GATES",
                        help="Feature gates: default (the --kubernetes-version's defaults), all, none, "
                             "Name/+Name, -Name (comma-separated, left to right; e.g. default,+DeviceTaints).")


def no_validate_option() -> Decorator:
    return click.option("--validate/--no-validate", "validate", default=True, show_default=True,
                        help="Refuse input that fails `gpudra validate` (exit 1, with its messages).")


def dns_subdomain_value(max_length: int = 253) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback: the value must be a DNS subdomain (node and driver names), checked by the API
    package's one copy of the rule; a bad value is a usage error (exit 2) before anything is generated."""

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        from gpudra.api.schema.names import dns_subdomain

        if value is None:
            return value
        problems = dns_subdomain(value, max_length)
        if problems:
            raise click.BadParameter("; ".join(problems))
        return value

    return check


def node_option(help: str, dest: str = "node", **extra: Any) -> Decorator:
    """A node's name, spelled `--node-name` (kubelet's and NVIDIA's driver's flag) or `--node` (kubectl's
    `--selector`-free shorthand) alike by every command that takes one."""
    extra.setdefault("metavar", "NODE")
    return click.option("--node-name", "--node", dest, help=help, **extra)


BACKEND_HELP = ("auto: NVML where an NVIDIA driver is present, else simulated GPUs (with a warning; a --profile "
                "given asks for simulated GPUs); simulated: the --profile's GPUs; nvml: this machine's GPUs")


def backend_option(help: str = BACKEND_HELP) -> Decorator:
    """Where GPUs come from, with one default everywhere (see gpudra.discovery.resolve_backend)."""
    from gpudra.discovery import BACKEND_CHOICES

    return click.option("--backend", type=click.Choice(BACKEND_CHOICES), default="auto", show_default=True,
                        help=help)
