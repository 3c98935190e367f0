"""ruff and mypy, configured in pyproject.toml, run with the suite (and so in CI): both are in the test extra.

mypy checks the CLI spine strictly and every other module for the errors it reports by default; the modules
listed in pyproject.toml's ignore list predate it (the list may only shrink, and the errors in it are counted)."""

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


def _ignored_modules(config: dict) -> list[str]:
    overrides = config["tool"]["mypy"]["overrides"]
    return next(entry["module"] for entry in overrides if entry.get("ignore_errors"))


def test_mypy_finds_nothing_and_the_ignored_modules_no_more_than_recorded(tmp_path: Path) -> None:
    """One mypy run with the ignore list switched off: no error outside the listed modules (what plain `mypy`
    checks), and in them at most the count recorded in pyproject.toml, so the list's debt can only shrink."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    config = tomllib.loads(text)
    assert text.count("\nignore_errors = true\n") == 1
    checked = tmp_path / "pyproject.toml"
    checked.write_text(text.replace("\nignore_errors = true\n", "\nignore_errors = false\n"), encoding="utf-8")
    result = _run("mypy", "--config-file", str(checked),
                  "--cache-dir", os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpudra-mypy-cache"))
    assert "No module named mypy" not in result.stderr, "pip install '.[test]' installs mypy"
    assert result.returncode in (0, 1) and "error: " not in result.stderr, result.stdout + result.stderr
    ignored = set(_ignored_modules(config))
    in_ignored, elsewhere = [], []
    for line in result.stdout.splitlines():
        path, _, rest = line.partition(":")
        if ": error: " not in rest:
            continue
        module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        (in_ignored if module in ignored else elsewhere).append(line)
    assert not elsewhere, "\n".join(elsewhere)
    recorded = config["tool"]["gpudra"]["lint"]["mypy-errors-in-ignored-modules"]
    assert len(in_ignored) <= recorded, (
        f"{len(in_ignored)} mypy errors in the ignored modules, more than the {recorded} recorded:\n"
        + "\n".join(in_ignored))


def test_the_mypy_ignore_list_names_only_existing_modules() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for module in _ignored_modules(config):
        path = ROOT / Path(*module.split("."))
        assert path.with_suffix(".py").exists() or (path / "__init__.py").exists(), module
