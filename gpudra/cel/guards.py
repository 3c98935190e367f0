"""Keep versions and quantities from passing for strings while evaluating.

While evaluating, gpudra carries Kubernetes' Semver and Quantity values as tagged strings (values.py:
"\\x1fsemver:1.2.3"), so cel-cpp's string functions would accept them where cel-go has no overload:
`size(v)`, `string(v)`, `v.startsWith("5")`, `v < "6"`, `v.sort()` of a list of versions. And `v == 1` is
false in cel-cpp, where cel-go's `Semver.Equal` (k8s.io/apiserver pkg/cel/semver.go) answers "no such
overload" for any other type (`types.Equal` calls the left operand's Equal; `1 == v` is Int.Equal, false), and a
list equals another of its size unless an element compares False (an error does not count: `[v] == ["x"]` is true).

Only operands the checker typed `dyn` or `any` (attribute values, cel.bind of them, comprehension variables)
can hold such a value unseen, so only those are guarded, in the evaluation text only (the checked text, its
cost and reads are unchanged):

    size(X)      ->  size(cel.bind(__gpudra_v, X, <tagged> ? __gpudra_untagged(__gpudra_v) : __gpudra_v))
    L == R       ->  cel.bind(__gpudra_l, L, cel.bind(__gpudra_r, R,
                         <L tagged> ? __gpudra_tagged_equals(__gpudra_l, __gpudra_r) : __gpudra_l == __gpudra_r))
    X.sort()     ->  __gpudra_sortable(X).sort()

    Q in L       ->  __gpudra_quantity_in(Q, L)      (Q or L's elements typed kubernetes.Quantity)

A quantity's tagged text carries its internal form as well as its value (values.py: "1000m" and "1" differ),
so `==` with quantities anywhere in the left operand's type, and `in` over a list of them, go to Python:
cel-go's list Contains (common/types/list.go) is true at the first element Equal calls equal, false
otherwise, errors included; list and map Equal are false only where an element or value compares False.

The tag test (`type(v) == string && v.startsWith("\\x1f")`) runs in cel-cpp; Python is called only for a tagged
value. Operand spans are found on the tokens around the checker's position of the call (its '(' or operator).
"""

from __future__ import annotations

from gpudra.cel.ast import Node, checked_syntax_tree, walk
from gpudra.cel.library_net import NET_STRING
from gpudra.cel.source import Rewritten, Token, tokenize, top_level_arguments

UNTAGGED = "__gpudra_untagged"
TAGGED_EQUALS = "__gpudra_tagged_equals"
QUANTITY_IN = "__gpudra_quantity_in"
SORTABLE = "__gpudra_sortable"

_TAGGED = 'type({v}) == string && {v}.startsWith("\\x1f")'
_GUARD_PREFIX = "cel.bind(__gpudra_v, "
_GUARD_SUFFIX = ", " + _TAGGED.format(v="__gpudra_v") + f" ? {UNTAGGED}(__gpudra_v) : __gpudra_v)"

# Functions cel-go has no Semver/Quantity overload for, but cel-cpp would run on a tagged string.
_STRING_FUNCTIONS = frozenset({
    "size", "string", "bytes", "startsWith", "endsWith", "contains", "matches", "find", "findAll", "lowerAscii",
    "upperAscii", "trim", "split", "substring", "charAt", "indexOf", "lastIndexOf", "replace", "reverse",
    "strings.quote", "_<_", "_<=_", "_>_", "_>=_",
})
_UNTYPED = ("dyn", "any")
# Conversions whose rules differ between cel-cpp and cel-go (Go's strconv, %g), by argument type: they call
# gpudra.cel.constants.convert at run time (constants are folded when compiling).
GO_CONVERSION_PREFIX = "__gpudra_go_"
GO_CONVERSIONS = {
    "int": ("string", "dyn", "any"), "uint": ("string", "dyn", "any"), "double": ("string", "dyn", "any"),
    "bool": ("string", "dyn", "any"), "string": ("double", "dyn", "any"),
}
_QUANTITY = "kubernetes.Quantity"
_KUBERNETES_VALUES = ("kubernetes.Semver", _QUANTITY)
_RELATION_STOPS = frozenset({"&&", "||", "?", ":", ",", "==", "!=", "<", "<=", ">", ">=", "in"})
_OPENERS, _CLOSERS = frozenset({"(", "[", "[?", "{"}), frozenset({")", "]", "}"})


