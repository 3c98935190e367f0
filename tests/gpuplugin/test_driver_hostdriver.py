"""The host driver's libraries, binaries and hooks in the claim CDI specs (nvml backend), on fake driver roots."""

from __future__ import annotations

import json
import os
import struct

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cdi import apply_devices, default_oci_spec, load_spec_file, validate_spec
from gpudra.cli.cdi import command as cdi_command
from gpudra.discovery import open_backend
from gpudra.kubeletplugin import cdispec
from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.kubeletplugin.claims import LocalClaimStore
from gpudra.gpuplugin.hostdriver import (MOUNT_OPTIONS, discover_host_driver, host_driver_edits, read_ldcache_dirs,
                                      resolve_in_root)
from tests.support.builders import allocated_claim
from gpudra.kubeletplugin.paths import DriverPaths
from gpudra.gpuplugin.state import ClaimRef, DeviceState

VERSION = "580.95.05"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
NODE = "n1"


def _file(root, path, mode=0o644):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as fh:
        fh.write("x")
    os.chmod(full, mode)


def _link(root, path, target):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    os.symlink(target, full)


def resolve_target(root, path):
    """Where `path` inside the fake root really is, by the test's own means (the root made absolute by hand)."""
    full = os.path.join(root, path.lstrip("/"))
    for link, target in (("/var/run", "/run"),):
        if path.startswith(link + "/"):
            full = os.path.join(root, (target + path[len(link):]).lstrip("/"))
    return full


def fake_driver_root(root, *, hook=True, version=VERSION, libdir=LIBDIR):
    """A host with the NVIDIA driver installed the way distribution packages do it."""
    for lib in ("libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"):
        _file(root, f"{libdir}/{lib}.so.{version}")
        _link(root, f"{libdir}/{lib}.so.1", f"{lib}.so.{version}")
    _link(root, f"{libdir}/libcuda.so", "libcuda.so.1")
    _file(root, f"{libdir}/vdpau/libvdpau_nvidia.so.{version}")
    _file(root, f"{libdir}/libnvidia-ml.so.570.86.15")  # left over by an older driver
    _file(root, f"{libdir}/libz.so.1.3")
    _link(root, f"{libdir}/libz.so.1", "libz.so.1.3")  # a soname link, but not the driver's
    _link(root, "/lib", "usr/lib")  # merged /usr: the same libraries seen twice
    _file(root, "/usr/bin/nvidia-smi", 0o755)
    _file(root, "/usr/bin/nvidia-debugdump", 0o755)
    _file(root, "/usr/bin/ls", 0o755)
    _file(root, f"/usr/lib/firmware/nvidia/{version}/gsp_ga10x.bin")
    _file(root, f"/usr/lib/firmware/nvidia/{version}/gsp_tu10x.bin")
    _file(root, "/run/nvidia-persistenced/socket")
    _link(root, "/var/run", "/run")  # absolute: must be followed inside the root, not on this machine
    if hook:
        _file(root, "/usr/bin/nvidia-cdi-hook", 0o755)
    return str(root)


