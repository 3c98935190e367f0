"""`gpudra explain pod/NAME` (or `kubectl gpudra explain pod/NAME`): why a pod or claim does not fit,
per node and per request, and the smallest change that would make it fit."""

from __future__ import annotations

import sys

import click

from gpudra.cli.errors import NEGATIVE, OK, InputError, UsageError, warn
from gpudra.cli.inputs import (checked_progress, gate_warnings, read_inputs, release_and_features, v1_objects,
                               validated_alongside)
from gpudra.cli.options import (cluster_options, features_option, filename_option, kubernetes_version_option,
                                namespace_option, no_validate_option, node_option)
from gpudra.cli.output import output_option
from gpudra.cli.progress import progress
from gpudra.scheduler.policies import POLICIES


def _target(args: tuple[str, ...]) -> str:
    if len(args) == 1:
        return args[0]
    if len(args) == 2 and "/" not in args[0]:
        return f"{args[0]}/{args[1]}"  # kubectl style: `explain pod NAME`
    raise UsageError("expected one target: pod/NAME or claim/NAME")


def _default_namespace(paths: tuple[str, ...], kubeconfig: str | None, context: str | None) -> str:
    from gpudra.kube import default_namespace

    return default_namespace(paths, kubeconfig, context)


def _local_cluster(directory: str | None, paths: tuple[str, ...], kubeconfig: str | None, context: str | None):
    """The local cluster (`gpudra cluster up`) to read: the one --dir names, else the current one when nothing
    names another source (-f, --kubeconfig, --context, $KUBECONFIG, or running as `kubectl gpudra`); else None."""
    import os

    from gpudra.cli import _prog_name
    from gpudra.cluster.layout import ClusterDir, ClusterSetupError, current_dir, resolve_dir

    if directory is not None:
        if paths or kubeconfig or context:
            raise UsageError("use one of --dir (a local cluster), -f (manifests) and --kubeconfig/--context")
        try:
            return resolve_dir(directory)
        except ClusterSetupError as exc:
            raise UsageError(str(exc)) from None
    if paths or kubeconfig or context or os.environ.get("KUBECONFIG") or _prog_name() != "gpudra":
        return None
    current = current_dir()
    return ClusterDir(current) if current and ClusterDir(current).exists() else None


@click.command(
    "explain",
    short_help="Why a pod or claim does not fit: per node, per request, and what would make it fit.",
)
@click.argument("target", nargs=-1, required=True)
@filename_option(help="Manifest file or directory ('-' for stdin), e.g. a `kubectl get … -o yaml` dump; "
                      "repeatable. Without -f the local cluster (--dir) or the kubeconfig's cluster is read.")
@namespace_option("Namespace of the target (default: 'default', or the kubeconfig context's namespace for a "
                  "live cluster).")
@cluster_options("Read a live cluster with this kubeconfig.")
@click.option("--dir", "directory", default=None, metavar="DIR",
              help="Read the local cluster in DIR (`gpudra cluster up`). Without -f, --kubeconfig, --context or "
                   "$KUBECONFIG, the local cluster brought up last is read when there is one.")
@click.option("--policy", type=click.Choice(POLICIES), default=None,
              help="Scoring policy of the replayed schedule (as `gpudra schedule --policy`; default: a local "
                   "cluster's own, else kube).")
@node_option(help="Show only this node's details (text output).")
@click.option("--no-fixes", is_flag=True, help="Do not search for changes that make it fit.")
@no_validate_option()
@output_option(help="table: the report (wide: every node's section, none left out); yaml/json: all of it as data.")
@kubernetes_version_option()
@features_option()
def command(target: tuple[str, ...], paths: tuple[str, ...], namespace: str | None, kubeconfig: str | None,
            context: str | None, request_timeout: float | None, directory: str | None, policy: str | None,
            node: str | None, no_fixes: bool, validate: bool, output: str, kubernetes_version: str | None,
            features: str) -> None:
    """Explain TARGET (pod/NAME or claim/NAME): the kube-scheduler style summary, then per node the funnel
    of devices for every request, failed constraints, pool problems and CEL errors, and the smallest
    change that was verified to make it fit.

    Pending pods ahead of the target in the scheduling queue are placed first, as the scheduler would.
    Nothing is written to the cluster. Exit 0 when the target fits, 1 when it does not (or the manifests
    are invalid), 2 when the input cannot be read or the target does not exist.
    """
    from gpudra.explain.analyze import TargetError, explain
    from gpudra.explain.render import render

    wanted = _target(target)
    local = _local_cluster(directory, paths, kubeconfig, context)
    if local is not None and local.load_config().api_server == "kubernetes":
        from gpudra.kubecluster.controlplane import KubePaths

        # a local cluster on the real API server is read as any live cluster is, through its kubeconfig
        kubeconfig, local = KubePaths(local).admin_kubeconfig, None
    if local is not None:
        from gpudra.api.load import Document
        from gpudra.cluster.why import model_objects

        click.echo(f"reading the local cluster in {local.path}", err=True)
        config = local.load_config()
        # the cluster's own gates unless --features names others
        version, gates = release_and_features(kubernetes_version or config.kubernetes_version,
                                              config.features if features == "default" else features, ("-",))
        documents = [Document(obj, f"local cluster {local.path}", index)
                     for index, obj in enumerate(model_objects(local), start=1)]
        namespace = namespace or "default"
        policy = policy or config.policy
    else:
        version, gates = release_and_features(kubernetes_version, features, paths, kubeconfig, context,
                                              request_timeout)
        documents = read_inputs(paths, kubeconfig, context, request_timeout, validate=False, command="explain")
        namespace = namespace or _default_namespace(paths, kubeconfig, context)
    policy = policy or "kube"
    with validated_alongside(documents, "explain", validate, release=version, features=gates) as check:
        warnings = gate_warnings(documents, version, gates)  # before the work, which fills in fields of the objects
        try:
            objects = v1_objects(documents)
            with progress() as bar:
                explanation = explain(objects, wanted, namespace=namespace, policy=policy, fixes=not no_fixes,
                                      features=gates, kubernetes_version=version,
                                      progress=checked_progress(bar, check))
        except TargetError as exc:
            raise UsageError(str(exc)) from None
        except (KeyError, ValueError) as exc:
            # malformed objects the scheduler refuses (--no-validate)
            raise InputError(str(exc).strip("'\"")) from None
    for problem in warnings:
        warn(f"{problem.location()}: {problem.path}: {problem.message}")
    if node is not None and explanation.node(node) is None and explanation.nodes:
        raise UsageError(f"node {node} not found")
    sys.stdout.write(render(explanation, output, node=node))
    sys.exit(OK if explanation.fits else NEGATIVE)
