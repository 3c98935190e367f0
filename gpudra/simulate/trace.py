"""GPU cluster traces in the openb CSV shape (Alibaba, "Beware of Fragmentation", USENIX ATC'23).

Nodes: `sn, cpu_milli, memory_mib, gpu, model`. Tasks: `name, cpu_milli, memory_mib, num_gpu, gpu_milli`
(+ optional `gpu_spec` = allowed models separated by `|`, `creation_time`, `deletion_time` in seconds).
The openb traces are bundled (`data/openb`, with the upstream README for attribution).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, Iterable

from gpudra.errors import GpudraError

MILLI = 1000
# Bounds on a trace, checked while it is read, before anything is built per GPU or per task (issue 20: a one-row
# node list with gpu=100000000 took 45 s and 1.9 GB, then failed with MemoryError). The largest real nodes have 16
# GPUs (DGX-2/HGX-2; composable PCIe chassis about 20); Kubernetes supports clusters of up to 5,000 nodes and
# 150,000 pods. The openb traces have 1,213 nodes of at most 8 GPUs and at most 8,152 tasks.
MAX_GPUS_PER_NODE = 32
MAX_TRACE_NODES = 5_000
MAX_TRACE_TASKS = 200_000
BUNDLED_NODES = "openb_node_list_gpu_node.csv"  # the paper's cluster: 1,213 GPU nodes, 6,212 GPUs
BUNDLED_TRACES = ("default", "cpu100", "gpushare40", "gpuspec10", "multigpu30")
DEFAULT_TRACE = "default"


class TraceError(GpudraError, ValueError):
    pass


@dataclass(frozen=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str  # "" for CPU-only nodes


@dataclass(frozen=True)
class Task:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU; < 1000 only with num_gpu == 1 (a share of one GPU)
    gpu_spec: tuple[str, ...] = ()  # allowed GPU models, empty = any
    creation: int | None = None
    deletion: int | None = None

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli if self.num_gpu else 0

    @property
    def shares_gpu(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < MILLI

    @property
    def resource_key(self) -> tuple[int, int, int, tuple[str, ...]]:
        """What the paper's policies see of a task (FGD's PodResource: cpu, gpu milli, gpu count, gpu type)."""
        return (self.cpu_milli, self.gpu_milli if self.num_gpu else 0, self.num_gpu, self.gpu_spec)


@dataclass
class Trace:
    name: str
    nodes: list[TraceNode]
    tasks: list[Task]

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)


def _data_dir() -> Path:
    return Path(str(resources.files("gpudra.simulate") / "data" / "openb"))


def _int(row: dict[str, str], key: str, where: str, default: int | None = None, signed: bool = False) -> int:
    """A whole number ("1000" or "1000.0", as pandas writes them); negative only when `signed` (times)."""
    text = (row.get(key) or "").strip()
    if not text:
        if default is not None:
            return default
        raise TraceError(f"{where}: {key}: missing")
    try:
        number = float(text)
    except ValueError:
        raise TraceError(f"{where}: {key}: {text!r} is not a number") from None
    if not math.isfinite(number):
        raise TraceError(f"{where}: {key}: {text!r} is not a number")
    if not number.is_integer():
        raise TraceError(f"{where}: {key}: {text!r} is not a whole number")
    if number < 0 and not signed:
        raise TraceError(f"{where}: {key}: must not be negative")
    return int(number)


def _optional_int(row: dict[str, str], key: str, where: str) -> int | None:
    text = (row.get(key) or "").strip()
    if not text or text.lower() == "nan":
        return None
    return _int(row, key, where, signed=True)


def _rows(stream: IO[str], where: str, required: Iterable[str], limit: int,
          what: str) -> Iterable[tuple[int, dict[str, str]]]:
    """The data rows with their line numbers; a TraceError at the row past `limit`, before it is built."""
    reader = csv.DictReader(stream)
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise TraceError(f"{where}: missing column(s) {', '.join(missing)}")
    for count, (line, row) in enumerate(enumerate(reader, start=2), start=1):
        if count > limit:
            raise TraceError(f"{where}: more than {limit:,} {what} (line {line}); gpudra simulates at most "
                             f"{limit:,}: split the trace")
        yield line, row


def read_nodes(stream: IO[str], where: str = "nodes") -> list[TraceNode]:
    nodes = []
    for line, row in _rows(stream, where, ("sn", "cpu_milli", "memory_mib", "gpu"), MAX_TRACE_NODES, "nodes"):
        at = f"{where}:{line}"
        model = (row.get("model") or "").strip()
        gpus = _int(row, "gpu", at, 0)
        if gpus > MAX_GPUS_PER_NODE:
            raise TraceError(f"{at}: gpu: {gpus} GPUs on one node; the largest real nodes have 16 (gpudra takes "
                             f"at most {MAX_GPUS_PER_NODE})")
        nodes.append(TraceNode(row["sn"].strip(), _int(row, "cpu_milli", at), _int(row, "memory_mib", at), gpus,
                               "" if model.lower() == "nan" else model))
    if len({n.name for n in nodes}) != len(nodes):
        raise TraceError(f"{where}: node names are not unique")
    return nodes


def read_tasks(stream: IO[str], where: str = "pods") -> list[Task]:
    tasks = []
    lines: dict[str, int] = {}  # task name -> line: each task becomes a Pod of that name
    for line, row in _rows(stream, where, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"),
                           MAX_TRACE_TASKS, "tasks"):
        at = f"{where}:{line}"
        name = row["name"].strip()
        if name in lines:
            raise TraceError(f"{at}: name: {name!r} is already the name of the task on line {lines[name]}")
        lines[name] = line
        num_gpu = _int(row, "num_gpu", at, 0)
        gpu_milli = _int(row, "gpu_milli", at, 0)
        if num_gpu < 0 or not 0 <= gpu_milli <= MILLI:
            raise TraceError(f"{at}: num_gpu must be >= 0 and gpu_milli within 0..1000")
        if num_gpu > MAX_GPUS_PER_NODE:
            raise TraceError(f"{at}: num_gpu: {num_gpu} GPUs for one task; no node has more than "
                             f"{MAX_GPUS_PER_NODE}")
        if num_gpu > 1 and gpu_milli != MILLI:
            raise TraceError(f"{at}: gpu_milli: a task with {num_gpu} GPUs must use whole GPUs (1000)")
        if num_gpu and not gpu_milli:
            raise TraceError(f"{at}: gpu_milli: a task with GPUs needs gpu_milli > 0")
        spec = (row.get("gpu_spec") or "").strip()
        models = tuple(m for m in spec.split("|") if m and m.lower() != "nan")
        tasks.append(Task(name, _int(row, "cpu_milli", at), _int(row, "memory_mib", at), num_gpu,
                          gpu_milli if num_gpu else 0, models, _optional_int(row, "creation_time", at),
                          _optional_int(row, "deletion_time", at)))
    if not tasks:
        raise TraceError(f"{where}: no tasks (a header and nothing else)")
    return tasks


def bundled_trace(name: str = DEFAULT_TRACE) -> Trace:
    if name not in BUNDLED_TRACES:
        raise TraceError(f"unknown trace {name!r}; bundled: {', '.join(BUNDLED_TRACES)}")
    base = _data_dir()
    with open(base / BUNDLED_NODES, encoding="utf-8") as nodes, \
            open(base / f"openb_pod_list_{name}.csv", encoding="utf-8") as pods:
        return Trace(name, read_nodes(nodes, BUNDLED_NODES), read_tasks(pods, f"openb_pod_list_{name}.csv"))


def load_trace(nodes_path: str, pods_path: str, name: str | None = None) -> Trace:
    """The trace of two CSV files; unreadable files in the manifest loader's words (`gpudra.api.load`)."""
    from gpudra.api.load import LoadError, read_text

    try:
        # a spreadsheet's "CSV UTF-8" starts with a byte order mark, which would become part of the first column name
        nodes, pods = (read_text(path).removeprefix("\ufeff") for path in (nodes_path, pods_path))
    except LoadError as exc:
        raise TraceError(str(exc)) from None
    return Trace(name or Path(pods_path).stem, read_nodes(io.StringIO(nodes, newline=""), nodes_path),
                 read_tasks(io.StringIO(pods, newline=""), pods_path))
