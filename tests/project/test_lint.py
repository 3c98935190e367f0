"""ruff and mypy, configured in pyproject.toml, run with the suite (and so in CI): both are in the test extra.

mypy checks the core's pure packages, the cluster, discovery, MIG and CDI packages and the CLI spine strictly and
every other module for the errors it reports by default; no module is exempt."""

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


# every strict flag mypy accepts per module (`--strict` is global only; warn_redundant_casts and
# warn_unused_configs, its other two, are global-only options)
STRICT_FLAGS = ("disallow_untyped_defs", "disallow_incomplete_defs", "disallow_untyped_calls",
                "disallow_untyped_decorators", "disallow_any_generics", "disallow_subclassing_any", "check_untyped_defs",
                "warn_return_any", "warn_unused_ignores", "no_implicit_reexport", "strict_equality", "extra_checks")
# the packages held to them, and the top-level modules they import
STRICT_MODULES = ("gpudra.allocator.*", "gpudra.api.*", "gpudra.cel.*", "gpudra.copying", "gpudra.device_config", "gpudra.errors", "gpudra.gostrconv",
                  "gpudra.plain", "gpudra.quantity", "gpudra.resourcelimits", "gpudra.semver", "gpudra.versions",
                  "gpudra.vocabulary",
                  # the local cluster, the real-control-plane cluster, the live reader, discovery, MIG and CDI
                  "gpudra.cluster.*", "gpudra.kubecluster.*", "gpudra.kube.*", "gpudra.discovery.*", "gpudra.mig.*",
                  "gpudra.cdi.*")


def test_the_core_packages_stay_strict() -> None:
    """An override that names the module with every strict flag on, and none (for it or a module inside it) that
    turns one off again."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    overrides = config["tool"]["mypy"].get("overrides", [])
    for module in STRICT_MODULES:
        naming = [entry for entry in overrides
                  if module in ([entry["module"]] if isinstance(entry["module"], str) else entry["module"])]
        assert any(all(entry.get(flag) is True for flag in STRICT_FLAGS) for entry in naming), (
            f"{module}: no mypy override with all of {STRICT_FLAGS}")
        package = module.removesuffix(".*")
        within = [entry for entry in overrides
                  if any(name == package or name.startswith(package + ".")
                         for name in ([entry["module"]] if isinstance(entry["module"], str) else entry["module"]))]
        weakened = [flag for entry in within for flag in STRICT_FLAGS if entry.get(flag) is False]
        assert not weakened, f"{module}: strict flags turned off again: {weakened}"
