"""Atomic writes, deterministically: a failure injected at every step of every kind of write
(checkpoint, CDI spec, simulated GPU state) leaves the previous version loadable; the OS-level
call sequence proves temp file + fsync + rename + directory fsync; kill points fire at named
places; modes do not depend on the umask; temp files of interrupted writes are cleaned at start."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys

import pytest

from gpudra import atomicfile
from gpudra.cdi import ContainerEdits, Device, DeviceNode, Spec, load_spec_file, write_spec
from gpudra.discovery import open_backend
from gpudra.kubeletplugin.checkpoint import PREPARE_COMPLETED, load_checkpoint, save_checkpoint
from gpudra.kubeletplugin.paths import DriverPaths
from tests.support.killpoint import KillPoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILL_AT = os.path.join(REPO, "tests", "support", "kill_at.py")  # the CLI or a snippet with a kill point installed


class InjectedFailure(OSError):
    pass


class FailAt:
    """A step hook that fails `step` of `label` writes and records every step it sees."""

    def __init__(self, label: str, step: str | None):
        self.label, self.step = label, step
        self.seen: list[tuple[str, str]] = []

    def __call__(self, label: str, step: str, path: str) -> None:
        self.seen.append((label, step))
        if label == self.label and step == self.step:
            raise InjectedFailure(f"injected failure at {label}:{step}")


@pytest.fixture
def hook():
    installed: list[FailAt] = []

    def install(label: str, step: str | None) -> FailAt:
        h = FailAt(label, step)
        atomicfile.set_step_hook(h)
        installed.append(h)
        return h

    yield install
    atomicfile.set_step_hook(None)


def _checkpoint_data(n: int) -> dict:
    return {"nodeBootID": "b", "claims": {f"u{j}": {"state": PREPARE_COMPLETED, "devices": []} for j in range(n)}}


def _spec(n: int) -> Spec:
    return Spec(kind="k8s.gpu.nvidia.com/claim",
                devices=[Device(f"d{j}", ContainerEdits(device_nodes=[DeviceNode(path=f"/dev/nvidia{j}")]))
                         for j in range(n)])


class Target:
    """One kind of atomically written file: how to write version n, how to read what is there."""

    def __init__(self, tmp_path, label: str, fsync: bool):
        self.dir = str(tmp_path)
        self.label = label
        self.fsync = fsync
        if label == "checkpoint":
            self.path = os.path.join(self.dir, "checkpoint.json")
        elif label == "cdi":
            self.path = os.path.join(self.dir, "k8s.gpu.nvidia.com-claim_u.yaml")
        else:
            self.path = os.path.join(self.dir, "gpus.json")
            self.backend = open_backend("simulated", profile="dgx-h100", node_name="n", state_path=self.path)

    def write(self, n: int) -> None:
        if self.label == "checkpoint":
            save_checkpoint(self.path, _checkpoint_data(n), fsync=self.fsync)
        elif self.label == "cdi":
            write_spec(_spec(n), self.dir, "k8s.gpu.nvidia.com-claim_u", fsync=self.fsync)
        else:  # version n = n one-slice MIG devices on GPU 0 (one more each time)
            self.backend.create_mig_device(0, 19, n - 1)

    def read(self) -> int:
        if self.label == "checkpoint":
            return len(load_checkpoint(self.path)["claims"])
        if self.label == "cdi":
            return len(load_spec_file(self.path).devices)
        fresh = open_backend("simulated", profile="dgx-h100", node_name="n", state_path=self.path)
        return len(fresh.inventory().gpu_by_minor(0).mig_devices)

    def leftovers(self) -> list[str]:
        return [f for f in os.listdir(self.dir) if f.endswith(".tmp")]


# the writes the driver does, with the steps each has (CDI specs live on a tmpfs and simulated
# GPU state only has to outlive a crash: both skip fsync); CDI specs written by hand fsync
WRITES = [("checkpoint", True), ("cdi", False), ("cdi", True), ("simulated-gpus", False)]
CASES = [(label, fsync, step) for label, fsync in WRITES
         for step in atomicfile.STEPS if fsync or step in ("write", "rename")]


@pytest.mark.parametrize("label,fsync,step", CASES)
def test_a_failure_at_any_step_leaves_the_previous_version(tmp_path, hook, label, fsync, step):
    target = Target(tmp_path, label, fsync)
    target.write(1)
    target.write(2)
    h = hook(label, step)
    with pytest.raises(InjectedFailure):
        target.write(3)
    assert (label, step) in h.seen
    # before the rename the old version is all there is; a failed directory fsync comes after
    # the rename, so the new version is visible (complete) and only its durability is unknown
    assert target.read() == (3 if step == "dirsync" else 2)
    assert target.leftovers() == [] or label == "checkpoint" and target.leftovers() == [".checkpoint.json.tmp"]
    atomicfile.set_step_hook(None)
    target.write(3 if step != "dirsync" else 4)  # the next write works
    assert target.read() == (3 if step != "dirsync" else 4)


@pytest.mark.parametrize("label,fsync", WRITES)
def test_each_write_goes_through_every_step_in_order(tmp_path, hook, label, fsync):
    target = Target(tmp_path, label, fsync)
    target.write(1)
    h = hook("none", None)
    target.write(2)
    expected = [s for s in atomicfile.STEPS if fsync or s in ("write", "rename")]
    assert h.seen == [(label, s) for s in expected]


class SyscallSpy:
    """Records, at the os level, which files are written, fsynced and renamed (whatever code does it)."""

    def __init__(self, monkeypatch, target: str):
        self.target = os.path.abspath(target)
        self.fd_path: dict[int, str] = {}
        self.events: list[tuple[str, str]] = []
        self.write_flags: list[int] = []
        real_open, real_write, real_fsync, real_replace = os.open, os.write, os.fsync, os.replace

        def spy_open(path, flags, *args, **kw):
            fd = real_open(path, flags, *args, **kw)
            self.fd_path[fd] = os.path.abspath(os.fsdecode(path))
            if flags & (os.O_WRONLY | os.O_RDWR):
                self.events.append(("open-w", self.fd_path[fd]))
                self.write_flags.append(flags)
            return fd

        def spy_write(fd, data):
            self.events.append(("write", self.fd_path.get(fd, "?")))
            return real_write(fd, data)

        def spy_fsync(fd):
            self.events.append(("fsync", self.fd_path.get(fd, "?")))
            return real_fsync(fd)

        def spy_replace(src, dst, *args, **kw):
            self.events.append(("rename", f"{os.path.abspath(src)} -> {os.path.abspath(dst)}"))
            return real_replace(src, dst, *args, **kw)

        monkeypatch.setattr(os, "open", spy_open)
        monkeypatch.setattr(os, "write", spy_write)
        monkeypatch.setattr(os, "fsync", spy_fsync)
        monkeypatch.setattr(os, "replace", spy_replace)

    def assert_durable_replacement(self) -> None:
        """The target is never written in place; what replaces it was fsynced after its last write;
        the directory is fsynced after the rename."""
        assert ("open-w", self.target) not in self.events, "the target was opened for writing in place"
        renames = [i for i, (kind, what) in enumerate(self.events) if kind == "rename" and what.endswith(" -> " + self.target)]
        assert renames, "the target was never replaced by a rename"
        for r in renames:
            tmp = self.events[r][1].split(" -> ")[0]
            before = self.events[:r]
            last_write = max(i for i, e in enumerate(before) if e == ("write", tmp))
            assert ("fsync", tmp) in before[last_write:], "renamed before its data was fsynced"
            after = self.events[r:]
            assert ("fsync", os.path.dirname(self.target)) in after, "directory not fsynced after the rename"


def test_the_checkpoint_is_never_written_in_place_nor_without_fsync(tmp_path, monkeypatch):
    path = str(tmp_path / "checkpoint.json")
    save_checkpoint(path, _checkpoint_data(1))
    spy = SyscallSpy(monkeypatch, path)
    for n in (3, 0, 2):
        save_checkpoint(path, _checkpoint_data(n))
    spy.assert_durable_replacement()
    assert load_checkpoint(path) == _checkpoint_data(2)
    fresh = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    assert spy.write_flags and all(flags & fresh == fresh for flags in spy.write_flags)


def test_a_link_planted_at_a_temp_name_is_not_written_through(tmp_path, monkeypatch):
    """Issue 20, finding 7: the checkpoint's temp file had a fixed name and was opened without O_EXCL, so a hard
    link planted there was written through (into any file of the filesystem). Now every temp file is new, under a
    name no one can guess; planted at the old fixed name or (with the token guessed) at the next name, a hard link
    or a symlink is left alone, as is the file it names."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("precious")
    state = tmp_path / "state"
    state.mkdir()
    path = str(state / "checkpoint.json")
    save_checkpoint(path, _checkpoint_data(1))
    os.link(victim, state / ".checkpoint.json.tmp")  # the old fixed name
    tokens = iter(["guessed", "guessed2", "fresh"])
    monkeypatch.setattr(atomicfile.secrets, "token_hex", lambda _: next(tokens))
    os.link(victim, state / f".checkpoint.json.{os.getpid()}-guessed.tmp")
    os.symlink(victim, state / f".checkpoint.json.{os.getpid()}-guessed2.tmp")
    save_checkpoint(path, _checkpoint_data(3))
    assert victim.read_text() == "precious" and os.stat(victim).st_nlink == 3
    assert len(load_checkpoint(path)["claims"]) == 3
    assert os.stat(path).st_nlink == 1 and os.listdir(outside) == ["victim"]


