"""Typed reports and cases for the renderers' tests, built through the model classes.

A renderer takes a :class:`~pytest_gta.results.report.RunReport`; a test that needs one with a
few chosen sections gets it here, every other section at a neutral value (no modes, no cases),
validated as a report read from a file is. Real runs' reports are read with
:func:`pytest_gta.results.io.parse_report` instead.
"""

from __future__ import annotations

from typing import Any

from pytest_gta.results.case import CaseResult
from pytest_gta.results.report import SCHEMA, RunReport


def run_report(**sections: Any) -> RunReport:
    """A report with ``sections`` (JSON values or model objects) over neutral defaults.

    ``dataset`` and ``settings`` are merged into their defaults, so a test names only what it
    checks (``settings={"modes": ["e2e"]}``).
    """
    model = sections.get("model", "m")
    protocol = sections.get("protocol", "react")
    label = sections.get("label", f"{model} [{protocol}]")
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "model": model,
        "protocol": protocol,
        "label": label,
        "identity": {
            "label": label,
            "label_given": False,
            "model": model,
            "protocol": protocol,
            "agent": None,
            "git": None,
            "started_at": None,
            "finished_at": None,
            "dataset_sha256": "a" * 64,
            "pytest_gta": None,
        },
        "leaderboard": None,
        "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "calls": 0,
            "cached_calls": 0,
            "cost_usd": None,
        },
        "stopped": None,
        "interrupted": False,
        "interrupted_by": None,
        "timings": None,
        "shard": None,
        "dataset": {
            "path": "/d",
            "sha256": "a" * 64,
            "queries": 3,
            "selected": 2,
            "source": "x",
            "install": None,
            "statistics": {},
            "quirks": [],
            **sections.pop("dataset", {}),
        },
        "settings": {
            "modes": [],
            "tools": None,
            "tool_routes": None,
            "tool_backends": None,
            "sandbox": None,
            "sim_model": None,
            "sim_threshold": None,
            "limit": None,
            "ids": None,
            "max_turns": None,
            "shard": None,
            "generation": None,
            "server": None,
            "agent": None,
            "budget": None,
            "pytest_gta": "0",
            **sections.pop("settings", {}),
        },
        "metrics": {},
        "metrics_ci": {},
        "metrics_excluding_errors": {},
        "pass_rate": {},
        "epochs": 1,
        "metrics_by_epoch": {},
        "metrics_spread": {},
        "query_pass_rates": {},
        "errors": {},
        "tool_calls": {},
        "denominators": {},
        "outcomes": {"passed": 0, "failed": 0, "error": 0, "skipped": 0},
        "outcomes_by_mode": {},
        "by_type": {},
        "notes": [],
        "cases": [],
    }
    data.update(sections)
    return RunReport.model_validate(data)


def case_result(**fields: Any) -> CaseResult:
    """An end-to-end case of query ``0`` that failed unscored, with ``fields`` over it."""
    mode = fields.get("mode", "e2e")
    query_id = fields.get("query_id", "0")
    data: dict[str, Any] = {
        "id": f"{mode}-{query_id}",
        "query_id": query_id,
        "mode": mode,
        "epoch": None,
        "type": "objective",
        "outcome": "failed",
        "score": 0.0,
        "message": "",
        "nodeid": "",
        "steps": [],
        "replies": [],
        "backends": {},
        "duration": None,
        "properties": {},
        "primitives": None,
        "images": {},
        **fields,
    }
    return CaseResult.model_validate(data)
