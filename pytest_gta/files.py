"""Writing files whole or not at all.

Reports, cassettes and cached responses are read by other processes (xdist workers, the next
run); a crash or a concurrent writer must never leave half a file under the final name.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


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
