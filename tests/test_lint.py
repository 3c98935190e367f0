"""ruff and mypy, configured in pyproject.toml, run with the suite (and so in CI): both are in the test extra.

mypy checks the CLI spine strictly and every other module for the errors it reports by default; the modules
listed in pyproject.toml's ignore list predate it (the list may only shrink)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          check=False, env={**os.environ, "NO_COLOR": "1"})


def test_ruff_finds_nothing() -> None:
    result = _run("ruff", "check", "--no-cache", ".")
    assert "No module named ruff" not in result.stderr, "pip install '.[test]' installs ruff"
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing() -> None:
    result = _run("mypy", "--cache-dir", os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpudra-mypy-cache"))
    assert "No module named mypy" not in result.stderr, "pip install '.[test]' installs mypy"
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_mypy_ignore_list_names_only_existing_modules() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    overrides = config["tool"]["mypy"]["overrides"]
    ignored = next(entry["module"] for entry in overrides if entry.get("ignore_errors"))
    for module in ignored:
        path = ROOT / Path(*module.split("."))
        assert path.with_suffix(".py").exists() or (path / "__init__.py").exists(), module
