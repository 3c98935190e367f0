"""Node matching as kube-scheduler's nodeaffinity does it (terms ORed, requirements ANDed)."""

from __future__ import annotations

from typing import Any

from gpudra.api.goint import parse_int64, parse_requirement_int


class NodeInfo:
    """The parts of a Node the allocator looks at: its name and labels."""

    __slots__ = ("name", "labels", "key")

    def __init__(self, name: str, labels: dict[str, str] | None = None):
        self.name = name if isinstance(name, str) else ""
        labels = labels if isinstance(labels, dict) else {}
        self.labels = {str(k): v if isinstance(v, str) else str(v) for k, v in labels.items()}
        # Pool gathering depends only on name and labels, so that is the cache key.
        self.key = (name, tuple(sorted(self.labels.items())))

    @classmethod
    def of(cls, node: "dict[str, Any] | str | NodeInfo") -> "NodeInfo":
        if isinstance(node, NodeInfo):
            return node
        if isinstance(node, str):
            return cls(node)
        metadata = (node if isinstance(node, dict) else {}).get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        return cls(metadata.get("name") or "", metadata.get("labels"))


def requirement_matches(requirement: Any, values_by_key: dict[str, str]) -> bool:
    if not isinstance(requirement, dict):
        return False
    key = requirement.get("key")
    operator = requirement.get("operator")
    values = requirement.get("values")
    if not isinstance(key, str) or not isinstance(values if values is not None else [], list):
        return False
    values = values or []
    present = key in values_by_key
    value = values_by_key.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        # as kube-scheduler: the node's label by strconv.ParseInt, the requirement's value also a label value
        have, want = parse_int64(value), parse_requirement_int(values[0])
        if have is None or want is None:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def term_matches(term: Any, node: NodeInfo) -> bool:
    if not isinstance(term, dict):
        return False
    expressions = term.get("matchExpressions") or []
    field_requirements = term.get("matchFields") or []
    if not isinstance(expressions, list) or not isinstance(field_requirements, list):
        return False
    if not expressions and not field_requirements:
        return False  # an empty term matches no node
    for requirement in expressions:
        if not requirement_matches(requirement, node.labels):
            return False
    for requirement in field_requirements:
        if not isinstance(requirement, dict) or requirement.get("key") != "metadata.name":
            return False
        if not requirement_matches(requirement, {"metadata.name": node.name}):
            return False
    return True


def selector_matches(selector: dict[str, Any] | None, node: NodeInfo) -> bool:
    if not isinstance(selector, dict):
        return False
    terms = selector.get("nodeSelectorTerms")
    return isinstance(terms, list) and any(term_matches(term, node) for term in terms)


def node_matches(node: NodeInfo, node_name: str | None, all_nodes: bool, selector: dict[str, Any] | None) -> bool:
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if selector is not None:
        return selector_matches(selector, node)
    return False