def test_discovers_the_driver_files_inside_the_root(tmp_path):
    root = fake_driver_root(tmp_path)
    files = discover_host_driver(root)
    assert files.version == VERSION  # read from libcuda.so.<version> without NVML
    assert files.libcuda_dir == LIBDIR
    assert files.libraries == [f"{LIBDIR}/libcuda.so.{VERSION}", f"{LIBDIR}/libnvidia-ml.so.{VERSION}",
                               f"{LIBDIR}/libnvidia-ptxjitcompiler.so.{VERSION}",
                               f"{LIBDIR}/vdpau/libvdpau_nvidia.so.{VERSION}"]
    assert files.soname_links == [f"{LIBDIR}/libcuda.so.1", f"{LIBDIR}/libnvidia-ml.so.1",
                                  f"{LIBDIR}/libnvidia-ptxjitcompiler.so.1"]
    assert files.binaries == ["/usr/bin/nvidia-smi", "/usr/bin/nvidia-debugdump"]
    # the kernel's path (/lib is usr/lib here): containers see the firmware where the host's driver looks
    assert files.firmware == [f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
                              f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin"]
    assert files.ipc_sockets == ["/var/run/nvidia-persistenced/socket"]
    assert files.hook == "/usr/bin/nvidia-cdi-hook"
    assert files.warnings == []


def test_mounts_use_host_paths_under_the_root_and_container_paths_without_it(tmp_path):
    root = fake_driver_root(tmp_path)
    files = discover_host_driver(root, version=VERSION)
    edits = host_driver_edits(files)
    by_container = {m.container_path: m for m in edits.mounts}
    expected = files.libraries + files.binaries + files.firmware + files.ipc_sockets
    assert sorted(by_container) == sorted(expected)
    for path, mount in by_container.items():
        assert mount.host_path.startswith(root + "/")
        assert os.path.samefile(mount.host_path, resolve_target(root, path))
        assert mount.options == list(MOUNT_OPTIONS) and "ro" in mount.options
    assert by_container[f"{LIBDIR}/libcuda.so.{VERSION}"].host_path == root + f"{LIBDIR}/libcuda.so.{VERSION}"
    # sources have the root's own symlinks resolved: /var/run -> /run must not leave the root
    assert by_container["/var/run/nvidia-persistenced/socket"].host_path == root + "/run/nvidia-persistenced/socket"
    firmware = f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin"
    assert by_container[firmware].host_path == root + "/usr" + firmware
    assert f"{LIBDIR}/libnvidia-ml.so.570.86.15" not in by_container
    assert f"NVIDIA_CTK_LIBCUDA_DIR={LIBDIR}" in edits.env
    # the plugin sees the host's / at /driver-root: the spec must name host paths
    on_host = host_driver_edits(files, host_driver_root="/")
    assert {m.host_path for m in on_host.mounts} == {files.source(p) for p in expected}
    assert f"{LIBDIR}/libcuda.so.{VERSION}" in {m.host_path for m in on_host.mounts}
    assert on_host.hooks[0].path == "/usr/bin/nvidia-cdi-hook"
    moved = host_driver_edits(files, host_driver_root="/run/nvidia/driver")
    assert {m.host_path for m in moved.mounts} == {"/run/nvidia/driver" + files.source(p) for p in expected}


def test_hooks_only_when_the_hook_binary_exists(tmp_path):
    with_hook = discover_host_driver(fake_driver_root(tmp_path / "a"))
    edits = host_driver_edits(with_hook)
    assert [h.args[:2] for h in edits.hooks] == [["nvidia-cdi-hook", "create-symlinks"],
                                                 ["nvidia-cdi-hook", "update-ldcache"]]
    assert all(h.hook_name == "createContainer" and h.path == str(tmp_path / "a") + "/usr/bin/nvidia-cdi-hook"
               for h in edits.hooks)
    assert edits.hooks[0].args[2:] == ["--link", f"libcuda.so.1::{LIBDIR}/libcuda.so"]
    assert edits.hooks[1].args[2:] == ["--folder", LIBDIR, "--folder", f"{LIBDIR}/vdpau"]
    # ldconfig in the container creates the soname links: not mounted
    assert not any(m.container_path.endswith(".so.1") for m in edits.mounts)

    without = discover_host_driver(fake_driver_root(tmp_path / "b", hook=False))
    assert without.hook is None
    edits = host_driver_edits(without)
    assert edits.hooks == []
    # nothing will run ldconfig: the host's soname links are mounted so dlopen("libcuda.so.1") works
    mounted = {m.container_path: m.host_path for m in edits.mounts}
    assert mounted[f"{LIBDIR}/libcuda.so.1"] == str(tmp_path / "b") + f"{LIBDIR}/libcuda.so.{VERSION}"
    assert f"{LIBDIR}/libz.so.1" not in mounted

    not_executable = tmp_path / "c"
    fake_driver_root(not_executable, hook=False)
    _file(not_executable, "/usr/bin/nvidia-cdi-hook", 0o644)
    assert discover_host_driver(str(not_executable)).hook is None

    explicit = host_driver_edits(without, hook_path="/var/lib/kubelet/plugins/gpu.nvidia.com/nvidia-cdi-hook")
    assert {h.path for h in explicit.hooks} == {"/var/lib/kubelet/plugins/gpu.nvidia.com/nvidia-cdi-hook"}


def test_missing_driver_files_are_warnings_not_errors(tmp_path):
    empty = discover_host_driver(str(tmp_path))
    assert empty.libraries == [] and empty.binaries == [] and empty.hook is None
    assert any("no libcuda.so.<version> under driver root" in w for w in empty.warnings)
    assert any("nvidia-smi" in w for w in empty.warnings)
    assert host_driver_edits(empty).is_empty()

    gone = discover_host_driver(str(tmp_path / "nope"), version=VERSION)
    assert gone.warnings and "not a directory" in gone.warnings[0]
    assert host_driver_edits(gone).is_empty()

    root = fake_driver_root(tmp_path / "upgraded")
    mismatch = discover_host_driver(root, version="590.1.2")  # NVML (kernel module) newer than the libraries
    assert mismatch.version == VERSION and mismatch.libraries
    assert any("590.1.2" in w and VERSION in w for w in mismatch.warnings)


def _ldcache(entries: list[tuple[str, str]]) -> bytes:
    """A glibc ld.so.cache (new format after an old-format prefix) for (soname, path) entries."""
    table_end = 48 + 24 * len(entries)
    strings, packed = b"", b""
    for key, value in entries:
        key_at = table_end + len(strings)
        strings += key.encode() + b"\0"
        value_at = table_end + len(strings)
        strings += value.encode() + b"\0"
        packed += struct.pack("=iIIIQ", 0x0303, key_at, value_at, 0, 0)
    header = b"glibc-ld.so.cache1.1" + struct.pack("=II", len(entries), len(strings)) + b"\0" * 4 \
        + struct.pack("=I", 0) + b"\0" * 12
    assert len(header) == 48
    return b"ld.so-1.7.0\0\0\0\0\0" + header + packed + strings


def test_libraries_outside_the_usual_directories_are_found_through_the_ldcache(tmp_path):
    root = fake_driver_root(tmp_path, libdir="/opt/nvidia/lib")
    assert discover_host_driver(root).libraries == []  # not in any usual directory
    cache = _ldcache([("libz.so.1", f"{LIBDIR}/libz.so.1"), ("libcuda.so.1", "/opt/nvidia/lib/libcuda.so.1")])
    assert read_ldcache_dirs(cache) == ["/opt/nvidia/lib"]
    assert read_ldcache_dirs(b"garbage") == [] and read_ldcache_dirs(cache[:70]) == []
    _file(root, "/etc/ld.so.cache")
    with open(os.path.join(root, "etc/ld.so.cache"), "wb") as fh:
        fh.write(cache)
    files = discover_host_driver(root)
    assert files.libcuda_dir == "/opt/nvidia/lib"
    assert f"/opt/nvidia/lib/libcuda.so.{VERSION}" in files.libraries


def test_symlinks_are_resolved_inside_the_root(tmp_path):
    _link(tmp_path, "/a", "/b/c")
    _link(tmp_path, "/b", "d")
    _link(tmp_path, "/loop", "/loop")
    assert resolve_in_root(str(tmp_path), "/a/x") == "/d/c/x"
    assert resolve_in_root(str(tmp_path), "/../../a") == "/d/c"
    assert resolve_in_root(str(tmp_path), "/loop/x") is None


# -- in the claim specs ----------------------------------------------------------------------------


class NvmlNamedBackend:
    """The simulated GPUs behind the `nvml` backend's name: host-driver edits apply to it."""

    name = "nvml"

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, attr):
        return getattr(self._inner, attr)


