"""The Helm chart under deploy/helm renders to the same objects as the plain manifests in deploy/kubernetes."""

from __future__ import annotations

import os

import pytest
import yaml
from support.helm_template import helm_template, render

try:  # Helm v4's own engine (helm-python-sdk, in the test extra on Linux x86_64)
    import helm_python
except ImportError:  # pragma: no cover - other platforms: the real-Helm tests below are skipped
    helm_python = None
needs_helm = pytest.mark.skipif(helm_python is None, reason="helm-python-sdk (Helm's Go engine) is not installed")

DEPLOY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "deploy")
CHART = os.path.join(DEPLOY, "helm", "gpudra")


def _plain() -> list[dict]:
    objects = []
    for name in ("namespace.yaml", "rbac.yaml", "deviceclasses.yaml", "daemonset.yaml", "mig-manager.yaml",
                 "mig-parted-config.yaml", "compute-domains.yaml"):
        with open(os.path.join(DEPLOY, "kubernetes", name), encoding="utf-8") as fh:
            objects.extend(d for d in yaml.safe_load_all(fh) if d)
    return objects


def _by_identity(objects: list[dict]) -> dict[tuple, dict]:
    return {(o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects}


def test_default_values_render_the_plain_manifests():
    rendered = _by_identity(helm_template(CHART, namespace="gpudra-system"))
    plain = _by_identity(_plain())
    assert rendered.keys() == plain.keys()
    for key, obj in plain.items():
        assert rendered[key] == obj, key


def test_values_change_the_objects():
    objects = _by_identity(helm_template(CHART, namespace="gpu", values={
        "metricsPort": 9400, "dynamicMig": True, "createNamespace": False, "extendedResourceName": "",
        "hostDriverRoot": "/run/nvidia/driver", "image": {"repository": "r/gpudra", "tag": "1.2", "pullPolicy": "Always"}}))
    # the release's namespace is not created; the driver's (the ComputeDomain daemons') still is
    assert [name for _, kind, _, name in objects if kind == "Namespace"] == ["nvidia-dra-driver-gpu"]
    ds = objects[("apps/v1", "DaemonSet", "gpu", "gpudra-kubelet-plugin")]
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "r/gpudra:1.2" and container["imagePullPolicy"] == "Always"
    assert {"--metrics-port=9400", "--dynamic-mig", "--host-driver-root=/run/nvidia/driver"} <= set(container["args"])
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400}]
    assert "extendedResourceName" not in objects[("resource.k8s.io/v1", "DeviceClass", None, "gpu.nvidia.com")]["spec"]


@pytest.mark.parametrize("template, values, expected", [
    ("a{{ if .Values.x }}X{{ else }}Y{{ end }}b", {"x": 1}, "aXb"),
    ("a{{ if .Values.x }}X{{ else }}Y{{ end }}b", {"x": 0}, "aYb"),
    ("{{ if .Values.x }}{{ if .Values.y }}1{{ else }}2{{ end }}{{ else }}3{{ end }}", {"x": 0, "y": 0}, "3"),
    ("{{ if .Values.x }}{{ if .Values.y }}1{{ else }}2{{ end }}{{ else }}3{{ end }}", {"x": 1, "y": 0}, "2"),
    ("k:\n  {{- toYaml .Values.m | nindent 2 }}", {"m": {"b": 1, "a": [1]}}, "k:\n  a:\n  - 1\n  b: 1"),
    ("{{ .Values.t | default \"d\" }}/{{ .Values.u | default \"d\" }}", {"t": "", "u": "v"}, "d/v"),
    ("x {{- .Values.q | quote -}} y", {"q": 'a"b'}, 'x"a\\"b"y'),
])
def test_renderer_follows_go_template_semantics(template, values, expected):
    assert render(template, {"Values": values}) == expected


def test_renderer_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="unsupported"):
        render("{{ range .Values.x }}{{ end }}", {"Values": {}})


# ----- the same chart through Helm itself ------------------------------------------------------------------------
# helm-python-sdk calls Helm v4's Go SDK (the engine behind `helm template`: Go text/template, Sprig, Helm's
# toYaml/nindent, .Release and .Chart objects) from a C library: what a real `helm install` would apply.

