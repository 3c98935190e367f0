"""Round trips (load -> dump -> load), conversion from older versions, and defaulting."""

import copy
import json
import os

from hypothesis import given, settings, strategies as st

from gpudra.api.convert import to_v1
from gpudra.api.defaults import apply_defaults
from gpudra.api.dump import dump_json, dump_yaml
from gpudra.api.load import load_paths, load_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "api")
ALL = [os.path.join(ROOT, "examples", d) for d in ("cluster", "workloads", "article", "article-fixed")] + [DATA]


def test_examples_round_trip_through_yaml_and_json():
    objs = [d.obj for d in load_paths(ALL)]
    text = dump_yaml(objs)
    again = [d.obj for d in load_text(text, "dumped.yaml")]
    assert again == objs
    assert dump_yaml(again) == text  # stable, including key order
    assert [list(o) for o in again] == [list(o) for o in objs]
    assert [d.obj for d in load_text(dump_json(objs), "dumped.json")] == objs


scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                    st.text(max_size=20), st.sampled_from(["on", "no", "1.0", "0x1f", "2025-01-01", "~", "null",
                                                           "- x", "a: b", "#c", "\n", "'", '"']))
keys = st.text(min_size=1, max_size=12)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=4)), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(keys, values, min_size=1, max_size=6))
def test_arbitrary_documents_round_trip(obj):
    text = dump_yaml([obj])
    (doc,) = load_text(text, "x.yaml")
    assert doc.obj == obj
    assert dump_yaml([doc.obj]) == text


def test_v1beta1_conversion():
    claim, slice_, template = [d.obj for d in load_paths([os.path.join(DATA, "v1beta1.yaml")])]
    v1 = to_v1(claim)
    assert v1["apiVersion"] == "resource.k8s.io/v1"
    assert v1["spec"]["devices"]["requests"][0] == {
        "name": "gpu",
        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2,
                    "tolerations": [{"key": "gpu.nvidia.com/xid", "effect": "NoSchedule"}]},
    }
    device = to_v1(slice_)["spec"]["devices"][0]
    assert device == {"name": "gpu-0", "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}},
                      "capacity": {"memory": {"value": "80Gi"}}}
    assert to_v1(template)["spec"] == template["spec"]  # v1beta2 shares the v1 layout
    assert claim["apiVersion"] == "resource.k8s.io/v1beta1"  # input untouched


def test_v1alpha3_bare_capacity_is_wrapped():
    obj = {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "ResourceSlice",
           "spec": {"devices": [{"name": "d", "basic": {"capacity": {"memory": "1Gi"}}}]}}
    assert to_v1(obj)["spec"]["devices"][0] == {"name": "d", "capacity": {"memory": {"value": "1Gi"}}}


def test_defaults():
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
             "spec": {"devices": {"requests": [
                 {"name": "a", "exactly": {"deviceClassName": "x", "tolerations": [{"key": "k"}]}},
                 {"name": "b", "exactly": {"deviceClassName": "x", "allocationMode": "All"}},
                 {"name": "c", "firstAvailable": [{"name": "s", "deviceClassName": "x", "count": 3}]},
             ]}}}
    before = copy.deepcopy(claim)
    defaulted = apply_defaults(claim)
    assert claim == before
    a, b, c = defaulted["spec"]["devices"]["requests"]
    assert a["exactly"]["allocationMode"] == "ExactCount" and a["exactly"]["count"] == 1
    assert a["exactly"]["tolerations"][0]["operator"] == "Equal"
    assert b["exactly"] == {"deviceClassName": "x", "allocationMode": "All"}
    assert c["firstAvailable"][0]["count"] == 3 and c["firstAvailable"][0]["allocationMode"] == "ExactCount"
    assert apply_defaults(defaulted) == defaulted


def test_defaults_convert_old_versions_and_set_taint_time_only_when_asked():
    slice_ = {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice",
              "spec": {"devices": [{"name": "d", "basic": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}]}}
    assert "timeAdded" not in apply_defaults(slice_)["spec"]["devices"][0]["taints"][0]
    stamped = apply_defaults(slice_, now="2026-01-01T00:00:00Z")
    assert stamped["apiVersion"] == "resource.k8s.io/v1"
    assert stamped["spec"]["devices"][0]["taints"][0]["timeAdded"] == "2026-01-01T00:00:00Z"
    json.dumps(stamped)
