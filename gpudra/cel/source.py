"""Source-level adaptation of a selector before cel-expr-python sees it.

Kubernetes' `device.attributes` and `device.capacity` maps answer an unknown domain with an empty map
(a custom `Find` in cel-go), so `device.attributes["other.vendor"].model` is "no such key: model"
and `has(device.attributes["other.vendor"].model)` is false, while `"other.vendor" in
device.attributes` stays false. cel-cpp maps have no such hook, so the two maps become variables of their own (typed
map(string, map(string, dyn)) and map(string, map(string, kubernetes.Quantity)), as in Kubernetes)
and the domain lookup is rewritten:

    device.attributes[D]   ->  __gpudra_attributes[?D].orValue(__gpudra_no_attributes)
    device.attributes[?D]  ->  optional.of(__gpudra_attributes[?D].orValue(__gpudra_no_attributes))
    device.attributes.d    ->  __gpudra_attributes[?"d"].orValue(__gpudra_no_attributes)  (outside has())
    device.attributes.?d   ->  optional.of(__gpudra_attributes[?"d"].orValue(__gpudra_no_attributes))
    has(device.attributes.d)  ->  true        (cel-go's custom Find answers every key, so has() is true)
    has(device.attributes)    ->  unchanged   (a field of the device message)
    device.attributes      ->  __gpudra_attributes                                         (elsewhere)
    device.?attributes[D] / .?d / .d  ->  optional.of(__gpudra_attributes[?D].orValue(__gpudra_no_attributes))
    device.?attributes.value()        ->  device.attributes (then as above)

and the same for device.capacity. `__gpudra_no_*` are empty maps of the right type.

The rewrite only extends a postfix chain, so precedence never changes. `Rewritten.original_offset`
maps a position in the rewritten text back to the user's text for error columns.
Not covered (documented): the maps reached through another name, e.g. `cel.bind(a, device.attributes, a["x"])`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>(?:[rR][bB]?|[bB][rR]?)?(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?|(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?[uU]?)
  | (?P<ident>[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<punct>==|!=|<=|>=|&&|\|\||\.\?|\[\?|[-+*/%!<>?:.,\[\](){}])
  | (?P<error>.)
    """,
    re.VERBOSE | re.DOTALL,
)

DOMAIN_MAPS = ("attributes", "capacity")


class Token(NamedTuple):
    kind: str
    text: str
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.text)


def tokenize(source: str) -> list[Token]:
    """CEL tokens without whitespace/comments. Unknown characters become 'error' tokens (the engine
    reports them properly). A fresh list of the cached scan: compiling one selector tokenizes each of its
    rewritten texts several times, and a 10 KiB selector has 10,000 tokens."""
    return list(_tokens(source))


@lru_cache(maxsize=64)
def _tokens(source: str) -> tuple[Token, ...]:
    return tuple(Token(match.lastgroup or "error", match.group(), match.start())
                 for match in _TOKEN.finditer(source) if match.lastgroup != "space")


@dataclass(frozen=True)
class Rewritten:
    text: str
    origin: tuple[int, ...]  # for every character of `text`, its offset in the original source

    def original_offset(self, offset: int) -> int:
        if not self.origin:
            return 0
        return self.origin[max(0, min(offset, len(self.origin) - 1))]


def _matching_bracket(tokens: list[Token], open_index: int) -> int | None:
    depth = 0
    for index in range(open_index, len(tokens)):
        text = tokens[index].text
        if text in ("[", "[?", "(", "{"):
            depth += 1
        elif text in ("]", ")", "}"):
            depth -= 1
            if depth == 0:
                return index if text == "]" else None
    return None


def _inside_has(tokens: list[Token], device_index: int, last_index: int) -> bool:
    return (
        device_index >= 2
        and tokens[device_index - 1].text == "("
        and tokens[device_index - 2].text == "has"
        and last_index + 1 < len(tokens)
        and tokens[last_index + 1].text == ")"
    )


