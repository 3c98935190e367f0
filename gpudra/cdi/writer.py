"""Writing and reading CDI spec files (atomic write, minimum cdiVersion, transient spec names)."""

from __future__ import annotations

import json
import os
import tempfile

import yaml

from .spec import CdiError, Spec
from .validate import check_spec, minimum_required_version

try:
    _Dumper = yaml.CSafeDumper
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML without libyaml
    _Dumper = yaml.SafeDumper  # type: ignore[misc]
    _Loader = yaml.SafeLoader  # type: ignore[misc]

STATIC_DIR = "/etc/cdi"
DYNAMIC_DIR = "/var/run/cdi"
DEFAULT_SPEC_DIRS = (STATIC_DIR, DYNAMIC_DIR)  # later = higher priority


def spec_file_name(vendor: str, cls: str) -> str:
    return f"{vendor}-{cls}"


def transient_spec_name(vendor: str, cls: str, transient_id: str) -> str:
    """`<vendor>-<class>_<id>` (slashes in the id become underscores), e.g. one spec per claim UID."""
    return f"{vendor}-{cls}_{transient_id.replace('/', '_')}"


def render_spec(spec: Spec, fmt: str = "yaml") -> str:
    data = spec.to_dict()
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    return "---\n" + yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def write_spec(spec: Spec, directory: str, name: str, *, fmt: str = "yaml", fsync: bool = True) -> str:
    """Validate and write `spec` as `<directory>/<name>.<yaml|json>` atomically (temp file + rename).

    An empty `cdi_version` is set to the minimum version the content requires."""
    if not spec.cdi_version:
        spec.cdi_version = minimum_required_version(spec)
    check_spec(spec)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{name}.{fmt}")
    fd, tmp = tempfile.mkstemp(prefix=f"{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(render_spec(spec, fmt))
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
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
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise CdiError(f"cannot read CDI spec {path}: {exc}") from None
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.load(text, Loader=_Loader)
    except (ValueError, yaml.YAMLError) as exc:
        raise CdiError(f"{path}: not valid {'JSON' if path.endswith('.json') else 'YAML'}: {exc}") from None
    try:
        return Spec.from_dict(data, what=os.path.basename(path))
    except CdiError as exc:
        raise CdiError(f"{path}: {exc}") from None
