"""``pytest --gta-download`` on the real release's bytes (issue 22, item 7).

The official ``gta_dataset.zip`` cannot be fetched here, so the tests pack the real release
(``release_root``) the way the archive unpacks -- one ``gta_dataset/`` folder, which the official
README has users put under ``opencompass/data/`` to get ``data/gta_dataset`` (open-compass/GTA
``README_GTA-1.md``, "Prepare GTA Dataset"; ``configs/datasets/gta_bench.py`` reads
``path="data/gta_dataset"``) -- and serve it from a real HTTP server on 127.0.0.1. Everything else
is the plugin as a user runs it, against the manifest the plugin ships.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

import pytest

from pytest_gta.install.manifest import (
    RELEASE_ENTRY,
    ManifestEntry,
    dataset_files,
    finder_metadata,
    load_manifest,
    read_install_record,
    verify,
)
from tests.helpers.file_server import serve_file

#: The checksums the release's README gives (../shared/gta_release/README.md).
DATASET_SHA256 = "a6ee050d7ba99d9777a2005fac9654eb8c88f890989b54f89b5bc2134287998e"
TOOLMETA_SHA256 = "3cbc7a5cba6cf611a11ece09b26fe4954ae95a8058baff3642a80c7894a8fb22"
#: The shared copy's own note about where it comes from; not a file of the release.
SHARED_README = "README.md"


@pytest.fixture(scope="session")
def release_entry() -> ManifestEntry:
    """The shipped manifest's entry for the release (session scope: read before any patching)."""
    entry = load_manifest(None).get(RELEASE_ENTRY)
    assert entry is not None, "data/manifest.json has no entry for the release"
    return entry


def pack_release(root: Path, path: Path, tamper: dict[str, bytes] | None = None) -> Path:
    """``root`` as ``gta_dataset.zip`` (stored, not deflated: 23 MB of JPEGs do not shrink)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = file.relative_to(root).as_posix()
            if rel == SHARED_README:
                continue
            if tamper and rel in tamper:
                archive.writestr(f"gta_dataset/{rel}", tamper[rel])
            else:
                archive.write(file, f"gta_dataset/{rel}")
    return path


@pytest.fixture(scope="session")
def release_zip(release_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real release packed once per session."""
    return pack_release(release_root, tmp_path_factory.mktemp("release") / "gta_dataset.zip")


def test_the_committed_entry_pins_every_file_of_the_release(
    release_root: Path, release_entry: ManifestEntry
) -> None:
    entry = release_entry
    assert verify(release_root, entry) == []
    assert sorted(entry.files) == dataset_files(release_root)
    assert entry.files["dataset.json"] == DATASET_SHA256
    assert entry.files["toolmeta.json"] == TOOLMETA_SHA256
    images = [rel for rel in entry.files if rel.startswith("image/")]
    # 252 query images and the stand-in for generated images; Finder's files are not data.
    assert len(images) == 253
    assert "image/dummy_generated_image.jpg" in images
    assert finder_metadata(release_root) == [".DS_Store", "image/.DS_Store"]
    assert entry.queries == 229
    assert entry.archive_sha256 is None
    assert entry.archive_note.startswith("unknown: ")


