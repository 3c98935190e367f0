"""The `gpudra` command line.

Each sub-command lives in its own module under `gpudra.cli` and exposes a click
command (or group) named `command`. Modules are imported lazily so that
`gpudra --help` stays fast and one broken optional dependency (say, NVML) does
not take the whole tool down.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import shutil
import sys
import threading
from typing import Any, Callable

import click

from gpudra.cli.errors import (
    USAGE,
    GpudraError,
    exit_quietly_on_broken_pipe,
    paint,
    report_internal_error,
)

# sub-command name -> module under gpudra.cli (`module:attribute` when the command is not `command`)
COMMANDS: dict[str, str] = {
    "validate": "validate",
    "allocate": "allocate",
    "demo": "demo",
    "examples": "examples",
    "schedule": "schedule",
    "explain": "explain",
    "discover": "discover",
    "driver": "driver",
    "cdi": "cdi",
    "mig": "mig",
    "cluster": "cluster",
    "apply": "objects:apply_command",
    "get": "objects:get_command",
    "delete": "objects:delete_command",
    "describe": "objects:describe_command",
    "simulate": "simulate",
    "kube": "kube",
}


class LazyGroup(click.Group):
    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        """click's main with gpudra's error contract (gpudra.cli.errors) in place of click's own."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        return run_with_error_contract(
            lambda: super(LazyGroup, self).main(args, prog_name, complete_var, standalone_mode=False, **extra))

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        global _invoked
        name, command, rest = super().resolve_command(ctx, args)
        _invoked = name
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        from gpudra.api.load import thaw_input

        threshold = gc.get_threshold()
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # before click turns it into exit 1, which here means "the answer is no"
            exit_quietly_on_broken_pipe()
        finally:  # what gpudra.cli.inputs.read_documents changed, for a command run in-process (as in tests)
            thaw_input()
            gc.set_threshold(*threshold)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if self._load(name) is not None)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return self._load(name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        module_name, _, attribute = (COMMANDS.get(name) or "").partition(":")
        if not module_name:
            return None
        try:
            module = importlib.import_module(f"gpudra.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gpudra.cli.{module_name}":
                return None  # command not built yet
            raise
        return getattr(module, attribute or "command", None)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"],
                                              # help wraps to the terminal, not to 80 columns
                                              "max_content_width": shutil.get_terminal_size().columns})
@click.version_option(package_name="gpudra")
def cli() -> None:
    """Kubernetes DRA for GPUs: validate, allocate, schedule, explain, run a node driver, plan MIG."""


def _prog_name() -> str:
    # Run as a kubectl plugin (`kubectl gpudra …` executes kubectl-gpudra), say so in usage messages.
    return "kubectl gpudra" if os.path.basename(sys.argv[0] or "").startswith("kubectl-gpudra") else "gpudra"


def run_with_error_contract(invoke: Callable[[], Any]) -> Any:
    """Run a command: user errors as `error: …` with their exit code, click's usage errors the same way
    (exit 2), a closed pipe quietly, and a bug as one line instead of a traceback."""
    try:
        result = invoke()
    except click.exceptions.Exit as exc:
        _flush_stdout()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(130)
    except GpudraError as exc:  # any package's user-facing error (gpudra.errors)
        _flush_stdout()
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:  # bare `gpudra` (or `gpudra driver`): help, as kubectl
        click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        _flush_stdout()
        sys.exit(0)
    except click.UsageError as exc:
        _show_usage_error(exc)
        sys.exit(USAGE)
    except click.ClickException as exc:  # click.FileError and friends: unreadable input
        _flush_stdout()
        click.echo(f"{paint('error:', sys.stderr, fg='red', bold=True)} {exc.format_message()}", err=True)
        sys.exit(exc.exit_code if exc.exit_code in (1, 2) else USAGE)
    except BrokenPipeError:
        exit_quietly_on_broken_pipe()
    except KeyboardInterrupt:
        sys.exit(130)
    except SystemExit:
        _flush_stdout()
        raise
    except Exception as exc:  # noqa: BLE001 - a bug must still end in one clean line
        report_internal_error(exc)
    _flush_stdout()
    sys.exit(result if isinstance(result, int) else 0)


def _flush_stdout() -> None:
    # Output still buffered when the reader has gone away would raise at interpreter exit, with a
    # traceback; flushing here turns it into the quiet exit.
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        exit_quietly_on_broken_pipe()
    except (ValueError, OSError):
        pass


def _show_usage_error(exc: click.UsageError) -> None:
    if exc.ctx is not None:
        click.echo(exc.ctx.get_usage(), err=True)
        if exc.ctx.command.get_help_option(exc.ctx) is not None:
            click.echo(f"Try '{exc.ctx.command_path} {exc.ctx.help_option_names[0]}' for help.", err=True)
    click.echo(f"{paint('error:', sys.stderr, fg='red', bold=True)} {exc.format_message()}", err=True)


# Commands that read manifests and print an answer, and write no file: when one of them ends, the process can skip
# the interpreter's teardown, which frees every object one by one (about a second after reading 2,000
# ResourceSlices, a fifth of `explain`'s time). Exit handlers still run; open files of these commands are none.
_QUICK_EXIT_COMMANDS = frozenset({"validate", "allocate", "schedule", "explain"})
_invoked: str | None = None  # the sub-command LazyGroup.invoke ran


def _quick_exit(code: Any) -> None:
    """os._exit(code) after what a normal exit would do that matters (buffers flushed, atexit handlers run), for
    the commands above, on the main thread alone; otherwise nothing (the caller exits normally)."""
    if _invoked not in _QUICK_EXIT_COMMANDS or threading.active_count() > 1:
        return
    if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
        return  # sys.exit("message") prints the message: leave that to the interpreter
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # a closed or broken stream: the normal exit path reports it
    atexit._run_exitfuncs()
    os._exit(code or 0)


def main() -> None:
    if sys.stdout is None:  # started with stdout closed (`>&-`): Python leaves no stream to print the answer on
        print("error: standard output is closed: nothing could be printed (redirect it to /dev/null to discard "
              "the output)", file=sys.stderr)
        sys.exit(USAGE)
    try:
        cli.main(prog_name=_prog_name())
    except SystemExit as done:
        _quick_exit(done.code)
        raise
