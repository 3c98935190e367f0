"""The local cluster's store against the Kubernetes API server's own rules, read from upstream (each test names
the file): what a client sees from create, replace and delete must be what kube-apiserver answers. Every expected
value comes from the upstream rule or from a plain computation here, never from the store's own output."""

from __future__ import annotations

import json
import os
from typing import Any

from gpudra.cluster.store import Store

SPEC = {"containers": [{"name": "c", "image": "busybox"}]}  # the store validates what it writes
# k8s.io/apimachinery/pkg/util/rand: the alphabet of generated suffixes (no vowels, no 0/1/3)
K8S_RAND_ALPHABET = set("bcdfghjklmnpqrstvwxz2456789")


def json_copy(obj: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(obj))


def _pod(**metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": SPEC}


def test_generate_name_cuts_a_long_prefix_to_58_characters_apiserver_storage_names_generate_go(tmp_path):
    """staging/src/k8s.io/apiserver/pkg/storage/names/generate.go: maxNameLength = 63, randomLength = 5,
    MaxGeneratedNameLength = 63 - 5; a longer base is cut to base[:MaxGeneratedNameLength] before the suffix."""
    prefix = "".join(chr(ord("a") + i % 26) for i in range(100))  # a valid DNS-subdomain start, 100 characters
    name = Store(str(tmp_path)).create(_pod(generateName=prefix))["metadata"]["name"]
    assert len(name) == 63
    assert name[:58] == prefix[:58] and set(name[58:]) <= K8S_RAND_ALPHABET


def test_every_write_stamps_the_object_with_the_revision_it_made_etcd3_store_go(tmp_path):
    """staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go: Create and GuaranteedUpdate decode the written
    object with the revision of their own transaction (putResp.Header.Revision), which is the store's newest
    revision, the one a list then carries; api_object_versioner.go: a revision 0 is no version at all ("" on an
    object, "illegal resource version from storage" on a list). So each write's object carries the store's new,
    nonzero version, one above the one before it (etcd's revision grows by one per write transaction)."""
    store = Store(str(tmp_path))
    written = []

    def check(obj: dict[str, Any]) -> None:
        version = obj["metadata"]["resourceVersion"]
        assert version != "0" and int(version) == store.version()
        written.append(int(version))

    check(store.create(_pod(name="a", finalizers=["example.com/keep"])))
    check(store.create(_pod(name="b")))
    a = store.get("Pod", "default", "a")
    a["metadata"]["labels"] = {"changed": "yes"}
    check(store.replace(a))
    assert store.delete("Pod", "default", "a") == "terminating"  # a finalizer holds it
    check(store.get("Pod", "default", "a"))
    assert written[0] >= 1 and written == list(range(written[0], written[0] + 4))  # etcd: +1 per write txn


def test_an_objects_events_are_those_whose_involved_object_uid_equals_its_uid_client_go_event_expansion_go(tmp_path):
    """staging/src/k8s.io/client-go/kubernetes/typed/core/v1/event_expansion.go: GetFieldSelector selects an
    object's events by equality on involvedObject.uid (with its name, namespace and kind), as `kubectl describe`
    lists them: another object's events never show, whichever way the two uids sort."""
    store = Store(str(tmp_path))
    pods = [store.create(_pod(name=name)) for name in ("p", "q", "r")]
    for pod in pods:
        store.record_event(pod, "Normal", "Scheduled", f"assigned {pod['metadata']['name']}", "default-scheduler")
    for pod in pods:
        events = store.events_for(pod)
        assert [e["involvedObject"]["uid"] for e in events] == [pod["metadata"]["uid"]]
        assert [e["message"] for e in events] == [f"assigned {pod['metadata']['name']}"]


def test_an_events_name_is_the_objects_name_a_dot_and_hex_client_go_record_event_go(tmp_path):
    """staging/src/k8s.io/client-go/tools/record/event.go, makeEvent: Name = fmt.Sprintf("%v.%x", ref.Name,
    t.UnixNano()), the whole object name, a dot, lowercase hex. An event name is a DNS subdomain (at most 253
    characters), so an object with the longest name (253 characters, stored under its hash: `NAME.json` passes
    pathconf _PC_NAME_MAX) gives an event with a prefix of its name."""
    import re

    store = Store(str(tmp_path))
    name = "a-pod-whose-name-is-longer-than-fifteen-characters"
    event = store.record_event(store.create(_pod(name=name)), "Normal", "Scheduled", "assigned", "default-scheduler")
    event_name = event["metadata"]["name"]
    assert event_name.startswith(name + ".") and re.fullmatch(r"[0-9a-f]+", event_name[len(name) + 1:])
    longest = "p" * 253
    assert len(longest) + len(".json") > os.pathconf(tmp_path, "PC_NAME_MAX")
    pod = store.create(_pod(name=longest))
    assert store.get("Pod", "default", longest) == pod
    event = store.record_event(pod, "Normal", "Scheduled", "assigned", "default-scheduler")
    event_name = event["metadata"]["name"]
    stem, dot, suffix = event_name.rpartition(".")
    assert len(event_name) <= min(253, len(longest)) and dot and longest.startswith(stem)
    assert re.fullmatch(r"[0-9a-f]+", suffix) and store.events_for(pod) == [event]
    for cut_at in range(len(longest) - 30, len(longest) - 10):  # wherever the cut falls, after a '-' or '.' too
        for separator in "-.":
            name = longest[:cut_at] + separator + "q" * (len(longest) - cut_at - 1)
            event = store.record_event(store.create(_pod(name=name)), "Normal", "Scheduled", "assigned", "s")
            stem, _, suffix = event["metadata"]["name"].rpartition(".")
            assert name.startswith(stem) and stem[-1].isalnum() and re.fullmatch(r"[0-9a-f]+", suffix)


def test_an_update_removing_the_last_finalizer_deletes_a_terminating_object_registry_store_go(tmp_path):
    """staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go, ShouldDeleteDuringUpdate: an update
    deletes the object only when the new object has no finalizers and the existing one has a deletionTimestamp
    (and no grace period); rest/update.go, BeforeUpdate: an update can never remove or change a deletion
    timestamp, and keeps the existing uid and creationTimestamp."""
    from gpudra.cluster.store import StoreError

    store = Store(str(tmp_path))
    created = store.create(_pod(name="p", finalizers=["example.com/a", "example.com/b"]))
    assert store.delete("Pod", "default", "p") == "terminating"
    terminating = store.get("Pod", "default", "p")
    stamp = terminating["metadata"]["deletionTimestamp"]

    one_left = json_copy(terminating)
    one_left["metadata"]["finalizers"] = ["example.com/b"]
    del one_left["metadata"]["deletionTimestamp"]  # a client cannot take it back
    del one_left["metadata"]["uid"]  # "use the existing UID if none is provided"
    one_left["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z"  # "ignore changes to timestamp"
    store.replace(one_left)
    kept = store.get("Pod", "default", "p")
    assert kept is not None and kept["metadata"]["finalizers"] == ["example.com/b"]
    assert kept["metadata"]["deletionTimestamp"] == stamp
    assert kept["metadata"]["uid"] == created["metadata"]["uid"]
    assert kept["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]

    none_left = json_copy(kept)
    none_left["metadata"]["finalizers"] = []
    store.replace(none_left)
    assert store.get("Pod", "default", "p") is None and store.list("Pod") == []
    try:
        store.delete("Pod", "default", "p")
    except StoreError as error:
        assert error.status == 404
    else:
        raise AssertionError("deleted twice")


def test_an_update_without_finalizers_of_a_live_object_keeps_it_registry_store_go(tmp_path):
    """ShouldDeleteDuringUpdate (registry/store.go): no deletionTimestamp on the existing object, no deletion,
    whatever the finalizers."""
    store = Store(str(tmp_path))
    store.create(_pod(name="p", finalizers=["example.com/a"]))
    live = store.get("Pod", "default", "p")
    live["metadata"]["finalizers"] = []
    store.replace(live)
    assert store.get("Pod", "default", "p") is not None


def test_an_invalid_object_is_422_is_invalid_and_an_oversized_one_413_apimachinery_errors_go(tmp_path):
    """staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go: NewInvalid is HTTP 422 (StatusUnprocessableEntity)
    with `<Kind> "<name>" is invalid: <errors>`; NewRequestEntityTooLargeError is HTTP 413 with `Request entity too
    large: <message>`, which the API server's body reader (apiserver's MaxRequestBodyBytes, 3 MiB) answers with
    `limit is 3145728`. Nothing is stored either way."""
    import pytest

    from gpudra.cluster.store import StoreError

    store = Store(str(tmp_path))
    with pytest.raises(StoreError) as invalid:
        store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}})
    assert invalid.value.status == 422 and str(invalid.value).startswith('Pod "p" is invalid: ')
    huge = _pod(name="q")
    huge["spec"] = {"containers": [{"name": "c", "image": "busybox", "args": ["x" * (3 * 2**20)]}]}
    with pytest.raises(StoreError) as too_large:
        store.create(huge)
    assert too_large.value.status == 413 and str(too_large.value) == f"Request entity too large: limit is {3 * 2**20}"
    assert store.list("Pod") == []


