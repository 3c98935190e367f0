"""Opaque driver configs checked at admission: `gpudra validate` and `gpudra driver webhook` (one check).

The webhook is exercised as the API server uses it: a client posts admission.k8s.io/v1 AdmissionReview objects
over HTTPS (certificate verified against a self-signed CA made here with `cryptography`) to a server started in
the test, and, end to end, to the `gpudra driver webhook` command in a subprocess. What NVIDIA's webhook refuses
(k8s-dra-driver-gpu api/nvidia.com/resource/v1beta1: strict decoding, sharing strategy, interval, thread
percentage) is written out here as cases, each with the upstream rule it follows.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import os
import re
import select
import signal
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given, settings, strategies as st

from gpudra.api.load import Document
from gpudra.api.validate import validate_documents
from gpudra.cli import cli
from gpudra.device_config import opaque_config_problems
from gpudra.webhook.admission import ReviewError, review_response
from gpudra.webhook.server import VALIDATE_PATH, WebhookServer, start_in_thread

DEPLOY = Path(__file__).parent.parent.parent / "deploy"
NV = "resource.nvidia.com/v1beta1"


def _config(parameters: Any, driver: str = "gpu.nvidia.com") -> dict:
    return {"requests": ["gpu"], "opaque": {"driver": driver, "parameters": parameters}}


def _claim(*configs: dict, api_version: str = "resource.k8s.io/v1", kind: str = "ResourceClaim") -> dict:
    request: dict = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    if api_version.endswith("v1beta1"):
        request = {"name": "gpu", "deviceClassName": "gpu.nvidia.com"}
    spec = {"devices": {"requests": [request], "config": list(configs)}}
    if kind == "ResourceClaimTemplate":
        spec = {"spec": spec}
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "c", "namespace": "default"}, "spec": spec}


# (parameters, refused?, the upstream rule) -- api/nvidia.com/resource/v1beta1 of k8s-dra-driver-gpu
CASES = [
    ({"apiVersion": NV, "kind": "GpuConfig"}, False, "no sharing: nothing to check (GpuConfig.Validate)"),
    ({"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}, False, "TimeSlicing"),
    ({"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing",
                                                        "timeSlicingConfig": {"interval": "Long"}}}, False, "Long"),
    ({"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {
        "defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "10Gi"}}}, False, "MPS"),
    ({"apiVersion": NV, "kind": "MigDeviceConfig", "sharing": {"strategy": "MPS"}}, False, "MIG MPS"),
    ({"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "Bogus"}}, True,
     "validateSharingStrategy: unknown GPU sharing strategy"),
    ({"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing",
                                                        "timeSlicingConfig": {"interval": "Forever"}}}, True,
     "TimeSliceInterval.Validate: unknown time-slice interval"),
    ({"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {
        "defaultActiveThreadPercentage": -1}}}, True, "MpsConfig.Validate: must not be negative"),
    ({"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {
        "defaultActiveThreadPercentage": 101}}}, True, "MpsConfig.Validate: not greater than 100"),
    ({"apiVersion": NV, "kind": "GpuConfig", "sharng": {"strategy": "MPS"}}, True, "StrictDecoder: unknown field"),
    ({"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {"threads": 1}}}, True,
     "StrictDecoder: unknown field in mpsConfig"),
    ({"apiVersion": NV, "kind": "MigDeviceConfig", "sharing": {"strategy": "TimeSlicing",
                                                              "timeSlicingConfig": {}}}, True,
     "StrictDecoder: MigDeviceSharing has no timeSlicingConfig"),
    ({"apiVersion": NV, "kind": "TpuConfig"}, True, "expected a recognized configuration type"),
    ({"apiVersion": "resource.nvidia.com/v9", "kind": "GpuConfig"}, True, "StrictDecoder: unknown version"),
]


@pytest.mark.parametrize("parameters, refused, rule", CASES, ids=[c[2] for c in CASES])
def test_validate_refuses_what_the_webhook_refuses(parameters, refused, rule):
    claim = _claim(_config(parameters), _config({"not": "ours"}, driver="other.example.com"))
    problems = [p for p in validate_documents([Document(claim, "c.yaml", 1)]) if p.severity == "error"]
    assert bool(problems) == refused, problems
    if refused:
        assert [p.path for p in problems] == ["spec.devices.config[0].opaque.parameters"]
        assert "the gpu.nvidia.com driver refuses this config" in problems[0].message


def test_validate_cli_exits_1_on_a_config_the_driver_refuses(tmp_path):
    path = tmp_path / "claim.yaml"
    bad = {"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "MPS",
                                                             "mpsConfig": {"defaultActiveThreadPercentage": -5}}}
    path.write_text(yaml.safe_dump(_claim(_config(bad), kind="ResourceClaimTemplate")))
    result = CliRunner().invoke(cli, ["validate", "-f", str(path)])
    assert result.exit_code == 1
    assert "spec.spec.devices.config[0].opaque.parameters" in result.output
    assert "sharing.mpsConfig.defaultActiveThreadPercentage: must be an integer 0..100" in result.output


def _review(obj: Any, resource: str = "resourceclaims", version: str = "v1", uid: str = "u-1",
            operation: str = "CREATE") -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "operation": operation, "object": obj,
                        "kind": {"group": "resource.k8s.io", "version": version, "kind": "ResourceClaim"},
                        "resource": {"group": "resource.k8s.io", "version": version, "resource": resource}}}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CASES), st.sampled_from(["resourceclaims", "resourceclaimtemplates"]),
       st.sampled_from(["v1", "v1beta2", "v1beta1"]), st.integers(0, 3))
def test_webhook_answer_and_validate_agree(case, resource, version, extra):
    """One check behind both: the webhook refuses exactly the objects validate reports, naming the same paths."""
    parameters, _, _ = case
    kind = "ResourceClaimTemplate" if resource == "resourceclaimtemplates" else "ResourceClaim"
    good = {"apiVersion": NV, "kind": "GpuConfig"}
    obj = _claim(*[_config(good)] * extra, _config(parameters), api_version=f"resource.k8s.io/{version}", kind=kind)
    answer = review_response(_review(obj, resource, version))["response"]
    problems = [p for p in validate_documents([Document(obj, "c.yaml", 1)]) if p.severity == "error"]
    assert answer["allowed"] == (not problems)
    for problem in problems:  # validate notes a conversion to v1 after its message
        message = problem.message.removesuffix(" (checked after conversion to resource.k8s.io/v1)")
        message = message.removeprefix("the gpu.nvidia.com driver refuses this config: ")
        assert f"object at {problem.path} is invalid: {message}" in answer["status"]["message"]


def test_device_class_configs_are_checked_too():
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "x"},
           "spec": {"config": [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"apiVersion": NV,
                                                                                       "kind": "Gpu"}}}]}}
    assert [path for path, _ in opaque_config_problems(cls)] == ["spec.config[0].opaque.parameters"]


# ----- over HTTPS -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[str, str]:
    """A self-signed certificate for localhost / 127.0.0.1 (cert file, key file)."""
    directory = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpudra-webhook.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


@pytest.fixture(scope="module")
def server(certificate):
    server = WebhookServer(("127.0.0.1", 0), *certificate)
    start_in_thread(server)
    yield server
    server.shutdown()
    server.server_close()


def _post(port: int, cert_file: str, body: bytes, content_type: str = "application/json",
          path: str = VALIDATE_PATH) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=cert_file)  # verifies the server's certificate and name
    connection = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": content_type})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _admit(server, certificate, review: dict) -> dict:
    status, body = _post(server.port, certificate[0], json.dumps(review).encode())
    assert status == 200, body
    answer = json.loads(body)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == review["request"]["uid"]
    return answer["response"]


@pytest.mark.parametrize("parameters, refused, rule", CASES, ids=[c[2] for c in CASES])
def test_webhook_over_https(server, certificate, parameters, refused, rule):
    response = _admit(server, certificate, _review(_claim(_config(parameters)), uid=f"uid-{rule}"))
    assert response["allowed"] == (not refused)
    if refused:
        assert response["status"]["reason"] == "Invalid" and response["status"]["code"] == 422
        assert "object at spec.devices.config[0].opaque.parameters is invalid: " in response["status"]["message"]


def test_webhook_reads_older_versions_and_templates(server, certificate):
    bad = _config({"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "Bogus"}})
    beta = _admit(server, certificate, _review(_claim(bad, api_version="resource.k8s.io/v1beta1"), version="v1beta1"))
    assert not beta["allowed"] and "must be TimeSlicing or MPS" in beta["status"]["message"]
    template = _admit(server, certificate, _review(_claim(bad, kind="ResourceClaimTemplate"), "resourceclaimtemplates"))
    assert not template["allowed"] and "spec.spec.devices.config[0].opaque.parameters" in template["status"]["message"]
    deleted = _admit(server, certificate, _review(None, operation="DELETE"))
    assert deleted["allowed"]
    other = _admit(server, certificate, {**_review({}), "request": {
        "uid": "p", "resource": {"group": "", "version": "v1", "resource": "pods"}, "object": {}}})
    assert not other["allowed"] and other["status"]["reason"] == "BadRequest"


def test_webhook_refuses_what_is_not_an_admission_review(server, certificate):
    port, cert = server.port, certificate[0]
    assert _post(port, cert, b"{}", content_type="text/plain")[0] == 415
    assert _post(port, cert, b"not json")[0] == 400
    assert _post(port, cert, b'{"apiVersion": "v1", "kind": "Pod"}')[0] == 400
    assert _post(port, cert, b"{}", path="/elsewhere")[0] == 404
    context = ssl.create_default_context(cafile=cert)
    connection = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    connection.request("GET", "/readyz")
    response = connection.getresponse()
    assert (response.status, response.read()) == (200, b"ok")
    connection.close()
    # a client that does not trust the certificate is refused by its own TLS check
    with pytest.raises(ssl.SSLError):
        _post(port, ssl.get_default_verify_paths().cafile or os.devnull, b"{}")


def test_webhook_command_end_to_end(certificate, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent.parent.parent),
                                                                      os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, "-m", "gpudra", "driver", "webhook", "--tls-cert-file", certificate[0],
                                "--tls-private-key-file", certificate[1], "--port", "0", "--bind-address", "127.0.0.1"],
                               stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stderr is not None
        ready = ""
        while "ready:" not in ready:
            readable, _, _ = select.select([process.stderr], [], [], 60)
            assert readable, "the webhook did not start"
            line = process.stderr.readline()
            assert line, f"the webhook exited: {process.wait()}"
            ready = line
        port = int(re.search(r":(\d+)\s*$", ready).group(1))
        bad = _claim(_config({"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {
            "defaultActiveThreadPercentage": -5}}}))
        status, body = _post(port, certificate[0], json.dumps(_review(bad)).encode())
        assert status == 200 and json.loads(body)["response"]["allowed"] is False
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_webhook_command_reports_bad_certificate_files(tmp_path):
    result = CliRunner().invoke(cli, ["driver", "webhook", "--tls-cert-file", str(tmp_path / "none.crt"),
                                      "--tls-private-key-file", str(tmp_path / "none.key"), "--port", "0"])
    assert result.exit_code == 2 and "cannot load --tls-cert-file" in result.output


# ----- deployment -----------------------------------------------------------------------------------------
def test_webhook_manifest_matches_the_kubernetes_schemas_and_the_chart():
    import pydantic
    from kubernetes import client as k8s

    from support.helm_template import helm_template

    models = {"Deployment": k8s.V1Deployment, "Service": k8s.V1Service,
              "ValidatingWebhookConfiguration": k8s.V1ValidatingWebhookConfiguration}
    plain = [d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "webhook.yaml").read_text()) if d]
    assert sorted(d["kind"] for d in plain) == sorted(models)
    for doc in plain:
        try:
            models[doc["kind"]].model_validate(doc, strict=True)
        except pydantic.ValidationError as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"{doc['kind']}: {exc}")
    config = next(d for d in plain if d["kind"] == "ValidatingWebhookConfiguration")["webhooks"][0]
    assert config["clientConfig"]["service"]["path"] == VALIDATE_PATH
    assert set(config["rules"][0]["resources"]) == {"resourceclaims", "resourceclaimtemplates", "deviceclasses"}
    container = next(d for d in plain if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["driver", "webhook"]
    chart = str(DEPLOY / "helm" / "gpudra")
    rendered = helm_template(chart, namespace="gpudra-system", values={"webhook": {"enabled": True, "replicas": 2}})
    assert [o for o in rendered if o["metadata"]["name"] == "gpudra-webhook"] == plain
    assert not [o for o in helm_template(chart, namespace="gpudra-system") if o["metadata"]["name"] == "gpudra-webhook"]


# NVIDIA's own webhook test table (k8s-dra-driver-gpu cmd/webhook/main_test.go, TestResourceClaimValidatingWebhook),
# the cases with both sharing gates on (gpudra's driver always offers TimeSlicing and MPS): resource version, kind,
# the GpuConfig sharings, and the config paths upstream's message names as invalid.
_TS_DEFAULT = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}
_TS_INVALID = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Invalid Interval"}}
_MPS_NEGATIVE = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": -1}}
UPSTREAM_CASES = [
    ("valid GpuConfig in ResourceClaim", "v1beta1", "ResourceClaim", [_TS_DEFAULT], []),
    ("invalid GpuConfigs in ResourceClaim", "v1beta1", "ResourceClaim", [_TS_INVALID, _MPS_NEGATIVE],
     ["spec.devices.config[0].opaque.parameters", "spec.devices.config[1].opaque.parameters"]),
    ("valid GpuConfig in ResourceClaimTemplate", "v1beta1", "ResourceClaimTemplate", [_TS_DEFAULT], []),
    ("invalid GpuConfigs in ResourceClaimTemplate", "v1beta1", "ResourceClaimTemplate", [_TS_INVALID, _MPS_NEGATIVE],
     ["spec.spec.devices.config[0].opaque.parameters", "spec.spec.devices.config[1].opaque.parameters"]),
    ("valid GpuConfig in ResourceClaim v1", "v1", "ResourceClaim", [_TS_DEFAULT], []),
    ("valid GpuConfig in ResourceClaimTemplate v1", "v1", "ResourceClaimTemplate", [_TS_DEFAULT], []),
    ("invalid GpuConfig in ResourceClaim v1", "v1", "ResourceClaim", [_TS_INVALID],
     ["spec.devices.config[0].opaque.parameters"]),
    ("invalid GpuConfig in ResourceClaimTemplate v1", "v1", "ResourceClaimTemplate", [_MPS_NEGATIVE],
     ["spec.spec.devices.config[0].opaque.parameters"]),
    ("valid GpuConfig in ResourceClaim v1beta2", "v1beta2", "ResourceClaim", [_TS_DEFAULT], []),
    ("valid GpuConfig in ResourceClaimTemplate v1beta2", "v1beta2", "ResourceClaimTemplate", [_TS_DEFAULT], []),
    ("invalid GpuConfig in ResourceClaim v1beta2", "v1beta2", "ResourceClaim", [_MPS_NEGATIVE],
     ["spec.devices.config[0].opaque.parameters"]),
    ("invalid GpuConfig in ResourceClaimTemplate v1beta2", "v1beta2", "ResourceClaimTemplate", [_TS_INVALID],
     ["spec.spec.devices.config[0].opaque.parameters"]),
]


@pytest.mark.parametrize("name, version, kind, sharings, invalid", UPSTREAM_CASES, ids=[c[0] for c in UPSTREAM_CASES])
def test_upstream_webhook_cases(server, certificate, name, version, kind, sharings, invalid):
    configs = [_config({"apiVersion": NV, "kind": "GpuConfig", "sharing": sharing}) for sharing in sharings]
    obj = _claim(*configs, api_version=f"resource.k8s.io/{version}", kind=kind)
    resource = "resourceclaimtemplates" if kind == "ResourceClaimTemplate" else "resourceclaims"
    response = _admit(server, certificate, _review(obj, resource, version, uid=name))
    assert response["allowed"] == (not invalid)
    if invalid:
        message = response["status"]["message"]
        assert message.startswith(f"{len(invalid)} configs failed to validate: ")
        assert re.findall(r"object at (\S+) is invalid", message) == invalid


# ----- what is not an AdmissionReview the API server would send (admission.k8s.io/v1, admission/v1/types.go) -------
_GOOD = _claim(_config({"apiVersion": NV, "kind": "GpuConfig"}))


@pytest.mark.parametrize("review, why", [
    ({**_review(_GOOD), "apiVersion": "admission.k8s.io/v1beta1"}, "v1beta1: the API server asks what the webhook "
                                                                   "configuration's admissionReviewVersions name"),
    ({k: v for k, v in _review(_GOOD).items() if k != "apiVersion"}, "no apiVersion"),
    ({**_review(_GOOD), "kind": "AdmissionRequest"}, "another kind"),
    ({k: v for k, v in _review(_GOOD).items() if k != "kind"}, "no kind"),
    ({**_review(_GOOD), "request": None}, "no request"),
    ({**_review(_GOOD), "request": {**_review(_GOOD)["request"], "uid": 7}}, "a uid that is no string"),
    ([_review(_GOOD)], "not an object"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_reviews_with_a_wrong_envelope_are_errors(review, why):
    with pytest.raises(ReviewError):
        review_response(review)


@pytest.mark.parametrize("resource, version, group, obj, message", [
    ("resourceclaims", "v1", "example.com", _GOOD, "got example.com/v1 resourceclaims"),
    ("resourceclaims", "v1", "", _GOOD, "got /v1 resourceclaims"),
    ("pods", "v1", "resource.k8s.io", _GOOD, "got resource.k8s.io/v1 pods"),
    ("resourceclaims", "v2", "resource.k8s.io", _GOOD, "got resource.k8s.io/v2 resourceclaims"),
    ("resourceclaims", "v1", "resource.k8s.io", [], "request.object is not an object"),
    ("resourceclaims", "v1", "resource.k8s.io", {**_GOOD, "kind": "Pod"},
     "request.object is resource.k8s.io/v1 Pod, expected resource.k8s.io/v1 ResourceClaim"),
    ("resourceclaims", "v1", "resource.k8s.io", {k: v for k, v in _GOOD.items() if k != "kind"},
     "request.object is resource.k8s.io/v1 None, expected"),
    ("resourceclaims", "v1beta2", "resource.k8s.io", _GOOD,
     "request.object is resource.k8s.io/v1 ResourceClaim, expected resource.k8s.io/v1beta2 ResourceClaim"),
    ("resourceclaims", "v1", "resource.k8s.io", {k: v for k, v in _GOOD.items() if k != "apiVersion"},
     "request.object is None ResourceClaim"),
    ("resourceclaimtemplates", "v1", "resource.k8s.io", _GOOD, "expected resource.k8s.io/v1 ResourceClaimTemplate"),
])
def test_requests_for_what_the_webhook_does_not_serve_are_bad_requests(resource, version, group, obj, message):
    """Refused with 400 BadRequest, naming what came: a request for a foreign group, resource or version, or an object
    whose apiVersion and kind are not those the API server would have converted it to (an unknown kind would go
    unchecked)."""
    review = _review(obj, resource, version)
    review["request"]["resource"]["group"] = group
    response = review_response(review)["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 400 and response["status"]["reason"] == "BadRequest"
    assert message in response["status"]["message"]
    assert review_response(_review(_GOOD))["response"] == {"uid": "u-1", "allowed": True}  # the control


def test_deleting_or_an_absent_object_is_never_refused():
    """A DELETE creates nothing (its request carries the old object, if any, and whatever it is is not checked); a
    request without an object has nothing to check."""
    bad = _claim(_config({"apiVersion": NV, "kind": "GpuConfig", "sharing": {"strategy": "Bogus"}}))
    assert review_response(_review(bad, operation="DELETE"))["response"]["allowed"] is True
    assert review_response(_review(bad))["response"]["allowed"] is False  # the control
    assert review_response(_review(None, operation="CREATE"))["response"]["allowed"] is True
