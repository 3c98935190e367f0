"""A problem found in a manifest, located the way users read it: file, document, object, field."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gpudra.errors import printable as printable  # re-exported: its home is below gpudra.api

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    source: str
    index: int | None  # 1-based document; None: the file is not a Kubernetes manifest (a CDI spec, a mig-parted config)
    kind: str
    name: str
    path: str
    message: str
    severity: Severity = "error"
    # An optional corrected fragment ("write this instead"), shown under the message.
    fix: str | None = field(default=None, compare=False)
    item: int | None = None  # the object's position in a List document's `items`


    def location(self) -> str:
        if self.index is None:
            return self.source
        where = f"{self.source}:doc {self.index}" + ("" if self.item is None else f" items[{self.item}]")
        what = f"{self.kind or '?'}/{self.name}" if self.name else (self.kind or "?")
        return f"{where} ({printable(what)})"

    def __str__(self) -> str:
        head = self.location()
        if self.path:
            head += f": {self.path}"
        text = f"{head}: {self.message}"
        if self.severity == "warning":
            text = f"{head}: warning: {self.message}"
        return printable(text)  # a key or value from the input may hold ESC, BEL, …: never printed raw

    def render(self) -> str:
        """The one-line form plus the suggested fragment, indented, when there is one."""
        text = str(self)
        if self.fix:
            text += "\n" + "\n".join("    " + line for line in self.fix.rstrip("\n").splitlines())
        return text

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "source": self.source,
            "doc": self.index,
            "kind": self.kind,
            "name": self.name,
            "path": self.path,
            "severity": self.severity,
            "message": self.message,
        }
        if self.fix:
            data["fix"] = self.fix
        if self.item is not None:
            data["item"] = self.item
        return data


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]
