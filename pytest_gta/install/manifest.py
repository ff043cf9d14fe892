"""The dataset manifest: which files a dataset has and the sha256 of each.

A benchmark number is only comparable when it was computed on the same bytes. The manifest
(``data/manifest.json``, committed) lists, per named dataset, every file a run depends on:
``dataset.json``, ``toolmeta.json`` and every file under ``image/``. Installing checks a download
against the entry of the same name, file by file, so a corrupted mirror or a re-encoded image is
caught by name before a single case runs.

Format::

    {
      "format": "pytest-gta-manifest/1",
      "datasets": {
        "gta_sample": {
          "description": "...",
          "queries": 17,
          "archive_sha256": null,
          "archive_note": "why the archive's own checksum is (not) known",
          "files": {"dataset.json": "<sha256>", "image/image_1.jpg": "<sha256>", ...}
        }
      }
    }

Verification is by file, never by archive: the same files reach a user as the GitHub zip, a
Hugging Face snapshot, a mirror's re-packed zip or an unpacked folder, and only the files decide a
benchmark number. ``archive_sha256`` (optional, ``null`` when unknown) records the checksum of the
archive an entry was recorded from, for information.
An entry may list no files yet (``gta_workflow_dataset``, GTA-Workflow, whose checksums are
unknown): it names the dataset, and an install is only structure-checked until
``--gta-record-manifest`` fills it in. A GTA-Workflow entry lists ``end.json`` and every other
file of the dataset directory (:func:`workflow_files`).

macOS Finder's ``.DS_Store`` files (:data:`FINDER_METADATA`) are not data: they are neither
recorded nor compared, so a copy with or without them verifies; every other file under ``image/``
that the entry does not list fails verification, because a run can resolve it (the official loader
lists every file of the dataset folder).

The packaged manifest (shipped with the plugin) is read first; ``data/manifest.json`` under the
rootdir of the project adds or replaces entries, which is where ``--gta-record-manifest`` writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.errors import GtaDataError
from pytest_gta.files import sha256_file, write_output

FORMAT = "pytest-gta-manifest/1"
MANIFEST_NAME = "manifest.json"
#: The GitHub release v0.1.0 / Hugging Face ``Jize1/GTA``: what ``--gta-download`` installs.
RELEASE_ENTRY = "gta_dataset"
#: GTA-Workflow (GTA-2): the GitHub release v0.2.0 / Hugging Face ``Jize1/GTA-Workflow``, what
#: ``--gta-download=workflow`` installs. Shipped with no files recorded (its checksums are
#: unknown) until ``--gta-download=workflow --gta-record-manifest`` records them.
WORKFLOW_ENTRY = "gta_workflow_dataset"
#: The file that marks each kind of dataset directory: atomic GTA, GTA-Workflow.
ATOMIC_MARKER = "dataset.json"
WORKFLOW_MARKER = "end.json"
#: The 17-query sample shipped with the plugin.
SAMPLE_ENTRY = "gta_sample"
#: Written by the installer inside an installed dataset; not part of the data.
INSTALL_RECORD = ".pytest-gta-install.json"
#: The name macOS Finder gives the view settings it writes into every folder it shows. The
#: release folder we pinned has one in ``image/`` (a Mac packed it); whether the official archive
#: has it is unknown, and opening the installed folder in Finder adds one. No query names it and
#: the official loader resolves only paths that a query names, so it is never data.
FINDER_METADATA = ".DS_Store"


def dataset_files(root: Path) -> list[str]:
    """The files a run depends on, as sorted POSIX paths relative to ``root``.

    ``dataset.json``, ``toolmeta.json`` (when present) and every regular file under ``image/``
    except Finder's ``.DS_Store``; anything else in the directory (a README, the install record)
    is not data. A GTA-Workflow directory (``end.json``, no ``dataset.json``): every regular file
    but the install record and Finder's ``.DS_Store`` (:func:`workflow_files`).
    """
    if (root / WORKFLOW_MARKER).is_file() and not (root / ATOMIC_MARKER).is_file():
        return workflow_files(root)
    files = [name for name in ("dataset.json", "toolmeta.json") if (root / name).is_file()]
    image_dir = root / "image"
    if image_dir.is_dir():
        for dirpath, dirnames, names in os.walk(image_dir):
            dirnames.sort()
            for name in names:
                path = Path(dirpath) / name
                if name != FINDER_METADATA and path.is_file():
                    files.append(path.relative_to(root).as_posix())
    return sorted(files)


def workflow_files(root: Path) -> list[str]:
    """A GTA-Workflow directory's files: ``end.json``, ``toolmeta.json`` and the task files.

    The tasks name their files by any path under the root, so every regular file is data except
    the install record and Finder's ``.DS_Store``; sorted POSIX paths relative to ``root``.
    """
    files: list[str] = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames.sort()
        for name in names:
            path = Path(dirpath) / name
            if name not in (FINDER_METADATA, INSTALL_RECORD) and path.is_file():
                files.append(path.relative_to(root).as_posix())
    return sorted(files)


def finder_metadata(root: Path) -> list[str]:
    """The ``.DS_Store`` files anywhere under ``root``, as POSIX paths relative to it."""
    return sorted(
        (Path(dirpath) / FINDER_METADATA).relative_to(root).as_posix()
        for dirpath, _dirs, names in os.walk(root)
        if FINDER_METADATA in names
    )


@dataclass(frozen=True)
class ManifestEntry:
    """The expected files of one named dataset."""

    name: str
    files: Mapping[str, str]
    description: str = ""
    queries: int | None = None
    #: The sha256 of the archive the files were recorded from (``None``: unknown or none).
    archive_sha256: str | None = None
    #: Where ``archive_sha256`` comes from, or why it is unknown; empty: the entry says nothing.
    archive_note: str = ""

    @property
    def pinned(self) -> bool:
        """Whether any file's sha256 is recorded (an entry may name a dataset before that)."""
        return bool(self.files)

    def to_json(self) -> dict[str, Any]:
        """The entry as stored in ``manifest.json``."""
        out: dict[str, Any] = {"description": self.description}
        if self.queries is not None:
            out["queries"] = self.queries
        if self.archive_note or self.archive_sha256 is not None:
            out["archive_sha256"] = self.archive_sha256
            out["archive_note"] = self.archive_note
        out["files"] = dict(sorted(self.files.items()))
        return out