ATTRIBUTES_VARIABLE = "__gpudra_attributes"
CAPACITY_VARIABLE = "__gpudra_capacity"
NO_ATTRIBUTES_VARIABLE = "__gpudra_no_attributes"
NO_CAPACITY_VARIABLE = "__gpudra_no_capacity"
_VARIABLES = {"attributes": (ATTRIBUTES_VARIABLE, NO_ATTRIBUTES_VARIABLE), "capacity": (CAPACITY_VARIABLE, NO_CAPACITY_VARIABLE)}


def _optional_values(source: str) -> Rewritten:
    """`device.?attributes.value()` -> `device.attributes` (the same map: the field is always present)."""
    tokens = tokenize(source)
    operations = []
    for index in range(len(tokens) - 6):
        texts = [token.text for token in tokens[index : index + 7]]
        if (texts[0] == "device" and texts[1] == ".?" and texts[2] in DOMAIN_MAPS and texts[3:] == [".", "value", "(", ")"]
                and not (index > 0 and tokens[index - 1].text in (".", ".?"))):
            operations.append((tokens[index].start, tokens[index + 6].end, f"device.{texts[2]}"))
    return apply_operations(source, operations)


def rewrite_domain_lookups(source: str) -> Rewritten:
    values = _optional_values(source)
    return compose(values, _rewrite_domain_lookups(values.text))


def _rewrite_domain_lookups(source: str) -> Rewritten:
    tokens = tokenize(source)
    operations: list[tuple[int, int, str]] = []
    for index, token in enumerate(tokens):
        if token.kind != "ident" or token.text != "device":
            continue
        if index > 0 and tokens[index - 1].text in (".", ".?"):
            continue
        if index + 2 >= len(tokens):
            continue
        dot, name = tokens[index + 1], tokens[index + 2]
        if dot.text not in (".", ".?") or name.kind != "ident" or name.text not in DOMAIN_MAPS:
            continue
        if dot.text == ".?":
            operations.extend(_optional_domain_lookup(tokens, index))
            continue
        if _inside_has(tokens, index, index + 2):
            continue  # has(device.attributes): a field of the device, present in every device
        variable, empty = _VARIABLES[name.text]
        opener = tokens[index + 3] if index + 3 < len(tokens) else None
        domain = tokens[index + 4] if index + 4 < len(tokens) and tokens[index + 4].kind == "ident" else None
        if opener is not None and opener.text == "." and domain is not None and _inside_has(tokens, index, index + 4):
            # cel-go's maps answer every domain (a custom Find), so a presence test of a domain is true
            operations.append((tokens[index - 2].start, tokens[index + 5].end, "true"))
            continue
        operations.append((token.start, name.end, variable))
        if opener is None:
            continue
        if opener.text == "[":
            close = _matching_bracket(tokens, index + 3)
            if close is not None:
                operations.append((opener.end, opener.end, "?"))
                operations.append((tokens[close].end, tokens[close].end, f".orValue({empty})"))
        elif opener.text == "[?":
            close = _matching_bracket(tokens, index + 3)
            if close is not None:
                operations.append((token.start, token.start, "optional.of("))
                operations.append((tokens[close].end, tokens[close].end, f".orValue({empty}))"))
        elif opener.text in (".", ".?") and domain is not None:
            if index + 5 < len(tokens) and tokens[index + 5].text == "(":
                continue  # a method call on the map itself, e.g. device.attributes.exists(d, …)
            lookup = f'[?"{domain.text}"].orValue({empty})'
            if opener.text == ".?":  # an optional selection finds every domain too
                operations.append((token.start, token.start, "optional.of("))
                lookup += ")"
            operations.append((opener.start, domain.end, lookup))
    return apply_operations(source, operations)