def _claim(claims_dir, name, devices):
    import yaml

    obj = allocated_claim(name, [{"request": f"r{i}", "device": d} for i, d in enumerate(devices)], node_name=NODE)
    with open(os.path.join(claims_dir, f"default_{name}.yaml"), "w") as fh:
        yaml.safe_dump(obj, fh)
    return ClaimRef("default", name, obj["metadata"]["uid"])


def _state(tmp_path, host_edits):
    paths = DriverPaths(root=str(tmp_path / "node"))
    claims_dir = tmp_path / "claims"
    claims_dir.mkdir(exist_ok=True)
    backend = open_backend("simulated", profile="dgx-h100", node_name=NODE, state_path=paths.simulated_state)
    state = DeviceState(driver_name="gpu.nvidia.com", node_name=NODE, backend=backend, paths=paths,
                        claims=LocalClaimStore(str(claims_dir)), fsync=False, boot_id="b", host_edits=host_edits)
    state.reconcile()
    return state, str(claims_dir)


def test_claim_specs_carry_the_host_driver_and_resolve(tmp_path):
    root = fake_driver_root(tmp_path / "host")
    edits = host_driver_edits(discover_host_driver(root, version=VERSION))
    state, claims_dir = _state(tmp_path, edits)
    ref = _claim(claims_dir, "two", ["gpu-0", "gpu-1"])
    ids = [i for d in state.prepare(ref) for i in d["cdiDeviceIDs"]]
    spec = load_spec_file(os.path.join(state.paths.cdi_spec_dir, cdispec.claim_spec_file_name("gpu.nvidia.com", ref.uid)
                                       + ".yaml"))
    assert validate_spec(spec) == []
    assert len(spec.container_edits.mounts) == len(edits.mounts)
    assert all(not d.container_edits.mounts for d in spec.devices)  # common edits live at spec level
    oci = apply_devices(default_oci_spec(), ids, state.paths.cdi_spec_dirs)
    mounts = {m["destination"]: m for m in oci["mounts"]}
    assert mounts[f"{LIBDIR}/libcuda.so.{VERSION}"]["source"] == root + f"{LIBDIR}/libcuda.so.{VERSION}"
    assert mounts["/usr/bin/nvidia-smi"]["options"] == list(MOUNT_OPTIONS)
    hooks = oci["hooks"]["createContainer"]
    assert [h["args"][1] for h in hooks] == ["create-symlinks", "update-ldcache"]  # once, not per device
    assert {d["path"] for d in oci["linux"]["devices"]} >= {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}
    assert f"NVIDIA_CTK_LIBCUDA_DIR={LIBDIR}" in oci["process"]["env"]

    # what `gpudra cdi apply` prints for the same IDs
    result = CliRunner().invoke(cdi_command, ["apply", *ids, "--root", str(tmp_path / "node")])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert {m["destination"] for m in printed["mounts"]} == set(mounts)
    assert printed["hooks"] == oci["hooks"]


