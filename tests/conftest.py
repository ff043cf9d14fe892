"""Fixtures shared by the tool backend tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gta.dataset import Dataset, bundled_sample_path, load_dataset
from pytest_gta.tools import ToolContext


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    """The bundled sample, loaded once per module."""
    return load_dataset(bundled_sample_path())


@pytest.fixture
def context(dataset: Dataset, tmp_path: Path) -> ToolContext:
    """A tool call's context on the sample's first query, writing into a fresh directory."""
    return ToolContext(dataset, next(iter(dataset)), tmp_path / "out")
