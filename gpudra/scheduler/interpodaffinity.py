"""kube-scheduler's InterPodAffinity plugin: required pod (anti-)affinity as a Filter, preferred terms as a Score.

Learned from pkg/scheduler/framework/plugins/interpodaffinity/{filtering.go,scoring.go,plugin.go} and the
AffinityTerm helpers of pkg/scheduler/framework/types.go (k8s.io/kubernetes v1.34.4):

- PreFilter counts, per topology pair (node label key, value), the existing pods whose required anti-affinity
  terms match the incoming pod, and the existing pods that match the incoming pod's required (anti-)affinity
  terms. Filter then reads only the node's labels. Filter's order: pod affinity (UnschedulableAndUnresolvable),
  pod anti-affinity, existing pods' anti-affinity.
- A term matches a pod when the pod's namespace is in the term's namespaces (the owner's own namespace when
  both `namespaces` and `namespaceSelector` are unset) or its namespace's labels match `namespaceSelector`, and
  the pod's labels match `labelSelector` (a nil selector matches nothing, `{}` everything).
- The first pod of a group whose required affinity matches itself may go anywhere its terms' topology keys
  exist, while no pod anywhere matches the terms.
- Score sums, per topology pair, the weights of the incoming pod's preferred terms matched by existing pods
  (anti-affinity negative), the existing pods' preferred terms matched by the incoming pod, and their required
  affinity terms with hardPodAffinityWeight (1); NormalizeScore maps [min, max] to [0, 100].
- matchLabelKeys/mismatchLabelKeys are merged into the selector as kube-apiserver does on pod creation
  (pkg/registry/core/pod/strategy.go applyMatchLabelKeysAndMismatchLabelKeys, gate MatchLabelKeysInPodAffinity,
  on by default since 1.31): `key In (value)` / `key NotIn (value)` for each key the pod has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpudra.allocator.nodematch import requirement_matches

PLUGIN = "InterPodAffinity"
AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"
HARD_POD_AFFINITY_WEIGHT = 1  # InterPodAffinityArgs.hardPodAffinityWeight's default
SCORE_WEIGHT = 2  # the plugin's weight in the default profile (apis/config/v1/default_plugins.go)
MAX_NODE_SCORE = 100
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"

TopologyPair = tuple[str, str]


def label_selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector(selector).Matches(labels): None matches nothing, {} everything."""
    if not isinstance(selector, dict):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(requirement_matches(r, dict(labels)) for r in selector.get("matchExpressions") or [])


@dataclass(frozen=True)
class AffinityTerm:
    """A processed v1.PodAffinityTerm (framework.AffinityTerm). `namespace_selector` None: matches no namespace
    by labels (LabelSelectorAsSelector(nil) is labels.Nothing)."""

    namespaces: frozenset[str]
    namespace_selector: dict[str, Any] | None
    selector: dict[str, Any] | None
    topology_key: str
    weight: int = 0

    def matches(self, pod: dict[str, Any], namespace_labels: Mapping[str, str] | None) -> bool:
        meta = pod.get("metadata") or {}
        # nil labels (an incoming pod's own terms, their selectors resolved to names) match only an empty selector
        if meta.get("namespace", "default") in self.namespaces or label_selector_matches(
                self.namespace_selector, namespace_labels or {}):
            return label_selector_matches(self.selector, meta.get("labels") or {})
        return False


def _merged_selector(term: dict[str, Any], pod_labels: Mapping[str, str]) -> dict[str, Any] | None:
    selector = term.get("labelSelector")
    if not isinstance(selector, dict):
        return None  # nil: matches nothing, and label keys are not merged into it
    extra = [{"key": key, "operator": operator, "values": [pod_labels[key]]}
             for field, operator in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn"))
             for key in term.get(field) or [] if key in pod_labels]
    if not extra:
        return selector
    return {**selector, "matchExpressions": list(selector.get("matchExpressions") or []) + extra}