def test_simulated_claim_specs_have_no_host_driver_files(tmp_path):
    state, claims_dir = _state(tmp_path, None)
    ref = _claim(claims_dir, "one", ["gpu-0"])
    ids = state.prepare(ref)[0]["cdiDeviceIDs"]
    oci = apply_devices(default_oci_spec(), ids, state.paths.cdi_spec_dirs)
    assert [m["destination"] for m in oci["mounts"]] == ["/proc", "/dev"]
    assert "hooks" not in oci


@pytest.mark.parametrize("backend_name", ["nvml", "simulated"])
def test_agent_uses_the_driver_root_with_the_nvml_backend_only(tmp_path, backend_name):
    root = fake_driver_root(tmp_path / "host", hook=False)
    paths = DriverPaths(root=str(tmp_path / "node"))
    inner = open_backend("simulated", profile="dgx-h100", node_name=NODE, state_path=paths.simulated_state)
    backend = NvmlNamedBackend(inner) if backend_name == "nvml" else inner
    (tmp_path / "claims").mkdir()
    options = AgentOptions(node_name=NODE, backend=backend_name, root=str(tmp_path / "node"),
                           claims_dir=str(tmp_path / "claims"), fsync=False, driver_root=root, host_driver_root="/",
                           cdi_hook_path="/opt/toolkit/nvidia-cdi-hook")
    agent = DriverAgent(options, backend=backend)
    if backend_name == "simulated":
        assert agent.host_driver is None and agent.state.host_edits is None
        return
    assert agent.host_driver.libcuda_dir == LIBDIR
    edits = agent.state.host_edits
    assert f"{LIBDIR}/libcuda.so.{VERSION}" in {m.host_path for m in edits.mounts}  # host paths, root stripped
    assert {h.path for h in edits.hooks} == {"/opt/toolkit/nvidia-cdi-hook"}


