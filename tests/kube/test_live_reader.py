"""A canned, read-only Kubernetes API server on loopback for tests of the live-cluster reader."""

from __future__ import annotations




# --------------------------------------------------------------------------------------------- tests

import pytest  # noqa: E402

from gpudra.kube import ClusterReadError, read_cluster  # noqa: E402
from support.fake_apiserver import FakeApiServer  # noqa: F401
from support.fake_apiserver import _PATHS  # noqa: F401

CLUSTER = [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}"}} for i in range(3)
] + [
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.example.com"},
     "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "node-0-gpu"},
     "spec": {"driver": "gpu.example.com", "nodeName": "node-0",
              "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": 1},
              "devices": [{"name": "gpu-0"}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
     "metadata": {"name": "c", "namespace": "team-a"},
     "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
     "spec": {"containers": [{"name": "c", "image": "x"}]}},
]


def test_reads_every_kind_with_api_version_and_kind(tmp_path):
    with FakeApiServer(CLUSTER) as server:
        objects = read_cluster(kubeconfig=server.kubeconfig(str(tmp_path / "kc")))
    kinds = [obj["kind"] for obj in objects]
    assert kinds == ["Node"] * 3 + ["DeviceClass", "ResourceSlice", "ResourceClaim", "Pod"]
    claim = next(obj for obj in objects if obj["kind"] == "ResourceClaim")
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    assert claim["metadata"] == {"name": "c", "namespace": "team-a"}
    assert objects[0] == {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-0"}}


def test_follows_continue_tokens_and_only_reads(tmp_path):
    with FakeApiServer(CLUSTER, page_size=2) as server:
        objects = read_cluster(kubeconfig=server.kubeconfig(str(tmp_path / "kc")))
        node_requests = [path for method, path in server.requests if path.startswith("/api/v1/nodes")]
        methods = {method for method, _ in server.requests}
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Node"] == ["node-0", "node-1", "node-2"]
    assert len(node_requests) == 2 and "continue=2" in node_requests[1]
    assert methods == {"GET"}


def test_missing_optional_kind_is_skipped_and_reported(tmp_path):
    skipped = []
    with FakeApiServer(CLUSTER) as server:
        read_cluster(kubeconfig=server.kubeconfig(str(tmp_path / "kc")), on_skip=lambda kind, why: skipped.append(kind.kind))
    # The fake server serves neither DeviceTaintRules nor the Workload API (alpha APIs), in any version.
    assert skipped == ["DeviceTaintRule"] * 3 + ["Workload"] * 2 + ["PodGroup"]


def test_context_selection(tmp_path):
    with FakeApiServer(CLUSTER) as server:
        path = server.kubeconfig(str(tmp_path / "kc"), context="lab")
        assert len(read_cluster(kubeconfig=path, context="lab")) == len(CLUSTER)
        with pytest.raises(ClusterReadError, match="nope"):
            read_cluster(kubeconfig=path, context="nope")


def test_unauthorized_is_a_clean_error(tmp_path):
    with FakeApiServer(CLUSTER, token="other") as server:
        path = server.kubeconfig(str(tmp_path / "kc"))
        server.token = "something-else"
        with pytest.raises(ClusterReadError, match="401 Unauthorized"):
            read_cluster(kubeconfig=path)


def test_unreachable_server_is_a_clean_error(tmp_path):
    with FakeApiServer([]) as server:
        path = server.kubeconfig(str(tmp_path / "kc"))
        url = server.url
    # The server is shut down now: connection refused, said as kubectl says it (no urllib3 internals).
    with pytest.raises(ClusterReadError) as refused:
        read_cluster(kubeconfig=path)
    assert str(refused.value) == f"cannot reach the API server {url} (GET /api/v1/nodes): connection refused"


def test_missing_kubeconfig_file(tmp_path):
    absent = str(tmp_path / "absent")
    with pytest.raises(ClusterReadError) as missing:
        read_cluster(kubeconfig=absent)
    assert str(missing.value) == f"cannot load kubeconfig {absent}: no such file or directory"
