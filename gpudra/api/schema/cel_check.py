"""Selector expressions at validation time: compile with gpudra.cel, and explain the
classic mistakes (attributes looked up by attribute name instead of by domain, amounts read from attributes)."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Callable

from gpudra.api.schema import names
from gpudra.api.schema.types import Context
from gpudra.vocabulary import DRIVER_NAME

if TYPE_CHECKING:
    from gpudra.cel import CELCompileError, Selector  # imported on first use (see compiler)

_LOOKUP = re.compile(r"device\.(attributes|capacity)\[\s*(['\"])([^'\"]*)\2\s*\]")
_QUANTITY_USE = re.compile(r"^\s*\.\s*(isGreaterThan|isLessThan|compareTo|add|sub|asInteger|asApproximateFloat)\b")
_AMOUNT_NAMES = {"memory", "mem", "gpumemory", "vram", "framebuffer", "cores", "multiprocessors"}
DEFAULT_DOMAIN = DRIVER_NAME


def compiler() -> tuple[Callable[..., Selector], type[CELCompileError]]:
    """gpudra.cel.compile_selector and its error class (imported on first use: objects without selectors need
    no CEL)."""
    from gpudra.cel import CELCompileError, compile_selector

    return compile_selector, CELCompileError


def check_selector_expression(expression: str, path: str, ctx: Context) -> None:
    explain_lookups(expression, path, ctx)
    version = ctx.facts.get("release")
    version = version if isinstance(version, str) else None
    consumable, list_type = selector_gates(version, ctx.facts.get("features"))
    outcome = compile_outcome(expression, version, consumable, list_type)
    if outcome is None:
        # warnings: the API server accepts the expression (tests/oracles/test_kube_validation.py asks the real one); the
        # message says that every evaluation fails on it
        for message, caret in literal_problems(expression, version, consumable, list_type):
            ctx.warning(path, message, caret)
        return
    severity, message, detail = outcome
    if severity == "error":
        ctx.error(path, message, detail)
    else:
        ctx.warning(path, message, detail)


def selector_gates(kubernetes_version: str | None, features: object = None) -> tuple[bool, bool]:
    """(DRAConsumableCapacity, DRAListTypeAttributes): the gates that change the selector CEL environment, as
    `features` (gpudra.allocator.Features) sets them, else the release's defaults."""
    from gpudra.api.gates import gate_on
    from gpudra.versions import parse_version

    version = parse_version(kubernetes_version)
    return (gate_on("DRAConsumableCapacity", version, features), gate_on("DRAListTypeAttributes", version, features))


@functools.lru_cache(maxsize=4096)
def compile_outcome(expression: str, kubernetes_version: str | None = None, consumable_capacity: bool | None = None,
                    list_type_attributes: bool | None = None) -> tuple[str, str, str | None] | None:
    """None when the expression compiles in the API server of `kubernetes_version` (default: gpudra's default
    release) with its default feature gates, or the two given; else (severity, message, caret report).

    Cached: manifests repeat the same few selectors many times.
    """
    compile_selector, compile_error = compiler()
    defaults = selector_gates(kubernetes_version)
    gates = {"DRAConsumableCapacity": defaults[0] if consumable_capacity is None else consumable_capacity,
             "DRAListTypeAttributes": defaults[1] if list_type_attributes is None else list_type_attributes}
    try:
        compile_selector(expression, version=kubernetes_version, consumable_capacity=gates["DRAConsumableCapacity"],
                         list_type_attributes=gates["DRAListTypeAttributes"])
    except compile_error as exc:
        message = getattr(exc, "message", None) or str(exc)
        message += _gate_hint(expression, kubernetes_version, gates) + _overload_hint(message)
        column = getattr(exc, "column", None)
        where = f" at column {column}" if isinstance(column, int) and column > 0 else ""
        caret = None
        if isinstance(column, int) and column > 0 and "\n" not in expression:  # as `where` says
            caret = f"{expression}\n{' ' * (column - 1)}^"
        return "error", f"CEL compile error{where}: {message} (expression: {expression})", caret
    except Exception as exc:  # noqa: BLE001 - a bug in the CEL adapter must not crash validation
        return "warning", f"could not check the CEL expression: {type(exc).__name__}: {exc}", None
    return None


_QUANTITY_OVERLOAD = re.compile(r"found no matching overload for '_(?:[<>]=?|==|!=)_' applied to "
                                r"'\((?:kubernetes\.Quantity, (?:int|uint|double|string)|(?:int|uint|double|string), "
                                r"kubernetes\.Quantity)\)'")


