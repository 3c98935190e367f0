"""The node driver's packages are checked by `mypy --strict`'s flags (pyproject.toml; tests/project/test_lint.py runs mypy
with that configuration, so an error there fails the suite). This test keeps the block from being weakened."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVER_PACKAGES = {"gpudra.kubeletplugin.*", "gpudra.gpuplugin.*", "gpudra.computedomain.*", "gpudra.webhook.*"}
# mypy --strict's per-module flags (mypy --help: "--strict ... enables the following flags")
STRICT_FLAGS = ("disallow_untyped_defs", "disallow_incomplete_defs", "disallow_any_generics", "check_untyped_defs",
                "warn_return_any", "no_implicit_reexport", "strict_equality", "disallow_untyped_calls",
                "disallow_untyped_decorators", "warn_unused_ignores")


def test_the_driver_packages_are_checked_strictly() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    blocks = [entry for entry in config["tool"]["mypy"].get("overrides", [])
              if DRIVER_PACKAGES & set(entry["module"] if isinstance(entry["module"], list) else [entry["module"]])]
    covered = {module for entry in blocks for module in entry["module"]} & DRIVER_PACKAGES
    assert covered == DRIVER_PACKAGES
    for entry in blocks:
        assert {flag: entry.get(flag) for flag in STRICT_FLAGS} == dict.fromkeys(STRICT_FLAGS, True), entry["module"]
