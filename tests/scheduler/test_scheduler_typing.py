"""Issue 31: the scheduler, the workload controllers, the scheduling helpers and the simulator are checked with
mypy's strict flag set (tests/test_lint.py runs mypy over the whole package with pyproject.toml's config), and
no cache is bolted onto another object or silenced with `type: ignore`."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
STRICT_MODULES = {"gpudra.scheduler.*", "gpudra.controllers.*", "gpudra.schedulinghelpers", "gpudra.simulate.*"}
# mypy --strict's flags that a per-module override can set
STRICT_FLAGS = ("disallow_untyped_defs", "disallow_incomplete_defs", "disallow_any_generics", "check_untyped_defs",
                "warn_return_any", "no_implicit_reexport", "strict_equality", "disallow_untyped_calls",
                "disallow_untyped_decorators", "warn_unused_ignores")


def _sources() -> list[Path]:
    package = ROOT / "gpudra"
    return ([*(package / "scheduler").glob("*.py"), *(package / "controllers").glob("*.py"),
             package / "schedulinghelpers.py", *(package / "simulate").glob("*.py")])


def test_the_packages_are_checked_with_every_strict_flag() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    blocks = [block for block in config["tool"]["mypy"]["overrides"]
              if STRICT_MODULES & set(block.get("module") or ())]
    assert len(blocks) == 1, "one override block holds the strict packages"
    [block] = blocks
    assert STRICT_MODULES <= set(block["module"])
    assert {flag: block.get(flag) for flag in STRICT_FLAGS} == dict.fromkeys(STRICT_FLAGS, True)
    assert not block.get("ignore_errors")


def test_no_type_ignore_and_no_attribute_bolted_on() -> None:
    files = _sources() + [ROOT / "gpudra" / "cluster" / "controller.py"]
    assert len(files) > 30
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert "type: ignore" not in text, path
        assert "__dict__" not in text, path  # a cache is a declared field, not an attribute set from outside
