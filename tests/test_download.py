"""``pytest --gta-download``: fetch, verify, unpack, lock (issue 5).

The release and the Hub cannot be reached from CI, so every download here is real HTTP against
a server on 127.0.0.1 (``tests/helpers/file_server.py``) serving zips the tests build from the
bundled sample, or a local file. The tests' project manifest (``data/manifest.json`` under the
pytester rootdir) records the sample's sha256s as the ``gta_dataset`` entry, which is exactly what a
project does after ``--gta-download --gta-record-manifest``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_gta.dataset import bundled_sample_path
from pytest_gta.errors import GtaDataError
from pytest_gta.files import sha256_file
from pytest_gta.install.installer import InstallRequest, install
from pytest_gta.install.manifest import (
    FORMAT,
    INSTALL_RECORD,
    RELEASE_ENTRY,
    Manifest,
    dataset_files,
    entry_for,
)
from pytest_gta.install.sources import HttpSettings, SourceUnavailable, fetch_url
from tests.helpers.file_server import FileServer, serve_file
from tests.helpers.gta_run import FAST_SIM, NO_HYPOTHESIS, SAMPLE_DATA
from tests.helpers.hf_server import PointAt, serve_hf_repo

SAMPLE = bundled_sample_path()
FILES = dataset_files(SAMPLE)


def sample_zip(
    prefix: str = "gta_dataset/",
    tamper: dict[str, bytes] | None = None,
    extra: tuple[tuple[str, bytes], ...] = (),
) -> bytes:
    """The sample as a release-style zip, optionally with altered or extra entries."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for rel in FILES:
            data = (tamper or {}).get(rel, (SAMPLE / rel).read_bytes())
            archive.writestr(prefix + rel, data)
        for name, data in extra:
            archive.writestr(name, data)
    return buffer.getvalue()


