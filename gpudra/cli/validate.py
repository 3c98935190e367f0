"""`gpudra validate -f FILE…`: check manifests against resource.k8s.io/v1 (and the DRA parts of core/apps)."""

from __future__ import annotations

import json
import sys
from collections import Counter

import click

from gpudra.api.dump import dump_json, dump_yaml
from gpudra.api.validate import has_errors, validate_documents
from gpudra.cli.errors import NEGATIVE, OK, USAGE, InputError, UsageError, show_error
from gpudra.cli.options import (cluster_options, features_option, filename_option, kubernetes_version_option,
                                runtime_config_option)
from gpudra.cli.output import output_option, plural, render_problems, report_problems
from gpudra.cli.progress import progress
from gpudra.api.objectmeta import key_of


@click.command("validate")
@filename_option(required=True)
@click.option("--fix", is_flag=True, help="Print the manifests with the mechanical problems repaired.")
@output_option(help="Format of the problem list: table (one `error: FILE:doc N (Kind/name): field: message` "
                    "line each) or yaml/json records; with --fix, of the repaired manifests (yaml unless json).")
@click.option("-q", "--quiet", is_flag=True, help="Print errors only, no warnings or summary.")
@kubernetes_version_option("Validate as this release's API server (1.33-1.36; default 1.36): a field behind a "
                           "feature gate that is off by default there is a warning naming the gate.")
@runtime_config_option()
@features_option()
@cluster_options("With --fix: check the repairs against this cluster's ResourceSlices (read-only).")
def command(paths: tuple[str, ...], fix: bool, output: str, quiet: bool, kubernetes_version: str | None,
            runtime_config: dict[str, bool], features: str, kubeconfig: str | None, context: str | None,
            request_timeout: float | None) -> None:
    """Validate Kubernetes DRA manifests: exit 0 when valid, 1 when there are errors, 2 when input cannot be read.

    Every problem is reported as FILE:doc N (Kind/name): field.path: message. Files that cannot be read are
    reported too (every one of them), and the others are still checked. With --fix, the repairs are checked
    against the ResourceSlices given with the manifests (and, with --kubeconfig/--context, a live cluster's): each
    pending claim is allocated again and reported as allocatable on a node, or with what is still wrong (exit 1).
    """
    from gpudra.api.load import LoadError, LoadErrors, load_paths
    from gpudra.versions import VersionError, parse_version

    from gpudra.allocator.features import Features

    try:
        version = parse_version(kubernetes_version)
    except VersionError as exc:
        raise UsageError(f"--kubernetes-version: {exc}") from None
    try:
        gates = Features.parse(features, version)  # the API server's gates: its CEL environment, the fields it keeps
    except ValueError as exc:
        raise UsageError(f"--features: {exc}") from None
    unreadable: list[LoadError] = []
    try:
        documents = load_paths(list(paths))
    except LoadErrors as exc:
        unreadable, documents = exc.errors, exc.documents
    except LoadError as exc:
        unreadable, documents = [exc], []
    for error in unreadable:
        show_error(str(error))
    cluster = _read_cluster(kubeconfig, context, request_timeout) if fix and (kubeconfig or context) else []
    code = (_fix(documents, output, quiet, cluster, version=version, features=gates) if fix
            else _check(documents, output, quiet, version, len(unreadable), runtime_config, gates))
    sys.exit(USAGE if unreadable else code)


def _read_cluster(kubeconfig: str | None, context: str | None, request_timeout: float | None) -> list[dict]:
    """What a repair is checked against on a live cluster: its nodes, classes, slices and claims (read-only)."""
    from gpudra.kube.reader import CLUSTER_KINDS, ClusterReadError, read_cluster

    kinds = [k for k in CLUSTER_KINDS if k.kind in ("Node", "DeviceClass", "ResourceSlice", "ResourceClaim")]
    try:
        return read_cluster(kubeconfig=kubeconfig, context=context, kinds=kinds, request_timeout=request_timeout)
    except ClusterReadError as exc:
        raise InputError(str(exc)) from None


