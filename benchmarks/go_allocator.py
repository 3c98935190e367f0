"""The upstream Go allocator beside gpudra's: build (or reuse) the harness k8s/cmd/allocate-bench, run it on the
inputs gpudra's allocator gets, and compare the two answers.

The harness is built with the repository's Go module (k8s/go.mod pins k8s.io/dynamic-resource-allocation to the
release gpudra follows) into the cache outside the checkout that `gpudra kube build` uses
($XDG_CACHE_HOME/gpudra/kube/allocate-bench-RELEASE-KEY/, gpudra.kubecluster.build): a later run with the same
sources and toolchain reuses the binary, any change builds a new one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GO_MODULE = ROOT / "k8s"
HARNESS_PACKAGE = "cmd/allocate-bench"
BUILD_TIMEOUT_S = 1800  # a cold build compiles client-go, apimachinery and CEL on a small machine
ALLOCATOR_MODULE = "k8s.io/dynamic-resource-allocation"


class HarnessError(Exception):
    """The Go harness could not be built or did not answer."""


@dataclass(frozen=True)
class Harness:
    binary: Path
    built: bool  # False: reused from the cache
    release: str  # the allocator module's version, e.g. v0.34.4


def find_go() -> str | None:
    """The Go toolchain on PATH ($GO overrides), or None."""
    named = os.environ.get("GO")
    return shutil.which(named) if named else shutil.which("go")


def _mod_file(kubernetes_version: str | None) -> Path:
    """The go.mod that pins `kubernetes_version` ("1.36"; None: k8s/go.mod, the module's own release)."""
    from gpudra.errors import GpudraError
    from gpudra.kubecluster.build import mod_file

    try:
        return GO_MODULE / mod_file(str(GO_MODULE), kubernetes_version)
    except GpudraError as exc:
        raise HarnessError(str(exc)) from exc


def allocator_release(kubernetes_version: str | None = None) -> str:
    """The version the release's go.mod (k8s/go.mod, or k8s/releases/v1.36.mod for "1.36") pins the upstream
    allocator module to (its replace directive)."""
    path = _mod_file(kubernetes_version)
    text = path.read_text(encoding="utf-8")
    match = re.search(rf"^\s*{re.escape(ALLOCATOR_MODULE)}\s*=>\s*{re.escape(ALLOCATOR_MODULE)}\s+(v\S+)", text, re.M)
    if not match:
        raise HarnessError(f"{path.relative_to(ROOT)} has no replace directive for {ALLOCATOR_MODULE}")
    return match.group(1)


def kubernetes_release(kubernetes_version: str | None = None) -> str:
    """The Kubernetes minor release of the pinned allocator (staging v0.34.4 ships with Kubernetes 1.34.4)."""
    release = allocator_release(kubernetes_version)
    major_minor = re.match(r"v0\.(\d+)\.", release)
    if not major_minor:
        raise HarnessError(f"{ALLOCATOR_MODULE} {release} is not a staging release v0.N.P")
    return f"1.{major_minor.group(1)}"


def build_harness(go: str, kubernetes_version: str | None = None) -> Harness:
    """The cached harness binary for these sources, this toolchain and the release (None: k8s/go.mod's; "1.36":
    k8s/releases/v1.36.mod), built first when missing (the one cached Go build of the repository,
    gpudra.kubecluster.build)."""
    from gpudra.errors import GpudraError
    from gpudra.kubecluster.build import build_command

    release = allocator_release(kubernetes_version)
    try:
        built = build_command(HARNESS_PACKAGE.rsplit("/", 1)[1], str(GO_MODULE), release=kubernetes_version)
    except GpudraError as exc:
        raise HarnessError(str(exc)) from exc
    return Harness(Path(built.binary), built=built.built, release=release)


def feature_names(features: Any, names: tuple[str, ...]) -> dict[str, bool]:
    """gpudra's allocator features as {FeatureName: on} (the harness maps them onto upstream's Features)."""
    def attribute(name: str) -> str:
        return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")

    return {name: bool(getattr(features, attribute(name))) for name in names}


def run_harness(harness: Harness, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run the harness on `payload` (see k8s/cmd/allocate-bench) and return its JSON answer."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as handle:
        json.dump(payload, handle)
        path = handle.name
    try:
        completed = subprocess.run([str(harness.binary), path], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as exc:
        raise HarnessError(f"{harness.binary}: {exc}") from exc
    finally:
        os.unlink(path)
    if completed.returncode != 0:
        raise HarnessError(f"{harness.binary} exited {completed.returncode}: {completed.stderr.strip()}")
    try:
        answer = json.loads(completed.stdout)
    except ValueError as exc:
        raise HarnessError(f"{harness.binary} printed no JSON: {completed.stdout[:200]!r}") from exc
    if not isinstance(answer, dict):
        raise HarnessError(f"{harness.binary} printed {type(answer).__name__}, not an object")
    return answer


def comparable(value: Any) -> Any:
    """An allocation result without what serialisation alone makes differ: empty fields (Go's omitempty), the
    order of map keys."""
    if isinstance(value, dict):
        kept = {key: comparable(item) for key, item in value.items()}
        return {key: item for key, item in sorted(kept.items()) if item not in (None, {}, [], "")}
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value


def same_answer(gpudra_outcome: str, gpudra_allocations: list[Any] | None, go_answer: dict[str, Any]) -> bool:
    """Whether both allocators gave the same answer: both allocated the same devices with the same results, both
    found the claims unallocatable, or both failed (error wording is not compared)."""
    if go_answer.get("error"):
        return gpudra_outcome == "error"
    go_results = go_answer.get("results")
    if go_results is None:
        return gpudra_outcome == "unallocatable"
    return gpudra_outcome == "allocated" and comparable(gpudra_allocations or []) == comparable(go_results)


class GoAllocator:
    """The upstream allocator answering call by call through `allocate-bench -serve`, with the part of gpudra's
    Allocator that gpudra.allocator.report.build_report uses (allocate, fits, add_allocated_claim): the report's
    modes then run over the live Go answers. One harness process serves many clusters (`state` replaces the last);
    upstream's Allocate has no deadline here, as the conformance oracle's had none."""

    def __init__(self, harness: Harness):
        self.harness = harness
        self.process = subprocess.Popen([str(harness.binary), "-serve"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=60)

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except OSError as exc:
            raise HarnessError(f"{self.harness.binary} -serve: {exc}") from exc
        if not line:
            stderr = self.process.stderr.read() if self.process.stderr else ""
            raise HarnessError(f"{self.harness.binary} -serve stopped: {stderr.strip()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def cluster(self, device_classes: list[dict[str, Any]], slices: list[dict[str, Any]],
                allocated_claims: list[dict[str, Any]] | None = None, features: Any = None,
                device_taint_rules: list[dict[str, Any]] | None = None) -> "GoAllocator":
        """Load a cluster (gpudra's Allocator's arguments, `features` a gpudra Features); returns self, so that
        `lambda *a, **k: go.cluster(*a, **k)` stands where build_report makes gpudra's Allocator."""
        from gpudra.allocator import FEATURE_NAMES
        from gpudra.api.defaults import apply_defaults

        if device_taint_rules:
            raise HarnessError("DeviceTaintRules: the scheduler applies them to the slices before the allocator; "
                               "allocate-bench takes the slices as they are")
        # the objects as the API server stores them, defaulted (upstream's allocator reads e.g. allocationMode
        # unset as an unsupported mode; gpudra's reads it as the default)
        self._call({"op": "state", "deviceClasses": [apply_defaults(c) for c in device_classes],
                    "resourceSlices": [apply_defaults(s) for s in slices],
                    "allocatedClaims": [apply_defaults(c) for c in allocated_claims or []],
                    "features": feature_names(features, FEATURE_NAMES),
                    "allocators": [features.variant] if features.variant else []})
        return self

    def allocate(self, node: Any, claims: list[dict[str, Any]], timeout: float | None = None) -> Any:
        from gpudra.allocator.outcome import AllocationOutcome

        if isinstance(node, str):
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
        from gpudra.api.defaults import apply_defaults

        answer = self._call({"op": "allocate", "node": node, "claims": [apply_defaults(c) for c in claims]})
        if answer.get("error"):
            return AllocationOutcome("error", error=answer["error"], error_node_local=bool(answer.get("errorNodeLocal")))
        if answer.get("results") is None:
            return AllocationOutcome("unallocatable")
        return AllocationOutcome("allocated", allocations=answer["results"])

    fits = allocate

    def add_allocated_claim(self, claim: dict[str, Any]) -> None:
        from gpudra.api.defaults import apply_defaults

        self._call({"op": "allocated", "claim": apply_defaults(claim)})
