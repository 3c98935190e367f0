"""Kubernetes `format` CEL library (apiserver/pkg/cel/library/format.go) in Python.

    format.dns1123Label().validate("my-name")   ->  optional.none()          (valid)
    format.dns1123Label().validate("My_Name")   ->  optional.of(["a lowercase RFC 1123 label must …"])
    format.named("uuid")                        ->  optional.of(<format>)

cel-expr-python cannot return optional values from Python, so the two optional-returning calls are
rewritten in the source (source.rewrite_format_calls) to functions that return a map with zero or one
entry, followed by an optional index: `X.validate(s)` -> `X.__gpudra_format_errors(s)[?"errors"]`.
"""

from __future__ import annotations

import base64
import datetime
import re
from typing import Any

from cel_expr_python import cel

from gpudra.cel import binding
from gpudra.cel import values as V

T = cel.Type
FORMAT = T(V.FORMAT_TYPE)

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)


def _max_length(value: str, limit: int) -> list[str]:
    return [f"must be no more than {limit} characters"] if len(value) > limit else []


def dns1123_label(value: str) -> list[str]:
    errors = _max_length(value, 63)
    if not _DNS1123_LABEL.fullmatch(value):
        errors.append(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
            "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
            "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        )
    return errors


def dns1123_subdomain(value: str) -> list[str]:
    errors = _max_length(value, 253)
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errors.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
            "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
    return errors


def dns1035_label(value: str) -> list[str]:
    errors = _max_length(value, 63)
    if not _DNS1035_LABEL.fullmatch(value):
        errors.append(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
            "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
            "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        )
    return errors


def _prefix(validator: Any) -> Any:
    # the *Prefix formats validate a name prefix: a trailing '-' is allowed (it gets a suffix appended)
    return lambda value: validator(value[:-1] + "a" if value.endswith("-") else value)


def qualified_name(value: str) -> list[str]:
    errors: list[str] = []
    prefix, slash, name = value.rpartition("/")
    if slash and not prefix:
        errors.append("prefix part must be non-empty")
    elif slash:
        errors.extend("prefix part " + message for message in dns1123_subdomain(prefix))
    if not slash:
        name = value
    if not name:
        errors.append("name part must be non-empty")
    else:
        if len(name) > 63:
            errors.append("name part must be no more than 63 characters")
        if not _QUALIFIED_NAME_PART.fullmatch(name):
            errors.append(
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            )
    if value.count("/") > 1:
        errors = [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix "
            "and '/' (e.g. 'example.com/MyName')"
        ]
    return errors


def label_value(value: str) -> list[str]:
    errors = _max_length(value, 63)
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
            "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )
    return errors


def uri(value: str) -> list[str]:
    from gpudra.cel.library_net import _split_url

    try:
        _split_url(value)
    except ValueError as error:
        return [str(error).replace("URL parse error during conversion from string: ", "")]
    return []


def uuid(value: str) -> list[str]:
    return [] if _UUID.fullmatch(value) else ["does not match the UUID format"]


def byte(value: str) -> list[str]:
    try:
        base64.b64decode(value, validate=True)
    except ValueError:
        return ["invalid base64"]
    return []


def date(value: str) -> list[str]:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        return ["invalid date"]
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return ["invalid date"]
    return []


def datetime_(value: str) -> list[str]:
    pattern = r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
    if not re.fullmatch(pattern, value):
        return ["invalid datetime"]
    try:
        datetime.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return ["invalid datetime"]
    return []


VALIDATORS = {
    "dns1123Label": dns1123_label,
    "dns1123Subdomain": dns1123_subdomain,
    "dns1035Label": dns1035_label,
    "qualifiedName": qualified_name,
    "dns1123LabelPrefix": _prefix(dns1123_label),
    "dns1123SubdomainPrefix": _prefix(dns1123_subdomain),
    "dns1035LabelPrefix": _prefix(dns1035_label),
    "labelValue": label_value,
    "uri": uri,
    "uuid": uuid,
    "byte": byte,
    "date": date,
    "datetime": datetime_,
}


def _format_errors(message: Any, value: str) -> dict[str, list[str]]:
    errors = VALIDATORS[message.s](value)
    return {"errors": errors} if errors else {}


def _named(name: str) -> Any:
    return {"format": V.FormatMessage(s=name)} if name in VALIDATORS else {}


def declarations() -> list[cel.FunctionDecl]:
    declared = [
        cel.FunctionDecl(
            f"format.{name}",
            [binding.overload(f"format_{name}", FORMAT, [], lambda name=name: V.FormatMessage(s=name), member=False)],
        )
        for name in VALIDATORS
    ]
    declared.append(
        cel.FunctionDecl(
            "__gpudra_format_errors",
            [binding.overload("gpudra_format_errors", T.Map(T.STRING, T.List(T.STRING)), [FORMAT, T.STRING],
                              _format_errors)],
        )
    )
    declared.append(
        cel.FunctionDecl(
            "__gpudra_format_named",
            [binding.overload("gpudra_format_named", T.Map(T.STRING, FORMAT), [T.STRING], _named, member=False)],
        )
    )
    return declared
