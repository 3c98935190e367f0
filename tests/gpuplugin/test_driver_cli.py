"""`gpudra driver run` error handling, the TCP health endpoint and `gpudra cdi` on a running node."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import grpc
import pytest
import yaml
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpudra.cli import cli
from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from gpudra.kubeletplugin.paths import DriverPaths
from tests.support.builders import allocated_claim


def test_run_without_a_claim_source_is_a_clean_error(tmp_path):
    result = CliRunner(env={"KUBECONFIG": None}).invoke(
        cli, ["driver", "run", "--node-name", "n", "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert "no claim source" in result.output and "Traceback" not in result.output


def test_run_with_a_root_too_deep_for_unix_sockets(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    result = CliRunner(env={"KUBECONFIG": None}).invoke(
        cli, ["driver", "run", "--node-name", "n", "--root", str(deep), "--claims", str(tmp_path)])
    assert result.exit_code == 2 and "shorter" in result.output


def test_run_with_a_corrupt_checkpoint_refuses_to_start(tmp_path):
    plugin_dir = tmp_path / "var/lib/kubelet/plugins/gpu.nvidia.com"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "checkpoint.json").write_text("{oops")
    result = CliRunner(env={"KUBECONFIG": None}).invoke(
        cli, ["driver", "run", "--node-name", "n", "--root", str(tmp_path), "--claims", str(tmp_path)])
    assert result.exit_code == 2 and "checkpoint" in result.output and "not valid JSON" in result.output


def test_tcp_health_endpoint_and_cdi_cli_on_a_running_node():
    root = tempfile.mkdtemp(prefix="gdh", dir="/tmp")
    claims = os.path.join(root, "claims")
    os.makedirs(claims)
    agent = DriverAgent(AgentOptions(node_name="n", profile="dgx-b200", root=root, claims_dir=claims,
                                     healthcheck_port=0, fsync=False))
    agent.start()
    try:
        port = agent.plugin.healthcheck_port
        assert port > 0
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="liveness"),
                                                              timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        claim = allocated_claim("c", [{"request": "gpu", "device": "gpu-3"}], node_name="n")
        with open(os.path.join(claims, "default_c.yaml"), "w") as fh:
            yaml.safe_dump(claim, fh)
        kubelet = KubeletClient(agent.paths.registration_socket)
        kubelet.register()
        uid = claim["metadata"]["uid"]
        [cdi_id] = kubelet.prepare([("default", "c", uid)]).claims[uid].devices[0].cdi_device_ids
        kubelet.close()
        runner = CliRunner()
        applied = runner.invoke(cli, ["cdi", "apply", "--root", root, cdi_id])
        assert applied.exit_code == 0, applied.output
        oci = json.loads(applied.output)
        assert "/dev/nvidia3" in [d["path"] for d in oci["linux"]["devices"]]
        listed = runner.invoke(cli, ["cdi", "list", "--root", root, "-o", "json"])
        assert [device["name"] for device in json.loads(listed.stdout)] == [cdi_id]
        spec_file = os.path.join(agent.paths.cdi_spec_dir, f"k8s.gpu.nvidia.com-claim_{uid}.yaml")
        assert runner.invoke(cli, ["cdi", "validate", spec_file]).exit_code == 0
        bad = os.path.join(root, "bad.yaml")
        with open(bad, "w") as fh:
            fh.write("cdiVersion: 0.3.0\nkind: v.com/x\ndevices: [{name: '-x', containerEdits: {}}]\n")
        result = runner.invoke(cli, ["cdi", "validate", bad])
        assert result.exit_code == 1 and "invalid device name" in result.output
        missing = runner.invoke(cli, ["cdi", "apply", "--root", root, "k8s.gpu.nvidia.com/claim=nope"])
        assert missing.exit_code == 2 and "unresolvable CDI devices" in missing.output
    finally:
        agent.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_prepare_and_status_commands_against_a_running_driver():
    root = tempfile.mkdtemp(prefix="gdp", dir="/tmp")
    claims = os.path.join(root, "claims")
    os.makedirs(claims)
    agent = DriverAgent(AgentOptions(node_name="n", profile="hgx-a100-mig", root=root, claims_dir=claims,
                                     fsync=False))
    agent.start()
    try:
        claim = allocated_claim("c", [{"request": "gpu", "device": "gpu-1-mig-1g10gb-19-4"}], node_name="n")
        path = os.path.join(claims, "default_c.yaml")
        with open(path, "w") as fh:
            yaml.safe_dump(claim, fh)
        runner = CliRunner()
        result = runner.invoke(cli, ["driver", "prepare", "--root", root, "--show-container", path])
        assert result.exit_code == 0, result.output
        [entry] = yaml.safe_load(result.output)
        assert entry["devices"][0]["device"] == "gpu-1-mig-1g10gb-19-4"
        assert "/dev/nvidia1" in entry["container"]["devices"]
        assert sum(p.startswith("/dev/nvidia-caps/") for p in entry["container"]["devices"]) == 2
        # -o table|wide: one row per claim (a second prepare of a prepared claim answers the same)
        header, row = runner.invoke(cli, ["driver", "prepare", "--root", root, path, "-o", "table"]).stdout.splitlines()
        assert header.split() == ["CLAIM", "UID", "DEVICES", "STATUS"]
        assert row.split() == ["default/c", entry["uid"], "gpu-1-mig-1g10gb-19-4", "Prepared"]
        wide = runner.invoke(cli, ["driver", "prepare", "--root", root, "--show-container", path, "-o", "wide"])
        header, row = wide.stdout.splitlines()
        assert header.split() == ["CLAIM", "UID", "DEVICES", "CDI-DEVICE-IDS", "CONTAINER-DEVICES", "STATUS"]
        assert row.split() == ["default/c", entry["uid"], "gpu-1-mig-1g10gb-19-4",
                               ",".join(entry["devices"][0]["cdiDeviceIDs"]), ",".join(entry["container"]["devices"]),
                               "Prepared"]
        assert json.loads(runner.invoke(cli, ["driver", "prepare", "--root", root, "--show-container", path,
                                              "-o", "json"]).stdout) == [entry]
        status = yaml.safe_load(runner.invoke(cli, ["driver", "status", "--root", root]).output)
        assert [c["devices"] for c in status["claims"]] == [["gpu-1-mig-1g10gb-19-4"]]
        assert status["claims"][0]["state"] == "PrepareCompleted" and status["claims"][0]["cdiSpec"]
        done = runner.invoke(cli, ["driver", "prepare", "--unprepare", "--root", root, path])
        assert done.exit_code == 0
        assert yaml.safe_load(runner.invoke(cli, ["driver", "status", "--root", root]).output)["claims"] == []
        other = allocated_claim("o", [{"request": "gpu", "device": "gpu-9"}], node_name="n")
        bad = os.path.join(root, "o.yaml")
        with open(bad, "w") as fh:
            yaml.safe_dump(other, fh)
        failed = runner.invoke(cli, ["driver", "prepare", "--root", root, bad])
        assert failed.exit_code == 1 and "error" in yaml.safe_load(failed.output)[0]
        failed_row = runner.invoke(cli, ["driver", "prepare", "--root", root, bad, "-o", "table"])
        assert failed_row.exit_code == 1
        assert failed_row.stdout.splitlines()[1].split()[:4] == ["default/o", other["metadata"]["uid"], "-", "error:"]
    finally:
        agent.stop()
        shutil.rmtree(root, ignore_errors=True)
    missing = CliRunner().invoke(cli, ["driver", "prepare", "--root", root, __file__])
    assert missing.exit_code == 2


def test_prepare_takes_the_list_that_allocate_prints():
    # `gpudra allocate -o yaml` prints a v1 List; the walkthrough pipes it to the driver's --claims and `prepare`.
    root = tempfile.mkdtemp(prefix="gdl", dir="/tmp")
    claims = os.path.join(root, "claims")
    os.makedirs(claims)
    agent = DriverAgent(AgentOptions(node_name="n", profile="l4-node", root=root, claims_dir=claims, fsync=False))
    agent.start()
    try:
        claim = allocated_claim("c", [{"request": "gpu", "device": "gpu-2"}], node_name="n")
        path = os.path.join(claims, "allocated.yaml")
        with open(path, "w") as fh:
            yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [claim]}, fh)
        result = CliRunner().invoke(cli, ["driver", "prepare", "--root", root, path])
        assert result.exit_code == 0, result.output
        assert yaml.safe_load(result.output)[0]["devices"][0]["device"] == "gpu-2"
    finally:
        agent.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_status_prints_one_row_per_prepared_claim(tmp_path):
    """`driver status -o table|wide`: the checkpoint's prepared claims as rows (a bad entry as an Invalid row and a
    warning); yaml/json: the same report as data, with each claim's CDI device IDs."""
    from test_driver_checkpoint_robust import BAD_UID, _rewrite
    from test_driver_state import Env

    env = Env(tmp_path)
    env.state.reconcile()
    ref = env.claim("train", ["gpu-0", "gpu-1"])
    env.state.prepare(ref)
    runner = CliRunner()
    status = json.loads(runner.invoke(cli, ["driver", "status", "--root", env.root, "-o", "json"]).stdout)
    [claim] = status["claims"]
    assert claim["claim"] == "default/train" and claim["devices"] == ["gpu-0", "gpu-1"]
    assert len(claim["cdiDeviceIDs"]) >= 2 and all(i.startswith("k8s.gpu.nvidia.com/") for i in claim["cdiDeviceIDs"])
    assert yaml.safe_load(runner.invoke(cli, ["driver", "status", "--root", env.root, "-o", "yaml"]).stdout) == status
    table = runner.invoke(cli, ["driver", "status", "--root", env.root, "-o", "table"])
    assert table.exit_code == 0, table.output
    header, row = table.stdout.splitlines()
    assert header.split() == ["CLAIM", "UID", "STATE", "DEVICES"]
    assert row.split() == ["default/train", ref.uid, "PrepareCompleted", "gpu-0,gpu-1"]
    wide = runner.invoke(cli, ["driver", "status", "--root", env.root, "-o", "wide"])
    header, row = wide.stdout.splitlines()
    assert header.split() == ["CLAIM", "UID", "STATE", "DEVICES", "CDI-DEVICE-IDS", "CDI-SPEC"]
    assert row.split() == ["default/train", ref.uid, "PrepareCompleted", "gpu-0,gpu-1",
                           ",".join(claim["cdiDeviceIDs"]), claim["cdiSpec"]]
    _rewrite(env.paths.checkpoint, lambda claims: claims.__setitem__(BAD_UID, {"state": "PrepareCompleted"}))
    damaged = runner.invoke(cli, ["driver", "status", "--root", env.root, "-o", "table"])
    rows = [line.split() for line in damaged.stdout.splitlines()[1:]]
    assert ["-", BAD_UID, "Invalid", "-"] in rows and len(rows) == 2
    assert f"warning: checkpoint entry {BAD_UID}: namespace: must be a string" in damaged.stderr
    nothing = runner.invoke(cli, ["driver", "status", "--root", str(tmp_path / "nothing"), "-o", "table"])
    assert nothing.exit_code == 2 and nothing.stdout == ""  # no driver there: a wrong --root (issue 21)
    assert "error: no gpu.nvidia.com driver under" in nothing.stderr and not (tmp_path / "nothing").exists()
    os.makedirs(DriverPaths(root=str(tmp_path / "idle")).plugin_dir)  # a driver that prepared nothing yet
    empty = runner.invoke(cli, ["driver", "status", "--root", str(tmp_path / "idle"), "-o", "table"])
    assert empty.exit_code == 0 and empty.stdout == ""
    assert "no prepared claims" in empty.stderr


