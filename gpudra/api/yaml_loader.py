"""PyYAML's safe loader as manifests need it: no YAML 1.1 timestamps (the API keeps RFC 3339 strings), duplicate
keys refused (kubectl's strict decoding), integers too long for int() kept as OversizedInt stand-ins. Both the
manifest loader (load.py) and the yaml-rs fast path (fast_yaml.py, to prove it reads what this loader reads)
use it."""

from __future__ import annotations

from typing import Any

import yaml

from gpudra.api.limits import MAX_INT_DIGITS, OversizedInt

# the C loader where PyYAML was built with libyaml (same answers, several times faster)
_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# _BaseLoader is chosen at import, so mypy sees a variable of Any type as the base
class ManifestLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """Safe loader without the YAML 1.1 timestamp type and with duplicate-key detection."""


ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a scalar", key_node.start_mark
            ) from None
        if key in result:
            # apiVersion/kind again at the top level: the next object of a copied article, its `---` left out
            pasted = key in ("apiVersion", "kind") and key_node.start_mark.column == 0
            hint = " (a second object? put a `---` line between objects)" if pasted else ""
            raise yaml.constructor.ConstructorError(
                None, None, f"mapping key {key!r} already defined{hint}", key_node.start_mark
            )
        result[key] = loader.construct_object(value_node, deep=True)
    return result


ManifestLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | str:
    text: str = node.value  # a scalar node's value is its text
    if len(text) > MAX_INT_DIGITS:
        return OversizedInt(text)
    try:
        value: int = loader.construct_yaml_int(node)
    except ValueError:  # `0x_`, `0b_`: PyYAML's int pattern matches, no digit follows; a string to Go's YAML too
        return text
    return value


ManifestLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
