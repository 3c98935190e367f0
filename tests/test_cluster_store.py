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
