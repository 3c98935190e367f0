"""Writing and reading CDI spec files (atomic write, minimum cdiVersion, transient spec names)."""

from __future__ import annotations

import json
import os
import re
from typing import cast


from gpudra.api.load import LoadError, read_text
from gpudra.api.load_json import load_json_document
from gpudra.api.yaml_files import load_yaml
from gpudra.atomicfile import write_atomic

from .spec import CdiError, Spec
from .validate import check_spec, minimum_required_version

STATIC_DIR = "/etc/cdi"
DYNAMIC_DIR = "/var/run/cdi"
DEFAULT_SPEC_DIRS = (STATIC_DIR, DYNAMIC_DIR)  # later = higher priority
# Container runtimes (often not root: rootless podman, CRI-O's conmon) read the specs; only root writes them.
SPEC_FILE_MODE = 0o644
SPEC_DIR_MODE = 0o755


def spec_file_name(vendor: str, cls: str) -> str:
    return f"{vendor}-{cls}"


def transient_spec_name(vendor: str, cls: str, transient_id: str) -> str:
    """`<vendor>-<class>_<id>` (slashes in the id become underscores), e.g. one spec per claim UID."""
    return f"{vendor}-{cls}_{transient_id.replace('/', '_')}"


# fullmatch, not `$`: `$` also matches before a trailing newline, and a key "A\n" written plain breaks the file
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    return _quote(str(value))


def _quote(text: str) -> str:
    """A YAML double-quoted scalar; everything outside printable ASCII is escaped."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code <= 0x7E:
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_YAML11_WORDS = frozenset({"true", "false", "null", "y", "n", "yes", "no", "on", "off"})


def _key(key: str) -> str:
    return key if _PLAIN_KEY.fullmatch(key) and key.lower() not in _YAML11_WORDS else _quote(key)


def _block(value: object, pad: str, out: list[str]) -> None:
    """Block-style YAML for the JSON-shaped data of a spec (dicts, lists, str/int/bool)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{_key(k)}:")
                _block(v, pad + "  " if isinstance(v, dict) else pad, out)
            else:
                out.append(f"{pad}{_key(k)}: {'{}' if v == {} else '[]' if v == [] else _scalar(v)}")
    else:
        for item in cast("list[object]", value):  # the rest of a spec's JSON-shaped data: lists
            if isinstance(item, (dict, list)) and item:
                start = len(out)
                _block(item, pad + "  ", out)
                out[start] = pad + "- " + out[start][len(pad) + 2:]
            else:
                out.append(f"{pad}- {'{}' if item == {} else '[]' if item == [] else _scalar(item)}")


def render_spec(spec: Spec, fmt: str = "yaml") -> str:
    data = spec.to_dict()
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    # A small emitter instead of yaml.dump: specs are written on every prepare and PyYAML's
    # representer costs most of a millisecond; the tests check round trips through a YAML parser.
    lines = ["---"]
    _block(data, "", lines)
    return "\n".join(lines) + "\n"


def write_spec(spec: Spec, directory: str, name: str, *, fmt: str = "yaml", fsync: bool = True) -> str:
    """Validate and write `spec` as `<directory>/<name>.<yaml|json>` atomically (`gpudra.atomicfile`),
    mode 0644 whatever the umask.

    An empty `cdi_version` is set to the minimum version the content requires."""
    if not spec.cdi_version:
        spec.cdi_version = minimum_required_version(spec)
    check_spec(spec)
    data = render_spec(spec, fmt).encode()
    path = os.path.join(directory, f"{name}.{fmt}")
    write_atomic(path, data, mode=SPEC_FILE_MODE, label="cdi", fsync=fsync, make_dirs=SPEC_DIR_MODE)
    return path


def remove_spec(directory: str, name: str) -> bool:
    removed = False
    for ext in ("yaml", "json"):
        try:
            os.unlink(os.path.join(directory, f"{name}.{ext}"))
            removed = True
        except FileNotFoundError:
            pass
    return removed


def load_spec_file(path: str) -> Spec:
    """A spec file read within the manifest loader's limits (size, nesting, aliases, duplicate keys)."""
    try:
        text = read_text(path)
        if path.endswith(".json"):
            data = load_json_document(text, path)
        else:
            data = load_yaml(text, path)
    except LoadError as exc:
        raise CdiError(f"cannot read CDI spec {exc}") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise CdiError(f"{path}: not valid JSON: {exc}") from None
    try:
        return Spec.from_dict(data)  # "spec.devices[0]: …"; the path is added below
    except CdiError as exc:
        raise CdiError(f"{path}: {exc}") from None