@dataclass
class Manifest:
    """Entries by name, and the files they were read from (for messages)."""

    entries: dict[str, ManifestEntry] = field(default_factory=dict)
    sources: list[Path] = field(default_factory=list)

    def get(self, name: str) -> ManifestEntry | None:
        """The entry called ``name``, if one is recorded."""
        return self.entries.get(name)

    def match(self, dataset_sha256: str) -> ManifestEntry | None:
        """The entry whose ``dataset.json`` has this sha256 (``Dataset.sha256``), if any."""
        for entry in self.entries.values():
            if entry.files.get("dataset.json") == dataset_sha256:
                return entry
        return None

    @property
    def where(self) -> str:
        """The manifest files, for messages."""
        return ", ".join(str(p) for p in self.sources) or "(no manifest file)"


def packaged_manifest_path() -> Path:
    """The manifest shipped with the plugin.

    Wheels carry a copy inside the package; a source checkout reads ``data/manifest.json``.
    """
    here = Path(__file__).resolve().parent.parent
    packaged = here / "_data" / MANIFEST_NAME
    if packaged.is_file():
        return packaged
    return here.parent / "data" / MANIFEST_NAME


def project_manifest_path(rootdir: Path) -> Path:
    """Where a project keeps (and ``--gta-record-manifest`` writes) its own entries."""
    return rootdir / "data" / MANIFEST_NAME


def _is_sha256(value: Any) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


def _parse(path: Path) -> dict[str, ManifestEntry]:
    """Entries of one manifest file; every defect is an error naming the file and field."""
    try:
        raw = jsonsafe.read_json(path)
    except (OSError, jsonsafe.JsonInputError) as exc:
        raise GtaDataError(f"dataset manifest {path}: cannot be read: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise GtaDataError(
            f"dataset manifest {path}: field 'format' must be {FORMAT!r} "
            f"(got {raw.get('format') if isinstance(raw, dict) else type(raw).__name__!r})"
        )
    datasets = raw.get("datasets")
    if not isinstance(datasets, dict):
        raise GtaDataError(f"dataset manifest {path}: field 'datasets' must be an object")
    entries: dict[str, ManifestEntry] = {}
    for name, value in datasets.items():
        where = f"dataset manifest {path}: datasets.{name}"
        if not isinstance(value, dict) or not isinstance(value.get("files"), dict):
            raise GtaDataError(f"{where}: must be an object with a 'files' object")
        files = value["files"]
        for rel, digest in files.items():
            if not _is_sha256(digest):
                raise GtaDataError(f"{where}.files.{rel}: not a lowercase hex sha256: {digest!r}")
            parts = Path(rel).parts
            if Path(rel).is_absolute() or ".." in parts or "\\" in rel:
                raise GtaDataError(f"{where}.files: {rel!r} must be a relative POSIX path")
        # No files: an entry whose checksums are not known yet (GTA-Workflow as shipped).
        if files and not {ATOMIC_MARKER, WORKFLOW_MARKER} & set(files):
            raise GtaDataError(
                f"{where}.files: must list dataset.json (GTA) or end.json (GTA-Workflow), or be "
                "empty until the files' sha256s are recorded"
            )
        archive = value.get("archive_sha256")
        if archive is not None and not _is_sha256(archive):
            raise GtaDataError(
                f"{where}.archive_sha256: not a lowercase hex sha256 or null: {archive!r}"
            )
        note = value.get("archive_note", "")
        if not isinstance(note, str):
            raise GtaDataError(f"{where}.archive_note: must be a string, not {note!r}")
        queries = value.get("queries")
        entries[name] = ManifestEntry(
            name=name,
            files=dict(files),
            description=str(value.get("description", "")),
            queries=queries if isinstance(queries, int) else None,
            archive_sha256=archive,
            archive_note=note,
        )
    return entries


