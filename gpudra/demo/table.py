"""Plain-text tables with multi-line cells, for terminals (no colour, no dependencies)."""

from __future__ import annotations

import textwrap


def wrap_cell(text: str, width: int) -> list[str]:
    """Split a cell on its own newlines, then wrap each line to `width` (long words are broken)."""
    lines: list[str] = []
    for line in str(text).splitlines() or [""]:
        wrapped = textwrap.wrap(line, width=width, break_long_words=True, break_on_hyphens=False,
                                subsequent_indent="  ")
        lines.extend(wrapped or [""])
    return lines


def render_table(headers: list[str], rows: list[list[str]], max_widths: list[int] | None = None) -> str:
    """Columns sized to their content (capped by `max_widths`), rows separated by a blank line
    when any row spans several lines."""
    count = len(headers)
    caps = max_widths or [60] * count
    natural = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            for text_line in str(cell).splitlines() or [""]:
                natural[i] = max(natural[i], len(text_line))
    widths = [max(len(headers[i]), min(natural[i], caps[i])) for i in range(count)]

    wrapped_rows = [[wrap_cell(cell, widths[i]) for i, cell in enumerate(row)] for row in rows]
    multiline = any(len(cell) > 1 for row in wrapped_rows for cell in row)

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(cells)).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    for index, wrapped in enumerate(wrapped_rows):
        height = max(len(cell) for cell in wrapped)
        for k in range(height):
            out.append(line([cell[k] if k < len(cell) else "" for cell in wrapped]))
        if multiline and index < len(wrapped_rows) - 1:
            out.append("")
    return "\n".join(out) + "\n"
