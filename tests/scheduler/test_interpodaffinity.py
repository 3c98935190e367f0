"""InterPodAffinity against kube-scheduler's own test tables (k8s.io/kubernetes v1.34.4,
pkg/scheduler/framework/plugins/interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode and
TestRequiredAffinityMultipleNodes, scoring_test.go TestPreferredAffinity): each case keeps upstream's name, pods,
nodes and expected statuses / normalised scores, run through gpudra's Scheduler (PreFilter in `pod_info`, Filter in
`filter_node`, PreScore/Score/NormalizeScore in gpudra.scheduler.interpodaffinity). Upstream's namespace "" is
gpudra's "default" (both sides of every comparison)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from gpudra.scheduler import ClusterState, Scheduler
from gpudra.scheduler import interpodaffinity as ipa

AFF, ANTI, EXISTING = ipa.AFFINITY_RULES_NOT_MATCH, ipa.ANTI_AFFINITY_RULES_NOT_MATCH, ipa.EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH
NAMESPACES = [  # scoring_test.go's `namespaces` (nsLabelT1, nsLabelT2), also given to the Filter tests there
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": {"team": t}}}
    for n, t in (("subteam1.team1", "team1"), ("subteam2.team1", "team1"), ("subteam1.team2", "team2"),
                 ("subteam2.team2", "team2"))
]


def sel(*expressions: tuple[str, str, list[str] | None]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": k, "operator": op, **({"values": v} if v is not None else {})}
                                 for k, op, v in expressions]}


def term(selector: dict[str, Any] | None, topology: str, namespaces: list[str] | None = None,
         namespace_selector: dict[str, Any] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"topologyKey": topology}
    if selector is not None:
        found["labelSelector"] = selector
    if namespaces:
        found["namespaces"] = namespaces
    if namespace_selector is not None:
        found["namespaceSelector"] = namespace_selector
    return found


def t_in(key: str, topology: str, values: list[str]) -> dict[str, Any]:  # st.PodAffinityIn
    return term(sel((key, "In", values)), topology)


def t_not_in(key: str, topology: str, values: list[str]) -> dict[str, Any]:
    return term(sel((key, "NotIn", values)), topology)


def t_exists(key: str, topology: str) -> dict[str, Any]:
    return term(sel((key, "Exists", None)), topology)


def affinity(required: Sequence[Any] = (), anti: Sequence[Any] = (), preferred: Sequence[Any] = (),
             preferred_anti: Sequence[Any] = ()) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if required or preferred:
        found["podAffinity"] = {k: v for k, v in (
            ("requiredDuringSchedulingIgnoredDuringExecution", list(required)),
            ("preferredDuringSchedulingIgnoredDuringExecution",
             [{"weight": w, "podAffinityTerm": t} for w, t in preferred])) if v}
    if anti or preferred_anti:
        found["podAntiAffinity"] = {k: v for k, v in (
            ("requiredDuringSchedulingIgnoredDuringExecution", list(anti)),
            ("preferredDuringSchedulingIgnoredDuringExecution",
             [{"weight": w, "podAffinityTerm": t} for w, t in preferred_anti])) if v}
    return found


def pod(labels: dict[str, str] | None = None, namespace: str = "default", node: str | None = None,
        aff: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if node:
        spec["nodeName"] = node
    if aff:
        spec["affinity"] = aff
    return {"metadata": {"namespace": namespace, "labels": dict(labels or {})}, "spec": spec}


def run(incoming: dict[str, Any], existing: list[dict[str, Any]], nodes: dict[str, dict[str, str]]) -> tuple[Scheduler, Any]:
    objects: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": labels}}
                                     for n, labels in nodes.items()]
    objects += NAMESPACES
    names = [f"p{i}" for i in range(len(existing))] + ["incoming"]
    for name, p in zip(names, [*existing, incoming]):
        objects.append({"apiVersion": "v1", "kind": "Pod", **p, "metadata": {**p["metadata"], "name": name}})
    scheduler = Scheduler(ClusterState(objects))
    key = f"{incoming['metadata']['namespace']}/incoming"
    return scheduler, scheduler.pod_info(key)


def filter_statuses(scheduler: Scheduler, info: Any, nodes: dict[str, dict[str, str]]) -> list[str | None]:
    found = []
    for node in nodes:
        reasons = [r for r in scheduler.filter_node(info, node, all_reasons=True).result.reasons
                   if r.plugin == "InterPodAffinity"]
        found.append(reasons[0].message if reasons else None)
    return found


POD_LABEL = {"service": "securityscan"}
POD_LABEL2 = {"security": "S1"}
NODE1 = {"node1": {"region": "r1", "zone": "z11"}}
EXISTING_POD = pod(POD_LABEL, node="node1")
TEAM1 = sel(("team", "In", ["team1"]))

# (upstream name, incoming pod, existing pods, nodes, expected Filter message per node; "skip": PreFilter skips)
SINGLE_NODE: list[tuple[str, dict[str, Any], list[dict[str, Any]], dict[str, dict[str, str]], Any]] = [
    ("A pod that has no required pod affinity scheduling rules can schedule onto a node with no existing pods",
     pod(), [], NODE1, "skip"),
    ("satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that matches the existing pod",
     pod(POD_LABEL2, aff=affinity([t_in("service", "region", ["securityscan", "value2"])])), [EXISTING_POD], NODE1, [None]),
    ("satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in operator in labelSelector that matches the existing pod",
     pod(POD_LABEL2, aff=affinity([t_not_in("service", "region", ["securityscan3", "value3"])])), [EXISTING_POD], NODE1, [None]),
    ("Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
     pod(POD_LABEL2, aff=affinity([term(sel(("service", "In", ["securityscan", "value2"])), "", ["DiffNameSpace"])])),
     [pod({"service": "securityscan"}, "ns", "node1")], NODE1, [AFF]),
    ("Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
     pod(POD_LABEL, aff=affinity([t_in("service", "", ["antivirusscan", "value2"])])), [EXISTING_POD], NODE1, [AFF]),
    ("satisfies the PodAffinity and PodAntiAffinity with the existing pod",
     pod(POD_LABEL2, aff=affinity([t_in("service", "region", ["securityscan", "value2"])],
                                  [t_in("service", "node", ["antivirusscan", "value2"])])), [EXISTING_POD], NODE1, [None]),
    ("satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the existing pod",
     pod(POD_LABEL2, aff=affinity([t_in("service", "region", ["securityscan", "value2"])],
                                  [t_in("service", "node", ["antivirusscan", "value2"])])),
     [pod(POD_LABEL, node="node1", aff=affinity(anti=[t_in("service", "node", ["antivirusscan", "value2"])]))], NODE1, [None]),
    ("satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
     pod(POD_LABEL2, aff=affinity([t_in("service", "region", ["securityscan", "value2"])],
                                  [t_in("service", "zone", ["securityscan", "value2"])])), [EXISTING_POD], NODE1, [ANTI]),
    ("satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the existing pod",
     pod(POD_LABEL, aff=affinity([t_in("service", "region", ["securityscan", "value2"])],
                                 [t_in("service", "node", ["antivirusscan", "value2"])])),
     [pod(POD_LABEL, node="node1", aff=affinity(anti=[t_in("service", "zone", ["securityscan", "value2"])]))], NODE1, [EXISTING]),
    ("pod matches its own Label in PodAffinity and that matches the existing pod Labels",
     pod(POD_LABEL, aff=affinity([t_not_in("service", "region", ["securityscan", "value2"])])),
     [pod({"service": "securityscan"}, node="node2")], NODE1, [AFF]),
    ("verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. doesn't satisfy PodAntiAffinity symmetry with the existing pod",
     pod(POD_LABEL), [pod(POD_LABEL, node="node1", aff=affinity(anti=[t_in("service", "zone", ["securityscan", "value2"])]))],
     NODE1, [EXISTING]),
    ("verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod",
     pod(POD_LABEL), [pod(POD_LABEL, node="node1", aff=affinity(anti=[t_not_in("service", "zone", ["securityscan", "value2"])]))],
     NODE1, "skip"),
    ("satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity symmetry with incoming pod",
     pod(POD_LABEL, aff=affinity(anti=[t_exists("service", "region"), t_exists("security", "region")])),
     [pod(POD_LABEL2, node="node1", aff=affinity(anti=[t_exists("security", "zone")]))], NODE1, [ANTI]),
    ("PodAntiAffinity symmetry check a1: incoming pod and existing pod partially match each other on AffinityTerms",
     pod(POD_LABEL, aff=affinity(anti=[t_exists("service", "zone"), t_exists("security", "zone")])),
     [pod(POD_LABEL2, node="node1", aff=affinity(anti=[t_exists("security", "zone")]))], NODE1, [ANTI]),
    ("PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each other on AffinityTerms",
     pod(POD_LABEL2, aff=affinity(anti=[t_exists("security", "zone")])),
     [pod(POD_LABEL, node="node1", aff=affinity(anti=[t_exists("service", "zone"), t_exists("security", "zone")]))],
     NODE1, [EXISTING]),
    ("PodAntiAffinity symmetry check b1: incoming pod and existing pod partially match each other on AffinityTerms",
     pod({"abc": "", "xyz": ""}, aff=affinity(anti=[t_exists("abc", "zone"), t_exists("def", "zone")])),
     [pod({"def": "", "xyz": ""}, node="node1", aff=affinity(anti=[t_exists("abc", "zone"), t_exists("def", "zone")]))],
     NODE1, [ANTI]),
    ("PodAntiAffinity symmetry check b2: incoming pod and existing pod partially match each other on AffinityTerms",
     pod({"def": "", "xyz": ""}, aff=affinity(anti=[t_exists("abc", "zone"), t_exists("def", "zone")])),
     [pod({"abc": "", "xyz": ""}, node="node1", aff=affinity(anti=[t_exists("abc", "zone"), t_exists("def", "zone")]))],
     NODE1, [ANTI]),
    ("affinity with NamespaceSelector",
     pod(POD_LABEL2, aff=affinity([term(sel(("service", "In", ["securityscan", "value2"])), "region", None, TEAM1)])),
     [pod(POD_LABEL, "subteam1.team1", "node1")], NODE1, [None]),
    ("affinity with non-matching NamespaceSelector",
     pod(POD_LABEL2, aff=affinity([term(sel(("service", "In", ["securityscan", "value2"])), "region", None, TEAM1)])),
     [pod(POD_LABEL, "subteam1.team2", "node1")], NODE1, [AFF]),
    ("anti-affinity with matching NamespaceSelector",
     pod(POD_LABEL2, "subteam1.team1", aff=affinity(anti=[term(sel(("service", "In", ["securityscan", "value2"])), "zone", None, TEAM1)])),
     [pod(POD_LABEL, "subteam2.team1", "node1")], NODE1, [ANTI]),
    ("anti-affinity with matching all NamespaceSelector",
     pod(POD_LABEL2, "subteam1.team1", aff=affinity(anti=[term(sel(("service", "In", ["securityscan", "value2"])), "zone", None, {})])),
     [pod(POD_LABEL, "subteam2.team1", "node1")], NODE1, [ANTI]),
    ("anti-affinity with non-matching NamespaceSelector",
     pod(POD_LABEL2, "subteam1.team1", aff=affinity(anti=[term(sel(("service", "In", ["securityscan", "value2"])), "zone", None, TEAM1)])),
     [pod(POD_LABEL, "subteam1.team2", "node1")], NODE1, [None]),
]

CHINA, CHINA_AZ1, INDIA = {"region": "China"}, {"region": "China", "az": "az1"}, {"region": "India"}
AB_NODES = {"nodeA": {"region": "r1", "zone": "z1", "hostname": "nodeA"},
            "nodeB": {"region": "r1", "zone": "z2", "hostname": "nodeB"}}
AB_SAME_ZONE = {"nodeA": {"region": "r1", "zone": "z1", "hostname": "nodeA"},
                "nodeB": {"region": "r1", "zone": "z1", "hostname": "nodeB"}}
MULTIPLE_NODES: list[tuple[str, dict[str, Any], list[dict[str, Any]], dict[str, dict[str, str]], Any]] = [
    ("A pod can be scheduled onto all the nodes that have the same topology key & label value with one of them has an existing pod that matches the affinity rules",
     pod(aff=affinity([t_in("foo", "region", ["bar"])])), [pod({"foo": "bar"}, node="node1")],
     {"node1": CHINA, "node2": CHINA_AZ1, "node3": INDIA}, [None, None, AFF]),
    ("The affinity rule is to schedule all of the pods of this collection to the same zone. The first pod of the collection "
     "should not be blocked from being scheduled onto any node, even there's no existing pod that matches the rule anywhere.",
     pod({"foo": "bar", "service": "securityscan"}, aff=affinity([t_in("foo", "zone", ["bar"]), t_in("service", "zone", ["securityscan"])])),
     [pod({"foo": "bar"}, node="nodeA")],
     {"nodeA": {"zone": "az1", "hostname": "h1"}, "nodeB": {"zone": "az2", "hostname": "h2"}}, [None, None]),
    ("The first pod of the collection can only be scheduled on nodes labelled with the requested topology keys",
     pod({"foo": "bar", "service": "securityscan"}, aff=affinity([t_in("foo", "zone", ["bar"]), t_in("service", "zone", ["securityscan"])])),
     [pod({"foo": "bar"}, node="nodeA")],
     {"nodeA": {"zoneLabel": "az1", "hostname": "h1"}, "nodeB": {"zoneLabel": "az2", "hostname": "h2"}}, [AFF, AFF]),
    ("NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB.",
     pod(aff=affinity(anti=[t_in("foo", "region", ["abc"])])), [pod({"foo": "abc"}, node="nodeA")],
     {"nodeA": {"region": "r1", "hostname": "nodeA"}, "nodeB": {"region": "r1", "hostname": "nodeB"}}, [ANTI, ANTI]),
    ("This test ensures that anti-affinity matches a pod when any term of the anti-affinity rule matches a pod.",
     pod(aff=affinity(anti=[t_in("foo", "region", ["abc"]), t_in("service", "zone", ["securityscan"])])),
     [pod({"foo": "abc", "service": "securityscan"}, node="nodeA")],
     {"nodeA": {"region": "r1", "zone": "z1", "hostname": "nodeA"}, "nodeB": {"region": "r1", "zone": "z2", "hostname": "nodeB"}},
     [ANTI, ANTI]),
    ("NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB but can be scheduled onto nodeC",
     pod(aff=affinity(anti=[t_in("foo", "region", ["abc"])])), [pod({"foo": "abc"}, node="nodeA")],
     {"nodeA": CHINA, "nodeB": CHINA_AZ1, "nodeC": INDIA}, [ANTI, ANTI, None]),
    ("NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA, nodeB, but can be scheduled onto nodeC (NodeC has an existing pod that match the inter pod affinity rule but in different namespace)",
     pod({"foo": "123"}, "NS1", aff=affinity(anti=[t_in("foo", "region", ["bar"])])),
     [pod({"foo": "bar"}, "NS1", "nodeA"), pod({}, "NS2", "nodeC", affinity(anti=[t_in("foo", "region", ["123"])]))],
     {"nodeA": CHINA, "nodeB": CHINA_AZ1, "nodeC": INDIA}, [ANTI, ANTI, None]),
    ("Test existing pod's anti-affinity: if an existing pod has a term with invalid topologyKey, labelSelector of the term is firstly checked, and then topologyKey of the term is also checked",
     pod({"foo": ""}), [pod({}, node="nodeA", aff=affinity(anti=[t_exists("foo", "invalid-node-label")]))], AB_SAME_ZONE, "skip"),
    ("Test incoming pod's anti-affinity: incoming pod wouldn't considered as a fit as it at least violates one anti-affinity rule of existingPod",
     pod(aff=affinity(anti=[t_exists("foo", "zone"), t_exists("bar", "region")])),
     [pod({"foo": ""}, node="nodeA"), pod({"bar": ""}, node="nodeB")], AB_NODES, [ANTI, ANTI]),
    ("Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey",
     pod({"foo": "", "bar": ""}), [pod({}, node="nodeA", aff=affinity(anti=[t_exists("foo", "invalid-node-label"), t_exists("bar", "zone")]))],
     AB_NODES, [EXISTING, None]),
    ("Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match",
     pod(aff=affinity([t_exists("foo", "region"), t_exists("bar", "zone")])), [pod({"foo": "", "bar": ""}, node="nodeA")],
     AB_SAME_ZONE, [None, None]),
    ("Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match, and the match logic should be satisfied on the same pod",
     pod(aff=affinity([t_exists("foo", "region"), t_exists("bar", "zone")])),
     [pod({"foo": ""}, node="nodeA"), pod({"bar": ""}, node="nodeB")], AB_NODES, [AFF, AFF]),
]


@pytest.mark.parametrize("name,incoming,existing,nodes,want", SINGLE_NODE + MULTIPLE_NODES,
                         ids=[case[0][:100] for case in SINGLE_NODE + MULTIPLE_NODES])
def test_filter_as_upstream(name: str, incoming: dict[str, Any], existing: list[dict[str, Any]],
                            nodes: dict[str, dict[str, str]], want: Any) -> None:
    scheduler, info = run(incoming, existing, nodes)
    if want == "skip":
        assert info.affinity is None
        return
    assert info.affinity is not None
    assert filter_statuses(scheduler, info, nodes) == want


S1, S2 = {"security": "S1"}, {"security": "S2"}
AZ1, AZ2 = {"az": "az1"}, {"az": "az2"}
STAY_WITH_S1_IN_REGION = affinity(preferred=[(5, t_in("security", "region", ["S1"]))])
STAY_WITH_S2_IN_REGION = affinity(preferred=[(6, t_in("security", "region", ["S2"]))])
AFFINITY3 = affinity(preferred=[(8, term(sel(("security", "NotIn", ["S1"]), ("security", "In", ["S2"])), "region")),
                                (2, term(sel(("security", "Exists", None), ("wrongkey", "DoesNotExist", None)), "region"))])
HARD_AFFINITY = affinity([t_in("security", "region", ["S1", "value2"]),
                          term(sel(("security", "Exists", None), ("wrongkey", "DoesNotExist", None)), "region")])
AWAY_FROM_S1_IN_AZ = affinity(preferred_anti=[(5, t_in("security", "az", ["S1"]))])
AWAY_FROM_S2_IN_AZ = affinity(preferred_anti=[(5, t_in("security", "az", ["S2"]))])
STAY_S1_AWAY_S2 = affinity(preferred=[(8, t_in("security", "region", ["S1"]))],
                           preferred_anti=[(5, t_in("security", "az", ["S2"]))])
NS_SELECTOR_TERM = term(sel(("security", "In", ["S1"])), "region", ["subteam2.team2"], TEAM1)
AFFINITY_NS_SELECTOR = affinity(preferred=[(5, NS_SELECTOR_TERM)])
ANTI_AFFINITY_NS_SELECTOR = affinity(preferred_anti=[(5, NS_SELECTOR_TERM)])
THREE = {"node1": CHINA, "node2": INDIA, "node3": AZ1}

# (upstream name, incoming pod, existing pods, nodes, expected normalised score per node; "skip": PreScore skips)
SCORES = [
    ("all nodes are same priority as Affinity is nil", pod(S1), [], THREE, "skip"),
    ("Affinity: pod that matches topology key & pods in nodes will get high score comparing to others"
     "which doesn't match either pods in nodes or in topology key",
     pod(S1, aff=STAY_WITH_S1_IN_REGION), [pod(S1, node="node1"), pod(S2, node="node2"), pod(S1, node="node3")],
     THREE, [100, 0, 0]),
    ("All the nodes that have the same topology key & label value with one of them has an existing pod that match the affinity rules, have the same score",
     pod(aff=STAY_WITH_S1_IN_REGION), [pod(S1, node="node1")], {"node1": CHINA, "node2": CHINA_AZ1, "node3": INDIA},
     [100, 100, 0]),
    ("Affinity: nodes in one region has more matching pods comparing to other region, so the region which has more matches will get high score",
     pod(S1, aff=STAY_WITH_S2_IN_REGION), [pod(S2, node=n) for n in ("node1", "node1", "node2", "node3", "node4", "node5")],
     {"node1": CHINA, "node2": INDIA, "node3": CHINA, "node4": CHINA, "node5": INDIA}, [100, 0, 100, 100, 0]),
    ("Affinity: different Label operators and values for pod affinity scheduling preference, including some match failures ",
     pod(S1, aff=AFFINITY3), [pod(S1, node="node1"), pod(S2, node="node2"), pod(S1, node="node3")], THREE, [20, 100, 0]),
    ("Affinity symmetry: considered only the preferredDuringSchedulingIgnoredDuringExecution in pod affinity symmetry",
     pod(S2), [pod(S1, node="node1", aff=STAY_WITH_S1_IN_REGION), pod(S2, node="node2", aff=STAY_WITH_S2_IN_REGION)],
     THREE, [0, 100, 0]),
    ("Affinity symmetry with namespace selector",
     pod(S1, "subteam1.team1"), [pod(S1, node="node1", aff=AFFINITY_NS_SELECTOR), pod(S2, node="node2", aff=STAY_WITH_S2_IN_REGION)],
     THREE, [100, 0, 0]),
    ("AntiAffinity symmetry with namespace selector",
     pod(S1, "subteam1.team1"), [pod(S1, node="node1", aff=ANTI_AFFINITY_NS_SELECTOR), pod(S2, node="node2", aff=STAY_WITH_S2_IN_REGION)],
     THREE, [0, 100, 100]),
    ("Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution in pod affinity symmetry",
     pod(S1), [pod(S1, node="node1", aff=HARD_AFFINITY), pod(S2, node="node2", aff=HARD_AFFINITY)], THREE, [100, 100, 0]),
    ("Anti Affinity: pod that does not match existing pods in node will get high score ",
     pod(S1, aff=AWAY_FROM_S1_IN_AZ), [pod(S1, node="node1"), pod(S2, node="node2")], {"node1": AZ1, "node2": CHINA}, [0, 100]),
    ("Anti Affinity: pod that does not match topology key & match the pods in nodes will get higher score comparing to others ",
     pod(S1, aff=AWAY_FROM_S1_IN_AZ), [pod(S1, node="node1"), pod(S1, node="node2")], {"node1": AZ1, "node2": CHINA}, [0, 100]),
    ("Anti Affinity: one node has more matching pods comparing to other node, so the node which has more unmatches will get high score",
     pod(S1, aff=AWAY_FROM_S1_IN_AZ), [pod(S1, node="node1"), pod(S1, node="node1"), pod(S2, node="node2")],
     {"node1": AZ1, "node2": INDIA}, [0, 100]),
    ("Anti Affinity symmetry: the existing pods in node which has anti affinity match will get high score",
     pod(S2), [pod(S1, node="node1", aff=AWAY_FROM_S2_IN_AZ), pod(S2, node="node2", aff=AWAY_FROM_S1_IN_AZ)],
     {"node1": AZ1, "node2": AZ2}, [0, 100]),
    ("Affinity and Anti Affinity: considered only preferredDuringSchedulingIgnoredDuringExecution in both pod affinity & anti affinity",
     pod(S1, aff=STAY_S1_AWAY_S2), [pod(S1, node="node1"), pod(S1, node="node2")], {"node1": CHINA, "node2": AZ1}, [100, 0]),
    ("Affinity and Anti Affinity: considering both affinity and anti-affinity, the pod to schedule and existing pods have the same labels",
     pod(S1, aff=STAY_S1_AWAY_S2), [pod(S1, node=n) for n in ("node1", "node1", "node2", "node3", "node3", "node4", "node5")],
     {"node1": CHINA_AZ1, "node2": INDIA, "node3": CHINA, "node4": CHINA, "node5": INDIA}, [100, 0, 100, 100, 0]),
    ("Affinity and Anti Affinity and symmetry: considered only preferredDuringSchedulingIgnoredDuringExecution in both pod affinity & anti affinity & symmetry",
     pod(S1, aff=STAY_S1_AWAY_S2),
     [pod(S1, node="node1"), pod(S2, node="node2"), pod(node="node3", aff=STAY_S1_AWAY_S2), pod(node="node4", aff=AWAY_FROM_S1_IN_AZ)],
     {"node1": CHINA, "node2": AZ1, "node3": INDIA, "node4": AZ2}, [100, 0, 100, 0]),
    ("Affinity with pods matching NamespaceSelector",
     pod(S1, "subteam1.team1", aff=AFFINITY_NS_SELECTOR),
     [pod(S1, "subteam1.team1", "node1"), pod(S1, "subteam1.team1", "node1"), pod(S1, "subteam1.team2", "node1"),
      pod(S1, "subteam2.team1", "node2")], {"node1": CHINA, "node2": INDIA}, [100, 0]),
    ("Affinity with pods matching both NamespaceSelector and Namespaces fields",
     pod(S1, "subteam1.team1", aff=AFFINITY_NS_SELECTOR),
     [pod(S1, "subteam1.team1", "node1"), pod(S1, "subteam1.team1", "node1"), pod(S1, "subteam2.team2", "node1"),
      pod(S1, "subteam2.team1", "node2")], {"node1": CHINA, "node2": INDIA}, [100, 0]),
    ("Affinity with pods matching NamespaceSelector (anti-affinity)",
     pod(S1, "subteam1.team1", aff=ANTI_AFFINITY_NS_SELECTOR),
     [pod(S1, "subteam1.team1", "node1"), pod(S1, "subteam1.team1", "node1"), pod(S1, "subteam1.team2", "node1"),
      pod(S1, "subteam2.team1", "node2")], {"node1": CHINA, "node2": INDIA}, [0, 100]),
]


@pytest.mark.parametrize("name,incoming,existing,nodes,want", SCORES, ids=[case[0][:100] for case in SCORES])
def test_score_as_upstream(name: str, incoming: dict[str, Any], existing: list[dict[str, Any]],
                           nodes: dict[str, dict[str, str]], want: Any) -> None:
    scheduler, info = run(incoming, existing, nodes)
    if want == "skip":
        assert info.affinity_scores is None
        return
    assert info.affinity_scores is not None
    raw = {node: info.affinity_scores.score(labels) for node, labels in nodes.items()}
    assert [ipa.normalize(raw)[node] for node in nodes] == want


# ----- through the whole cycle: the per-shape caches, the summary line, explain --------------------------------
def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}


def worker(name: str, labels: dict[str, str], aff: dict[str, Any] | None = None) -> dict[str, Any]:
    found = pod(labels, aff=aff)
    found["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod", **found, "metadata": {**found["metadata"], "name": name}}


ONE_PER_HOST = affinity(anti=[t_in("app", "kubernetes.io/hostname", ["trainer"])])


def test_pods_of_one_template_spread_by_zone_anti_affinity_despite_the_shape_cache() -> None:
    """Three pods of one shape (one template), anti-affine per zone, on two zones of two nodes: one pod per zone,
    the third fits nowhere. A verdict cached per shape and node epoch would let the second pod onto the first
    one's zone neighbour (binding on node-a changes no other node's epoch)."""
    objects = [node("node-a", zone="z1"), node("node-b", zone="z1"), node("node-c", zone="z2"), node("node-d", zone="z2")]
    one_per_zone = affinity(anti=[t_in("app", "zone", ["trainer"])])
    objects += [worker(f"w{i}", {"app": "trainer"}, one_per_zone) for i in range(3)]
    scheduler = Scheduler(ClusterState(objects))
    results = {r.pod: r for r in scheduler.run()}
    zones = [scheduler.cluster.nodes[results[f"default/w{i}"].node or ""]["metadata"]["labels"]["zone"] for i in range(2)]
    assert sorted(zones) == ["z1", "z2"]
    last = results["default/w2"]
    assert last.node is None
    assert last.message() == "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules."


def test_a_pod_without_terms_is_kept_off_by_an_existing_pods_anti_affinity() -> None:
    """The symmetric check: a plain pod of a shape seen before (cached verdicts) that an existing pod's required
    anti-affinity matches is kept off that pod's zone, with upstream's message."""
    objects = [node("node-a", zone="z1"), node("node-b", zone="z1"), node("node-c", zone="z2")]
    objects += [worker("plain-0", {"app": "web"}), worker("loner", {"app": "db"},
                affinity(anti=[t_in("app", "zone", ["web"])]))]
    scheduler = Scheduler(ClusterState(objects))
    scheduler.run()
    loner = scheduler.cluster.pods["default/loner"]["spec"]["nodeName"]
    plain = scheduler.cluster.pods["default/plain-0"]["spec"]["nodeName"]
    assert scheduler.cluster.nodes[loner]["metadata"]["labels"]["zone"] != scheduler.cluster.nodes[plain]["metadata"]["labels"]["zone"]
    scheduler.cluster.apply([worker("plain-1", {"app": "web"})])
    zone_of_loner = scheduler.cluster.nodes[loner]["metadata"]["labels"]["zone"]
    info = scheduler.pod_info("default/plain-1")
    reasons = {n: [r.message for r in scheduler.filter_node(info, n, all_reasons=True).result.reasons]
               for n in scheduler.cluster.node_names()}
    assert [n for n, found in reasons.items() if found == [ipa.EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH]] == [
        n for n in scheduler.cluster.node_names()
        if scheduler.cluster.nodes[n]["metadata"]["labels"]["zone"] == zone_of_loner]
    result = scheduler.schedule_pod("default/plain-1")
    assert scheduler.cluster.nodes[result.node or ""]["metadata"]["labels"]["zone"] != zone_of_loner


def test_preferred_affinity_moves_the_pod_next_to_its_peer() -> None:
    """kube policy: NodeResourcesFit prefers the emptier node-b (LeastAllocated); InterPodAffinity (weight 2 x
    100) outweighs it and puts the pod in the zone of the pod it prefers."""
    objects = [node("node-a", zone="z1"), node("node-b", zone="z2")]
    peer = worker("peer", {"app": "db"})
    peer["spec"]["nodeName"] = "node-a"
    peer["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "32"}}
    objects += [peer, worker("client", {"app": "client"}, affinity(preferred=[(100, t_in("app", "zone", ["db"]))]))]
    scheduler = Scheduler(ClusterState(objects))
    result = scheduler.schedule_pod("default/client")
    assert result.node == "node-a"
    assert result.scores["node-a"] > result.scores["node-b"]


def test_explain_names_the_affinity_reason_per_node() -> None:
    from gpudra.explain.analyze import explain

    objects = [node("node-a"), node("node-b")]
    first = worker("w0", {"app": "trainer"}, ONE_PER_HOST)
    first["spec"]["nodeName"] = "node-a"
    objects += [first, worker("w1", {"app": "trainer"}, ONE_PER_HOST),
                worker("w2", {"app": "trainer"}, affinity([t_in("app", "zone", ["trainer"])]))]
    explanation = explain(objects, "pod/w1")
    assert explanation.fits
    explanation = explain(objects, "pod/w2")
    assert not explanation.fits
    assert "didn't match pod affinity rules" in explanation.summary
    for name in ("node-a", "node-b"):
        found = explanation.node(name)
        assert found is not None and "node(s) didn't match pod affinity rules" in str(found)


def test_preemption_frees_a_node_from_an_existing_pods_anti_affinity() -> None:
    """DefaultPreemption with InterPodAffinity's RemovePod (upstream's SelectVictimsOnNode asks the Filter again
    after taking victims off): the only node is barred by a lower-priority pod's anti-affinity; evicting that pod
    is what lets the preemptor in, though it frees no resources the preemptor lacked."""
    guard = worker("guard", {"app": "guard"}, affinity(anti=[t_in("app", "kubernetes.io/hostname", ["web"])]))
    guard["spec"]["nodeName"] = "node-a"
    guard["spec"]["priority"] = 0
    urgent = worker("urgent", {"app": "web"})
    urgent["spec"]["priority"] = 1000
    scheduler = Scheduler(ClusterState([node("node-a"), guard, urgent]))
    result = scheduler.schedule_pod("default/urgent")
    assert result.preempted == ("default/guard",)
    assert result.node == "node-a"
