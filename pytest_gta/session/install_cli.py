"""``pytest --gta-download`` and ``pytest --gta-data-info``: commands that run instead of tests.

They run from ``pytest_cmdline_main`` on the controller, before any collection or xdist worker,
and return pytest's exit code: 0 when done, 1 when the download or the check failed (the
message names the source, file or option and what to do).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from pytest_gta.datainfo import (
    dataset_statistics,
    format_statistics,
    format_workflow_statistics,
    workflow_statistics,
)
from pytest_gta.errors import DatasetError, GtaDataError
from pytest_gta.files import write_output
from pytest_gta.flags import OPT_DATA, OPT_DATA_DIR, OPT_DOWNLOAD, OPT_RECORD_MANIFEST, OPT_REPORT
from pytest_gta.install.installer import InstallRequest, how_to_get, install, workflow_request
from pytest_gta.install.manifest import load_manifest, project_manifest_path, read_install_record
from pytest_gta.options import option_base, resolve_option, resolve_settings
from pytest_gta.options.data import (
    DATASET_NAME,
    DOWNLOAD_WORKFLOW,
    SAMPLE_FALLBACK,
    resolve_data_dir,
)
from pytest_gta.quirks import find_quirks, summarize, summary_lines
from pytest_gta.validation import load_dataset
from pytest_gta.workflow_data import is_workflow_dir, load_workflow

PREFIX = "pytest-gta: "


def _say(line: str) -> None:
    print(PREFIX + line, flush=True)


def _fail(message: str) -> int:
    print(f"ERROR: {PREFIX}{message}", file=sys.stderr, flush=True)
    return int(pytest.ExitCode.TESTS_FAILED)


def run_download(config: pytest.Config) -> int:
    """Install the dataset into the data directory (see :mod:`pytest_gta.install.installer`).

    ``--gta-download`` (``atomic``) installs GTA as ``gta_dataset``, ``--gta-download=workflow``
    GTA-Workflow as ``gta_workflow_dataset``.
    """
    workflow = config.getoption("gta_download") == DOWNLOAD_WORKFLOW
    what = "GTA-Workflow" if workflow else "the GTA dataset"
    data_dir, where = resolve_data_dir(config)
    url = resolve_option(config, "gta_download_url")
    record_to = (
        project_manifest_path(config.rootpath) if config.getoption("gta_record_manifest") else None
    )
    try:
        manifest = load_manifest(config.rootpath)
        request = InstallRequest(
            data_dir=data_dir,
            manifest=manifest,
            url=url.value,
            base=option_base(config, url.source),
            allow_unverified=resolve_option(config, "gta_allow_unverified").value,
            record_to=record_to,
        )
        if workflow:
            request = workflow_request(request)
        _say(f"installing {what} into {request.target} (data directory from {where})")
        result = install(request, _say)
    except GtaDataError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(
            f"cannot install into {data_dir}: {exc}; choose a writable directory with "
            f"{OPT_DATA_DIR} or GTA_DATA_DIR"
        )
    if result.status == "present":
        _say(f"already installed: {result.path} (from {result.origin})")
    else:
        _say(f"installed {result.path} from {result.origin}")
    _say(f"verification: {result.verification}")
    for warning in result.warnings:
        _say(f"warning: {warning}")
    return 0


def data_info(config: pytest.Config) -> dict[str, Any] | None:
    """The info of the dataset a run would use (``None``: there is none)."""
    data = resolve_settings(config).data
    if data.path is None or data.source.startswith(SAMPLE_FALLBACK):
        return None
    if is_workflow_dir(data.path):
        return {
            "kind": "workflow",
            "path": str(data.path),
            "source": data.source,
            "data_dir": str(data.dir),
            "install": read_install_record(data.path),
            "statistics": workflow_statistics(load_workflow(data.path)),
        }
    dataset = load_dataset(data.path)
    entry = load_manifest(config.rootpath).match(dataset.sha256)
    return {
        "path": str(data.path),
        "source": data.source,
        "sha256": dataset.sha256,
        "data_dir": str(data.dir),
        "manifest_entry": None if entry is None else entry.name,
        "install": read_install_record(data.path),
        "statistics": dataset_statistics(dataset),
        "quirks": summarize(find_quirks(dataset)),
    }


def quirk_lines(quirks: list[dict[str, Any]]) -> list[str]:
    """Each quirk kind once: the queries it affects and how they are run and scored."""
    if not quirks:
        return ["  quirks: none (every chain has the regular shape)"]
    lines = [
        "  quirks (shapes the official pipeline accepts; each run and scored as it does them):"
    ]
    for entry, line in zip(quirks, summary_lines(quirks), strict=True):
        lines.append(f"    {line}")
        lines.append(f"      scored: {entry['scoring']}")
        for mode, ids in entry.get("replay_fails", {}).items():
            lines.append(f"      a perfect replay fails {mode}: {', '.join(ids)}")
    return lines


def _say_install(install: dict[str, Any]) -> None:
    """Where an installed dataset came from and how it was verified."""
    if install:
        _say(f"installed {install.get('installed_at')} from {install.get('origin')}")
        _say(f"verification at install: {install.get('verification')}")


def run_data_info(config: pytest.Config) -> int:
    """Print what is installed and its statistics (and write them to ``--gta-report``)."""
    try:
        info = data_info(config)
    except (DatasetError, GtaDataError) as exc:
        return _fail(str(exc))
    if info is None:
        data_dir, where = resolve_data_dir(config)
        _say(f"no GTA dataset installed in {data_dir} (data directory from {where})")
        _say(f"the bundled 17-query sample is always available: {OPT_DATA}=sample")
        print(how_to_get(data_dir / DATASET_NAME), flush=True)
        return int(pytest.ExitCode.TESTS_FAILED)
    install = info["install"] or {}
    _say(f"dataset {info['path']} ({info['source']})")
    if info.get("kind") == "workflow":
        _say_install(install)
        for line in format_workflow_statistics(info["statistics"]):
            print(line, flush=True)
    else:
        entry = info["manifest_entry"]
        _say(f"dataset.json sha256 {info['sha256']}")
        _say_install(install)
        _say(
            f"manifest entry: {entry}"
            if entry
            else f"manifest entry: none matches this dataset.json (record one with "
            f"{OPT_DOWNLOAD} {OPT_RECORD_MANIFEST})"
        )
        for line in format_statistics(info["statistics"], info["sha256"]):
            print(line, flush=True)
        for line in quirk_lines(info["quirks"]):
            print(line, flush=True)
    target = resolve_option(config, "gta_report").value
    if target is not None:
        try:
            write_output(target, json.dumps({"dataset": info}, indent=2) + "\n")
        except OSError as exc:
            return _fail(f"could not write {target} ({OPT_REPORT}): {exc.strerror or exc}")
        _say(f"wrote {target}")
    return 0


def reject_record_without_download(config: pytest.Config) -> None:
    """``--gta-record-manifest`` only makes sense with ``--gta-download``."""
    if config.getoption("gta_record_manifest") and not config.getoption("gta_download"):
        raise pytest.UsageError(
            f"{OPT_RECORD_MANIFEST} records the files {OPT_DOWNLOAD} verifies; run "
            f"pytest {OPT_DOWNLOAD} {OPT_RECORD_MANIFEST}"
        )


def run(config: pytest.Config) -> int | None:
    """Run the requested data command(s); ``None`` when none was requested."""
    download = bool(config.getoption("gta_download"))
    info = bool(config.getoption("gta_data_info"))
    reject_record_without_download(config)
    if not (download or info):
        return None
    code = run_download(config) if download else 0
    if info and code == 0:
        code = run_data_info(config)
    return code
