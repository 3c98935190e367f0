"""`gpudra explain` of a pod held back by scheduling gates."""

from __future__ import annotations

from tests.support.builders import claim, gpu_cluster, pod

from gpudra.explain.analyze import explain


def test_a_gated_pod_says_so_and_names_removing_the_gates_as_the_fix():
    gated = pod("p", claims={"gpu": "c"})
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    explanation = explain([*gpu_cluster({"a": 1}), claim("c"), gated], "pod/p")
    assert not explanation.fits
    # kube-scheduler's own wording: no "0/N nodes are available" (no node was looked at)
    assert explanation.summary == "Scheduling is blocked due to non-empty scheduling gates: kueue.x-k8s.io/admission"
    assert [fix.nodes for fix in explanation.fixes] == [["a"]]
    assert "scheduling gates" in explanation.fixes[0].message