@pytest.mark.parametrize("how", ["--kubeconfig", "KUBECONFIG", "--in-cluster", "--profile"])
def test_run_refuses_to_publish_simulated_gpus_it_was_not_asked_for(tmp_path, monkeypatch, how):
    """Issue 20, finding 8: `--backend auto` fell back to simulated GPUs with only a warning while publishing to a
    real cluster, whose scheduler then placed pods on GPUs that do not exist. Publishing, simulated GPUs are only
    used when `--backend simulated` says so; nothing is written under the root before the refusal."""
    import gpudra.discovery.backends as backend_module

    monkeypatch.setattr(backend_module, "nvml_available", lambda: False)
    kubeconfig = str(tmp_path / "kubeconfig")
    root = tmp_path / "root"
    root.mkdir()
    base = ["driver", "run", "--node-name", "n", "--root", str(root)]
    env = {"KUBECONFIG": None}
    extra = {"--kubeconfig": ["--kubeconfig", kubeconfig], "--in-cluster": ["--in-cluster"],
             "--profile": ["--kubeconfig", kubeconfig, "--profile", "a100-40gb-node"], "KUBECONFIG": []}[how]
    if how == "KUBECONFIG":
        env = {"KUBECONFIG": kubeconfig}
    result = CliRunner(env=env).invoke(cli, base + extra)
    assert result.exit_code == 2, result.output
    assert "SIMULATED GPUs" in result.output and "pass --backend simulated" in result.output
    assert ("--profile names a simulated node" if how == "--profile" else "no NVIDIA driver") in result.output
    assert f"cluster of {how if how != '--profile' else '--kubeconfig'}" in result.output
    assert "Traceback" not in result.output
    assert os.listdir(root) == []
    asked = CliRunner(env={"KUBECONFIG": None}).invoke(cli, base + ["--backend", "simulated"] + extra)
    assert "SIMULATED GPUs" not in asked.output  # asked for by name: not this refusal (it fails on the kubeconfig)
