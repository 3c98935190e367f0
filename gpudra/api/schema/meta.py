"""Pieces shared by every kind: ObjectMeta, node selectors, conditions."""

from __future__ import annotations

from typing import Any, Callable

from gpudra.api import goint  # (a module: goint imports schema.names, whose package imports this)
from gpudra.api.schema import names
from gpudra.api.schema.types import (
    as_list,
    AnyValue, Bool, Check, Context, F, Int, ListOf, MapOf, Str, Struct, child, index,
)


def _labels_check(value: Any, path: str, ctx: Context) -> None:
    return None


OWNER_REFERENCE = Struct(
    "OwnerReference",
    {
        "apiVersion": F(Str(), required=True),
        "kind": F(Str(), required=True),
        "name": F(Str(), required=True),
        "uid": F(Str(), required=True),
        "controller": F(Bool()),
        "blockOwnerDeletion": F(Bool()),
    },
)

LABELS = MapOf(Str(validators=(names.label_value,)), key_check=names.qualified_name)
ANNOTATIONS = MapOf(Str(), key_check=names.qualified_name)


def _annotations_size_check(value: dict[str, Any], path: str, ctx: Context) -> None:
    annotations = value.get("annotations")
    if isinstance(annotations, dict):
        size = names.annotations_size(annotations)
        if size > names.TOTAL_ANNOTATION_SIZE_LIMIT_B:
            ctx.error(child(path, "annotations"), f"Too long: must have at most {names.TOTAL_ANNOTATION_SIZE_LIMIT_B} "
                      f"bytes (has {size}; the API server's limit on all annotations together)")


def object_meta(name_check: Callable[[str], list[str]] = names.dns_subdomain, name_required: bool = True) -> Struct:
    """ObjectMeta as apimachinery's ValidateObjectMeta checks it (objectmeta.go): `name_check` is the kind's name
    rule, also applied to generateName as a prefix (a trailing '-' allowed), namespace a DNS label, labels and
    annotations by key and value syntax, annotations 256 KiB in all."""
    def require_name(value: dict[str, Any], path: str, ctx: Context) -> None:
        if name_required and not value.get("name") and not value.get("generateName"):
            ctx.error(child(path, "name"), "required field is missing (set name or generateName)")

    def generate_name_check(value: str) -> list[str]:
        # objectmeta.go: nameFn(generateName, prefix=true), which masks one trailing '-' as a letter
        masked = value[:-1] + "a" if value.endswith("-") else value
        return name_check(masked)

    return Struct(
        "ObjectMeta",
        {
            "name": F(Str(validators=(name_check,))),
            "generateName": F(Str(validators=(generate_name_check,))),
            "namespace": F(Str(validators=(names.dns_label,))),
            "labels": F(LABELS),
            "annotations": F(ANNOTATIONS),
            "uid": F(Str()),
            "resourceVersion": F(Str()),
            "generation": F(Int()),
            "creationTimestamp": F(Str()),
            "deletionTimestamp": F(Str()),
            "deletionGracePeriodSeconds": F(Int()),
            "ownerReferences": F(ListOf(OWNER_REFERENCE)),
            "finalizers": F(ListOf(Str(validators=(names.qualified_name,)))),
            "managedFields": F(ListOf(AnyValue())),
            "selfLink": F(Str()),
        },
        checks=(require_name, _annotations_size_check),
    )


def metadata_only(kind_name: str, name_check: Callable[[str], list[str]] = names.dns_subdomain) -> Struct:
    """A kind whose content gpudra does not model: its metadata checked as every object's is, the rest open."""
    return Struct(kind_name, {"apiVersion": F(Str(), required=True), "kind": F(Str(), required=True),
                              "metadata": F(object_meta(name_check), required=True)}, open=True)


TEMPLATE_META = Struct(
    "ObjectMeta",
    {
        "labels": F(LABELS),
        "annotations": F(ANNOTATIONS),
        # The API accepts the other ObjectMeta fields in a template but ignores them; see the check below.
        "name": F(Str()),
        "generateName": F(Str()),
        "namespace": F(Str()),
        "finalizers": F(ListOf(Str())),
        "ownerReferences": F(ListOf(AnyValue())),
    },
)

_NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _requirement_check(value: Any, path: str, ctx: Context) -> None:
    operator, values = value.get("operator"), as_list(value.get("values"))
    if not isinstance(values, list):
        return
    if operator in ("In", "NotIn") and not values:
        ctx.error(child(path, "values"), f"must be specified when operator is {operator!r}")
    elif operator in ("Exists", "DoesNotExist") and values:
        ctx.error(child(path, "values"), f"may not be specified when operator is {operator!r}")
    elif operator in ("Gt", "Lt"):
        if len(values) != 1:
            ctx.error(child(path, "values"), f"must have exactly one value when operator is {operator!r}")
        elif goint.parse_requirement_int(values[0]) is None:
            ctx.error(index(child(path, "values"), 0), "must be a 64-bit decimal integer written as a string (and a "
                      "label value: no '+' or '-' sign); kube-scheduler matches no node otherwise")


NODE_SELECTOR_REQUIREMENT = Struct(
    "NodeSelectorRequirement",
    {
        "key": F(Str(validators=(names.qualified_name,)), required=True),
        "operator": F(Str(enum=_NODE_SELECTOR_OPERATORS), required=True),
        "values": F(ListOf(Str())),
    },
    checks=(_requirement_check,),
)


def _field_requirement_check(value: Any, path: str, ctx: Context) -> None:
    field_key = value.get("key")
    if isinstance(field_key, str) and field_key != "metadata.name":
        ctx.error(child(path, "key"), f"unsupported field {field_key!r}; node matchFields only support 'metadata.name'")
    if value.get("operator") not in (None, "In", "NotIn"):
        ctx.error(child(path, "operator"), "matchFields on metadata.name support only 'In' and 'NotIn'")


NODE_SELECTOR_FIELD_REQUIREMENT = Struct(
    "NodeSelectorRequirement",
    NODE_SELECTOR_REQUIREMENT.fields,
    checks=(_requirement_check, _field_requirement_check),
)

NODE_SELECTOR_TERM = Struct(
    "NodeSelectorTerm",
    {
        "matchExpressions": F(ListOf(NODE_SELECTOR_REQUIREMENT)),
        "matchFields": F(ListOf(NODE_SELECTOR_FIELD_REQUIREMENT)),
    },
)

NODE_SELECTOR = Struct(
    "NodeSelector",
    {"nodeSelectorTerms": F(ListOf(NODE_SELECTOR_TERM), required=True)},
)

CONDITION = Struct(
    "Condition",
    {
        "type": F(Str(validators=(names.qualified_name,)), required=True),
        "status": F(Str(enum=("True", "False", "Unknown")), required=True),
        "observedGeneration": F(Int(minimum=0)),
        "lastTransitionTime": F(Str()),
        "reason": F(Str(max_len=1024)),
        "message": F(Str(max_len=32768)),
    },
)


def top_level(kind_name: str, meta: Struct, spec: Struct | None, status: Struct | None,
              spec_required: bool = True, extra: dict[str, F] | None = None, checks: tuple[Check, ...] = ()) -> Struct:
    fields = {
        "apiVersion": F(Str(), required=True),
        "kind": F(Str(), required=True),
        "metadata": F(meta, required=True),
    }
    if spec is not None:
        fields["spec"] = F(spec, required=spec_required)
    if status is not None:
        fields["status"] = F(status)
    fields.update(extra or {})
    return Struct(kind_name, fields, checks=tuple(checks))


def toleration_check(value: dict[str, Any], path: str, ctx: Context) -> None:
    """The rules pod tolerations and device tolerations share."""
    operator = value.get("operator") or "Equal"
    if operator == "Exists" and value.get("value"):
        ctx.error(child(path, "value"), "must be empty when operator is 'Exists'")
    if not value.get("key") and operator != "Exists":
        ctx.error(child(path, "operator"), "must be 'Exists' when key is empty")
    if value.get("tolerationSeconds") is not None and value.get("effect") != "NoExecute":
        ctx.error(child(path, "effect"), "must be 'NoExecute' when tolerationSeconds is set")
