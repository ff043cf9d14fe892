"""Typed report parts for tests that build a report without running a session."""

from __future__ import annotations

from typing import Any

from pytest_gta.dataset import Dataset
from pytest_gta.report.build import complete_verdicts
from pytest_gta.results.io import load_report
from pytest_gta.results.report import RunReport, RunSettings
from tests.helpers.paths import TESTS


def run_settings(**overrides: Any) -> RunSettings:
    """A run's ``settings`` as a session of the bundled sample writes them, with overrides."""
    values: dict[str, Any] = {
        "modes": ["step", "e2e"],
        "tools": "replay",
        "tool_routes": None,
        "tool_backends": None,
        "sandbox": None,
        "sim_model": "all-MiniLM-L6-v2",
        "sim_threshold": 0.5,
        "limit": None,
        "ids": None,
        "max_turns": 10,
        "shard": None,
        "generation": None,
        "server": None,
        "agent": None,
        "budget": None,
        "pytest_gta": "0.1.0.dev0",
    }
    values.update(overrides)
    return RunSettings.model_validate(values)


#: Real reports written by pytest-gta at cfe0abc (2026-11-28), before the typed results model:
#: README.md there says which run wrote each.
TODAY = TESTS / "data" / "reports" / "2026-11-28-cfe0abc"


def stored_report(name: str, dataset: Dataset | None = None) -> RunReport:
    """One of :data:`TODAY`'s reports read with today's reader (``name`` without ``.json``).

    With ``dataset`` (the bundled sample they ran on), the cases get their whole verdict, as
    ``--gta-merge`` gives them.
    """
    report = load_report(TODAY / f"{name}.json", name).report
    if dataset is not None:
        complete_verdicts(report.cases, dataset, report.settings.sim_threshold)
    return report
