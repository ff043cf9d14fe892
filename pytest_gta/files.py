"""Writing files whole or not at all; reading outside files without hanging on them.

Reports, cassettes and cached responses are read by other processes (xdist workers, the next
run); a crash or a concurrent writer must never leave half a file under the final name.

A file the user names (``--gta-report=PATH`` and the other outputs) is written where the user
means it: through a symlink to its target, and straight into a device or a pipe (``/dev/stdout``,
``/dev/null``, a FIFO), never by renaming a new file over the name (see :func:`write_output`).
A file read from outside (a dataset, a prediction file, a cache entry) must be a regular file:
a FIFO in its place would block the run forever (see :func:`read_data`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import sys
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


_MAX_LINKS = 40
#: ``/proc/self/fd/N`` and the like: the process's own open file ``N`` (``/dev/stdout`` is
#: ``/proc/self/fd/1``; bash's ``>(...)`` is ``/dev/fd/63``).
_OWN_FD = re.compile(r"/proc/(?:self|thread-self|(\d+))(?:/task/\d+)?/fd/(\d+)")


def special_kind(path: os.PathLike[str] | str) -> str | None:
    """What ``path`` is when it exists but is not a regular file (``"a FIFO"``).

    ``None`` for a regular file (symlinks followed) and for nothing at all: a caller that lists
    files by name uses this to refuse a FIFO or a directory that carries a file's name, rather
    than skip it and go on with less than it was given.
    """
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    return None if stat.S_ISREG(mode) else _kind(mode)


@contextlib.contextmanager
def open_data(path: os.PathLike[str] | str) -> Iterator[BinaryIO]:
    """Open an outside data file for reading: symlinks followed, only a regular file accepted.

    For files read as data where a link is an ordinary way to keep them (a dataset, a
    prediction file, a cache entry), unlike :func:`open_regular`. Opened with ``O_NONBLOCK``
    and checked with ``fstat`` on the descriptor itself: opening a FIFO for reading blocks until
    a writer comes (forever, if none does), and a check of the name before ``open`` could be
    raced. The error's message names the kind (``is a FIFO, not a regular file``), not the
    path: callers name the file their own way.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        NotRegularFileError: it is a FIFO, a device, a directory or a socket.
        OSError: it cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with _regular_handle(fd, "") as handle:
        yield handle


def _regular_handle(fd: int, name: str) -> BinaryIO:
    """A reader of the open ``fd`` if it is a regular file; else it is closed and refused.

    The message starts with ``name`` (``"{path} "``, or nothing where the caller names it).
    """
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(f"{name}is {_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_data(path: os.PathLike[str] | str) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_data` for what is refused)."""
    with open_data(path) as fh:
        return fh.read()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a regular file, read in chunks (images and model weights can be large).

    Raises:
        NotRegularFileError: ``path`` is a FIFO, a device or a directory (see :func:`open_data`).
    """
    digest = hashlib.sha256()
    with open_data(path) as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _destination(path: Path) -> tuple[str, bool]:
    """Where a user-named output goes: ``(path, direct)``.

    Symlinks are resolved one at a time, so that a link into ``/proc`` (``/dev/stdout``,
    ``/dev/fd/N``) stops the walk: such a "magic" link names an open file, not a path to
    replace. ``direct`` is true for those and for anything that exists and is not a regular file
    (a character device, a FIFO, a socket): they are opened and written in place. Otherwise
    ``path`` is a regular file or nothing yet, which is replaced atomically.
    """
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        parent = os.path.realpath(os.path.dirname(current))
        current = os.path.join(parent, os.path.basename(current))
        if parent == "/proc" or parent.startswith("/proc/"):
            return current, True
        if not os.path.islink(current):
            try:
                mode = os.stat(current).st_mode
            except FileNotFoundError:
                return current, False
            return current, not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))
        current = os.path.join(parent, os.readlink(current))
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_direct(target: str, data: bytes) -> None:
    """Write ``data`` into an open-file link, a device or a FIFO, in place.

    ``/proc/self/fd/N`` is written through descriptor ``N`` itself: opening the link anew would
    start a second file offset at 0 in a file the shell redirected stdout to (``> out.txt``),
    overwriting what the terminal wrote there. A FIFO is opened without blocking, so that a FIFO
    nobody reads is an error (ENXIO) rather than a run that never ends.
    """
    own = _OWN_FD.fullmatch(target)
    if own is not None and own.group(1) in (None, str(os.getpid())):
        number = int(own.group(2))
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        fd = os.dup(number)
    else:
        try:
            fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # open(2): a FIFO with no reader, opened non-blocking
                raise OSError(exc.errno, "a FIFO that no process reads", target) from None
            raise
        try:
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def write_output(path: Path, data: str | bytes) -> None:
    """Write a file the user named, as a shell redirection would reach it.

    A regular file (or a new one) is replaced atomically, as :func:`write_atomic` does; a
    symlink is followed and its target replaced atomically (the link stays a link); a
    character device, a FIFO or the process's own stdout is written in place. Renaming over
    those replaced the link or the device node itself (as root, ``--gta-report=/dev/full``
    replaced the system's ``/dev/full`` with a regular file). A write error (``ENOSPC`` from
    ``/dev/full``, a FIFO without a reader) is raised, for the caller to report.

    Raises:
        OSError: the file cannot be written.
    """
    encoded = data.encode("utf-8") if isinstance(data, str) else data
    target, direct = _destination(path)
    if direct:
        _write_direct(target, encoded)
    else:
        write_atomic_bytes(Path(target), encoded)


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


def cache_root() -> Path:
    """Where pytest-gta keeps what it builds once: ``$PYTEST_GTA_HOME`` or the XDG cache.

    The assembled similarity model and dequantised GGUF checkpoints live here; both are rebuilt
    when missing, so the folder can be deleted at any time.
    """
    env = os.environ.get("PYTEST_GTA_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pytest-gta"


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
    with _regular_handle(fd, f"{path} ") as handle:
        yield handle


def copy_regular(source: Path, target: Path) -> None:
    """Copy ``source``, a regular file only (see :func:`open_regular`), into place atomically.

    Written to a temporary file beside ``target``, then renamed: a reader never sees half.
    """
    with open_regular(source) as src:
        fd, tmp = _temporary(target)
        try:
            with os.fdopen(fd, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
