"""The ComputeDomain controller's plan (gpudra.computedomain.controller), a pure function.

Its ResourceClaimTemplates are compared with NVIDIA's own templates (tests/data/computedomain/*.tmpl.yaml, from
NVIDIA/k8s-dra-driver-gpu templates/), rendered here with the values cmd/compute-domain-controller fills in; the
status and teardown rules with the behaviour of computedomain.go and cdstatus.go as written in the module's
docstring, on domains and pods hypothesis makes.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.api.load import Document
from gpudra.api.validate import validate_documents
from gpudra.computedomain.controller import (
    CLIQUE_NODE_LABEL, DOMAIN_LABEL, FINALIZER, DomainPlan, World, daemon_template, daemonset, global_status, plan,
    orphans, stale_labels, status_nodes, workload_template)

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "computedomain")
UID = "0b8e6a52-7f3e-4b1f-9d42-3c2a1e9f0d11"


def domain(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
            "metadata": {"name": "train", "namespace": "team-a", "uid": UID},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "train-channel"}}, **spec}}


def render(template: str, values: dict[str, str]) -> dict[str, Any]:
    """NVIDIA's Go template with `{{ .Field }}` / `{{ .Config.Field }}` actions filled in."""
    with open(os.path.join(DATA, template), encoding="utf-8") as fh:
        text = fh.read()
    return yaml.safe_load(re.sub(r"\{\{\s*\.([\w.]+)\s*\}\}", lambda m: values[m.group(1)], text))


COMMON = {"Finalizer": FINALIZER, "ComputeDomainLabelKey": DOMAIN_LABEL, "ComputeDomainLabelValue": UID,
          "TargetLabelKey": "resource.nvidia.com/computeDomainTarget", "DriverName": "compute-domain.nvidia.com"}


def test_workload_template_is_nvidias() -> None:
    for mode in ("Single", "All"):
        expected = render("compute-domain-workload-claim-template.tmpl.yaml", {
            **COMMON, "Namespace": "team-a", "Name": "train-channel", "TargetLabelValue": "Workload",
            "DeviceClassName": "compute-domain-default-channel.nvidia.com",
            "ChannelConfig.APIVersion": "resource.nvidia.com/v1beta1",
            "ChannelConfig.Kind": "ComputeDomainChannelConfig", "ChannelConfig.DomainID": UID,
            "ChannelConfig.AllocationMode": mode})
        cd = domain()
        cd["spec"]["channel"]["allocationMode"] = mode
        made = workload_template(cd)
        # gpudra's one addition (NVIDIA's template has none): the domain owns it, in its own namespace
        assert made["metadata"].pop("ownerReferences") == [{
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "name": "train", "uid": UID,
            "controller": True, "blockOwnerDeletion": True}]
        assert made == expected


def test_only_same_namespace_objects_carry_an_owner_reference() -> None:
    """Kubernetes has no cross-namespace owner references: the garbage collector would delete a driver-namespace
    object pointing at a user-namespace domain at once. So only the workload template (the domain's namespace)
    has one; the DaemonSet and the daemon template are linked by the label and the finalizer, as NVIDIA's are."""
    for obj in created_objects():
        refs = obj["metadata"].get("ownerReferences")
        if obj["metadata"]["namespace"] == domain()["metadata"]["namespace"]:
            assert refs and refs[0]["uid"] == UID
        else:
            assert refs is None, obj["kind"]
    assert {o["metadata"]["namespace"] for o in created_objects()} == {"team-a", "nvidia-dra-driver-gpu"}


def test_daemon_template_is_nvidias() -> None:
    expected = render("compute-domain-daemon-claim-template.tmpl.yaml", {
        **COMMON, "Namespace": "nvidia-dra-driver-gpu", "Name": f"computedomain-daemon-{UID}",
        "TargetLabelValue": "Daemon", "DeviceClassName": "compute-domain-daemon.nvidia.com",
        "DaemonConfig.APIVersion": "resource.nvidia.com/v1beta1", "DaemonConfig.Kind": "ComputeDomainDaemonConfig",
        "DaemonConfig.DomainID": UID})
    assert daemon_template(domain()) == expected


