"""The whole source-level adaptation of a CEL expression, in order: each step a rewrite from gpudra.cel.source,
gpudra.cel.nesting (deep nesting flattened) or gpudra.cel.list_cost (list-building macros metered), composed so
that every position still maps back to the text the user wrote. Kept apart from source.py because nesting and
list_cost build on source's tokenizer."""

from __future__ import annotations

from gpudra.cel.list_cost import wrap_ranges
from gpudra.cel.nesting import flatten
from gpudra.cel.source import (
    Rewritten, collapse_redundant_parentheses, collapse_unary_runs, fold_constant_values, rewrite_domain_lookups, rewrite_format_calls, rewrite_map_transforms, rewrite_offset_searches, rewrite_range_bounds, compose,
)


def adapt(source: str, runtime: bool = False, semver_normalize: bool = True, wrap_lists: bool = True) -> Rewritten:
    """Every source-level adaptation, with positions mapped back to `source`; `runtime` gives the text
    for the evaluation environment (constant values folded to their tagged-string form, list-building macros
    wrapped by gpudra.cel.list_cost unless `wrap_lists` is False); `semver_normalize`: the release has
    `semver(s, normalize)` (else such a call is left to the checker)."""
    rewritten = collapse_unary_runs(source)
    rewritten = compose(rewritten, collapse_redundant_parentheses(rewritten.text))
    rewritten = compose(rewritten, flatten(rewritten.text))
    rewritten = compose(rewritten, rewrite_domain_lookups(rewritten.text))
    rewritten = compose(rewritten, rewrite_map_transforms(rewritten.text))
    rewritten = compose(rewritten, rewrite_format_calls(rewritten.text))
    if runtime:
        rewritten = compose(rewritten, rewrite_offset_searches(rewritten.text))
        rewritten = compose(rewritten, rewrite_range_bounds(rewritten.text))
        if wrap_lists:
            rewritten = compose(rewritten, wrap_ranges(rewritten.text))
    return compose(rewritten, fold_constant_values(rewritten.text, runtime, semver_normalize))
