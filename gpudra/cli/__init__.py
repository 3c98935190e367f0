"""The `gpudra` command line.

Each sub-command lives in its own module under `gpudra.cli` and exposes a click
command (or group) named `command`. Modules are imported lazily so that
`gpudra --help` stays fast and one broken optional dependency (say, NVML) does
not take the whole tool down.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

# sub-command name -> module under gpudra.cli (`module:attribute` when the command is not `command`)
COMMANDS: dict[str, str] = {
    "validate": "validate",
    "allocate": "allocate",
    "demo": "demo",
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
}


class LazyGroup(click.Group):
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


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpudra")
def cli() -> None:
    """Kubernetes DRA for GPUs: validate, allocate, schedule, explain, run a node driver, plan MIG."""


def _prog_name() -> str:
    # Run as a kubectl plugin (`kubectl gpudra …` executes kubectl-gpudra), say so in usage messages.
    return "kubectl gpudra" if os.path.basename(sys.argv[0] or "").startswith("kubectl-gpudra") else "gpudra"


def main() -> None:
    try:
        cli.main(prog_name=_prog_name())
    except KeyboardInterrupt:
        sys.exit(130)
