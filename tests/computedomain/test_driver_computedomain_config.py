"""ComputeDomainChannelConfig / ComputeDomainDaemonConfig at admission: `gpudra validate` and the webhook (one check).

The rules are NVIDIA's (k8s-dra-driver-gpu api/nvidia.com/resource/v1beta1/computedomainconfig.go: Validate() refuses
an empty domainID; api.go: the StrictDecoder refuses unknown fields; computedomain.go: allocationMode Single or All)
plus two of gpudra's, each marked: the domainID must be a UID (upstream joins it into a directory path unchecked)
and an allocationMode other than Single/All is refused (upstream treats it as Single). The claim templates the
controller writes (templates/compute-domain-{workload,daemon}-claim-template.tmpl.yaml, rendered here) must pass.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from click.testing import CliRunner

from gpudra.api.load import Document
from gpudra.api.validate import validate_documents
from gpudra.cli import cli
from gpudra.device_config import ConfigError, claim_configs, drivers_config_problems
from gpudra.webhook.admission import review_response

NV = "resource.nvidia.com/v1beta1"
CD = "compute-domain.nvidia.com"
UID = "3f2a6c1e-8b7d-4e2f-9a1c-5d6e7f8a9b0c"


def channel(**fields: Any) -> dict:
    return {"apiVersion": NV, "kind": "ComputeDomainChannelConfig", **fields}


def daemon(**fields: Any) -> dict:
    return {"apiVersion": NV, "kind": "ComputeDomainDaemonConfig", **fields}


# (parameters, refused?, the rule) -- upstream unless marked gpudra
CASES = [
    (channel(domainID=UID), False, "computedomainconfig.go: a domainID is all a channel config needs"),
    (channel(domainID=UID, allocationMode="All"), False, "computedomain.go: ComputeDomainChannelAllocationModeAll"),
    (channel(domainID=UID, allocationMode="Single"), False, "computedomain.go: ...AllocationModeSingle"),
    (channel(domainID=UID, allocationMode=""), False, "allocationMode is omitempty: empty means Single"),
    (daemon(domainID=UID), False, "computedomainconfig.go: ComputeDomainDaemonConfig{domainID}"),
    (channel(domainID=""), True, "Validate(): domainID cannot be empty"),
    (channel(), True, "Validate(): domainID cannot be empty (absent)"),
    (daemon(domainID=""), True, "Validate(): domainID cannot be empty (daemon)"),
    (channel(domainID=UID, numNodes=2), True, "StrictDecoder: unknown field"),
    (daemon(domainID=UID, allocationMode="All"), True, "StrictDecoder: the daemon config has no allocationMode"),
    (channel(domainID=7), True, "StrictDecoder: domainID is a string"),
    ({"apiVersion": "resource.nvidia.com/v1", "kind": "ComputeDomainChannelConfig", "domainID": UID}, True,
     "scheme: only v1beta1 is registered"),
    ({"apiVersion": NV, "kind": "GpuConfig"}, True, "the compute-domain plugin decodes only its two kinds"),
    (channel(domainID="../../../etc"), True, "gpudra: the domainID names a directory, so it must be a UID"),
    (channel(domainID=UID.upper()), True, "gpudra: metadata.uid is lower case; prepare would never find this one"),
    (daemon(domainID="{" + UID + "}"), True, "gpudra: only the 36-character form the API server writes"),
    (channel(domainID=UID, allocationMode="all"), True, "gpudra: upstream would silently give one channel"),
]


def _template(parameters: dict, request: str = "channel") -> dict:
    """A ResourceClaimTemplate as the controller writes it (the claim-template .tmpl.yaml files)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t", "namespace": "default"},
            "spec": {"spec": {"devices": {
                "requests": [{"name": request, "exactly": {
                    "deviceClassName": f"compute-domain-{'default-channel' if request == 'channel' else 'daemon'}"
                                       ".nvidia.com"}}],
                "config": [{"requests": [request], "opaque": {"driver": CD, "parameters": parameters}}]}}}}


