"""``pytest --gta-download=workflow``: GTA-Workflow fetched, unpacked, pinned and used.

The release asset and the Hub cannot be reached from CI, so the bundled Workflow sample is zipped
the way the release is (one ``gta_workflow_dataset/`` folder) and served from a real HTTP server
on 127.0.0.1; the project manifest is a copy of the shipped one under the pytester rootdir, which
is where ``--gta-record-manifest`` writes.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from pytest_gta.files import sha256_file
from pytest_gta.install.manifest import (
    WORKFLOW_ENTRY,
    load_manifest,
    packaged_manifest_path,
    read_install_record,
    workflow_files,
)
from tests.helpers.file_server import serve_file
from tests.helpers.paths import ROOT

SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
FILES = [rel for rel in workflow_files(SAMPLE) if "__pycache__" not in rel]
PACK = ROOT / "tests" / "data" / "workflow" / "pack.json"
#: The file whose one changed byte a pinned manifest must catch.
TAMPERED = "files/sales.csv"


def workflow_zip(tamper: dict[str, bytes] | None = None, leave_out: tuple[str, ...] = ()) -> bytes:
    """The sample as the release packs it: ``gta_workflow_dataset/`` and its files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for rel in FILES:
            if rel not in leave_out:
                data = (tamper or {}).get(rel, (SAMPLE / rel).read_bytes())
                archive.writestr(f"gta_workflow_dataset/{rel}", data)
    return buffer.getvalue()


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project whose ``data/manifest.json`` is a copy of the shipped manifest."""
    pytester.makeini("[pytest]\n")
    copy = pytester.path / "data" / "manifest.json"
    copy.parent.mkdir(parents=True)
    shutil.copyfile(packaged_manifest_path(), copy)
    return pytester


def download(pytester: pytest.Pytester, body: bytes, *args: str) -> tuple[pytest.RunResult, str]:
    with serve_file(body) as server:
        result = pytester.runpytest(
            "--gta-download=workflow", f"--gta-download-url={server.url}", *args
        )
    return result, server.url


def project_entry(pytester: pytest.Pytester) -> dict[str, object]:
    text = (pytester.path / "data" / "manifest.json").read_text(encoding="utf-8")
    entry: dict[str, object] = json.loads(text)["datasets"][WORKFLOW_ENTRY]
    return entry


def test_the_shipped_entry_names_workflow_with_no_checksums_and_says_how_to_pin_it() -> None:
    entry = load_manifest(None).get(WORKFLOW_ENTRY)
    assert entry is not None
    assert dict(entry.files) == {}
    assert not entry.pinned
    assert entry.archive_sha256 is None
    assert entry.archive_note.startswith("unknown: ")
    assert "--gta-download=workflow --gta-record-manifest" in entry.archive_note


@pytest.mark.slow  # 3 s in a full run: slow by cost (issue 39)
def test_workflow_installs_unverified_is_pinned_refuses_a_changed_byte_and_runs(
    project: pytest.Pytester, tmp_path: Path
) -> None:
    shipped = packaged_manifest_path().read_bytes()
    first_dir = tmp_path / "first"
    body = workflow_zip()
    result, first_url = download(project, body, f"--gta-data-dir={first_dir}")
    assert result.ret == 0, result.stderr.str()
    target = first_dir / WORKFLOW_ENTRY
    result.stdout.fnmatch_lines(
        [
            f"*installing GTA-Workflow into {target} *",
            f"*installed {target} from {first_url}",
            "*verification: NOT verified: manifest entry 'gta_workflow_dataset' records no "
            "sha256s yet, so only the structure was checked (end.json loads: 8 tasks, 37 tools); "
            "pin these files with pytest --gta-download=workflow --gta-record-manifest",
        ]
    )
    assert workflow_files(target) == FILES
    assert all(sha256_file(target / rel) == sha256_file(SAMPLE / rel) for rel in FILES)
    record = read_install_record(target)
    assert record is not None
    assert record["origin"] == first_url
    assert record["queries"] == 8
    assert record["archive_sha256"] == hashlib.sha256(body).hexdigest()
    assert project_entry(project)["files"] == {}  # nothing recorded unless asked

    # The first recorded download pins every file, and the archive it came in.
    result, url = download(
        project, body, f"--gta-data-dir={tmp_path / 'second'}", "--gta-record-manifest"
    )
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(
        [f"*recorded {len(FILES)} sha256s as entry 'gta_workflow_dataset' in *data/manifest.json"]
    )
    entry = project_entry(project)
    assert entry["files"] == {rel: sha256_file(SAMPLE / rel) for rel in FILES}
    assert entry["queries"] == 8
    assert entry["archive_sha256"] == hashlib.sha256(body).hexdigest()
    assert entry["description"] == (
        "GTA-Workflow dataset, 8 tasks, recorded by pytest --gta-download=workflow "
        f"--gta-record-manifest from {url}"
    )
    assert packaged_manifest_path().read_bytes() == shipped  # only the project's copy changed

    # Pinned: the same files verify, one changed byte is refused and nothing is installed.
    result, _ = download(project, body, f"--gta-data-dir={tmp_path / 'third'}")
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(
        [f"*verification: sha256 of {len(FILES)} files match manifest entry 'gta_workflow_dataset'"]
    )
    original = (SAMPLE / TAMPERED).read_bytes()
    changed = bytes([original[0] ^ 1]) + original[1:]
    refused, _ = download(
        project, workflow_zip({TAMPERED: changed}), f"--gta-data-dir={tmp_path / 'fourth'}"
    )
    assert refused.ret == 1
    err = refused.stderr.str()
    assert "checksum mismatch: 1 file(s) differ from manifest entry 'gta_workflow_dataset'" in err
    assert f"{TAMPERED}: sha256 {hashlib.sha256(changed).hexdigest()}" in err
    assert not (tmp_path / "fourth" / WORKFLOW_ENTRY).exists()

    # --gta-data=workflow finds the install and runs its tasks.
    collected = project.runpytest(
        "--gta-data=workflow",
        f"--gta-data-dir={first_dir}",
        f"--gta-model=evalpack:{PACK}",
        "--collect-only",
        "-q",
    )
    assert collected.ret == 0, collected.stderr.str()
    collected.stdout.fnmatch_lines(
        [f"gta::test_workflow[workflow-{task}]" for task in range(1, 9)] + ["8 tests collected*"]
    )

    info = project.runpytest(
        "--gta-data=workflow", f"--gta-data-dir={first_dir}", "--gta-data-info"
    )
    assert info.ret == 0, info.stderr.str()
    info.stdout.fnmatch_lines(
        [
            f"pytest-gta: dataset {target} (--gta-data=workflow: *",
            f"pytest-gta: installed * from {first_url}",
            "pytest-gta: verification at install: NOT verified*",
            "  tasks: 8",
            "  task files: 10 (7 distinct; *",
            "  tools in toolmeta.json: 37 (Calculator, *",
            "  checkpoint tree depths (tasks): 1: 4  2: 3  3: 1",
            "  leaves per task (tasks): 2: 4  3: 3  4: 1; 21 leaves in all*",
            "  task * files * depth * leaves  tools called",
            "  1 * 1 * 3 * 4  ReadPDF",
        ]
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            workflow_zip(leave_out=("end.json",)),
            "no end.json found: not a GTA-Workflow dataset",
        ),
        (
            workflow_zip({"end.json": b"[1, 2]"}),
            "the data is not a usable GTA-Workflow dataset: *end.json: expected an object keyed "
            "by task id",
        ),
    ],
    ids=["no-end-json", "end-json-a-list"],
)
def test_an_archive_that_is_not_workflow_is_refused_naming_the_file(
    project: pytest.Pytester, tmp_path: Path, body: bytes, message: str
) -> None:
    result, _ = download(project, body, f"--gta-data-dir={tmp_path}")
    assert result.ret == 1
    result.stderr.fnmatch_lines([f"ERROR: pytest-gta: *{message}*"])
    assert not (tmp_path / WORKFLOW_ENTRY).exists()
    assert [p.name for p in tmp_path.glob(f".{WORKFLOW_ENTRY}.staging-*")] == []


def test_workflow_data_without_an_install_says_how_to_get_it(
    project: pytest.Pytester, tmp_path: Path
) -> None:
    for command in (("--collect-only",), ("--gta-data-info",)):
        result = project.runpytest("--gta-data=workflow", f"--gta-data-dir={tmp_path}", *command)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            [
                f"ERROR: --gta-data=workflow: GTA-Workflow is not installed in {tmp_path} (no "
                f"{tmp_path / WORKFLOW_ENTRY / 'end.json'}; *); get it with pytest "
                "--gta-download=workflow*"
            ]
        )


def test_download_takes_atomic_or_workflow_only(project: pytest.Pytester) -> None:
    result = project.runpytest("--gta-download=everything")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gta-download=everything: expected atomic or workflow (the flag alone: atomic)*"]
    )