def _check(documents, output: str, quiet: bool, version: str | None = None, unreadable: int = 0,
           runtime_config: dict[str, bool] | None = None, features=None) -> int:
    if not documents:
        return OK
    with progress() as bar:
        problems = validate_documents(documents, version, progress=bar, runtime_config=runtime_config,
                                      features=features, unserved_is_error=True)
    report_problems(problems, output, _counted(documents), len(documents), quiet, unreadable)
    return NEGATIVE if has_errors(problems) else OK


def _counted(documents) -> str:
    """`6001 objects in 1 file`: a `kind: List` is one document of many objects, each validated on its own."""
    sources = {document.source for document in documents}
    where = "on stdin" if sources == {"<stdin>"} else f"in {plural(len(sources), 'file')}"
    return f"{plural(len(documents), 'object')} {where}"


def _fix(documents, output: str, quiet: bool, cluster: list[dict] | None = None, version: str | None = None,
         features=None) -> int:
    if not documents:
        return OK
    cluster = cluster or []  # a live cluster's objects, when they are read
    from gpudra.fix import fix_documents

    before = _claim_specs(d.obj for d in documents)  # fix_documents may change the objects in place
    result = fix_documents(documents, [o for o in cluster if o.get("kind") == "ResourceSlice"])
    objects = [d.obj for d in result.documents]
    printed = _to_print(objects, quiet)
    sys.stdout.write(dump_json(printed) if output == "json" else dump_yaml(printed))
    remaining = validate_documents(result.documents, version, features=features)
    errors = [p for p in remaining if p.severity == "error"]
    if not quiet:
        for line in result.changes:
            click.echo(f"fixed: {line}", err=True)
        for line in result.cautions:
            click.echo(f"check: {line}", err=True)
        for problem in remaining:
            if problem.severity == "warning" and "feature gate" in problem.message:
                # e.g. the extendedResourceName a repair added, on a release where its gate is off
                click.echo(f"check: {problem.location()}: {problem.path}: {problem.message}", err=True)
    if errors:
        click.echo("cannot fix automatically:", err=True)
        sys.stderr.write(render_problems(errors, "json" if output == "json" else "table", sys.stderr))
        return NEGATIVE
    if not quiet:
        click.echo(f"{len(result.changes)} repair(s); the printed manifests are valid", err=True)
    verdicts = []
    if result.published:  # slices to check against: allocate the result (imported here: it is most of gpudra)
        from gpudra.explain.repairs import check_allocatable

        verdicts = check_allocatable(objects, cluster)
    after = _claim_specs(objects)
    for claim, node, what in verdicts:
        repaired = before.get(claim) != after.get(claim)
        if node:
            click.echo(f"{claim}: {'repaired and ' if repaired else ''}allocatable on {node}", err=True)
        else:
            click.echo(f"{claim}: {'repaired, but still ' if repaired else ''}unallocatable: {what}", err=True)
    return NEGATIVE if any(not node for _, node, _ in verdicts) else OK


# What a cluster publishes about itself (the kubelet its Node, drivers their ResourceSlices): given with manifests,
# they are what the repairs are checked against, not objects to `kubectl apply`.
CLUSTER_STATE_KINDS = ("Node", "ResourceSlice")


def _to_print(objects: list, quiet: bool) -> list:
    """The repaired manifests to print: without the cluster's own objects, unless nothing else was given."""
    kept = [o for o in objects if not (isinstance(o, dict) and o.get("kind") in CLUSTER_STATE_KINDS)]
    if not kept or len(kept) == len(objects):
        return objects
    if not quiet:
        left = Counter(o["kind"] for o in objects if isinstance(o, dict) and o.get("kind") in CLUSTER_STATE_KINDS)
        names = " and ".join(plural(n, kind) for kind, n in sorted(left.items()))
        click.echo(f"not printed: {names}, the cluster's own objects the repairs were checked against "
                   "(the kubelet and the drivers publish them; `kubectl apply` must not create them)", err=True)
    return kept


def _claim_specs(objects) -> dict[str, str]:
    """namespace/name -> the claim's spec as text, to tell the claims a repair changed from the others."""
    specs: dict[str, str] = {}
    for obj in objects:
        if isinstance(obj, dict) and obj.get("kind") == "ResourceClaim":
            key = key_of(obj)
            specs[key] = json.dumps(obj.get("spec"), sort_keys=True, default=str)
    return specs
