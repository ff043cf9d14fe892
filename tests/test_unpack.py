"""Unit tests of safe unpacking and of the manifest format (``pytest_gta.install``)."""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gta.dataset import bundled_sample_path
from pytest_gta.errors import GtaDataError
from pytest_gta.files import sha256_file
from pytest_gta.install.installer import InstallRequest, find_dataset_root
from pytest_gta.install.manifest import (
    FORMAT,
    ManifestEntry,
    dataset_files,
    entry_for,
    finder_metadata,
    load_manifest,
    packaged_manifest_path,
    record,
    verify,
)
from pytest_gta.install.unpack import (
    UnpackLimits,
    UnsafeArchiveError,
    copy_tree,
    extract_zip,
    safe_relative,
)

SAMPLE = bundled_sample_path()


def make_zip(path: Path, entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, data in entries:
            archive.writestr(info, data)
    return path


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "gta_dataset/../../x",
        "/etc/passwd",
        "C:\\Windows\\x",
        "c:/x",
        "gta_dataset\\..\\..\\x",
        "\\\\server\\share\\x",
    ],
)
def test_escaping_names_are_refused(name: str) -> None:
    with pytest.raises(UnsafeArchiveError, match="refusing to unpack"):
        safe_relative(name, "a.zip")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gta_dataset/image/image_1.jpg", "gta_dataset/image/image_1.jpg"),
        ("./dataset.json", "dataset.json"),
        ("gta_dataset\\image\\a.jpg", "gta_dataset/image/a.jpg"),
        ("a//b", "a/b"),
        ("dir/", "dir"),
    ],
)
def test_ordinary_names_stay_relative(name: str, expected: str) -> None:
    assert safe_relative(name, "a.zip").as_posix() == expected


def test_symlink_entries_are_refused(tmp_path: Path) -> None:
    link = zipfile.ZipInfo("gta_dataset/image/link.jpg")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    archive = make_zip(tmp_path / "a.zip", [("gta_dataset/dataset.json", b"{}"), (link, b"/etc")])
    with pytest.raises(UnsafeArchiveError, match="is a symbolic link"):
        extract_zip(archive, tmp_path / "out")
    assert not (tmp_path / "out" / "gta_dataset" / "dataset.json").exists()


def test_duplicate_and_encrypted_entries_are_refused(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="Duplicate name"):
        archive = make_zip(tmp_path / "dup.zip", [("a/x.json", b"1"), ("a/x.json", b"2")])
    with pytest.raises(UnsafeArchiveError, match="appears twice"):
        extract_zip(archive, tmp_path / "out")
    encrypted = make_zip(tmp_path / "enc.zip", [("a/y.json", b"zz")])
    raw = bytearray(encrypted.read_bytes())
    # Set the "encrypted" bit of the general purpose flags (zipfile never writes it).
    raw[raw.index(b"PK\x03\x04") + 6] |= 0x1
    raw[raw.index(b"PK\x01\x02") + 8] |= 0x1
    encrypted.write_bytes(bytes(raw))
    with pytest.raises(UnsafeArchiveError, match="is encrypted"):
        extract_zip(encrypted, tmp_path / "out2")


def test_limits_on_entries_total_size_and_ratio(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "a.zip", [(f"f{i}", os.urandom(1000)) for i in range(5)])
    with pytest.raises(UnsafeArchiveError, match="5 entries, more than the limit of 4"):
        extract_zip(archive, tmp_path / "o1", UnpackLimits(max_entries=4))
    with pytest.raises(UnsafeArchiveError, match="expands to more than 4500 bytes"):
        extract_zip(archive, tmp_path / "o2", UnpackLimits(max_total_bytes=4500))
    with pytest.raises(UnsafeArchiveError, match="expands to 1000 bytes, more than the limit"):
        extract_zip(archive, tmp_path / "o3", UnpackLimits(max_entry_bytes=999))
    zeros = make_zip(tmp_path / "z.zip", [("z", bytes(100_000))])
    with pytest.raises(UnsafeArchiveError, match=r"expands \d+x"):
        extract_zip(zeros, tmp_path / "o4", UnpackLimits(ratio_floor_bytes=10_000))
    assert extract_zip(zeros, tmp_path / "o5") == 1  # under the default floor: a small file


