"""`gpudra driver run --feature-gates`: NVIDIA's gate names, defaults, messages, and what each switches.

The expected table is kubernetes-sigs/dra-driver-nvidia-gpu v0.5.0-dev (commit 95932046),
pkg/featuregates/featuregates.go `defaultFeatureGates`; the messages are k8s.io/component-base featuregate's
`featureGate.Set`/`unsafeSetFromMap` and NVIDIA's `ValidateFeatureGates`; the sharing refusal is NVIDIA's
api/nvidia.com/resource/v1beta1/validate.go `validateSharingStrategy`.
"""

from __future__ import annotations

import os

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.gpuplugin import featuregates
from gpudra.gpuplugin.agent import AgentError, AgentOptions, DriverAgent
from gpudra.gpuplugin.featuregates import FeatureGateError, parse_feature_gates
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim

# name: (default, stage) in NVIDIA's defaultFeatureGates, plus component-base's logging gates NVIDIA registers
NVIDIA_GATES = {
    "TimeSlicingSettings": (False, "ALPHA"), "MPSSupport": (False, "ALPHA"),
    "IMEXDaemonsWithDNSNames": (True, "BETA"), "PassthroughSupport": (False, "ALPHA"),
    "DynamicMIG": (False, "ALPHA"), "NVMLDeviceHealthCheck": (False, "ALPHA"),
    "ComputeDomainCliques": (True, "BETA"), "CrashOnNVLinkFabricErrors": (True, "BETA"),
    "DeviceMetadata": (False, "ALPHA"), "FabricManagerPartitioning": (False, "ALPHA"),
    "HostManagedIMEXDaemon": (False, "ALPHA"), "DRAListTypeAttributes": (False, "ALPHA"),
    "ConsumableShares": (False, "ALPHA"),
    "ContextualLogging": (True, "BETA"), "LoggingAlphaOptions": (False, "ALPHA"), "LoggingBetaOptions": (True, "BETA"),
}


def test_the_gate_table_is_nvidias():
    assert {g.name: (g.default, g.stage) for g in featuregates.GATES} == NVIDIA_GATES
    defaults = parse_feature_gates("")
    assert {name: defaults.enabled(name) for name in NVIDIA_GATES} == {n: d for n, (d, _) in NVIDIA_GATES.items()}


@pytest.mark.parametrize("text, message", [
    ("Bogus=true", "unrecognized feature gate: Bogus"),
    ("DynamicMIG", "missing bool value for DynamicMIG"),
    ("DynamicMIG=yes", 'invalid value of DynamicMIG=yes, err: strconv.ParseBool: parsing "yes": invalid syntax'),
    # NVIDIA's ValidateFeatureGates, in its order
    ("IMEXDaemonsWithDNSNames=false", "feature gate ComputeDomainCliques requires IMEXDaemonsWithDNSNames to also "
                                      "be enabled"),
    ("DynamicMIG=true,MPSSupport=true", "feature gate DynamicMIG is currently mutually exclusive with MPSSupport"),
    ("DynamicMIG=true,NVMLDeviceHealthCheck=true",
     "feature gate DynamicMIG is currently mutually exclusive with NVMLDeviceHealthCheck"),
    ("DeviceMetadata=true", "feature gate DeviceMetadata requires PassthroughSupport to also be enabled"),
    ("AllAlpha=true", "feature gate DynamicMIG is currently mutually exclusive with PassthroughSupport"),
    # what gpudra lacks: named, only as off
    ("HostManagedIMEXDaemon=true", "gpudra does not implement the hostManaged IMEX deployment mode"),
])
def test_refused_with_the_upstream_message(text, message):
    with pytest.raises(FeatureGateError) as refused:
        parse_feature_gates(text)
    assert message in str(refused.value)


def test_accepted_values_as_go_reads_them():
    gates = parse_feature_gates(" TimeSlicingSettings = T ,MPSSupport=1,,PassthroughSupport=False,"
                                "IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=0")
    assert gates.sharing_strategies() == {"TimeSlicing", "MPS"}
    assert not gates.enabled("IMEXDaemonsWithDNSNames")
    assert [g.name for g in gates.unimplemented_defaults()] == ["CrashOnNVLinkFabricErrors"]
    assert [g.name for g in parse_feature_gates("").unimplemented_defaults()] == ["CrashOnNVLinkFabricErrors"]
    assert parse_feature_gates("IMEXDaemonsWithDNSNames=true,ComputeDomainCliques=true").enabled("ComputeDomainCliques")
    assert parse_feature_gates("AllBeta=false,ComputeDomainCliques=false").enabled("CrashOnNVLinkFabricErrors") is False