def test_prepare_and_unprepare_persist_the_checkpoint_durably(tmp_path, monkeypatch):
    from test_driver_state import Env

    env = Env(tmp_path)
    env.state.fsync = True
    env.state.reconcile()
    ref = env.claim("a", ["gpu-0", "gpu-1-mig-1g10gb-19-0"])
    spy = SyscallSpy(monkeypatch, env.paths.checkpoint)
    env.state.prepare(ref)
    env.state.unprepare(ref)
    spy.assert_durable_replacement()


# -- kill points ---------------------------------------------------------------------------------------------

_KILL_SCRIPT = """
import sys
from gpudra.kubeletplugin.checkpoint import save_checkpoint
for n in range(1, 6):
    save_checkpoint(sys.argv[1], {"nodeBootID": "b", "claims": {f"u{j}": {"state": "PrepareCompleted", "devices": []}
                                                                for j in range(n)}})
    print(n, flush=True)
"""


@pytest.mark.parametrize("step,count,survivor", [("write", 1, None), ("rename", 3, 2), ("dirsync", 2, 2),
                                                 ("fsync", 5, 4)])
def test_a_kill_point_sigkills_at_the_named_step(tmp_path, step, count, survivor):
    path = str(tmp_path / "checkpoint.json")
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, KILL_AT, f"checkpoint:{step}:{count}", "-c", _KILL_SCRIPT, path], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.split() == [str(n) for n in range(1, count)]
    data = load_checkpoint(path)
    # killed before the directory fsync: the rename is done, only not yet durable
    assert (None if data is None else len(data["claims"])) == (count if step == "dirsync" else survivor)