def test_a_header_that_understates_the_size_is_caught_while_extracting(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "a.zip", [("x.bin", os.urandom(5000))])
    raw = bytearray(archive.read_bytes())
    # Patch the declared uncompressed size (local header offset 22, central directory
    # offset 24 from its signature) to 100 bytes: the data is longer than the header says.
    local = raw.index(b"PK\x03\x04")
    raw[local + 22 : local + 26] = (100).to_bytes(4, "little")
    central = raw.index(b"PK\x01\x02")
    raw[central + 24 : central + 28] = (100).to_bytes(4, "little")
    archive.write_bytes(bytes(raw))
    with pytest.raises(GtaDataError):
        extract_zip(archive, tmp_path / "out")


def test_not_a_zip_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "gta_dataset.zip"
    bogus.write_text("<html>404</html>")
    with pytest.raises(GtaDataError, match="not a complete zip archive"):
        extract_zip(bogus, tmp_path / "out")


def test_copy_tree_refuses_links_out_and_follows_links_in(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "image").mkdir(parents=True)
    (source / "dataset.json").write_text("{}")
    (source / "image" / "in.jpg").symlink_to(source / "dataset.json")
    assert copy_tree(source, tmp_path / "ok") == 2
    assert not (tmp_path / "ok" / "image" / "in.jpg").is_symlink()
    assert (tmp_path / "ok" / "image" / "in.jpg").read_text() == "{}"

    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    (source / "image" / "out.jpg").symlink_to(secret)
    with pytest.raises(UnsafeArchiveError, match="links outside the dataset"):
        copy_tree(source, tmp_path / "bad")
    # The Hugging Face cache: snapshot files link to blobs beside the snapshot.
    assert copy_tree(source, tmp_path / "hf", allowed_root=tmp_path) == 3


def test_copy_tree_refuses_directory_links(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "image").symlink_to(tmp_path)
    with pytest.raises(UnsafeArchiveError, match="link to a directory"):
        copy_tree(source, tmp_path / "out")


def test_dataset_root_is_found_at_the_top_or_one_level_down(tmp_path: Path) -> None:
    limits = UnpackLimits()
    (tmp_path / "top" / "image").mkdir(parents=True)
    (tmp_path / "top" / "dataset.json").write_text("{}")
    assert find_dataset_root(tmp_path / "top", limits) == tmp_path / "top"
    nested = tmp_path / "nested" / "gta_dataset"
    nested.mkdir(parents=True)
    (nested / "dataset.json").write_text("{}")
    (tmp_path / "nested" / "__MACOSX" / "gta_dataset").mkdir(parents=True)
    (tmp_path / "nested" / "__MACOSX" / "gta_dataset" / "dataset.json").write_text("junk")
    assert find_dataset_root(tmp_path / "nested", limits) == nested
    both = tmp_path / "both"
    for name in ("a", "b"):
        (both / name).mkdir(parents=True)
        (both / name / "dataset.json").write_text("{}")
    with pytest.raises(GtaDataError, match=r"several dataset\.json files"):
        find_dataset_root(both, limits)
    with pytest.raises(GtaDataError, match=r"no dataset\.json found"):
        find_dataset_root(tmp_path / "top" / "image", limits)


def test_a_tree_holding_only_the_release_zip_is_unpacked(tmp_path: Path) -> None:
    tree = tmp_path / "snapshot"
    tree.mkdir()
    make_zip(tree / "gta_dataset.zip", [("gta_dataset/dataset.json", b"{}")])
    root = find_dataset_root(tree, UnpackLimits())
    assert (root / "dataset.json").read_bytes() == b"{}"
    assert root.name == "gta_dataset"


# -- manifest -------------------------------------------------------------------------------


def test_the_committed_sample_entry_matches_the_sample() -> None:
    manifest = load_manifest(None)
    entry = manifest.get("gta_sample")
    assert entry is not None
    assert entry.queries == 17
    assert verify(SAMPLE, entry) == []
    assert set(entry.files) == set(dataset_files(SAMPLE))
    assert {"dataset.json", "toolmeta.json"} <= set(entry.files)
    assert manifest.match(sha256_file(SAMPLE / "dataset.json")) == entry
    assert manifest.sources == [packaged_manifest_path()]