def _optional_domain_lookup(tokens: list[Token], index: int) -> list[tuple[int, int, str]]:
    """`device.?attributes…` (the same for capacity): the field is always present, so it is `optional.of(M)` where
    M is the map that finds every domain; cel-go's optional selection and indexing of an optional keep M's Find:

        device.?attributes[D] / [?D] / .d / .?d  ->  optional.of(__gpudra_attributes[?D].orValue(__gpudra_no_attributes))
        device.?attributes.value()               ->  device.attributes (before, by _optional_values)
        device.?attributes                       ->  optional.of(__gpudra_attributes)            (elsewhere)"""
    device, name = tokens[index], tokens[index + 2]
    variable, empty = _VARIABLES[name.text]
    opener = tokens[index + 3] if index + 3 < len(tokens) else None
    if opener is not None and opener.text in ("[", "[?"):
        close = _matching_bracket(tokens, index + 3)
        if close is not None:
            return [(device.start, opener.end, f"optional.of({variable}[?"),
                    (tokens[close].end, tokens[close].end, f".orValue({empty}))")]
    if (opener is not None and opener.text in (".", ".?") and index + 4 < len(tokens)
            and tokens[index + 4].kind == "ident" and not (index + 5 < len(tokens) and tokens[index + 5].text == "(")):
        return [(device.start, tokens[index + 4].end,
                 f'optional.of({variable}[?"{tokens[index + 4].text}"].orValue({empty}))')]
    return [(device.start, name.end, f"optional.of({variable})")]


def apply_operations(source: str, operations: list[tuple[int, int, str]]) -> Rewritten:
    if not operations:
        return Rewritten(source, tuple(range(len(source))))
    operations = sorted(operations, key=lambda op: (op[0], op[1]))
    pieces: list[str] = []
    origin: list[int] = []
    cursor = 0
    for start, end, text in operations:
        pieces.append(source[cursor:start])
        origin.extend(range(cursor, start))
        pieces.append(text)
        origin.extend([start] * len(text))
        cursor = max(cursor, end)
    pieces.append(source[cursor:])
    origin.extend(range(cursor, len(source)))
    return Rewritten("".join(pieces), tuple(origin))


def top_level_arguments(tokens: list[Token], open_index: int) -> tuple[list[tuple[int, int]], int] | None:
    """Token index ranges [first, last] of the arguments of the call opened at `open_index`, and the
    index of the closing parenthesis."""
    depth = 0
    arguments: list[tuple[int, int]] = []
    start = open_index + 1
    for index in range(open_index, len(tokens)):
        text = tokens[index].text
        if text in ("[", "[?", "(", "{"):
            depth += 1
        elif text in ("]", ")", "}"):
            depth -= 1
            if depth == 0:
                if index > start:
                    arguments.append((start, index - 1))
                return arguments, index
        elif text == "," and depth == 1:
            arguments.append((start, index - 1))
            start = index + 1
    return None


def _matching_open(tokens: list[Token], close_index: int) -> int | None:
    depth = 0
    for index in range(close_index, -1, -1):
        text = tokens[index].text
        if text in ("]", ")", "}"):
            depth += 1
        elif text in ("[", "[?", "(", "{"):
            depth -= 1
            if depth == 0:
                return index
    return None


def receiver_start(tokens: list[Token], dot_index: int) -> int | None:
    """The first token of the postfix chain (`a.b(c)[d]`, `lists.range(n)`, a literal) that ends before `dot_index`."""
    index = dot_index - 1
    while index >= 0:
        token = tokens[index]
        if token.text in (")", "]", "}"):
            opening = _matching_open(tokens, index)
            if opening is None:
                return None
            index = opening
            if index > 0 and tokens[index - 1].kind == "ident" and tokens[index].text in ("(", "{"):
                index -= 1  # a call or a message literal
            elif index > 0 and tokens[index].text in ("[", "[?") and (
                    tokens[index - 1].kind == "ident" or tokens[index - 1].text in (")", "]")):
                index -= 1  # an index: the chain goes on to the left
                continue
        elif token.kind not in ("ident", "string", "number"):
            return None
        if index >= 2 and tokens[index - 1].text in (".", ".?"):
            index -= 2
            continue
        return index
    return None


MAP_FROM_ENTRIES = "__gpudra_map_from_entries"
MERGE_MAPS = "__gpudra_merge_maps"


