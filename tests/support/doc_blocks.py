"""Commands shown in the README and docs/, read from their ```sh blocks (the walkthroughs run them)."""

from __future__ import annotations

import re
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]  # tests/support/ -> the checkout


def sh_block(path: Path, heading: str) -> list[str]:
    """The commands of the first ```sh block under `heading` in the Markdown file at `path`."""
    text = path.read_text(encoding="utf-8")
    section = text.split(f"\n{heading}", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def readme_commands() -> list[str]:
    """docs/local-cluster.md's walkthrough (also run on the real control plane by tests/oracles/test_kube_cluster.py)."""
    return sh_block(ROOT / "docs" / "local-cluster.md", "## Walkthrough")


def front_door_commands() -> list[str]:
    """The README's short local-cluster example."""
    return sh_block(ROOT / "README.md", "### 3. Run a local cluster")


def computedomain_commands() -> list[str]:
    """docs/driver.md's ComputeDomain walkthrough (also run on the real control plane)."""
    return sh_block(ROOT / "docs" / "driver.md", "## ComputeDomains on the local cluster")