@pytest.mark.parametrize("parameters, refused, rule", CASES, ids=[c[2] for c in CASES])
def test_validate_and_webhook_agree_with_the_rules(parameters, refused, rule):
    obj = _template(parameters)
    problems = drivers_config_problems(obj)
    assert bool(problems) == refused, (rule, problems)
    assert all(driver == CD and path == "spec.spec.devices.config[0].opaque.parameters"
               for driver, path, _ in problems)
    errors = [p for p in validate_documents([Document(obj, "t.yaml", 1)]) if p.severity == "error"]
    assert bool(errors) == refused and all(f"the {CD} driver refuses this config" in p.message for p in errors)
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "r1", "operation": "CREATE", "object": obj,
        "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaimtemplates"}}}
    response = review_response(review)["response"]
    assert response["allowed"] is not refused
    if refused:
        assert response["status"]["message"].startswith("1 configs failed to validate: object at "
                                                         "spec.spec.devices.config[0].opaque.parameters is invalid")
    # prepare decodes with the same rules
    allocation = {"devices": {"config": [{"source": "FromClaim", "requests": ["channel"],
                                          "opaque": {"driver": CD, "parameters": parameters}}]}}
    if refused:
        with pytest.raises(ConfigError):
            claim_configs(allocation, CD, "compute-domain")
    else:
        [config] = claim_configs(allocation, CD, "compute-domain")
        assert config.domain is not None and config.domain.domain_id == UID


def test_the_controllers_claim_templates_pass():
    """templates/compute-domain-workload-claim-template.tmpl.yaml and ...-daemon-claim-template.tmpl.yaml rendered
    with a domain's UID (allocationMode rendered from the CRD's default, Single)."""
    uid = str(uuid.uuid4())
    for obj in (_template(channel(domainID=uid, allocationMode="Single")),
                _template(daemon(domainID=uid), request="daemon")):
        assert drivers_config_problems(obj) == []


def test_each_driver_refuses_the_others_kinds():
    """The GPU driver's configs stay GpuConfig/MigDeviceConfig; a ComputeDomainChannelConfig sent to gpu.nvidia.com
    is refused, and a GpuConfig sent to compute-domain.nvidia.com too."""
    obj = _template(channel(domainID=UID))
    obj["spec"]["spec"]["devices"]["config"].append(
        {"requests": ["channel"], "opaque": {"driver": "gpu.nvidia.com", "parameters": channel(domainID=UID)}})
    obj["spec"]["spec"]["devices"]["config"].append(
        {"requests": ["channel"], "opaque": {"driver": CD, "parameters": {"apiVersion": NV, "kind": "GpuConfig"}}})
    found = drivers_config_problems(obj)
    assert [(driver, path.split(".")[3]) for driver, path, _ in found] == [
        ("gpu.nvidia.com", "config[1]"), (CD, "config[2]")]
    assert drivers_config_problems(obj, compute_domain_driver=None) == found[:1]


def test_validate_cli_exits_1(tmp_path):
    import yaml

    path = tmp_path / "template.yaml"
    path.write_text(yaml.safe_dump(_template(channel(domainID=""))))
    result = CliRunner().invoke(cli, ["validate", "-f", str(path)])
    assert result.exit_code == 1
    assert "domainID cannot be empty" in result.output


def _json_values():
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=40),
                        st.sampled_from([UID, "", "All", "Single", "all", "../x", UID.upper()]))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=10), inner, max_size=3), max_leaves=8)


def test_decoding_any_parameters_gives_a_config_or_a_config_error():
    """Property: whatever JSON a claim carries, decoding answers with a DomainConfig whose domainID is a UUID and
    whose mode is Single or All, or with ConfigError, never another exception."""
    from hypothesis import given, settings, strategies as st

    from gpudra.device_config import decode_config

    keys = st.sampled_from(["apiVersion", "kind", "domainID", "allocationMode", "sharing", "extra"])
    values = st.one_of(st.sampled_from([NV, "ComputeDomainChannelConfig", "ComputeDomainDaemonConfig"]), _json_values())

    @settings(max_examples=100, deadline=None)
    @given(st.one_of(st.dictionaries(keys, values, max_size=5), _json_values()))
    def check(parameters):
        try:
            config = decode_config(parameters, "parameters", "compute-domain")
        except ConfigError:
            return
        assert config.domain is not None
        assert str(uuid.UUID(config.domain.domain_id)) == config.domain.domain_id.lower()
        assert config.domain.allocation_mode in ("Single", "All")
        assert config.kind in ("ComputeDomainChannelConfig", "ComputeDomainDaemonConfig")

    check()
