"""Writing files whole or not at all.

Reports, cassettes and cached responses are read by other processes (xdist workers, the next
run); a crash or a concurrent writer must never leave half a file under the final name.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def _umask() -> int:
    """The process umask, read without changing it (``os.umask`` can only set and return)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    # Not Linux: set and restore; a thread creating a file in between is a narrow, benign race.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _temporary(path: Path) -> tuple[int, str]:
    """A temporary file beside ``path`` with the mode a plain ``open()`` would have given it.

    ``mkstemp`` creates files 0600, which made reports unreadable to the group and others that
    the user's umask lets read every other file (JUnit XML included).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
    except OSError:
        pass
    return fd, tmp


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place."""
    fd, tmp = _temporary(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic_bytes(path: Path, data: bytes) -> None:
    """:func:`write_atomic` for bytes (images the HTML report's store keeps)."""
    fd, tmp = _temporary(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def copy_atomic(source: Path, target: Path) -> None:
    """Copy ``source`` to a temporary file beside ``target``, then rename it into place."""
    fd, tmp = _temporary(target)
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks (images and model weights can be large)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` block.

    Used where several processes (xdist workers, concurrent CI jobs) may build the same cached
    artifact; the loser of the race waits, then finds the artifact built.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: the atomic rename still protects us
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def inside(path: str, root: str) -> bool:
    """Whether the real path ``path`` is the real path ``root`` itself or lies below it."""
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives on Windows, or a mix of absolute and relative
        return False


class NotRegularFileError(OSError):
    """A file to be read as data is a symbolic link, a FIFO, a device or a directory."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


@contextlib.contextmanager
def open_regular(path: Path) -> Iterator[BinaryIO]:
    """Open ``path`` for reading only if it is a regular file itself, not a link to one.

    For files that come from outside and are copied or shown elsewhere (cassette outputs,
    images embedded in reports): a symbolic link there can name ``/proc/self/environ`` or a
    private picture, and following it would copy that into the run's output. ``O_NOFOLLOW``
    refuses a link in the last component and ``O_NONBLOCK`` keeps a FIFO from blocking the
    open; the type is checked on the opened descriptor, so nothing can swap the file between
    the check and the read.

    Raises:
        NotRegularFileError: ``path`` is a symbolic link, FIFO, device, socket or directory.
        OSError: it cannot be opened for another reason (missing, unreadable).
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise NotRegularFileError(f"{path} is a symbolic link") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(f"{path} is {_kind(mode)}, not a regular file")
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def copy_regular(source: Path, target: Path) -> None:
    """:func:`copy_atomic` of a regular file only (see :func:`open_regular`)."""
    with open_regular(source) as src:
        fd, tmp = _temporary(target)
        try:
            with os.fdopen(fd, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