def write_manifest(root: Path, entry_root: Path = SAMPLE) -> Path:
    entry = entry_for(entry_root, RELEASE_ENTRY, "the sample standing in for the release", 17)
    path = root / "data" / "manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": FORMAT, "datasets": {RELEASE_ENTRY: entry.to_json()}}))
    return path


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project whose manifest expects the sample as ``gta_dataset``."""
    pytester.makeini("[pytest]\n")
    write_manifest(pytester.path)
    return pytester


def download(
    pytester: pytest.Pytester, body: bytes, *args: str, **options: object
) -> tuple[pytest.RunResult, FileServer]:
    """``pytest --gta-download`` from a local HTTP server serving ``body``."""
    with serve_file(body, **options) as server:
        result = pytester.runpytest("--gta-download", f"--gta-download-url={server.url}", *args)
    return result, server


def installed(root: Path) -> Path:
    return root / "data" / "gta_dataset"


def assert_identical_to_sample(target: Path) -> None:
    assert dataset_files(target) == FILES
    for rel in FILES:
        assert sha256_file(target / rel) == sha256_file(SAMPLE / rel), rel


def assert_nothing_installed(data_dir: Path) -> None:
    """No dataset, no staging directory: nothing that could pass for data."""
    assert not (data_dir / "gta_dataset").exists()
    leftovers = (
        [p.name for p in data_dir.glob(".gta_dataset.staging-*")] if data_dir.exists() else []
    )
    assert leftovers == []


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- success ------------------------------------------------------------------------------


def test_download_over_http_installs_verifies_and_is_used_by_the_next_run(
    project: pytest.Pytester,
) -> None:
    body = sample_zip()
    result, server = download(project, body)
    assert result.ret == 0, result.stderr.str()
    target = installed(project.path)
    assert_identical_to_sample(target)
    out = result.stdout.str()
    assert f"installed {target} from {server.url}" in out
    assert f"sha256 of {len(FILES)} files match manifest entry 'gta_dataset'" in out
    record = json.loads((target / INSTALL_RECORD).read_text())
    assert record["origin"] == server.url
    assert record["archive_sha256"] == hashlib.sha256(body).hexdigest()
    assert record["queries"] == 17
    # The finished download is not kept: the unpacked dataset is the cache.
    assert list((project.path / "data" / ".downloads").iterdir()) == []
    assert len(server.gets()) == 1

    run = project.runpytest("--gta-model=oracle", FAST_SIM, "--gta-ids=0,1", "-n", "2")
    run.assert_outcomes(passed=2)
    header = run.stdout.str()
    assert f"dataset {target} (17 queries, data/gta_dataset)" in header
    assert "runs on the bundled sample" not in header


def test_download_from_a_local_zip_a_file_url_and_a_directory(
    project: pytest.Pytester, tmp_path: Path
) -> None:
    archive = tmp_path / "gta_dataset.zip"
    archive.write_bytes(sample_zip(prefix=""))  # files at the top level work too
    for index, source in enumerate([str(archive), archive.as_uri(), str(SAMPLE)]):
        data_dir = project.path / f"d{index}"
        result = project.runpytest(
            "--gta-download", f"--gta-download-url={source}", f"--gta-data-dir={data_dir}"
        )
        assert result.ret == 0, (source, result.stderr.str())
        assert_identical_to_sample(data_dir / "gta_dataset")
    # A user's own file is never deleted.
    assert archive.is_file()


def test_a_second_download_finds_the_dataset_and_fetches_nothing(project: pytest.Pytester) -> None:
    with serve_file(sample_zip()) as server:
        assert project.runpytest("--gta-download", f"--gta-download-url={server.url}").ret == 0
        again = project.runpytest("--gta-download", f"--gta-download-url={server.url}")
        assert len(server.gets()) == 1
    assert again.ret == 0
    again.stdout.fnmatch_lines(
        ["*already installed: *gta_dataset (from http://127.0.0.1:*", "*verification: sha256 of*"]
    )


# -- verification ---------------------------------------------------------------------------


def test_allow_unverified_installs_a_mirror_and_says_so(project: pytest.Pytester) -> None:
    bad = sample_zip(tamper={"toolmeta.json": (SAMPLE / "toolmeta.json").read_bytes() + b"\n"})
    with serve_file(bad) as server:
        result = project.runpytest(
            "--gta-download", f"--gta-download-url={server.url}", "--gta-allow-unverified"
        )
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "*verification: UNVERIFIED (differs from the manifest)*",
            "*warning: toolmeta.json: sha256*",
        ]
    )
    record = json.loads((installed(project.path) / INSTALL_RECORD).read_text())
    assert record["verification"].startswith("UNVERIFIED")
    info = project.runpytest("--gta-data-info")
    info.stdout.fnmatch_lines(["*verification at install: UNVERIFIED*"])


def test_finder_metadata_is_left_out_and_said_so_other_extras_still_fail(
    project: pytest.Pytester,
) -> None:
    """A zip packed by macOS Finder: ``.DS_Store`` beside the data, AppleDouble in __MACOSX/.

    Whether the official archive has them is unknown; the folder we pinned has two .DS_Store.
    """
    finder = sample_zip(
        extra=(
            ("gta_dataset/.DS_Store", b"\x00\x00\x00\x01Bud1"),
            ("gta_dataset/image/.DS_Store", b"\x00\x00\x00\x01Bud1"),
            ("__MACOSX/gta_dataset/._dataset.json", b"\x00\x05\x16\x07"),
        )
    )
    result, _ = download(project, finder)
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "*left out .DS_Store (macOS Finder metadata, not data)",
            "*left out image/.DS_Store (macOS Finder metadata, not data)",
            f"*verification: sha256 of {len(FILES)} files match manifest entry 'gta_dataset'",
        ]
    )
    target = installed(project.path)
    assert_identical_to_sample(target)
    assert not list(target.rglob(".DS_Store"))
    record = json.loads((target / INSTALL_RECORD).read_text())
    assert record["left_out"] == [".DS_Store", "image/.DS_Store"]

    # Only .DS_Store is exempt: an AppleDouble file beside the images is named like one
    # (._image_1.jpg) and is refused like any file the entry does not list.
    double = sample_zip(extra=(("gta_dataset/image/._image_1.jpg", b"\x00\x05\x16\x07"),))
    refused, _ = download(project, double, "--gta-data-dir=other")
    assert refused.ret == 1
    assert "image/._image_1.jpg: not in the manifest entry 'gta_dataset'" in refused.stderr.str()
    assert_nothing_installed(project.path / "other")


@pytest.mark.usefixtures("no_release_entry")
def test_without_a_manifest_entry_the_paper_counts_decide(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")  # no project manifest: only the packaged one (sample entry)
    result, _ = download(pytester, sample_zip())
    assert result.ret == 1
    err = result.stderr.str()
    assert "no sha256 manifest entry 'gta_dataset' is recorded" in err
    assert "queries: 17 (paper: 229)" in err
    assert "images: 11 (paper: 252)" in err  # image/ files besides the generated-image stand-in
    # Counted differently by the paper and the release (728 vs 557 calls): never compared.
    assert "tool_calls" not in err
    assert_nothing_installed(pytester.path / "data")


@pytest.mark.usefixtures("no_release_entry")
def test_record_manifest_after_a_download_that_reproduces_the_paper(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """First verified download -> entry recorded -> later downloads are checked by sha256.

    The sample stands in for the release by making the paper's counts the sample's (in-process,
    so the patch reaches the plugin).
    """
    from pytest_gta import datainfo
    from pytest_gta.validation import load_dataset

    stats = datainfo.dataset_statistics(load_dataset(SAMPLE))
    counts = {key: stats[key] for key in datainfo.PAPER_KEYS}
    monkeypatch.setattr(datainfo, "PAPER", {**datainfo.PAPER, **counts})
    pytester.makeini("[pytest]\n")
    body = sample_zip()
    with serve_file(body) as server:
        result = pytester.runpytest(
            "--gta-download", f"--gta-download-url={server.url}", "--gta-record-manifest"
        )
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            f"*recorded {len(FILES)} sha256s as entry 'gta_dataset' in *data/manifest.json",
            "*verification: matches the paper's published counts*",
        ]
    )
    text = (pytester.path / "data" / "manifest.json").read_text()
    entry = json.loads(text)["datasets"]["gta_dataset"]
    assert entry["files"] == {rel: sha256_file(SAMPLE / rel) for rel in FILES}
    assert entry["queries"] == 17
    assert entry["description"] == (
        f"GTA dataset, 17 queries, recorded by pytest --gta-download --gta-record-manifest "
        f"from {server.url}"
    )
    assert entry["archive_sha256"] == hashlib.sha256(body).hexdigest()
    assert entry["archive_note"].startswith(f"sha256 of the archive {server.url} as fetched on ")
    assert str(pytester.path) not in text  # a committed file: no path of this machine

    tampered = sample_zip(tamper={"dataset.json": (SAMPLE / "dataset.json").read_bytes() + b" "})
    with serve_file(tampered) as server:
        second = pytester.runpytest(
            "--gta-download", f"--gta-download-url={server.url}", f"--gta-data-dir={tmp_path}"
        )
    assert second.ret == 1
    assert "dataset.json: sha256" in second.stderr.str()


def test_record_manifest_needs_download(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--gta-record-manifest")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "pytest --gta-download --gta-record-manifest" in result.stderr.str()


# -- broken downloads, called directly ------------------------------------------------------------
#
# The retry and resume logic is plain functions (``sources.fetch_url``, ``installer.install``):
# called here against the real local server, with the backoff shortened, no pytest session.

FAST = HttpSettings(backoff=0.01)


class Said(list[str]):
    """The progress lines an install prints (its ``log``), kept for assertions."""

    def __call__(self, line: str) -> None:
        self.append(line)


def direct(data_dir: Path, url: str) -> InstallRequest:
    """What ``pytest --gta-download --gta-download-url=url`` asks of the installer."""
    entry = entry_for(SAMPLE, RELEASE_ENTRY, "the sample standing in for the release", 17)
    manifest = Manifest({RELEASE_ENTRY: entry}, [data_dir / "manifest.json"])
    return InstallRequest(data_dir=data_dir, manifest=manifest, url=url, http=FAST)


def parts(downloads: Path) -> list[Path]:
    return sorted(downloads.glob("*.part")) if downloads.exists() else []


def test_truncated_download_keeps_the_part_file_and_resumes_next_time(tmp_path: Path) -> None:
    body = sample_zip()
    downloads = tmp_path / ".downloads"
    with serve_file(body, truncate=100) as server:
        with pytest.raises(GtaDataError) as info:
            fetch_url(server.url, downloads, Said(), FAST)
        message = str(info.value)
        assert f"download of {server.url} is incomplete after 4 attempts" in message
        assert "the next --gta-download resumes it" in message
        assert len(server.gets()) == 4
        [part] = parts(downloads)
        kept = part.stat().st_size
        assert 0 < kept < len(body)
        assert body.startswith(part.read_bytes())

        server.truncate = 0
        said = Said()
        fetched = fetch_url(server.url, downloads, said, FAST)
        last = server.gets()[-1]
    assert last["Range"] == f"bytes={kept}-"
    assert last["If-Range"] == server.etag
    assert f"  resuming at {kept} bytes ({len(body)} bytes)" in said
    assert fetched.path.read_bytes() == body
    assert (fetched.kind, fetched.origin, fetched.owned) == ("zip", server.url, True)
    assert parts(downloads) == []


def test_a_connection_cut_once_is_resumed_within_the_same_call(tmp_path: Path) -> None:
    body = sample_zip()
    with serve_file(body, truncate=1) as server:
        fetched = fetch_url(server.url, tmp_path, Said(), FAST)
        gets = server.gets()
    assert len(gets) == 2
    assert "Range" not in gets[0]
    assert gets[1]["Range"] == f"bytes={len(body) // 2}-"
    assert fetched.path.read_bytes() == body


def test_a_server_that_ignores_ranges_restarts_the_download(tmp_path: Path) -> None:
    body = sample_zip()
    with serve_file(body, truncate=1, honour_range=False) as server:
        said = Said()
        fetched = fetch_url(server.url, tmp_path, said, FAST)
        gets = server.gets()
    assert len(gets) == 2
    assert gets[1]["Range"].startswith("bytes=")  # asked, answered with the whole file (200)
    assert said.count(f"  downloading ({len(body)} bytes)") == 2
    assert not any(line.startswith("  resuming at") for line in said)
    assert fetched.path.read_bytes() == body


def test_a_changed_file_on_the_server_restarts_rather_than_splices(tmp_path: Path) -> None:
    """If-Range: a partial file of the old body is never completed with the new one's bytes."""
    old, new = sample_zip(), sample_zip(prefix="other/")
    with serve_file(old, truncate=100) as server:
        with pytest.raises(GtaDataError):
            fetch_url(server.url, tmp_path, Said(), FAST)
        old_etag = server.etag
        server.body, server.truncate = new, 0
        said = Said()
        fetched = fetch_url(server.url, tmp_path, said, FAST)
        last = server.gets()[-1]
    assert last["If-Range"] == old_etag != server.etag
    assert f"  downloading ({len(new)} bytes)" in said
    assert not any(line.startswith("  resuming at") for line in said)
    assert fetched.path.read_bytes() == new