def affinity_term(owner: dict[str, Any], term: dict[str, Any], weight: int = 0) -> AffinityTerm:
    meta = owner.get("metadata") or {}
    names = term.get("namespaces") or []
    ns_selector = term.get("namespaceSelector")
    namespaces = frozenset(names) if names or ns_selector is not None else frozenset([meta.get("namespace", "default")])
    return AffinityTerm(namespaces, ns_selector if isinstance(ns_selector, dict) else None,
                        _merged_selector(term, meta.get("labels") or {}), str(term.get("topologyKey") or ""), weight)


def _section(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}


def required_terms(pod: dict[str, Any], kind: str) -> list[AffinityTerm]:
    """`kind`: podAffinity or podAntiAffinity."""
    return [affinity_term(pod, term) for term in _section(pod, kind).get(REQUIRED) or []]


def preferred_terms(pod: dict[str, Any], kind: str) -> list[AffinityTerm]:
    return [affinity_term(pod, weighted.get("podAffinityTerm") or {}, int(weighted.get("weight") or 0))
            for weighted in _section(pod, kind).get(PREFERRED) or []]


def has_pod_affinity(pod: dict[str, Any]) -> bool:
    """podWithAffinity: any podAffinity or podAntiAffinity section (NodeInfo.PodsWithAffinity)."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    return bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity"))


def _resolve_namespaces(term: AffinityTerm, namespace_labels: Mapping[str, Mapping[str, str]]) -> AffinityTerm:
    """mergeAffinityTermNamespacesIfNotEmpty: an incoming pod's non-empty namespaceSelector becomes the names of
    the namespaces it selects; an empty one ({}) keeps matching every namespace."""
    if term.namespace_selector is None or not (term.namespace_selector.get("matchLabels")
                                               or term.namespace_selector.get("matchExpressions")):
        return term
    chosen = {name for name, labels in namespace_labels.items() if label_selector_matches(term.namespace_selector, labels)}
    return AffinityTerm(term.namespaces | chosen, None, term.selector, term.topology_key, term.weight)


@dataclass(frozen=True)
class ExistingPod:
    """A pod counted on a node (bound or assumed) and that node's labels."""

    pod: dict[str, Any]
    node_labels: Mapping[str, str]


@dataclass(frozen=True)
class FilterState:
    """The PreFilter state; None from `prefilter` where upstream's PreFilter returns Skip."""

    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    affinity_counts: Mapping[TopologyPair, int]
    anti_affinity_counts: Mapping[TopologyPair, int]
    existing_anti_affinity_counts: Mapping[TopologyPair, int]
    matches_own_affinity: bool  # the pod matches all its own required affinity terms

    def reason(self, node_labels: Mapping[str, str]) -> tuple[str, bool] | None:
        """(message, resolvable) of the first failing check, or None when the node passes."""
        if not self._satisfies_affinity(node_labels):
            return AFFINITY_RULES_NOT_MATCH, False
        if self.anti_affinity_counts:
            for term in self.anti_affinity:
                value = node_labels.get(term.topology_key)
                if value is not None and self.anti_affinity_counts.get((term.topology_key, value), 0) > 0:
                    return ANTI_AFFINITY_RULES_NOT_MATCH, True
        if self.existing_anti_affinity_counts:
            for pair in node_labels.items():
                if self.existing_anti_affinity_counts.get(pair, 0) > 0:
                    return EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH, True
        return None

    def _satisfies_affinity(self, node_labels: Mapping[str, str]) -> bool:
        pods_exist = True
        for term in self.affinity:
            value = node_labels.get(term.topology_key)
            if value is None:
                return False
            if self.affinity_counts.get((term.topology_key, value), 0) <= 0:
                pods_exist = False
        return pods_exist or (not self.affinity_counts and self.matches_own_affinity)


def _matches_all(terms: Iterable[AffinityTerm], pod: dict[str, Any]) -> bool:
    terms = list(terms)
    return bool(terms) and all(term.matches(pod, None) for term in terms)


def namespace_labels_of(pod: dict[str, Any], namespaces: Mapping[str, Mapping[str, str]]) -> Mapping[str, str]:
    """GetNamespaceLabelsSnapshot: the labels of the pod's namespace, empty when it is not known."""
    return namespaces.get((pod.get("metadata") or {}).get("namespace", "default")) or {}


