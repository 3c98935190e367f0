"""The names of a claim's transient CDI spec and devices (`<vendor>/<class>=<claim UID>-<device>`, file
`<vendor>-<class>_<claim UID>`), as NVIDIA's plugins name theirs, and the character-device majors of
/proc/devices. What a GPU device's edits are is the GPU plugin's (gpudra/gpuplugin/cdiedits.py).
"""

from __future__ import annotations


def read_char_majors(proc_devices: str = "/proc/devices") -> dict[str, int]:
    majors: dict[str, int] = {}
    try:
        with open(proc_devices, encoding="ascii") as fh:
            section = ""
            for line in fh:
                line = line.strip()
                if line.endswith(":"):
                    section = line
                    continue
                parts = line.split()
                if section.startswith("Character") and len(parts) == 2 and parts[0].isdigit():
                    majors[parts[1]] = int(parts[0])
    except OSError:
        pass
    return majors


def vendor_and_class(driver_name: str) -> tuple[str, str]:
    return f"k8s.{driver_name}", "claim"


def cdi_device_name(claim_uid: str, device_name: str) -> str:
    return f"{claim_uid}-{device_name}"


def cdi_device_id(driver_name: str, claim_uid: str, device_name: str) -> str:
    vendor, cls = vendor_and_class(driver_name)
    return f"{vendor}/{cls}={cdi_device_name(claim_uid, device_name)}"


def claim_spec_file_name(driver_name: str, claim_uid: str) -> str:
    vendor, cls = vendor_and_class(driver_name)
    return f"{vendor}-{cls}_{claim_uid}"