def load_manifest(rootdir: Path | None) -> Manifest:
    """The packaged entries, overlaid with the project's ``data/manifest.json``."""
    manifest = Manifest()
    paths = [packaged_manifest_path()]
    if rootdir is not None:
        paths.append(project_manifest_path(rootdir))
    seen: set[Path] = set()
    for path in paths:
        resolved = path.resolve()
        if resolved in seen or not path.is_file():
            continue
        seen.add(resolved)
        manifest.entries.update(_parse(path))
        manifest.sources.append(path)
    return manifest


def verify(root: Path, entry: ManifestEntry) -> list[str]:
    """Every way ``root`` differs from ``entry``, one line per file (empty: identical)."""
    problems: list[str] = []
    present = set(dataset_files(root))
    for rel, expected in sorted(entry.files.items()):
        path = root / rel
        if not path.is_file():
            problems.append(f"{rel}: missing (the manifest lists it)")
            continue
        actual = sha256_file(path)
        if actual != expected:
            problems.append(f"{rel}: sha256 {actual} but the manifest expects {expected}")
    for rel in sorted(present - set(entry.files)):
        problems.append(f"{rel}: not in the manifest entry {entry.name!r}")
    return problems


def entry_for(
    root: Path,
    name: str,
    description: str,
    queries: int | None,
    archive_sha256: str | None = None,
    archive_note: str = "",
) -> ManifestEntry:
    """Hash every data file of ``root`` into an entry called ``name``."""
    files = {rel: sha256_file(root / rel) for rel in dataset_files(root)}
    return ManifestEntry(
        name=name,
        files=files,
        description=description,
        queries=queries,
        archive_sha256=archive_sha256,
        archive_note=archive_note,
    )


def _merge(old: ManifestEntry | None, new: ManifestEntry) -> ManifestEntry:
    """What recording ``new`` over ``old`` leaves.

    Other files: ``new`` replaces ``old``. The same files: ``old`` stays as written (its
    description may say more than a recorder can know), except that an archive checksum it lacks
    is learnt -- how the unknown checksum of the official archive gets filled in, by recording a
    download of it.
    """
    if old is None or dict(old.files) != dict(new.files):
        return new
    if old.archive_sha256 is None and new.archive_sha256 is not None:
        return replace(old, archive_sha256=new.archive_sha256, archive_note=new.archive_note)
    return old


def record(path: Path, entries: Iterable[ManifestEntry]) -> None:
    """Add or replace ``entries`` in the manifest at ``path``, keeping the others.

    An entry whose files are already recorded keeps its description (see :func:`_merge`).
    """
    existing: dict[str, Any] = {}
    parsed: dict[str, ManifestEntry] = {}
    if path.is_file():
        parsed = _parse(path)  # refuse to rewrite a manifest we could not read back
        existing = jsonsafe.read_json(path)["datasets"]
    for entry in entries:
        existing[entry.name] = _merge(parsed.get(entry.name), entry).to_json()
    text = json.dumps({"format": FORMAT, "datasets": dict(sorted(existing.items()))}, indent=2)
    write_output(path, text + "\n")


def read_install_record(root: Path) -> dict[str, Any] | None:
    """What the installer wrote about ``root``, if it installed it."""
    path = root / INSTALL_RECORD
    try:
        value = jsonsafe.read_json(path)
    except (OSError, jsonsafe.JsonInputError):
        return None
    return value if isinstance(value, dict) else None