def test_what_the_controller_creates_is_valid() -> None:
    created = plan(domain(), World()).create
    assert sorted(o["kind"] for o in created) == ["DaemonSet", "ResourceClaimTemplate", "ResourceClaimTemplate"]
    problems = validate_documents([Document(o, "plan", i) for i, o in enumerate(created, 1)])
    assert [p for p in problems if p.severity == "error"] == []


def test_daemonset_selects_the_labelled_nodes_and_tolerates_every_taint() -> None:
    ds = daemonset(domain())
    template = ds["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {DOMAIN_LABEL: UID} == ds["spec"]["selector"]["matchLabels"]
    assert template["metadata"]["labels"] == {DOMAIN_LABEL: UID}
    assert {t["effect"] for t in template["spec"]["tolerations"]} == {"NoSchedule", "NoExecute", "PreferNoSchedule"}
    assert template["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == daemon_template(domain())[
        "metadata"]["name"]


def test_a_live_domain_gets_its_finalizer_and_its_objects_once() -> None:
    first = plan(domain(), World())
    assert first.domain is not None and first.domain["metadata"]["finalizers"] == [FINALIZER]
    templates = [o for o in first.create if o["kind"] == "ResourceClaimTemplate"]
    daemonsets = [o for o in first.create if o["kind"] == "DaemonSet"]
    again = plan(first.domain, World(templates=templates, daemonsets=daemonsets))
    assert again.create == [] and again.delete == [] and again.domain["metadata"]["finalizers"] == [FINALIZER]


def test_a_template_name_taken_by_another_object_is_reported_not_overwritten() -> None:
    other = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": "train-channel", "namespace": "team-a"}, "spec": {"spec": {}}}
    result = plan(domain(), World(templates=[other]))
    assert [o["metadata"]["name"] for o in result.create if o["kind"] == "ResourceClaimTemplate"] == [
        f"computedomain-daemon-{UID}"]
    assert [reason for reason, _ in result.problems] == ["FailedCreate"]


# ----- status ---------------------------------------------------------------------------------------------------
def node(name: str, clique: str | None = "c.1", cd: str | None = None) -> dict[str, Any]:
    labels = {}
    if clique is not None:
        labels[CLIQUE_NODE_LABEL] = clique
    if cd is not None:
        labels[DOMAIN_LABEL] = cd
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}}


def daemon_pod(node_name: str, ready: bool = True, deleted: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"d-{node_name}", "namespace": "nvidia-dra-driver-gpu",
                            "uid": f"uid-{node_name}", "labels": {DOMAIN_LABEL: UID},
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": True,
                                                 "name": f"computedomain-daemon-{UID}", "uid": "ds-uid"}]}
    if deleted:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"kind": "Pod", "metadata": meta, "spec": {"nodeName": node_name},
            "status": {"podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_status_follows_the_daemons_and_num_nodes() -> None:
    nodes = [node("t0", cd=UID), node("t1", cd=UID)]
    one = plan(domain(), World(nodes=nodes, pods=[daemon_pod("t0")]))
    assert one.domain["status"]["status"] == "NotReady"  # 1 of numNodes 2
    assert [(n["name"], n["status"], n["index"]) for n in one.domain["status"]["nodes"]] == [("t0", "Ready", 0)]
    both = plan(one.domain, World(nodes=nodes, pods=[daemon_pod("t1", ready=False), daemon_pod("t0")]))
    assert both.domain["status"]["status"] == "NotReady"  # t1's daemon not ready
    ready = plan(both.domain, World(nodes=nodes, pods=[daemon_pod("t0"), daemon_pod("t1")]))
    assert ready.domain["status"] == {"status": "Ready", "nodes": [
        {"name": "t0", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0, "status": "Ready"},
        {"name": "t1", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 1, "status": "Ready"}]}


def test_num_nodes_zero_is_ready_with_no_node() -> None:
    """calculateGlobalStatus: nothing is missing and nothing is NotReady."""
    assert global_status(0, []) == "Ready"
    assert global_status(1, []) == "NotReady"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["t0", "t1", "t2", "t3", "t4"]), st.sampled_from(["a.1", "b.1"]),
                          st.booleans()), max_size=5, unique_by=lambda t: t[0]),
       st.lists(st.sampled_from(["t0", "t1", "t2", "t3", "t4"]), max_size=5, unique=True))
