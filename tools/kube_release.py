"""Pin a Kubernetes release in gpudra's Go module (k8s/): write its go.mod (or releases/v<minor>.mod) and go.sum.

    python tools/kube_release.py v1.36.2            # k8s/releases/v1.36.mod + .sum (`gpudra kube build --kubernetes-version 1.36`)
    python tools/kube_release.py v1.34.4 --default  # k8s/go.mod + go.sum: the module's own release

A program that imports k8s.io/kubernetes must pin every staging module (k8s.io/api, k8s.io/client-go, ...) to the
release, because k8s.io/kubernetes' own go.mod points them at ./staging with version v0.0.0: the staging modules and
the etcd server version are read from the release's own go.mod (`go mod download -json`), then `go mod tidy`
completes the file. Needs Go and the module proxy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = os.path.join(ROOT, "k8s")
HEADER = """\
// The real Kubernetes control plane for gpudra's tests and `gpudra kube build`, built from the release's Go
// modules alone. Projects that import k8s.io/kubernetes pin every staging module to the release (k8s.io/kubernetes'
// own go.mod points them at ./staging): the replace block below does that for {version}. Written by
// tools/kube_release.py {version}{flag}; {role}
"""


def release_go_mod(version: str) -> str:
    result = subprocess.run(["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"], check=True,
                            capture_output=True, text=True, cwd=MODULE)
    with open(json.loads(result.stdout)["GoMod"], encoding="utf-8") as f:
        return f.read()


def pinned_module_text(version: str, upstream: str, default: bool) -> str:
    staging = sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging/", upstream, re.MULTILINE)))
    etcd = re.search(r"go\.etcd\.io/etcd/server/v3 (v[\d.]+)", upstream)
    go = re.search(r"^go ([\d.]+)", upstream, re.MULTILINE)
    if not staging or etcd is None or go is None:
        raise SystemExit(f"k8s.io/kubernetes@{version}'s go.mod has no staging replaces, etcd server or go line")
    staging_version = "v0." + version.lstrip("v").split(".", 1)[1]
    role = ("the module's own release (gpudra's default)." if default else
            f"built with `go build -modfile` (gpudra kube build --kubernetes-version {version.lstrip('v').rsplit('.', 1)[0]}).")
    lines = [HEADER.format(version=version, flag=" --default" if default else "", role=role),
             "module gpudra.local/k8s\n", f"go {go.group(1)}\n", "require (",
             f"\tgo.etcd.io/etcd/server/v3 {etcd.group(1)}", f"\tk8s.io/component-base {staging_version}",
             f"\tk8s.io/kubectl {staging_version}", f"\tk8s.io/kubernetes {version}", ")\n", "replace ("]
    lines += [f"\t{name} => {name} {staging_version}" for name in staging]
    return "\n".join(lines + [")", ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("version", help="k8s.io/kubernetes version, e.g. v1.36.2")
    parser.add_argument("--default", action="store_true", help="rewrite k8s/go.mod (the module's own release)")
    args = parser.parse_args()
    version = "v" + args.version.lstrip("v")
    minor = version.lstrip("v").rsplit(".", 1)[0]
    path = "go.mod" if args.default else os.path.join("releases", f"v{minor}.mod")
    os.makedirs(os.path.join(MODULE, "releases"), exist_ok=True)
    text = pinned_module_text(version, release_go_mod(version), args.default)  # before go.mod is rewritten
    with open(os.path.join(MODULE, path), "w", encoding="utf-8") as f:
        f.write(text)
    flags = [] if args.default else [f"-modfile={path}"]
    subprocess.run(["go", "mod", "tidy", *flags], check=True, cwd=MODULE)
    print(f"k8s/{path} pins {version}; build it: gpudra kube build --kubernetes-version {minor}")


if __name__ == "__main__":
    main()
