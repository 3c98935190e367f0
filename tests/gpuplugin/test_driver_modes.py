"""Modes of what the driver creates do not depend on the umask; socket paths are checked against
the limit gRPC really has, with a clear message instead of a traceback."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.gpuplugin.agent import AgentError, AgentOptions, DriverAgent
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim
from gpudra.kubeletplugin.paths import DriverPaths
from gpudra.kubeletplugin.plugin import SOCKET_PATH_MAX


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def root():
    path = tempfile.mkdtemp(prefix="gdm", dir="/tmp")  # short: unix socket paths are limited
    old = os.umask(0)  # the worst umask: everything would be world-writable
    yield path
    os.umask(old)
    shutil.rmtree(path, ignore_errors=True)


def _agent(root: str, **kw) -> DriverAgent:
    claims = os.path.join(root, "claims")
    os.makedirs(claims, exist_ok=True)
    return DriverAgent(AgentOptions(node_name="n", profile="dgx-h100", root=root, claims_dir=claims, fsync=False,
                                    dynamic_mig=True, **kw))


def test_everything_the_driver_creates_has_an_explicit_mode_under_umask_000(root):
    agent = _agent(root)
    agent.start()
    try:
        claim = allocated_claim("c", [{"request": "gpu", "device": "gpu-1-mig-1g10gb-19-0"}], node_name="n")
        with open(os.path.join(root, "claims", "default_c.yaml"), "w") as fh:
            yaml.safe_dump(claim, fh)
        kubelet = KubeletClient(agent.paths.registration_socket)
        kubelet.register()
        uid = claim["metadata"]["uid"]
        assert kubelet.prepare([("default", "c", uid)]).claims[uid].error == ""
        kubelet.close()
        paths = agent.paths
        assert _mode(paths.registration_socket) == 0o600
        assert _mode(paths.dra_socket) == 0o600
        assert _mode(paths.plugin_dir) == 0o700
        assert _mode(os.path.dirname(paths.registration_socket)) == 0o700
        assert _mode(paths.checkpoint) == 0o600
        assert _mode(paths.cdi_spec_dir) == 0o755
        [spec] = os.listdir(paths.cdi_spec_dir)
        assert _mode(os.path.join(paths.cdi_spec_dir, spec)) == 0o644
        assert _mode(os.path.dirname(paths.simulated_state)) == 0o700
    finally:
        agent.stop()


def test_a_socket_group_gets_mode_0660(root):
    gid = os.getgid()
    agent = _agent(root, socket_group=str(gid))
    agent.start()
    try:
        for sock in (agent.paths.registration_socket, agent.paths.dra_socket):
            assert _mode(sock) == 0o660 and os.stat(sock).st_gid == gid
    finally:
        agent.stop()
    with pytest.raises(AgentError, match="no group named"):
        _agent(root, socket_group="no-such-group-gpudra").start()


def _root_for_socket_length(base: str, length: int) -> str:
    """A --root whose longest socket path is exactly `length` bytes."""
    probe = DriverPaths(root="/r")
    longest = max(len(probe.registration_socket), len(probe.dra_socket)) - len("/r")
    pad = length - longest - len(base) - 1
    assert pad > 0
    return os.path.join(base, "p" * pad)


def test_socket_paths_at_the_limit_work_and_one_byte_more_is_a_clear_error(root):
    at_limit = _root_for_socket_length(root, SOCKET_PATH_MAX)
    agent = _agent(at_limit)
    agent.start()
    try:
        kubelet = KubeletClient(agent.paths.registration_socket)
        kubelet.register()  # gRPC really serves on a path of this length
        kubelet.close()
    finally:
        agent.stop()
    too_long = _root_for_socket_length(root, SOCKET_PATH_MAX + 1)
    os.makedirs(os.path.join(too_long, "claims"))
    result = CliRunner(env={"KUBECONFIG": None}).invoke(
        cli, ["driver", "run", "--node-name", "n", "--root", too_long, "--claims", os.path.join(too_long, "claims")])
    assert result.exit_code == 2, result.output
    assert f"is {SOCKET_PATH_MAX + 1} bytes; gRPC allows at most {SOCKET_PATH_MAX}" in result.output
    assert "Traceback" not in result.output


def test_socket_length_counts_bytes_not_characters(root):
    from gpudra.kubeletplugin.plugin import check_socket_path

    ascii_path = "/" + "a" * (SOCKET_PATH_MAX - 1)
    check_socket_path(ascii_path)
    with pytest.raises(ValueError, match="bytes"):
        check_socket_path("/" + "é" * ((SOCKET_PATH_MAX + 1) // 2))  # fewer characters, more bytes
