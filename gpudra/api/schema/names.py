"""Name syntaxes of the Kubernetes API (apimachinery validation), each returning a list of messages."""

from __future__ import annotations

from typing import Any, Callable

import re

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# What the API server assigns as metadata.uid (a UUID in its canonical text form): clients cannot
# choose it, so anything else did not come from a real object.
_UID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

# Longer values are reported by length alone: an error message must not echo a megabyte back.
ECHO_LIMIT = 256
# apimachinery ValidateAnnotations: TotalAnnotationSizeLimitB, the sum of every key's and value's length.
TOTAL_ANNOTATION_SIZE_LIMIT_B = 256 * (1 << 10)

DRA_C_IDENTIFIER_MAX = 32  # resource.DeviceMaxIDLength
DRA_DOMAIN_MAX = 63  # resource.DeviceMaxDomainLength


def dns_label(value: str) -> list[str]:
    problems = []
    if len(value) > 63:
        problems.append(f"must be no more than 63 characters (has {len(value)})")
    if not _DNS_LABEL.fullmatch(value):
        problems.append(
            f"{value!r} is not a DNS label: lower-case letters, digits and '-', starting and ending with a letter "
            "or digit" + _dns_hint(value, label=True)
        )
    return problems


def path_segment_name(value: str) -> list[str]:
    """apimachinery ValidatePathSegmentName: the loosest object name the API server takes (kinds without a stricter
    rule, such as RBAC roles named `system:…`): not `.` or `..`, no `/` or `%`."""
    if value in (".", ".."):
        return [f"may not be {value!r}"]
    return [f"may not contain {bad!r}" for bad in ("/", "%") if bad in value]


def field_problems(field: str, value: object, rule: Callable[[str], list[str]], max_length: int) -> list[str]:
    """`field: message` for each way `value` breaks `rule` (one of the syntaxes here), checked as a string first;
    a value longer than ECHO_LIMIT is reported by its length alone, never echoed."""
    if not isinstance(value, str):
        return [f"{field}: must be a string"]
    if not value:
        return [f"{field}: must not be empty"]
    if len(value) > max(max_length, ECHO_LIMIT):
        return [f"{field}: must be no more than {max_length} characters (has {len(value)})"]
    return [f"{field}: {message}" for message in rule(value)]


def annotations_size(annotations: dict[str, Any]) -> int:
    """What the API server counts against TOTAL_ANNOTATION_SIZE_LIMIT_B: Go len() (UTF-8 bytes) of keys and values."""
    return sum(len(str(k).encode()) + len(v.encode() if isinstance(v, str) else b"") for k, v in annotations.items())


def kubernetes_uid(value: str) -> list[str]:
    """An object's metadata.uid as the API server generates it (k8s.io/apiserver FillObjectMetaSystemFields:
    uuid.NewUUID())."""
    if _UID.fullmatch(value):
        return []
    shown = value if len(value) <= 64 else value[:64] + "…"
    return [f"{shown!r} is not a Kubernetes UID: a UUID such as '1c3b9a3e-1b9f-4d6e-9a57-4c1d0e2f3a4b'"]


def dns_subdomain(value: str, max_length: int = 253) -> list[str]:
    problems = []
    if len(value) > max_length:
        problems.append(f"must be no more than {max_length} characters (has {len(value)})")
    if not _DNS_SUBDOMAIN.fullmatch(value):
        problems.append(
            f"{value!r} is not a DNS subdomain: lower-case letters, digits, '-' and '.', each part starting and "
            "ending with a letter or digit" + _dns_hint(value, label=False)
        )
    return problems


def dns_subdomain_63(value: str) -> list[str]:
    return dns_subdomain(value, 63)


def _dns_hint(value: str, label: bool) -> str:
    candidate = suggest_dns_name(value)
    if label:
        candidate = candidate.replace(".", "-")
    if candidate and candidate != value:
        return f"; for example {candidate!r}"
    return ""


def suggest_dns_name(value: str) -> str:
    """A valid DNS subdomain close to `value`: `nvidia.com/gpu` -> `gpu.nvidia.com`, `My_GPU` -> `my-gpu`."""
    text = value.strip()
    if text.count("/") == 1:
        domain, name = text.split("/")
        text = f"{name}.{domain}" if name and domain else (name or domain)
    text = re.sub(r"[^a-z0-9.-]+", "-", text.lower())
    text = re.sub(r"-*\.-*", ".", text)
    text = re.sub(r"\.+", ".", text).strip(".-")
    return text[:253]


