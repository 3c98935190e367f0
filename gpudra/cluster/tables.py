"""kubectl's tabwriter layout for the local cluster's printers (`get`, `describe`)."""

from __future__ import annotations


def render_table(headers: list[str], rows: list[list[str]]) -> str:
    """kubectl's tabwriter layout: columns padded to their widest cell, three spaces apart, no rules."""
    widths = [max([len(h)] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]
    lines = ["   ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [headers] + rows]
    return "\n".join(lines) + "\n"