def test_indices_are_unique_per_clique_and_kept(before: list[tuple[str, str, bool]], later: list[str]) -> None:
    """cdstatus.go getNextAvailableIndex: unique within a clique, the lowest free one for a new node, and a node
    that stays keeps its index."""
    nodes = {name: node(name, clique) for name, clique, _ in before}
    first = status_nodes(domain(), [daemon_pod(n, ready) for n, _, ready in before], nodes)
    cd = domain()
    cd["status"] = {"status": "NotReady", "nodes": first}
    names = [n for n in later if n in nodes] + [n for n, _, _ in before if n not in later]
    second = status_nodes(cd, [daemon_pod(n) for n in names], nodes)
    for entries in (first, second):
        pairs = [(e["cliqueID"], e["index"]) for e in entries]
        assert len(pairs) == len(set(pairs))
        assert all(e["index"] >= 0 for e in entries)
    old = {e["name"]: e["index"] for e in first}
    assert all(e["index"] == old[e["name"]] for e in second if e["name"] in old)


def test_daemons_on_nodes_that_lost_the_label_are_deleted() -> None:
    nodes = [node("t0", cd=UID), node("t1")]
    result = plan(domain(), World(nodes=nodes, pods=[daemon_pod("t0"), daemon_pod("t1")]))
    assert result.delete == [("Pod", "nvidia-dra-driver-gpu", "d-t1")]
    assert [n["name"] for n in result.domain["status"]["nodes"]] == ["t0"]