def test_driver_run_accepts_the_driver_root_options():
    from gpudra.cli.driver import run_cmd

    ctx = run_cmd.make_context("run", ["--node-name", "n", "--driver-root", "/driver-root", "--host-driver-root", "/",
                                       "--nvidia-cdi-hook-path", "/usr/local/bin/nvidia-cdi-hook"])
    assert ctx.params["driver_root"] == "/driver-root" and ctx.params["host_driver_root"] == "/"
    assert ctx.params["cdi_hook_path"] == "/usr/local/bin/nvidia-cdi-hook"
    assert run_cmd.make_context("run", ["--node-name", "n"]).params["driver_root"] == "/"


def test_host_driver_command_shows_files_and_edits(tmp_path):
    import yaml

    from gpudra.cli.driver import command as driver_command

    root = fake_driver_root(tmp_path / "host")
    result = CliRunner().invoke(driver_command, ["host-driver", "--driver-root", root, "--host-driver-root", "/"])
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.output)
    assert shown["version"] == VERSION and shown["hook"] == "/usr/bin/nvidia-cdi-hook"
    assert {"hostPath": f"{LIBDIR}/libcuda.so.{VERSION}", "containerPath": f"{LIBDIR}/libcuda.so.{VERSION}",
            "options": list(MOUNT_OPTIONS)} in shown["containerEdits"]["mounts"]
    empty = CliRunner().invoke(driver_command, ["host-driver", "--driver-root", str(tmp_path / "empty")])
    assert empty.exit_code == 0 and "warning: driver root" in empty.output


def test_host_driver_command_prints_rows_or_the_report(tmp_path):
    from gpudra.cli import cli

    root = fake_driver_root(tmp_path)
    files = discover_host_driver(root, version=VERSION)
    edits = host_driver_edits(files)
    runner = CliRunner()

    def run(*output):
        result = runner.invoke(cli, ["driver", "host-driver", "--driver-root", root, "--driver-version", VERSION,
                                     *output])
        assert result.exit_code == 0, result.output
        return result

    report = run()  # into a pipe: YAML, as before
    assert yaml.safe_load(report.stdout) == json.loads(run("-o", "json").stdout) == yaml.safe_load(
        run("-o", "yaml").stdout)
    assert yaml.safe_load(report.stdout)["containerEdits"] == edits.to_dict()
    table = run("-o", "table")
    header, *rows = [line.split() for line in table.stdout.splitlines()]
    assert header == ["TYPE", "PATH"]
    expected = [*(["library", p] for p in files.libraries), *(["binary", p] for p in files.binaries),
                *(["firmware", p] for p in files.firmware), *(["ipc-socket", p] for p in files.ipc_sockets),
                ["cdi-hook", files.hook]]
    assert rows == expected
    assert f"driver {VERSION}" in table.stderr and f"{len(edits.mounts)} mounts" in table.stderr
    header, *rows = [line.split() for line in run("-o", "wide").stdout.splitlines()]
    assert header == ["TYPE", "PATH", "MOUNT-SOURCE"]
    sources = {m.container_path: m.host_path for m in edits.mounts}
    assert rows == [[kind, path, sources.get(path, "-")] for kind, path in expected]
    assert rows[0][2] == root + rows[0][1]
