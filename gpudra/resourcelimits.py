"""Size limits of resource.k8s.io devices that both the API's validation and the DRA CEL environment declare.

A module of its own below gpudra.api and gpudra.cel (the API's validation compiles CEL, so CEL cannot import the
API): k8s.io/api resource/v1 types.go (`ResourceSliceMaxAttributesAndCapacitiesPerDevice`,
`DeviceAttributeMaxValueLength`, `ResourceSliceMaxAttributeValuesPerDevice`, `DeviceMaxDomainLength`,
`DeviceMaxIDLength`), and the DRA API concepts page (kubernetes.io, "Details for DRA Driver Authors"): "The total
number of individual attribute values per device (scalar fields plus all list elements combined) is limited to
48. When any device in a ResourceSlice uses this feature [list-type attributes] or other advanced features such as
taints, the ResourceSlice will be limited to at most 64 devices."
"""

from __future__ import annotations

from typing import Any

ATTRIBUTES_AND_CAPACITIES_PER_DEVICE = 32
DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH = 64  # a string or version value, and each entry of a list of them
ATTRIBUTE_VALUES_PER_DEVICE = 48  # scalar attributes count one, list-type attributes their entries
DRIVER_NAME_MAX_LENGTH = 63
DEVICE_MAX_DOMAIN_LENGTH = 63
DEVICE_MAX_ID_LENGTH = 32
LIST_ATTRIBUTE_KINDS = ("ints", "bools", "strings", "versions")  # DRAListTypeAttributes (1.36, alpha)


def attribute_values(attributes: dict[str, Any]) -> int:
    """How many values a device's attributes hold, as ResourceSliceMaxAttributeValuesPerDevice counts them."""
    total = 0
    for attribute in attributes.values():
        if isinstance(attribute, dict):
            lists = [v for k, v in attribute.items() if k in LIST_ATTRIBUTE_KINDS and isinstance(v, list)]
            total += sum(len(v) for v in lists) if lists else 1
        else:
            total += 1
    return total


def uses_list_attributes(attributes: dict[str, Any]) -> bool:
    return any(isinstance(a, dict) and any(k in a for k in LIST_ATTRIBUTE_KINDS) for a in attributes.values())
