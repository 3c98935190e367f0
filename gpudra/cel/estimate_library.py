"""Per-call cost estimates of the libraries in the DRA CEL environment, as cel-go's estimator asks for them.

In the order cel-go v0.26.0 checker/cost.go `functionCost` consults them (the first answer wins):
1. `overload_estimate`: the estimators the cel-go extensions register per overload (ext/lists.go v3:
   slice, flatten, range, reverse, distinct, sort, sortByAssociatedKeys; ext/sets.go: contains, intersects,
   equivalent);
2. `library_estimate`: dynamic-resource-allocation v0.36.2 cel/compile.go `draCostEstimator` (`includes`),
   then k8s.io/apiserver v0.36.2 pkg/cel/library/cost.go `CostEstimator.EstimateCallCost`, by function name;
3. cel-go's own defaults (gpudra.cel.estimate).

Each returns (cost of the call itself, result size or None); the caller adds the arguments' costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpudra.cel.ast import Node
from gpudra.resourcelimits import ATTRIBUTE_VALUES_PER_DEVICE
from gpudra.cel.estimate_sizes import (
    LIST_CREATE_BASE_COST, MAX_FORMAT_SIZE, MAX_NAME_FORMAT_REGEX_SIZE, MAX_U64, ONE,
    REGEX_STRING_LENGTH_COST_FACTOR, STRING_TRAVERSAL_COST_FACTOR, UNKNOWN, Range, dra_size, fixed, kind,
    split_parameters,
)

Estimate = tuple[Range, "Range | None"]


@dataclass
class AstNode:
    """cel-go checker.AstNode: a field path from a variable (or None), the checked type, the expression, and the
    size cel-go derived from the expression itself (ComputedSize)."""

    path: tuple[str, ...] | None
    type: str
    node: Node | None
    computed: Range | None


def size_estimate(node: AstNode) -> Range:
    """library.CostEstimator.sizeEstimate and ext estimateSize: the computed size, else the environment's
    declared size along the node's path, else unknown."""
    if node.computed is not None:
        return node.computed
    return dra_size(node.path) or UNKNOWN


def _int_literal(node: AstNode, default: int) -> int:
    """ext/lists.go nodeAsIntValue: an int literal (a negative one is 0), else the default."""
    expr = node.node
    if expr is None or expr.kind != "const" or expr.literal != "int":
        return default
    return max(0, int(expr.value))


def _allocating_list_call(factor: float, size: Range) -> Estimate:
    """ext/lists.go estimateAllocatingListCall."""
    cost = size.factor(factor).add(ONE).add(fixed(LIST_CREATE_BASE_COST))
    return cost, size


def _sort_cost(node: AstNode, element_type: str) -> Estimate:
    size = size_estimate(node)
    factor = 2.0 + (STRING_TRAVERSAL_COST_FACTOR if element_type in ("string", "bytes") else 0.0)
    return _allocating_list_call(factor, size.multiply(size))


_SETS_FACTORS = {"sets.contains": 1.0, "sets.intersects": 1.0, "sets.equivalent": 2.0}


def overload_estimate(function: str, overload: str, target: AstNode | None, args: list[AstNode]) -> Estimate | None:
    if function in _SETS_FACTORS and len(args) == 2:
        cost = size_estimate(args[0]).multiply(size_estimate(args[1])).factor(_SETS_FACTORS[function]).add(ONE)
        return cost, None
    if function == "lists.range" and target is None and len(args) == 1:
        return _allocating_list_call(1.0, fixed(_int_literal(args[0], MAX_U64)))
    if target is None:
        return None
    if function == "slice" and len(args) == 2:
        size = size_estimate(target)
        start, end = _int_literal(args[0], 0), _int_literal(args[1], size.hi)
        return _allocating_list_call(1.0, fixed((end - start) % (1 << 64)))  # Go's uint64 subtraction wraps
    if function == "flatten" and len(args) <= 1:
        depth = _int_literal(args[0], MAX_U64) if args else 1
        return _allocating_list_call(float(depth), size_estimate(target))
    if function == "reverse" and overload == "list_reverse" and not args:
        return _allocating_list_call(1.0, size_estimate(target))
    if function == "distinct" and not args:
        size = size_estimate(target)
        return _allocating_list_call(2.0, size.multiply(size))
    if function == "sort" and not args and overload.endswith("_sort"):
        return _sort_cost(target, overload[len("list_"):-len("_sort")])
    if function == "@sortByAssociatedKeys" and len(args) == 1 and overload.endswith("_sortByAssociatedKeys"):
        return _sort_cost(args[0], overload[len("list_"):-len("_sortByAssociatedKeys")])
    return None


def _list_element(target: AstNode) -> AstNode | None:
    """library.CostEstimator.listElementNode: the first type parameter, with the `@items` path if any."""
    _, parameters = split_parameters(target.type)
    if not parameters:
        return None
    path = target.path + ("@items",) if target.path is not None else None
    return AstNode(path, parameters[0], None, None)


def _traversal(size: Range, factor: float = 1.0) -> Range:
    return size.factor(factor * STRING_TRAVERSAL_COST_FACTOR)


