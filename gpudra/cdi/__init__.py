"""Container Device Interface: spec model, validator, writer and an OCI resolver."""

from .resolver import Registry, apply_devices, apply_edits, default_oci_spec
from .spec import CdiError, ContainerEdits, Device, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Spec
from .validate import (CURRENT_VERSION, VALID_VERSIONS, check_spec, minimum_required_version, parse_qualified_name,
                       validate_spec)
from .writer import (DEFAULT_SPEC_DIRS, DYNAMIC_DIR, STATIC_DIR, load_spec_file, remove_spec, render_spec,
                     transient_spec_name, write_spec)

__all__ = [
    "CURRENT_VERSION", "CdiError", "ContainerEdits", "DEFAULT_SPEC_DIRS", "DYNAMIC_DIR", "Device", "DeviceNode",
    "Hook", "IntelRdt", "Mount", "NetDevice", "Registry", "STATIC_DIR", "Spec", "VALID_VERSIONS", "apply_devices",
    "apply_edits", "check_spec", "default_oci_spec", "load_spec_file", "minimum_required_version",
    "parse_qualified_name", "remove_spec", "render_spec", "transient_spec_name", "validate_spec", "write_spec",
]