def _overload_hint(message: str) -> str:
    """What to write instead of comparing a quantity (a capacity, `quantity(…)`) with a number or string: CEL has
    no such operator, Kubernetes' quantity library has methods (k8s.io/apiserver pkg/cel/library/quantity.go)."""
    if not _QUANTITY_OVERLOAD.search(message):
        return ""
    return (" (a capacity is a quantity, which compares with another quantity through its methods: e.g. "
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('16Gi')) >= 0, or "
            ".isGreaterThan(quantity('16Gi')))")


def _gate_hint(expression: str, kubernetes_version: str | None, gates: dict[str, bool]) -> str:
    """Why a release's API server refuses what a gate or the next release would accept (gpudra.cel.release).
    `gates`: the two that change the CEL environment, as the refusing compile had them."""
    compile_selector, compile_error = compiler()
    for gate, option in (("DRAListTypeAttributes", "list_type_attributes"), ("DRAConsumableCapacity", "consumable_capacity")):
        chosen = {"consumable_capacity": gates["DRAConsumableCapacity"],
                  "list_type_attributes": gates["DRAListTypeAttributes"], option: True}
        try:
            compile_selector(expression, version=kubernetes_version, **chosen)
        except (compile_error, ValueError):
            continue
        return f" (accepted with the {gate} feature gate on)"
    try:
        compile_selector(expression, version=kubernetes_version, stored=True)
    except (compile_error, ValueError):
        return ""
    return (" (this release's kube-scheduler reads it, but its API server accepts in new selectors only what the "
            "previous release can read)")


_USED_AS_MAP = re.compile(r"^\s*[.\[]")


def classify_lookup(table: str, lookup_key: str, rest: str) -> str | None:
    """Why `device.<table>["<lookup_key>"]` (followed by `rest`) cannot be what the author meant, or None.

    "qualified": the key is a full attribute name ("domain/name"), but the outer map is keyed by domain;
    "amount": an amount (memory, …) used as a value, which is a capacity of the driver's domain;
    "name": a key that cannot be a domain (camelCase, underscores) used as a value, i.e. an attribute name.
    """
    if not lookup_key:
        return None
    if "/" in lookup_key:
        return "qualified"
    quantity_use = bool(_QUANTITY_USE.match(rest))
    if _USED_AS_MAP.match(rest) and not quantity_use:
        return None  # indexed further: the key is used as a domain, as it should be
    if lookup_key.lower() in _AMOUNT_NAMES or quantity_use:
        return "amount" if not names.c_identifier(lookup_key) else None
    if names.dns_subdomain(lookup_key, 63) and not names.c_identifier(lookup_key):
        return "name"
    return None


def driver_attribute_name(domain: str, attribute: str) -> str:
    """The name to suggest for `attribute` of `domain`: for gpudra's driver domain the name the driver publishes
    (one vocabulary: `nvlink-mesh-id` is `nvlinkDomain`), otherwise the attribute as a C identifier."""
    from gpudra.vocabulary import published_name

    identifier = attribute if not names.c_identifier(attribute) else names.camel_identifier(attribute)
    if domain == DEFAULT_DOMAIN:
        return published_name(attribute) or identifier
    return identifier


def rewrite_lookup(expression: str, domain: str = DEFAULT_DOMAIN) -> tuple[str, list[str]]:
    """Rewrite mechanical lookup mistakes; returns (new expression, what was changed)."""
    changes: list[str] = []

    def replace(match: re.Match[str]) -> str:
        table, lookup_key = match.group(1), match.group(3)
        reason = classify_lookup(table, lookup_key, expression[match.end():])
        if reason == "qualified":
            lookup_domain, _, attribute = lookup_key.partition("/")
            identifier = driver_attribute_name(lookup_domain, attribute)
            if not identifier or names.c_identifier(identifier) or not lookup_domain:
                return match.group(0)
            new = f'device.{table}["{lookup_domain}"].{identifier}'
        elif reason == "amount":
            new = f'device.capacity["{domain}"].{lookup_key}'
        elif reason == "name":
            new = f'device.{table}["{domain}"].{lookup_key}'
        else:
            return match.group(0)
        changes.append(f"{match.group(0)} -> {new}")
        return new

    return _LOOKUP.sub(replace, expression), changes


