"""YAML that is not a list of manifests: a mig-parted config, a node profile, a CDI spec, a claim store, the local
cluster's config. Read as manifests are (api/load.py: size, nesting and alias-expansion limits, duplicate keys
refused, timestamps kept as strings), so that no file gpudra reads, node side included, escapes those limits:
this is the one way product code reads YAML (tests/api/test_yaml_readers.py fails on a yaml.load elsewhere)."""

from __future__ import annotations

from typing import Any

from gpudra.api.limits import LoadError as LoadError  # re-exported: the error of these readers
from gpudra.api.load import read_text, yaml_values


def load_yaml_documents(text: str, source: str) -> list[Any]:
    """The value of every document of `text` that is not empty or null; LoadError names `source` and the line."""
    return [value for _, _, value in yaml_values(text, source)]


def load_yaml(text: str, source: str) -> Any:
    """The value of a text of one YAML document (None when it is empty); a second document is an error, as
    yaml.safe_load has it."""
    values = yaml_values(text, source)
    if len(values) > 1:
        position, line, _ = values[1]
        raise LoadError(source, f"holds more than one YAML document (document {position}); expected one", line)
    return values[0][2] if values else None


def read_yaml(path: str) -> Any:
    """One file's (or stdin's, for '-') single YAML document, within the limits (LoadError)."""
    return load_yaml(read_text(path), "<stdin>" if path == "-" else path)
