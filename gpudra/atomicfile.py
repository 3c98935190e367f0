"""The one way gpudra replaces a file so that a reader sees the old or the new content, never a mix.

Steps: write a temp file in the same directory (created with the file's final mode, whatever
the umask), fsync it, rename it over the target, fsync the directory. A failure before the
rename leaves the previous version untouched (and the temp file removed); a crash leaves at
most a temp file, which `remove_stale_temps` deletes at start-up.

`fsync=False` keeps the atomicity but not durability across a power cut: for files that live
on a tmpfs (CDI specs in /var/run/cdi) or stand for state that a reboot resets anyway.

The temp file is always a new file (O_CREAT|O_EXCL|O_NOFOLLOW) under a name no one can guess (the PID and a random
token): a symlink or hard link planted where a temp file will be is never written through (issue 20: the
checkpoint's fixed temp name, opened without O_EXCL, wrote into whatever file a planted hard link named).

Tests observe and break every step through `set_step_hook` (the crash tests install their kill points
with it, from the test side: tests/support/killpoint.py); nothing here reads the environment.
"""

from __future__ import annotations

import os
import re
import secrets
from typing import Callable

# The steps of one write, in order; `set_step_hook` sees each just before it happens.
STEPS = ("write", "fsync", "rename", "dirsync")

# `.NAME.PID-TOKEN.tmp`; `.NAME.tmp`, a fixed name older versions used, is cleaned up too
_TEMP_NAME = re.compile(r"^\.(?P<base>.+?)\.(?:(?P<pid>\d+)-[0-9a-f]+\.)?tmp$")
# POSIX {NAME_MAX}: the longest file name (in bytes) Linux's file systems hold (ext4, xfs, btrfs, tmpfs: 255)
NAME_MAX = 255
_TEMP_ATTEMPTS = 8  # new names tried when one exists already (planted, or left by a dead process of the same PID)

StepHook = Callable[[str, str, str], None]  # (label, step, target path)
_step_hook: StepHook | None = None


def set_step_hook(hook: StepHook | None) -> StepHook | None:
    """Install `hook` (called before every step of every write; it may raise to fail the step).
    Returns the previous hook."""
    global _step_hook
    previous, _step_hook = _step_hook, hook
    return previous


def _step(label: str, step: str, path: str) -> None:
    hook = _step_hook
    if hook is not None:
        hook(label, step, path)


def temp_path(path: str) -> str:
    """A new temp name for a write of `path`: hidden, in the same directory, ending in `.tmp` (so CDI runtimes,
    which read `*.yaml`/`*.json`, ignore it), with the PID (for remove_stale_temps) and a random token. The target's
    name is cut as far as needed for the temp name to fit NAME_MAX: any file name the file system holds can be
    written (a store object named with 230 characters, a valid Kubernetes name, failed with ENAMETOOLONG)."""
    directory, base = os.path.split(path)
    tail = f".{os.getpid()}-{secrets.token_hex(8)}.tmp"
    room = NAME_MAX - len(b".") - len(tail)
    encoded = base.encode("utf-8", "surrogateescape")
    if len(encoded) > room:
        base = encoded[:room].decode("utf-8", "ignore")  # never half a character
    return os.path.join(directory, f".{base}{tail}")


def _create_temp(path: str, mode: int) -> tuple[int, str]:
    """A new, empty temp file for `path`, never one that existed (O_EXCL), never through a symlink (O_NOFOLLOW)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for attempt in range(_TEMP_ATTEMPTS):
        tmp = temp_path(path)
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            if attempt + 1 == _TEMP_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def remove_stale_temps(directory: str, base_prefix: str = "") -> list[str]:
    """Delete temp files of interrupted writes in `directory` (for targets whose name starts with
    `base_prefix`): fixed-name temps, and those of dead processes or of this process (after a
    restart in a container it may have the same PID). Call at start-up, before any writer runs."""
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return removed
    for name in names:
        match = _TEMP_NAME.match(name)
        if match is None or not match["base"].startswith(base_prefix):
            continue
        pid = match["pid"]
        if pid is not None and int(pid) != os.getpid() and _alive(int(pid)):
            continue  # another live process may be writing it right now
        try:
            os.unlink(os.path.join(directory, name))
            removed.append(name)
        except FileNotFoundError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_atomic(path: str, data: bytes, *, mode: int, label: str, fsync: bool = True,
                 make_dirs: int | None = None) -> None:
    """Replace `path` with `data` (see the module doc). `mode` is the file's mode whatever the
    umask; `label` names the file kind for hooks and kill points; `make_dirs` (a mode) creates a
    missing directory."""
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    try:
        fd, tmp = _create_temp(path, mode)
    except FileNotFoundError:
        if make_dirs is None:
            raise
        ensure_dir(directory, make_dirs)
        fd, tmp = _create_temp(path, mode)
    try:
        try:
            os.fchmod(fd, mode)
            _step(label, "write", path)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                _step(label, "fsync", path)
                os.fsync(fd)
        finally:
            os.close(fd)
        _step(label, "rename", path)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        _step(label, "dirsync", path)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def ensure_dir(path: str, mode: int) -> str:
    """Create `path` (and missing parents) and give the leaf exactly `mode`, whatever the umask."""
    os.makedirs(path, mode=mode, exist_ok=True)
    if (os.stat(path).st_mode & 0o7777) != mode:
        os.chmod(path, mode)
    return path