def test_no_test_hook_in_product_code(tmp_path):
    """Issue 20, finding 9: atomicfile read GPUDRA_TEST_KILL_AT at import and armed a SIGKILL in every gpudra
    process, the root driver included. No product file names a test variable, and a process started with the old
    variable set writes its checkpoint and lives."""
    package = os.path.join(REPO, "gpudra")
    named = [os.path.relpath(os.path.join(root, name), REPO) for root, _, names in os.walk(package)
             for name in names if name.endswith(".py")
             and "GPUDRA_TEST" in open(os.path.join(root, name), encoding="utf-8").read()]
    assert named == []
    path = str(tmp_path / "checkpoint.json")
    env = {**os.environ, "PYTHONPATH": REPO, "GPUDRA_TEST_KILL_AT": "*:write:1", "GPUDRA_CRASH_KILL_AT": "*:write:1"}
    proc = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, path], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(load_checkpoint(path)["claims"]) == 5


def test_kill_points_reject_unknown_steps():
    with pytest.raises(ValueError, match="bad kill point"):
        KillPoint.parse("checkpoint:flush:1")
    with pytest.raises(ValueError, match="bad kill point"):
        KillPoint.parse("checkpoint:write:0")


# -- modes -----------------------------------------------------------------------------------------------------


@pytest.fixture
def umask_000():
    old = os.umask(0)
    yield
    os.umask(old)


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_modes_do_not_follow_the_umask(tmp_path, umask_000):
    paths = DriverPaths(root=str(tmp_path))
    paths.make_dirs()
    assert _mode(paths.plugin_dir) == 0o700
    assert _mode(paths.cdi_spec_dir) == 0o755
    save_checkpoint(paths.checkpoint, _checkpoint_data(1))
    assert _mode(paths.checkpoint) == 0o600
    spec = write_spec(_spec(1), paths.cdi_spec_dir, "k8s.gpu.nvidia.com-claim_u", fsync=False)
    assert _mode(spec) == 0o644
    backend = open_backend("simulated", profile="dgx-h100", node_name="n", state_path=paths.simulated_state)
    backend.create_mig_device(0, 19, 0)
    assert _mode(os.path.dirname(paths.simulated_state)) == 0o700
    assert _mode(paths.simulated_state) == 0o644
    os.chmod(paths.plugin_dir, 0o777)  # an existing directory with a wrong mode is fixed too
    paths.make_dirs()
    assert _mode(paths.plugin_dir) == 0o700


