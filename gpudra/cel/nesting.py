"""Expressions nested deeper than cel-cpp's parser allows, rewritten to an equivalent flatter text.

cel-go's parser (v0.26.0 parser/parser.go; Kubernetes sets no parser option) stops at a recursion depth of 250,
cel-cpp's (as cel-expr-python 0.1.3 builds it) at 32: a left-deep sum of 33 terms or 31 nested list literals
parse in Kubernetes but not in cel-cpp. Doubled parentheses are dropped (gpudra.cel.source), and here:

- a chain of more than 32 terms joined by `+`/`-` (or `*`/`/`/`%`; one precedence level, left-associative) is cut
  into groups carried by `cel.bind`: `t1 + … + t40` becomes `cel.bind(__gpudra_h0, t1 + … + t20, __gpudra_h0 + t21
  + … + t40)`, the same operations in the same order (so the same overflow or error), at the same place; likewise
  a long `c1 ? a1 : c2 ? a2 : …` (its tail bound first; cel-cpp binds lazily, so it is still evaluated only when
  reached) and a long postfix chain `x.f().g()[0]…`;
- a list or map literal, parenthesised group or global call that reaches past depth 28 and reads no variable of an
  enclosing macro or binding is hoisted out: `E[G]` becomes `cel.bind(__gpudra_hN, G, E[__gpudra_hN])`. cel-cpp
  evaluates a binding lazily (when first read, at most once) and CEL values have no side effects, so the outcome
  is the same.

`__gpudra_h` variables cost nothing in gpudra.cel.estimate (cel-go never sees them).
"""

from __future__ import annotations
from typing import Callable

from gpudra.cel.source import Rewritten, Token, apply_operations, compose, tokenize

HOISTED_PREFIX = "__gpudra_h"
_CHAIN_LIMIT = 32  # cel-cpp parses a chain of 32 terms, not 33
_GROUP = 20
_POSTFIX_LIMIT = 12  # selections, calls and indexes after one primary (they add to its nesting)
_DEPTH_LIMIT = 28  # cel-cpp parses 30 nested list literals; leave room for the bindings
_HOIST_AT = 14
_OPEN = ("(", "[", "[?", "{")
_CLOSE = (")", "]", "}")
_LOWER_PRECEDENCE = frozenset({"==", "!=", "<", "<=", ">", ">=", "in", "&&", "||", "?", ":", ","})
_BINDERS = frozenset({"all", "exists", "exists_one", "map", "filter", "existsOne", "transformList", "transformMap",
                      "transformMapEntry", "sortBy", "bind"})


def _ends_operand(token: Token) -> bool:
    return token.kind in ("ident", "number", "string") or token.text in _CLOSE


def _binary(tokens: list[Token], index: int) -> bool:
    return index > 0 and _ends_operand(tokens[index - 1])


_ADDITIVE = (frozenset({"+", "-"}), _LOWER_PRECEDENCE)
_MULTIPLICATIVE = (frozenset({"*", "/", "%"}), _LOWER_PRECEDENCE | {"+", "-"})


def _is_separator(tokens: list[Token], index: int, separators: frozenset[str]) -> bool:
    text = tokens[index].text
    return text in separators and (text not in ("+", "-") or _binary(tokens, index))


def _chains(tokens: list[Token], operators: frozenset[str], separators: frozenset[str]) -> list[list[int]]:
    """For every run of terms joined by `operators` at one bracket depth: the token indexes of the operators."""
    chains: list[list[int]] = []
    stack: list[list[int]] = [[]]
    for index, token in enumerate(tokens):
        if token.text in _OPEN:
            stack.append([])
        elif token.text in _CLOSE:
            chains.append(stack.pop())
            if not stack:
                stack.append([])
        elif token.text in operators and _binary(tokens, index):
            stack[-1].append(index)
        elif _is_separator(tokens, index, separators):
            chains.append(stack[-1])
            stack[-1] = []
    chains.extend(stack)
    return [chain for chain in chains if len(chain) + 1 > _CHAIN_LIMIT]