def rewrite_map_transforms(source: str) -> Rewritten:
    """transformMap/transformMapEntry through transformList plus a Python map builder.

    cel-expr-python parses and checks the two-variable map transforms but has no runtime for their
    `cel.@mapInsert` helper, so (postfix only, precedence unchanged):
        R.transformMap(k, v, [f,] e)       ->  R.transformList(k, v, [f,] [dyn(k), dyn(e)]).__gpudra_map_from_entries()
        R.transformMapEntry(k, v, [f,] e)  ->  R.transformList(k, v, [f,] e).__gpudra_merge_maps()
    """
    tokens = tokenize(source)
    operations: list[tuple[int, int, str]] = []
    for index, token in enumerate(tokens):
        if token.text not in ("transformMap", "transformMapEntry") or index == 0 or tokens[index - 1].text != ".":
            continue
        if index + 1 >= len(tokens) or tokens[index + 1].text != "(":
            continue
        parsed = top_level_arguments(tokens, index + 1)
        if parsed is None or len(parsed[0]) not in (3, 4):
            continue
        arguments, close = parsed
        operations.append((token.start, token.end, "transformList"))
        last_first, last_end = arguments[-1]
        if token.text == "transformMap":
            key = source[tokens[arguments[0][0]].start : tokens[arguments[0][1]].end]
            # dyn(): a [key, value] pair may mix types, which HomogeneousAggregateLiterals refuses
            operations.append((tokens[last_first].start, tokens[last_first].start, f"[dyn({key}), dyn("))
            operations.append((tokens[last_end].end, tokens[last_end].end, ")]"))
            helper = MAP_FROM_ENTRIES
        else:
            helper = MERGE_MAPS
        operations.append((tokens[close].end, tokens[close].end, f".{helper}()"))
    return apply_operations(source, operations)


FORMAT_ERRORS = "__gpudra_format_errors"
FORMAT_NAMED = "__gpudra_format_named"


def rewrite_format_calls(source: str) -> Rewritten:
    """The format library's optional results, built from a map with zero or one entry:
        X.validate(s)     ->  X.__gpudra_format_errors(s)[?"errors"]
        format.named(n)   ->  __gpudra_format_named(n)[?"format"]
    """
    tokens = tokenize(source)
    operations: list[tuple[int, int, str]] = []
    for index, token in enumerate(tokens):
        if index + 1 >= len(tokens) or tokens[index + 1].text != "(":
            continue
        if token.text == "validate" and index > 0 and tokens[index - 1].text == ".":
            replacement, key, start = FORMAT_ERRORS, "errors", token.start
        elif (token.text == "named" and index >= 2 and tokens[index - 1].text == "."
              and tokens[index - 2].text == "format" and (index < 3 or tokens[index - 3].text not in (".", ".?"))):
            replacement, key, start = FORMAT_NAMED, "format", tokens[index - 2].start
        else:
            continue
        parsed = top_level_arguments(tokens, index + 1)
        if parsed is None:
            continue
        close = parsed[1]
        operations.append((start, token.end, replacement))
        operations.append((tokens[close].end, tokens[close].end, f'[?"{key}"]'))
    return apply_operations(source, operations)


RANGE_OVER_LIMIT = "__gpudra_range_over_limit"
RANGE_LIMIT = 1_000_000  # a longer range costs cel-go more than CELSelectorExpressionMaxCost to build


def rewrite_range_bounds(source: str) -> Rewritten:
    """`lists.range(n)`: n < 0 is an empty list in cel-go (its loop never runs), where cel-cpp fails; a range
    longer than the cost limit fails as cel-go's cost tracker fails it, before cel-cpp would allocate it:
    lists.range(cel.bind(__gpudra_n, n, __gpudra_n < 0 ? 0 : __gpudra_n > LIMIT ? over(__gpudra_n) : __gpudra_n))."""
    tokens = tokenize(source)
    operations: list[tuple[int, int, str]] = []
    for index in range(len(tokens) - 3):
        if (tokens[index].text, tokens[index + 1].text, tokens[index + 2].text, tokens[index + 3].text) != (
                "lists", ".", "range", "("):
            continue
        if index > 0 and tokens[index - 1].text in (".", ".?"):
            continue
        parsed = top_level_arguments(tokens, index + 3)
        if parsed is None or len(parsed[0]) != 1:
            continue
        first, last = parsed[0][0]
        operations.append((tokens[first].start, tokens[first].start, "cel.bind(__gpudra_n, "))
        operations.append((tokens[last].end, tokens[last].end,
                           f", __gpudra_n < 0 ? 0 : __gpudra_n > {RANGE_LIMIT} ? {RANGE_OVER_LIMIT}(__gpudra_n) : __gpudra_n)"))
    return apply_operations(source, operations)


