"""`gpudra apply/get/delete/describe`: kubectl's verbs on a local cluster's store (`gpudra cluster up`)."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

from gpudra.api.dump import dump_yaml_data
from gpudra.cli.errors import USAGE, fail, show_error, warn
from gpudra.cli.inputs import gate_warnings, read_documents, require_valid
from gpudra.cli.output import render_objects

DIR_OPTION = click.option("--dir", "directory", default=None, metavar="DIR",
                          help="The local cluster's state directory (default: the cluster brought up last).")
NAMESPACE_OPTION = click.option("-n", "--namespace", default=None, help="Namespace (default: default).")


def _fail(message: str, code: int = USAGE) -> NoReturn:
    fail(message, code)


def _cluster(directory: str | None):
    from gpudra.cluster.layout import ClusterSetupError, resolve_dir

    try:
        return resolve_dir(directory)
    except ClusterSetupError as exc:
        _fail(str(exc))


def _hold_control_loop(cluster) -> None:
    """Hold the control loop's lock from this command's first write to its end, so the control-plane process
    cannot act on the writes first and the command's own rounds (and `-v` output) show what they caused."""
    from gpudra.cluster.controller import holding

    click.get_current_context().with_resource(holding(cluster))


def _reconcile(cluster, verbose: bool) -> None:
    from gpudra.cluster.controller import reconcile

    reconcile(cluster, (lambda kind, text: click.echo(f"  {text}", err=True)) if verbose else None)


def _kind(word: str):
    from gpudra.cluster.store import resolve_kind

    info = resolve_kind(word)
    if info is None:
        _fail(f'the server doesn\'t have a resource type "{word}"')
    return info


@click.command("apply")
@click.option("-f", "--filename", "paths", multiple=True, required=True, metavar="PATH",
              help="Manifest file or directory (recursive); '-' reads stdin. Repeatable.")
@DIR_OPTION
@NAMESPACE_OPTION
@click.option("-v", "--verbose", is_flag=True, help="Print what the controllers, scheduler and kubelet did.")
@click.option("-o", "--output", type=click.Choice(["name", "yaml", "json"]), default=None,
              help="name: KIND.GROUP/NAME of each object; yaml/json: the objects as stored (one as itself, several "
                   "as a List).  [default: kubectl's `KIND/NAME created|configured|unchanged` lines]")
def apply_command(paths: tuple[str, ...], directory: str | None, namespace: str | None, verbose: bool,
                  output: str | None) -> None:
    """Create or update objects in the local cluster, then let the control loop act on them."""
    from gpudra.cluster.apply import apply_document
    from gpudra.cluster.store import StoreError, kind_info, public_view

    cluster = _cluster(directory)
    documents = read_documents(paths)
    require_valid(documents, "apply", no_validate=False)  # the API server would refuse them: nothing applied
    release = cluster.kubernetes_version()
    for problem in gate_warnings(documents, release) if release else []:  # the store drops those fields
        warn(f"{problem.location()}: {problem.path}: {problem.message}")
    _hold_control_loop(cluster)
    applied = []
    for doc in documents:
        try:
            line = apply_document(cluster.store, doc, namespace)
        except StoreError as exc:
            _fail(f"{doc.label()}: {exc}")
        reference = line.rsplit(" ", 1)[0]  # `kind.group/name created`
        if output is None:
            click.echo(line)
        elif output == "name":
            click.echo(reference)
        else:  # as the store answered the write, before the control loop acts on it (kubectl prints the reply)
            info = kind_info(doc.kind)
            ns = (doc.namespace or namespace or "default") if info.namespaced else None
            applied.append(public_view(cluster.store.get(info.kind, ns, reference.split("/", 1)[1])))
    if applied and output:
        click.echo(render_objects(applied, output, single=True), nl=False)
    _reconcile(cluster, verbose)


@click.command("get")
@click.argument("kind")
@click.argument("names", nargs=-1)
@DIR_OPTION
@NAMESPACE_OPTION
@click.option("-A", "--all-namespaces", is_flag=True)
@click.option("-o", "--output", type=click.Choice(["table", "wide", "yaml", "json", "name"]), default="table",
              show_default=True)
def get_command(kind: str, names: tuple[str, ...], directory: str | None, namespace: str | None,
                all_namespaces: bool, output: str) -> None:
    """List or show objects of KIND (pods, resourceclaims, resourceslices, nodes, deviceclasses, events, …)."""
    from gpudra.cluster.printers import table
    from gpudra.cluster.store import public_view

    cluster = _cluster(directory)
    info = _kind(kind)
    ns = None if all_namespaces or not info.namespaced else (namespace or "default")
    if names:
        objects = []
        for name in names:
            obj = cluster.store.get(info.kind, ns or namespace or "default", name)
            if obj is None:
                _fail(f'{info.plural} "{name}" not found', 1)
            objects.append(obj)
    else:
        objects = cluster.store.list(info.kind, ns)
    objects = [public_view(o) for o in objects]
    if output == "json":
        body = objects[0] if len(names) == 1 else {"apiVersion": "v1", "kind": "List", "items": objects,
                                                    "metadata": {"resourceVersion": ""}}
        click.echo(json.dumps(body, indent=4))
    elif output == "yaml":
        body = objects[0] if len(names) == 1 else {"apiVersion": "v1", "kind": "List", "items": objects,
                                                    "metadata": {"resourceVersion": ""}}
        click.echo(dump_yaml_data(body), nl=False)
    elif output == "name":
        for obj in objects:
            click.echo(f"{info.resource}/{obj['metadata']['name']}")  # kubectl's kind.group/name, as apply -o name
    elif not objects:
        where = "" if not info.namespaced or ns is None else f" in {ns} namespace"
        click.echo(f"No resources found{where}.", err=True)
    else:
        click.echo(table(info.kind, objects, wide=output == "wide", with_namespace=all_namespaces and info.namespaced),
                   nl=False)