def _constant(node: Node) -> bool:
    from gpudra.cel.constants import ConversionError, fold

    try:
        return fold(node) is not None
    except ConversionError:
        return True  # refused when compiling anyway


def _relation_left(tokens: list[Token], operator: int) -> int:
    """Index of the first token of a relational operator's left operand."""
    depth, index = 0, operator - 1
    while index >= 0:
        text = tokens[index].text
        if text in _CLOSERS:
            depth += 1
        elif text in _OPENERS:
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and text in _RELATION_STOPS:
            break
        index -= 1
    return index + 1


def _relation_right(tokens: list[Token], operator: int) -> int:
    """Index of the last token of a relational operator's right operand."""
    depth, index = 0, operator + 1
    while index < len(tokens):
        text = tokens[index].text
        if text in _OPENERS:
            depth += 1
        elif text in _CLOSERS:
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and text in _RELATION_STOPS:
            break
        index += 1
    return index - 1


def _member_target(tokens: list[Token], dot: int) -> int:
    """Index of the first token of the receiver of the member call whose '.' is at `dot`."""
    index = dot - 1
    while index >= 0:
        text, kind = tokens[index].text, tokens[index].kind
        if text in _CLOSERS:
            depth = 0
            while index >= 0:
                if tokens[index].text in _CLOSERS:
                    depth += 1
                elif tokens[index].text in _OPENERS:
                    depth -= 1
                    if depth == 0:
                        break
                index -= 1
            # a call's or index's opener continues the chain to its left; a bare parenthesis starts it
            if index > 0 and tokens[index].text in ("[", "[?") or (
                    index > 0 and tokens[index].text == "(" and tokens[index - 1].kind == "ident"):
                index -= 1
                continue
            return index
        if kind in ("ident", "string", "number"):
            if index > 0 and tokens[index - 1].text in (".", ".?"):
                index -= 2
                continue
            return index
        return index + 1
    return 0


class _Operations:
    def __init__(self, rewritten: Rewritten, expression: str):
        self.expression = expression
        self.rewritten = rewritten
        self.tokens = tokenize(expression)
        self.by_start = {token.start: index for index, token in enumerate(self.tokens)}
        self.found: list[tuple[int, int, str]] = []

    def token_at(self, checked_offset: int) -> int | None:
        return self.by_start.get(self.rewritten.original_offset(checked_offset))

    def wrap(self, first: int, last: int) -> None:
        if 0 <= first <= last < len(self.tokens):
            self.found.append((self.tokens[first].start, self.tokens[first].start, _GUARD_PREFIX))
            self.found.append((self.tokens[last].end, self.tokens[last].end, _GUARD_SUFFIX))