VALUE_SETS = {
    "defaults": {},
    "changed": {"metricsPort": 9400, "dynamicMig": True, "createNamespace": False, "extendedResourceName": "",
                "hostDriverRoot": "/run/nvidia/driver",
                "image": {"repository": "r/gpudra", "tag": "1.2", "pullPolicy": "Always"}},
    "health": {"deviceTaintRules": True, "additionalXidsToIgnore": "48,63", "healthcheckPort": 0},
    "driver-name": {"driverName": "gpu.example.com", "dynamicMig": True},
    "webhook": {"webhook": {"enabled": True}},
    "no-compute-domains": {"computeDomains": {"enabled": False}},
}


def _real_helm(namespace: str, values: dict) -> list[dict]:
    with helm_python.Chart.load(CHART) as chart:
        manifests = chart.render(values, name="gpudra", namespace=namespace, is_install=True)
    return [d for path in sorted(manifests) for d in yaml.safe_load_all(manifests[path]) if d]


@needs_helm
def test_real_helm_renders_the_plain_manifests_with_default_values():
    rendered = _by_identity(_real_helm("gpudra-system", {}))
    plain = _by_identity(_plain())
    assert rendered.keys() == plain.keys()
    for key, obj in plain.items():
        assert rendered[key] == obj, key


@needs_helm
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_home_written_engine_renders_what_real_helm_renders(name):
    values = VALUE_SETS[name]
    real = _by_identity(_real_helm("gpu", values))
    ours = _by_identity(helm_template(CHART, namespace="gpu", values=values))
    assert ours.keys() == real.keys()
    for key, obj in real.items():
        assert ours[key] == obj, key


@needs_helm
def test_helm_lint_finds_nothing_wrong_with_the_chart():
    report = helm_python.lint(CHART, namespace="gpudra-system", strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []  # warnings or errors


COMPUTE_DOMAIN_KINDS = {("apps/v1", "Deployment", "gpudra-compute-domain-controller"),
                        ("v1", "ServiceAccount", "compute-domain-daemon-service-account"),
                        ("rbac.authorization.k8s.io/v1", "ClusterRole", "gpudra-compute-domain-daemon"),
                        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "gpudra-compute-domain-daemon"),
                        ("apps/v1", "DaemonSet", "gpudra-compute-domain-kubelet-plugin"),
                        ("rbac.authorization.k8s.io/v1", "ClusterRole", "gpudra-compute-domain-controller"),
                        ("rbac.authorization.k8s.io/v1", "Role", "gpudra-compute-domain-controller"),
                        ("rbac.authorization.k8s.io/v1", "ClusterRole", "gpudra-compute-domain-kubelet-plugin")}


@needs_helm
def test_real_helm_installs_the_compute_domain_plugin_controller_and_rbac_and_the_crd():
    """Helm's engine renders the compute-domain objects in the release's namespace (the daemons' Role in the
    driver's), leaves them out with computeDomains.enabled=false, and the chart's crds/ holds NVIDIA's two CRDs
    (ComputeDomain, ComputeDomainClique): the same bytes as gpudra/computedomain/*.crd.yaml (links to them,
    followed by Helm)."""
    from gpudra.computedomain.devices import DRIVER_NAMESPACE

    rendered = _real_helm("gpu", {})
    found = {(o["apiVersion"], o["kind"], o["metadata"]["name"]): o for o in rendered}
    assert COMPUTE_DOMAIN_KINDS <= found.keys()
    assert found[("apps/v1", "Deployment", "gpudra-compute-domain-controller")]["metadata"]["namespace"] == "gpu"
    assert found[("rbac.authorization.k8s.io/v1", "Role", "gpudra-compute-domain-controller")][
        "metadata"]["namespace"] == DRIVER_NAMESPACE
    assert ("v1", "Namespace", DRIVER_NAMESPACE) in found
    off = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in _real_helm("gpu", VALUE_SETS["no-compute-domains"])}
    assert not COMPUTE_DOMAIN_KINDS & off
    sources = []
    for name in ("computedomaincliques.crd.yaml", "computedomains.crd.yaml"):
        with open(os.path.join(os.path.dirname(DEPLOY), "gpudra", "computedomain", name), encoding="utf-8") as fh:
            sources.append(yaml.safe_load(fh))
    with helm_python.Chart.load(CHART) as chart:
        crds = chart.crds
    rendered_crds = sorted((yaml.safe_load(c["data"]) for c in crds), key=lambda c: c["metadata"]["name"])
    assert rendered_crds == sources
    assert [c["spec"]["names"]["kind"] for c in rendered_crds] == ["ComputeDomainClique", "ComputeDomain"]