@click.command("delete")
@click.argument("kind", required=False)
@click.argument("names", nargs=-1)
@click.option("-f", "--filename", "paths", multiple=True, metavar="PATH", help="Delete the objects in these files.")
@DIR_OPTION
@NAMESPACE_OPTION
@click.option("-v", "--verbose", is_flag=True, help="Print what the kubelet and controllers did.")
@click.option("-o", "--output", type=click.Choice(["name"]), default=None,
              help="name: KIND.GROUP/NAME of each deleted object (kubectl delete's one format).  [default: "
                   "kubectl's `KIND \"NAME\" deleted` lines]")
def delete_command(kind: str | None, names: tuple[str, ...], paths: tuple[str, ...], directory: str | None,
                   namespace: str | None, verbose: bool, output: str | None) -> None:
    """Delete objects; a running pod's claims are unprepared and deallocated before it goes."""
    from gpudra.cluster.store import StoreError, kind_info

    cluster = _cluster(directory)
    targets: list[tuple[Any, str | None, str]] = []
    if paths:
        documents = read_documents(paths)
        for doc in documents:
            info = kind_info(doc.kind)
            targets.append((info, (doc.namespace or namespace or "default") if info.namespaced else None, doc.name))
    elif kind and names:
        info = _kind(kind)
        targets = [(info, (namespace or "default") if info.namespaced else None, name) for name in names]
    else:
        _fail("give KIND NAME… or -f FILE")
    missing = False
    _hold_control_loop(cluster)
    for info, ns, name in targets:
        try:
            cluster.store.delete(info.kind, ns, name)
            click.echo(f"{info.resource}/{name}" if output == "name" else f'{info.kind.lower()} "{name}" deleted')
        except StoreError as exc:
            show_error(str(exc))  # the CLI contract's `error: …`, as get and describe say it
            missing = True
    _cascade(cluster, targets)
    _reconcile(cluster, verbose)
    if missing:
        sys.exit(1)


def _cascade(cluster, targets) -> None:
    """The garbage collector for workloads: their pods go with them (ReplicaSets of a Deployment included)."""
    from gpudra.cluster.store import StoreError

    workloads = {(ns, info.kind, name) for info, ns, name in targets
                 if info.kind in ("Deployment", "ReplicaSet", "StatefulSet", "Job", "DaemonSet")}
    if not workloads:
        return
    for pod in cluster.store.list("Pod"):
        meta = pod["metadata"]
        for ref in meta.get("ownerReferences") or []:
            owner = (meta.get("namespace"), ref.get("kind"), ref.get("name"))
            deployment = (meta.get("namespace"), "Deployment", ref.get("name", "").rsplit("-", 1)[0])
            if owner in workloads or (ref.get("kind") == "ReplicaSet" and deployment in workloads):
                try:
                    cluster.store.delete("Pod", meta.get("namespace"), meta["name"])
                except StoreError:
                    pass


@click.command("describe")
@click.argument("kind")
@click.argument("names", nargs=-1)
@DIR_OPTION
@NAMESPACE_OPTION
def describe_command(kind: str, names: tuple[str, ...], directory: str | None, namespace: str | None) -> None:
    """Show objects in detail with their events."""
    from gpudra.cluster.printers import describe

    cluster = _cluster(directory)
    info = _kind(kind)
    ns = (namespace or "default") if info.namespaced else None
    objects = [cluster.store.get(info.kind, ns, n) for n in names] if names else cluster.store.list(info.kind, ns)
    if any(o is None for o in objects):
        _fail(f'{info.plural} "{names[objects.index(None)]}" not found', 1)
    click.echo("\n".join(describe(o, cluster.store.events_for(o), **_pod_context(cluster, o)) for o in objects),
               nl=False)


def _pod_context(cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """For a pod: its namespace's claims by name and the kubelet stand-in's record of it (None: not started)."""
    if obj.get("kind") != "Pod":
        return {}
    from gpudra.cluster.kubelet import read_record

    namespace = obj["metadata"].get("namespace") or "default"
    claims = {c["metadata"]["name"]: c for c in cluster.store.list("ResourceClaim", namespace)}
    node = (obj.get("spec") or {}).get("nodeName")
    return {"claims": claims, "record": read_record(cluster, node, obj) if node else None}
