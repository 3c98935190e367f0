"""Refresh test-constraints.txt, the pinned test environment, and run the suite in it.

    python tools/refresh_pins.py            # newest releases within pyproject.toml's ranges, then the suite
    python tools/refresh_pins.py --no-tests # only rewrite the file

What CI and the README's test command install is `pip install '.[test]' -c test-constraints.txt`: pyproject.toml keeps
ranges (what users get), the constraints file pins every package of the test environment, so a patch release on the
registry (a code generator, ruff, mypy, hypothesis, the Helm engine) can't change a test's answer until someone moves
the pins with this command and the suite passes. A plain pip constraints file, not pip-tools or uv: pip alone reads
it, CI needs no other tool, and a frozen fresh venv is exactly the environment the suite ran in.

One package is held back on purpose: grpcio-tools stays at the grpcio floor of pyproject.toml, because the generated
gRPC code (gpudra/kubeletplugin/protos) stamps the generator's version as the oldest grpcio it will import with; generating
with a newer one would break users on the floor (tests/kubeletplugin/test_driver_protos.py checks stamp == floor == pin).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONSTRAINTS = os.path.join(ROOT, "test-constraints.txt")


def grpcio_floor(pyproject: str = os.path.join(ROOT, "pyproject.toml")) -> str:
    with open(pyproject, "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    for dep in deps:
        found = re.fullmatch(r"grpcio>=([0-9.]+)(,.*)?", dep.replace(" ", ""))
        if found:
            return found.group(1)
    raise SystemExit("pyproject.toml names no grpcio>=FLOOR dependency")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-tests", action="store_true", help="rewrite the file without running the suite")
    args = parser.parse_args(argv)
    venv = tempfile.mkdtemp(prefix="gpudra-pins-")
    python = os.path.join(venv, "bin", "python")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", ".[test]", f"grpcio-tools=={grpcio_floor()}"],
                   check=True, cwd=ROOT)
    frozen = subprocess.run([python, "-m", "pip", "freeze", "--exclude", "gpudra"], check=True, cwd=ROOT,
                            capture_output=True, text=True).stdout
    header = (f"# The pinned test environment: `pip install '.[test]' -c test-constraints.txt` (README, .ci/run).\n"
              f"# Written by `python tools/refresh_pins.py` on {datetime.date.today()} with Python "
              f"{sys.version_info.major}.{sys.version_info.minor}; rerun it to move the pins forward.\n")
    with open(CONSTRAINTS, "w", encoding="utf-8") as f:
        f.write(header + frozen)
    print(f"wrote {CONSTRAINTS} ({len(frozen.splitlines())} packages)", file=sys.stderr)
    if args.no_tests:
        return 0
    return subprocess.run([python, "-m", "pytest", "-n", "auto"], check=False, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
