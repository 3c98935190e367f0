"""`python tests/support/kill_at.py LABEL:STEP:N [gpudra args...]`: run the gpudra CLI with a kill point installed
first (tests/support/killpoint.py); `... LABEL:STEP:N -c CODE [ARG...]` runs a snippet instead (sys.argv[1:] are
the ARGs). gpudra itself has no such hook."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support.killpoint import install  # noqa: E402


def main() -> None:
    install(sys.argv[1])
    if sys.argv[2:3] == ["-c"]:
        code = sys.argv[3]
        sys.argv = ["-c", *sys.argv[4:]]
        exec(compile(code, "<kill_at -c>", "exec"), {"__name__": "__main__"})
        return
    from gpudra.cli import cli

    cli.main(args=sys.argv[2:], prog_name="gpudra")


if __name__ == "__main__":
    main()