def _segment_start(tokens: list[Token], index: int, separators: frozenset[str]) -> int:
    """The first token of the run that `index` is in: back to the bracket or separator that opens it."""
    depth = 0
    while index >= 0:
        text = tokens[index].text
        if text in _CLOSE:
            depth += 1
        elif text in _OPEN:
            if depth == 0:
                return index + 1
            depth -= 1
        elif depth == 0 and _is_separator(tokens, index, separators):
            return index + 1
        index -= 1
    return 0


def _segment_end(tokens: list[Token], index: int, separators: frozenset[str]) -> int:
    depth = 0
    while index < len(tokens):
        text = tokens[index].text
        if text in _OPEN:
            depth += 1
        elif text in _CLOSE:
            if depth == 0:
                return index - 1
            depth -= 1
        elif depth == 0 and _is_separator(tokens, index, separators):
            return index - 1
        index += 1
    return len(tokens) - 1


def _names(counter: list[int], count: int) -> list[str]:
    names = [f"{HOISTED_PREFIX}{counter[0] + i}" for i in range(count)]
    counter[0] += count
    return names


def split_long_chains(source: str, level: tuple[frozenset[str], frozenset[str]], counter: list[int]) -> Rewritten:
    tokens = tokenize(source)
    operations: list[tuple[int, int, str]] = []
    operators, separators = level
    for chain in _chains(tokens, operators, separators):
        start, end = _segment_start(tokens, chain[0] - 1, separators), _segment_end(tokens, chain[-1] + 1, separators)
        boundaries = chain[_GROUP - 1 :: _GROUP]  # the operators that begin a new group
        names = _names(counter, len(boundaries))
        operations.append((tokens[start].start, tokens[start].start, f"cel.bind({names[0]}, "))
        for number, operator in enumerate(boundaries):
            position = tokens[operator].start
            if number + 1 < len(boundaries):
                operations.append((position, position, f", cel.bind({names[number + 1]}, {names[number]} "))
            else:
                operations.append((position, position, f", {names[number]} "))
        operations.append((tokens[end].end, tokens[end].end, ")" * len(boundaries)))
    return apply_operations(source, operations)


_TERNARY_SEPARATORS = frozenset({","})


def split_long_conditionals(source: str, counter: list[int]) -> Rewritten:
    """`c1 ? a1 : c2 ? a2 : … : z` with more than 30 levels: the tail after the 20th `:` bound first (lazily, so
    it is still evaluated only when reached): `cel.bind(h, TAIL, c1 ? a1 : … c20 ? a20 : h)`."""
    tokens = tokenize(source)
    runs: list[list[int]] = []
    stack: list[list[int]] = [[]]
    for index, token in enumerate(tokens):
        if token.text in _OPEN:
            stack.append([])
        elif token.text in _CLOSE:
            runs.append(stack.pop())
            if not stack:
                stack.append([])
        elif token.text in ("?", ":", ","):
            if token.text == "," :
                runs.append(stack[-1])
                stack[-1] = []
            else:
                stack[-1].append(index)
    runs.extend(stack)
    operations: list[tuple[int, int, str]] = []
    for run in runs:
        if len(run) < 2 * _CHAIN_LIMIT - 4 or any(tokens[i].text != ("?" if n % 2 == 0 else ":") for n, i in enumerate(run)):
            continue
        start = _segment_start(tokens, run[0] - 1, _TERNARY_SEPARATORS)
        end = _segment_end(tokens, run[-1] + 1, _TERNARY_SEPARATORS)
        colon = run[2 * _GROUP - 1]
        name = _names(counter, 1)[0]
        tail = source[tokens[colon + 1].start : tokens[end].end]
        operations.append((tokens[start].start, tokens[start].start, f"cel.bind({name}, {tail}, "))
        operations.append((tokens[colon + 1].start, tokens[end].end, f"{name})"))
    return apply_operations(source, operations)


def _depth_at(tokens: list[Token], index: int) -> int:
    return sum((token.text in _OPEN) - (token.text in _CLOSE) for token in tokens[:index])


