"""`gpudra schedule`: place every pending pod as kube-scheduler would, and print the resulting objects."""

from __future__ import annotations

import sys

import click

from gpudra.allocator.allocator import FILTER_TIMEOUT_S
from gpudra.cli.errors import NEGATIVE, OK, InputError, warn
from gpudra.cli.inputs import (checked_progress, gate_warnings, read_inputs, release_and_features, v1_objects,
                               validated_alongside)
from gpudra.cli.options import (cluster_options, features_option, filename_option, kubernetes_version_option,
                                no_validate_option)
from gpudra.cli.output import output_option
from gpudra.cli.progress import progress
from gpudra.scheduler.policies import POLICIES


@click.command(
    "schedule",
    short_help="Place pods on nodes as kube-scheduler would (claims, templates, DRA, cpu/memory).",
)
@filename_option(help="Manifest file or directory ('-' for stdin); repeatable. Without -f the cluster of the "
                      "kubeconfig is read (read-only: nothing is changed there).")
@cluster_options("Read a live cluster with this kubeconfig (what-if: the cluster is not changed).")
@click.option("--policy", type=click.Choice(POLICIES), default="kube", show_default=True,
              help="Node and device scoring: kube-scheduler's, binpack, spread, or fragmentation (FGD adapted to "
                   "DRA: the fragmentation of the pods' own device shapes, one allocator search per shape and "
                   "node; not simulate's fgd-reserve).")
@output_option(help="A table of placements (wide: with the unschedulable pods' reasons per node), or every "
                    "object after scheduling (yaml stream, json List).")
@click.option("--percentage-of-nodes-to-score", "percentage", type=click.IntRange(0, 100), default=None,
              help="Stop searching after this share of nodes were found feasible (0 = kube-scheduler's adaptive "
                   "default; the policy decides when unset: kube adaptive, others 100).")
@click.option("--filter-timeout", type=click.FloatRange(min=0), default=FILTER_TIMEOUT_S, show_default=True,
              metavar="SECONDS", help="Device search budget per pod over all nodes (kube-scheduler's DRA Filter "
              "timeout; its nodes' Filters run in parallel); a node searched past it reports \"timed out trying "
              "to allocate devices\". 0: no limit.")
@no_validate_option()
@kubernetes_version_option()
@features_option()
def command(paths: tuple[str, ...], kubeconfig: str | None, context: str | None, request_timeout: float | None,
            policy: str, output: str, percentage: int | None, filter_timeout: float, validate: bool,
            kubernetes_version: str | None, features: str) -> None:
    """Apply the manifests (Pods, Deployments, ReplicaSets, StatefulSets, Jobs, DaemonSets, ResourceClaims,
    templates, DeviceClasses, ResourceSlices, Nodes), schedule every pending pod in queue order and print the
    result. Same input, same output: generated names and uids derive from the input.

    Exit 0 when every pending pod was scheduled, 1 when some could not be, 2 when the input cannot be read."""
    from gpudra.scheduler import Scheduler
    from gpudra.controllers import ManagedCluster
    from gpudra.scheduler.render import preemption_lines, summary, to_json, to_table, to_yaml

    version, gates = release_and_features(kubernetes_version, features, paths, kubeconfig, context, request_timeout)
    documents = read_inputs(paths, kubeconfig, context, request_timeout, validate=False, command="schedule")
    with validated_alongside(documents, "schedule", validate, release=version, features=gates) as check:
        warnings = gate_warnings(documents, version, gates)  # before the scheduler fills in fields of the objects
        try:
            cluster = ManagedCluster(v1_objects(documents), gates, version)
            scheduler = Scheduler(cluster, policy=policy, percentage_of_nodes_to_score=percentage,
                                  filter_timeout=filter_timeout or None)
            with progress() as bar:
                report = checked_progress(bar, check)
                total = len(cluster.pending_pods())
                done = iter(range(1, total + 1))

                def scheduled_one(_result: object) -> None:
                    report("scheduling pods", next(done), total)

                results = scheduler.run(on_result=scheduled_one)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        except (AttributeError, TypeError, KeyError) as exc:  # a field of the wrong shape (--no-validate)
            raise InputError(f"malformed input: {type(exc).__name__}: {exc}") from None
    for problem in warnings:
        warn(f"{problem.location()}: {problem.path}: {problem.message}")
    if output == "yaml":
        click.echo(to_yaml(cluster), nl=False)
    elif output == "json":
        click.echo(to_json(cluster), nl=False)
    else:
        click.echo(to_table(cluster, results, wide=output == "wide"), nl=False)
    for cluster_problem in cluster.problems:
        warn(str(cluster_problem))
    for key, pod in cluster.pods.items():
        spec = pod.get("spec") or {}
        if not spec.get("nodeName") and spec.get("schedulerName") not in (None, "", "default-scheduler"):
            warn(f"pod {key} is for scheduler {spec['schedulerName']!r}; not scheduled")
    if output not in ("table", "wide"):
        click.echo(summary(results), err=True)
        for line in preemption_lines(results)[1:]:
            click.echo(line, err=True)
        for result in results:
            if not result.scheduled:
                click.echo(f"  {result.pod}: {result.message()}", err=True)
    sys.exit(NEGATIVE if any(not result.scheduled for result in results) else OK)
