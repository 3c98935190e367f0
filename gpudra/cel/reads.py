"""What of a device a selector reads, found in its checked syntax tree.

A selector's outcome on a device is a function of the parts of the `device` variable it reads. Most selectors
read a few fixed places (`device.driver`, `device.attributes["d"].x`, `device.capacity["d"].y`), and devices
that one driver publishes agree in those places up to names and UUIDs: evaluating once per distinct projection
instead of once per device gives the same outcomes (gpudra.allocator.selection keys its cache on it).

The reads are taken from the tree cel-expr-python checked, after adaptation.adapt's rewrite of
`device.attributes["d"]` into `ATTRIBUTES_VARIABLE[?"d"].orValue(NO_ATTRIBUTES_VARIABLE)`. Every use of the
device's data must be one of the recognised shapes; any other (a whole domain map iterated or tested with `in`,
a key that is not a literal, `has(device.attributes…)` left unrewritten) makes the expression "dynamic" (None):
it is then evaluated on each device, as before.
"""

from __future__ import annotations

from gpudra.cel.ast import Node, checked_syntax_tree
from gpudra.cel.source import ATTRIBUTES_VARIABLE, CAPACITY_VARIABLE

DEVICE_FIELDS = frozenset({"driver", "allowMultipleAllocations"})
_DOMAIN_MAPS = {ATTRIBUTES_VARIABLE: "attributes", CAPACITY_VARIABLE: "capacity"}
_INDEX_CALLS = frozenset({"_[_]", "_[?_]", "_?._"})

# A read: ("device", field) for device.driver / device.allowMultipleAllocations, or (map, domain, identifier)
# for device.attributes[domain].identifier and device.capacity[domain].identifier (map: "attributes" | "capacity").
Read = tuple[str, ...]


class _Dynamic(Exception):
    """The expression uses the device in a way the reads cannot describe."""


def _string(node: Node | None) -> str:
    if node is None or node.kind != "const" or not isinstance(node.value, str):
        raise _Dynamic
    return node.value


def _children(node: Node) -> list[Node]:
    return [child for child in (node.target, *node.args, *[k for k in node.keys if k is not None], node.iter_range,
                                node.accu_init, node.loop_condition, node.loop_step, node.result)
            if child is not None]


def _domain_read(chain: list[Node], map_name: str) -> Read:
    """chain: the ident's ancestors, nearest first: `_[?_](ident, "d")`, `orValue(…)`, then the field access."""
    if len(chain) < 3:
        raise _Dynamic
    lookup, or_value, access = chain[0], chain[1], chain[2]
    if lookup.kind != "call" or lookup.value != "_[?_]" or lookup.target is not None or len(lookup.args) != 2:
        raise _Dynamic
    domain = _string(lookup.args[1])
    if "/" in domain:  # `d/x` names split at the first slash: such a domain never holds a lookup of this shape
        raise _Dynamic
    if or_value.kind != "call" or or_value.value != "orValue" or or_value.target is not lookup:
        raise _Dynamic
    if access.kind == "select" and access.target is or_value:
        return (map_name, domain, str(access.value))
    if access.kind == "call" and access.value in _INDEX_CALLS and access.target is None and (
        len(access.args) == 2 and access.args[0] is or_value
    ):
        return (map_name, domain, _string(access.args[1]))
    raise _Dynamic


def device_reads_of_tree(root: Node) -> tuple[Read, ...] | None:
    """The sorted reads of an expression tree, or None when it is dynamic."""
    reads: set[Read] = set()
    path: list[Node] = []

    def visit(node: Node) -> None:
        if node.kind == "ident":
            name = node.value
            if name == "device":
                parent = path[-1] if path else None
                if parent is None or parent.kind != "select" or parent.value not in DEVICE_FIELDS:
                    raise _Dynamic
                reads.add(("device", str(parent.value)))
            elif name in _DOMAIN_MAPS:
                reads.add(_domain_read(path[::-1], _DOMAIN_MAPS[str(name)]))
            return
        path.append(node)
        for child in _children(node):
            visit(child)
        path.pop()

    try:
        visit(root)
    except (_Dynamic, RecursionError):
        return None
    return tuple(sorted(reads))


def device_reads(serialized_checked_expression: bytes) -> tuple[Read, ...] | None:
    """The reads of a checked expression (`Expression.serialize()`), or None when it is dynamic."""
    try:
        return device_reads_of_tree(checked_syntax_tree(serialized_checked_expression))
    except (ValueError, IndexError):
        return None
