"""Unpacking archives and copying trees without trusting them.

A dataset archive comes from the network or a mirror; its entry names and sizes are data, not
instructions. Nothing is written outside the target directory (no ``..``, no absolute paths, no
drive letters, no symlinks), no entry is written twice, and sizes are bounded before and while
extracting, so a zip bomb fails fast with a message instead of filling the disk.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pytest_gta.errors import GtaDataError

_DRIVE = re.compile(r"^[A-Za-z]:")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class UnpackLimits:
    """Bounds on what an archive may expand to.

    The real dataset is a few hundred MB in about 260 files, so the defaults leave ample room
    while stopping archives that claim (or turn out) to be far bigger.
    """

    max_total_bytes: int = 8 << 30
    max_entries: int = 50_000
    max_entry_bytes: int = 2 << 30
    #: Uncompressed / compressed size above which an entry is refused (only for entries over
    #: ``ratio_floor_bytes``: tiny files compress arbitrarily well without being bombs).
    max_ratio: float = 200.0
    ratio_floor_bytes: int = 1 << 20


class UnsafeArchiveError(GtaDataError):
    """The archive tries to write outside its target or to expand beyond the limits."""


def safe_relative(name: str, source: str) -> PurePosixPath:
    """The entry name as a relative path that stays inside the target, or an error.

    Raises:
        UnsafeArchiveError: naming the entry, for absolute paths, drive letters and ``..``.
    """
    posix = name.replace("\\", "/")
    if posix.startswith("/") or _DRIVE.match(posix):
        raise UnsafeArchiveError(
            f"{source}: entry {name!r} has an absolute path; refusing to unpack this archive"
        )
    parts = [p for p in posix.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(
            f"{source}: entry {name!r} points outside the target directory (path traversal); "
            "refusing to unpack this archive"
        )
    if any("\x00" in p for p in parts):
        raise UnsafeArchiveError(f"{source}: entry {name!r} contains a NUL byte")
    return PurePosixPath(*parts)


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def check_zip(archive: zipfile.ZipFile, source: str, limits: UnpackLimits) -> list[zipfile.ZipInfo]:
    """Every check that can be made from the central directory, before writing anything."""
    infos = archive.infolist()
    if len(infos) > limits.max_entries:
        raise UnsafeArchiveError(
            f"{source}: {len(infos)} entries, more than the limit of {limits.max_entries}"
        )
    seen: set[PurePosixPath] = set()
    total = 0
    for info in infos:
        rel = safe_relative(info.filename, source)
        if _is_symlink(info):
            raise UnsafeArchiveError(
                f"{source}: entry {info.filename!r} is a symbolic link; datasets contain none "
                "and links could point outside the target"
            )
        if info.flag_bits & 0x1:
            raise UnsafeArchiveError(f"{source}: entry {info.filename!r} is encrypted")
        if info.is_dir() or not rel.parts:
            continue
        if rel in seen:
            raise UnsafeArchiveError(f"{source}: entry {info.filename!r} appears twice")
        seen.add(rel)
        if info.file_size > limits.max_entry_bytes:
            raise UnsafeArchiveError(
                f"{source}: entry {info.filename!r} expands to {info.file_size} bytes, more than "
                f"the limit of {limits.max_entry_bytes} (zip bomb?)"
            )
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > limits.ratio_floor_bytes and ratio > limits.max_ratio:
            raise UnsafeArchiveError(
                f"{source}: entry {info.filename!r} expands {ratio:.0f}x "
                f"({info.compress_size} -> {info.file_size} bytes), more than the limit of "
                f"{limits.max_ratio:.0f}x (zip bomb?)"
            )
        total += info.file_size
        if total > limits.max_total_bytes:
            raise UnsafeArchiveError(
                f"{source}: expands to more than {limits.max_total_bytes} bytes (zip bomb?)"
            )
    return infos


def extract_zip(path: Path, target: Path, limits: UnpackLimits | None = None) -> int:
    """Extract the zip at ``path`` into the (new, empty) directory ``target``.

    Returns:
        The number of files written.

    Raises:
        UnsafeArchiveError: for traversal, absolute paths, links, encryption or size limits.
        GtaDataError: when the file is not a complete zip archive (e.g. a truncated download).
    """
    limits = limits or UnpackLimits()
    source = str(path)
    target.mkdir(parents=True, exist_ok=True)
    base = target.resolve()
    written = 0
    total = 0
    try:
        with zipfile.ZipFile(path) as archive:
            for info in check_zip(archive, source, limits):
                rel = safe_relative(info.filename, source)
                if not rel.parts:
                    continue
                dest = base.joinpath(*rel.parts)
                if base not in dest.parents:
                    raise UnsafeArchiveError(f"{source}: entry {info.filename!r} escapes {target}")
                if info.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                # O_EXCL + O_NOFOLLOW: never through a link, never over an earlier entry.
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                with archive.open(info) as src, os.fdopen(os.open(dest, flags, 0o644), "wb") as out:
                    size = 0
                    for chunk in iter(lambda: src.read(_CHUNK), b""):
                        size += len(chunk)
                        total += len(chunk)
                        if size > info.file_size or total > limits.max_total_bytes:
                            raise UnsafeArchiveError(
                                f"{source}: entry {info.filename!r} expands beyond its declared "
                                "size or the total limit (zip bomb?)"
                            )
                        out.write(chunk)
                written += 1
    except zipfile.BadZipFile as exc:
        raise GtaDataError(
            f"{source}: not a complete zip archive ({exc}); the download was probably "
            "truncated or the URL does not point at gta_dataset.zip"
        ) from None
    except (EOFError, zipfile.LargeZipFile, OSError) as exc:
        # OSError: an entry both a file and a directory, a full disk, a permission.
        raise GtaDataError(f"{source}: cannot be unpacked into {target}: {exc}") from None
    return written


def copy_tree(
    source: Path,
    target: Path,
    *,
    allowed_root: Path | None = None,
    limits: UnpackLimits | None = None,
) -> int:
    """Copy the regular files of ``source`` into the new directory ``target``.

    Symbolic links are followed only to files inside ``allowed_root`` (default: ``source``;
    the Hugging Face cache links snapshot files to blobs beside the snapshot) and copied as
    files; a link anywhere else, or to a directory, is an error naming it.

    Returns:
        The number of files copied.
    """
    limits = limits or UnpackLimits()
    allowed = (allowed_root or source).resolve()
    target.mkdir(parents=True, exist_ok=True)
    copied = 0
    total = 0
    for dirpath, dirnames, names in os.walk(source):
        here = Path(dirpath)
        for name in list(dirnames):
            if (here / name).is_symlink():
                raise UnsafeArchiveError(
                    f"{source}: {here / name} is a link to a directory; copy the data itself"
                )
        for name in names:
            path = here / name
            real = path.resolve()
            if path.is_symlink() and allowed not in real.parents:
                raise UnsafeArchiveError(
                    f"{source}: {path} links outside the dataset (to {real}); refusing to copy it"
                )
            if not real.is_file():
                continue
            copied += 1
            total += real.stat().st_size
            if copied > limits.max_entries or total > limits.max_total_bytes:
                raise UnsafeArchiveError(f"{source}: more data than the limits allow")
            dest = target / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(real, dest)
    return copied
