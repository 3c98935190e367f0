"""`gpudra schedule`: place every pending pod as kube-scheduler would, and print the resulting objects."""

from __future__ import annotations

import click

from gpudra.allocator.allocator import FILTER_TIMEOUT_S
from gpudra.scheduler.scoring import POLICIES


class UsageError(click.ClickException):
    exit_code = 2


def _load(paths: list[str], validate: bool) -> list[dict]:
    from gpudra.api.load import LoadError, load_paths

    try:
        documents = load_paths(paths)
    except LoadError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{exc.filename or ''}: {exc.strerror or exc}") from None
    if validate:
        from gpudra.api.problems import errors
        from gpudra.api.validate import validate_documents

        problems = errors(validate_documents(documents))
        if problems:
            lines = [str(problem) for problem in problems]
            raise UsageError("invalid input (use --no-validate to schedule anyway):\n" + "\n".join(lines))
    from gpudra.api.convert import to_v1

    return [to_v1(doc.obj) for doc in documents]


@click.command(
    "schedule",
    short_help="Place pods on nodes as kube-scheduler would (claims, templates, DRA, cpu/memory).",
)
@click.option("-f", "--filename", "paths", multiple=True, metavar="PATH",
              help="Manifest file or directory ('-' for stdin); repeatable. Without -f the cluster of the "
                   "kubeconfig is read (read-only: nothing is changed there).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="Read a live cluster with this kubeconfig (what-if: the cluster is not changed).")
@click.option("--context", default=None, help="The kubeconfig context to use.")
@click.option("--policy", type=click.Choice(POLICIES), default="kube", show_default=True,
              help="Node and device scoring: kube-scheduler's, binpack, spread, or fragmentation-aware (FGD).")
@click.option("-o", "--output", "output", type=click.Choice(["yaml", "json", "table"]), default="table",
              show_default=True, help="Every object after scheduling (yaml stream, json List) or a summary table.")
@click.option("--percentage-of-nodes-to-score", "percentage", type=click.IntRange(0, 100), default=None,
              help="Stop searching after this share of nodes were found feasible (0 = kube-scheduler's adaptive "
                   "default; the policy decides when unset: kube adaptive, others 100).")
@click.option("--filter-timeout", type=click.FloatRange(min=0), default=FILTER_TIMEOUT_S, show_default=True,
              metavar="SECONDS", help="Device search budget per pod over all nodes (kube-scheduler's DRA Filter "
              "timeout; its nodes' Filters run in parallel); a node searched past it reports \"timed out trying "
              "to allocate devices\". 0: no limit.")
@click.option("--validate/--no-validate", default=True, show_default=True,
              help="Refuse input that fails gpudra's API validation.")
def command(paths: tuple[str, ...], kubeconfig: str | None, context: str | None, policy: str, output: str,
            percentage: int | None, filter_timeout: float, validate: bool) -> None:
    """Apply the manifests (Pods, Deployments, ReplicaSets, StatefulSets, Jobs, DaemonSets, ResourceClaims,
    templates, DeviceClasses, ResourceSlices, Nodes), schedule every pending pod in queue order and print the
    result. Same input, same output: generated names and uids derive from the input."""
    from gpudra.scheduler import Cluster, Scheduler
    from gpudra.scheduler.render import summary, to_json, to_table, to_yaml

    if paths and (kubeconfig or context):
        raise UsageError("use either -f (manifests) or --kubeconfig/--context (a live cluster), not both")
    if paths:
        objects = _load(list(paths), validate)
    else:
        from gpudra.kube.inputs import InputError, load_inputs

        try:  # objects the API server already validated
            objects = load_inputs(kubeconfig=kubeconfig, context=context)
        except InputError as exc:
            raise UsageError(str(exc)) from None
    try:
        cluster = Cluster(objects)
        scheduler = Scheduler(cluster, policy=policy, percentage_of_nodes_to_score=percentage,
                              filter_timeout=filter_timeout or None)
        results = scheduler.run()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except (AttributeError, TypeError, KeyError) as exc:  # a field of the wrong shape that validation let through
        raise UsageError(f"malformed input: {type(exc).__name__}: {exc}") from None
    if output == "yaml":
        click.echo(to_yaml(cluster), nl=False)
    elif output == "json":
        click.echo(to_json(cluster), nl=False)
    else:
        click.echo(to_table(cluster, results), nl=False)
    for problem in cluster.problems:
        click.echo(f"warning: {problem}", err=True)
    for key, pod in cluster.pods.items():
        spec = pod.get("spec") or {}
        if not spec.get("nodeName") and spec.get("schedulerName") not in (None, "", "default-scheduler"):
            click.echo(f"warning: pod {key} is for scheduler {spec['schedulerName']!r}; not scheduled", err=True)
    if output != "table":
        click.echo(summary(results), err=True)
        for result in results:
            if not result.scheduled:
                click.echo(f"  {result.pod}: {result.message()}", err=True)

