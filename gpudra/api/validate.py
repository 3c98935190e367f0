"""Validate loaded documents as the API server would, plus the cross-object checks it cannot do per object.

Every problem in a document is reported, each located by file, document, object and field path.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Iterable

from gpudra.api.convert import DRA_KINDS, OLD_VERSIONS, V1, needs_conversion, newer_layout_paths, to_v1
from gpudra.api.load import Document, cycle_collection_paused
from gpudra.api.problems import Problem, Severity
from gpudra.api.schema import CLUSTER_SCOPED, SCHEMAS, metadata_schema, schema_for
from gpudra.api.schema.computedomain import KIND as CD_KIND
from gpudra.device_config import API_VERSION as CD_API_VERSION
from gpudra.api.schema.taint_rule import VERSIONS as TAINT_RULE_VERSIONS
from gpudra.api.schema.names import suggest_dns_name
from gpudra.api.schema.types import as_dict, as_list, Context

_EXPECTED_VERSION = {kind: V1 for kind in DRA_KINDS}
_EXPECTED_VERSION.update({"Pod": "v1", "Node": "v1", "Deployment": "apps/v1", "ReplicaSet": "apps/v1",
                          "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "Job": "batch/v1",
                          "CronJob": "batch/v1", "Namespace": "v1", CD_KIND: CD_API_VERSION})
_EXPECTED_VERSION["DeviceTaintRule"] = " or ".join(reversed(TAINT_RULE_VERSIONS))
_EXPECTED_VERSION["Workload"] = "scheduling.k8s.io/v1alpha2 (Kubernetes 1.36) or scheduling.k8s.io/v1alpha1 (1.35)"
_EXPECTED_VERSION["PodGroup"] = "scheduling.k8s.io/v1alpha2 (Kubernetes 1.36)"
V1BETA2 = "resource.k8s.io/v1beta2"
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


def _problem(doc: Document, path: str, message: str, severity: Severity = "error", fix: str | None = None) -> Problem:
    return Problem(doc.source, doc.index, doc.kind, doc.name, path, message, severity, fix,
                   getattr(doc, "item", None))


def validate_document(doc: Document, kubernetes_version: str | None = None, features: Any = None) -> list[Problem]:
    """The API server's checks of one object; `kubernetes_version` (default: the newest release) decides the
    rules that changed between releases (where a ResourceSlice's counter sets may live); `features`
    (gpudra.allocator.Features, `--features`) the gates over its defaults that its CEL environment follows."""
    if not isinstance(doc, Document):  # any object with .obj / .source / .index will do
        doc = Document(doc.obj, getattr(doc, "source", "<input>"), getattr(doc, "index", 1), getattr(doc, "item", None))
    obj = doc.obj
    if not isinstance(obj, dict):
        return [_problem(doc, "", "a Kubernetes object must be a mapping")]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    problems: list[Problem] = []
    if not isinstance(kind, str) or not kind:
        problems.append(_problem(doc, "kind", "required field is missing"))
        return problems
    if not isinstance(api_version, str) or not api_version:
        expected = _EXPECTED_VERSION.get(kind)
        problems.append(_problem(doc, "apiVersion", "required field is missing"
                                 + (f"; {kind} is served as {expected}" if expected else "")))
        return problems
    note = ""
    if api_version in OLD_VERSIONS and kind in DRA_KINDS:
        for path, name in newer_layout_paths(obj):
            problems.append(_problem(doc, path, f"{name!r} is not a field in {api_version}; it is the "
                                     "resource.k8s.io/v1 layout: change apiVersion to resource.k8s.io/v1 (and use "
                                     "that layout throughout) or write the fields the old way"))
        # v1beta2 already has v1's layout: only the older versions are rearranged, so that the v1beta1
        # layout in a v1beta2 object is reported like the unknown fields the API server rejects.
        obj = to_v1(obj) if api_version != V1BETA2 else {**obj, "apiVersion": V1}
        api_version = V1
        note = " (checked after conversion to resource.k8s.io/v1)"
    schema = schema_for(api_version, kind)
    if schema is None:
        expected = _EXPECTED_VERSION.get(kind)
        if expected is not None:
            message = f"{kind} is served as apiVersion {expected}, not {api_version}"
            if api_version.startswith("resource.k8s.io/") and kind in DRA_KINDS:
                message += (" (gpudra also reads resource.k8s.io/v1beta1 and v1beta2, which an API server serves only "
                            "when kube-apiserver's --runtime-config enables them; v1alpha3 serves only "
                            "DeviceTaintRule from Kubernetes 1.34)")
            problems.append(_problem(doc, "apiVersion", message))
        else:
            known = sorted({k for _, k in SCHEMAS})
            close = difflib.get_close_matches(kind, known, n=1, cutoff=0.8)
            if close:
                problems.append(_problem(doc, "kind", f"unknown kind {kind!r}; did you mean {close[0]!r}?"))
            else:
                # its metadata still follows every object's rules (the local cluster's store names files by it)
                ctx = Context(api_version, kind)
                metadata_schema(kind).check(obj, "", ctx)
                problems.extend(_problem(doc, path, message, severity, fix) for severity, path, message, fix in ctx.found)
                problems.append(_problem(doc, "", f"{api_version} {kind} is not a kind gpudra checks beyond its "
                                         "metadata; skipped", "warning"))
        return problems
    if kind in DRA_KINDS or kind == "Pod":
        obj = _without_disabled_fields(obj, kubernetes_version, features)
    # also the release (and gates) whose CEL environment checks selectors
    facts: dict[str, Any] = {"release": kubernetes_version, "features": features}
    spec = obj.get("spec")
    if kind == "ResourceSlice" and isinstance(spec, dict) and isinstance(spec.get("driver"), str):
        facts["driver"] = spec["driver"]
    ctx = Context(api_version, kind, **facts)
    schema.check(obj, "", ctx)
    _object_level_checks(obj, kind, ctx)
    _driver_config_checks(obj, kind, ctx)
    for severity, path, message, fix in ctx.found:
        problems.append(_problem(doc, path, message + note, severity, fix))
    return problems


def _without_disabled_fields(obj: dict[str, Any], kubernetes_version: str | None, features: Any) -> dict[str, Any]:
    """The object as the API server validates it: the fields of gates that are off dropped first (its strategy's
    PrepareForCreate drops them, then Validate runs; a value there is never checked). A copy only when there is
    something to drop (gate_problems warns about what went). Only where the caller says which gates the server
    runs with (`features`, as `validate` does): without them every field is checked as written."""
    from gpudra.api.gates import drop_disabled_fields, gated_keys
    from gpudra.copying import copy_object
    from gpudra.versions import GATE_HISTORY, gate_state, parse_version

    if features is None or next(iter(gated_keys(obj)), None) is None:
        return obj
    copied = copy_object(obj)
    release = parse_version(kubernetes_version)
    # a list-typed attribute value (DRAListTypeAttributes) is kept and checked: dropping it would leave an
    # attribute with no value, which no release's server was seen to answer (1.34's does not know the field);
    # so is a field of a gate the release does not have: its server does not know the field at all, and strict
    # decoding refuses it (a Pod's schedulingGroup on 1.34: tests/oracles/test_kube_validation.py)
    unknown = {gate for gate in GATE_HISTORY if gate_state(gate, release).stage is None}
    drop_disabled_fields(copied, release, features=features, keep_gates=frozenset({"DRAListTypeAttributes"} | unknown))
    if obj.get("kind") == "Pod":  # a pod field of another release's Workload API: unknown here, never dropped
        from gpudra.api.schema.workload import POD_FIELD_RELEASE

        for name, since in POD_FIELD_RELEASE.items():
            if since != release and name in as_dict(obj.get("spec")):
                copied["spec"][name] = obj["spec"][name]
    return copied


def _object_level_checks(obj: dict[str, Any], kind: str, ctx: Context) -> None:
    metadata = as_dict(obj.get("metadata"))
    if kind in CLUSTER_SCOPED and metadata.get("namespace"):
        ctx.warning("metadata.namespace", f"{kind} is cluster-scoped; the namespace is ignored")


def _driver_config_checks(obj: dict[str, Any], kind: str, ctx: Context) -> None:
    """Opaque configs of the drivers gpudra knows (its GPU driver: GpuConfig, MigDeviceConfig and their sharing
    settings; its compute-domain driver: ComputeDomainChannelConfig, ComputeDomainDaemonConfig) as their admission
    webhook checks them (gpudra.webhook.admission, the one copy the webhook serves): the API server stores any JSON
    there, and the pod would wait in ContainerCreating."""
    if kind not in ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass"):
        return
    from gpudra.device_config import drivers_config_problems

    for driver, path, message in drivers_config_problems(obj):
        ctx.error(path, f"the {driver} driver refuses this config: {message}")


def _class_references(obj: dict[str, Any], kind: str) -> Iterable[tuple[str, str]]:
    spec = obj.get("spec")
    if kind == "ResourceClaimTemplate" and isinstance(spec, dict):
        spec, base = spec.get("spec"), "spec.spec"
    elif kind == "ResourceClaim":
        base = "spec"
    else:
        return
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    for position, request in enumerate(requests if isinstance(requests, list) else []):
        if not isinstance(request, dict):
            continue
        path = f"{base}.devices.requests[{position}]"
        exactly = request.get("exactly")
        if isinstance(exactly, dict) and isinstance(exactly.get("deviceClassName"), str):
            yield f"{path}.exactly.deviceClassName", exactly["deviceClassName"]
        elif isinstance(request.get("deviceClassName"), str):
            yield f"{path}.deviceClassName", request["deviceClassName"]
        for sub_position, sub in enumerate(as_list(request.get("firstAvailable"))):
            if isinstance(sub, dict) and isinstance(sub.get("deviceClassName"), str):
                yield f"{path}.firstAvailable[{sub_position}].deviceClassName", sub["deviceClassName"]


def class_references(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, class name) of every deviceClassName in a claim or template, in either layout."""
    return list(_class_references(obj, obj.get("kind", "")))


# ----- across documents ------------------------------------------------------------------------------
def validate_documents(docs: list[Document], kubernetes_version: str | None = None,
                       progress: Callable[[str, int, int], None] | None = None, *,
                       gates: bool = True, runtime_config: dict[str, bool] | None = None,
                       features: Any = None, unserved_is_error: bool = False) -> list[Problem]:
    """Problems of every document and across documents, grouped by document in input order.
    `kubernetes_version`: the release whose default feature gates decide which gated fields are
    warnings (gpudra.api.gates; default: gpudra.versions.DEFAULT_KUBERNETES_VERSION); `gates=False` leaves
    those warnings out (a caller that reports them for a release of its own, or wants only errors).
    `runtime_config`: the kube-apiserver's --runtime-config (gpudra.versions.parse_runtime_config): the beta
    resource.k8s.io versions it serves besides the release's default. `features` (gpudra.allocator.Features,
    `--features`): the gates the API server runs with over the release's defaults.
    `unserved_is_error`: an object written in a resource.k8s.io version the release does not serve (without the
    --runtime-config that turns it on) is an error, as the API server answers it (404, `no matches for kind`),
    not a warning that gpudra read it converted (what `validate` reports; the commands that read such files on
    their own keep reading them).
    `progress(what, done, total)` hears of each document checked (a CLI draws a bar from it)."""
    docs = [d if isinstance(d, Document) else Document(d.obj, getattr(d, "source", "<input>"), getattr(d, "index", 1),
                                                       getattr(d, "item", None))
            for d in docs]
    problems: list[Problem] = []
    with cycle_collection_paused():
        for done, doc in enumerate(docs, start=1):
            problems.extend(validate_document(doc, kubernetes_version, features))
            if gates:
                problems.extend(gate_problems(doc, kubernetes_version, runtime_config, features,
                                              unserved_is_error))
            else:  # a version the release no longer serves is an error, not a gate warning
                problems.extend(removed_version_problems(doc, kubernetes_version))
            if progress is not None:
                progress("validating", done, len(docs))
        problems.extend(_cross_checks(docs, kubernetes_version))
        problems.extend(_published_name_checks(docs, kubernetes_version, features))
    order: dict[tuple[str, int | None], int] = {}
    for doc in docs:
        order.setdefault((doc.source, doc.index), len(order))
    return sorted(problems, key=lambda p: order.get((p.source, p.index), len(order)))


def removed_version_problems(doc: Document, kubernetes_version: str | None = None) -> list[Problem]:
    """An error when the object's resource.k8s.io version no longer serves its kind in the release."""
    from gpudra.api.gates import served_version_problems
    from gpudra.versions import parse_version

    if not isinstance(doc.obj, dict) or not str(doc.obj.get("apiVersion", "")).startswith("resource.k8s.io/"):
        return []
    return [_problem(doc, "apiVersion", message) for severity, message
            in served_version_problems(doc.obj.get("kind"), doc.obj.get("apiVersion"), parse_version(kubernetes_version))
            if severity == "error"]


def gate_problems(doc: Document, kubernetes_version: str | None = None,
                  runtime_config: dict[str, bool] | None = None, features: Any = None,
                  unserved_is_error: bool = False) -> list[Problem]:
    """Warnings for fields behind a feature gate that `kubernetes_version` leaves off, or `features`
    (gpudra.allocator.Features) turns off (gpudra.api.gates), and for a resource.k8s.io version it does not
    serve (an error where the version was removed)."""
    from gpudra.api.gates import gate_warnings
    from gpudra.versions import parse_version

    if not isinstance(doc.obj, dict):
        return []
    if doc.obj.get("kind") == "Pod" or str(doc.obj.get("apiVersion", "")).startswith("scheduling.k8s.io/"):
        return [_problem(doc, path, message, "error" if unserved_is_error and path == "apiVersion" else "warning")
                for path, message in gate_warnings(doc.obj, parse_version(kubernetes_version), None, runtime_config,
                                                   features)]
    if not str(doc.obj.get("apiVersion", "")).startswith("resource.k8s.io/"):
        return []
    version = parse_version(kubernetes_version)
    removed = removed_version_problems(doc, version)
    try:
        obj = _v1(doc)
    except Exception:  # noqa: BLE001 - unconvertible input is reported by validate_document
        return removed
    # the served-version notes are the ones on apiVersion itself (gpudra.api.gates.gate_warnings)
    return removed + [_problem(doc, path, message, "error" if unserved_is_error and path == "apiVersion" else "warning")
                      for path, message in gate_warnings(obj, version, doc.obj.get("apiVersion"), runtime_config,
                                                         features)]


def _v1(doc: Document) -> dict[str, Any]:
    """The object in v1 layout; v1 objects are used as they are (read-only), older ones are converted."""
    if not isinstance(doc.obj, dict):
        return {}
    return to_v1(doc.obj) if needs_conversion(doc.obj) else doc.obj


def _cross_checks(docs: list[Document], kubernetes_version: str | None = None) -> list[Problem]:
    problems: list[Problem] = []
    seen: dict[tuple[str, str, str], Document] = {}
    for doc in docs:
        if not doc.kind or not doc.name:
            continue
        identity = (doc.kind, "" if doc.kind in CLUSTER_SCOPED else (doc.namespace or "default"), doc.name)
        if identity in seen and not doc.name.endswith("*"):
            first = seen[identity]
            problems.append(_problem(doc, "metadata.name", f"{doc.kind} {doc.name!r} is defined twice (first in "
                                     f"{first.source}:{first.where}); the later one replaces the earlier", "warning"))
        else:
            seen[identity] = doc
    classes = [d for d in docs if d.kind == "DeviceClass" and d.name]
    class_names = {d.name for d in classes}
    if classes:
        for doc in docs:
            if doc.kind not in ("ResourceClaim", "ResourceClaimTemplate"):
                continue
            for path, class_name in class_references(doc.obj):
                if not class_name or class_name in class_names or "/" in class_name:
                    continue
                # suggest valid names only: a given class named like `nvidia.com/gpu` is suggested as what
                # it must be renamed to
                valid_names = {suggest_dns_name(n) if "/" in n else n: n for n in class_names}
                close = difflib.get_close_matches(class_name, sorted(valid_names), n=1, cutoff=0.6)
                hint = f" (classes given: {', '.join(sorted(valid_names))})"
                if close and valid_names[close[0]] != close[0]:
                    hint = f"; did you mean {close[0]!r} (what DeviceClass {valid_names[close[0]]!r} must be renamed to)?"
                elif close:
                    hint = f"; did you mean {close[0]!r}?"
                problems.append(_problem(doc, path, f"no DeviceClass {class_name!r} among the given manifests{hint}",
                                         "warning"))
    problems += _extended_resource_names(classes)
    problems += _admin_access(docs)
    problems += _pod_references(docs)
    problems += _pool_checks(docs, kubernetes_version)
    return problems


def _published_name_checks(docs: list[Document], kubernetes_version: str | None, features: Any) -> list[Problem]:
    """Selectors reading attribute or capacity names that no given ResourceSlice of the domain publishes
    (gpudra.api.selector_names); nothing without slices."""
    from gpudra.api.schema.cel_check import selector_gates
    from gpudra.api.selector_names import name_problems, published_names, selector_expressions

    slices = [_v1(d) for d in docs if d.kind == "ResourceSlice"]
    published = published_names(slices) if slices else {}
    if not published:
        return []
    consumable, list_type = selector_gates(kubernetes_version, features)
    problems: list[Problem] = []
    for doc in docs:
        if doc.kind not in ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate"):
            continue
        try:
            obj = _v1(doc)
        except Exception:  # noqa: BLE001 - unconvertible input is reported by validate_document
            continue
        # a warning: the API server accepts the selector (attributes are typed at runtime); every allocation
        # then fails on it, which is what the message says
        for path, expression in selector_expressions(obj):
            problems += [_problem(doc, path, message, "warning") for message in name_problems(
                expression, published, kubernetes_version, consumable, list_type)]
    return problems


def _extended_resource_names(classes: list[Document]) -> list[Problem]:
    problems: list[Problem] = []
    owners: dict[str, Document] = {}
    for doc in classes:
        spec = doc.obj.get("spec")
        name = spec.get("extendedResourceName") if isinstance(spec, dict) else None
        if not isinstance(name, str):
            continue
        if name in owners and owners[name].name != doc.name:  # one class given twice is reported as such
            problems.append(_problem(doc, "spec.extendedResourceName", f"{name!r} is also claimed by DeviceClass "
                                     f"{owners[name].name!r}; only one class serves it (the one created last, or on "
                                     "a tie the first by name)", "warning"))
        else:
            owners[name] = doc
    return problems


def _admin_access(docs: list[Document]) -> list[Problem]:
    """adminAccess is admitted only in namespaces labelled resource.kubernetes.io/admin-access: "true"."""
    problems: list[Problem] = []
    namespaces = {d.name: d for d in docs if d.kind == "Namespace"}
    for doc in docs:
        if doc.kind not in ("ResourceClaim", "ResourceClaimTemplate"):
            continue
        obj = _v1(doc)
        spec = obj.get("spec")
        if doc.kind == "ResourceClaimTemplate" and isinstance(spec, dict):
            spec, base = spec.get("spec"), "spec.spec"
        else:
            base = "spec"
        devices = spec.get("devices") if isinstance(spec, dict) else None
        for position, request in enumerate(as_list(devices.get("requests") if isinstance(devices, dict) else None)):
            exactly = request.get("exactly") if isinstance(request, dict) else None
            if not isinstance(exactly, dict) or exactly.get("adminAccess") is not True:
                continue
            path = f"{base}.devices.requests[{position}].exactly.adminAccess"
            namespace = namespaces.get(doc.namespace or "default")
            labels = namespace.metadata.get("labels") if namespace else None
            if namespace is None:
                continue  # the namespace is not among the manifests: nothing to check against
            if not isinstance(labels, dict) or labels.get(ADMIN_ACCESS_LABEL) != "true":
                problems.append(_problem(doc, path, f"namespace {namespace.name!r} is not labelled "
                                         f"{ADMIN_ACCESS_LABEL}: \"true\", so the API server rejects admin access"))
    return problems


def _pod_references(docs: list[Document]) -> list[Problem]:
    problems: list[Problem] = []
    claims = {(d.namespace or "default", d.name): d for d in docs if d.kind == "ResourceClaim"}
    templates = {(d.namespace or "default", d.name): d for d in docs if d.kind == "ResourceClaimTemplate"}
    for doc in docs:
        if doc.kind != "Pod":
            continue
        spec = as_dict(doc.obj.get("spec"))
        namespace = doc.namespace or "default"
        for position, entry in enumerate(as_list(spec.get("resourceClaims"))):
            if not isinstance(entry, dict):
                continue
            path = f"spec.resourceClaims[{position}]"
            claim_name, template_name = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
            if isinstance(claim_name, str) and claims and (namespace, claim_name) not in claims:
                elsewhere = [ns for ns, n in claims if n == claim_name]
                hint = ""
                if elsewhere:
                    hint = f" (a claim of that name is in namespace {elsewhere[0]!r}; claims are namespaced)"
                problems.append(_problem(doc, f"{path}.resourceClaimName", f"no ResourceClaim {claim_name!r} in "
                                         f"namespace {namespace!r} among the given manifests{hint}", "warning"))
            if isinstance(template_name, str) and templates and (namespace, template_name) not in templates:
                problems.append(_problem(doc, f"{path}.resourceClaimTemplateName", "no ResourceClaimTemplate "
                                         f"{template_name!r} in namespace {namespace!r} among the given manifests",
                                         "warning"))
    return problems


def _pool_checks(docs: list[Document], kubernetes_version: str | None = None) -> list[Problem]:
    from gpudra.versions import SPLIT_SLICES, partitionable_layout

    # Counter sets are pool-wide only where they live in slices of their own (1.35 on); up to 1.34 each slice's
    # counter sets serve its own devices, which the per-slice check (schema.resource) already covers.
    split = partitionable_layout(kubernetes_version) == SPLIT_SLICES
    problems: list[Problem] = []
    pools: dict[tuple[str, str], list[Document]] = {}
    for doc in docs:
        if doc.kind != "ResourceSlice":
            continue
        spec = as_dict(_v1(doc).get("spec"))
        pool = spec.get("pool")
        if isinstance(pool, dict) and isinstance(spec.get("driver"), str) and isinstance(pool.get("name"), str):
            pools.setdefault((spec["driver"], pool["name"]), []).append(doc)
    for (driver, pool_name), slices in pools.items():
        generation = max((_int(_pool(d).get("generation")) for d in slices), default=0)
        current = [d for d in slices if _int(_pool(d).get("generation")) == generation]
        counts = {_int(_pool(d).get("resourceSliceCount")) for d in current}
        if len(counts) > 1:
            problems.append(_problem(current[-1], "spec.pool.resourceSliceCount", f"slices of pool {pool_name!r} "
                                     f"(driver {driver}) disagree on resourceSliceCount: {sorted(map(str, counts))}"))
        devices: dict[str, Document] = {}
        counter_sets: dict[str, Document] = {}
        consumers: list[tuple[Document, int, str]] = []
        for doc in current:
            spec = _v1(doc)["spec"]
            for counter_set in as_list(spec.get("sharedCounters")) if split else ():
                if isinstance(counter_set, dict) and isinstance(counter_set.get("name"), str):
                    if counter_set["name"] in counter_sets and counter_sets[counter_set["name"]] is not doc:
                        problems.append(_problem(doc, "spec.sharedCounters", f"counter set {counter_set['name']!r} "
                                                 f"is defined twice in pool {pool_name!r}"))
                    counter_sets[counter_set["name"]] = doc
            for position, device in enumerate(as_list(spec.get("devices"))):
                if not isinstance(device, dict) or not isinstance(device.get("name"), str):
                    continue
                if device["name"] in devices and devices[device["name"]] is not doc:
                    problems.append(_problem(doc, f"spec.devices[{position}].name", f"device {device['name']!r} is "
                                             f"published twice in pool {pool_name!r}; the allocator treats the pool "
                                             "as invalid", "warning"))
                devices[device["name"]] = doc
                for consumption in as_list(device.get("consumesCounters")) if split else ():
                    if isinstance(consumption, dict) and isinstance(consumption.get("counterSet"), str):
                        consumers.append((doc, position, consumption["counterSet"]))
        complete = len(counts) == 1 and len(current) == next(iter(counts), None)
        if complete:
            for doc, position, counter_set in consumers:
                if counter_set not in counter_sets:
                    problems.append(_problem(doc, f"spec.devices[{position}].consumesCounters", f"counter set "
                                             f"{counter_set!r} is not defined in pool {pool_name!r}", "warning"))
    return problems


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _pool(doc: Document) -> dict[str, Any]:
    spec = doc.obj.get("spec")
    pool = spec.get("pool") if isinstance(spec, dict) else None
    return pool if isinstance(pool, dict) else {}


def has_errors(problems: Iterable[Problem]) -> bool:
    return any(p.severity == "error" for p in problems)
