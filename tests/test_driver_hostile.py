"""A claim's identity and content reach a root process: hostile UIDs, names, namespaces and configs
must give a clear per-claim error, touch nothing outside the driver's root and reserve nothing."""

from __future__ import annotations

import os
import uuid

import pytest
import yaml

from gpudra.discovery import open_backend
from gpudra.driver.checkpoint import load_checkpoint
from gpudra.driver.claimpaths import ClaimPathError, check_claim_identity, path_inside
from gpudra.driver.claims import ClaimSourceError, LocalClaimStore
from gpudra.driver.kubelet_client import allocated_claim
from gpudra.driver.paths import DriverPaths
from gpudra.driver.state import ClaimRef, DeviceState, PrepareError

NODE = "n1"
MPS = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
       "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}}


def mps_config() -> list[dict]:
    return [{"source": "FromClaim", "requests": [], "opaque": {"driver": "gpu.nvidia.com", "parameters": MPS}}]


class Node:
    """A driver whose --root is `<tmp>/root`, with an `<tmp>/outside` directory an attacker aims at."""

    def __init__(self, tmp_path):
        self.base = str(tmp_path)
        self.root = os.path.join(self.base, "root")
        self.outside = os.path.join(self.base, "outside")
        os.makedirs(os.path.join(self.outside, "victim"))
        with open(os.path.join(self.outside, "victim", "precious"), "w") as fh:
            fh.write("keep me")
        self.paths = DriverPaths(root=self.root)
        self.claims_dir = os.path.join(self.root, "claims")
        os.makedirs(self.claims_dir)
        self.backend = open_backend("simulated", profile="dgx-h100", node_name=NODE,
                                    state_path=self.paths.simulated_state)
        self.state = self.new_state()
        self.state.reconcile()

    def new_state(self) -> DeviceState:
        return DeviceState(driver_name="gpu.nvidia.com", node_name=NODE, backend=self.backend, paths=self.paths,
                           claims=LocalClaimStore(self.claims_dir), dynamic_mig=True, fsync=False, boot_id="b")

    def claim(self, name: str, device: str, *, uid: str | None = None, namespace: str = "default",
              file_name: str | None = None, directory: str | None = None, config=None) -> ClaimRef:
        obj = allocated_claim(name, [{"request": "gpu", "device": device}], node_name=NODE, namespace=namespace,
                              uid=uid, config=config)
        with open(os.path.join(directory or self.claims_dir, file_name or f"claim-{uuid.uuid4()}.yaml"), "w") as fh:
            yaml.safe_dump(obj, fh)
        return ClaimRef(namespace, name, obj["metadata"]["uid"])

    def outside_tree(self) -> list[tuple[str, str]]:
        """Every file and directory outside the root (with file contents)."""
        found = []
        for directory, dirs, files in os.walk(self.base):
            if directory == self.root or directory.startswith(self.root + os.sep):
                continue
            for d in dirs:
                found.append((os.path.join(directory, d), "dir"))
            for f in files:
                with open(os.path.join(directory, f), "rb") as fh:
                    found.append((os.path.join(directory, f), fh.read().decode("utf-8", "replace")))
        return sorted(found)

    def entries(self, state: DeviceState | None = None) -> dict:
        return (state or self.state).checkpoint_snapshot()["claims"]


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def _traversal_to(node: Node, start: str, target: str) -> str:
    return os.path.relpath(target, start)


def test_uid_with_dot_dot_creates_and_removes_nothing_outside_the_root(node):
    """Defect 1: an MPS claim whose UID climbs out of <plugin dir>/mps made prepare create
    victim/{pipe,shm,log} and rm -rf victim on rollback, unprepare and restart."""
    uid = _traversal_to(node, os.path.join(node.paths.plugin_dir, "mps"), os.path.join(node.outside, "victim"))
    assert uid.startswith("../")
    before = node.outside_tree()
    ref = node.claim("mps", "gpu-0", uid=uid, config=mps_config())
    with pytest.raises(PrepareError, match="invalid claim") as failure:
        node.state.prepare(ref)
    assert "uid" in str(failure.value)
    with pytest.raises(PrepareError, match="invalid claim"):
        node.state.unprepare(ref)
    node.new_state().reconcile()
    assert node.outside_tree() == before
    assert node.entries() == {}
    good = node.claim("good", "gpu-0", config=mps_config())  # gpu-0 is free again
    assert node.state.prepare(good)[0]["deviceName"] == "gpu-0"