def test_a_state_directory_that_is_a_file_is_a_store_error_not_a_traceback_posix_mkdir(tmp_path):
    """POSIX mkdir(2): EEXIST when the path names an existing file. A cluster directory given as a plain file makes
    every write fail with that error, which the store reports as its own error (a message for `gpudra`, which
    prints StoreErrors and exits), naming the path and the system's words for the errno."""
    import errno

    import pytest

    from gpudra.cluster.store import StoreError

    not_a_dir = tmp_path / "cluster"
    not_a_dir.write_text("a file")
    with pytest.raises(StoreError) as error:
        Store(str(not_a_dir)).create(_pod(name="p"))
    assert error.value.status == 500
    assert str(not_a_dir) in str(error.value) and os.strerror(errno.EEXIST) in str(error.value)
    assert not_a_dir.read_text() == "a file"


def test_null_annotations_are_an_empty_map_objectmeta_types_go(tmp_path):
    """staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go: ObjectMeta.Annotations is a map[string]string
    (`json:"annotations,omitempty"`), and Go's encoding/json unmarshals JSON null into a map as nil: a manifest
    whose `annotations:` has nothing under it is an object without annotations, created, replaced and applied
    again as such (it crashed the store and `gpudra apply` with a TypeError). A string is no map: 422."""
    import pytest

    from gpudra.api.load import Document
    from gpudra.cluster.apply import apply_document
    from gpudra.cluster.store import StoreError, created_serial, public_view

    store = Store(str(tmp_path))
    created = store.create(_pod(name="p", annotations=None))
    assert "annotations" not in public_view(created)["metadata"]
    again = json_copy(created)
    again["metadata"]["annotations"] = None
    replaced = store.replace(again)
    assert "annotations" not in public_view(replaced)["metadata"]
    assert created_serial(replaced) == created_serial(created) > 0  # the creation order survives the replace
    with pytest.raises(StoreError) as not_a_map:
        store.create(_pod(name="s", annotations="x"))
    assert not_a_map.value.status == 422 and "metadata.annotations" in str(not_a_map.value)

    manifest = _pod(name="q", annotations=None)
    assert apply_document(store, Document(json_copy(manifest), "q.yaml", 1)) == "pod/q created"
    assert apply_document(store, Document(json_copy(manifest), "q.yaml", 1)) == "pod/q unchanged"


