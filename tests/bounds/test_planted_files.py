"""Files planted where gpudra reads state (issue 20's rule, carried to every reader): a FIFO, a device, a symlink, an
oversized or deeply nested file in the local cluster's store, the kubelet stand-in's records, the simulated GPUs'
state file and the sharing log. Each is refused or skipped with a message; none blocks the reader (a FIFO opened
for reading without O_NONBLOCK waits for a writer forever), none is read past its bound, none is written through.

Each reader runs in a thread joined with a generous limit: the limit only turns a hang into a failure message, it
is no verdict on speed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Callable

import pytest

from gpudra.cluster.kubelet import read_record, record_path
from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_nodes
from gpudra.cluster.nodes import node_object
from gpudra.cluster.store import MAX_OBJECT_BYTES, StoreError
from gpudra.discovery import open_backend
from gpudra.discovery.backend import MigError
from gpudra.gpuplugin.sharing import RecordingSharing, read_sharing_log
from gpudra.regularfile import UnsafeFileError, read_regular_file

HANG_LIMIT_S = 60.0


def finishes(call: Callable[[], Any]) -> Any:
    """`call()`'s answer (or its exception, re-raised), failing the test if it never returns."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_LIMIT_S)
    assert not thread.is_alive(), "the reader blocked on a planted file"
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.fixture
def cluster(tmp_path):
    cluster = ClusterDir(str(tmp_path / "c"))
    config = ClusterConfig(nodes=parse_nodes("l4-node"))
    cluster.save_config(config)
    cluster.store.create(node_object(config.nodes[0], config.kubernetes_version))
    return cluster


def test_the_shared_reader_refuses_fifos_devices_symlinks_and_oversized_files(tmp_path):
    fifo, link, big, fine = (str(tmp_path / n) for n in ("fifo", "link", "big", "fine"))
    os.mkfifo(fifo)
    os.symlink("/etc/hostname", link)
    with open(big, "wb") as fh:
        fh.write(b"x" * 1001)
    with open(fine, "wb") as fh:
        fh.write(b"x" * 1000)
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        finishes(lambda: read_regular_file(fifo, 1000))
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        finishes(lambda: read_regular_file("/dev/zero", 1000))
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        read_regular_file(link, 1000)
    with pytest.raises(UnsafeFileError, match="larger than the 1000 bytes"):
        read_regular_file(big, 1000)
    assert read_regular_file(fine, 1000) == b"x" * 1000
    assert read_regular_file(str(tmp_path / "absent"), 1000) is None


def test_a_fifo_or_huge_object_in_the_store_is_skipped_and_reported(cluster, caplog):
    store = cluster.store
    folder = os.path.join(store.root, "configmaps", "default")
    os.makedirs(folder, exist_ok=True)
    os.mkfifo(os.path.join(folder, "fifo.json"))
    huge = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "huge", "namespace": "default"},
            "data": {"k": "x" * MAX_OBJECT_BYTES}}
    with open(os.path.join(folder, "huge.json"), "w") as fh:
        json.dump(huge, fh)
    with open(os.path.join(folder, "deep.json"), "w") as fh:
        fh.write("[" * 200000 + "]" * 200000)
    store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good", "namespace": "default"}})
    with caplog.at_level(logging.WARNING, logger="gpudra.store"):
        listed = finishes(lambda: store.list("ConfigMap"))
        assert finishes(lambda: store.get("ConfigMap", "default", "fifo")) is None
    assert [o["metadata"]["name"] for o in listed] == ["good"]
    reported = " ".join(r.getMessage() for r in caplog.records)
    for name in ("fifo.json", "huge.json", "deep.json"):
        assert name in reported
    assert "not a regular file" in reported and "larger than" in reported


def test_the_store_refuses_to_write_an_object_it_could_not_read_back(cluster):
    big = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big", "namespace": "default"},
           "data": {"k": "x" * MAX_OBJECT_BYTES}}
    with pytest.raises(StoreError, match="too large") as err:
        cluster.store.create(big)
    assert err.value.status == 413
    assert cluster.store.get("ConfigMap", "default", "big") is None


def test_a_fifo_planted_as_a_kubelet_record_reads_as_not_started(cluster):
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "0b9a4a4e-1b9f-4d6e-9a57-4c1d0e2f3a4b"}}
    path = record_path(cluster, "l4-node", pod)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkfifo(path)
    assert finishes(lambda: read_record(cluster, "l4-node", pod)) is None


def test_a_fifo_or_symlink_as_the_simulated_gpu_state_is_an_error_not_a_hang(tmp_path):
    fifo = str(tmp_path / "fifo-state.json")
    os.mkfifo(fifo)
    backend = open_backend("simulated", profile="dgx-h100", node_name="n", state_path=fifo)
    with pytest.raises(MigError, match="not a regular file"):
        finishes(backend.inventory)
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    link = str(tmp_path / "link-state.json")
    os.symlink(str(victim), link)
    linked = open_backend("simulated", profile="dgx-h100", node_name="n", state_path=link)
    with pytest.raises(MigError, match="symbolic link"):
        linked.create_mig_device(3, 15, 6)
    assert victim.read_text() == "{}"


def test_the_sharing_log_is_not_written_through_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("original")
    log = tmp_path / "state" / "sharing.log"
    log.parent.mkdir()
    os.symlink(str(victim), str(log))
    sharing = RecordingSharing(str(log))
    with pytest.raises(OSError):
        sharing.set_compute_mode("GPU-a", "EXCLUSIVE_PROCESS")
    assert victim.read_text() == "original"
    os.unlink(log)
    sharing.set_compute_mode("GPU-a", "EXCLUSIVE_PROCESS")
    assert read_sharing_log(str(log)) == sharing.calls[1:]  # the refused step was recorded in memory only
    assert os.stat(log).st_mode & 0o077 == 0


def test_fifos_planted_as_small_state_files_block_no_command(cluster, tmp_path):
    """The store's resourceVersion, a pid file, a log, the driver's republish stamp: a FIFO in their place makes
    each read answer 'nothing there' instead of waiting for a writer."""
    from gpudra.cluster.processes import read_pid

    version = os.path.join(cluster.store.root, ".resourceVersion")
    os.unlink(version)
    os.mkfifo(version)
    assert finishes(cluster.store.version) == 0
    pid = str(tmp_path / "pid")
    os.mkfifo(pid)
    assert finishes(lambda: read_pid(pid)) is None