def explain_lookups(expression: str, path: str, ctx: Context) -> None:
    for match in _LOOKUP.finditer(expression):
        table, lookup_key = match.group(1), match.group(3)
        reason = classify_lookup(table, lookup_key, expression[match.end():])
        if reason == "qualified":
            lookup_domain, _, attribute = lookup_key.partition("/")
            identifier = driver_attribute_name(lookup_domain, attribute)
            note = ""
            if names.c_identifier(attribute):
                published = "" if identifier == names.camel_identifier(attribute) else (
                    f"; {lookup_domain} publishes it as {identifier!r}")
                note = f" ({attribute!r} is not a valid attribute name: names are C identifiers{published})"
            ctx.error(
                path,
                f"{match.group(0)} looks up a domain named {lookup_key!r}, which cannot exist, so the map is always "
                f"empty: device.{table} is keyed by domain, then by name; write "
                f'device.{table}["{lookup_domain}"].{identifier or "<name>"}{note}',
            )
        elif reason == "amount":
            ctx.error(
                path,
                f"{match.group(0)} is the map of {table} in a domain named {lookup_key!r}, not an amount. Amounts "
                f"such as memory are capacities keyed by the driver's domain: write "
                f'device.capacity["{DEFAULT_DOMAIN}"].{lookup_key} (for the NVIDIA driver), e.g. '
                f'device.capacity["{DEFAULT_DOMAIN}"].{lookup_key}.compareTo(quantity("16Gi")) >= 0',
            )
        elif reason == "name":
            ctx.error(
                path,
                f"{match.group(0)} looks up a domain named {lookup_key!r}, which cannot be a domain; device.{table} "
                f'is keyed by domain, then by name: write device.{table}["<driver domain>"].{lookup_key} '
                f'(e.g. device.{table}["{DEFAULT_DOMAIN}"].{lookup_key})',
            )


_UNIT = re.compile(r"([+-]?[0-9.]+)([kKmMgGtTpPeE])(i?)[bB]?")


def _quantity_suggestions(text: str) -> list[str]:
    """What `text` was probably meant as: without blanks, a byte unit (GB, GiB) as Kubernetes writes it."""
    compact = re.sub(r"\s+", "", text)
    match = _UNIT.fullmatch(compact)
    if match is None:
        return [compact] if compact != text else []
    number, unit, binary = match.groups()
    unit = unit.upper() if unit.lower() != "k" or binary else "k"
    if binary or compact.lower().endswith("ib"):
        return [f"{number}{unit.upper()}i"]
    return [f"{number}{unit.upper()}i", f"{number}{unit}"]  # "16GB": 16 GiB or 16 * 10^9


def literal_problem(function: str, text: str) -> str | None:
    """Why `function("text")` fails every evaluation (the runtime error Kubernetes' library gives), with what was
    probably meant; None when the literal is valid."""
    from gpudra.cel.library_k8s import _quantity, _semver

    parse = _quantity if function == "quantity" else _semver
    try:
        parse(text)
        return None
    except ValueError as exc:
        error = str(exc)
    candidates = _quantity_suggestions(text) if function == "quantity" else [
        ".".join((text.split(".") + ["0", "0"])[:3])]
    valid = []
    for candidate in candidates:
        try:
            parse(candidate)
            valid.append(f'{function}("{candidate}")')
        except ValueError:
            continue
    hint = f"; did you mean {' or '.join(valid)}?" if valid else ""
    if function == "quantity" and len(valid) == 2:
        hint = f"; did you mean {valid[0]} (binary: 2^30 per G) or {valid[1]} (decimal: 10^9)?"
    return (f'{function}("{text}") is not a valid {function} ({error}): the API server accepts the expression, '
            f"but each evaluation fails with this error, and kube-scheduler allocates nothing for the claim{hint}")


@functools.lru_cache(maxsize=4096)
def literal_problems(expression: str, kubernetes_version: str | None, consumable_capacity: bool,
                     list_type_attributes: bool) -> tuple[tuple[str, str | None], ...]:
    """(message, caret report) of each `quantity("…")`/`semver("…")` literal that fails every evaluation."""
    compile_selector, compile_error = compiler()
    try:
        selector = compile_selector(expression, version=kubernetes_version, consumable_capacity=consumable_capacity,
                                    list_type_attributes=list_type_attributes)
    except Exception:  # noqa: BLE001 - compile_outcome reports it
        return ()
    found = []
    for function, text, offset in selector.literal_calls:
        message = literal_problem(function, text)
        if message is not None:
            caret = f"{expression}\n{' ' * offset}^" if "\n" not in expression else None
            found.append((message, caret))
    return tuple(found)
