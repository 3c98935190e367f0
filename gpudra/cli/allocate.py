"""`gpudra allocate`: where would these ResourceClaims land, and would they fit at all?

Reads DeviceClasses, ResourceSlices, ResourceClaims and Nodes, runs the structured
allocator the way kube-scheduler 1.36 does, and prints either the brief report (the
shape of the conformance `expected.yaml` files) or the pending claims with
`status.allocation` filled in.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

import click

from gpudra.allocator.allocator import FILTER_TIMEOUT_S
from gpudra.allocator.report import AllocationReport
from gpudra.api.convert import needs_conversion, to_v1
from gpudra.api.dump import dump_yaml_data
from gpudra.api.load import Document
from gpudra.api.validate import validate_document
from gpudra.cli.errors import NEGATIVE, OK, GpudraError, InputError, NegativeAnswer, UsageError, warn
from gpudra.cli.inputs import read_inputs
from gpudra.cli.options import (cluster_options, features_option, filename_option, kubernetes_version_option,
                                no_validate_option, node_option)
from gpudra.cli.output import output_option, render_table
from gpudra.cli.progress import progress
from gpudra.copying import copy_object
from gpudra.api.objectmeta import key_of

MODES = ("together", "each", "sequential")
NO_NODES = "no nodes to try"
UNALLOCATABLE = "unallocatable on every node"
INPUT_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "Node", "DeviceTaintRule")

def _split_list(values: tuple[str, ...]) -> list[str]:
    items: list[str] = []
    for value in values:
        items.extend(part.strip() for part in value.split(",") if part.strip())
    return items


def _validation_warnings(documents: list[Document], release: str | None = None) -> list[str]:
    """Single-object validation problems, reported but not fatal (upstream allocates anyway)."""
    messages: list[str] = []
    for document in documents:
        try:
            problems = validate_document(document, release)
        except Exception as exc:  # noqa: BLE001 - a validator bug must not block allocation
            messages.append(f"{_label(document)}: could not validate: {exc}")
            continue
        for problem in problems:
            path = f"{problem.path}: " if problem.path else ""
            messages.append(f"{problem.location()}: {path}{problem.message}")
    return messages


def _label(document: Document) -> str:
    obj = document.obj if isinstance(document.obj, dict) else {}
    meta = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    return f"{document.source}:{document.where} ({obj.get('kind', '?')}/{meta.get('name', '')})"


def _select_objects(documents: list[Document]) -> tuple[list[dict[str, Any]], list[str]]:
    objects: list[dict[str, Any]] = []
    notes: list[str] = []
    for document in documents:
        obj = document.obj
        if not isinstance(obj, dict):
            raise InputError(f"{_label(document)}: not a Kubernetes object (a mapping)")
        kind = obj.get("kind")
        if kind in INPUT_KINDS:
            if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
                raise InputError(f"{_label(document)}: metadata.name is required")
            if needs_conversion(obj):
                notes.append(f"{_label(document)}: converted from {obj.get('apiVersion')} to resource.k8s.io/v1")
                obj = to_v1(obj)
            objects.append(obj)
        elif kind == "ResourceClaimTemplate":
            notes.append(f"{_label(document)}: not allocated: a template becomes a claim only for a pod "
                         "(try `gpudra schedule`)")
        elif str(obj.get("apiVersion", "")).startswith("resource.k8s.io/"):
            notes.append(f"{_label(document)}: ignoring kind {kind!r} (allocate reads {', '.join(INPUT_KINDS)})")
    return objects, notes


def _is_allocated(claim: dict[str, Any]) -> bool:
    status = claim.get("status")
    return isinstance(status, dict) and bool(status.get("allocation"))


def _normalise_claim_names(names: list[str]) -> list[str]:
    return [name if "/" in name else f"default/{name}" for name in names]


def chosen_allocations(report: AllocationReport, mode: str, order: list[str] | None = None
                       ) -> dict[str, tuple[str, dict[str, Any]]]:
    """claim key -> (node, status.allocation) the way a scheduler would commit it.

    sequential: the final allocations; together and each: the first node where the claim was allocated,
    nodes in name order (the order in which the scheduler, and so `gpudra explain`, walks them), or in `order`
    (--node's), as sequential mode tries them (`run_allocate`).
    """
    chosen: dict[str, tuple[str, dict[str, Any]]] = {}
    if mode == "sequential":
        nodes_by_claim: dict[str, str] = {}
        for result in report.get("results") or []:
            if result.get("outcome") == "allocated":
                for key in (result.get("allocations") or {}):
                    nodes_by_claim.setdefault(key, result.get("node", ""))
        for key, allocation in (report.get("finalAllocations") or {}).items():
            chosen[key] = (nodes_by_claim.get(key, ""), allocation)
        return chosen
    rank = {name: position for position, name in enumerate(order or [])}
    for result in sorted(report.get("results") or [], key=lambda entry: (
            rank.get(str(entry.get("node", "")), len(rank)), str(entry.get("node", "")))):
        if result.get("outcome") != "allocated":
            continue
        for key, allocation in (result.get("allocations") or {}).items():
            chosen.setdefault(key, (result.get("node", ""), allocation))
    return chosen


def allocated_claims_view(
    claims: list[dict[str, Any]], report: AllocationReport, mode: str, order: list[str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """A `kind: List` of the given pending claims with `status.allocation` set where one was found (`order`:
    --node's, see chosen_allocations)."""
    chosen = chosen_allocations(report, mode, order)
    fits: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    for result in report.get("results") or []:
        for key in result.get("claims") or []:
            if result.get("outcome") == "allocated":
                fits.setdefault(key, []).append(result.get("node", ""))
            elif result.get("outcome") == "error":
                errors.setdefault(key, f"{result.get('node', '')}: {result.get('error', 'error')}")
    items: list[dict[str, Any]] = []
    notes: list[str] = []
    no_nodes = not report.get("results") and not report.get("nodesTried")
    for claim in claims:
        key = key_of(claim)
        item = copy_object(claim)
        if key in chosen:
            node, allocation = chosen[key]
            item.setdefault("status", {})
            if not isinstance(item["status"], dict):
                item["status"] = {}
            item["status"]["allocation"] = allocation
            where = f"node {node}" if node else "a node"
            others = report.get("nodesThatFit", {}).get(key, len(fits.get(key, []))) - 1
            extra = f" (first of {others + 1} nodes that fit)" if mode != "sequential" and others > 0 else ""
            notes.append(f"{key}: allocated on {where}{extra}")
        elif key in errors:
            notes.append(f"{key}: error: {errors[key]}")
        elif no_nodes:
            notes.append(f"{key}: unallocatable: {NO_NODES}")
        elif mode == "together" and len(claims) > 1:
            notes.append(f"{key}: unallocatable: the claims do not fit together on any node (try --mode each)")
        else:
            notes.append(f"{key}: {UNALLOCATABLE}")
        items.append(item)
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}, notes


def render(data: Any, output: str, sort_keys: bool) -> str:
    if output == "json":
        return json.dumps(data, indent=2, sort_keys=sort_keys) + "\n"
    # no `&id001` anchors (results and finalAllocations share objects): the report diffs cleanly against the
    # conformance expected.yaml files
    return dump_yaml_data(data, sort_keys=sort_keys)


def known_node_names(objects: list[dict[str, Any]]) -> list[str]:
    """Nodes the input names: Node objects, and the nodes that ResourceSlices name."""
    from gpudra.allocator.report import default_node_names

    kinds: dict[str, list[dict[str, Any]]] = {"Node": [], "ResourceSlice": []}
    for obj in objects:
        if obj.get("kind") in kinds:
            kinds[obj["kind"]].append(obj)
    names = default_node_names({"Node": [], "ResourceSlice": kinds["ResourceSlice"]})
    return list(dict.fromkeys([*default_node_names({"Node": kinds["Node"], "ResourceSlice": []}), *names]))


def _check_nodes(nodes: list[str] | None, objects: list[dict[str, Any]]) -> None:
    if not nodes:
        return
    known = known_node_names(objects)
    if not known:  # without any node in the input, --node is how nodes are named
        return
    unknown = [name for name in nodes if name not in known]
    if unknown:
        shown = ", ".join(known[:8]) + (f", … ({len(known)} in all)" if len(known) > 8 else "")
        raise UsageError(f"--node {', '.join(unknown)}: no such node in the input (nodes: {shown})")


def run_allocate(
    paths: list[str],
    mode: str,
    nodes: list[str] | None,
    claim_names: list[str] | None,
    feature_text: str,
    brief: bool,
    warn: Callable[[str], None] = lambda message: None,
    allocator_name: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    timeout: float | None = FILTER_TIMEOUT_S,
    *,
    validate: bool = True,
    request_timeout: float | None = None,
    kubernetes_version: str | None = None,
) -> tuple[Any, list[str], bool]:
    """Load, check, allocate. Returns (what to print, notes about the claims for stderr, whether every
    pending claim was allocated).

    Invalid manifests stop here (InvalidInput) unless `validate` is False; then their problems go to
    `warn` as soon as they are known, so that they are shown even when the allocator then fails on the
    same malformed input. Raises the errors of gpudra.cli.errors."""
    from gpudra.allocator import build_report
    from gpudra.cli.inputs import gate_warnings, release_and_features

    version, features = release_and_features(kubernetes_version, feature_text, paths, kubeconfig, context,
                                              request_timeout, allocator_name)
    documents = read_inputs(paths, kubeconfig, context, request_timeout, validate=validate, command="allocate",
                            release=version)
    if not validate:
        for text in _validation_warnings(documents, version):
            warn(f"warning: {text}")
    for problem in gate_warnings(documents, version, features):
        warn(f"warning: {problem.location()}: {problem.path}: {problem.message}")
    objects, notes = _select_objects(documents)
    for text in notes:
        warn(f"note: {text}")
    messages: list[str] = []
    _check_nodes(nodes, objects)

    claims = [obj for obj in objects if obj.get("kind") == "ResourceClaim"]
    pending = [claim for claim in claims if not _is_allocated(claim)]
    if claim_names is not None:
        known = {key_of(claim) for claim in claims}
        missing = [name for name in claim_names if name not in known]
        if missing:
            raise UsageError(f"--claims: no ResourceClaim {', '.join(missing)} in the input")
        allocated_already = [name for name in claim_names if name not in {key_of(c) for c in pending}]
        if allocated_already:
            raise UsageError(f"--claims: {', '.join(allocated_already)} already has status.allocation")
        wanted = set(claim_names)
        pending = [claim for claim in pending if key_of(claim) in wanted]

    order = list(nodes) if nodes else None  # --node's order; else every mode takes the nodes in name order
    if mode == "sequential" and not nodes:
        # as the scheduler walks them and the other modes choose (chosen_allocations); the report's own default
        # is the input's order, the conformance harness's (tests/data/conformance)
        from gpudra.allocator.report import default_node_names, split_objects

        nodes = sorted(default_node_names(split_objects(objects)))
    try:
        with progress() as bar:
            report = build_report(objects, mode, nodes, claim_names, features, timeout=timeout, progress=bar,
                                  summary=not brief)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if not pending:
        warn("note: no pending ResourceClaims in the input: nothing to allocate")
    elif not report.get("results") and not report.get("nodesTried"):
        warn(f"note: {NO_NODES}: the input has no Node objects and no ResourceSlice names a node; pass --node NAME")
    chosen = chosen_allocations(report, mode, order)
    all_fit = all(key_of(claim) in chosen for claim in pending)
    if brief:
        return report, messages, all_fit
    view, claim_notes = allocated_claims_view(pending, report, mode, order)
    messages.extend(claim_notes)
    return view, messages, all_fit


def _explain_hint(view: dict[str, Any], source: str, messages: list[str]) -> None:
    """The allocator says only "unallocatable on every node"; `explain` says which request, selector or device
    is short. (Not for claims that only fail together, or when there is no node: explain would not help.)"""
    for claim in view.get("items") or []:
        if f"{key_of(claim)}: {UNALLOCATABLE}" in messages:
            namespace, _, name = key_of(claim).rpartition("/")
            click.echo(f"hint: `gpudra explain claim/{name} -n {namespace or 'default'}` (same {source}) says why",
                       err=True)
            return


def claims_table(view: dict[str, Any], report_notes: list[str], wide: bool) -> str:
    """CLAIM, NODE, DEVICES per pending claim (`-` where it did not fit); wide adds the RESULT line."""
    notes = {note.split(": ", 1)[0]: note.split(": ", 1)[1] for note in report_notes if ": " in note}
    rows = []
    for claim in view.get("items") or []:
        key = key_of(claim)
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        devices = ",".join(f"{r.get('pool')}/{r.get('device')}" for r in results) or "-"
        note = notes.get(key, "")
        node = note.split("allocated on node ", 1)[1].split(" ", 1)[0] if "allocated on node " in note else "-"
        rows.append([key, node, devices, note] if wide else [key, node, devices])
    headers = ["CLAIM", "NODE", "DEVICES", *(["RESULT"] if wide else [])]
    return render_table(headers, rows)


def report_table(report: dict[str, Any], wide: bool) -> str:
    """--brief as a table: one row per node tried (and per claim in --mode each)."""
    rows = []
    for result in report.get("results") or []:
        allocations = result.get("allocations") or {}
        devices = ",".join(f"{r.get('pool')}/{r.get('device')}" for allocation in allocations.values()
                           for r in ((allocation.get("devices") or {}).get("results") or []))
        detail = result.get("error", "") if result.get("outcome") == "error" else devices or "-"
        row = [result.get("node", ""), ",".join(result.get("claims") or []), result.get("outcome", "")]
        rows.append([*row, detail] if wide else row)
    headers = ["NODE", "CLAIMS", "OUTCOME", *(["DEVICES/ERROR"] if wide else [])]
    return render_table(headers, rows)


@click.command(
    "allocate",
    short_help="Where would these ResourceClaims land? (kube-scheduler's allocator, offline)",
)
@filename_option(dest="files", help="Manifest file or directory (repeatable; '-' reads stdin): DeviceClasses, "
                 "ResourceSlices, ResourceClaims, Nodes. Without -f the cluster of the kubeconfig is read (nothing "
                 "is changed there).")
@cluster_options("Read a live cluster with this kubeconfig (what-if: the cluster is not changed).")
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="sequential",
    show_default=True,
    help="sequential: claim after claim, first fit, committing each allocation (independent claims, as a "
    "cluster's scheduler meets them); together: all pending claims jointly on one node (one pod's claims); "
    "each: every claim alone on every node.",
)
@node_option(dest="node_values", multiple=True, metavar="A,B",
             help="Nodes to try (default: Node objects, else nodes named by slices); a node the input does not "
                   "name is an error.")
