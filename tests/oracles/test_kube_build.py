"""`gpudra kube build`: the control plane's binary from the Go module k8s/, built once into a cache and reused."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from support.realkube import BUILD_TIMEOUT_S, ROOT, built, gpudra, require_go

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)


@pytest.mark.parametrize("minor", ["1.34", "1.36"])
def test_the_binary_is_the_release_its_mod_file_names_and_every_component_runs(minor):
    binary = built(None if minor == "1.34" else minor)  # 1.34: k8s/go.mod; 1.36: k8s/releases/v1.36.mod
    release = binary.release
    assert release.startswith(f"v{minor}.")
    if minor == "1.34":
        assert int(release.split(".")[2]) >= 2  # the article's advice: >= 1.34.2
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        result = subprocess.run([binary.binary, component, "--version"], capture_output=True, text=True, timeout=60)
        assert result.stdout.strip() == f"Kubernetes {release}", (component, result.stderr)
    kubectl = subprocess.run([binary.kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True,
                             timeout=60)
    assert f'"gitVersion": "{release}"' in kubectl.stdout
    etcd = subprocess.run([binary.binary, "etcd", "--version"], capture_output=True, text=True, timeout=60)
    assert "etcd Version: 3.6." in etcd.stdout
    unknown = subprocess.run([binary.binary, "kubelet"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "unknown component" in unknown.stderr


def test_a_second_build_reuses_the_cached_binary():
    first = built()
    again = gpudra("kube", "build", "--module", str(ROOT / "k8s"), "-o", "json")
    assert '"built": false' in again.stdout and first.binary in again.stdout


def test_a_release_the_module_does_not_pin_is_refused_naming_those_it_pins():
    require_go()
    result = gpudra("kube", "build", "--module", str(ROOT / "k8s"), "--kubernetes-version", "1.35", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "pins no Kubernetes 1.35 (it has 1.34, 1.36)" in result.stderr


def test_each_release_has_its_own_binary_and_the_release_file_is_in_the_key(tmp_path):
    from gpudra.kubecluster.build import cache_key, kubernetes_release, mod_file

    module = str(ROOT / "k8s")
    assert mod_file(module, "1.34") == mod_file(module, None) == "go.mod"
    assert mod_file(module, "1.36.1") == "releases/v1.36.mod"  # a patch release: its minor's pin
    assert kubernetes_release(module, "1.36").startswith("v1.36.")
    copy = tmp_path / "k8s"
    shutil.copytree(ROOT / "k8s", copy, ignore=shutil.ignore_patterns("*_test.go"))
    flags = ["-trimpath", "-modfile=releases/v1.36.mod"]
    key = cache_key(str(copy), "go1.26", flags, "./cmd/kube", "releases/v1.36.mod")
    with open(copy / "releases" / "v1.36.sum", "a", encoding="utf-8") as f:
        f.write("example.com/m v1.0.0 h1:x=\n")
    assert cache_key(str(copy), "go1.26", flags, "./cmd/kube", "releases/v1.36.mod") != key


def test_the_cache_key_follows_the_binarys_sources_only(tmp_path):
    from gpudra.kubecluster.build import cache_key

    module = tmp_path / "k8s"
    shutil.copytree(ROOT / "k8s", module, ignore=shutil.ignore_patterns("*_test.go"))
    key = cache_key(str(module), "go1.26", ["-trimpath"], "./cmd/kube")
    (module / "cmd" / "another-tool").mkdir(exist_ok=True)
    (module / "cmd" / "another-tool" / "main.go").write_text("package main\n")
    assert cache_key(str(module), "go1.26", ["-trimpath"], "./cmd/kube") == key  # another command does not rebuild this one
    with open(module / "pki" / "pki.go", "a", encoding="utf-8") as f:
        f.write("\n// changed\n")
    assert cache_key(str(module), "go1.26", ["-trimpath"], "./cmd/kube") != key
    assert cache_key(str(module), "go1.27", ["-trimpath"], "./cmd/kube") != cache_key(str(module), "go1.26", ["-trimpath"], "./cmd/kube")


def test_without_go_the_error_names_the_toolchain_and_the_default_that_needs_none(tmp_path):
    env_path = str(tmp_path)  # an empty PATH: no go
    result = subprocess.run([shutil.which("python3") or "python3", "-m", "gpudra", "kube", "build", "--module",
                             str(ROOT / "k8s")], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, PATH=env_path, PYTHONPATH=str(ROOT)))
    assert result.returncode == 2
    assert "needs Go" in result.stderr and "embedded API server" in result.stderr
    assert "Traceback" not in result.stderr


def test_features_name_dra_gates_beyond_the_allocators_and_the_components_get_them():
    from gpudra.allocator.features import Features
    from gpudra.cluster.layout import ClusterConfig
    from gpudra.kubecluster.controlplane import feature_gates_flag

    features = Features.parse("default,+DRAPartitionableDevices,+DRAExtendedResource", "1.34")
    assert features.gate_enabled("DRAExtendedResource") is True and features.variant_name == "stable"
    assert Features.parse(str(features), "1.34") == features
    flag = feature_gates_flag(ClusterConfig(kubernetes_version="1.34", features=str(features)))
    assert "DRAExtendedResource=true" in flag and "DRAPartitionableDevices=true" in flag
    assert "DynamicResourceAllocation" not in flag  # GA in 1.34: locked, not passed
    with pytest.raises(ValueError, match="DRAExtendedResource"):
        Features.parse("+NoSuchGate", "1.34")
