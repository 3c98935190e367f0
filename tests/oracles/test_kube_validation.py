"""`gpudra validate` against the real kube-apiserver (1.34 and 1.36, built from Go modules): a server-side dry-run
create of every manifest in the test corpora, hostile variants included, accepts what gpudra accepts and rejects
what gpudra rejects, naming a field gpudra names. Run with the release's default gates, with the DRA gates toggled,
and on 1.36 with the Workload API's gates on (its alpha scheduling.k8s.io/v1alpha2 served by --runtime-config)."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from support.realkube import BUILD_TIMEOUT_S, ROOT, built, gpudra, short_dir

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)

CORPORA = [ROOT / "examples", ROOT / "gpudra" / "demo" / "data", ROOT / "tests" / "data" / "api",
           ROOT / "tests" / "data" / "explain", ROOT / "tests" / "data" / "gang"]
RESOURCES = {  # kind -> (resource, namespaced); the path's group/version is the document's own apiVersion
    "DeviceClass": ("deviceclasses", False), "ResourceSlice": ("resourceslices", False),
    "ResourceClaim": ("resourceclaims", True), "ResourceClaimTemplate": ("resourceclaimtemplates", True),
    "Pod": ("pods", True), "ConfigMap": ("configmaps", True), "Deployment": ("deployments", True),
    "Workload": ("workloads", True), "PodGroup": ("podgroups", True),
}
WORKLOAD_GATES = "default,+GenericWorkload,+GangScheduling,+TopologyAwareWorkloadScheduling"
DRA_KINDS = {"DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"}


def corpus_documents() -> list[dict]:
    docs = []
    for root in CORPORA:
        for path in sorted(root.rglob("*")):
            if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
                continue
            try:
                loaded = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
            except yaml.YAMLError:
                continue
            for doc in loaded:
                items = doc.get("items") if isinstance(doc, dict) and doc.get("kind", "").endswith("List") else [doc]
                docs += [d for d in items or [] if isinstance(d, dict) and d.get("kind") in
                         RESOURCES and isinstance(d.get("metadata"), dict)
                         and isinstance(d.get("apiVersion"), str)]
    return docs


def hostile_variants(docs: list[dict]) -> list[dict]:
    """What users and attackers write wrong, on real manifests: one change each."""
    out = []

    def variant(doc: dict, change) -> None:
        copied = copy.deepcopy(doc)
        change(copied)
        out.append(copied)

    for doc in docs:
        kind = doc["kind"]
        variant(doc, lambda d: d["metadata"].__setitem__("name", "Upper_Case"))
        variant(doc, lambda d: d["metadata"].__setitem__("name", "a" * 254))
        variant(doc, lambda d: d["metadata"].setdefault("labels", {}).__setitem__("bad key/x/y", "v"))
        if kind in ("ResourceClaim", "ResourceClaimTemplate"):
            spec = doc["spec"] if kind == "ResourceClaim" else doc["spec"].get("spec", {})
            requests = (spec.get("devices") or {}).get("requests") or []
            if not requests:
                continue

            def requests_of(d: dict) -> list:
                s = d["spec"] if d["kind"] == "ResourceClaim" else d["spec"]["spec"]
                return s["devices"]["requests"]

            variant(doc, lambda d: requests_of(d).append(copy.deepcopy(requests_of(d)[0])))  # duplicate name
            variant(doc, lambda d: requests_of(d)[0].__setitem__("name", "Bad_Name"))
            if "exactly" in requests[0]:
                variant(doc, lambda d: requests_of(d)[0]["exactly"].__setitem__("count", 0))
                variant(doc, lambda d: requests_of(d)[0]["exactly"].__setitem__("allocationMode", "Some"))
                variant(doc, lambda d: requests_of(d)[0]["exactly"].__setitem__(
                    "selectors", [{"cel": {"expression": "device.driver == "}}]))
                variant(doc, lambda d: requests_of(d)[0]["exactly"].__setitem__(
                    "selectors", [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].memory >= 16"}}]))
                for expression in ('quantity("16GB") != quantity("16GB")', 'semver("1.2") != semver("1.2")',
                                   'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("16GB")) >= 0',
                                   'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("16 Gi")) >= 0',
                                   'device.attributes["memory"].productName == "x"',
                                   'device.attributes["gpu.nvidia.com"].prodcutName == "x"',
                                   'device.attributes["gpu.nvidia.com"].memory == "x"'):
                    variant(doc, lambda d, expression=expression: requests_of(d)[0]["exactly"].__setitem__(
                        "selectors", [{"cel": {"expression": expression}}]))
                variant(doc, lambda d: requests_of(d)[0]["exactly"].__setitem__("deviceClassName", "nvidia.com/gpu"))
                variant(doc, lambda d: requests_of(d)[0]["exactly"].__setitem__("count", 2 ** 31))
            variant(doc, lambda d: requests_of(d).extend(
                {"name": f"r{i}", "exactly": {"deviceClassName": "gpu.nvidia.com"}} for i in range(40)))
        elif kind == "ResourceSlice":
            variant(doc, lambda d: d["spec"].__setitem__("driver", "Not_A_Driver"))
            variant(doc, lambda d: d["spec"]["pool"].__setitem__("generation", -1))
            if d_devices := doc["spec"].get("devices"):
                variant(doc, lambda d: d["spec"]["devices"][0].__setitem__("name", "GPU-0"))
                variant(doc, lambda d: d["spec"]["devices"].append(copy.deepcopy(d["spec"]["devices"][0])))
                variant(doc, lambda d: d["spec"]["devices"][0].setdefault("attributes", {}).__setitem__(
                    "x", {"int": 1, "string": "both"}))
                variant(doc, lambda d: d["spec"]["devices"][0].setdefault("capacity", {}).__setitem__(
                    "memory", {"value": "16 Gi"}))
                del d_devices
        elif kind == "PodGroup":
            variant(doc, lambda d: d["spec"]["schedulingPolicy"].__setitem__("gang", {"minCount": 0}))
            variant(doc, lambda d: d["spec"]["schedulingPolicy"].__setitem__("basic", {}))  # two policies
            variant(doc, lambda d: d["spec"].__setitem__("schedulingConstraints", {"topology": [
                {"key": "nvidia.com/gpu.clique"}, {"key": "topology.kubernetes.io/zone"}]}))
            variant(doc, lambda d: d["spec"].__setitem__("schedulingConstraints", {"topology": [{"key": "Bad Key"}]}))
            variant(doc, lambda d: d["spec"].__setitem__("schedulingConstraints", {"topology": [
                {"key": "nvidia.com/gpu.clique"}]}))
        elif kind == "Pod" and doc["spec"].get("schedulingGroup"):
            variant(doc, lambda d: d["spec"]["schedulingGroup"].__setitem__("podGroupName", "Not_A_Name"))
        elif kind == "DeviceClass":
            variant(doc, lambda d: d["spec"].__setitem__("selectors", [{"cel": {"expression": "1 +"}}]))
            variant(doc, lambda d: d["spec"].__setitem__("extendedResourceName", "gpu"))
    return out


def server_verdict(rest, doc: dict) -> tuple[bool, set[str], str]:
    from gpudra.kubecluster.rest import ApiError

    resource, namespaced = RESOURCES[doc["kind"]]
    prefix = "/api/v1" if doc["apiVersion"] == "v1" else f"/apis/{doc['apiVersion']}"
    namespace = doc["metadata"].get("namespace") or "default"
    path = f"{prefix}/namespaces/{namespace}/{resource}" if namespaced else f"{prefix}/{resource}"
    try:
        rest.call("POST", path, doc, query={"dryRun": "All", "fieldValidation": "Strict"})
        return True, set(), ""
    except ApiError as exc:
        if exc.status == 409:  # exists already (a corpus names one object twice): not a validation answer
            return True, set(), ""
        status = exc.status_object()
        message = str(status.get("message") or exc.body)
        fields = {c["field"] for c in (status.get("details") or {}).get("causes") or [] if c.get("field")}
        fields |= set(re.findall(r'unknown field "([^"]+)"', message))
        text = message
        return False, fields, text


def gpudra_verdicts(docs: list[dict], directory: Path, gates: str, release: str,
                    runtime_config: str) -> list[tuple[bool, set[str], str]]:
    for i, doc in enumerate(docs):
        (directory / f"{i:05d}.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = gpudra("validate", "-f", str(directory), "-o", "json", "--kubernetes-version", release,
                    *(["--features", gates] if gates != "default" else []),
                    *(["--runtime-config", runtime_config] if runtime_config else []), check=False)
    assert result.returncode in (0, 1), result.stderr[-2000:]
    problems = json.loads(result.stdout or "[]")
    verdicts: list[tuple[bool, set[str], str]] = [(True, set(), "") for _ in docs]
    for problem in problems:
        if problem.get("severity") != "error":
            continue
        index = int(Path(problem["source"]).stem)
        _, paths, messages = verdicts[index]
        verdicts[index] = (False, paths | {problem.get("path") or ""}, messages + problem["message"][:200] + "; ")
    return verdicts


def _related(server_fields: set[str], ours: set[str]) -> bool:
    """A field the server names is one gpudra names, or lies inside or around one (the server names a list, gpudra
    its entry; or the reverse)."""
    def norm(path: str) -> str:
        return path.lstrip(".").replace("[", ".[")

    if not server_fields:
        return True  # the server gave no field (a message only): the verdict is what can be compared
    return any(norm(s).startswith(norm(o)) or norm(o).startswith(norm(s)) for s in server_fields for o in ours)


@pytest.mark.parametrize("release, gates", [("1.34", "default"), ("1.34", "all,-ListTypeAttributes"), ("1.34", "none"),
                                           ("1.36", "default"), ("1.36", WORKLOAD_GATES)])
def test_validate_agrees_with_a_server_side_dry_run(release, gates, tmp_path):
    from gpudra.cluster.layout import ClusterConfig, ClusterDir
    from gpudra.kubecluster import controlplane
    from gpudra.kubecluster.rest import Rest

    binary = built(None if release == "1.34" else release)
    directory = short_dir("gv")
    cluster = ClusterDir(directory)
    config = ClusterConfig(nodes=[], kubernetes_version=release, features=gates)
    try:
        cluster.save_config(config)
        controlplane.start(cluster, config, binary, components=("etcd", "kube-apiserver"))
        rest = Rest(controlplane.KubePaths(cluster).admin_kubeconfig)
        docs = corpus_documents()
        docs += hostile_variants(docs)
        for namespace in sorted({d["metadata"].get("namespace") or "default" for d in docs}):
            try:
                rest.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": namespace}})
            except Exception:  # noqa: BLE001 - exists, or a hostile namespace name the server refuses
                pass
        ours = gpudra_verdicts(docs, tmp_path, gates, release, controlplane.runtime_config(config))
        differences = []
        for doc, (accepted, paths, messages) in zip(docs, ours):
            server_ok, fields, text = server_verdict(rest, doc)
            if server_ok != accepted or (not server_ok and not _related(fields, paths)):
                differences.append(f"{doc['kind']} {doc['metadata'].get('name')!r}: server "
                                   f"{'accepts' if server_ok else 'rejects ' + str(sorted(fields)) + ' ' + text[:300]}"
                                   f"; gpudra {'accepts' if accepted else 'rejects ' + str(sorted(paths)) + ' ' + messages[:300]}")
        assert len(docs) > 200
        assert not differences, f"{len(differences)} of {len(docs)} differ:\n" + "\n".join(differences[:40])
    finally:
        controlplane.stop(cluster)
        shutil.rmtree(directory, ignore_errors=True)