@pytest.mark.parametrize("uid", [
    "a" * 300,  # longer than a file name may be
    "0123\x00abcd",  # NUL
    "ünï-cødé", "with space", "a/b", ".", "..", "-", "UID_" + "x" * 40,
    "0b6c5d8e-7f1a-4c2b-9d3e-5f6a7b8c9d0e\n",
])
def test_unusable_uids_are_clear_per_claim_errors_that_reserve_nothing(node, uid):
    """Defect 3: a long UID or one with a NUL left gpu-0 reserved in `PrepareStarted`, unprepare failed
    and the restarted driver refused to start; unicode, space or '/' gave an internal error."""
    ref = node.claim("bad", "gpu-0", uid=uid, config=mps_config())
    with pytest.raises(PrepareError, match="invalid claim.*uid"):
        node.state.prepare(ref)
    assert node.entries() == {} and load_checkpoint(node.paths.checkpoint)["claims"] == {}
    with pytest.raises(PrepareError, match="invalid claim.*uid"):
        node.state.unprepare(ref)
    restarted = node.new_state()
    restarted.reconcile()  # starts
    ok = node.claim("ok", "gpu-0")
    assert restarted.prepare(ok)[0]["deviceName"] == "gpu-0"
    restarted.unprepare(ok)
    assert node.entries(restarted) == {} and os.listdir(node.paths.cdi_spec_dir) == []


def test_claim_name_climbing_out_of_the_claims_directory_is_not_read(node):
    """Defect 4: the name `../../outside/evil2` made the local store read (and prepare) a claim file
    outside --claims."""
    name = os.path.join(_traversal_to(node, node.claims_dir, node.outside), "evil2")
    ref = node.claim(name, "gpu-1", file_name="evil2.yaml", directory=node.outside)
    with pytest.raises(PrepareError, match="invalid claim.*name"):
        node.state.prepare(ref)
    assert node.entries() == {}
    with pytest.raises(ClaimSourceError, match="name"):
        LocalClaimStore(node.claims_dir).get("default", name)


def test_claim_store_reads_only_files_inside_its_directory(node):
    """A claim file that is a symlink out of the claims directory is not followed."""
    outside_ref = node.claim("linked", "gpu-1", directory=node.outside, file_name="linked.yaml")
    os.symlink(os.path.join(node.outside, "linked.yaml"), os.path.join(node.claims_dir, "default_linked.yaml"))
    store = LocalClaimStore(node.claims_dir)
    assert store.get("default", "linked") is None
    with pytest.raises(PrepareError, match="not found"):
        node.state.prepare(outside_ref)
    inside = node.claim("inside", "gpu-2", file_name="default_inside.yaml")
    assert store.get("default", "inside")["metadata"]["uid"] == inside.uid


@pytest.mark.parametrize("namespace,name,field", [
    ("Default", "c", "namespace"), ("a" * 64, "c", "namespace"), ("", "c", "namespace"), ("..", "c", "namespace"),
    ("default", "", "name"), ("default", "a/b", "name"), ("default", "x" * 254, "name"), ("default", "..", "name"),
    ("default", "UPPER", "name"),
])
def test_invalid_namespaces_and_names_are_rejected_before_any_lookup(node, namespace, name, field):
    ref = ClaimRef(namespace, name, str(uuid.uuid4()))
    with pytest.raises(PrepareError, match=f"invalid claim.*{field}"):
        node.state.prepare(ref)
    assert node.entries() == {}


def test_claim_identity_follows_the_api_rules():
    check_claim_identity("kube-system", "my.claim-0", "1c3b9a3e-1b9f-4d6e-9a57-4c1d0e2f3a4b")
    with pytest.raises(ClaimPathError, match="uid"):
        check_claim_identity("default", "c", "1c3b9a3e1b9f4d6e9a574c1d0e2f3a4b")  # not the canonical form
    with pytest.raises(ClaimPathError, match="uid: must not be empty"):
        check_claim_identity("default", "c", "")
    with pytest.raises(ClaimPathError) as many:
        check_claim_identity("A", "B", "C")
    assert all(field in str(many.value) for field in ("namespace", "name", "uid"))


def test_paths_are_proven_to_stay_inside_their_root(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    assert path_inside(str(root), "a", "b") == os.path.join(os.path.realpath(root), "a", "b")
    for parts in (("..",), ("a", ".."), ("a/../../x",), ("/etc",), ("",), ("a\x00",)):
        with pytest.raises(ClaimPathError):
            path_inside(str(root), *parts)
    (root / "link").symlink_to(tmp_path)  # a component that resolves outside
    with pytest.raises(ClaimPathError, match="outside"):
        path_inside(str(root), "link", "x")