def _replace(target: AstNode, args: list[AstNode]) -> Estimate:
    size, old, new = size_estimate(target), size_estimate(args[0]), size_estimate(args[1])
    if old.lo == 0:  # an empty needle surrounds every character
        count_hi, retained_hi = (size.hi + 1 if size.hi < MAX_U64 else size.hi), size.hi
    elif new.hi <= old.lo:
        count_hi, retained_hi = 0, size.hi
    else:
        count_hi, retained_hi = math.ceil(size.hi / old.lo), 0
    if old.hi == 0:
        count_lo, retained_lo = (size.lo + 1 if size.lo < MAX_U64 else size.lo), size.lo
    elif old.hi <= new.lo:
        count_lo, retained_lo = 0, size.lo
    else:
        count_lo, retained_lo = math.ceil(size.lo / old.hi), 0
    result = Range(count_lo, min(MAX_U64, count_hi)).multiply(new).add(Range(retained_lo, retained_hi))
    return _traversal(size, 2), result


def _join(target: AstNode, args: list[AstNode]) -> Estimate:
    size = Range(0, 0)
    list_size = size_estimate(target)
    element = _list_element(target)
    if element is not None:
        size = list_size.multiply(size_estimate(element))
    if args:
        separators = Range(max(0, list_size.lo - 1), max(0, list_size.hi - 1))
        size = size.add(size_estimate(args[0]).multiply(separators))
    return _traversal(size), size


_NOMINAL = frozenset({
    "format.named", "sign", "asInteger", "isInteger", "asApproximateFloat", "isGreaterThan", "isLessThan",
    "compareTo", "add", "sub", "major", "minor", "patch", "getScheme", "getHostname", "getHost", "getPort",
    "getEscapedPath", "getQuery", "masked", "prefixLength", "family", "isUnspecified", "isLoopback",
    "isLinkLocalMulticast", "isLinkLocalUnicast", "isGlobalUnicast",
})
_IP_BYTES = Range(4, 16)
_NOMINAL_EQUALITY = frozenset({"net.IP", "net.CIDR", "kubernetes.Quantity", "kubernetes.Semver"})


def library_estimate(function: str, target: AstNode | None, args: list[AstNode]) -> Estimate | None:
    if function == "includes" and target is not None:  # draCostEstimator: like `in` an attribute list
        return Range(0, ATTRIBUTE_VALUES_PER_DEVICE), None
    if function in _NOMINAL:
        return ONE, None
    if function in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf") and target is not None:
        element = _list_element(target)
        if element is None:  # a string's indexOf/lastIndexOf (or a dyn receiver)
            return _traversal(size_estimate(target)), None
        per_element = ONE
        if kind(element.type) in ("string", "bytes"):
            per_element = per_element.add(_traversal(size_estimate(element)))
        return size_estimate(target).multiply(per_element), None
    if function in ("url", "jsonpatch.escapeKey") and len(args) == 1:
        size = size_estimate(args[0])
        return _traversal(size), size
    if function in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
        size = size_estimate(target)
        return _traversal(size), size
    if function == "replace" and target is not None and len(args) >= 2:
        return _replace(target, args)
    if function == "split" and target is not None:
        size = size_estimate(target)
        limit = size.hi
        if len(args) > 1 and args[1].node is not None and args[1].node.kind == "const" and args[1].node.literal == "int":
            limit = int(args[1].node.value) % (1 << 64)  # Go's uint64(int64)
        return _traversal(size, 2), Range(0, limit)
    if function == "join" and target is not None:
        return _join(target, args)
    if function in ("find", "findAll") and target is not None and args:
        size = size_estimate(target)
        text = size.add(ONE).factor(STRING_TRAVERSAL_COST_FACTOR)
        regex = size_estimate(args[0]).factor(REGEX_STRING_LENGTH_COST_FACTOR)
        return text.multiply(regex), Range(0, size.hi)
    if function in ("cidr", "isIP", "isCIDR", "quantity", "isQuantity", "semver", "isSemver") and args:
        return _traversal(size_estimate(args[0])), None
    if function == "ip":
        if target is not None and target.type == "net.CIDR":  # overload cidr_ip: a field access
            return ONE, None
        if args:
            return _traversal(size_estimate(args[0])), None
    if function == "ip.isCanonical" and args:
        return _traversal(size_estimate(args[0]), 2), None
    if function in ("containsIP", "containsCIDR") and args:
        cost = _IP_BYTES.add(_IP_BYTES).factor(STRING_TRAVERSAL_COST_FACTOR)
        if function == "containsCIDR":
            cost = cost.add(_IP_BYTES.factor(STRING_TRAVERSAL_COST_FACTOR)).add(ONE)
        if args[0].type == "string":  # cidr_contains_ip_string / cidr_contains_cidr_string: parse it too
            cost = cost.add(_traversal(size_estimate(args[0])))
        return cost, None
    if function == "validate" and args:
        format_factor = MAX_NAME_FORMAT_REGEX_SIZE * REGEX_STRING_LENGTH_COST_FACTOR
        return _traversal(size_estimate(args[0])).factor(format_factor), None
    if function == "_==_" and len(args) == 2 and args[0].type == args[1].type:
        type_name = args[0].type
        if type_name in _NOMINAL_EQUALITY:
            return ONE, None
        if type_name == "kubernetes.NamedFormat":
            return Range(1, MAX_FORMAT_SIZE).factor(STRING_TRAVERSAL_COST_FACTOR), None
        if type_name == "kubernetes.URL":
            # (upstream reads the right operand's size twice)
            right = args[1].computed
            hi = right.hi if right is not None else 1
            return Range(1, hi).factor(STRING_TRAVERSAL_COST_FACTOR), None
    return None
