"""Expressions nested deeper than cel-cpp's parser allows, rewritten to an equivalent flatter text.

cel-go's parser (v0.26.0 parser/parser.go; Kubernetes sets no parser option) stops at a recursion depth of 250,
cel-cpp's (as cel-expr-python 0.1.3 builds it) at 32: a left-deep sum of 33 terms or 31 nested list literals
parse in Kubernetes but not in cel-cpp. Doubled parentheses are dropped (gpudra.cel.source), and here:

- a chain of more than 32 terms joined by `+`/`-` (one precedence level, left-associative) is cut into groups
  carried by `cel.bind`: `t1 + … + t40` becomes `cel.bind(__gpudra_h0, t1 + … + t20, __gpudra_h0 + t21 + … + t40)`,
  the same additions in the same order (so the same overflow or error), at the same place;
- a list literal or parenthesised group that reaches past depth 28 and reads no variable of an enclosing macro
  or binding is hoisted out: `E[G]` becomes `cel.bind(__gpudra_hN, G, E[__gpudra_hN])`. cel-cpp evaluates a
  binding lazily (when first read, at most once) and CEL values have no side effects, so the outcome is the same.

`__gpudra_h` variables cost nothing in gpudra.cel.estimate (cel-go never sees them).
"""

from __future__ import annotations

from gpudra.cel.source import Rewritten, Token, apply_operations, tokenize

HOISTED_PREFIX = "__gpudra_h"
_CHAIN_LIMIT = 32  # cel-cpp parses a chain of 32 terms, not 33
_GROUP = 20
_DEPTH_LIMIT = 28  # cel-cpp parses 30 nested list literals; leave room for the bindings
_HOIST_AT = 14
_OPEN = ("(", "[", "[?", "{")
_CLOSE = (")", "]", "}")
_LOWER_PRECEDENCE = frozenset({"==", "!=", "<", "<=", ">", ">=", "in", "&&", "||", "?", ":", ","})
_BINDERS = frozenset({"all", "exists", "exists_one", "map", "filter", "existsOne", "transformList", "transformMap",
                      "transformMapEntry", "sortBy", "bind"})


def _ends_operand(token: Token) -> bool:
    return token.kind in ("ident", "number", "string") or token.text in _CLOSE


def _chains(tokens: list[Token]) -> list[list[int]]:
    """For every run of `+`/`-` terms at one bracket depth: the token indexes of its binary operators."""
    chains: list[list[int]] = []
    stack: list[list[int]] = [[]]
    for index, token in enumerate(tokens):
        if token.text in _OPEN:
            stack.append([])
        elif token.text in _CLOSE:
            chains.append(stack.pop())
            if not stack:
                stack.append([])
        elif token.text in _LOWER_PRECEDENCE:
            chains.append(stack[-1])
            stack[-1] = []
        elif token.text in ("+", "-") and index > 0 and _ends_operand(tokens[index - 1]):
            stack[-1].append(index)
    chains.extend(stack)
    return [chain for chain in chains if len(chain) + 1 > _CHAIN_LIMIT]


def _chain_start(tokens: list[Token], first_operator: int) -> int:
    """The first token of the chain's first term: back to the bracket or operator that opens the run."""
    depth, index = 0, first_operator - 1
    while index >= 0:
        text = tokens[index].text
        if text in _CLOSE:
            depth += 1
        elif text in _OPEN:
            if depth == 0:
                return index + 1
            depth -= 1
        elif depth == 0 and text in _LOWER_PRECEDENCE:
            return index + 1
        index -= 1
    return 0


def _chain_end(tokens: list[Token], last_operator: int) -> int:
    depth, index = 0, last_operator + 1
    while index < len(tokens):
        text = tokens[index].text
        if text in _OPEN:
            depth += 1
        elif text in _CLOSE:
            if depth == 0:
                return index - 1
            depth -= 1
        elif depth == 0 and text in _LOWER_PRECEDENCE:
            return index - 1
        index += 1
    return len(tokens) - 1