def test_transient_server_errors_are_retried(tmp_path: Path) -> None:
    body = sample_zip()  # built once: a zip's entries carry the time it was made
    with serve_file(body, statuses=[503, 502, 429]) as server:
        said = Said()
        fetched = fetch_url(server.url, tmp_path, said, FAST)
        assert len(server.gets()) == 4
    assert "  HTTP 503 Service Unavailable; retrying" in said
    assert "  HTTP 429 Too Many Requests; retrying" in said
    assert fetched.path.read_bytes() == body


def test_transient_errors_give_up_after_the_attempts_and_keep_nothing(tmp_path: Path) -> None:
    with serve_file(sample_zip(), statuses=[503] * 4) as server:
        with pytest.raises(SourceUnavailable, match=r"^HTTP 503 Service Unavailable$"):
            fetch_url(server.url, tmp_path, Said(), HttpSettings(backoff=0.01, attempts=4))
        assert len(server.gets()) == 4
    assert list(tmp_path.iterdir()) == []


def test_not_found_is_not_retried_and_says_how_to_get_the_data(tmp_path: Path) -> None:
    with serve_file(sample_zip(), statuses=[404]) as server:
        with pytest.raises(GtaDataError) as info:
            install(direct(tmp_path, server.url), Said())
        assert len(server.gets()) == 1
    message = str(info.value)
    assert f"  - {server.url}: HTTP 404 Not Found\n" in message
    assert "or by hand: download https://github.com/open-compass/GTA/releases" in message
    assert_nothing_installed(tmp_path)