def _deepest(tokens: list[Token]) -> int:
    deepest = level = 0
    for token in tokens:
        level += (token.text in _OPEN) - (token.text in _CLOSE)
        deepest = max(deepest, level)
    return deepest


def split_long_postfix_chains(source: str, counter: list[int]) -> Rewritten:
    """`x.f().g()[0]…` with more than 30 selections, calls or indexes: `cel.bind(h, x.f()…(20 of them), h.…)`."""
    tokens = tokenize(source)
    closing = _closing(tokens)
    operations: list[tuple[int, int, str]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        starts_primary = index == 0 or tokens[index - 1].text not in (".", ".?") and not _ends_operand(tokens[index - 1])
        if not starts_primary or not (token.kind in ("ident", "string", "number") or token.text in _OPEN):
            index += 1
            continue
        cursor = closing.get(index, index) if token.text in _OPEN else index
        if token.kind == "ident" and cursor + 1 < len(tokens) and tokens[cursor + 1].text == "(":
            cursor = closing.get(cursor + 1, cursor + 1)  # a global call
        ends: list[int] = []  # the last token of each postfix operation
        while cursor + 1 < len(tokens):
            following = tokens[cursor + 1].text
            if following in (".", ".?") and cursor + 2 < len(tokens) and tokens[cursor + 2].kind == "ident":
                cursor += 2
                if cursor + 1 < len(tokens) and tokens[cursor + 1].text == "(":
                    cursor = closing.get(cursor + 1, cursor + 1)
            elif following in ("[", "[?"):
                cursor = closing.get(cursor + 1, cursor + 1)
            else:
                break
            ends.append(cursor)
        if len(ends) > _POSTFIX_LIMIT and _depth_at(tokens, index) + _deepest(tokens[index : cursor + 1]) + len(ends) > 26:
            cut = ends[_POSTFIX_LIMIT - 3]
            name = _names(counter, 1)[0]
            operations.append((token.start, token.start, f"cel.bind({name}, "))
            operations.append((tokens[cut].end, tokens[cut].end, f", {name}"))
            operations.append((tokens[cursor].end, tokens[cursor].end, ")"))
            index = cursor + 1
            continue
        index += 1
    return apply_operations(source, operations)


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
            first, end = index, closing.get(index)
            after_operator = index == 0 or not _ends_operand(tokens[index - 1])
            hoistable = token.text in ("[", "(", "{") and after_operator
            if (token.text == "(" and index > 0 and tokens[index - 1].kind == "ident" and tokens[index - 1].text != "has"
                    and (index < 2 or tokens[index - 2].text not in (".", ".?"))
                    and (index < 2 or not _ends_operand(tokens[index - 2]))):
                first, hoistable = index - 1, True  # a global function's call, hoisted whole
            if token.text == "{" and index > 0 and tokens[index - 1].kind == "ident":
                hoistable = False  # a message literal
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
                    group = source[tokens[first].start : tokens[end].end]
                    return apply_operations(source, [
                        (0, 0, f"cel.bind({name}, {group}, "),
                        (tokens[first].start, tokens[end].end, name),
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
    rewritten = Rewritten(source, tuple(range(len(source))))
    counter = [0]
    for _ in range(8):  # a split tail or inner chain may itself be long: until nothing changes
        before = rewritten.text
        steps: tuple[Callable[[str], Rewritten], ...] = (
                lambda text: split_long_chains(text, _ADDITIVE, counter),
                lambda text: split_long_chains(text, _MULTIPLICATIVE, counter),
                lambda text: split_long_conditionals(text, counter),
                lambda text: split_long_postfix_chains(text, counter))
        for step in steps:
            rewritten = compose(rewritten, step(rewritten.text))
        if rewritten.text == before:
            break
    for number in range(1000, 1016):  # each pass hoists one group (names apart from the chains')
        hoisted = _hoist_one(rewritten.text, number)
        if hoisted is None:
            break
        rewritten = compose(rewritten, hoisted)
    return rewritten
