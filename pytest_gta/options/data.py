"""The dataset: ``--gta-data``, the data directory and the data commands (``--gta-download``).

Its part of the settings is :class:`DataSettings`: the dataset's path, where that choice came
from (for messages and the report) and the data directory. The data is resolved with rules of
its own (:func:`settings`): ``sample`` names the bundled sample, an installed dataset is the
default, and a self-check without one falls back to the sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_gta.dataset import bundled_sample_path
from pytest_gta.flags import (
    OPT_ALLOW_UNVERIFIED,
    OPT_DATA,
    OPT_DATA_DIR,
    OPT_DATA_INFO,
    OPT_DOWNLOAD,
    OPT_DOWNLOAD_URL,
    OPT_RECORD_MANIFEST,
)
from pytest_gta.options.core import Feature, OptionSpec, resolve, resolve_path
from pytest_gta.options.model import is_self_check

ENV_DATA_DIR = "GTA_DATA_DIR"
DATA_DIR_DEFAULT = Path("data")
DATASET_NAME = "gta_dataset"
#: Where ``--gta-download=workflow`` installs GTA-Workflow in the data directory.
WORKFLOW_DATASET_NAME = "gta_workflow_dataset"
#: ``--gta-download``'s values: what each installs (the flag alone: ``atomic``).
DOWNLOAD_ATOMIC = "atomic"
DOWNLOAD_WORKFLOW = "workflow"
DOWNLOADS = {DOWNLOAD_ATOMIC: DATASET_NAME, DOWNLOAD_WORKFLOW: WORKFLOW_DATASET_NAME}
DATA_DIR_DEFAULT_SOURCE = f"{DATA_DIR_DEFAULT}/ under the rootdir"
#: ``--gta-data=sample``: the 17-query sample shipped with the plugin.
SAMPLE_KEYWORD = "sample"
#: ``--gta-data``'s name for the bundled GTA-Workflow sample.
WORKFLOW_SAMPLE_KEYWORD = "workflow-sample"
#: ``--gta-data=workflow``: the GTA-Workflow dataset ``--gta-download=workflow`` installed.
WORKFLOW_KEYWORD = "workflow"
#: The data source of a self-check (or model-less) run that fell back to the sample.
SAMPLE_FALLBACK = "bundled sample: no dataset installed in"


@dataclass(frozen=True)
class DataSettings:
    """The dataset a run uses, and where it was looked for."""

    #: ``None`` when no dataset is installed and none was named (a usage error once needed).
    path: Path | None
    #: Where :attr:`path` came from, in a message's words (``--gta-data``, ``bundled sample``).
    source: str
    #: Where datasets are installed (``--gta-data-dir``); the default dataset is ``gta_dataset``.
    dir: Path = DATA_DIR_DEFAULT


# A path or the sample keyword, with an installed default: see settings().
DATA = OptionSpec(
    OPT_DATA,
    "DIR",
    f"dataset directory in the official layout, '{SAMPLE_KEYWORD}' for the bundled sample, "
    f"'{WORKFLOW_KEYWORD}' for the installed GTA-Workflow (default: {DATASET_NAME} in the data "
    "directory)",
    doc_default="`gta_dataset` in the data directory (the bundled sample for `oracle`/`mock:` "
    "when none is installed)",
    doc="dataset directory in the official layout; `sample` is the bundled sample, `workflow` "
    "the GTA-Workflow dataset installed in the data directory, `workflow-sample` its bundled "
    "sample",
)


def parse_download(value: str) -> str:
    """``--gta-download``'s value: which dataset to install."""
    text = value.strip().lower()
    if text not in DOWNLOADS:
        raise pytest.UsageError(
            f"{OPT_DOWNLOAD}={value}: expected {' or '.join(DOWNLOADS)} (the flag alone: "
            f"{DOWNLOAD_ATOMIC})"
        )
    return text