def test_refused_connection_gives_the_clear_message(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/gta_dataset.zip"
    with pytest.raises(GtaDataError) as info:
        install(direct(tmp_path, url), Said())
    message = str(info.value)
    assert "could not download the GTA dataset; every source failed" in message
    assert f"  - {url}: cannot connect (" in message
    for hint in ("pytest --gta-download", "gta_dataset.zip", "dataset.json", "toolmeta.json"):
        assert hint in message
    assert_nothing_installed(tmp_path)
    # No partial file is left when the host was never reached.
    assert list((tmp_path / ".downloads").iterdir()) == []


def test_a_url_that_cannot_be_fetched_is_not_retried(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match=r"^not a URL that can be downloaded"):
        fetch_url("https://", tmp_path, Said(), HttpSettings(backoff=60))  # a retry would hang


def test_a_truncated_archive_is_reported_and_discarded(tmp_path: Path) -> None:
    body = sample_zip()
    with serve_file(body[: len(body) - 200]) as server:  # a complete HTTP body, a broken zip
        with pytest.raises(GtaDataError) as info:
            install(direct(tmp_path, server.url), Said())
    assert "not a complete zip archive" in str(info.value)
    assert "truncated" in str(info.value)
    assert_nothing_installed(tmp_path)
    assert list((tmp_path / ".downloads").iterdir()) == []


def test_checksum_mismatch_names_the_file_and_installs_nothing(tmp_path: Path) -> None:
    with serve_file(sample_zip(tamper={"image/image_3.jpg": b"not the image"})) as server:
        with pytest.raises(GtaDataError) as info:
            install(direct(tmp_path, server.url), Said())
    message = str(info.value)
    assert "checksum mismatch: 1 file(s) differ from manifest entry 'gta_dataset'" in message
    assert "image/image_3.jpg: sha256 " in message
    assert "Nothing was installed" in message
    assert "--gta-allow-unverified" in message
    assert_nothing_installed(tmp_path)
    # A download that fails verification is discarded, not kept for resuming.
    assert list((tmp_path / ".downloads").iterdir()) == []


def test_extra_and_missing_files_fail_verification(tmp_path: Path) -> None:
    extra = sample_zip(extra=(("gta_dataset/image/intruder.jpg", b"x"),))
    with serve_file(extra) as server, pytest.raises(GtaDataError) as info:
        install(direct(tmp_path, server.url), Said())
    assert "image/intruder.jpg: not in the manifest entry 'gta_dataset'" in str(info.value)
    assert_nothing_installed(tmp_path)


def test_unusable_data_is_never_installed_even_when_unverified_is_allowed(tmp_path: Path) -> None:
    broken = sample_zip(tamper={"dataset.json": b"{not json"})
    with serve_file(broken) as server, pytest.raises(GtaDataError) as info:
        install(replace(direct(tmp_path, server.url), allow_unverified=True), Said())
    assert "not a usable GTA dataset" in str(info.value)
    assert "dataset.json" in str(info.value)
    assert_nothing_installed(tmp_path)


def test_an_existing_directory_without_data_is_not_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "gta_dataset"
    target.mkdir(parents=True)
    (target / "notes.txt").write_text("mine")
    with pytest.raises(GtaDataError, match=r"exists but has no dataset\.json; move it away"):
        install(direct(tmp_path, str(SAMPLE)), Said())
    assert (target / "notes.txt").read_text() == "mine"


# -- unsafe archives ------------------------------------------------------------------------------


def test_a_traversal_entry_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    evil = sample_zip(extra=(("gta_dataset/../../escaped.txt", b"pwned"),))
    data_dir = tmp_path / "a" / "b" / "data"
    with serve_file(evil) as server, pytest.raises(GtaDataError) as info:
        install(direct(data_dir, server.url), Said())
    assert "entry 'gta_dataset/../../escaped.txt' points outside the target directory" in str(
        info.value
    )
    assert_nothing_installed(data_dir)
    assert not list(tmp_path.rglob("escaped.txt"))


def test_a_zip_bomb_is_refused_from_its_sizes(tmp_path: Path) -> None:
    bomb = sample_zip(extra=(("gta_dataset/image/huge.jpg", bytes(64 << 20)),))
    assert len(bomb) < 2 << 20
    said = Said()
    with serve_file(bomb) as server, pytest.raises(GtaDataError) as info:
        install(direct(tmp_path, server.url), said)
    assert "entry 'gta_dataset/image/huge.jpg' expands" in str(info.value)
    assert "zip bomb?" in str(info.value)
    assert_nothing_installed(tmp_path)
    # Refused from the central directory, before unpacking: no file count was reached.
    assert not any(line.strip().endswith(" files") for line in said)


# -- concurrency and interruption ----------------------------------------------------------------


#: What a process says while another holds the installer lock.
WAITING = "to finish installing gta_dataset"


def _spawn(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *NO_HYPOTHESIS, "-p", "no:cacheprovider", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_concurrent_downloads_fetch_once_and_both_succeed(project: pytest.Pytester) -> None:
    """The first download is held open until the second process says it waits for the lock."""
    gate = threading.Event()
    with serve_file(sample_zip(), gate=gate) as server:
        procs = [
            _spawn(project.path, "--gta-download", f"--gta-download-url={server.url}")
            for _ in range(2)
        ]
        lines: list[list[str]] = [[], []]
        readers = [
            threading.Thread(target=lambda p=p, out=out: out.extend(p.stdout), daemon=True)
            for p, out in zip(procs, lines, strict=True)
        ]
        for reader in readers:
            reader.start()
        deadline = time.monotonic() + 120
        # "waiting for pid N ...", or "waiting for another process ..." when the second process
        # reads the lock file between the first one's flock and its writing its pid there.
        while not any(WAITING in line for out in lines for line in list(out)):
            assert time.monotonic() < deadline, lines  # bound: catches a hang
            assert all(p.poll() is None for p in procs), lines
            time.sleep(0.05)
        gate.set()
        for proc in procs:
            proc.wait(timeout=120)
        for reader in readers:
            reader.join(timeout=10)
        errors = []
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stderr is not None
            errors.append(proc.stderr.read())
            proc.stdout.close()
            proc.stderr.close()
        gets = server.gets()
    assert [p.returncode for p in procs] == [0, 0], errors
    assert len(gets) == 1
    texts = ["".join(out) for out in lines]
    downloader = next(t for t in texts if WAITING not in t)
    waiter = next(t for t in texts if WAITING in t)
    assert "installed " in downloader
    assert "already installed" not in downloader
    assert "already installed:" in waiter
    assert "fetching" not in waiter
    assert_identical_to_sample(installed(project.path))


def test_a_killed_download_leaves_no_dataset_and_the_next_one_completes(
    project: pytest.Pytester,
) -> None:
    data_dir = project.path / "data"
    with serve_file(sample_zip(), slow=20) as server:
        proc = _spawn(project.path, "--gta-download", f"--gta-download-url={server.url}")
        deadline = time.monotonic() + 60
        while not list((data_dir / ".downloads").glob("*.part")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        proc.kill()
        proc.communicate()
        assert_nothing_installed(data_dir)
        # What a crash during unpacking leaves: a staging directory with data in it.
        stale = data_dir / ".gta_dataset.staging-crashed" / "unpacked" / "gta_dataset"
        stale.mkdir(parents=True)
        (stale / "dataset.json").write_text("{}")
        # A run does not take it for a dataset ...
        run = project.runpytest("--gta-model=openai/gpt-4o")
        assert run.ret == pytest.ExitCode.USAGE_ERROR
        assert "no GTA dataset" in run.stderr.str()
        # ... and the next install cleans it up.
        server.slow = 0
        result = project.runpytest("--gta-download", f"--gta-download-url={server.url}")
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(["*removing *.gta_dataset.staging-crashed left by an interrupted*"])
    assert_only_the_dataset_installed(data_dir)


def assert_only_the_dataset_installed(data_dir: Path) -> None:
    assert_identical_to_sample(data_dir / "gta_dataset")
    assert not list(data_dir.glob(".gta_dataset.staging-*"))


def test_an_interrupt_during_verification_leaves_nothing(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gta.install import installer

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(installer, "check_dataset", interrupted)
    with serve_file(sample_zip()) as server, pytest.raises(KeyboardInterrupt):
        project.runpytest("--gta-download", f"--gta-download-url={server.url}")
    assert_nothing_installed(project.path / "data")


# -- where the data goes ---------------------------------------------------------------------------


def test_data_dir_option_env_and_ini_in_that_order(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    project.makeini(f"[pytest]\ngta_data_dir = {tmp_path / 'from-ini'}\n")
    write_manifest(project.path)

    def info_dir(*args: str) -> str:
        result = project.runpytest("--gta-data-info", *args)
        return result.stdout.str()

    assert f"no GTA dataset installed in {tmp_path / 'from-ini'} (data directory from ini" in (
        info_dir()
    )
    monkeypatch.setenv("GTA_DATA_DIR", str(tmp_path / "from-env"))
    assert f"installed in {tmp_path / 'from-env'} (data directory from GTA_DATA_DIR)" in info_dir()
    assert f"in {tmp_path / 'from-cli'} (data directory from --gta-data-dir)" in info_dir(
        f"--gta-data-dir={tmp_path / 'from-cli'}"
    )

    result = project.runpytest("--gta-download", f"--gta-download-url={SAMPLE}")
    assert result.ret == 0, result.stderr.str()
    assert_identical_to_sample(tmp_path / "from-env" / "gta_dataset")
    run = project.runpytest("--gta-model=oracle", "--gta-ids=0", FAST_SIM)
    run.assert_outcomes(passed=1)
    assert f"dataset {tmp_path / 'from-env' / 'gta_dataset'} (17 queries" in run.stdout.str()


# -- without data ----------------------------------------------------------------------------------


def test_a_model_run_without_data_says_exactly_how_to_get_it(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest("--gta-model=openai/gpt-4o")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    data_dir = pytester.path / "data"
    assert (
        f"no GTA dataset to run --gta-model=openai/gpt-4o on: no dataset installed in {data_dir}"
        in err
    )
    assert "pytest --gta-download\n" in err
    assert "https://github.com/open-compass/GTA/releases/download/v0.1.0/gta_dataset.zip" in err
    assert f"{data_dir / 'gta_dataset' / 'dataset.json'}" in err
    assert "--gta-data=sample" in err
    assert "collected" not in result.stdout.str()


def test_the_sample_is_used_only_when_asked_or_for_self_checks(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    asked = pytester.runpytest("--gta-model=oracle", SAMPLE_DATA, "--gta-ids=0", FAST_SIM)
    asked.assert_outcomes(passed=1)
    assert "(17 queries, bundled sample)" in asked.stdout.str()
    assert "runs on the bundled sample because" not in asked.stdout.str()

    self_check = pytester.runpytest("--gta-model=oracle", "--gta-ids=0", FAST_SIM)
    self_check.assert_outcomes(passed=1)
    self_check.stdout.fnmatch_lines(
        [
            "*oracle runs on the bundled sample because no dataset is installed; get the real one"
            " with pytest --gta-download"
        ]
    )


def test_data_info_without_data_explains_and_fails(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest("--gta-data-info")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            f"pytest-gta: no GTA dataset installed in {pytester.path / 'data'}*",
            "*--gta-data=sample*",
            "Get the GTA dataset with one of:",
        ]
    )


def test_download_runs_no_tests_and_starts_no_workers(project: pytest.Pytester) -> None:
    project.makepyfile(test_x="def test_x():\n    raise AssertionError('collected')\n")
    result = project.runpytest("--gta-download", f"--gta-download-url={SAMPLE}", "-n", "2")
    assert result.ret == 0, result.stderr.str()
    assert "collected" not in result.stdout.str()
    assert "created: 2/2 workers" not in result.stdout.str()


# -- Hugging Face -------------------------------------------------------------------------------


def sample_files(prefix: str = "") -> dict[str, bytes]:
    return {prefix + rel: (SAMPLE / rel).read_bytes() for rel in FILES}


def test_hugging_face_is_tried_first(
    project: pytest.Pytester, hub_env: PointAt, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gta.install import sources

    repo = {"README.md": b"---\nlicense: cc-by-4.0\n---\n", **sample_files()}
    with serve_hf_repo(repo) as hub, serve_file(sample_zip()) as release:
        hub_env(hub.url)
        monkeypatch.setattr(sources, "RELEASE_URL", release.url)
        result = project.runpytest("--gta-download")
        assert release.gets() == []
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(
        ["*fetching Hugging Face dataset Jize1/GTA", f"*installed * from hf:Jize1/GTA@{hub.commit}"]
    )
    assert_identical_to_sample(installed(project.path))


def test_a_missing_hub_repo_falls_back_to_the_release(
    project: pytest.Pytester, hub_env: PointAt, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gta.install import sources

    with serve_hf_repo({}, missing=True) as hub, serve_file(sample_zip()) as release:
        hub_env(hub.url)
        monkeypatch.setattr(sources, "RELEASE_URL", release.url)
        result = project.runpytest("--gta-download")
        assert len(release.gets()) == 1
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "*unavailable: RepositoryNotFoundError (HTTP 404); no dataset repo Jize1/GTA at this*",
            f"*fetching {release.url}",
            f"*installed * from {release.url}",
        ]
    )


@pytest.mark.slow  # 4 s in a full run: slow by cost (issue 39)
def test_a_private_repo_needs_the_token(
    project: pytest.Pytester, hub_env: PointAt, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gta.install import sources

    monkeypatch.setattr(sources.HttpSettings, "backoff", 0.01)
    monkeypatch.setattr(sources, "RELEASE_URL", f"http://127.0.0.1:{closed_port()}/x.zip")
    with serve_hf_repo(sample_files(), token="hf_secret") as hub:
        hub_env(hub.url)
        refused = project.runpytest("--gta-download")
        assert refused.ret == 1
        err = refused.stderr.str()
        assert "every source failed" in err
        assert (
            "  - Hugging Face dataset Jize1/GTA: HfHubHTTPError (HTTP 401); a private or gated "
            "copy needs HF_TOKEN" in err
        )
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        result = project.runpytest("--gta-download")
    assert result.ret == 0, result.stderr.str()
    assert_identical_to_sample(installed(project.path))


def test_a_hub_repo_that_stores_the_release_zip(project: pytest.Pytester, hub_env: PointAt) -> None:
    with serve_hf_repo({"gta_dataset.zip": sample_zip()}) as hub:
        hub_env(hub.url)
        result = project.runpytest("--gta-download")
    assert result.ret == 0, result.stderr.str()
    assert_identical_to_sample(installed(project.path))


def test_offline_consults_only_the_hub_cache(
    project: pytest.Pytester, hub_env: PointAt, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from pytest_gta.install import sources

    with serve_hf_repo(sample_files("gta_dataset/")) as hub, serve_file(sample_zip()) as release:
        monkeypatch.setattr(sources, "RELEASE_URL", release.url)
        hub_env(hub.url, offline=True)
        empty = project.runpytest("--gta-download")
        assert empty.ret == 1
        assert hub.requests == []
        assert (
            "  - Hugging Face dataset Jize1/GTA: HF_HUB_OFFLINE is set, and Jize1/GTA is not in "
            "the local Hugging Face cache"
        ) in empty.stderr.str()
        assert release.url not in empty.stderr.str().split("Get the GTA dataset")[0]

        hub_env(hub.url)  # online once: fills the cache
        assert project.runpytest("--gta-download", f"--gta-data-dir={tmp_path / 'a'}").ret == 0
        seen = len(hub.requests)
        hub_env(hub.url, offline=True)
        cached = project.runpytest("--gta-download", f"--gta-data-dir={tmp_path / 'b'}")
        assert len(hub.requests) == seen
        assert release.gets() == []
    assert cached.ret == 0, cached.stderr.str()
    assert_identical_to_sample(tmp_path / "b" / "gta_dataset")


def test_hub_environment_and_token_reach_a_fresh_process(
    project: pytest.Pytester, tmp_path: Path
) -> None:
    """No patching: HF_ENDPOINT, HF_HOME and HF_TOKEN as a user sets them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "PYTEST_"))}
    env |= {
        "HF_ENDPOINT": "",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_TOKEN": "hf_secret",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    with serve_hf_repo(sample_files(), token="hf_secret") as hub:
        env["HF_ENDPOINT"] = hub.url
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                *NO_HYPOTHESIS,
                "-p",
                "no:cacheprovider",
                "--gta-download",
            ],
            cwd=project.path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert any(h.get("authorization") == "Bearer hf_secret" for _, _, h in hub.requests)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"from hf:Jize1/GTA@{hub.commit}" in proc.stdout
    assert list((tmp_path / "hf" / "hub").glob("datasets--Jize1--GTA"))
    assert_identical_to_sample(installed(project.path))


def test_an_unwritable_data_dir_names_the_options(project: pytest.Pytester, tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    result = project.runpytest(
        "--gta-download", f"--gta-download-url={SAMPLE}", f"--gta-data-dir={blocked / 'data'}"
    )
    assert result.ret == 1
    err = result.stderr.str()
    assert f"cannot install into {blocked / 'data'}:" in err
    assert "--gta-data-dir or GTA_DATA_DIR" in err
    assert "Traceback" not in err
