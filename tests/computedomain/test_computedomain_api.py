"""The ComputeDomain API (gpudra.api.schema.computedomain) checked against NVIDIA's CRD itself.

gpudra/computedomain/computedomains.crd.yaml is the driver's CRD (its openAPIV3Schema, descriptions left out).
The oracle here reads it with the `jsonschema` library, as the API server reads a structural schema: its defaults
applied where the enclosing object is present, then the schema checked with unknown fields refused (kubectl's
strict field validation, gpudra's rule for every kind) and `x-kubernetes-list-type: map` keys unique. gpudra's
schema was written from the same facts by hand; hypothesis makes objects and both must agree on every one, and on
the defaulted form.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpudra.api.defaults import apply_defaults
from gpudra.api.load import Document, load_text
from gpudra.api.schema import computedomain
from gpudra.api.validate import validate_documents

CRD_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), os.pardir, "gpudra", "computedomain", "computedomains.crd.yaml")


def _crd_schema() -> dict[str, Any]:
    with open(CRD_PATH, encoding="utf-8") as fh:
        crd = yaml.safe_load(fh)
    (version,) = crd["spec"]["versions"]
    assert (crd["spec"]["group"], version["name"], crd["spec"]["names"]["kind"]) == (
        computedomain.GROUP, computedomain.VERSION, computedomain.KIND)
    return version["schema"]["openAPIV3Schema"]


SCHEMA = _crd_schema()


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Unknown fields refused wherever the schema lists properties (metadata is ObjectMeta's, not the CRD's)."""
    out = copy.deepcopy(schema)

    def walk(node: dict[str, Any]) -> None:
        if "properties" in node:
            node["additionalProperties"] = False
            for name, sub in node["properties"].items():
                if name != "metadata":
                    walk(sub)
        if "items" in node:
            walk(node["items"])

    walk(out)
    return out


STRICT = jsonschema.Draft7Validator(_strict(SCHEMA))


def crd_default(value: Any, schema: dict[str, Any]) -> Any:
    """Structural-schema defaulting: a property's `default` where the object holding it is present; nulls of
    non-nullable fields pruned first."""
    if isinstance(value, dict) and "properties" in schema:
        out = {k: v for k, v in value.items() if v is not None}
        for name, sub in schema["properties"].items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out:
                out[name] = crd_default(out[name], sub)
        return out
    if isinstance(value, list) and "items" in schema:
        return [crd_default(item, schema["items"]) for item in value]
    return value


def crd_accepts(obj: dict[str, Any]) -> bool:
    defaulted = crd_default(obj, SCHEMA)
    if not STRICT.is_valid(defaulted):
        return False
    nodes = (defaulted.get("status") or {}).get("nodes") or []
    keys = [n.get("name") for n in nodes if isinstance(n, dict)]
    return len(keys) == len(set(keys))  # x-kubernetes-list-map-keys: [name]


def gpudra_errors(obj: dict[str, Any]) -> list[str]:
    problems = validate_documents([Document(obj, "t.yaml", 1)])
    return [f"{p.path}: {p.message}" for p in problems if p.severity == "error"]


# ----- objects ------------------------------------------------------------------------------------------------
_strings = st.sampled_from(["", "a", "imex-channel-0", "Bad_Name", "x" * 300, "10.0.0.1"])
_ints = st.sampled_from([0, 1, -1, 18]) | st.integers(min_value=-(2**40), max_value=2**40)
_scalars = _strings | _ints | st.booleans() | st.none()


@st.composite
def _maybe(draw: st.DrawFn, strategy: st.SearchStrategy) -> Any:
    """A field's value: mostly a well-typed one (so that whole objects are often valid and each rule decides),
    sometimes absent (the marker) or anything."""
    roll = draw(st.integers(0, 9))
    return ... if roll == 0 else draw(_scalars) if roll == 1 else draw(strategy)


def _obj(fields: dict[str, st.SearchStrategy], extra: bool = True) -> st.SearchStrategy:
    keys = list(fields)

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        out = {}
        for key in keys:
            value = draw(_maybe(fields[key]))
            if value is not ...:
                out[key] = value
        if extra and draw(st.integers(0, 19)) == 0:
            out[draw(st.sampled_from(["numnodes", "chanel", "foo"]))] = 1
        return out

    return build()


_node = _obj({"name": st.sampled_from(["tray-0", "tray-1"]), "ipAddress": _strings, "cliqueID": _strings,
              "index": _ints, "status": st.sampled_from(["Ready", "NotReady"]) | st.sampled_from(["ready", ""])})