def test_verify_names_missing_changed_and_extra_files(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(SAMPLE, copy)
    entry = entry_for(SAMPLE, "gta_sample", "", 17)
    (copy / "image" / "image_1.jpg").unlink()
    (copy / "toolmeta.json").write_text("{}")
    (copy / "image" / "new.jpg").write_bytes(b"x")
    (copy / "README.md").write_text("not data")  # ignored: not a data file
    problems = verify(copy, entry)
    assert problems == [
        "image/image_1.jpg: missing (the manifest lists it)",
        f"toolmeta.json: sha256 {sha256_file(copy / 'toolmeta.json')} but the manifest expects "
        f"{entry.files['toolmeta.json']}",
        "image/new.jpg: not in the manifest entry 'gta_sample'",
    ]


def test_finder_metadata_is_not_data_anywhere(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(SAMPLE, copy)
    for rel in (".DS_Store", "image/.DS_Store", "image/sub/.DS_Store"):
        (copy / rel).parent.mkdir(exist_ok=True)
        (copy / rel).write_bytes(b"\x00\x00\x00\x01Bud1")
    (copy / "image" / "DS_Store.jpg").write_bytes(b"x")  # only the exact name is exempt
    entry = entry_for(SAMPLE, "gta_sample", "", 17)
    assert verify(copy, entry) == ["image/DS_Store.jpg: not in the manifest entry 'gta_sample'"]
    assert finder_metadata(copy) == [".DS_Store", "image/.DS_Store", "image/sub/.DS_Store"]
    assert ".DS_Store" not in str(entry_for(copy, "x", "", 17).files)


def test_recording_the_same_files_keeps_the_entry_and_learns_an_archive_checksum(
    tmp_path: Path,
) -> None:
    path = tmp_path / "data" / "manifest.json"

    def recorded() -> ManifestEntry | None:
        return load_manifest(tmp_path).get("gta_dataset")

    files = {"dataset.json": "0" * 64}
    by_hand = ManifestEntry("gta_dataset", files, "written by hand", 229, None, "unknown: why")
    record(path, [by_hand])
    record(path, [ManifestEntry("gta_dataset", files, "generic", 229)])
    assert recorded() == by_hand
    zipped = ManifestEntry("gta_dataset", files, "generic", 229, "a" * 64, "sha256 of the zip")
    record(path, [zipped])
    learnt = ManifestEntry(
        "gta_dataset", files, "written by hand", 229, "a" * 64, "sha256 of the zip"
    )
    assert recorded() == learnt
    # A checksum once known is not replaced by another archive of the same files (a mirror's).
    record(path, [ManifestEntry("gta_dataset", files, "generic", 229, "b" * 64, "mirror")])
    assert recorded() == learnt
    # Other files: the new entry replaces the old one whole.
    changed = ManifestEntry("gta_dataset", {"dataset.json": "1" * 64}, "generic", 229)
    record(path, [changed])
    assert recorded() == changed
    stored = json.loads(path.read_text())["datasets"]["gta_dataset"]
    assert "archive_sha256" not in stored  # nothing known, nothing said


def test_project_entries_override_packaged_ones_and_record_keeps_the_rest(tmp_path: Path) -> None:
    project = tmp_path / "data" / "manifest.json"
    mine = ManifestEntry("gta_sample", {"dataset.json": "0" * 64}, "overridden")
    other = ManifestEntry("gta_dataset", {"dataset.json": "1" * 64}, "release", 229)
    record(project, [mine])
    record(project, [other])
    manifest = load_manifest(tmp_path)
    assert manifest.get("gta_sample") == mine
    assert manifest.get("gta_dataset") == other
    assert manifest.sources == [packaged_manifest_path(), project]
    stored = json.loads(project.read_text())
    assert stored["format"] == FORMAT
    assert list(stored["datasets"]) == ["gta_dataset", "gta_sample"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "cannot be read"),
        ('{"format": "other/1", "datasets": {}}', "field 'format' must be 'pytest-gta-manifest/1'"),
        (f'{{"format": "{FORMAT}", "datasets": []}}', "field 'datasets' must be an object"),
        (
            json.dumps({"format": FORMAT, "datasets": {"x": {"files": {"dataset.json": "abc"}}}}),
            "datasets.x.files.dataset.json: not a lowercase hex sha256: 'abc'",
        ),
        (
            f'{{"format": "{FORMAT}", "datasets": {{"x": {{"files": {{"../a": "{"0" * 64}"}}}}}}}}',
            "datasets.x.files: '../a' must be a relative POSIX path",
        ),
        (
            # Files but neither dataset.json nor end.json (no files at all: not pinned yet).
            f'{{"format": "{FORMAT}", "datasets": '
            f'{{"x": {{"files": {{"a.txt": "{"0" * 64}"}}}}}}}}',
            "datasets.x.files: must list dataset.json (GTA) or end.json (GTA-Workflow)",
        ),
        (f'{{"format": "{FORMAT}", "datasets": {{"x": 3}}}}', "datasets.x: must be an object"),
        (
            json.dumps(
                {
                    "format": FORMAT,
                    "datasets": {"x": {"files": {"dataset.json": "0" * 64}, "archive_sha256": ""}},
                }
            ),
            "datasets.x.archive_sha256: not a lowercase hex sha256 or null: ''",
        ),
        (
            json.dumps(
                {
                    "format": FORMAT,
                    "datasets": {"x": {"files": {"dataset.json": "0" * 64}, "archive_note": 1}},
                }
            ),
            "datasets.x.archive_note: must be a string, not 1",
        ),
    ],
)
def test_bad_manifests_name_the_file_and_field(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "data" / "manifest.json"
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(GtaDataError) as info:
        load_manifest(tmp_path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=70),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=5,
)