# -- stale temp files --------------------------------------------------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temp_files_of_interrupted_writes_are_removed_at_start(tmp_path):
    from test_driver_state import Env

    env = Env(tmp_path)
    env.state.reconcile()
    dead, live = _dead_pid(), os.getppid()
    stale = [os.path.join(env.paths.plugin_dir, ".checkpoint.json.tmp"),
             os.path.join(env.paths.cdi_spec_dir, f".k8s.gpu.nvidia.com-claim_x.yaml.{dead}-7.tmp"),
             os.path.join(env.paths.cdi_spec_dir, f".k8s.gpu.nvidia.com-claim_y.yaml.{os.getpid()}-7.tmp"),
             env.paths.simulated_state.replace("gpus.json", f".gpus.json.{dead}-1.tmp")]
    kept = [os.path.join(env.paths.cdi_spec_dir, f".k8s.gpu.nvidia.com-claim_z.yaml.{live}-1.tmp"),  # being written
            os.path.join(env.paths.cdi_spec_dir, ".other-vendor.yaml.tmp"),  # not ours
            os.path.join(env.paths.cdi_spec_dir, "notes.tmp")]
    for path in stale + kept:
        with open(path, "w") as fh:
            fh.write("partial")
    env.new_state().reconcile()
    assert [p for p in stale if os.path.exists(p)] == []
    assert [p for p in kept if os.path.exists(p)] == kept


def test_a_write_that_fails_removes_its_temp_file(tmp_path, hook):
    hook("cdi", "rename")
    with pytest.raises(InjectedFailure):
        write_spec(_spec(1), str(tmp_path), "k8s.gpu.nvidia.com-claim_u")
    assert os.listdir(tmp_path) == []


def test_the_kill_point_wrapper_kills_a_gpudra_command(tmp_path):
    """tests/support/kill_at.py runs the CLI with the kill point installed first: `mig apply` on a simulated node
    dies at its first write, and the node's GPU state is still the previous one."""
    import yaml

    from gpudra.catalog import gpu_model
    from gpudra.mig.config import generate_config

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(generate_config([gpu_model("h100")]), sort_keys=False))
    root = tmp_path / "root"
    args = ["mig", "apply", "-f", str(config), "-c", "all-balanced", "--backend", "simulated", "--root", str(root)]
    env = {**os.environ, "PYTHONPATH": REPO}
    killed = subprocess.run([sys.executable, KILL_AT, "simulated-gpus:write:1", *args], env=env, capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    done = subprocess.run([sys.executable, KILL_AT, "simulated-gpus:write:1000", *args], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.count("changed: gpu-") == 8, done.stderr


def test_a_directory_already_at_its_mode_is_not_chmodded(tmp_path, monkeypatch, umask_000):
    """POSIX chmod(2) fails with EPERM when the caller does not own the file (and is not privileged): a directory
    another user owns, already at the wanted mode (a shared CDI spec folder), must be accepted as it is, and only
    a wrong mode is worth a chmod. The test runs as whoever it runs as, so chmod is made to fail as it would for a
    non-owner; the mode is read with os.stat here, independently."""
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.mkdir(0o755)
    wrong.mkdir(0o777)
    assert _mode(str(right)) == 0o755 and _mode(str(wrong)) == 0o777

    def not_owner(path, mode, **kwargs):
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(atomicfile.os, "chmod", not_owner)
    assert atomicfile.ensure_dir(str(right), 0o755) == str(right)
    with pytest.raises(PermissionError):
        atomicfile.ensure_dir(str(wrong), 0o755)


@pytest.mark.parametrize("character", ["p", "é"])  # one byte, two bytes in UTF-8
def test_a_file_name_as_long_as_the_file_system_allows_is_written_atomically(tmp_path, character):
    """POSIX {NAME_MAX}, asked of the file system itself (pathconf _PC_NAME_MAX, in bytes): a target whose name
    is that long can be created, so the atomic write must manage it too, temp file and all, and leave no temp."""
    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    name = character * (name_max // len(character.encode()))
    target = tmp_path / name
    assert len(os.fsencode(name)) <= name_max
    atomicfile.write_atomic(str(target), b"first", mode=0o600, label="test", fsync=True)
    atomicfile.write_atomic(str(target), b"second", mode=0o600, label="test", fsync=False)
    assert target.read_bytes() == b"second" and os.listdir(tmp_path) == [name]
