"""`gpudra examples`: list the bundled manifests, print one, or write them out as files.

`-o` is the listing's format, as on every other command that prints rows (`gpudra/cli/output.py`); where the files
go is `--dir/-d`, so one letter never means two things across commands (docs/cli.md, "examples").
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from gpudra.cli.errors import InputError, UsageError
from gpudra.cli.output import output_option, render_data, render_table

if TYPE_CHECKING:
    from gpudra.demo.examples import Example


@click.command("examples", short_help="List the bundled example manifests, print one, or write them to a folder.")
@click.argument("name", required=False)
@click.option("-d", "--dir", "directory", default=None, metavar="DIR",
              help="Write the example's files into DIR (made if missing); with --all, each into DIR/NAME.")
@click.option("--all", "every", is_flag=True, help="Every example (with --dir).")
@output_option(help="Format of the listing (without NAME).")
def command(name: str | None, directory: str | None, every: bool, output: str) -> None:
    """Without NAME, list the examples that ship with gpudra. With NAME, print its manifests (YAML files joined by
    `---`) or, with --dir DIR, write its files there (then `gpudra validate -f DIR`). `gpudra examples --all --dir
    examples` writes every example as the documentation's paths expect.
    A file that exists with other content is not overwritten (exit 2, nothing written)."""
    from gpudra.demo.examples import EXAMPLES, UnknownExample, find  # here: `gpudra --help` imports every command

    if every and name:
        raise UsageError("give NAME or --all, not both")
    if every and not directory:
        raise UsageError("--all writes files: give --dir DIR")
    if name is None and not every:
        if directory:
            raise UsageError("--dir needs NAME or --all")
        _list(output)
        return
    if click.get_current_context().get_parameter_source("output") == click.core.ParameterSource.COMMANDLINE:
        raise UsageError("-o formats the listing; with NAME the files are printed as they are")
    try:
        chosen = list(EXAMPLES) if every else [find(str(name))]
    except UnknownExample:
        raise UsageError(f"no example named {name!r} (one of: {', '.join(e.name for e in EXAMPLES)})") from None
    if directory is None:
        _print(chosen[0])
        return
    targets = {example.name: os.path.join(directory, example.name) if every else directory for example in chosen}
    _write(chosen, targets)


def _list(output: str) -> None:
    from gpudra.demo.examples import EXAMPLES, files

    rows = [(example.name, ", ".join(f.name for f in files(example)), example.description) for example in EXAMPLES]
    if output in ("yaml", "json"):
        click.echo(render_data([{"name": n, "files": f.split(", "), "description": d} for n, f, d in rows], output),
                   nl=False)
    elif output == "wide":
        click.echo(render_table(("NAME", "FILES", "DESCRIPTION"), rows), nl=False)
    else:
        click.echo(render_table(("NAME", "FILES", "DESCRIPTION"), [(n, len(f.split(", ")), d) for n, f, d in rows]),
                   nl=False)


def _print(example: Example) -> None:
    from gpudra.demo.examples import files

    found = files(example)
    if len(found) > 1 and not all(f.name.endswith(".yaml") for f in found):
        raise UsageError(f"{example.name} has {len(found)} files that do not join into one stream: "
                         f"write them with --dir DIR")
    click.echo("---\n".join(f"# {f.name}\n{f.text}" if len(found) > 1 else f.text for f in found), nl=False)


def _write(chosen: list[Example], targets: dict[str, str]) -> None:
    from gpudra.demo.examples import files

    plan = [(os.path.join(targets[example.name], f.name), f.text) for example in chosen for f in files(example)]
    clashes = []
    for path, text in plan:
        if os.path.lexists(path):
            try:
                with open(path, encoding="utf-8") as existing:
                    same = existing.read() == text
            except (OSError, UnicodeDecodeError):
                same = False
            if not same:
                clashes.append(path)
    if clashes:
        raise InputError(f"{clashes[0]}: exists with other content; nothing written (remove it, or choose another "
                         f"--dir)", details=[f"error: {path}: exists with other content" for path in clashes[1:]])
    for path, text in plan:
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            if not os.path.lexists(path):
                with open(path, "x", encoding="utf-8") as out:
                    out.write(text)
        except OSError as exc:
            raise InputError(f"{path}: {exc.strerror or exc}") from None
        click.echo(path)