def test_a_lost_version_counter_never_issues_a_version_twice_etcd3_store_go(tmp_path):
    """etcd's revision only grows, and the API server's resourceVersion is that revision (etcd3/store.go decodes
    each write with its transaction's revision): no two writes ever get the same version, and a later write
    always gets a higher one. When the store's counter file is unreadable it counts on from its objects, so the
    next version must be above every version an object in the store carries, a replaced one's included."""
    store = Store(str(tmp_path))
    store.create(_pod(name="a"))
    store.create(_pod(name="b"))
    for round_ in range(3):  # "a" is written again: its version goes above "b"'s
        a = store.get("Pod", "default", "a")
        a["metadata"]["labels"] = {"round": str(round_)}
        store.replace(a)
    issued = {int(p["metadata"]["resourceVersion"]) for p in store.list("Pod")}
    (tmp_path / "store" / ".resourceVersion").write_text("garbage")
    c = store.create(_pod(name="c"))
    assert int(c["metadata"]["resourceVersion"]) > max(issued)


def test_an_object_without_name_or_generate_name_is_422_apimachinery_objectmeta_go(tmp_path):
    """staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go, ValidateObjectMetaAccessor: no name and
    no generateName is field.Required(metadata.name, "name or generateName is required"), which the registry
    returns through NewInvalid: HTTP 422. Nothing is stored."""
    import pytest

    from gpudra.cluster.store import StoreError

    store = Store(str(tmp_path))
    for metadata in ({}, {"generateName": ""}, {"name": ""}):
        with pytest.raises(StoreError) as error:
            store.create(_pod(**metadata))
        assert error.value.status == 422 and "name or generateName is required" in str(error.value)
    assert store.list("Pod") == []


