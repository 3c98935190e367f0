"""DeviceTaintRule (DRADeviceTaintRules: resource.k8s.io/v1alpha3, later v1beta2): taints devices from outside
the driver, e.g. to drain a GPU. Served only in these versions, so it is checked as written, without conversion."""

from __future__ import annotations

from gpudra.api.schema import names
from gpudra.api.schema.meta import CONDITION, object_meta, top_level
from gpudra.api.schema.resource import DEVICE_SELECTOR, DEVICE_TAINT, DRIVER, SELECTORS_MAX
from gpudra.api.schema.types import F, ListOf, Str, Struct

DEVICE_TAINT_SELECTOR = Struct(
    "DeviceTaintSelector",
    {
        "deviceClassName": F(Str(validators=(names.device_class_name,))),
        "driver": F(DRIVER),
        "pool": F(Str(validators=(names.pool_name,))),
        "device": F(Str(validators=(names.dns_label,))),
        "selectors": F(ListOf(DEVICE_SELECTOR, max_items=SELECTORS_MAX)),
    },
)

DEVICE_TAINT_RULE = top_level(
    "DeviceTaintRule",
    object_meta(),
    Struct("DeviceTaintRuleSpec", {"deviceSelector": F(DEVICE_TAINT_SELECTOR), "taint": F(DEVICE_TAINT, required=True)}),
    Struct("DeviceTaintRuleStatus", {"conditions": F(ListOf(CONDITION, max_items=8, unique_by="type"))}),
)

VERSIONS = ("resource.k8s.io/v1alpha3", "resource.k8s.io/v1beta2")
