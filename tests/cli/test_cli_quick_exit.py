"""The answer-only commands end with os._exit after flushing and running exit handlers (gpudra.cli._quick_exit):
the interpreter's teardown of a big input costs about a second. Everything else exits normally."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

import gpudra.cli as cli_module

EXAMPLE = "examples/cluster"


class Exited(Exception):
    def __init__(self, code: int):
        self.code = code


@pytest.fixture
def exits(monkeypatch):
    """os._exit and atexit._run_exitfuncs recorded instead of ending the test process."""
    calls: list[str] = []

    def fake_exit(code: int) -> None:
        calls.append(f"exit {code}")
        raise Exited(code)

    monkeypatch.setattr(cli_module.os, "_exit", fake_exit)
    monkeypatch.setattr(cli_module.atexit, "_run_exitfuncs", lambda: calls.append("atexit"))
    return calls


def run_main(monkeypatch, args: list[str]) -> int | None:
    monkeypatch.setattr(sys, "argv", ["gpudra", *args])
    try:
        cli_module.main()
    except Exited as done:
        return done.code
    except SystemExit as done:
        return None if done.code is None else -1000 - int(done.code)  # a normal exit, told apart
    return None


@pytest.mark.parametrize("args, code", [(["validate", "-q", "-f", EXAMPLE], 0),
                                        (["validate", "-q", "-f", "examples/article"], 1),
                                        (["validate", "-q", "-f", "tests/data/does-not-exist.yaml"], 2)])
def test_answer_commands_exit_quickly_with_their_code_after_exit_handlers(monkeypatch, exits, args, code):
    # the process is alone, as a command's is: a thread another test of this worker left running would make the
    # command exit normally (the other test below checks that rule)
    monkeypatch.setattr(cli_module.threading, "active_count", lambda: 1)
    assert run_main(monkeypatch, args) == code
    assert exits == ["atexit", f"exit {code}"]


def test_other_commands_and_other_threads_exit_normally(monkeypatch, exits):
    assert run_main(monkeypatch, ["mig", "profiles", "-o", "json"]) == -1000
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        assert run_main(monkeypatch, ["validate", "-q", "-f", EXAMPLE]) == -1000
    finally:
        stop.set()
        worker.join()
    assert exits == []


def test_nothing_printed_is_lost():
    """Through a pipe, every byte of a big answer arrives and the exit code is the command's."""
    args = ["validate", "-f", "examples/article", "-o", "json"]
    done = subprocess.run([sys.executable, "-m", "gpudra", *args], capture_output=True, text=True)
    full = subprocess.run([sys.executable, "-c", "import sys, gpudra.cli as c; c._QUICK_EXIT_COMMANDS = frozenset();"
                           f" sys.argv = ['gpudra', *{args!r}]; c.main()"], capture_output=True, text=True)
    assert done.returncode == 1 and len(done.stdout) > 1000
    assert (done.returncode, done.stdout, done.stderr) == (full.returncode, full.stdout, full.stderr)
