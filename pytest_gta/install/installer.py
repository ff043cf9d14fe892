"""Installing a dataset: one process downloads, everybody else waits, nobody sees half of it.

The target ``<data dir>/gta_dataset`` appears in a single ``rename`` of a fully unpacked and
verified staging directory, so a run that looks for ``dataset.json`` finds either nothing or the
whole dataset. An exclusive ``flock`` on ``<data dir>/.gta_dataset.lock`` serialises installers
(two CI jobs on one cache, a user's second terminal): the second waits, then finds the dataset
installed and verifies it instead of downloading it again. Staging directories left by a killed
installer are removed by the next one, under the lock.

Verification, in order of strength:

1. a manifest entry of the same name: every file's sha256 must match, no file may be missing or
   extra (Finder's ``.DS_Store`` is not data: it is left out of the install, and said so);
2. no entry recorded yet: the data must reproduce the counts the paper publishes and the release
   counts alike (:func:`pytest_gta.datainfo.paper_mismatches`) -- ``--gta-record-manifest``
   then records the sha256
   entry from this verified copy;
3. ``--gta-allow-unverified``: installed with a warning, recorded as unverified.

The data must load without problems in every case: unusable data is never installed.

GTA-Workflow (``--gta-download=workflow``, :data:`~pytest_gta.install.manifest.WORKFLOW_ENTRY`)
goes the same way, found by its ``end.json`` and loaded by
:func:`pytest_gta.workflow_data.load_workflow`; it has no published counts, so until its entry
records sha256s it is installed as NOT verified (its structure checked only), and
``--gta-record-manifest`` records them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gta.datainfo import dataset_statistics, paper_mismatches
from pytest_gta.errors import DatasetError, GtaDataError, GtaUsageError
from pytest_gta.files import sha256_file
from pytest_gta.flags import (
    OPT_ALLOW_UNVERIFIED,
    OPT_DATA,
    OPT_DATA_DIR,
    OPT_DOWNLOAD,
    OPT_DOWNLOAD_URL,
    OPT_RECORD_MANIFEST,
)
from pytest_gta.install import sources as _sources_module
from pytest_gta.install.manifest import (
    ATOMIC_MARKER,
    INSTALL_RECORD,
    RELEASE_ENTRY,
    WORKFLOW_ENTRY,
    WORKFLOW_MARKER,
    Manifest,
    ManifestEntry,
    entry_for,
    finder_metadata,
    read_install_record,
    record,
    verify,
)
from pytest_gta.install.sources import (
    HF_REPO,
    RELEASE_URL,
    WORKFLOW_HF_REPO,
    WORKFLOW_RELEASE_URL,
    Fetched,
    HttpSettings,
    SourceUnavailable,
    fetch_hf,
    fetch_local,
    fetch_url,
    is_url,
)
from pytest_gta.install.unpack import UnpackLimits, copy_tree, extract_zip
from pytest_gta.validation import load_dataset
from pytest_gta.workflow_data import load_workflow

if TYPE_CHECKING:
    pass

Log = Callable[[str], None]
STAGING_PREFIX = ".staging-"
DOWNLOADS = ".downloads"


@dataclass(frozen=True)
class InstallRequest:
    """What ``--gta-download`` was asked to do."""

    data_dir: Path
    manifest: Manifest
    name: str = RELEASE_ENTRY
    #: ``--gta-download-url``: a URL, a zip or a directory instead of the default sources.
    url: str | None = None
    base: Path = field(default_factory=Path.cwd)
    allow_unverified: bool = False
    #: Where ``--gta-record-manifest`` writes the verified entry.
    record_to: Path | None = None
    hf_repo: str = HF_REPO
    hf_revision: str | None = None
    #: The GitHub release asset (default: :data:`pytest_gta.install.sources.RELEASE_URL`).
    release_url: str | None = None
    limits: UnpackLimits = field(default_factory=UnpackLimits)
    http: HttpSettings = field(default_factory=HttpSettings)
    #: Seconds to wait for another installer before giving up.
    lock_timeout: float = 3600.0

    @property
    def target(self) -> Path:
        """Where the dataset ends up."""
        return self.data_dir / self.name

    @property
    def workflow(self) -> bool:
        """Whether this installs GTA-Workflow (``end.json``) rather than GTA (``dataset.json``)."""
        return self.name == WORKFLOW_ENTRY

    @property
    def marker(self) -> str:
        """The file whose presence makes a directory this dataset."""
        return WORKFLOW_MARKER if self.workflow else ATOMIC_MARKER


def workflow_request(request: InstallRequest) -> InstallRequest:
    """``request`` for GTA-Workflow: its entry, directory, Hub repo and release asset."""
    return replace(
        request,
        name=WORKFLOW_ENTRY,
        hf_repo=WORKFLOW_HF_REPO,
        release_url=request.release_url or WORKFLOW_RELEASE_URL,
    )


@dataclass(frozen=True)
class InstallResult:
    """What happened."""

    path: Path
    #: ``installed`` or ``present`` (someone installed it before).
    status: str
    origin: str
    verification: str
    warnings: tuple[str, ...] = ()


@contextmanager
def install_lock(data_dir: Path, name: str, log: Log, timeout: float) -> Iterator[None]:
    """Hold the installer lock of ``name`` in ``data_dir``; say so when waiting for it."""
    import fcntl

    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f".{name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            log(f"waiting for {holder} to finish installing {name} (lock {path})")
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise GtaDataError(
                            f"gave up after {timeout:.0f} s waiting for the lock {path}; if no "
                            f"other pytest {OPT_DOWNLOAD} is running, delete it"
                        ) from None
                    time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        yield
    finally:
        os.close(fd)


def find_dataset_root(tree: Path, limits: UnpackLimits, marker: str = ATOMIC_MARKER) -> Path:
    """The directory holding ``marker`` in an unpacked tree (top level or one or two below).

    ``marker``: ``dataset.json`` (GTA) or ``end.json`` (GTA-Workflow). A tree without one but
    with a single zip (a Hub repo that stores the release archive) is unpacked in place and
    searched again.
    """
    candidates = sorted(
        p.parent
        for p in [tree / marker, *tree.glob(f"*/{marker}"), *tree.glob(f"*/*/{marker}")]
        if p.is_file() and "__MACOSX" not in p.parts
    )
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        shown = ", ".join(str(c.relative_to(tree)) for c in candidates)
        raise GtaDataError(f"{tree}: several {marker} files ({shown}); expected one dataset")
    zips = sorted(p for p in [*tree.glob("*.zip"), *tree.glob("*/*.zip")] if p.is_file())
    if len(zips) == 1:
        inner = tree / (STAGING_PREFIX + "inner")
        extract_zip(zips[0], inner, limits)
        return find_dataset_root(inner, limits, marker)
    if marker == WORKFLOW_MARKER:
        raise GtaDataError(
            f"{tree}: no end.json found: not a GTA-Workflow dataset (expected end.json, "
            "toolmeta.json and the task files at the top level or in one folder such as "
            "gta_workflow_dataset/)"
        )
    raise GtaDataError(
        f"{tree}: no dataset.json found (expected dataset.json, toolmeta.json and image/ at the "
        "top level or in one folder such as gta_dataset/)"
    )


def _clean_stale(data_dir: Path, name: str, log: Log) -> None:
    for stale in data_dir.glob(f".{name}{STAGING_PREFIX}*"):
        log(f"removing {stale} left by an interrupted install")
        shutil.rmtree(stale, ignore_errors=True)


def _sources(request: InstallRequest) -> list[tuple[str, Callable[[Log], Fetched]]]:
    downloads = request.data_dir / DOWNLOADS
    if request.url is not None:
        url = request.url
        if is_url(url) and not url.startswith("file:"):
            return [(url, lambda log: fetch_url(url, downloads, log, request.http))]
        return [(url, lambda log: fetch_local(url, request.base))]
    sources: list[tuple[str, Callable[[Log], Fetched]]] = [
        (
            f"Hugging Face dataset {request.hf_repo}",
            lambda log: fetch_hf(request.hf_repo, request.hf_revision, log),
        )
    ]
    if not _sources_module.hf_offline():
        release = request.release_url or _sources_module.RELEASE_URL
        sources.append((release, lambda log: fetch_url(release, downloads, log, request.http)))
    return sources


def how_to_get(target: Path, workflow: bool = False) -> str:
    """Instructions for getting the dataset by any route, for every 'no data' message."""
    if workflow:
        download = f"{OPT_DOWNLOAD}=workflow"
        return (
            "Get GTA-Workflow with one of:\n"
            f"  pytest {download}\n"
            f"      (tries the Hugging Face dataset {WORKFLOW_HF_REPO}, then "
            f"{WORKFLOW_RELEASE_URL})\n"
            f"  pytest {download} {OPT_DOWNLOAD_URL}=PATH_OR_URL\n"
            "      (a copy of gta_workflow_dataset.zip, a mirror URL, or an unpacked directory)\n"
            f"  or by hand: download {WORKFLOW_RELEASE_URL}\n"
            f"      and unpack it so that {target / WORKFLOW_MARKER} exists (or pass "
            f"{OPT_DATA}=DIR)."
        )
    return (
        "Get the GTA dataset with one of:\n"
        f"  pytest {OPT_DOWNLOAD}\n"
        f"      (tries the Hugging Face dataset {HF_REPO}, then {RELEASE_URL})\n"
        f"  pytest {OPT_DOWNLOAD} {OPT_DOWNLOAD_URL}=PATH_OR_URL\n"
        "      (a copy of gta_dataset.zip, a mirror URL, or an unpacked directory)\n"
        f"  or by hand: download {RELEASE_URL}\n"
        f"      and unpack it so that {target / 'dataset.json'}, {target / 'toolmeta.json'}\n"
        f"      and {target / 'image'}/image_*.jpg exist (or pass {OPT_DATA}=DIR)."
    )


@dataclass(frozen=True)
class Checked:
    """The outcome of verifying a dataset directory."""

    #: How it was verified, for the terminal and the install record (``UNVERIFIED ...``: not).
    verification: str
    #: What differs, when ``--gta-allow-unverified`` let it through anyway.
    warnings: list[str]
    queries: int
    #: The manifest entry it matched, if any.
    entry: ManifestEntry | None = None


def check_dataset(
    root: Path, request: InstallRequest, tail: str = "Nothing was installed."
) -> Checked:
    """Verify ``root``, or raise an error naming the problem.

    ``tail`` ends an error message: what happened to the data and what to do.
    """
    if request.workflow:
        return check_workflow(root, request, tail)
    try:
        dataset = load_dataset(root)
    except DatasetError as exc:
        raise GtaDataError(f"the data is not a usable GTA dataset:\n{exc}") from None
    queries = len(dataset)
    entry = request.manifest.get(request.name)
    flag = OPT_ALLOW_UNVERIFIED
    if entry is not None and entry.pinned:
        return _check_files(root, request, entry, queries, tail)
    mismatches = paper_mismatches(dataset_statistics(dataset))
    if not mismatches:
        return Checked(
            "matches the paper's published counts (no sha256 entry recorded yet)", [], queries
        )
    if not request.allow_unverified:
        shown = "\n".join(f"  - {m}" for m in mismatches)
        raise GtaDataError(
            f"no sha256 manifest entry {request.name!r} is recorded ({request.manifest.where}) "
            f"and the data does not reproduce the paper's counts:\n{shown}\n"
            f"{tail} To accept it anyway, pass {flag}."
        )
    return Checked(
        "UNVERIFIED (no manifest entry; counts differ from the paper)", mismatches, queries
    )


def _check_files(
    root: Path, request: InstallRequest, entry: ManifestEntry, queries: int, tail: str
) -> Checked:
    """``root`` against the sha256s of ``entry``: verified, or refused (or let through)."""
    problems = verify(root, entry)
    if not problems:
        return Checked(
            f"sha256 of {len(entry.files)} files match manifest entry {entry.name!r}",
            [],
            queries,
            entry,
        )
    shown = "\n".join(f"  - {p}" for p in problems[:20])
    more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
    if not request.allow_unverified:
        raise GtaDataError(
            f"checksum mismatch: {len(problems)} file(s) differ from manifest entry "
            f"{entry.name!r} ({request.manifest.where}):\n{shown}{more}\n"
            f"{tail} If this is a mirror you trust, pass {OPT_ALLOW_UNVERIFIED}."
        )
    return Checked("UNVERIFIED (differs from the manifest)", problems, queries)


def check_workflow(root: Path, request: InstallRequest, tail: str) -> Checked:
    """Verify a GTA-Workflow directory: it must load; then its entry's sha256s, when recorded.

    GTA-Workflow publishes no counts to compare with, so without recorded sha256s the data is
    installed NOT verified (its structure checked only) and says how to pin it.
    """
    try:
        dataset = load_workflow(root)
    except GtaUsageError as exc:
        raise GtaDataError(f"the data is not a usable GTA-Workflow dataset: {exc}") from None
    tasks = len(dataset)
    entry = request.manifest.get(request.name)
    if entry is not None and entry.pinned:
        return _check_files(root, request, entry, tasks, tail)
    return Checked(
        f"NOT verified: manifest entry {request.name!r} records no sha256s yet, so only the "
        f"structure was checked ({WORKFLOW_MARKER} loads: {tasks} tasks, "
        f"{len(dataset.tools)} tools); pin these files with pytest {OPT_DOWNLOAD}=workflow "
        f"{OPT_RECORD_MANIFEST}",
        [],
        tasks,
    )


def _install_record(
    result: InstallResult, archive_sha256: str | None, queries: int, left_out: list[str]
) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        plugin_version = version("pytest-gta")
    except PackageNotFoundError:
        plugin_version = "unknown"
    return {
        "origin": result.origin,
        "archive_sha256": archive_sha256,
        "verification": result.verification,
        "warnings": list(result.warnings),
        "left_out": left_out,
        "installed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "pytest_gta": plugin_version,
        "queries": queries,
    }


def _stage(fetched: Fetched, staging: Path, request: InstallRequest, log: Log) -> Path:
    unpacked = staging / "unpacked"
    if fetched.kind == "zip":
        log(f"unpacking {fetched.path}")
        count = extract_zip(fetched.path, unpacked, request.limits)
    else:
        allowed = fetched.path.parent.parent if fetched.origin.startswith("hf:") else None
        log(f"copying {fetched.path}")
        count = copy_tree(fetched.path, unpacked, allowed_root=allowed, limits=request.limits)
    log(f"  {count} files")
    return find_dataset_root(unpacked, request.limits, request.marker)


def _leave_out_finder_metadata(root: Path, log: Log) -> list[str]:
    """Delete the ``.DS_Store`` files of a staged copy, saying which; the install is the data."""
    left_out = finder_metadata(root)
    for rel in left_out:
        (root / rel).unlink()
        log(f"  left out {rel} (macOS Finder metadata, not data)")
    return left_out


def install(request: InstallRequest, log: Log) -> InstallResult:
    """Fetch, verify and install the dataset; see the module docstring.

    Raises:
        GtaDataError: no source could deliver, or the data failed verification; nothing is
            installed and the message says why and what to do.
    """
    target = request.target
    download = f"{OPT_DOWNLOAD}=workflow" if request.workflow else OPT_DOWNLOAD
    with install_lock(request.data_dir, request.name, log, request.lock_timeout):
        if (target / request.marker).is_file():
            tail = (
                f"{target} was already installed and is left as it is; delete it and run "
                f"{download} again to replace it."
            )
            checked = check_dataset(target, request, tail)
            for rel in finder_metadata(target):
                log(f"ignoring {rel} (macOS Finder metadata, not data)")
            previous = read_install_record(target) or {}
            origin = str(previous.get("origin", "installed by hand"))
            archive = previous.get("archive_sha256")
            _maybe_record(
                target, request, checked, origin, archive if isinstance(archive, str) else None, log
            )
            return InstallResult(
                target, "present", origin, checked.verification, tuple(checked.warnings)
            )
        if target.exists() or target.is_symlink():
            raise GtaDataError(
                f"{target} exists but has no {request.marker}; move it away so the dataset can be "
                f"installed there, or choose another {OPT_DATA_DIR}"
            )
        _clean_stale(request.data_dir, request.name, log)
        failures: list[str] = []
        sources = _sources(request)
        for label, fetch in sources:
            log(f"fetching {label}")
            try:
                return _install_fetched(fetch(log), request, log)
            except SourceUnavailable as exc:
                failures.append(f"  - {label}: {exc}")
                log(f"  unavailable: {exc}")
            except GtaDataError as exc:
                if len(sources) == 1:
                    raise
                # Bad data from one default source: the next may still deliver the release.
                failures.append(f"  - {label}: {exc}")
                log(f"  failed: {str(exc).splitlines()[0]}")
        what = "GTA-Workflow" if request.workflow else "the GTA dataset"
        raise GtaDataError(
            f"could not download {what}; every source failed:\n"
            + "\n".join(failures)
            + "\n"
            + how_to_get(target, request.workflow)
        )


def _archive_line(archive: str, entry: ManifestEntry | None) -> str:
    """What the archive's own checksum says, beside the files' verification (information only).

    Files decide, not the archive: a mirror's re-packed zip of the same files is as good.
    """
    if entry is None or entry.archive_sha256 is None:
        return f"archive sha256 {archive} (the manifest records no archive checksum to compare)"
    if entry.archive_sha256 == archive:
        return f"archive sha256 {archive} matches manifest entry {entry.name!r}"
    return (
        f"archive sha256 {archive} differs from manifest entry {entry.name!r}'s "
        f"{entry.archive_sha256}: a re-packed copy of the same files"
    )


def _install_fetched(fetched: Fetched, request: InstallRequest, log: Log) -> InstallResult:

    target = request.target
    staging = Path(
        tempfile.mkdtemp(prefix=f".{request.name}{STAGING_PREFIX}", dir=request.data_dir)
    )
    try:
        root = _stage(fetched, staging, request, log)
        left_out = _leave_out_finder_metadata(root, log)
        checked = check_dataset(root, request)
        archive = sha256_file(fetched.path) if fetched.kind == "zip" else None
        if archive is not None and not checked.warnings:
            log(_archive_line(archive, checked.entry))
        result = InstallResult(
            target, "installed", fetched.origin, checked.verification, tuple(checked.warnings)
        )
        text = json.dumps(_install_record(result, archive, checked.queries, left_out), indent=2)
        (root / INSTALL_RECORD).write_text(text + "\n", encoding="utf-8")
        os.rename(root, target)
        _maybe_record(target, request, checked, fetched.origin, archive, log)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if fetched.owned:
            # Installed: the unpacked dataset is the cache. Failed to unpack or verify: a
            # complete but bad download is discarded, not resumed.
            fetched.path.unlink(missing_ok=True)
    return result


def portable_origin(origin: str) -> str:
    """``origin`` without this machine's paths: a URL or Hub id as it is, a local path by name.

    A manifest is committed and shared; ``/home/me/Downloads/gta_dataset.zip`` would mean
    nothing elsewhere.
    """
    if origin.startswith("hf:") or is_url(origin):
        return origin
    return Path(origin).name or origin


def _maybe_record(
    target: Path,
    request: InstallRequest,
    checked: Checked,
    origin: str,
    archive: str | None,
    log: Log,
) -> None:
    if request.record_to is None:
        return
    if checked.verification.startswith("UNVERIFIED"):
        raise GtaDataError(
            f"{OPT_RECORD_MANIFEST}: {target} is not verified ({checked.verification}); only "
            "data that reproduces the paper's counts or an existing entry is recorded"
        )
    source = portable_origin(origin)
    today = _dt.date.today().isoformat()
    note = (
        f"sha256 of the archive {source} as fetched on {today}"
        if archive is not None
        else f"unknown: recorded on {today} from unpacked files ({source}), not from an archive"
    )
    what = (
        f"GTA-Workflow dataset, {checked.queries} tasks, recorded by pytest {OPT_DOWNLOAD}=workflow"
        if request.workflow
        else f"GTA dataset, {checked.queries} queries, recorded by pytest {OPT_DOWNLOAD}"
    )
    entry = entry_for(
        target,
        request.name,
        f"{what} {OPT_RECORD_MANIFEST} from {source}",
        checked.queries,
        archive_sha256=archive,
        archive_note=note,
    )
    record(request.record_to, [entry])
    log(f"recorded {len(entry.files)} sha256s as entry {request.name!r} in {request.record_to}")
