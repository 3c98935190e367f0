"""`gpudra explain pod/NAME` (or `kubectl gpudra explain pod/NAME`): why a pod or claim does not fit,
per node and per request, and the smallest change that would make it fit."""

from __future__ import annotations

import sys
from typing import Any

import click


class UsageError(click.ClickException):
    exit_code = 2


def load_manifests(paths: list[str]) -> list[dict[str, Any]]:
    """Objects from files (`kubectl get … -o yaml` dumps included), converted to resource.k8s.io/v1."""
    from gpudra.api.load import LoadError, load_paths

    try:
        documents = load_paths(paths)
    except LoadError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{exc.filename or ''}: {exc.strerror or exc}") from None
    try:
        from gpudra.api.convert import to_v1
    except ImportError:  # pragma: no cover
        return [doc.obj for doc in documents]
    return [to_v1(doc.obj) for doc in documents]


def load_cluster(kubeconfig: str | None, context: str | None) -> list[dict[str, Any]]:
    """Objects read from a live cluster (read-only); errors become clean usage errors."""
    from gpudra.kube import ClusterReadError, read_cluster

    try:
        return read_cluster(kubeconfig=kubeconfig, context=context)
    except ClusterReadError as exc:
        raise UsageError(str(exc)) from None


def load_inputs(paths: tuple[str, ...], kubeconfig: str | None, context: str | None) -> list[dict[str, Any]]:
    """Files when `-f` is given, otherwise the cluster of the kubeconfig (as kubectl would)."""
    if paths and (kubeconfig or context):
        raise UsageError("use either -f (manifests) or --kubeconfig/--context (a live cluster), not both")
    if paths:
        return load_manifests(list(paths))
    return load_cluster(kubeconfig, context)


def _target(args: tuple[str, ...]) -> str:
    if len(args) == 1:
        return args[0]
    if len(args) == 2 and "/" not in args[0]:
        return f"{args[0]}/{args[1]}"  # kubectl style: `explain pod NAME`
    raise UsageError("expected one target: pod/NAME or claim/NAME")


def _default_namespace(paths: tuple[str, ...], kubeconfig: str | None, context: str | None) -> str:
    if paths:
        return "default"
    from gpudra.kube import context_namespace

    return context_namespace(kubeconfig, context) or "default"


@click.command(
    "explain",
    short_help="Why a pod or claim does not fit: per node, per request, and what would make it fit.",
)
@click.argument("target", nargs=-1, required=True)
@click.option("-f", "--filename", "paths", multiple=True, metavar="PATH",
              help="Manifest file or directory ('-' for stdin), e.g. a `kubectl get … -o yaml` dump; repeatable. "
                   "Without -f the cluster of the kubeconfig is read.")
@click.option("-n", "--namespace", default=None, help="Namespace of the target (default: 'default', or the "
              "kubeconfig context's namespace for a live cluster).")
@click.option("--kubeconfig", default=None, metavar="PATH", help="Read a live cluster with this kubeconfig.")
@click.option("--context", default=None, help="The kubeconfig context to use.")
@click.option("--policy", default="kube", show_default=True, help="Scoring policy of the replayed schedule.")
@click.option("--node", "node", default=None, help="Show only this node's details (text output).")
@click.option("--no-fixes", is_flag=True, help="Do not search for changes that make it fit.")
@click.option("-o", "--output", type=click.Choice(["text", "yaml", "json"]), default="text", show_default=True)
def command(target: tuple[str, ...], paths: tuple[str, ...], namespace: str | None, kubeconfig: str | None,
            context: str | None, policy: str, node: str | None, no_fixes: bool, output: str) -> None:
    """Explain TARGET (pod/NAME or claim/NAME): the kube-scheduler style summary, then per node the funnel
    of devices for every request, failed constraints, pool problems and CEL errors, and the smallest
    change that was verified to make it fit.

    Pending pods ahead of the target in the scheduling queue are placed first, as the scheduler would.
    Nothing is written to the cluster.
    """
    from gpudra.explain.analyze import TargetError, explain
    from gpudra.explain.render import render

    objects = load_inputs(paths, kubeconfig, context)
    namespace = namespace or _default_namespace(paths, kubeconfig, context)
    try:
        explanation = explain(objects, _target(target), namespace=namespace, policy=policy, fixes=not no_fixes)
    except TargetError as exc:
        raise UsageError(str(exc)) from None
    except (KeyError, ValueError) as exc:
        # invalid policy names and malformed objects the scheduler refuses
        raise UsageError(str(exc).strip("'\"")) from None
    if node is not None and explanation.node(node) is None and explanation.nodes:
        raise UsageError(f"node {node} not found")
    sys.stdout.write(render(explanation, output, node=node))
