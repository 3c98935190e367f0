"""Building the real control plane from the Go module `k8s/`, once, into a cache outside the checkout.

    gpudra kube build      # cold: minutes (Kubernetes from source); warm: a hash of the sources, no Go run at all

The binary's cache key is a hash of everything that decides its bytes: go.mod, go.sum, the module's .go files, the
Go toolchain's version and the build flags. A changed key builds anew into a temporary file renamed into place, so
an interrupted build never leaves a half binary where a later run would take it for a good one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Callable

from gpudra.errors import GpudraError

MODULE_PATH = "gpudra.local/k8s"
BINARY = "kube"
# The components the binary runs (its first argument; main.go's switch), and kubectl as a link of its own name.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


class BuildError(GpudraError):
    """No Go toolchain, no module, or a failed build: the message says which and what to do."""


@dataclass(frozen=True)
class Built:
    binary: str  # the all-in-one binary
    kubectl: str  # the control plane's: a link named kubectl to it (the binary runs the component its name says)
    release: str  # "v1.34.4", the k8s.io/kubernetes version the module requires (its staging modules: v0.34.4)
    built: bool  # False: reused from the cache
    seconds: float
    size_bytes: int


def module_dir(explicit: str | None = None) -> str:
    """The Go module: --module, $GPUDRA_K8S_MODULE, the source tree gpudra was imported from, or the working
    directory or one above it (a `pip install .` copies no Go files: run from the checkout)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = [explicit, os.environ.get("GPUDRA_K8S_MODULE"), os.path.join(here, "k8s")]
    cwd = os.getcwd()
    while True:
        candidates.append(os.path.join(cwd, "k8s"))
        parent = os.path.dirname(cwd)
        if parent == cwd:
            break
        cwd = parent
    for candidate in candidates:
        if candidate and _is_our_module(candidate):
            return os.path.abspath(candidate)
        if candidate and candidate in (explicit, os.environ.get("GPUDRA_K8S_MODULE")):
            raise BuildError(f"{candidate} is not gpudra's Go module (no go.mod naming {MODULE_PATH})")
    raise BuildError("gpudra's Go module (k8s/ in the gpudra repository) was not found: run this from the "
                     "repository's checkout, or name it with --module or $GPUDRA_K8S_MODULE")


def _is_our_module(path: str) -> bool:
    try:
        with open(os.path.join(path, "go.mod"), encoding="utf-8") as f:
            return re.search(rf"^module {re.escape(MODULE_PATH)}\s*$", f.read(), re.MULTILINE) is not None
    except OSError:
        return False


# Other releases than go.mod's: releases/v<minor>.mod and .sum beside it, the same module's sources built with
# `go build -modfile` (Go reads that file instead of go.mod, and the .sum of the same stem instead of go.sum).
RELEASES_DIR = "releases"


def mod_file(module: str, release: str | None = None) -> str:
    """The go.mod that pins `release` ("1.36"; None: the module's own go.mod), relative to the module."""
    if release is None or _minor(_required_release(os.path.join(module, "go.mod"))) == _minor(release):
        return "go.mod"
    relative = os.path.join(RELEASES_DIR, f"v{_minor(release)}.mod")
    if not os.path.exists(os.path.join(module, relative)):
        known = sorted([_minor(_required_release(os.path.join(module, "go.mod")))] + [
            name[1:-4] for name in os.listdir(os.path.join(module, RELEASES_DIR)) if name.endswith(".mod")]
            if os.path.isdir(os.path.join(module, RELEASES_DIR)) else [])
        raise BuildError(f"gpudra's Go module pins no Kubernetes {_minor(release)} (it has {', '.join(known)}): "
                         f"{module}/{relative} is missing")
    return relative


def _minor(release: str) -> str:
    return ".".join(release.lstrip("v").split(".")[:2])


def _required_release(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        found = re.search(r"^\s*k8s\.io/kubernetes (v\d+\.\d+\.\d+)\s*$", f.read(), re.MULTILINE)
    if not found:
        raise BuildError(f"{path} requires no k8s.io/kubernetes version")
    return found.group(1)


def kubernetes_release(module: str, release: str | None = None) -> str:
    """The k8s.io/kubernetes version ("v1.34.4") the module's go.mod (or the one pinning `release`) requires:
    the release the binary is."""
    return _required_release(os.path.join(module, mod_file(module, release)))


def go_binary() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the real control plane is built from Go modules and needs Go (1.24 or newer) on PATH; "
                         "the embedded API server (`gpudra cluster up`, the default) needs none")
    return go


def _ldflags(release: str) -> str:
    # what `kubectl version` and the API server's /version say; the release's own build sets the same variables
    major, minor = release.lstrip("v").split(".")[:2]
    variables = {"k8s.io/component-base/version.gitVersion": release,
                 "k8s.io/component-base/version.gitMajor": major, "k8s.io/component-base/version.gitMinor": minor,
                 "k8s.io/client-go/pkg/version.gitVersion": release,
                 "k8s.io/client-go/pkg/version.gitMajor": major, "k8s.io/client-go/pkg/version.gitMinor": minor}
    return "-s -w " + " ".join(f"-X {name}={value}" for name, value in variables.items())


