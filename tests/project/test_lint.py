"""ruff and mypy, configured in pyproject.toml, run with the suite (and so in CI): both are in the test extra.

mypy checks the CLI spine strictly and every other module for the errors it reports by default; no module is
exempt."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          check=False, env={**os.environ, "NO_COLOR": "1"})


def test_ruff_finds_nothing() -> None:
    result = _run("ruff", "check", "--no-cache", ".")
    assert "No module named ruff" not in result.stderr, "pip install '.[test]' installs ruff"
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing() -> None:
    # one cache per checkout: two trees sharing one would read each other's module states
    tag = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    result = _run("mypy", "--cache-dir", os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gpudra-mypy-cache-{tag}"))
    assert "No module named mypy" not in result.stderr, "pip install '.[test]' installs mypy"
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_module_is_exempt_from_mypy() -> None:
    """The ignore list of modules older than the check is gone: every module is checked, and stays checked."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    overrides = config["tool"]["mypy"].get("overrides", [])
    exempt = [entry["module"] for entry in overrides if entry.get("ignore_errors")]
    assert not exempt, f"modules exempt from mypy: {exempt}"
    assert not config["tool"]["mypy"].get("ignore_errors"), "mypy's ignore_errors is on for everything"