@given(
    archive=JSON | st.from_regex(r"[0-9a-f]{64}", fullmatch=True),
    note=JSON,
)
def test_any_archive_fields_load_as_written_or_name_the_field(
    archive: object, note: object
) -> None:
    """A manifest is data from a project or a wheel: the archive fields load or say which is bad."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data" / "manifest.json"
        path.parent.mkdir()
        entry = {
            "files": {"dataset.json": "0" * 64},
            "archive_sha256": archive,
            "archive_note": note,
        }
        path.write_text(json.dumps({"format": FORMAT, "datasets": {"x": entry}}))
        valid_archive = archive is None or (
            isinstance(archive, str)
            and len(archive) == 64
            and set(archive) <= set("0123456789abcdef")
        )
        if valid_archive and isinstance(note, str):
            loaded = load_manifest(Path(tmp)).get("x")
            assert loaded is not None
            assert (loaded.archive_sha256, loaded.archive_note) == (archive, note)
        else:
            field = "archive_note" if valid_archive else "archive_sha256"
            with pytest.raises(GtaDataError, match=f"datasets\\.x\\.{field}: "):
                load_manifest(Path(tmp))


def test_bad_project_manifest_is_an_error_of_the_download(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "data").mkdir()
    (pytester.path / "data" / "manifest.json").write_text("{}")
    result = pytester.runpytest("--gta-download", f"--gta-download-url={SAMPLE}")
    assert result.ret == 1
    assert "data/manifest.json: field 'format' must be" in result.stderr.str()


def test_install_request_target() -> None:
    request = InstallRequest(data_dir=Path("/x"), manifest=load_manifest(None))
    assert request.target == Path("/x/gta_dataset")


def test_packaged_manifest_prefers_the_copy_inside_a_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gta.install import manifest as manifest_module

    package = tmp_path / "site-packages" / "pytest_gta"
    (package / "_data").mkdir(parents=True)
    (package / "_data" / "manifest.json").write_text("{}")
    monkeypatch.setattr(manifest_module, "__file__", str(package / "install" / "manifest.py"))
    assert packaged_manifest_path() == package / "_data" / "manifest.json"


def test_an_entry_that_is_both_file_and_directory_is_a_clear_error(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "a.zip", [("gta/image", b"a file"), ("gta/image/x.jpg", b"x")])
    with pytest.raises(GtaDataError, match="cannot be unpacked into"):
        extract_zip(archive, tmp_path / "out")
