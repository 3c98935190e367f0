"""`gpudra validate -f FILE…`: check manifests against resource.k8s.io/v1 (and the DRA parts of core/apps)."""

from __future__ import annotations

import json
import sys

import click

from gpudra.api.dump import dump_json, dump_yaml
from gpudra.api.fix import fix_documents
from gpudra.explain.repairs import check_allocatable
from gpudra.api.load import LoadError, load_paths
from gpudra.api.validate import has_errors, validate_documents


def _emit_problems(problems, output: str, stream) -> None:
    if output == "json":
        json.dump([p.to_dict() for p in problems], stream, indent=2, ensure_ascii=False)
        stream.write("\n")
        return
    for problem in problems:
        stream.write(problem.render() + "\n")


@click.command("validate")
@click.option("-f", "--filename", "paths", multiple=True, required=True, metavar="PATH",
              help="Manifest file or directory (recursive *.yaml, *.yml, *.json); '-' reads stdin. Repeatable.")
@click.option("--fix", is_flag=True, help="Print the manifests with the mechanical problems repaired.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Format of the problem list (and, with --fix, of the repaired manifests).")
@click.option("-q", "--quiet", is_flag=True, help="Print errors only, no warnings or summary.")
def command(paths: tuple[str, ...], fix: bool, output: str, quiet: bool) -> None:
    """Validate Kubernetes DRA manifests; exit 0 when valid, 2 when there are errors.

    Every problem is reported as FILE:doc N (Kind/name): field.path: message. With --fix, the repairs are
    checked against the ResourceSlices given with the manifests: each pending claim is allocated again and
    reported as allocatable on a node, or with what is still wrong (exit 1).
    """
    try:
        documents = load_paths(list(paths))
    except LoadError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    try:
        _run(documents, fix, output, quiet, [])
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - a validator bug must still end in a clean message
        click.echo(f"error: internal error while validating ({type(exc).__name__}: {exc}); please report it", err=True)
        sys.exit(2)


def _run(documents, fix: bool, output: str, quiet: bool, cluster: list[dict]) -> None:
    if fix:
        _fix(documents, output, quiet, cluster)
        return
    problems = validate_documents(documents)
    shown = [p for p in problems if p.severity == "error"] if quiet else problems
    errors = sum(p.severity == "error" for p in problems)
    if output == "json":
        _emit_problems(shown, output, sys.stdout)
    else:
        _emit_problems(shown, output, sys.stdout if errors else sys.stderr)
        if not quiet:
            warnings = len(problems) - errors
            summary = f"{len(documents)} document(s): {errors} error(s), {warnings} warning(s)"
            click.echo(summary if errors else f"{summary}; valid", err=True)
    sys.exit(2 if has_errors(problems) else 0)


def _fix(documents, output: str, quiet: bool, cluster: list[dict]) -> None:
    result = fix_documents(documents, [o for o in cluster if o.get("kind") == "ResourceSlice"])
    objects = [d.obj for d in result.documents]
    sys.stdout.write(dump_json(objects) if output == "json" else dump_yaml(objects))
    remaining = validate_documents(result.documents)
    errors = [p for p in remaining if p.severity == "error"]
    if not quiet:
        for line in result.changes:
            click.echo(f"fixed: {line}", err=True)
        for line in result.cautions:
            click.echo(f"check: {line}", err=True)
    if errors:
        click.echo("cannot fix automatically:", err=True)
        _emit_problems(errors, output if output == "json" else "text", sys.stderr)
        sys.exit(2)
    if not quiet:
        click.echo(f"{len(result.changes)} repair(s); the printed manifests are valid", err=True)
    verdicts = check_allocatable(objects, cluster) if result.published else []  # slices to check against
    for claim, node, what in verdicts:
        if node:
            click.echo(f"{claim}: repaired and allocatable on {node}", err=True)
        else:
            click.echo(f"{claim}: repaired, but still unallocatable: {what}", err=True)
    sys.exit(1 if any(not node for _, node, _ in verdicts) else 0)

