"""The one way gpudra replaces a file so that a reader sees the old or the new content, never a mix.

Steps: write a temp file in the same directory (created with the file's final mode, whatever
the umask), fsync it, rename it over the target, fsync the directory. A failure before the
rename leaves the previous version untouched (and the temp file removed); a crash leaves at
most a temp file, which `remove_stale_temps` deletes at start-up.

`fsync=False` keeps the atomicity but not durability across a power cut: for files that live
on a tmpfs (CDI specs in /var/run/cdi) or stand for state that a reboot resets anyway.

`reuse_temp=True` (callers serialize writes to one path) gives the temp file a fixed name and,
where the kernel offers it, swaps it with the target (`renameat2(RENAME_EXCHANGE)`): the
previous version becomes the next temp file and is overwritten in place next time. Creating and
freeing an inode per write costs more than the rest of a small write on some filesystems; what
a reader can observe is the same as with a plain rename.

Tests observe and break every step through `set_step_hook`. `GPUDRA_TEST_KILL_AT=LABEL:STEP:N`
makes the process SIGKILL itself just before the Nth time it reaches STEP of a LABEL write
(`*` matches any label): the crash tests kill at named places instead of after random sleeps.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import signal
import threading
from typing import Any, Callable

# The steps of one write, in order; `set_step_hook` sees each just before it happens.
STEPS = ("write", "fsync", "rename", "dirsync")
KILL_ENV = "GPUDRA_TEST_KILL_AT"

_TEMP_NAME = re.compile(r"^\.(?P<base>.+?)\.(?:(?P<pid>\d+)-\d+\.)?tmp$")

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


class KillPoint:
    """SIGKILL this process just before the `count`th time `step` of a `label` write is reached."""

    def __init__(self, label: str, step: str, count: int):
        if step not in STEPS or count < 1:
            raise ValueError(f"bad kill point {label}:{step}:{count} (steps: {', '.join(STEPS)}; count >= 1)")
        self.label, self.step, self.count = label, step, count
        self._seen = 0
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, text: str) -> KillPoint:
        label, step, count = text.rsplit(":", 2)
        return cls(label, step, int(count))

    def __call__(self, label: str, step: str, path: str) -> None:
        if step != self.step or self.label not in ("*", label):
            return
        with self._lock:
            self._seen += 1
            if self._seen == self.count:
                os.kill(os.getpid(), signal.SIGKILL)


if os.environ.get(KILL_ENV):
    set_step_hook(KillPoint.parse(os.environ[KILL_ENV]))


def temp_path(path: str, *, reuse: bool = False) -> str:
    """The temp name a write of `path` uses: hidden, in the same directory, ending in `.tmp` (so CDI
    runtimes, which read `*.yaml`/`*.json`, ignore it)."""
    directory, base = os.path.split(path)
    unique = "" if reuse else f"{os.getpid()}-{threading.get_ident()}."
    return os.path.join(directory, f".{base}.{unique}tmp")


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


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_renameat2: Any  # glibc's renameat2 (a ctypes function), or None where there is none
try:
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    _renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    _renameat2.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - not glibc/Linux
    _renameat2 = None


def _exchange(a: str, b: str) -> bool:
    """Atomically swap the two names; False when the kernel, filesystem or libc cannot (or one is missing)."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOENT, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), a, None, b)


def write_atomic(path: str, data: bytes, *, mode: int, label: str, fsync: bool = True,
                 reuse_temp: bool = False, make_dirs: int | None = None) -> None:
    """Replace `path` with `data` (see the module doc). `mode` is the file's mode whatever the
    umask; `label` names the file kind for hooks and kill points; `make_dirs` (a mode) creates a
    missing directory."""
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    tmp = temp_path(path, reuse=reuse_temp)
    # No O_TRUNC for a reused temp: overwriting its blocks in place is cheaper than freeing and
    # reallocating them; ftruncate drops a longer tail.
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | (0 if reuse_temp else os.O_TRUNC)
    try:
        fd = os.open(tmp, flags, mode)
    except FileNotFoundError:
        if make_dirs is None:
            raise
        ensure_dir(directory, make_dirs)
        fd = os.open(tmp, flags, mode)
    try:
        try:
            os.fchmod(fd, mode)
            _step(label, "write", path)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if reuse_temp:
                os.ftruncate(fd, len(data))
            if fsync:
                _step(label, "fsync", path)
                os.fsync(fd)
        finally:
            os.close(fd)
        _step(label, "rename", path)
        if not (reuse_temp and _exchange(tmp, path)):
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