def split_long_chains(source: str) -> Rewritten:
    tokens = tokenize(source)
    operations: list[tuple[int, int, str]] = []
    counter = 0
    for chain in _chains(tokens):
        start, end = _chain_start(tokens, chain[0]), _chain_end(tokens, chain[-1])
        boundaries = chain[_GROUP - 1 :: _GROUP]  # the operators that begin a new group
        if not boundaries or start > chain[0] or end < chain[-1]:
            continue
        names = [f"{HOISTED_PREFIX}{counter + i}" for i in range(len(boundaries))]
        counter += len(boundaries)
        operations.append((tokens[start].start, tokens[start].start, f"cel.bind({names[0]}, "))
        for number, operator in enumerate(boundaries):
            position = tokens[operator].start
            if number + 1 < len(boundaries):
                operations.append((position, position, f", cel.bind({names[number + 1]}, {names[number]} "))
            else:
                operations.append((position, position, f", {names[number]} "))
        operations.append((tokens[end].end, tokens[end].end, ")" * len(boundaries)))
    return apply_operations(source, operations) if operations else Rewritten(source, tuple(range(len(source))))


def _closing(tokens: list[Token]) -> dict[int, int]:
    closing: dict[int, int] = {}
    stack: list[int] = []
    for index, token in enumerate(tokens):
        if token.text in _OPEN:
            stack.append(index)
        elif token.text in _CLOSE and stack:
            closing[stack.pop()] = index
    return closing


def _bound_names(tokens: list[Token], opening: int, closing: dict[int, int]) -> set[str]:
    """Variables a macro or binding opened at `opening` (a `(`) introduces: its leading identifier arguments."""
    if opening < 1 or tokens[opening].text != "(" or tokens[opening - 1].text not in _BINDERS:
        return set()
    names, index = set(), opening + 1
    while index + 1 < closing.get(opening, 0) and tokens[index].kind == "ident" and tokens[index + 1].text == ",":
        names.add(tokens[index].text)
        index += 2
    return names


def _hoist_one(source: str, counter: int) -> Rewritten | None:
    tokens = tokenize(source)
    closing = _closing(tokens)
    depth, scopes = 0, [set[str]()]
    for index, token in enumerate(tokens):
        if token.text in _OPEN:
            depth += 1
            hoistable = token.text == "[" and (index == 0 or not _ends_operand(tokens[index - 1])) or (
                token.text == "(" and (index == 0 or tokens[index - 1].kind != "ident" and not _ends_operand(tokens[index - 1])))
            end = closing.get(index)
            if depth >= _HOIST_AT and hoistable and end is not None:
                inner = tokens[index : end + 1]
                deepest, level = 0, 0
                for inner_token in inner:
                    level += inner_token.text in _OPEN
                    level -= inner_token.text in _CLOSE
                    deepest = max(deepest, level)
                bound = set().union(*scopes)
                reads = {t.text for i, t in enumerate(inner) if t.kind == "ident" and (i == 0 or inner[i - 1].text not in (".", ".?"))}
                if depth + deepest > _DEPTH_LIMIT and not reads & bound:
                    name = f"{HOISTED_PREFIX}{counter}"
                    group = source[token.start : tokens[end].end]
                    return apply_operations(source, [
                        (0, 0, f"cel.bind({name}, {group}, "),
                        (token.start, tokens[end].end, name),
                        (len(source), len(source), ")"),
                    ])
            scopes.append(_bound_names(tokens, index, closing))
        elif token.text in _CLOSE:
            depth -= 1
            if len(scopes) > 1:
                scopes.pop()
    return None


def flatten(source: str) -> Rewritten:
    """`source` with long chains split and deep closed groups hoisted; unchanged when nothing is too deep."""
    from gpudra.cel.source import _compose

    rewritten = split_long_chains(source)
    for counter in range(1000, 1016):  # each pass hoists one group (names apart from the chains')
        hoisted = _hoist_one(rewritten.text, counter)
        if hoisted is None:
            break
        rewritten = _compose(rewritten, hoisted)
    return rewritten