def test_a_planted_file_with_an_overlong_uid_is_skipped_naming_the_uuid_length(tmp_path, caplog):
    """A uid is a UUID (the API server's FillObjectMetaSystemFields: uuid.NewUUID()), whose text form (RFC 4122)
    has 36 characters, computed here from Python's uuid module: a file written by hand with a longer uid is not
    an object of the store, and the warning says how long a uid may be."""
    import logging
    import uuid

    store = Store(str(tmp_path))
    pod = store.create(_pod(name="p"))
    pod["metadata"]["uid"] = "u" * 300
    (tmp_path / "store" / "pods" / "default" / "p.json").write_text(json.dumps(pod))
    with caplog.at_level(logging.WARNING, logger="gpudra.store"):
        assert store.get("Pod", "default", "p") is None
    uuid_length = len(str(uuid.UUID(int=0)))
    assert f"metadata.uid: must be no more than {uuid_length} characters (has 300)" in caplog.text


def _device_class(name: str, expression: str, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name, **metadata},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def test_a_device_class_generation_counts_its_spec_changes_registry_resource_deviceclass_strategy_go(tmp_path):
    """pkg/registry/resource/deviceclass/strategy.go: PrepareForCreate sets Generation = 1; PrepareForUpdate adds
    one when the spec is not semantically equal to the old one; staging/src/k8s.io/apiserver/pkg/registry/rest/
    update.go BeforeUpdate first copies the old generation, so a client's own value never sticks."""
    store = Store(str(tmp_path))
    created = store.create(_device_class("gpu", 'device.driver == "a"', generation=7))
    assert created["metadata"]["generation"] == 1
    same = json_copy(created)
    same["metadata"]["labels"] = {"team": "x"}  # metadata only: no spec change
    same["metadata"]["generation"] = 40
    assert store.replace(same)["metadata"]["generation"] == 1
    changed = json_copy(store.get("DeviceClass", None, "gpu"))
    changed["spec"]["selectors"][0]["cel"]["expression"] = 'device.driver == "b"'
    assert store.replace(changed)["metadata"]["generation"] == 2
    assert store.get("DeviceClass", None, "gpu")["metadata"]["generation"] == 2


def test_a_resource_slice_generation_counts_its_spec_changes_registry_resource_resourceslice_strategy_go(tmp_path):
    """pkg/registry/resource/resourceslice/strategy.go: Generation = 1 on create, + 1 on a spec change."""
    store = Store(str(tmp_path))
    slice_obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
                 "spec": {"driver": "dra.example.com", "nodeName": "n",
                          "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                          "devices": [{"name": "d0"}]}}
    created = store.create(slice_obj)
    assert created["metadata"]["generation"] == 1
    edited = json_copy(created)
    edited["spec"]["devices"].append({"name": "d1"})
    assert store.replace(edited)["metadata"]["generation"] == 2


def test_a_pod_update_cannot_set_a_generation_apiserver_registry_rest_update_go(tmp_path):
    """rest.BeforeUpdate copies the stored generation into the update whatever the client sent."""
    store = Store(str(tmp_path))
    created = store.create(_pod(name="p"))
    before = created["metadata"].get("generation")
    update = json_copy(created)
    update["metadata"]["generation"] = 12
    update["metadata"]["labels"] = {"a": "b"}
    assert store.replace(update)["metadata"].get("generation") == before


def test_an_update_from_a_copy_of_a_deleted_and_recreated_object_conflicts_apiserver_storage_preconditions(tmp_path):
    """staging/src/k8s.io/apiserver/pkg/storage/interfaces.go Preconditions.Check: "Precondition failed: UID in
    precondition: %v, UID in object meta: %v"; the registry's update takes the uid the client sent as that
    precondition, and a failed precondition is a 409 Conflict. A controller holding a copy of an object that was
    deleted and created again under the same name must not overwrite the new one."""
    import pytest

    from gpudra.cluster.kinds import StoreError

    store = Store(str(tmp_path))
    old = store.create(_pod(name="p"))
    store.delete("Pod", "default", "p", graceful=False)
    new = store.create(_pod(name="p"))
    stale = json_copy(old)
    stale["metadata"]["labels"] = {"stale": "yes"}
    stale["metadata"].pop("resourceVersion")
    with pytest.raises(StoreError) as refused:
        store.replace(stale)
    assert refused.value.status == 409
    assert (f"Precondition failed: UID in precondition: {old['metadata']['uid']}, UID in object meta: "
            f"{new['metadata']['uid']}") in str(refused.value)
    assert "labels" not in store.get("Pod", "default", "p")["metadata"]
    fresh = json_copy(new)
    fresh["metadata"]["labels"] = {"fresh": "yes"}
    assert store.replace(fresh)["metadata"]["labels"] == {"fresh": "yes"}
