"""`gpudra explain pod/NAME` (or `kubectl gpudra explain pod/NAME`): why a pod or claim does not fit,
per node and per request, and the smallest change that would make it fit."""

from __future__ import annotations

import sys
from typing import Any

import click

from gpudra.scheduler.scoring import POLICIES


class UsageError(click.ClickException):
    exit_code = 2


def load_inputs(paths: tuple[str, ...], kubeconfig: str | None, context: str | None) -> list[dict[str, Any]]:
    """Files when `-f` is given, otherwise the cluster of the kubeconfig (as kubectl would)."""
    from gpudra.kube import InputError
    from gpudra.kube import load_inputs as load

    try:
        return load(paths, kubeconfig, context)
    except InputError as exc:
        raise UsageError(str(exc)) from None


def _target(args: tuple[str, ...]) -> str:
    if len(args) == 1:
        return args[0]
    if len(args) == 2 and "/" not in args[0]:
        return f"{args[0]}/{args[1]}"  # kubectl style: `explain pod NAME`
    raise UsageError("expected one target: pod/NAME or claim/NAME")


def _default_namespace(paths: tuple[str, ...], kubeconfig: str | None, context: str | None) -> str:
    from gpudra.kube import default_namespace

    return default_namespace(paths, kubeconfig, context)


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
@click.option("--policy", type=click.Choice(POLICIES), default="kube", show_default=True,
              help="Scoring policy of the replayed schedule (as `gpudra schedule --policy`).")
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