def test_the_release_installs_over_http_and_verifies_file_by_file(
    pytester: pytest.Pytester, release_zip: Path, release_entry: ManifestEntry, tmp_path: Path
) -> None:
    pytester.makeini("[pytest]\n")
    data_dir = tmp_path / "data"
    body = release_zip.read_bytes()
    archive = hashlib.sha256(body).hexdigest()
    with serve_file(body) as server:
        result = pytester.runpytest(
            "--gta-download", f"--gta-download-url={server.url}", f"--gta-data-dir={data_dir}"
        )
    assert result.ret == 0, result.stderr.str()
    verified = f"sha256 of {len(release_entry.files)} files match manifest entry 'gta_dataset'"
    target = data_dir / "gta_dataset"
    result.stdout.fnmatch_lines(
        [
            "*left out .DS_Store (macOS Finder metadata, not data)",
            "*left out image/.DS_Store (macOS Finder metadata, not data)",
            f"*archive sha256 {archive} (the manifest records no archive checksum to compare)",
            f"*installed {target} from {server.url}",
            f"*verification: {verified}",
        ]
    )
    assert dataset_files(target) == sorted(release_entry.files)
    assert finder_metadata(target) == []
    record = read_install_record(target)
    assert record is not None
    assert record["origin"] == server.url
    assert record["archive_sha256"] == archive
    assert record["verification"] == verified
    assert record["queries"] == 229
    assert record["left_out"] == [".DS_Store", "image/.DS_Store"]

    report = tmp_path / "info.json"
    info = pytester.runpytest(
        "--gta-data-info", f"--gta-data-dir={data_dir}", f"--gta-report={report}"
    )
    assert info.ret == 0, info.stderr.str()
    info.stdout.fnmatch_lines(
        [
            f"pytest-gta: dataset {target} (*",
            f"pytest-gta: dataset.json sha256 {DATASET_SHA256}",
            f"pytest-gta: installed * from {server.url}",
            f"pytest-gta: verification at install: {verified}",
            "pytest-gta: manifest entry: gta_dataset",
        ]
    )
    shown = json.loads(report.read_text())["dataset"]
    assert shown["manifest_entry"] == "gta_dataset"
    assert shown["statistics"]["queries"] == 229
    assert shown["statistics"]["queries_by_type"] == {
        "objective": 156,
        "subjective": 16,
        "image": 57,
    }


def test_one_changed_byte_in_one_image_is_refused_by_name(
    pytester: pytest.Pytester, release_root: Path, release_entry: ManifestEntry, tmp_path: Path
) -> None:
    image = "image/image_100.jpg"
    changed = bytearray((release_root / image).read_bytes())
    changed[len(changed) // 2] ^= 0x01
    body = pack_release(
        release_root, tmp_path / "gta_dataset.zip", tamper={image: bytes(changed)}
    ).read_bytes()
    pytester.makeini("[pytest]\n")
    data_dir = tmp_path / "data"
    with serve_file(body) as server:
        result = pytester.runpytest(
            "--gta-download", f"--gta-download-url={server.url}", f"--gta-data-dir={data_dir}"
        )
    assert result.ret == 1
    err = result.stderr.str()
    assert "checksum mismatch: 1 file(s) differ from manifest entry 'gta_dataset'" in err
    assert (
        f"  - {image}: sha256 {hashlib.sha256(changed).hexdigest()} but the manifest expects "
        f"{release_entry.files[image]}\n"
    ) in err
    assert "Nothing was installed." in err
    assert not (data_dir / "gta_dataset").exists()
    assert not list(data_dir.glob(".gta_dataset.staging-*"))
    assert list((data_dir / ".downloads").iterdir()) == []  # a bad download is not kept


@pytest.mark.usefixtures("no_release_entry")
def test_without_the_entry_the_release_passes_the_paper_counts_and_records_the_entry(
    pytester: pytest.Pytester, release_root: Path, release_entry: ManifestEntry, tmp_path: Path
) -> None:
    """The path that produced the committed entry: paper counts, then --gta-record-manifest."""
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest(
        "--gta-download",
        f"--gta-download-url={release_root}",
        f"--gta-data-dir={tmp_path / 'data'}",
        "--gta-record-manifest",
    )
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "*recorded 255 sha256s as entry 'gta_dataset' in *data/manifest.json",
            "*verification: matches the paper's published counts (no sha256 entry recorded yet)",
        ]
    )
    text = (pytester.path / "data" / "manifest.json").read_text()
    recorded = json.loads(text)["datasets"]["gta_dataset"]
    assert recorded["files"] == dict(release_entry.files)
    assert recorded["queries"] == 229
    assert recorded["archive_sha256"] is None
    assert re.fullmatch(
        rf"unknown: recorded on \d{{4}}-\d{{2}}-\d{{2}} from unpacked files "
        rf"\({re.escape(release_root.name)}\), not from an archive",
        recorded["archive_note"],
    )
    # A committed file: nothing of this machine's paths.
    for local in (str(release_root), str(tmp_path), str(pytester.path), str(Path.home())):
        assert local not in text