# ----- teardown -------------------------------------------------------------------------------------------------
def deleted(cd: dict[str, Any]) -> dict[str, Any]:
    cd = copy.deepcopy(cd)
    cd["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cd["metadata"]["finalizers"] = [FINALIZER, "example.com/other"]
    return cd


def created_objects() -> list[dict[str, Any]]:
    return plan(domain(), World()).create


def test_a_deleted_domain_tears_down_then_lets_go() -> None:
    objects = created_objects()
    world = World(nodes=[node("t0", cd=UID), node("t1", cd="another-domain")],
                  templates=[o for o in objects if o["kind"] == "ResourceClaimTemplate"],
                  daemonsets=[o for o in objects if o["kind"] == "DaemonSet"], pods=[daemon_pod("t0")])
    result = plan(deleted(domain()), world)
    assert sorted(result.delete) == sorted(
        [(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects]
        + [("Pod", "nvidia-dra-driver-gpu", "d-t0")])
    assert sorted(result.release) == sorted((o["kind"], o["metadata"]["namespace"], o["metadata"]["name"])
                                            for o in objects)
    assert result.labels == {"t0": None}  # another domain's label stays (NVIDIA/k8s-dra-driver-gpu#518)
    assert result.domain is not None and FINALIZER in result.domain["metadata"]["finalizers"]  # not yet
    assert result.create == []
    # the daemon pod still terminating: the finalizer stays (NVIDIA/k8s-dra-driver-gpu#380)
    waiting = plan(deleted(domain()), World(pods=[daemon_pod("t0", deleted=True)]))
    assert waiting.domain is not None and FINALIZER in waiting.domain["metadata"]["finalizers"]
    done = plan(deleted(domain()), World())
    assert done.domain is not None and done.domain["metadata"]["finalizers"] == ["example.com/other"]
    last = deleted(domain())
    last["metadata"]["finalizers"] = [FINALIZER]
    assert plan(last, World()) == DomainPlan(domain=None)


def test_objects_of_a_domain_that_is_gone_are_deleted_and_released() -> None:
    """cleanup.go's CleanupManager: the DaemonSet and templates labelled for a missing domain go; another
    domain's, and a labelled template of a tenant's (no target label), stay."""
    objects = created_objects()
    tenant = {"kind": "ResourceClaimTemplate",
              "metadata": {"namespace": "team-b", "name": "mine", "labels": {DOMAIN_LABEL: "gone"}}}
    world = World(templates=[o for o in objects if o["kind"] == "ResourceClaimTemplate"] + [tenant],
                  daemonsets=[o for o in objects if o["kind"] == "DaemonSet"])
    refs = sorted((o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects)
    assert orphans({UID}, world) == DomainPlan(domain=None)
    gone = orphans(set(), world)
    assert sorted(gone.delete) == refs and sorted(gone.release) == refs
    terminating = copy.deepcopy(world)
    for obj in terminating.templates + terminating.daemonsets:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert orphans(set(), terminating).delete == [] and sorted(orphans(set(), terminating).release) == refs


def test_stale_labels_name_domains_that_are_gone() -> None:
    nodes = [node("t0", cd=UID), node("t1", cd="gone"), node("t2")]
    assert stale_labels({UID}, nodes) == {"t1": None}


def test_manifests_given_offline_get_the_domains_template() -> None:
    """`gpudra schedule/explain -f` with a ComputeDomain: its channel template is there as the controller would
    create it, unless the input has one of that name."""
    from gpudra.computedomain.controller import channel_domain
    from gpudra.controllers import ManagedCluster

    cd = domain()
    del cd["metadata"]["uid"]
    cluster = ManagedCluster([cd])
    template = cluster.templates["team-a/train-channel"]
    claim = {"spec": template["spec"]["spec"]}
    assert channel_domain(claim) == cd["metadata"]["uid"]  # the uid the domain was given
    own = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
           "metadata": {"name": "train-channel", "namespace": "team-a"}, "spec": {"spec": {}}}
    assert ManagedCluster([own, domain()]).templates["team-a/train-channel"]["spec"] == {"spec": {}}


def _indices(cd: dict[str, Any], placed: dict[str, str]) -> dict[str, tuple[str, int]]:
    """status_nodes of daemons on `placed` (node -> clique): node -> (clique, index)."""
    nodes = {name: node(name, clique) for name, clique in placed.items()}
    return {e["name"]: (e["cliqueID"], e["index"]) for e in status_nodes(cd, [daemon_pod(n) for n in placed], nodes)}


def test_two_cliques_number_their_nodes_apart() -> None:
    """getNextAvailableIndex counts the indices of the node's own clique only: each clique starts at 0, whatever
    order the nodes' names put the cliques in."""
    assert _indices(domain(), {"t0": "a.1", "t1": "b.1", "t2": "b.1", "t3": "a.1"}) == {
        "t0": ("a.1", 0), "t1": ("b.1", 0), "t2": ("b.1", 1), "t3": ("a.1", 1)}


def test_an_index_once_given_is_kept_and_a_moved_node_gets_a_new_one() -> None:
    """A node that stays keeps its index when a lower one frees up (the IMEX daemons' config names it); a newcomer
    takes the lowest free index of its clique (newcomers in name order); a node whose clique changed is numbered
    afresh in its new one."""
    cd = domain()
    cd["status"] = {"status": "Ready", "nodes": [
        {"name": "t0", "cliqueID": "a.1", "index": 0}, {"name": "t1", "cliqueID": "a.1", "index": 1},
        {"name": "t2", "cliqueID": "b.1", "index": 0}, {"name": "t3", "cliqueID": "b.1", "index": 1},
        {"name": "t4", "cliqueID": "a.1", "index": 2}]}
    assert _indices(cd, {"t1": "a.1", "t5": "a.1", "t2": "b.1", "t3": "a.1", "t4": "b.1"}) == {
        "t1": ("a.1", 1), "t2": ("b.1", 0), "t3": ("a.1", 0), "t4": ("b.1", 1), "t5": ("a.1", 2)}


def _nvidias_daemonset(feature_gates: str, max_nodes: int) -> dict[str, Any]:
    """NVIDIA's DaemonSet template rendered as its controller renders it (daemonset.go Create): no image pull
    secrets, FEATURE_GATES only when gates are passed."""
    with open(os.path.join(DATA, "compute-domain-daemon.tmpl.yaml"), encoding="utf-8") as fh:
        text = fh.read()
    # `{{-` trims the whitespace before it, the newline included (Go text/template)
    text = re.sub(r"\n *\{\{- if \.ImagePullSecretNames \}\}.*?\{\{- end \}\}.*?\{\{- end \}\} *", "", text, flags=re.S)
    gates = r"\1" if feature_gates else ""
    text = re.sub(r"\n *\{\{- if \.FeatureGates \}\}(\n.*?)\n *\{\{- end \}\}", gates, text, flags=re.S)
    text = re.sub(r'"\{\{ range .*? \}\}"', f'"{feature_gates}"', text)
    values = {**COMMON, "Namespace": "nvidia-dra-driver-gpu", "Name": f"computedomain-daemon-{UID}",
              "ResourceClaimTemplateName": f"computedomain-daemon-{UID}", "ImageName": "registry/gpudra:9",
              "LogVerbosity": "4", "MaxNodesPerIMEXDomain": str(max_nodes)}
    return yaml.safe_load(re.sub(r"\{\{\s*\.([\w.]+)\s*\}\}", lambda m: values[m.group(1)], text))


def test_daemonset_is_nvidias_but_runs_gpudras_daemon() -> None:
    """The DaemonSet equals NVIDIA's rendered template but for the container's command (gpudra's daemon, which
    keeps /etc/hosts with IMEXDaemonsWithDNSNames), NVIDIA's LOG_VERBOSITY (klog's) and its exec probes (the IMEX
    process's state, which gpudra does not run); the command parses as `gpudra driver compute-domain-daemon`, and
    the daemon reads its identity from the pod's environment plus its claim's CDI environment."""
    from gpudra.cli.driver_services import compute_domain_daemon_cmd
    from gpudra.computedomain.records import DomainBinding
    from gpudra.computedomain.controller import DaemonPod
    from gpudra.computedomain.devices import NodeDevices, daemon_edits
    from gpudra.gpuplugin.featuregates import parse_feature_gates
    from gpudra.kubecluster.cddaemon import identity_from_env

    for gates, dns_names in (((), True), ((("ComputeDomainCliques", False), ("IMEXDaemonsWithDNSNames", False)), False)):
        pod = DaemonPod(image="registry/gpudra:9", max_nodes=7, feature_gates=gates, dns_names=dns_names)
        ours = daemonset(domain(), pod)
        gates_env = pod.feature_gates_env()
        expected = _nvidias_daemonset(gates_env, 7)
        container, = ours["spec"]["template"]["spec"]["containers"]
        nvidia, = expected["spec"]["template"]["spec"]["containers"]
        command = container.pop("command")
        assert command[:3] == ["gpudra", "driver", "compute-domain-daemon"]
        params = compute_domain_daemon_cmd.make_context("compute-domain-daemon", command[3:]).params
        assert params["in_cluster"] and params["hosts_file"] == ("/etc/hosts" if dns_names else None)
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            nvidia.pop(probe)
        nvidia.pop("command")
        nvidia["env"] = [e for e in nvidia["env"] if e["name"] != "LOG_VERBOSITY"]
        assert ours == expected
        # the effective gates the daemon parses are the controller's
        if gates:
            assert parse_feature_gates(gates_env).set == dict(gates)
        fields = {"spec.nodeName": "tray-1", "status.podIP": "10.0.0.7", "metadata.uid": "p-uid",
                  "metadata.name": "daemon-x", "metadata.namespace": "nvidia-dra-driver-gpu"}
        env = {e["name"]: e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
               for e in container["env"]}
        cdi = daemon_edits(DomainBinding(domain_id=UID, clique="c.1", domain_name="train", domain_namespace="team-a"),
                           "/tmp/d", NodeDevices(0, 0, None))
        env.update(kv.split("=", 1) for kv in cdi.env)
        me = identity_from_env(env)
        assert (me.domain_uid, me.node_name, me.pod_ip, me.pod_name, me.clique_id, me.max_nodes) == (
            UID, "tray-1", "10.0.0.7", "daemon-x", "c.1", 7)
