"""`gpudra mig apply` and `gpudra mig manager` on the simulated backend.

The manager talks to a loopback API server (Nodes: get, patch, watch) through the official Kubernetes
client, as it would to a cluster; the node driver runs beside it and republishes when asked.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
import yaml
from click.testing import CliRunner

from support.fake_http import JsonHandler, write_kubeconfig

from gpudra.cli import cli
from gpudra.discovery import open_backend
from gpudra.kubeletplugin.checkpoint import empty_checkpoint, save_checkpoint
from gpudra.kubeletplugin.paths import DriverPaths
from gpudra.mig.apply import ApplyError, ApplyRefused, apply_config, is_applied
from gpudra.mig.config import generate_config
from gpudra.catalog import gpu_model
from gpudra.mig.manager import CONFIG_LABEL, STATE_LABEL, KubeNodeLabels, MigManager

NODE = "mig-node"


@pytest.fixture()
def node(tmp_path):
    """A simulated DGX H100 whose GPU state lives under a driver root, and the H100 mig-parted config."""
    root = tempfile.mkdtemp(prefix="gmm", dir="/tmp")  # short: the driver's unix socket paths live under it
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(generate_config([gpu_model("h100")]), sort_keys=False))
    yield DriverPaths(root=root), str(config)
    shutil.rmtree(root, ignore_errors=True)


def _sim(paths: DriverPaths):
    return open_backend("simulated", profile="dgx-h100", node_name=NODE, state_path=paths.simulated_state)


def _layout(paths: DriverPaths) -> list[list[tuple[str, int]]]:
    return [[(m.profile, m.placement_start) for m in g.mig_devices] for g in _sim(paths).inventory().gpus]


def _apply(paths: DriverPaths, config: str, name: str):
    return CliRunner().invoke(cli, ["mig", "apply", "-f", config, "-c", name, "--backend", "simulated",
                                    "--profile", "dgx-h100", "--node-name", NODE, "--root", paths.root])


def _hold(paths: DriverPaths, minor: int) -> None:
    """A prepared claim with a device on GPU `minor`, as the driver checkpoints it."""
    data = empty_checkpoint("boot")
    data["claims"]["uid-1"] = {"state": "PrepareCompleted", "namespace": "ml", "name": "train",
                               "devices": [{"device": f"gpu-{minor}", "gpuMinor": minor, "type": "gpu"}]}
    os.makedirs(paths.plugin_dir, exist_ok=True)
    save_checkpoint(paths.checkpoint, data, fsync=False)


def test_apply_creates_the_layout_and_asks_the_driver_to_republish(node):
    paths, config = node
    result = _apply(paths, config, "all-balanced")
    assert result.exit_code == 0, result.output
    assert result.output.count("changed: gpu-") == 8
    balanced = [("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]
    assert all(sorted(gpu, key=lambda x: x[1]) == balanced for gpu in _layout(paths))
    assert os.path.exists(paths.republish_request)
    again = _apply(paths, config, "all-balanced")  # already applied: nothing is touched
    assert again.exit_code == 0 and again.output.count("unchanged: gpu-") == 8 and "changed: gpu" not in \
        again.output.replace("unchanged", "")
    disabled = _apply(paths, config, "all-disabled")
    assert disabled.exit_code == 0 and _layout(paths) == [[]] * 8
    assert not any(g.mig_enabled for g in _sim(paths).inventory().gpus)


def test_apply_follows_devices_and_device_filter(node):
    paths, _ = node
    document = {"version": "v1", "mig-configs": {"mixed": [
        {"devices": "all", "mig-enabled": False},
        {"devices": [1, 3], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"device-filter": "0x233010DE", "devices": [3], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
        {"device-filter": "0x20B010DE", "devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}},
    ]}}
    result = apply_config(_sim(paths), document, "mixed")
    assert len(result.changed) == 2  # gpu-1 and gpu-3; the others stay as they are (MIG off)
    layout = _layout(paths)
    assert layout[1] == [("3g.40gb", 0), ("3g.40gb", 4)] and layout[3] == [("7g.80gb", 0)]
    assert [g for i, g in enumerate(layout) if i not in (1, 3)] == [[]] * 6
    assert is_applied(_sim(paths), document, "mixed")


def test_apply_refuses_while_claims_hold_a_gpu_that_would_change(node):
    paths, config = node
    _hold(paths, 2)
    result = _apply(paths, config, "all-1g.10gb")
    assert result.exit_code == 1
    assert "gpu-2: claim ml/train (uid-1) holds gpu-2" in result.output
    assert _layout(paths) == [[]] * 8  # nothing was touched, not even the free GPUs
    document = {"version": "v1", "mig-configs": {"others": [
        {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}
    assert len(apply_config(_sim(paths), document, "others", _checkpoint(paths)).changed) == 2


def test_apply_reads_the_checkpoint_where_the_driver_keeps_it(node):
    # A driver run with another --kubelet-plugins-directory-path (microk8s, k0s, gpudra's local cluster) keeps its
    # checkpoint there: mig apply must look there too, or it sees no claims and repartitions GPUs in use.
    default, config = node
    paths = DriverPaths(root=default.root, plugins_dir="/plugins")
    _hold(paths, 2)
    flag = ["--kubelet-plugins-directory-path", "/plugins"]
    result = CliRunner().invoke(cli, ["mig", "apply", "-f", config, "-c", "all-1g.10gb", "--backend", "simulated",
                                      "--profile", "dgx-h100", "--node-name", NODE, "--root", paths.root, *flag])
    assert result.exit_code == 1, result.output
    assert "gpu-2: claim ml/train (uid-1) holds gpu-2" in result.output and _layout(paths) == [[]] * 8
    document = {"version": "v1", "mig-configs": {"gpu0": [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]}}
    tmp = os.path.join(paths.root, "gpu0.yaml")
    with open(tmp, "w", encoding="utf-8") as fh:
        yaml.safe_dump(document, fh)
    changed = CliRunner().invoke(cli, ["mig", "apply", "-f", tmp, "-c", "gpu0", "--backend", "simulated",
                                       "--profile", "dgx-h100", "--node-name", NODE, "--root", paths.root, *flag])
    assert changed.exit_code == 0, changed.output
    assert os.path.exists(paths.republish_request) and not os.path.exists(default.republish_request)


def _checkpoint(paths: DriverPaths):
    from gpudra.kubeletplugin.checkpoint import read_checkpoint

    return read_checkpoint(paths.checkpoint)


@pytest.mark.parametrize("name, message", [
    ("nope", "no mig-parted config named 'nope'; the file has: all-disabled"),
])
def test_apply_usage_errors(node, name, message):
    paths, config = node
    result = _apply(paths, config, name)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    with pytest.raises(ApplyError, match="4g.40gb ×2"):
        apply_config(_sim(paths), {"version": "v1", "mig-configs": {"big": [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 2}}]}}, "big")


def test_configmap_output_is_what_apply_reads(node, tmp_path):
    paths, _ = node
    result = CliRunner().invoke(cli, ["mig", "configs", "--gpu", "h100", "-o", "configmap", "--namespace", "ops"])
    assert result.exit_code == 0
    configmap = yaml.safe_load(result.output)
    assert (configmap["kind"], configmap["metadata"]) == ("ConfigMap", {"name": "default-mig-parted-config",
                                                                        "namespace": "ops"})
    assert yaml.safe_load(configmap["data"]["config.yaml"]) == generate_config([gpu_model("h100")])
    path = tmp_path / "cm.yaml"
    path.write_text(result.output)
    assert _apply(paths, str(path), "all-7g.80gb").exit_code == 0
    assert _layout(paths) == [[("7g.80gb", 0)]] * 8


class NodeApiServer:
    """Just enough of the API server for a node's labels: get, merge patch, and watch (list?watch=true)."""

    def __init__(self, labels: dict[str, str]):
        self.node = {"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": NODE, "uid": "u1", "labels": dict(labels), "resourceVersion": "1"}}
        self.history: list[dict] = []  # node object after every change
        self.patches: list[dict] = []
        self.changed = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        with self.changed:
            self.changed.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def kubeconfig(self, path: str) -> str:
        return write_kubeconfig(path, self._server.server_address)

    def set_labels(self, **labels: str) -> None:
        with self.changed:
            self.node["metadata"]["labels"].update(labels)
            self._bump()

    def _bump(self) -> None:
        meta = self.node["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        self.history.append(json.loads(json.dumps(self.node)))
        self.changed.notify_all()

    @property
    def labels(self) -> dict[str, str]:
        return self.node["metadata"]["labels"]

    def _handler(self):
        server = self

        class Handler(JsonHandler):

            def do_GET(self):  # noqa: N802
                url = urlparse(self.path)
                query = parse_qs(url.query)
                if url.path == f"/api/v1/nodes/{NODE}":
                    with server.changed:
                        return self._send(200, server.node)
                if url.path == "/api/v1/nodes" and query.get("watch") == ["true"]:
                    return self._watch(int(query.get("resourceVersion", ["0"])[0] or 0),
                                       float(query.get("timeoutSeconds", ["5"])[0]))
                self._send(404, {"kind": "Status", "code": 404})

            def _watch(self, since: int, timeout: float) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                deadline = time.monotonic() + timeout
                sent = since
                with server.changed:
                    while time.monotonic() < deadline:
                        for node in server.history:
                            version = int(node["metadata"]["resourceVersion"])
                            if version > sent:
                                self.wfile.write(json.dumps({"type": "MODIFIED", "object": node}).encode() + b"\n")
                                self.wfile.flush()
                                sent = version
                        server.changed.wait(max(0.0, min(0.2, deadline - time.monotonic())))
                self.close_connection = True

            def do_PATCH(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with server.changed:
                    server.patches.append(body)
                    server.node["metadata"]["labels"].update(body["metadata"]["labels"])
                    server._bump()
                    return self._send(200, server.node)

        return Handler


def _wait_for(predicate, what: str, steps: int = 4800) -> None:
    for _ in range(steps):  # bounded by steps (each 25 ms), not by a wall-clock assertion
        if predicate():
            return
        time.sleep(0.025)
    raise AssertionError(f"timed out waiting for {what}")


def _manager(api: NodeApiServer, paths: DriverPaths, config: str, tmp_path) -> MigManager:
    from gpudra.cli.mig import read_driver_checkpoint
    from gpudra.mig.apply import read_config_file

    nodes = KubeNodeLabels.from_kubeconfig(api.kubeconfig(str(tmp_path / "kubeconfig")))
    return MigManager(nodes, NODE, _sim(paths), load_config=lambda: read_config_file(config),
                      read_checkpoint=lambda: read_driver_checkpoint(paths.checkpoint),
                      request_republish=paths.request_republish, resync_s=1)


def test_manager_follows_the_label_reports_state_and_the_driver_republishes(node, tmp_path):
    from gpudra.gpuplugin.agent import AgentOptions, DriverAgent

    paths, config = node
    claims = tempfile.mkdtemp(prefix="gmm", dir="/tmp")
    agent = DriverAgent(AgentOptions(node_name=NODE, profile="dgx-h100", root=paths.root, claims_dir=claims,
                                     fsync=False, republish_poll_s=0.05))
    agent.start()
    try:
        with NodeApiServer({CONFIG_LABEL: "all-disabled"}) as api:
            manager = _manager(api, paths, config, tmp_path)
            thread = threading.Thread(target=manager.run, daemon=True)
            thread.start()
            _wait_for(lambda: api.labels.get(STATE_LABEL) == "success", "all-disabled asserted")
            assert api.patches == [{"metadata": {"labels": {STATE_LABEL: "success"}}}]  # nothing to change
            api.set_labels(**{CONFIG_LABEL: "all-3g.40gb"})
            _wait_for(lambda: _layout(paths) == [[("3g.40gb", 0), ("3g.40gb", 4)]] * 8
                      and api.labels.get(STATE_LABEL) == "success", "all-3g.40gb applied")
            states = [p["metadata"]["labels"][STATE_LABEL] for p in api.patches]
            assert states == ["success", "pending", "success"]
            _wait_for(lambda: agent.republished >= 1, "the driver republished")
            with open(os.path.join(paths.plugin_dir, "resourceslices.yaml"), encoding="utf-8") as fh:
                names = [d["name"] for s in yaml.safe_load_all(fh) for d in s["spec"].get("devices", [])]
            assert "gpu-0-mig-3g40gb-9-4" in names and "gpu-0" not in names

            _hold(paths, 5)  # a claim arrives on GPU 5: the next config is refused until it is gone
            api.set_labels(**{CONFIG_LABEL: "all-1g.10gb"})
            _wait_for(lambda: api.labels.get(STATE_LABEL) == "failed", "refused while claims hold gpu-5")
            assert "claim ml/train (uid-1) holds gpu-5" in manager.last_error
            assert _layout(paths)[0] == [("3g.40gb", 0), ("3g.40gb", 4)]
            os.remove(paths.checkpoint)  # unprepared: the resync applies it
            _wait_for(lambda: api.labels.get(STATE_LABEL) == "success", "applied on resync")
            assert _layout(paths)[5] == [("1g.10gb", s) for s in range(7)]

            api.set_labels(**{CONFIG_LABEL: "no-such-config"})
            _wait_for(lambda: api.labels.get(STATE_LABEL) == "failed", "unknown config fails")
            assert "no mig-parted config named 'no-such-config'" in manager.last_error
            manager.stop()
            thread.join(timeout=10)
    finally:
        agent.stop()


def test_manager_cli_needs_a_cluster(node, tmp_path):
    paths, config = node
    result = CliRunner().invoke(cli, ["mig", "manager", "-f", config, "--backend", "simulated", "--root", paths.root])
    assert result.exit_code == 2 and "--kubeconfig or --in-cluster" in result.output
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\n")
    result = CliRunner().invoke(cli, ["mig", "manager", "-f", config, "--backend", "simulated", "--root", paths.root,
                                      "--kubeconfig", str(broken)])
    assert result.exit_code == 2 and "cannot load the cluster configuration" in result.output
    assert "Traceback" not in result.output


def test_refusal_lists_every_claim():
    refused = ApplyRefused({3: ["claim a/b (u1) holds gpu-3"], 1: ["claim c/d (u2) holds gpu-1-mig-1g10gb-19-0"]})
    assert str(refused).splitlines()[1:] == ["  gpu-1: claim c/d (u2) holds gpu-1-mig-1g10gb-19-0",
                                             "  gpu-3: claim a/b (u1) holds gpu-3"]
