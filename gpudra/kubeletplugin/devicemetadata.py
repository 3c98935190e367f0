"""Device metadata files in containers (KEP-5304, "DRA attributes downward API"), as upstream's kubelet-plugin
helper writes them when a driver enables it (NVIDIA: feature gate `DeviceMetadata`).

Learned from k8s.io/dynamic-resource-allocation as vendored by kubernetes-sigs/dra-driver-nvidia-gpu (commit
95932046): `kubeletplugin/metadata.go` (`metadataWriter`: `processPreparedClaim`, `buildDeviceMetadata`,
`writeCDISpec`, `cleanupClaim` and the path helpers), `api/metadata/types.go` and `helpers.go` (the in-container
layout), `api/metadata/v1alpha1/types.go` (the file's schema), and `kubeletplugin/draplugin.go` (the metadata CDI
device joins the first device of each request in the NodePrepareResources answer).

Per prepared claim and request: `<plugin dir>/dra-device-metadata/<ns>_<name>/<request>/metadata.json` holds a
`metadata.resource.k8s.io/v1alpha1` DeviceMetadata, and `<cdi dir>/<driver>_metadata_<uid>_<request>.json` is a
CDI spec (kind `<driver>/metadata`) that bind-mounts it read-only at
`/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json`
(`resourceclaimtemplates/<pod claim name>/…` for a claim made from a template).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from gpudra.api.schema import names
from gpudra.atomicfile import write_atomic

from .claimpaths import ClaimPathError, check_claim_identity, path_inside

API_VERSION = "metadata.resource.k8s.io/v1alpha1"
KIND = "DeviceMetadata"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
CLAIMS_SUBDIR, TEMPLATES_SUBDIR = "resourceclaims", "resourceclaimtemplates"
METADATA_SUBDIR = "dra-device-metadata"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"  # resourceapi.PodResourceClaimAnnotation
CDI_VERSION = "0.5.0"
FILE_MODE, DIR_MODE = 0o644, 0o755


@dataclass(frozen=True)
class MetadataDevice:
    request: str  # the allocation result's request ("<request>" or "<request>/<subrequest>")
    pool: str
    name: str
    attributes: dict[str, Any] = field(default_factory=dict)  # the device's published attributes, or none


def base_request(request: str) -> str:
    """resourceclaim.BaseRequestRef: the request without its subrequest."""
    return request.split("/", 1)[0]


def cdi_device_id(driver_name: str, claim_uid: str, request: str) -> str:
    return f"{driver_name}/metadata={claim_uid}_{base_request(request)}"


def _label(kind: str, value: str) -> str:
    """A request or pod claim name becomes a path component: the API's rule for it (a DNS label) first."""
    problems = names.field_problems(kind, value, names.dns_label, 63)
    if problems:
        raise ClaimPathError("; ".join(problems))
    return value


class MetadataWriter:
    def __init__(self, driver_name: str, plugin_dir: str, cdi_dir: str):
        self.driver_name = driver_name
        self.plugin_dir = plugin_dir
        self.cdi_dir = cdi_dir

    def _claim_dir(self, namespace: str, name: str) -> str:
        root = os.path.join(self.plugin_dir, METADATA_SUBDIR)
        os.makedirs(root, mode=DIR_MODE, exist_ok=True)
        return path_inside(root, f"{namespace}_{name}")

    def container_path(self, claim_name: str, pod_claim_name: str | None, request: str) -> str:
        file_name = f"{self.driver_name}-metadata.json"
        if pod_claim_name:
            return os.path.join(CONTAINER_DIR, TEMPLATES_SUBDIR, _label("pod claim name", pod_claim_name), request,
                                file_name)
        return os.path.join(CONTAINER_DIR, CLAIMS_SUBDIR, claim_name, request, file_name)

    def document(self, namespace: str, name: str, uid: str, pod_claim_name: str | None, request: str,
                 devices: list[MetadataDevice], generation: int = 1) -> dict[str, Any]:
        """buildDeviceMetadata, in the field order Go's encoder writes (map keys sorted)."""
        entries = []
        for device in devices:
            entry: dict[str, Any] = {"driver": self.driver_name, "pool": device.pool, "name": device.name}
            if device.attributes:
                entry["attributes"] = {key: device.attributes[key] for key in sorted(device.attributes)}
            entries.append(entry)
        doc: dict[str, Any] = {
            "kind": KIND, "apiVersion": API_VERSION,
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": generation,
                         "creationTimestamp": None},
        }
        if pod_claim_name:
            doc["podClaimName"] = pod_claim_name
        doc["requests"] = [{"name": request, "devices": entries}]
        return doc

    def write_claim(self, namespace: str, name: str, uid: str, pod_claim_name: str | None,
                    devices: list[MetadataDevice]) -> dict[str, str]:
        """processPreparedClaim: the files of every request; returns base request -> metadata CDI device ID."""
        check_claim_identity(namespace, name, uid)
        if pod_claim_name:
            _label("pod claim name", pod_claim_name)
        by_request: dict[str, list[MetadataDevice]] = {}
        for device in devices:
            _label("request name", base_request(device.request))  # every name checked before any file
            by_request.setdefault(device.request, []).append(device)
        ids: dict[str, str] = {}
        claim_dir = self._claim_dir(namespace, name)
        for request, members in by_request.items():
            base = _label("request name", base_request(request))
            doc = self.document(namespace, name, uid, pod_claim_name, request, members)
            host_file = os.path.join(claim_dir, base, "metadata.json")
            os.makedirs(os.path.dirname(host_file), mode=DIR_MODE, exist_ok=True)
            # Go's PrettySerializer (two-space indent), one document per configured version, each ending "\n"
            write_atomic(host_file, (json.dumps(doc, indent=2) + "\n").encode(), mode=FILE_MODE,
                         label="device-metadata", fsync=False)
            spec = {"cdiVersion": CDI_VERSION, "kind": f"{self.driver_name}/metadata", "devices": [{
                "name": f"{uid}_{base}", "containerEdits": {"mounts": [{
                    "hostPath": host_file, "containerPath": self.container_path(name, pod_claim_name, base),
                    "options": ["ro", "bind"]}]}}]}
            os.makedirs(self.cdi_dir, mode=DIR_MODE, exist_ok=True)
            write_atomic(path_inside(self.cdi_dir, f"{self.driver_name}_metadata_{uid}_{base}.json"),
                         json.dumps(spec, indent=2).encode(), mode=FILE_MODE, label="device-metadata-cdi",
                         fsync=False)
            ids[base] = cdi_device_id(self.driver_name, uid, base)
        return ids

    def cleanup_claim(self, namespace: str, name: str, uid: str) -> None:
        """cleanupClaim: the claim's metadata directory and its CDI specs (idempotent)."""
        check_claim_identity(namespace, name, uid)
        shutil.rmtree(self._claim_dir(namespace, name), ignore_errors=True)
        for path in glob.glob(os.path.join(glob.escape(self.cdi_dir),
                                           f"{glob.escape(self.driver_name)}_metadata_{uid}_*.json")):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