INDEX_OF_OFFSET = "__gpudra_index_of_offset"
LAST_INDEX_OF_OFFSET = "__gpudra_last_index_of_offset"


def rewrite_offset_searches(source: str) -> Rewritten:
    """`s.indexOf(t, n)` / `s.lastIndexOf(t, n)` (the strings extension's forms with an offset) call
    gpudra's implementation of cel-go's semantics: cel-cpp refuses an offset past the end, cel-go answers
    -1 (or the offset, for an empty needle). The one-argument forms agree and are left alone."""
    tokens = tokenize(source)
    operations: list[tuple[int, int, str]] = []
    replacements = {"indexOf": INDEX_OF_OFFSET, "lastIndexOf": LAST_INDEX_OF_OFFSET}
    for index, token in enumerate(tokens):
        if token.text not in replacements or index == 0 or tokens[index - 1].text != ".":
            continue
        if index + 1 >= len(tokens) or tokens[index + 1].text != "(":
            continue
        parsed = top_level_arguments(tokens, index + 1)
        if parsed is not None and len(parsed[0]) == 2:
            operations.append((token.start, token.end, replacements[token.text]))
    return apply_operations(source, operations)


_SIMPLE_STRING = re.compile(r"""^(?:"([^"\\\n]*)"|'([^'\\\n]*)')$""")


def _literal_text(token: Token) -> str | None:
    match = _SIMPLE_STRING.match(token.text) if token.kind == "string" else None
    if match is None:
        return None
    return match.group(1) if match.group(1) is not None else match.group(2)


def fold_constant_values(source: str, runtime: bool = False, semver_normalize: bool = True) -> Rewritten:
    """`quantity("40Gi")` and `semver("8.0.0"[, true])` with a valid literal become message literals.

    Same value, but no call into Python per evaluation (cel-expr-python's Python calls are the slow
    part of an evaluation and leak about 1 KiB each). An invalid literal is left alone, so the
    evaluation still reports the error as Kubernetes does.
    """
    from gpudra.quantity import Quantity, QuantityError
    from gpudra.semver import SemverError, parse_semver
    from gpudra.cel import values as V

    tokens = tokenize(source)
    operations: list[tuple[int, int, str]] = []
    for index, token in enumerate(tokens):
        if token.text not in ("quantity", "semver") or (index > 0 and tokens[index - 1].text in (".", ".?")):
            continue
        if index + 3 >= len(tokens) or tokens[index + 1].text != "(":
            continue
        text = _literal_text(tokens[index + 2])
        if text is None:
            continue
        normalize, close = False, index + 3
        if token.text == "semver" and tokens[index + 3].text == "," and index + 5 < len(tokens):
            if tokens[index + 4].text not in ("true", "false") or not semver_normalize:
                continue
            normalize, close = tokens[index + 4].text == "true", index + 5
        if tokens[close].text != ")":
            continue
        try:
            if token.text == "quantity":
                message = V.quantity_message(Quantity.parse(text))
            else:
                message = V.semver_message(parse_semver(text, normalize))
        except (QuantityError, SemverError):
            continue
        if runtime:  # the tagged-string form of values.py
            tag = V.QUANTITY_TAG if token.text == "quantity" else V.SEMVER_TAG
            literal = '"' + tag.replace("\x1f", "\\x1f") + message.s + '"'
        else:
            type_name = V.QUANTITY_TYPE if token.text == "quantity" else V.SEMVER_TYPE
            literal = f'{type_name}{{s: "{message.s}"}}'
        operations.append((token.start, tokens[close].end, literal))
    return apply_operations(source, operations)


_OPERAND_END_KINDS = ("ident", "number", "string")