def prefilter(pod: dict[str, Any], all_pods: Iterable[ExistingPod], with_affinity: Iterable[ExistingPod],
              namespaces: Mapping[str, Mapping[str, str]]) -> FilterState | None:
    """`all_pods`: every counted pod (read only when the pod has required terms); `with_affinity`: those of them
    with a pod (anti-)affinity section; `namespaces`: namespace name -> labels."""
    ns_labels = namespace_labels_of(pod, namespaces)
    existing: Counter[TopologyPair] = Counter()
    for other in with_affinity:
        for term in required_terms(other.pod, "podAntiAffinity"):
            value = other.node_labels.get(term.topology_key)
            if value is not None and term.matches(pod, ns_labels):
                existing[(term.topology_key, value)] += 1
    affinity = tuple(_resolve_namespaces(t, namespaces) for t in required_terms(pod, "podAffinity"))
    anti = tuple(_resolve_namespaces(t, namespaces) for t in required_terms(pod, "podAntiAffinity"))
    if not existing and not affinity and not anti:
        return None
    affinity_counts: Counter[TopologyPair] = Counter()
    anti_counts: Counter[TopologyPair] = Counter()
    if affinity or anti:
        for other in all_pods:
            if _matches_all(affinity, other.pod):
                for term in affinity:
                    value = other.node_labels.get(term.topology_key)
                    if value is not None:
                        affinity_counts[(term.topology_key, value)] += 1
            for term in anti:
                value = other.node_labels.get(term.topology_key)
                if value is not None and term.matches(other.pod, None):
                    anti_counts[(term.topology_key, value)] += 1
    return FilterState(affinity, anti, +affinity_counts, +anti_counts, +existing, _matches_all(affinity, pod))


@dataclass(frozen=True)
class ScoreState:
    """PreScore's topology scores: topology key -> value -> summed weight."""

    topology_score: Mapping[str, Mapping[str, int]]

    def score(self, node_labels: Mapping[str, str]) -> int:
        return sum(values.get(node_labels[key], 0) for key, values in self.topology_score.items() if key in node_labels)


def prescore(pod: dict[str, Any], all_pods: Iterable[ExistingPod], with_affinity: Iterable[ExistingPod],
             namespaces: Mapping[str, Mapping[str, str]]) -> ScoreState | None:
    """None where upstream's PreScore returns Skip (nothing to score)."""
    preferred = [_resolve_namespaces(t, namespaces) for t in preferred_terms(pod, "podAffinity")]
    preferred_anti = [_resolve_namespaces(t, namespaces) for t in preferred_terms(pod, "podAntiAffinity")]
    ns_labels = namespace_labels_of(pod, namespaces)
    scores: dict[str, dict[str, int]] = {}

    def add(term: AffinityTerm, weight: int, target: dict[str, Any], labels: Mapping[str, str],
            target_ns_labels: Mapping[str, str] | None, sign: int) -> None:
        value = labels.get(term.topology_key)
        if value is not None and term.matches(target, target_ns_labels):
            per_value = scores.setdefault(term.topology_key, {})
            per_value[value] = per_value.get(value, 0) + weight * sign

    for other in all_pods if preferred or preferred_anti else with_affinity:
        labels = other.node_labels
        if not labels:
            continue
        for term in preferred:
            add(term, term.weight, other.pod, labels, None, 1)
        for term in preferred_anti:
            add(term, term.weight, other.pod, labels, None, -1)
        for term in required_terms(other.pod, "podAffinity"):
            add(term, HARD_POD_AFFINITY_WEIGHT, pod, labels, ns_labels, 1)
        for term in preferred_terms(other.pod, "podAffinity"):
            add(term, term.weight, pod, labels, ns_labels, 1)
        for term in preferred_terms(other.pod, "podAntiAffinity"):
            add(term, term.weight, pod, labels, ns_labels, -1)
    if not scores:
        return None
    return ScoreState(scores)


def normalize(raw: Mapping[str, int]) -> dict[str, int]:
    """NormalizeScore: MaxNodeScore * (score - min) / (max - min), truncated; all 0 when max == min."""
    if not raw:
        return {}
    low, high = min(raw.values()), max(raw.values())
    if high == low:
        return {node: 0 for node in raw}
    return {node: int(MAX_NODE_SCORE * ((score - low) / (high - low))) for node, score in raw.items()}