def c_identifier(value: str, max_length: int = DRA_C_IDENTIFIER_MAX) -> list[str]:
    problems = []
    if len(value) > max_length:
        problems.append(f"must be no more than {max_length} characters (has {len(value)})")
    if not _C_IDENTIFIER.fullmatch(value):
        camel = _camel(value)
        hint = f"; for example {camel!r}" if camel and _C_IDENTIFIER.fullmatch(camel) else ""
        problems.append(
            f"{value!r} is not a C identifier: letters, digits and '_', not starting with a digit{hint}"
        )
    return problems


def _camel(value: str) -> str:
    parts = [p for p in re.split(r"[^A-Za-z0-9_]+", value) if p]
    if not parts:
        return ""
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def camel_identifier(value: str) -> str:
    return _camel(value)


def dra_qualified_name(value: str) -> list[str]:
    """An attribute or capacity name: `<C identifier>` or `<DNS subdomain ≤ 63>/<C identifier>`."""
    if not value:
        return ["must not be empty"]
    if "/" in value:
        domain, _, name = value.partition("/")
        problems = []
        if not domain:
            problems.append("the domain before '/' must not be empty")
        else:
            problems += [f"domain: {m}" for m in dns_subdomain(domain, DRA_DOMAIN_MAX)]
        if not name:
            problems.append("the name after '/' must not be empty")
        else:
            problems += c_identifier(name)
        return problems
    return c_identifier(value)


def dra_fully_qualified_name(value: str) -> list[str]:
    """`<domain>/<C identifier>`: the form constraints use."""
    if "/" not in value:
        return [
            f"{value!r} must be fully qualified as <domain>/<name>, for example 'gpu.nvidia.com/{value}' "
            "(constraints have no driver whose domain could be implied)"
        ]
    return dra_qualified_name(value)


def qualified_name(value: str) -> list[str]:
    """apimachinery `IsQualifiedName`: label keys, taint keys, condition types."""
    if not value:
        return ["must not be empty"]
    prefix, slash, name = value.rpartition("/")
    problems = []
    if slash:
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            problems += [f"prefix part {m}" for m in dns_subdomain(prefix)]
    if len(name) > 63:
        problems.append(f"name part must be no more than 63 characters (has {len(name)})")
    if not _QUALIFIED_NAME_PART.fullmatch(name or "-"):
        problems.append(
            f"name part {name!r} must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character"
        )
    if value.count("/") > 1:
        problems.append("must contain at most one '/'")
    return problems


def label_value(value: str) -> list[str]:
    problems = []
    if len(value) > 63:
        problems.append(f"must be no more than 63 characters (has {len(value)})")
    if not _LABEL_VALUE.fullmatch(value):
        problems.append(
            f"{value!r} must be empty or consist of alphanumeric characters, '-', '_' or '.', starting and ending "
            "with an alphanumeric character"
        )
    return problems


def pool_name(value: str) -> list[str]:
    """DNS subdomains separated by '/', at most 253 characters in total."""
    if not value:
        return ["must not be empty"]
    problems = []
    if len(value) > 253:
        problems.append(f"must be no more than 253 characters (has {len(value)})")
    for part in value.split("/"):
        if not part:
            problems.append("must not contain empty parts between '/'")
            break
        if not _DNS_SUBDOMAIN.fullmatch(part):
            problems.append(f"part {part!r} is not a DNS subdomain")
    return problems


def extended_resource_name(value: str) -> list[str]:
    if "/" not in value or "kubernetes.io/" in value:
        return [
            f"{value!r} is not an extended resource name: it needs a domain outside kubernetes.io, "
            "for example 'example.com/gpu'"
        ]
    if value.startswith("requests."):
        return [f"{value!r} must not start with 'requests.'"]
    return qualified_name(value)


def device_class_name(value: str) -> list[str]:
    """A DeviceClass name is a DNS subdomain; `vendor.com/gpu` is the classic extended-resource mistake."""
    if "/" in value:
        return [
            f"{value!r} is not a valid DeviceClass name: class names are DNS subdomains (no '/'); {value!r} looks "
            f"like an extended resource name (what the device plugin advertises). Use {suggest_dns_name(value)!r} "
            f"(the NVIDIA driver's class is 'gpu.nvidia.com'); a DeviceClass can keep pods' {value} limits working "
            f"with spec.extendedResourceName: {value}"
        ]
    return dns_subdomain(value)
