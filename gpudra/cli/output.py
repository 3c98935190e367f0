"""`-o table|wide|yaml|json` for every command that prints objects or rows, and how each is written.

Like kubectl: a human table by default on a terminal; `wide` adds columns; `yaml` and `json` print the
objects themselves, several objects in JSON as a `v1 List` with `items` (`kubectl get -o json`). When
stdout is not a terminal a command may choose another default (`allocate` prints YAML into a pipe, so
that `gpudra allocate … | kubectl apply -f -` keeps working).
"""

from __future__ import annotations

import json
import shutil
import sys
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Sequence

import click

from gpudra.api.dump import dump_yaml, dump_yaml_one

if TYPE_CHECKING:
    from gpudra.api.problems import Problem

FORMATS = ("table", "wide", "yaml", "json")
# Earlier spellings still accepted (and not shown in --help): explain's and validate's "text".
ALIASES = {"text": "table"}


class OutputFormat(click.Choice):  # type: ignore[type-arg]  # click.Choice is generic from click 8.2 on
    """click.Choice that also accepts the old aliases and normalises them."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.lower() in ALIASES and ALIASES[value.lower()] in self.choices:
            value = ALIASES[value.lower()]
        return super().convert(value, param, ctx)


def output_option(formats: Sequence[str] = FORMATS, pipe_default: str | None = None,
                  help: str | None = None) -> Callable[[Any], Any]:
    """The `-o/--output` option. The default is `table` on a terminal and `pipe_default` (when given)
    when stdout is a pipe or a file."""
    text = help or "Output format."
    if pipe_default and pipe_default != "table":
        text += f"  [default: table on a terminal, {pipe_default} otherwise]"
    else:
        text += "  [default: table]"
    return click.option("-o", "--output", "output", type=OutputFormat(list(formats)), default=None,
                        callback=lambda ctx, param, value: resolve_format(value, pipe_default),
                        help=text)


def stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (ValueError, AttributeError):
        return False


def resolve_format(value: str | None, pipe_default: str | None = None) -> str:
    if value:
        return value
    if pipe_default and not stdout_is_terminal():
        return pipe_default
    return "table"


def as_list(objects: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Several objects as kubectl prints them: a v1 List."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(objects)}


def render_objects(objects: Sequence[dict[str, Any]], output: str, single: bool = False) -> str:
    """YAML or JSON of the objects: one object as itself when `single`, else a List (JSON) or a
    `---`-separated stream (YAML, which `kubectl apply -f -` and `gpudra … -f -` read back)."""
    if output == "json":
        body: Any = objects[0] if single and len(objects) == 1 else as_list(objects)
        return json.dumps(body, indent=2, ensure_ascii=False) + "\n"
    if output == "yaml":
        if single and len(objects) == 1:
            return dump_yaml_one(objects[0])
        return dump_yaml(objects)
    raise ValueError(f"render_objects: {output!r} is not yaml or json")


def render_data(data: Any, output: str) -> str:
    """Any JSON-shaped value (a report, a problem list) as YAML or JSON."""
    if output == "json":
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return dump_yaml_one(data)


def terminal_width(default: int = 120) -> int:
    return shutil.get_terminal_size((default, 24)).columns


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], wrap_last: bool = True) -> str:
    """kubectl's plain table: upper-case headers, columns three spaces apart, no borders.

    On a terminal the last column wraps to the terminal's width (messages can be long); into a pipe
    nothing wraps, so that `grep` and `awk` see one row per line.
    """
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in cells:
        for column, cell in enumerate(row[:-1]):
            widths[column] = max(widths[column], len(cell))
    indent = sum(widths[:-1]) + 3 * (len(headers) - 1)
    room = terminal_width() - indent if wrap_last and stdout_is_terminal() else 0
    lines = []
    for row in [list(headers), *cells]:
        head = "".join(cell.ljust(widths[column] + 3) for column, cell in enumerate(row[:-1]))
        last = row[-1] if row else ""
        if room >= 20 and len(last) > room:
            import textwrap

            pieces = textwrap.wrap(last, room) or [""]
            lines.append((head + pieces[0]).rstrip())
            lines.extend((" " * indent + piece).rstrip() for piece in pieces[1:])
        else:
            lines.append((head + last).rstrip())
    return "\n".join(lines) + "\n"


def plural(count: int, noun: str) -> str:
    """`1 object`, `2 objects`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def problem_line(problem: Problem, stream: IO[str]) -> str:
    """`error: FILE:doc N (Kind/name): field: message` (or `warning: …`), with the suggested fragment."""
    from gpudra.api.problems import printable
    from gpudra.cli.errors import paint

    colour = "red" if problem.severity == "error" else "yellow"
    field = f": {problem.path}" if problem.path else ""
    text = f"{paint(problem.severity + ':', stream, fg=colour, bold=True)} " \
           + printable(f"{problem.location()}{field}: {problem.message}")  # input's ESC/BEL never printed raw
    if problem.fix:
        text += "\n" + "\n".join("    " + line for line in problem.fix.rstrip("\n").splitlines())
    return text


def render_problems(problems: Sequence[Problem], output: str, stream: IO[str]) -> str:
    """table/wide: one `error: …` line each (coloured when `stream` is a terminal); yaml/json: the records."""
    if output in ("json", "yaml"):
        return render_data([problem.to_dict() for problem in problems], output)
    return "".join(problem_line(problem, stream) + "\n" for problem in problems)


def problem_summary(what: str, count: int, errors: int, warnings: int, unreadable: int = 0) -> str:
    """`5 objects in 2 files are valid`, or `5 objects in 2 files: 3 errors, 1 warning; 1 file not read`;
    `what` is the counted phrase and `count` its number (for the verb)."""
    if not errors and not unreadable:
        return f"{what} {'is' if count == 1 else 'are'} valid" + \
            (f" ({plural(warnings, 'warning')})" if warnings else "")
    text = f"{what}: {plural(errors, 'error')}, {plural(warnings, 'warning')}"
    return text + (f"; {plural(unreadable, 'file')} not read" if unreadable else "")


def report_problems(problems: Sequence[Problem], output: str, what: str, count: int, quiet: bool = False,
                    unreadable: int = 0) -> bool:
    """What every validating command (`validate`, `mig validate`, `cdi validate`) prints: the problems (errors
    only when `quiet`) on stdout when there are errors, else on stderr (yaml/json: on stdout, always), and in a
    table the summary on stderr. True when a problem is an error."""
    errors = sum(problem.severity == "error" for problem in problems)
    shown = [problem for problem in problems if problem.severity == "error"] if quiet else list(problems)
    stream = sys.stdout if errors or output in ("json", "yaml") else sys.stderr
    stream.write(render_problems(shown, output, stream))
    if output not in ("json", "yaml") and not quiet:
        click.echo(problem_summary(what, count, errors, len(problems) - errors, unreadable), err=True)
    return bool(errors)


def echo_experiments(results: Sequence[dict[str, Any]], output: str, summarize: Callable[[Any], Any],
                     to_csv: Callable[[Any], str], table: Callable[..., str]) -> None:
    """A simulation's results: one JSON line per experiment, YAML, or their summary (`summarize`) as CSV or a
    table (`table(summary, wide=…)`)."""
    if output == "json":
        for result in results:
            click.echo(json.dumps(result, separators=(",", ":")))
    elif output == "yaml":
        click.echo(dump_yaml(list(results)), nl=False)
    elif output == "csv":
        click.echo(to_csv(summarize(results)), nl=False)
    else:
        click.echo(table(summarize(results), wide=output == "wide"))

