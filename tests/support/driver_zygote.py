"""A process that has imported the driver once and forks a fresh `gpudra driver run` per request.

The crash test restarts the driver hundreds of times; forking from an imported process costs
milliseconds where a new interpreter costs a second of imports. Nothing here creates gRPC
objects or threads before forking, so each child starts its servers from a clean state.

Protocol: one JSON object per line on stdin, one answer per line on stdout.
  {"spawn": [args of `gpudra`], "env": {...}, "stderr": path} -> {"pid": N}
  {"poll": N} -> {"status": None | exit code | -signal}      (without waiting)
  {"wait": N} -> {"status": exit code | -signal}
"""

from __future__ import annotations

import json
import os
import sys

import grpc  # noqa: F401  (imported before forking, as the driver uses it)

import gpudra.gpuplugin.agent  # noqa: F401
from gpudra.cli import cli
from tests.support.killpoint import KILL_ENV, install


def _status(raw: int) -> int:
    return -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def _child(args: list[str], env: dict[str, str], stderr: str) -> None:
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        err = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(err, 2)
        os.environ.update(env)
        install(env.get(KILL_ENV))
        cli.main(args=args, prog_name="gpudra", standalone_mode=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - report and exit: never return into the zygote's loop
        import traceback

        traceback.print_exc()
        code = 1
    os._exit(code)


def main() -> None:
    reaped: dict[int, int] = {}  # a poll that found the child dead answers later waits too
    for line in sys.stdin:
        request = json.loads(line)
        if "spawn" in request:
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(request["spawn"], request.get("env", {}), request["stderr"])
            answer = {"pid": pid}
        elif "poll" in request:
            pid = request["poll"]
            if pid not in reaped:
                done, raw = os.waitpid(pid, os.WNOHANG)
                if done:
                    reaped[pid] = _status(raw)
            answer = {"status": reaped.get(pid)}
        else:
            pid = request["wait"]
            if pid not in reaped:
                reaped[pid] = _status(os.waitpid(pid, 0)[1])
            answer = {"status": reaped.pop(pid)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