def test_plain_manifests_install_both_crds_as_links_to_the_package_files():
    """deploy/kubernetes and the chart's crds/ link to the one copy of each CRD in gpudra/computedomain."""
    package = os.path.join(os.path.dirname(DEPLOY), "gpudra", "computedomain")
    for folder in (os.path.join(DEPLOY, "kubernetes"), os.path.join(CHART, "crds")):
        for name in ("computedomains.crd.yaml", "computedomaincliques.crd.yaml"):
            path = os.path.join(folder, name)
            assert os.path.islink(path) and os.path.samefile(path, os.path.join(package, name)), path


def _triples(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def _nvidia_rbac(name: str) -> dict[str, set[tuple[str, str, str]]]:
    """The rules of NVIDIA's chart template tests/data/computedomain/nvidia-chart-<name>.yaml by kind (its rules are
    plain YAML; the lines with template actions, names and subjects, are left out)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "computedomain",
                        f"nvidia-chart-{name}.yaml")
    with open(path, encoding="utf-8") as fh:
        text = "\n".join(line for line in fh.read().splitlines() if "{{" not in line)
    return {d["kind"]: _triples(d["rules"]) for d in yaml.safe_load_all(text) if d and d.get("rules")}


def test_compute_domain_rbac_verbs_are_nvidias():
    """The controller's and the IMEX daemons' RBAC in deploy/kubernetes (and so the chart's: the default-values
    test) grant NVIDIA's rules verb for verb (rbac-controller.yaml, rbac-compute-domain-daemon.yaml at 95932046),
    the controller's plus gpudra's additions only, each named in the manifest; the daemons' service account is
    the one the controller's DaemonSets name, bound in the driver's namespace."""
    from gpudra.computedomain.controller import DAEMON_SERVICE_ACCOUNT, daemonset
    from gpudra.computedomain.devices import DRIVER_NAMESPACE

    plain = {(o["kind"], o["metadata"]["name"]): o for o in _plain()}
    controller, daemon = _nvidia_rbac("rbac-controller"), _nvidia_rbac("rbac-compute-domain-daemon")
    ours = _triples(plain[("ClusterRole", "gpudra-compute-domain-controller")]["rules"])
    assert controller["ClusterRole"] <= ours
    assert ours - controller["ClusterRole"] == {
        ("resource.nvidia.com", "computedomains/finalizers", "update"), ("", "events", "list"),
        ("", "events", "create"), *{("resource.k8s.io", "resourceclaims", v) for v in ("get", "list", "watch")}}
    role = plain[("Role", "gpudra-compute-domain-controller")]
    assert role["metadata"]["namespace"] == DRIVER_NAMESPACE
    assert _triples(role["rules"]) - {("", "pods", "delete")} == controller["Role"]
    assert ("resource.nvidia.com", "computedomaincliques", "update") in controller["Role"]  # cleanupClique
    assert _triples(plain[("ClusterRole", "gpudra-compute-domain-daemon")]["rules"]) == daemon["ClusterRole"]
    account = plain[("ServiceAccount", DAEMON_SERVICE_ACCOUNT)]
    assert account["metadata"]["namespace"] == DRIVER_NAMESPACE
    binding = plain[("ClusterRoleBinding", "gpudra-compute-domain-daemon")]
    assert binding["roleRef"]["name"] == "gpudra-compute-domain-daemon"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": DAEMON_SERVICE_ACCOUNT,
                                    "namespace": DRIVER_NAMESPACE}]
    domain = {"metadata": {"name": "d", "namespace": "a", "uid": "u"}}
    assert daemonset(domain)["spec"]["template"]["spec"]["serviceAccountName"] == DAEMON_SERVICE_ACCOUNT


def test_the_deployed_controller_reads_status_from_the_daemons_it_starts(monkeypatch):
    """The controller runs with --status-from-daemons (the daemons it starts write the status; with NVIDIA's
    default ComputeDomainCliques=true their cliques) and gives the daemons its own image (IMAGE_NAME)."""
    from gpudra.cli.driver_services import compute_domain_controller_cmd

    plain = {(o["kind"], o["metadata"]["name"]): o for o in _plain()}
    container, = plain[("Deployment", "gpudra-compute-domain-controller")]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["IMAGE_NAME"] == container["image"]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    params = compute_domain_controller_cmd.make_context("compute-domain-controller", container["args"][2:]).params
    assert params["status_from_daemons"] and params["in_cluster"] and params["image_name"] == container["image"]
    assert params["feature_gates"] == ""  # NVIDIA's defaults: ComputeDomainCliques and IMEXDaemonsWithDNSNames on
