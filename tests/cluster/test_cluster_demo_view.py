"""`gpudra demo` (the article's flow on a local cluster) and `gpudra cluster view` in headless Chromium."""

from __future__ import annotations

import html.parser
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def run_gpudra(*args: str, cwd: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpudra", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=180)


@pytest.fixture
def sandbox():
    """A private TMPDIR and state home: the demo's temporary cluster must vanish from there."""
    base = tempfile.mkdtemp(prefix="gdd", dir="/tmp")
    for sub in ("tmp", "xdg", "cwd"):
        os.makedirs(os.path.join(base, sub))
    env = dict(os.environ, TMPDIR=os.path.join(base, "tmp"), XDG_STATE_HOME=os.path.join(base, "xdg"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    yield base, env
    kept = os.path.join(base, "k")
    if os.path.exists(os.path.join(kept, "cluster.yaml")):
        run_gpudra("cluster", "down", "--dir", kept, cwd=base, env=env)
    shutil.rmtree(base, ignore_errors=True)


def test_demo_shows_the_timeline_from_any_directory_and_leaves_nothing(sandbox):
    base, env = sandbox
    done = run_gpudra("demo", cwd=os.path.join(base, "cwd"), env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    steps = [line.split()[1] for line in lines]
    # the article's flow, in order: nodes and slices, manifests, claims from the template, scheduling, prepare,
    # the containers' view, then a deleted pod is unprepared and its claim deallocated, and everything goes down
    for earlier, later in (("slices", "apply"), ("apply", "claim"), ("claim", "schedule"), ("schedule", "prepare"),
                           ("prepare", "container"), ("container", "unprepare"), ("unprepare", "down")):
        assert steps.index(earlier) < steps.index(later), (earlier, later, done.stdout)
    text = done.stdout
    assert "nvlink-h100-claim prepared on h100-" in text and "/dev/nvidia0" in text
    assert "deallocated and deleted with its pod" in text
    assert re.search(r"small-inference → node a100-0, devices a100-0/gpu-\d-mig-1g10gb-", text)  # a MIG slice
    assert "created from template for pod ai-serving/inference-" in text
    assert os.listdir(os.path.join(base, "tmp")) == [] and os.listdir(os.path.join(base, "cwd")) == []
    # it ends with the next step, and the step it names works from the same directory (the manifests it applied)
    assert done.stderr.rstrip().splitlines()[-1].startswith("next: gpudra examples --all --dir examples"), done.stderr
    wrote = run_gpudra("examples", "--all", "--dir", "examples", cwd=os.path.join(base, "cwd"), env=env)
    assert wrote.returncode == 0 and "examples/article-fixed/05-pod.yaml" in wrote.stdout, wrote.stderr


class _Dom(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.nodes: list[str] = []
        self.held: list[str] = []
        self.containers = 0
        self.summary = ""
        self._in_summary = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if "node" in classes:
            self.nodes.append(attrs["data-node"])
        if "device" in classes and "held" in classes:
            self.held.append(attrs["data-device"])
        if tag == "tr" and "container" in classes:
            self.containers += 1
        self._in_summary = attrs.get("id") == "summary"

    def handle_data(self, data):
        if self._in_summary:
            self.summary += data


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs Debian's chromium)")
def test_kept_demo_cluster_is_served_by_get_and_drawn_by_the_view_in_headless_chromium(sandbox):
    base, env = sandbox
    kept = os.path.join(base, "k")
    done = run_gpudra("demo", "--keep", kept, cwd=base, env=env)
    assert done.returncode == 0, done.stderr
    pods = json.loads(run_gpudra("get", "pods", "-A", "-o", "json", "--dir", kept, cwd=base, env=env).stdout)
    assert len(pods["items"]) == 5 and {p["status"]["phase"] for p in pods["items"]} == {"Running"}
    claims = json.loads(run_gpudra("get", "resourceclaims", "-A", "-o", "json", cwd=base, env=env).stdout)  # last up
    allocated = {f"{r['pool']}/{r['device']}" for c in claims["items"]
                 for r in c["status"]["allocation"]["devices"]["results"]}

    page = os.path.join(base, "view.html")
    written = run_gpudra("cluster", "view", "--dir", kept, "-o", page, cwd=base, env=env)
    assert written.returncode == 0, written.stderr
    profile = os.path.join(base, "chromium-profile")
    browser = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                              f"--user-data-dir={profile}", "--dump-dom", f"file://{page}"],
                             capture_output=True, text=True, timeout=120)
    assert browser.returncode == 0, browser.stderr
    dom = _Dom()
    dom.feed(browser.stdout)  # the DOM as Chromium parsed and built it
    assert sorted(dom.nodes) == ["a100-0", "h100-0", "h100-1", "l4-0"]
    assert set(dom.held) == allocated
    assert dom.containers == 5
    assert json.loads(dom.summary) == {"nodes": 4, "pods": 5, "pending": 0, "allocatedDevices": len(allocated)}

    down = run_gpudra("cluster", "down", "--dir", kept, cwd=base, env=env)
    assert down.returncode == 0 and not os.path.exists(kept)
