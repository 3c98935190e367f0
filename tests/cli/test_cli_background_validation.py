"""Validation in a forked child while the command computes (gpudra.cli.background): the same answer, exit code
and messages as validating first, whatever the work does meanwhile."""

from __future__ import annotations

import json
import os
import sys

import pytest
from click.testing import CliRunner

from gpudra.api.load import Document
from gpudra.cli import background, cli
from gpudra.cli.background import Alongside, ValidationFailed

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is used on Linux only")

DRIVER = "gpu.example.com"


def slice_doc(node: str, bad: bool = False) -> dict:
    attributes = {"productName": {"string": "H100"}}
    if bad:
        attributes["bad name"] = {"string": "x"}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpus"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": attributes} for i in range(2)]}}


def cluster(bad: bool = False) -> list[dict]:
    objects: list[dict] = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
                            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}}]
    for index in range(3):
        node = f"node-{index}"
        objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})
        objects.append(slice_doc(node, bad=bad and index == 1))
    for index in range(4):
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                        "metadata": {"name": f"c{index}", "namespace": "default"},
                        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu",
                                                                                        "count": 2}}]}}})
        objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{index}", "namespace": "default"},
                        "spec": {"containers": [{"name": "main", "image": "x",
                                                 "resources": {"claims": [{"name": "g"}]}}],
                                 "resourceClaims": [{"name": "g", "resourceClaimName": f"c{index}"}]}})
    return objects


def documents(objects: list[dict]) -> list[Document]:
    return [Document(obj, "in.json", index) for index, obj in enumerate(objects, start=1)]


@pytest.fixture
def forking(monkeypatch):
    """Every input is validated in a child (whatever its size or the machine's cores)."""
    monkeypatch.setattr(background, "MIN_DOCUMENTS", 1)
    monkeypatch.setattr(background, "_cores", lambda: 2)
    children = []
    real = background._Child

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, docs, *release):
            super().__init__(docs, *release)
            children.append(self.pid)

    monkeypatch.setattr(background, "_Child", Counted)
    return children


def run(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("bad", [False, True], ids=["valid", "invalid"])
@pytest.mark.parametrize("command", [["schedule", "-o", "json"], ["explain", "pod/p3", "-o", "json"]])
def test_forked_validation_answers_as_validating_first(tmp_path, monkeypatch, forking, bad, command):
    path = tmp_path / "in.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster(bad)}))
    args = [*command, "-f", str(path)]
    forked = run(args)
    assert forking, "the child validated"
    monkeypatch.setattr(background, "_cores", lambda: 1)  # no second core: validated in this process first
    inline = run(args)
    assert len(forking) == 1
    assert forked == inline
    if bad:
        code, out, err = forked
        assert code == 1 and out == ""
        assert "items[4] (ResourceSlice/node-1-gpus): spec.devices[0].attributes[bad name]" in err
        assert "refuses invalid input" in err


def test_invalid_input_wins_over_what_the_work_raised(forking):
    with pytest.raises(ValidationFailed) as failed:
        with Alongside(documents(cluster(bad=True))):
            raise KeyError("the scheduler choked on the malformed slice")
    assert len(failed.value.lines) == 2 and "bad name" in failed.value.lines[0]
    assert forking


def test_valid_input_lets_the_work_error_through(forking):
    with pytest.raises(KeyError):
        with Alongside(documents(cluster())):
            raise KeyError("a real error of the work")


def test_check_stops_the_work_once_the_child_found_problems(forking):
    alongside = Alongside(documents(cluster(bad=True)))
    with pytest.raises(ValidationFailed):
        with alongside as check:
            alongside.child.result()  # wait for the child's answer instead of the clock
            check()
            pytest.fail("check() let invalid input's work go on")


def test_check_is_quiet_for_valid_input(forking):
    alongside = Alongside(documents(cluster()))
    with alongside as check:
        alongside.child.result()
        check()
        check()
    assert forking


def test_a_child_that_dies_is_replaced_by_validating_here(forking, monkeypatch):
    monkeypatch.setattr(background, "error_lines", lambda docs, progress=None, render=True: os._exit(9))
    validated_here = []

    def here(docs):
        validated_here.append(len(docs))
        return ["in.json:doc 1: found here"]

    with pytest.raises(ValidationFailed) as failed:
        with Alongside(documents(cluster()), validate_here=here):
            pass
    assert failed.value.lines == ["in.json:doc 1: found here"] and validated_here == [len(cluster())]


def test_interrupt_does_not_wait_and_leaves_no_child(forking):
    with pytest.raises(KeyboardInterrupt):
        with Alongside(documents(cluster(bad=True))):
            raise KeyboardInterrupt
    (pid,) = forking
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped already


def test_small_inputs_and_one_core_validate_here(monkeypatch):
    forks = []
    monkeypatch.setattr(background, "_Child", lambda docs, *release: forks.append(docs))
    with pytest.raises(ValidationFailed):
        with Alongside(documents(cluster(bad=True))):  # fewer than MIN_DOCUMENTS
            pytest.fail("the work ran on invalid input")
    monkeypatch.setattr(background, "MIN_DOCUMENTS", 1)
    monkeypatch.setattr(background, "_cores", lambda: 1)
    with Alongside(documents(cluster())):
        pass
    assert forks == []
