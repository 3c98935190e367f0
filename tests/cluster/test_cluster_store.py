"""The local cluster's store is read without its lock (`get`, `list`, `version`: the drivers and every `gpudra`
command read while another process writes), so each write must replace a file whole: a reader sees the old object
or the new one, never an empty or half-written file.

The check is deterministic: a profile hook (`sys.setprofile`) stops the writing thread before and after every
built-in call it makes (each `open`, `write`, `rename`, `close`, …) and reads the object there with a second,
independent `Store` on the same directory, as another process would. No thread races another and nothing is timed:
every point at which the writer can be interrupted between two system calls is visited.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

import pytest

from gpudra.cluster.store import Store


def _pod(name: str, payload: str) -> dict[str, Any]:
    # large enough that a non-atomic writer would need several write() calls
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "labels": {"payload": "x"}},
            "spec": {"containers": [{"name": "c", "image": "busybox", "args": [payload] * 200}]}}


def _observing(write: Callable[[], Any], observe: Callable[[], None]) -> int:
    """Run `write` with `observe` called around every built-in call the writing thread makes; how many times."""
    seen = 0

    def hook(frame, event, arg):
        nonlocal seen
        if event in ("c_call", "c_return", "c_exception"):
            seen += 1
            observe()  # runs unprofiled: CPython does not profile inside a profile function

    sys.setprofile(hook)
    try:
        write()
    finally:
        sys.setprofile(None)
    return seen


def test_a_reader_sees_the_old_or_the_new_object_at_every_point_of_a_replace(tmp_path):
    writer, reader = Store(str(tmp_path)), Store(str(tmp_path))
    old = writer.create(_pod("p", "old" * 100))
    new = json.loads(json.dumps(old))
    new["spec"]["containers"][0]["args"] = ["new" * 100] * 300
    version_before = reader.version()
    seen_args: list[str] = []
    versions: set[int] = set()

    def observe() -> None:
        got = reader.get("Pod", "default", "p")  # a torn file raises JSONDecodeError here
        assert got is not None, "the object vanished during its replace"
        seen_args.append(got["spec"]["containers"][0]["args"][0][:3])
        assert [p["metadata"]["name"] for p in reader.list("Pod")] == ["p"]
        versions.add(reader.version())

    calls = _observing(lambda: writer.replace(new), observe)
    assert calls > 10, "the hook saw the writer's calls"
    assert set(seen_args) == {"old", "new"}, "both versions were observed"
    assert seen_args == sorted(seen_args, key=lambda a: a == "new"), "never back to the old one once new"
    assert versions == {version_before, version_before + 1}, "resourceVersion counter: old or new, never torn"
    assert reader.get("Pod", "default", "p") == writer.get("Pod", "default", "p")


def test_a_reader_never_sees_a_partial_object_while_it_is_created(tmp_path):
    writer, reader = Store(str(tmp_path)), Store(str(tmp_path))
    writer.create(_pod("first", "a"))
    states: list[str] = []

    def observe() -> None:
        got = reader.get("Pod", "default", "second")
        states.append("absent" if got is None else got["spec"]["containers"][0]["args"][0])
        assert len(reader.list("Pod")) in (1, 2)

    _observing(lambda: writer.create(_pod("second", "b" * 1000)), observe)
    assert states[0] == "absent" and states[-1] == "b" * 1000
    assert set(states) == {"absent", "b" * 1000}, "absent, then whole"


@pytest.mark.parametrize("graceful", [True, False])
def test_a_reader_sees_the_object_or_nothing_while_it_is_deleted(tmp_path, graceful):
    writer, reader = Store(str(tmp_path)), Store(str(tmp_path))
    pod = _pod("p", "z")
    pod["metadata"]["finalizers"] = ["example.com/keep"]
    writer.create(pod)
    states: list[str] = []

    def observe() -> None:
        got = reader.get("Pod", "default", "p")
        states.append("absent" if got is None else
                      "terminating" if got["metadata"].get("deletionTimestamp") else "live")

    outcome: list[str] = []
    _observing(lambda: outcome.append(writer.delete("Pod", "default", "p", graceful=graceful)), observe)
    if graceful:
        assert outcome == ["terminating"] and set(states) == {"live", "terminating"}
    else:
        assert outcome == ["deleted"] and set(states) == {"live", "absent"}


# ----- the API server's rules the store plays --------------------------------------------------------------------
# Facts from Kubernetes, not from gpudra: generateName appends 5 characters (k8s.io/apiserver storage/names,
# randomLength = 5) from k8s.io/apimachinery util/rand's alphabet "bcdfghjklmnpqrstvwxz2456789"; creating an
# existing name is 409 AlreadyExists; an object of a namespaced kind without a namespace lands in "default";
# cluster-scoped objects have none; a kind the server does not serve is 404 "no matches for kind".
K8S_NAME_ALPHABET = set("bcdfghjklmnpqrstvwxz2456789")
SPEC = {"containers": [{"name": "c", "image": "busybox"}]}  # the store validates what it writes


def _bare_pod(**metadata) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": SPEC}


def test_generate_name_appends_five_characters_of_the_api_servers_alphabet(tmp_path):
    store = Store(str(tmp_path))
    names = {store.create(_bare_pod(generateName="web-"))["metadata"]["name"]
             for _ in range(20)}
    assert len(names) == 20
    for name in names:
        assert name.startswith("web-") and len(name) == len("web-") + 5 and set(name[4:]) <= K8S_NAME_ALPHABET


def test_generate_name_draws_again_when_the_name_is_taken(tmp_path, monkeypatch):
    from gpudra.cluster import store as store_module

    store = Store(str(tmp_path))
    store.create(_bare_pod(name="web-bbbbb"))
    draws = iter("bbbbb" + "ccccc")
    monkeypatch.setattr(store_module.random, "choice", lambda alphabet: next(draws))
    created = store.create(_bare_pod(generateName="web-"))
    assert created["metadata"]["name"] == "web-ccccc"


def test_creating_an_existing_name_is_409_already_exists(tmp_path):
    from gpudra.cluster.store import StoreError

    store = Store(str(tmp_path))
    store.create(_bare_pod(name="p"))
    with pytest.raises(StoreError) as error:
        store.create(_bare_pod(name="p"))
    assert error.value.status == 409 and 'pods "p" already exists' in str(error.value)


def test_namespaces_default_for_namespaced_kinds_and_vanish_for_cluster_scoped_ones(tmp_path):
    store = Store(str(tmp_path))
    pod = store.create(_bare_pod(name="p"))
    assert pod["metadata"]["namespace"] == "default"
    node = store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "namespace": "ignored"}})
    assert "namespace" not in node["metadata"]
    assert store.get("Node", None, "n") == node and store.get("Pod", "default", "p") == pod


def test_an_unknown_kind_is_404_no_matches_for_kind(tmp_path):
    from gpudra.cluster.store import StoreError

    store = Store(str(tmp_path))
    with pytest.raises(StoreError) as error:
        store.create({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    assert error.value.status == 404 and 'no matches for kind "Widget"' in str(error.value)


def test_a_namespace_folder_gone_during_a_list_hides_only_its_own_objects(tmp_path):
    store = Store(str(tmp_path))
    for namespace in ("a", "c"):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        store.create(_bare_pod(name="p", namespace=namespace))
    # listed but gone when read (a namespace emptied by another process): a dangling link behaves so
    (tmp_path / "store" / "pods" / "b").symlink_to(tmp_path / "nowhere")
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in store.list("Pod")] == [("a", "p"), ("c", "p")]


def test_a_repeated_event_counts_up_and_a_different_one_is_new(tmp_path):
    store = Store(str(tmp_path))
    pod = store.create(_bare_pod(name="p"))
    store.record_event(pod, "Normal", "Scheduled", "assigned p to n1", "default-scheduler")
    again = store.record_event(pod, "Normal", "Scheduled", "assigned p to n1", "default-scheduler")
    assert again["count"] == 2 and len(store.events_for(pod)) == 1
    store.record_event(pod, "Normal", "Scheduled", "assigned p to n2", "default-scheduler")  # another message
    store.record_event(pod, "Warning", "FailedScheduling", "assigned p to n1", "default-scheduler")  # another reason
    events = store.events_for(pod)
    assert sorted((e["reason"], e["message"], e["count"]) for e in events) == [
        ("FailedScheduling", "assigned p to n1", 1), ("Scheduled", "assigned p to n1", 2),
        ("Scheduled", "assigned p to n2", 1)]


def test_a_failed_write_whose_temp_file_is_gone_reports_its_own_error(tmp_path):
    """Cleaning up after a failed write must not replace the failure with its own (the temp file may be gone)."""
    import os

    from gpudra.atomicfile import set_step_hook, write_atomic

    target = tmp_path / "f.json"
    target.write_text("old")

    def fail(label: str, step: str, path: str) -> None:
        if step == "rename":
            for name in os.listdir(tmp_path):
                if name.startswith(".f.json.") and name.endswith(".tmp"):
                    os.unlink(tmp_path / name)
            raise RuntimeError("disk full")

    previous = set_step_hook(fail)
    try:
        with pytest.raises(RuntimeError, match="disk full"):
            write_atomic(str(target), b"new", mode=0o644, label="test", fsync=False)
    finally:
        set_step_hook(previous)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["f.json"]