def _go_version(go: str) -> str:
    return subprocess.run([go, "env", "GOVERSION"], check=True, capture_output=True, text=True).stdout.strip()


def cache_key(module: str, go_version: str, flags: list[str], package: str, modfile: str = "go.mod") -> str:
    """A hash of what decides the binary: go.mod, go.sum (or the release's .mod and .sum), the package's own .go
    files and the module's shared packages (not the other commands under cmd/), the toolchain and the flags."""
    digest = hashlib.sha256()
    digest.update(f"{go_version}\0{' '.join(flags)}\0{package}\0".encode())
    if modfile != "go.mod":
        for path in (modfile, modfile[:-len(".mod")] + ".sum"):
            with open(os.path.join(module, path), "rb") as f:
                digest.update(path.encode() + b"\0" + f.read())
    commands = os.path.join(module, "cmd")
    own = os.path.normpath(os.path.join(module, package))
    for root, dirs, files in os.walk(module):
        if os.path.normpath(root) == commands:
            dirs[:] = [d for d in dirs if os.path.join(commands, d) == own]
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".go") or name in ("go.mod", "go.sum"):
                path = os.path.join(root, name)
                digest.update(os.path.relpath(path, module).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(f.read())
    return digest.hexdigest()[:16]


def cache_root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpudra", "kube")


def release_tag(release: str) -> str:
    """The build tag a build against `release` ("v1.36.2") carries: k8s_1_36. A harness keeps what differs between
    the releases' APIs in files of their own (k8s/cmd/allocate-bench/release_1_36.go: `//go:build k8s_1_36`; the
    module's own release's file is the untagged default, so a plain `go build` works)."""
    return "k8s_" + _minor(release).replace(".", "_")


def build_command(command: str, module: str | None = None, say: Callable[[str], None] = lambda _: None,
                  cache: str | None = None, ldflags: str | None = None, release: str | None = None,
                  tagged: bool = True) -> Built:
    """The module's `cmd/<command>` built once into the cache and reused (`kube`, the control plane; the Go
    harnesses the tests and benchmarks run beside gpudra: `allocate-bench`, `cel-oracle`), against the module's
    own release or another one it pins (`release`, "1.36": releases/v1.36.mod), with the release's build tag
    (`tagged`; release_tag)."""
    module = module_dir(module)
    modfile = mod_file(module, release)
    resolved = kubernetes_release(module, release)
    go = go_binary()
    package = f"./cmd/{command}"
    flags = ["-trimpath"] + ([f"-modfile={modfile}"] if modfile != "go.mod" else []) + (
        [f"-tags={release_tag(resolved)}"] if tagged else []) + (["-ldflags", ldflags] if ldflags else [])
    key = cache_key(module, _go_version(go), flags, package, modfile)
    target_dir = os.path.join(cache or cache_root(), f"{command}-{resolved}-{key}")
    binary = os.path.join(target_dir, command)
    start = time.monotonic()
    built = not os.path.exists(binary)
    if built:
        say(f"building {command} ({resolved}) from Go modules into {target_dir}")
        os.makedirs(target_dir, exist_ok=True)
        partial = f"{binary}.tmp{os.getpid()}"
        result = subprocess.run([go, "build", *flags, "-o", partial, package], check=False, cwd=module,
                                capture_output=True, text=True)
        if result.returncode != 0:
            if os.path.exists(partial):
                os.unlink(partial)
            raise BuildError(f"go build of {package} in {module} failed:\n{result.stderr.strip()[-4000:]}")
        os.replace(partial, binary)  # whole or not at all: a concurrent run sees the old state or this binary
    return Built(binary=binary, kubectl="", release=resolved, built=built,
                 seconds=time.monotonic() - start, size_bytes=os.path.getsize(binary))


def build(module: str | None = None, say: Callable[[str], None] = lambda _: None,
          cache: str | None = None, release: str | None = None) -> Built:
    """The control plane's binary for the module's release (or `release`, "1.36", where the module pins it): from
    the cache, or built now (minutes cold; Go's own build cache makes a rebuild after a small change quick), with a
    `kubectl` link beside it."""
    version = kubernetes_release(module_dir(module), release)
    say(f"Kubernetes {version} (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl): "
        "from the cache, or built from Go modules (minutes on a cold Go cache)")
    # the control plane has no per-release files: untagged, its flags (and so its cached binary) stay as they were
    built = build_command(BINARY, module, say, cache, ldflags=_ldflags(version), release=release, tagged=False)
    kubectl = os.path.join(os.path.dirname(built.binary), "kubectl")
    if not os.path.lexists(kubectl):
        os.symlink(BINARY, kubectl)
    return dataclasses.replace(built, kubectl=kubectl)
