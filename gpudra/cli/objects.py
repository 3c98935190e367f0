"""`gpudra apply/get/delete/describe`: kubectl's verbs on a local cluster's store (`gpudra cluster up`)."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

from gpudra.api.dump import dump_yaml_data
from gpudra.api.problems import printable
from gpudra.cli.errors import USAGE, fail, show_error, warn
from gpudra.cli.inputs import gate_warnings, read_documents
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


def _on_the_real_control_plane(cluster, *kubectl_args: str | None) -> None:
    """A cluster on the real API server (`cluster up --api-server kubernetes`) is kubectl's: the verb runs as the
    release's own kubectl with the cluster's kubeconfig (this process becomes it, its exit code the command's), so
    the walkthroughs written for the local cluster run there unchanged."""
    from gpudra.cluster.layout import ClusterSetupError

    try:
        if cluster.load_config().api_server != "kubernetes":
            return
    except ClusterSetupError:
        return
    import os

    from gpudra.kubecluster.controlplane import KubePaths

    paths = KubePaths(cluster)
    kubectl = os.path.join(paths.binary_link, "kubectl")
    if not os.path.exists(kubectl):
        _fail(f"{cluster.path} runs on the real API server, but its kubectl ({kubectl}) is gone: "
              "`gpudra cluster up` it again")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(kubectl, [kubectl, "--kubeconfig", paths.admin_kubeconfig, *[a for a in kubectl_args if a]])


def _flags(flag: str, values: tuple[str, ...] | str | None) -> list[str]:
    import os

    if not values:
        return []
    values = (values,) if isinstance(values, str) else values
    if flag == "-f":  # kubectl reads a symlink to a directory as a file: hand it the directory itself
        values = tuple(os.path.realpath(v) if v != "-" and os.path.isdir(v) else v for v in values)
    return [f"{flag}={value}" for value in values]


def _hold_control_loop(cluster) -> None:
    """Hold the control loop's lock from this command's first write to its end, so the control-plane process
    cannot act on the writes first and the command's own rounds (and `-v` output) show what they caused."""
    from gpudra.cluster.controller import holding

    click.get_current_context().with_resource(holding(cluster))


def _reconcile(cluster, verbose: bool) -> None:
    from gpudra.cluster.controller import reconcile

    reconcile(cluster, (lambda kind, text: click.echo(f"  {text}", err=True)) if verbose else None)


def _kind(word: str):
    from gpudra.cluster.kinds import resolve_kind

    info = resolve_kind(word)
    if info is None:
        _fail(f'the server doesn\'t have a resource type "{word}"')
    return info


def parse_resource_args(args: tuple[str, ...]) -> list[tuple[Any, str | None]]:
    """kubectl's two spellings of what to act on: `KIND [NAME…]` or `KIND/NAME…` (kinds may differ then, and
    `get -o name` prints that form); (kind info, name), name None for every object of the kind."""
    if not args:
        _fail("give KIND [NAME…] or KIND/NAME… (e.g. pods, pod/NAME)")
    if any("/" in arg for arg in args):
        targets: list[tuple[Any, str | None]] = []
        for arg in args:
            kind, sep, name = arg.partition("/")
            if not sep or not kind or not name or "/" in name:
                _fail(f"{arg!r}: arguments in resource/name form must all have a resource type and one name "
                      "(KIND/NAME), as `get -o name` prints them")
            targets.append((_kind(kind), name))
        return targets
    info = _kind(args[0])
    return [(info, name) for name in args[1:]] or [(info, None)]


def _namespace(namespace: str | None) -> str | None:
    """-n as given, checked as the API server checks a namespace (a DNS label): usage error otherwise."""
    from gpudra.api.schema import names

    problems = names.field_problems("--namespace", namespace, names.dns_label, 63) if namespace is not None else []
    if problems:
        _fail("; ".join(problems))
    return namespace


def _identity_problem(doc, namespace: str | None) -> tuple[Any, str | None, str] | str:
    """(kind, namespace, name) of the document, checked as the store will (known kind, its apiVersion, the kind's
    name rule, a DNS-label namespace), or why the store refuses it."""
    from gpudra.cluster.kinds import StoreError, check_api_version, check_identity, kind_info

    try:
        info = kind_info(doc.obj.get("kind") if isinstance(doc.obj, dict) else None)
        check_api_version(info, doc.obj.get("apiVersion") or info.api_version)
        ns = (doc.namespace or namespace or "default") if info.namespaced else None
        meta = doc.metadata
        name = meta.get("name")
        if name is None and isinstance(meta.get("generateName"), str):
            name = meta["generateName"].rstrip("-") + "-x"  # what the store will name it; checked alike
        check_identity(info, ns, name)
    except StoreError as exc:
        return f"{printable(doc.label())}: {exc}"
    return info, ns, doc.name


def _targets_of(documents, namespace: str | None) -> list[tuple[Any, str | None, str]]:
    """(kind, namespace, name) of each document, each checked before anything is deleted: one bad document
    deletes nothing."""
    found = [_identity_problem(doc, namespace) for doc in documents]
    problems = [p for p in found if isinstance(p, str)]
    if problems:
        fail(problems[0], 1, details=[f"error: {p}" for p in problems[1:]])
    return [t for t in found if not isinstance(t, str)]


def _refusals(documents, namespace: str | None, release: str | None) -> dict[int, list[str]]:
    """id(document) → why the API server would refuse it (`gpudra validate`'s errors for the cluster's release,
    a kind or name the store cannot serve): kubectl applies the others and reports these."""
    from gpudra.api.problems import errors
    from gpudra.api.validate import validate_documents
    from gpudra.cli.progress import progress

    by_place = {(d.source, d.index, getattr(d, "item", None)): d for d in documents}
    refused: dict[int, list[str]] = {}
    with progress() as bar:  # thousands of slices take seconds
        problems = errors(validate_documents(documents, release, progress=bar, gates=False))
    for problem in problems:
        doc = by_place.get((problem.source, problem.index, problem.item))
        if doc is not None:
            refused.setdefault(id(doc), []).append(problem.render())
    for doc in documents:
        identity = _identity_problem(doc, namespace) if id(doc) not in refused else None
        if isinstance(identity, str):
            refused[id(doc)] = [identity]
    return refused


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
    from gpudra.cluster.kinds import StoreError, kind_info
    from gpudra.cluster.store import public_view

    cluster = _cluster(directory)
    _on_the_real_control_plane(cluster, "apply", *_flags("-f", paths), *_flags("-n", namespace),
                               *_flags("-o", output))
    namespace = _namespace(namespace)
    documents = read_documents(paths)
    release = cluster.kubernetes_version()
    # what the API server would refuse is reported and the rest applied, as kubectl does (exit 1 then)
    refusals = _refusals(documents, namespace, release)
    errors = [message for doc in documents for message in refusals.get(id(doc), [])]
    not_applied = len(refusals)
    documents = [doc for doc in documents if id(doc) not in refusals]
    # the store drops those fields (the cluster's --features decide which)
    for problem in gate_warnings(documents, release, cluster.feature_gates()) if release else []:
        warn(f"{problem.location()}: {problem.path}: {problem.message}")
    _hold_control_loop(cluster)
    applied = []
    for doc in documents:
        try:
            line = apply_document(cluster.store, doc, namespace)
        except StoreError as exc:  # the API server says no: invalid, immutable, conflict, no such namespace
            errors.append(f"{printable(doc.label())}: {exc}")
            not_applied += 1
            continue
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
    if errors:
        for message in errors[:-1]:
            show_error(message)
        _fail(errors[-1] if not_applied == 1 else f"{errors[-1]}\n{not_applied} objects not applied "
              "(`gpudra validate` explains what the API server refuses)", 1)


@click.command("get")
@click.argument("resources", nargs=-1, required=True, metavar="KIND [NAME…] | KIND/NAME…")
@DIR_OPTION
@NAMESPACE_OPTION
@click.option("-A", "--all-namespaces", is_flag=True, help="List the objects of every namespace (NAMESPACE column).")
@click.option("-o", "--output", type=click.Choice(["table", "wide", "yaml", "json", "name"]), default="table",
              show_default=True, help="table/wide: kubectl's columns; yaml/json: the objects (several as a List); "
                                      "name: KIND.GROUP/NAME, which get, describe and delete take back.")
def get_command(resources: tuple[str, ...], directory: str | None, namespace: str | None,
                all_namespaces: bool, output: str) -> None:
    """List or show objects of KIND (pods, resourceclaims, resourceslices, nodes, deviceclasses, events, …), as
    `kubectl get KIND [NAME…]` or `kubectl get KIND/NAME…`."""
    from gpudra.cluster.printers import table
    from gpudra.cluster.store import StoreError, public_view

    cluster = _cluster(directory)
    _on_the_real_control_plane(cluster, "get", *resources, *_flags("-n", namespace),
                               "-A" if all_namespaces else None, *_flags("-o", None if output == "table" else output))
    namespace = _namespace(namespace)
    targets = parse_resource_args(resources)
    named = [name for _, name in targets if name is not None]
    groups: list[tuple[Any, str | None, list[dict[str, Any]]]] = []  # (kind, namespace listed, objects) in order
    for info, name in targets:
        ns = None if all_namespaces or not info.namespaced else (namespace or "default")
        try:
            if name is None:
                found = cluster.store.list(info.kind, ns)
            else:
                obj = cluster.store.get(info.kind, (ns or namespace or "default") if info.namespaced else None, name)
                if obj is None:
                    _fail(f'{info.plural} "{name}" not found', 1)
                found = [obj]
        except StoreError as exc:
            _fail(str(exc), 1)
        same_kind = next((group for group in groups if group[0] == info), None) if name is not None else None
        if same_kind is not None:  # kubectl prints one table per kind: `get pod/a node/n pod/b`
            same_kind[2].extend(found)
        else:
            groups.append((info, ns, found))
    objects = [public_view(o) for _, _, found in groups for o in found]
    if output in ("json", "yaml"):
        body = objects[0] if len(named) == 1 and len(targets) == 1 else {
            "apiVersion": "v1", "kind": "List", "items": objects, "metadata": {"resourceVersion": ""}}
        click.echo(json.dumps(body, indent=4) if output == "json" else dump_yaml_data(body),
                   nl=output == "json")
        return
    if output == "name":
        for obj in objects:
            click.echo(f"{kind_info_of(obj).resource}/{obj['metadata']['name']}")  # kubectl's kind.group/name
        return
    tables = []
    for info, _ns, found in groups:
        if found:
            tables.append(table(info.kind, [public_view(o) for o in found], wide=output == "wide",
                                with_namespace=all_namespaces and info.namespaced))
    if tables:
        click.echo(printable("\n".join(tables), keep="\n"), nl=False)
    else:
        info, ns = groups[0][0], groups[0][1]
        where = "" if not info.namespaced or ns is None else f" in {ns} namespace"
        click.echo(f"No resources found{where}.", err=True)


def kind_info_of(obj: dict[str, Any]):
    from gpudra.cluster.kinds import kind_info

    return kind_info(str(obj.get("kind", "")))


@click.command("delete")
@click.argument("resources", nargs=-1, metavar="KIND NAME… | KIND/NAME…")
@click.option("-f", "--filename", "paths", multiple=True, metavar="PATH", help="Delete the objects in these files.")
@DIR_OPTION
@NAMESPACE_OPTION
@click.option("-v", "--verbose", is_flag=True, help="Print what the kubelet and controllers did.")
@click.option("-o", "--output", type=click.Choice(["name"]), default=None,
              help="name: KIND.GROUP/NAME of each deleted object (kubectl delete's one format).  [default: "
                   "kubectl's `KIND \"NAME\" deleted` lines]")
def delete_command(resources: tuple[str, ...], paths: tuple[str, ...], directory: str | None,
                   namespace: str | None, verbose: bool, output: str | None) -> None:
    """Delete objects (`KIND NAME…`, `KIND/NAME…` as `get -o name` prints them, or -f FILE); a running pod's
    claims are unprepared and deallocated before it goes."""
    from gpudra.cluster.store import StoreError

    cluster = _cluster(directory)
    _on_the_real_control_plane(cluster, "delete", *resources, *_flags("-f", paths), *_flags("-n", namespace),
                               *_flags("-o", output))
    namespace = _namespace(namespace)
    targets: list[tuple[Any, str | None, str]] = []
    if paths:
        # checked as apply checks them (kind, name, namespace) before anything is deleted
        targets = _targets_of(read_documents(paths), namespace)
        if resources:
            _fail("give KIND NAME…, KIND/NAME… or -f FILE, not both")
    elif resources:
        for info, name in parse_resource_args(resources):
            if name is None:
                _fail(f"give the names of the {info.plural} to delete (KIND NAME… or KIND/NAME…)")
            targets.append((info, (namespace or "default") if info.namespaced else None, name))
    else:
        _fail("give KIND NAME…, KIND/NAME… or -f FILE")
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
    """The garbage collector for workloads: their pods go with them (a Deployment's ReplicaSet and its pods are
    collected by the control loop, gpudra.controllers.deployments)."""
    from gpudra.cluster.store import StoreError

    workloads = {(ns, info.kind, name) for info, ns, name in targets
                 if info.kind in ("StatefulSet", "Job", "DaemonSet")}
    if not workloads:
        return
    for pod in cluster.store.list("Pod"):
        meta = pod["metadata"]
        for ref in meta.get("ownerReferences") or []:
            if (meta.get("namespace"), ref.get("kind"), ref.get("name")) in workloads:
                try:
                    cluster.store.delete("Pod", meta.get("namespace"), meta["name"])
                except StoreError:
                    pass


@click.command("describe")
@click.argument("resources", nargs=-1, required=True, metavar="KIND [NAME…] | KIND/NAME…")
@DIR_OPTION
@NAMESPACE_OPTION
def describe_command(resources: tuple[str, ...], directory: str | None, namespace: str | None) -> None:
    """Show objects in detail with their events (a pending pod: also why, per node, as `gpudra explain` says)."""
    from gpudra.cluster.printers import describe
    from gpudra.cluster.store import StoreError

    cluster = _cluster(directory)
    _on_the_real_control_plane(cluster, "describe", *resources, *_flags("-n", namespace))
    namespace = _namespace(namespace)
    objects = []
    try:
        for info, name in parse_resource_args(resources):
            ns = (namespace or "default") if info.namespaced else None
            if name is None:
                objects.extend(cluster.store.list(info.kind, ns))
                continue
            obj = cluster.store.get(info.kind, ns, name)
            if obj is None:
                _fail(f'{info.plural} "{name}" not found', 1)
            objects.append(obj)
    except StoreError as exc:
        _fail(str(exc), 1)
    text = "\n".join(describe(o, cluster.store.events_for(o), **_pod_context(cluster, o)) for o in objects)
    click.echo(printable(text, keep="\n"), nl=False)


def _pod_context(cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """For a pod: its namespace's claims by name, the kubelet stand-in's record of it (None: not started) and,
    while it is pending, why (explain's per-node summary)."""
    if obj.get("kind") != "Pod":
        return {}
    from gpudra.cluster.kubelet import read_record
    from gpudra.cluster.why import pending_reasons

    namespace = obj["metadata"].get("namespace") or "default"
    claims = {c["metadata"]["name"]: c for c in cluster.store.list("ResourceClaim", namespace)}
    node = (obj.get("spec") or {}).get("nodeName")
    return {"claims": claims, "record": read_record(cluster, node, obj) if node else None,
            "why": pending_reasons(cluster, obj)}
