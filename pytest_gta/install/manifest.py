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
          "queries": 13,
          "files": {"dataset.json": "<sha256>", "image/image_1.jpg": "<sha256>", ...}
        }
      }
    }

The packaged manifest (shipped with the plugin) is read first; ``data/manifest.json`` under the
rootdir of the project adds or replaces entries, which is where ``--gta-record-manifest`` writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gta.errors import GtaDataError
from pytest_gta.files import sha256_file, write_atomic

FORMAT = "pytest-gta-manifest/1"
MANIFEST_NAME = "manifest.json"
#: The GitHub release v0.1.0 / Hugging Face ``Jize1/GTA``: what ``--gta-download`` installs.
RELEASE_ENTRY = "gta_dataset"
#: The 13-query sample shipped with the plugin.
SAMPLE_ENTRY = "gta_sample"
#: Written by the installer inside an installed dataset; not part of the data.
INSTALL_RECORD = ".pytest-gta-install.json"


def dataset_files(root: Path) -> list[str]:
    """The files a run depends on, as sorted POSIX paths relative to ``root``.

    ``dataset.json``, ``toolmeta.json`` (when present) and every regular file under ``image/``;
    anything else in the directory (a README, the install record) is not data.
    """
    files = [name for name in ("dataset.json", "toolmeta.json") if (root / name).is_file()]
    image_dir = root / "image"
    if image_dir.is_dir():
        for dirpath, dirnames, names in os.walk(image_dir):
            dirnames.sort()
            for name in names:
                path = Path(dirpath) / name
                if path.is_file():
                    files.append(path.relative_to(root).as_posix())
    return sorted(files)


@dataclass(frozen=True)
class ManifestEntry:
    """The expected files of one named dataset."""

    name: str
    files: Mapping[str, str]
    description: str = ""
    queries: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry as stored in ``manifest.json``."""
        out: dict[str, Any] = {"description": self.description}
        if self.queries is not None:
            out["queries"] = self.queries
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
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
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
        if "dataset.json" not in files:
            raise GtaDataError(f"{where}.files: must list dataset.json")
        queries = value.get("queries")
        entries[name] = ManifestEntry(
            name=name,
            files=dict(files),
            description=str(value.get("description", "")),
            queries=queries if isinstance(queries, int) else None,
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


def entry_for(root: Path, name: str, description: str, queries: int | None) -> ManifestEntry:
    """Hash every data file of ``root`` into an entry called ``name``."""
    files = {rel: sha256_file(root / rel) for rel in dataset_files(root)}
    return ManifestEntry(name=name, files=files, description=description, queries=queries)


def record(path: Path, entries: Iterable[ManifestEntry]) -> None:
    """Add or replace ``entries`` in the manifest at ``path``, keeping the others."""
    existing: dict[str, Any] = {}
    if path.is_file():
        _parse(path)  # refuse to rewrite a manifest we could not read back
        existing = json.loads(path.read_text(encoding="utf-8"))["datasets"]
    for entry in entries:
        existing[entry.name] = entry.to_json()
    text = json.dumps({"format": FORMAT, "datasets": dict(sorted(existing.items()))}, indent=2)
    write_atomic(path, text + "\n")


def read_install_record(root: Path) -> dict[str, Any] | None:
    """What the installer wrote about ``root``, if it installed it."""
    path = root / INSTALL_RECORD
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None
