"""The real Kubernetes control plane for tests: built from the repository's Go module (or reused from the cache).

Without Go on PATH the tests that need it skip, naming the missing toolchain; `.ci/run` sets
GPUDRA_REQUIRE_REAL_KUBERNETES=1 on a machine that has Go, so there a missing build fails instead of skipping.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRE = "GPUDRA_REQUIRE_REAL_KUBERNETES"
# building Kubernetes cold takes minutes (20+ on a loaded 2-core machine): the tests that build get this long
BUILD_TIMEOUT_S = 3600


def require_go() -> str:
    go = shutil.which("go")
    if go is None:
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 but no `go` on PATH")
        pytest.skip("needs the Go toolchain (`go` on PATH): the real kube-apiserver, kube-scheduler and "
                    "kube-controller-manager are built from Go modules (k8s/)")
    return go


def built():
    require_go()
    from gpudra.kubecluster.build import build

    return build(str(ROOT / "k8s"), say=lambda text: print(text, file=sys.stderr))


def short_dir(prefix: str) -> str:
    """A cluster directory short enough for the nodes' unix sockets whatever the test's tmp_path is."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


def gpudra(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GPUDRA_K8S_MODULE=str(ROOT / "k8s"))
    result = subprocess.run([sys.executable, "-m", "gpudra", *args], capture_output=True, text=True, env=env,
                            timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"gpudra {' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result
