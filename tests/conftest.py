"""Fixtures shared by the tool backend tests and the browser tests."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT
from pytest_gta.dataset import Dataset, bundled_sample_path
from pytest_gta.tools import ToolContext
from pytest_gta.validation import load_dataset
from tests.browser import BINARY_ENV, INSTALL_HINT, Chromium, find_chromium
from tests.hf_server import PointAt


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    """The bundled sample, loaded once per module."""
    return load_dataset(bundled_sample_path())


@pytest.fixture
def context(dataset: Dataset, tmp_path: Path) -> ToolContext:
    """A tool call's context on the sample's first query, writing into a fresh directory."""
    return ToolContext(dataset, next(iter(dataset)), tmp_path / "out")


@pytest.fixture
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PointAt]:
    """``point_at(url, offline=False)`` aims huggingface_hub at ``url``; returns the hub cache.

    huggingface_hub reads its environment once, at import, so in-process tests patch its
    ``constants`` as well as the environment (why each: tests/test_hf_server_selfcheck.py).
    """
    import huggingface_hub
    from huggingface_hub import constants

    home = tmp_path / "hf_home"
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HF_TOKEN_PATH", "HF_OIDC_RESOURCE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    for name, value in {
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_ASSETS_CACHE": str(home / "assets"),
        "HF_XET_CACHE": str(home / "xet"),
        "HF_TOKEN_PATH": str(home / "token"),
        "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
        "AGENT_HARNESSES_PATH": str(home / ".agent_harnesses.json"),
        "HF_HUB_DISABLE_TELEMETRY": True,
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": False,
    }.items():
        monkeypatch.setattr(constants, name, value)

    def point_at(url: str, *, offline: bool = False) -> Path:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
        monkeypatch.setattr(constants, "ENDPOINT", url)
        monkeypatch.setattr(
            constants,
            "HUGGINGFACE_CO_URL_TEMPLATE",
            url + "/{repo_id}/resolve/{revision}/{filename}",
        )
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
        return home / "hub"

    yield point_at
    # Drop the shared client's kept-alive connections to servers that are gone by now.
    huggingface_hub.close_session()


@pytest.fixture(scope="session")
def chromium() -> Chromium:
    """The installed Chromium, headless (tests/browser.py).

    Skipped with the install hint where there is none, except under
    ``PYTEST_GTA_REQUIRE_CHROMIUM=1`` (set by ``.ci/run``), where a missing browser would
    otherwise turn the report's browser checks into a silent skip.
    """
    binary = find_chromium()
    if binary is None:
        chosen = os.environ.get(BINARY_ENV)
        if chosen:
            pytest.fail(f"{BINARY_ENV}={chosen} names no executable; point it at a Chromium")
        reason = f"no Chromium on PATH: {INSTALL_HINT}"
        if os.environ.get("PYTEST_GTA_REQUIRE_CHROMIUM"):
            pytest.fail(f"PYTEST_GTA_REQUIRE_CHROMIUM is set but {reason}")
        pytest.skip(reason)
    return Chromium(binary)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where tests keep files for a human to look at (screenshots); CI uploads it.

    ``$PYTEST_GTA_ARTIFACTS`` if set, else ``artifacts/`` at the repository root (ignored by
    git). Files there outlive the run, unlike ``tmp_path``; name them after the test.
    """
    chosen = os.environ.get("PYTEST_GTA_ARTIFACTS")
    path = Path(chosen) if chosen else ROOT / "artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def no_release_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The packaged manifest without the release's entry, as before the release was pinned.

    What a project meets when its installed plugin has no ``gta_dataset`` entry: the installer
    falls back to the paper's counts. In-process runs only (pytester's ``runpytest``).
    """
    from pytest_gta.install import manifest

    packaged = json.loads(manifest.packaged_manifest_path().read_text(encoding="utf-8"))
    packaged["datasets"].pop(manifest.RELEASE_ENTRY)
    path = tmp_path / "packaged-manifest.json"
    path.write_text(json.dumps(packaged), encoding="utf-8")
    monkeypatch.setattr(manifest, "packaged_manifest_path", lambda: path)