_spec = _obj({
    "numNodes": _ints,
    "channel": _obj({"resourceClaimTemplate": _obj({"name": _strings}),
                     "allocationMode": st.sampled_from(["Single", "All", "single", ""])}),
})
_status = _obj({"status": st.sampled_from(["Ready", "NotReady"]) | st.just("Unknown"),
                "nodes": st.lists(_node, max_size=3)})


@st.composite
def compute_domains(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": computedomain.API_VERSION, "kind": "ComputeDomain",
                           "metadata": {"name": "cd", "namespace": "default"}}
    for field, strategy in (("spec", _spec), ("status", _status)):
        value = draw(_maybe(strategy))
        if value is not ...:
            obj[field] = value
    return obj


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(compute_domains())
@example({"apiVersion": computedomain.API_VERSION, "kind": "ComputeDomain", "metadata": {"name": "cd"},
          "status": {"nodes": [{"name": "tray-0", "ipAddress": "10.0.0.1", "cliqueID": "c.1"}] * 2}})
def test_gpudra_accepts_exactly_what_the_crd_accepts(obj: dict[str, Any]) -> None:
    errors = gpudra_errors(obj)
    assert crd_accepts(obj) == (not errors), errors


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(compute_domains())
def test_defaults_are_the_crds(obj: dict[str, Any]) -> None:
    if not crd_accepts(obj):
        return  # the API server stores no invalid object; defaults of one mean nothing
    assert apply_defaults(obj) == crd_default(obj, SCHEMA)


# ----- the examples users write ---------------------------------------------------------------------------------
UPSTREAM_DEMO = """\
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: nvbandwidth-test-compute-domain-1
spec:
  numNodes: 2
  channel:
    resourceClaimTemplate:
      name: nvbandwidth-test-compute-domain-1-channel
"""


def test_the_drivers_demo_domain_is_valid_and_defaulted() -> None:
    """demo/specs/imex/nvbandwidth-test-job-1.yaml's ComputeDomain (upstream)."""
    (doc,) = load_text(UPSTREAM_DEMO, "demo.yaml")
    assert gpudra_errors(doc.obj) == []
    assert apply_defaults(doc.obj)["spec"]["channel"]["allocationMode"] == "Single"


def test_errors_name_the_field_in_the_cli_style(tmp_path) -> None:
    from click.testing import CliRunner

    from gpudra.cli import cli

    path = tmp_path / "cd.yaml"
    path.write_text(UPSTREAM_DEMO.replace("numNodes: 2", "numNodes: -1\n  chanel: {}"))
    result = CliRunner().invoke(cli, ["validate", "-f", str(path)])
    assert result.exit_code == 1, result.output
    assert f"error: {path}:doc 1 (ComputeDomain/nvbandwidth-test-compute-domain-1): spec.numNodes: " in result.output
    assert "spec.chanel: unknown field in ComputeDomainSpec; did you mean 'channel'?" in result.output


def test_wrong_version_is_named() -> None:
    (doc,) = load_text(UPSTREAM_DEMO.replace("v1beta1", "v1"), "demo.yaml")
    assert gpudra_errors(doc.obj) == [
        "apiVersion: ComputeDomain is served as apiVersion resource.nvidia.com/v1beta1, not resource.nvidia.com/v1"]


@pytest.mark.parametrize("change, warned", [
    (lambda o: o.pop("spec"), "spec"),
    (lambda o: o["spec"]["channel"]["resourceClaimTemplate"].update(name="Not_A_Name"),
     "spec.channel.resourceClaimTemplate.name"),
])
def test_what_the_crd_accepts_but_the_controller_cannot_use_is_a_warning(change, warned) -> None:
    (doc,) = load_text(UPSTREAM_DEMO, "demo.yaml")
    obj = copy.deepcopy(doc.obj)
    change(obj)
    assert crd_accepts(obj)
    problems = validate_documents([Document(obj, "t.yaml", 1)])
    assert [(p.severity, p.path) for p in problems] == [("warning", warned)]


def test_spec_is_immutable_after_defaulting() -> None:
    (doc,) = load_text(UPSTREAM_DEMO, "demo.yaml")
    old = doc.obj
    same = copy.deepcopy(old)
    same["spec"]["channel"]["allocationMode"] = "Single"  # the default written out: no change
    assert computedomain.spec_update_problem(old, same) is None
    changed = copy.deepcopy(old)
    changed["spec"]["numNodes"] = 3
    assert computedomain.IMMUTABLE_SPEC_MESSAGE in (computedomain.spec_update_problem(old, changed) or "")
