"""The one way gpudra reads a file that someone else may have planted: a state file, a checkpoint, a spool entry,
an object in the local cluster's store.

The file must be a regular file reached without following a symlink in its last component (O_NOFOLLOW), and it is
opened O_NONBLOCK so that a FIFO planted in its place cannot block the reader forever (the driver's start-up, the
local cluster's control loop) before fstat says it is not a regular file; a device (/dev/zero behind a hard link
cannot be made, but a character device node can be created by root) is refused the same way. Reading stops one
chunk past `limit`, so a huge or endless file costs at most `limit` bytes of memory.
"""

from __future__ import annotations

import errno
import os
import stat


class UnsafeFileError(OSError):
    """The file is there but is not something gpudra reads: a symlink, not a regular file, larger than allowed, or
    unreadable. An OSError, so a caller that already treats unreadable files as absent keeps doing so; `problem`
    is the reason in words (no path)."""

    def __init__(self, path: str, problem: str, err: int = errno.EINVAL):
        super().__init__(err, problem, path)
        self.problem = problem


def read_regular_file(path: str, limit: int) -> bytes | None:
    """The file's bytes; None when it does not exist; UnsafeFileError when it is a symlink, not a regular file,
    larger than `limit` bytes, or cannot be read."""
    found = read_regular_file_stat(path, limit)
    return None if found is None else found[0]


def read_regular_file_stat(path: str, limit: int) -> tuple[bytes, os.stat_result] | None:
    """`read_regular_file`, with the stat of the file that was read (for a cache keyed by inode and mtime)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFileError(path, "is a symbolic link, not a regular file", errno.ELOOP) from None
        raise UnsafeFileError(path, f"cannot be opened: {exc.strerror}", exc.errno or errno.EIO) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(path, "is not a regular file")
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size) or 1)):
            size += len(chunk)
            chunks.append(chunk)
        if size > limit:
            raise UnsafeFileError(path, f"is larger than the {limit} bytes it can be", errno.EFBIG)
        return b"".join(chunks), info
    except UnsafeFileError:
        raise
    except OSError as exc:
        raise UnsafeFileError(path, f"cannot be read: {exc.strerror}", exc.errno or errno.EIO) from None
    finally:
        os.close(fd)


def read_regular_file_tail(path: str, nbytes: int) -> bytes | None:
    """The last `nbytes` bytes of a regular file (a log that may have grown large); None when it does not exist;
    UnsafeFileError as `read_regular_file`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnsafeFileError(path, f"cannot be opened: {exc.strerror}", exc.errno or errno.EIO) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(path, "is not a regular file")
        os.lseek(fd, max(0, info.st_size - nbytes), os.SEEK_SET)
        chunks, size = [], 0
        while size < nbytes and (chunk := os.read(fd, nbytes - size)):
            size += len(chunk)
            chunks.append(chunk)
        return b"".join(chunks)
    except UnsafeFileError:
        raise
    except OSError as exc:
        raise UnsafeFileError(path, f"cannot be read: {exc.strerror}", exc.errno or errno.EIO) from None
    finally:
        os.close(fd)