def collapse_unary_runs(source: str) -> Rewritten:
    """`!!x` -> `x`, `--x` -> `x`: both parsers read a run of `!` (or of unary `-`) as one rule and keep only its
    parity (cel-go parser/parser.go VisitLogicalNot, VisitNegate: an even run is the operand itself, an odd one a
    single operator), so dropping pairs changes nothing, and a 10,000-operator selector stays 10 tokens for the
    token passes that follow. The operator next to the operand stays (negative literals fold as before)."""
    if "!!" not in source.replace(" ", "") and "--" not in source.replace(" ", ""):
        return Rewritten(source, tuple(range(len(source))))
    tokens = tokenize(source)
    operations: list[tuple[int, int, str]] = []
    index = 0
    while index < len(tokens):
        text = tokens[index].text
        if text not in ("!", "-"):
            index += 1
            continue
        end = index
        while end + 1 < len(tokens) and tokens[end + 1].text == text:
            end += 1
        first = index
        if text == "-" and index > 0 and (tokens[index - 1].kind in _OPERAND_END_KINDS
                                          or tokens[index - 1].text in (")", "]", "}")):
            first += 1  # binary minus: the run of unary ones starts after it
        pairs = (end - first + 1) // 2
        if pairs and end + 1 < len(tokens):  # (no operand: left for the parser to report)
            operations.append((tokens[first].start, tokens[first + 2 * pairs].start, ""))
        index = end + 1
    return apply_operations(source, operations)


GO_MAX_RECURSION = 250  # cel-go parser's default maxRecursionDepth (parser/parser.go)


def collapse_redundant_parentheses(source: str) -> Rewritten:
    """`((x))` -> `(x)`. cel-cpp's parser stops at 32 nested levels, cel-go's at 250 (per grammar rule); doubled
    parentheses change nothing, so they are dropped while the nesting stays within cel-go's limit."""
    tokens = tokenize(source)
    depth = deepest = 0
    for token in tokens:
        if token.text in ("(", "[", "[?", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token.text in (")", "]", "}"):
            depth -= 1
    if deepest <= 32 or deepest > GO_MAX_RECURSION:
        return Rewritten(source, tuple(range(len(source))))
    closing: dict[int, int] = {}
    stack: list[int] = []
    for index, token in enumerate(tokens):
        if token.text in ("(", "[", "[?", "{"):
            stack.append(index)
        elif token.text in (")", "]", "}") and stack:
            closing[stack.pop()] = index
    operations: list[tuple[int, int, str]] = []
    for index in range(len(tokens) - 1):
        if tokens[index].text != "(" or tokens[index + 1].text != "(":
            continue
        outer, inner = closing.get(index), closing.get(index + 1)
        if outer is not None and inner is not None and inner == outer - 1:
            operations.append((tokens[index + 1].start, tokens[index + 1].end, ""))
            operations.append((tokens[inner].start, tokens[inner].end, ""))
    return apply_operations(source, operations)


def compose(first: Rewritten, second: Rewritten) -> Rewritten:
    """`second` (a rewrite of `first.text`) with its positions mapped back to `first`'s source."""
    if second.text == first.text:
        return first
    return Rewritten(second.text, tuple(first.original_offset(offset) for offset in second.origin))


def offset_of(source: str, line: int, column: int) -> int:
    """Offset of a 1-based (line, column) position."""
    lines = source.split("\n")
    offset = sum(len(text) + 1 for text in lines[: max(0, line - 1)])
    return offset + max(0, column - 1)


def line_column(source: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of an offset."""
    before = source[:offset]
    line = before.count("\n") + 1
    column = offset - (before.rfind("\n") + 1) + 1
    return line, column


def caret_report(source: str, message: str, offset: int | None) -> str:
    """cel-go's issue format: `ERROR: <input>:L:C: message` plus the source line and a caret."""
    if offset is None:
        return f"ERROR: <input>: {message}"
    line, column = line_column(source, offset)
    source_line = source.split("\n")[line - 1] if source else ""
    return f"ERROR: <input>:{line}:{column}: {message}\n | {source_line}\n | {'.' * (column - 1)}^"