DATA_DIR = OptionSpec(
    OPT_DATA_DIR,
    "DIR",
    f"where datasets are installed and looked up (default: ${ENV_DATA_DIR}, else "
    f"{DATA_DIR_DEFAULT}/ under the rootdir)",
    kind="path",
    default=DATA_DIR_DEFAULT,
    env=ENV_DATA_DIR,
    doc_default="`$GTA_DATA_DIR`, else `data/` under the rootdir",
    doc="where datasets are installed and looked up (see [Getting the GTA dataset](dataset.md))",
)
ROWS: tuple[OptionSpec, ...] = (
    DATA,
    DATA_DIR,
    OptionSpec(
        OPT_DOWNLOAD,
        "WHICH",
        f"fetch, verify and unpack a dataset into the data directory, then exit: "
        f"'{DOWNLOAD_ATOMIC}' (the flag alone: GTA, as {DATASET_NAME}) or '{DOWNLOAD_WORKFLOW}' "
        f"(GTA-Workflow, as {WORKFLOW_DATASET_NAME})",
        kind="command",
        parse=parse_download,
        const=DOWNLOAD_ATOMIC,
        doc="fetch, verify and unpack a dataset into the data directory, then exit: `atomic` "
        "(the flag alone) installs `gta_dataset`, `workflow` installs GTA-Workflow as "
        "`gta_workflow_dataset`",
    ),
    # A URL or a local path: the installer tells them apart, relative to option_base.
    OptionSpec(
        OPT_DOWNLOAD_URL,
        "URL_OR_PATH",
        "download from this URL, zip or directory instead of Hugging Face and the GitHub release",
        doc_default="Hugging Face `Jize1/GTA` (`Jize1/GTA-Workflow`), then the GitHub release",
        doc="a mirror URL, a zip or a directory to install from",
    ),
    OptionSpec(
        OPT_ALLOW_UNVERIFIED,
        None,
        "install data that fails the manifest's sha256s or the paper's counts (mirrors)",
        kind="bool",
        default=False,
        doc_default="off",
        doc="install data that differs from the manifest or the paper's counts (marked "
        "`UNVERIFIED`)",
    ),
    OptionSpec(
        OPT_RECORD_MANIFEST,
        None,
        f"with {OPT_DOWNLOAD}: record the verified files' sha256s in data/manifest.json",
        kind="flag",
        default=False,
        doc=f"with `{OPT_DOWNLOAD}`: record the verified files' sha256s in `data/manifest.json`",
    ),
    OptionSpec(
        OPT_DATA_INFO,
        None,
        "print the installed dataset's origin, verification and statistics, then exit",
        kind="flag",
        default=False,
        doc="print the dataset's origin, verification and statistics, then exit",
    ),
)
FEATURE = Feature("data", ROWS, {})


def resolve_data_dir(config: pytest.Config) -> tuple[Path, str]:
    """``--gta-data-dir`` > ``$GTA_DATA_DIR`` > ini ``gta_data_dir`` > ``data/`` under the rootdir.

    The environment beats the ini file: it is the machine's choice (a CI cache), the ini the
    project's.
    """
    resolved = resolve(config, DATA_DIR)
    where = DATA_DIR_DEFAULT_SOURCE if resolved.source == "default" else resolved.origin
    return resolved.value, where


def settings(config: pytest.Config, model: str | None) -> DataSettings:
    """The dataset of a run of ``model``: named, installed, or (a self-check) the sample."""
    data_dir, data_dir_source = resolve_data_dir(config)
    named = resolve(config, DATA)
    if named.value == WORKFLOW_SAMPLE_KEYWORD:
        return DataSettings(bundled_sample_path("workflow"), "bundled Workflow sample", data_dir)
    if named.value == SAMPLE_KEYWORD:
        return DataSettings(bundled_sample_path(), "bundled sample", data_dir)
    if named.value == WORKFLOW_KEYWORD:
        return _installed_workflow(data_dir, data_dir_source)
    if named.value is not None:
        return DataSettings(resolve_path(config, named.value, named.source), named.origin, data_dir)
    installed = data_dir / DATASET_NAME
    if (installed / "dataset.json").is_file():
        if data_dir_source == DATA_DIR_DEFAULT_SOURCE:
            return DataSettings(
                installed.absolute(), str(DATA_DIR_DEFAULT / DATASET_NAME), data_dir
            )
        return DataSettings(
            installed.absolute(),
            f"{DATASET_NAME} in the data directory from {data_dir_source}",
            data_dir,
        )
    if model is None or is_self_check(model):
        # Without a model nothing is evaluated: user tests are collected from the sample and skip.
        return DataSettings(bundled_sample_path(), f"{SAMPLE_FALLBACK} {data_dir}", data_dir)
    return DataSettings(None, f"no dataset installed in {data_dir}", data_dir)


def _installed_workflow(data_dir: Path, data_dir_source: str) -> DataSettings:
    """``--gta-data=workflow``: the GTA-Workflow dataset installed in the data directory."""
    installed = data_dir / WORKFLOW_DATASET_NAME
    if not (installed / "end.json").is_file():
        raise pytest.UsageError(
            f"{OPT_DATA}={WORKFLOW_KEYWORD}: GTA-Workflow is not installed in {data_dir} "
            f"(no {installed / 'end.json'}; data directory from {data_dir_source}); get it with "
            f"pytest {OPT_DOWNLOAD}={DOWNLOAD_WORKFLOW}, or pass {OPT_DATA}=DIR for a copy "
            "unpacked by hand"
        )
    return DataSettings(
        installed.absolute(),
        f"{OPT_DATA}={WORKFLOW_KEYWORD}: {WORKFLOW_DATASET_NAME} in the data directory from "
        f"{data_dir_source}",
        data_dir,
    )