@click.option("--claims", "claim_values", multiple=True, metavar="NS/NAME,…", help="Only these pending claims (namespace defaults to 'default').")
@kubernetes_version_option()
@features_option()
@click.option("--allocator", "allocator_name", default=None, metavar="NAME", help="Upstream allocator variant (stable, incubating, experimental); by default chosen from the features as kube-scheduler does. stable visits pools and slices in input order and tries permutations; it must support every enabled feature.")
@click.option("--timeout", type=click.FloatRange(min=0), default=FILTER_TIMEOUT_S, show_default=True, metavar="SECONDS",
              help="Give up on one node's search after this long, reporting \"timed out trying to allocate devices\" "
                   "for that node as kube-scheduler's Filter timeout does (10 s there too). 0: no limit.")
@no_validate_option()
@output_option(pipe_default="yaml", help="table: one row per claim (wide: with the result); yaml/json: the "
               "claims with status.allocation (a List), or with --brief the per-node report.")
@click.option("--brief", is_flag=True, help="Print the per-node report (results[], outcome, allocations) instead of the claims.")
def command(
    files: tuple[str, ...],
    kubeconfig: str | None,
    context: str | None,
    request_timeout: float | None,
    mode: str,
    node_values: tuple[str, ...],
    claim_values: tuple[str, ...],
    kubernetes_version: str | None,
    features: str,
    allocator_name: str | None,
    timeout: float | None,
    validate: bool,
    output: str,
    brief: bool,
) -> None:
    """Allocate devices for ResourceClaims the way kube-scheduler would (1.36, or --kubernetes-version).

    A claim with status.allocation is already allocated (its devices are in use); every
    other claim is pending. Exit 0 when every pending claim was allocated, 1 when some could not be
    (or the manifests are invalid), 2 when the input cannot be read.
    """
    nodes = _split_list(node_values) or None
    claim_names = _normalise_claim_names(_split_list(claim_values)) or None
    warned: list[str] = []

    def note(message: str) -> None:
        warned.append(message)
        if message.startswith("warning: "):
            warn(message.removeprefix("warning: "))
        else:
            click.echo(message, err=True)

    try:
        data, messages, all_fit = run_allocate(list(files), mode, nodes, claim_names, features, brief, note,
                                               allocator_name, kubeconfig, context, timeout or None,  # 0: no limit
                                               validate=validate, request_timeout=request_timeout,
                                               kubernetes_version=kubernetes_version)
    except (UsageError, InputError, NegativeAnswer, SystemExit, BrokenPipeError):
        raise
    except Exception as exc:  # malformed input let through by --no-validate: no traceback for users
        if isinstance(exc, click.ClickException) and not isinstance(exc, GpudraError):
            raise  # click's own (an unreadable file)
        hint = " (see the warnings above)" if any(m.startswith("warning:") for m in warned) else ""
        raise InputError(f"the input is malformed{hint}; the allocator stopped with "
                         f"{type(exc).__name__}: {exc}") from exc
    for message in messages:
        click.echo(message, err=True)
    if not all_fit and not brief:
        _explain_hint(data, "-f" if files else "cluster", messages)
    if output in ("table", "wide"):
        text = report_table(data, output == "wide") if brief else claims_table(data, messages, output == "wide")
        click.echo(text, nl=False)
    else:
        # The brief report sorts keys like the conformance files; claims keep their own field order.
        click.echo(render(data, output, sort_keys=brief), nl=False)
    sys.exit(OK if all_fit else NEGATIVE)