def guard_operations(expression: str, rewritten: Rewritten, serialized: bytes) -> list[tuple[int, int, str]]:
    """Insertions into `expression` (offsets in it) that guard its dyn-typed operands (see module docstring)."""
    from gpudra.cel.checks import _payload, _positions, _type_map

    payload = _payload(serialized)
    types, positions = _type_map(payload), _positions(payload)
    ops = _Operations(rewritten, expression)
    tokens = ops.tokens
    for node in walk(checked_syntax_tree(serialized)):
        if node.kind != "call":
            continue
        operands = ([node.target] if node.target is not None else []) + node.args
        operand_types = [types.get(operand.id, "dyn") for operand in operands]
        untyped = [t in _UNTYPED for t in operand_types]
        name = node.value
        at = ops.token_at(positions.get(node.id, -1))
        if at is None:
            continue
        # a quantity on the left is always guarded: Quantity.Equal refuses add/sub results (pointers)
        if (name in GO_CONVERSIONS and node.target is None and len(operand_types) == 1
                and operand_types[0] in GO_CONVERSIONS[name] and tokens[at].text == "(" and at > 0
                and tokens[at - 1].text == name and not _constant(node)):
            ops.found.append((tokens[at - 1].start, tokens[at - 1].end, GO_CONVERSION_PREFIX + name))
        # a quantity's runtime text carries its internal form (values.py), so a list or map holding quantities
        # is compared element by element too
        holds_quantity = bool(untyped) and operand_types[0].startswith(("list(", "map(")) and (
            _QUANTITY in operand_types[0])
        left_guarded = bool(untyped) and (untyped[0] or operand_types[0] == _QUANTITY or holds_quantity or (
            operand_types[0] in _KUBERNETES_VALUES and len(untyped) > 1 and untyped[1]))
        if name in ("_==_", "_!=_") and left_guarded and tokens[at].text in ("==", "!="):
            first, last = _relation_left(tokens, at), _relation_right(tokens, at)
            if first >= at or last <= at:
                continue
            negate = "!" if name == "_!=_" else ""
            ops.found.append((tokens[first].start, tokens[first].start, f"{negate}cel.bind(__gpudra_l, "))
            ops.found.append((tokens[at].start, tokens[at].end, ", cel.bind(__gpudra_r, "))
            # (a statically typed list or map has no startsWith: it always goes to Python)
            tagged = "true" if holds_quantity else f'({_TAGGED.format(v="__gpudra_l")} || type(__gpudra_l) == list)'
            ops.found.append((tokens[last].end, tokens[last].end,
                              f", {tagged} ? {TAGGED_EQUALS}(__gpudra_l, __gpudra_r) : __gpudra_l == __gpudra_r))"))
        elif (name == "@in" and len(operand_types) == 2 and operand_types[1].startswith("list(")
              and _QUANTITY in operand_types[0] + operand_types[1] and tokens[at].text == "in"):
            first, last = _relation_left(tokens, at), _relation_right(tokens, at)
            if first >= at or last <= at:
                continue
            ops.found.append((tokens[first].start, tokens[first].start, f"{QUANTITY_IN}("))
            ops.found.append((tokens[at].start, tokens[at].end, ", "))
            ops.found.append((tokens[last].end, tokens[last].end, ")"))
        elif name in ("_<_", "_<=_", "_>_", "_>=_") and any(untyped) and tokens[at].text in ("<", "<=", ">", ">="):
            if untyped[0]:
                ops.wrap(_relation_left(tokens, at), at - 1)
            if len(untyped) > 1 and untyped[1]:
                ops.wrap(at + 1, _relation_right(tokens, at))
        elif name in _STRING_FUNCTIONS and any(untyped) and tokens[at].text == "(":
            parsed = top_level_arguments(tokens, at)
            if parsed is None:
                continue
            arguments = parsed[0]
            if node.target is not None:
                if at < 2 or tokens[at - 2].text != ".":
                    continue
                if untyped[0]:
                    ops.wrap(_member_target(tokens, at - 2), at - 3)
                flags = untyped[1:]
            else:
                flags = untyped
            for (first, last), flag in zip(arguments, flags):
                if flag:
                    ops.wrap(first, last)
        elif (name == "string" and node.target is None and operand_types in (["net.IP"], ["net.CIDR"])
              and tokens[at].text == "(" and at > 0 and tokens[at - 1].text == "string"):
            ops.found.append((tokens[at - 1].start, tokens[at - 1].end, NET_STRING))
        elif name == "sort" and node.target is not None and not node.args and tokens[at].text == "(":
            if at >= 2 and tokens[at - 2].text == ".":
                first = _member_target(tokens, at - 2)
                if first <= at - 3:
                    ops.found.append((tokens[first].start, tokens[first].start, f"{SORTABLE}("))
                    ops.found.append((tokens[at - 3].end, tokens[at - 3].end, ")"))
    return ops.found