def test_a_locked_gate_keeps_its_default(monkeypatch):
    locked = featuregates.GateSpec("Locked", True, featuregates.BETA, "0.9", "a test gate", locked=True)
    monkeypatch.setattr(featuregates, "SPECS", {**featuregates.SPECS, "Locked": locked})
    with pytest.raises(FeatureGateError, match="^cannot set feature gate Locked to false, feature is locked to true$"):
        parse_feature_gates("Locked=false")
    assert parse_feature_gates("Locked=true").set == {"Locked": True}


class _Captured(Exception):
    pass


def _options(monkeypatch, *args: str) -> AgentOptions:
    """The AgentOptions `driver run ARGS` builds (the agent itself is not started)."""
    seen: list[AgentOptions] = []

    def capture(options):
        seen.append(options)
        raise AgentError("captured")

    monkeypatch.setattr("gpudra.gpuplugin.agent.DriverAgent", capture)
    result = CliRunner().invoke(cli, ["driver", "run", "--backend", "simulated", "--node-name", "n",
                                      "--claims", "/nonexistent", *args])
    assert result.exit_code == 2 and "captured" in result.output, result.output
    return seen[0]


def test_each_implemented_gate_switches_what_gpudra_does(monkeypatch):
    default = _options(monkeypatch)
    assert default.sharing_strategies == frozenset() and not default.dynamic_mig and not default.numa_list
    assert default.health_events  # gpudra's own default, kept while the gate is not named
    on = _options(monkeypatch, "--feature-gates", "TimeSlicingSettings=true,MPSSupport=true,"
                  "DRAListTypeAttributes=true", "--features", "default,+ListTypeAttributes")
    assert on.sharing_strategies == {"TimeSlicing", "MPS"} and on.numa_list
    assert _options(monkeypatch, "--feature-gates", "DynamicMIG=true").dynamic_mig
    assert not _options(monkeypatch, "--feature-gates", "NVMLDeviceHealthCheck=false").health_events


@pytest.mark.parametrize("args, message", [
    (["--feature-gates", "Bogus=true"], "error: --feature-gates: unrecognized feature gate: Bogus"),
    (["--feature-gates", "DeviceMetadata=true"],
     "error: --feature-gates: feature gate DeviceMetadata requires PassthroughSupport to also be enabled"),
    (["--feature-gates", "PassthroughSupport=true", "--device-health"],
     "error: --device-health cannot be on with --feature-gates PassthroughSupport=true"),
    (["--feature-gates", "DRAListTypeAttributes=true", "--kubernetes-version", "1.35"],
     "Kubernetes 1.35 needs its DRAListTypeAttributes feature gate (not in Kubernetes 1.35)"),
    (["--feature-gates", "DRAListTypeAttributes=true", "--kubernetes-version", "1.35", "--features", "all"],
     "Kubernetes 1.35 needs its DRAListTypeAttributes feature gate (not in Kubernetes 1.35)"),
    (["--feature-gates", "DRAListTypeAttributes=true"],
     "Kubernetes 1.36 needs its DRAListTypeAttributes feature gate (alpha, off by default in 1.36)"),
    (["--feature-gates", "NVMLDeviceHealthCheck=true", "--no-device-health"],
     "error: --device-health says false but --feature-gates NVMLDeviceHealthCheck=true"),
])
def test_driver_run_refuses_before_starting(tmp_path, args, message):
    result = CliRunner().invoke(cli, ["driver", "run", "--backend", "simulated", "--node-name", "n",
                                      "--root", str(tmp_path), "--claims", str(tmp_path), *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not os.listdir(tmp_path), "nothing was started or written"


def _sharing_claim(root: str, strategy: str) -> tuple[str, str, str]:
    config = {"source": "FromClaim", "requests": ["gpus"],
              "opaque": {"driver": "gpu.nvidia.com", "parameters": {
                  "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": strategy}}}}
    obj = allocated_claim(strategy.lower(), [{"request": "gpus", "device": "gpu-0"}], node_name="n",
                          config=[config])
    with open(os.path.join(root, "claims", f"default_{strategy.lower()}.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(obj, fh)
    return "default", obj["metadata"]["name"], obj["metadata"]["uid"]


def test_prepare_refuses_a_sharing_strategy_whose_gate_is_off(driver_root):
    """TimeSlicingSettings on, MPSSupport off (NVIDIA's default): time-slicing prepares, MPS is refused."""
    gates = parse_feature_gates("TimeSlicingSettings=true")
    agent = DriverAgent(AgentOptions(node_name="n", root=driver_root, claims_dir=os.path.join(driver_root, "claims"),
                                     fsync=False, health_events=False, sharing_strategies=gates.sharing_strategies()))
    agent.start()
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        mps = _sharing_claim(driver_root, "MPS")
        assert kubelet.prepare([mps]).claims[mps[2]].error.endswith(
            '"MPS" is selected as the GPU sharing strategy, but the "MPSSupport" feature gate is not enabled')
        sliced = _sharing_claim(driver_root, "TimeSlicing")
        assert not kubelet.prepare([sliced]).claims[sliced[2]].error
    finally:
        kubelet.close()
        agent.stop()
