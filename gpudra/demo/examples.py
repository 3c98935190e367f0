"""The bundled example manifests: one catalog of what `gpudra examples` lists and writes.

The files are package data under `gpudra/demo/data` (the demo reads the same files), so an installed gpudra has
them; the repository's `examples/` folders are links to them, never copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

DATA_PACKAGE = "gpudra.demo"
# What a bundled example may hold: manifests, the webhook's reviews and the trace's tables (as package-data ships).
FILE_SUFFIXES = (".yaml", ".json", ".csv")


@dataclass(frozen=True)
class Example:
    name: str
    folder: str  # under gpudra/demo/data
    description: str


@dataclass(frozen=True)
class ExampleFile:
    name: str  # the file's name, as it is written out
    text: str


EXAMPLES: tuple[Example, ...] = (
    Example("article", "article-original",
            "A Korean blog post's DRA manifests as written, mistakes included (`validate` explains each: exit 1)."),
    Example("article-fixed", "article-fixed",
            "The same manifests written correctly, with their two Namespaces and a Deployment."),
    Example("cluster", "cluster",
            "A small cluster: DeviceClasses, 2×8 H100 (NVLink domains), an A100 board with MIG, an L4 node."),
    Example("workloads", "workloads", "Claims, a template, pods and a Deployment for that cluster."),
    Example("mig", "local-cluster",
            "A pod on one 1g.10gb MIG slice (namespace ai-serving; the demo's A100 node with dynamic MIG)."),
    Example("computedomain", "computedomain",
            "A ComputeDomain and an indexed Job of two pods on one GB200 NVL72 rack (`cluster up --racks 2x2`)."),
    Example("webhook", "webhook",
            "AdmissionReviews for the driver's admission webhook: one it allows, one it refuses (MPS at 150%)."),
    Example("trace", "trace", "A tiny openb-style trace (nodes.csv, pods.csv) for `gpudra simulate --nodes/--pods`."),
)


class UnknownExample(KeyError):
    pass


def find(name: str) -> Example:
    for example in EXAMPLES:
        if example.name == name:
            return example
    raise UnknownExample(name)


def _folder(example: Example) -> Traversable:
    return resources.files(DATA_PACKAGE).joinpath("data").joinpath(example.folder)


def files(example: Example) -> list[ExampleFile]:
    """The example's files, sorted by name (the order `-f DIR` reads them in)."""
    entries = sorted((entry for entry in _folder(example).iterdir()
                      if entry.is_file() and entry.name.endswith(FILE_SUFFIXES)), key=lambda entry: entry.name)
    return [ExampleFile(entry.name, entry.read_text(encoding="utf-8")) for entry in entries]
