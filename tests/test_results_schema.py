"""The published JSON Schemas (docs/schema/): in step with the classes, and true of real files.

``docs/schema/report.schema.json`` and ``docs/schema/comparison.schema.json`` are generated from
the classes that read and write the files (``python -m pytest_gta.results.jsonschema``); a
changed class without regenerated files fails here, saying what to run. Every report and
comparison the tests make is checked against its schema with the ``jsonschema`` package (a
dependency of the dev extra): :func:`assert_valid_report` and
:func:`assert_valid_comparison` are called by the tests that make them (``test_runs``,
``test_compare_cli``, ``test_runs_html``), and here on a real run of the sample.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.report.runs import RunInput, build_comparison
from pytest_gta.results.io import dump_comparison, load_report
from pytest_gta.results.jsonschema import (
    COMMAND,
    SCHEMA_FILES,
    comparison_schema,
    json_schema,
    main,
    report_schema,
    schema_text,
)
from tests.helpers.gta_run import BOTH_MODES, FAST_SIM, ORACLE, SAMPLE_DATA, gta
from tests.helpers.optional import require

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "docs" / "schema"


@functools.cache
def _validator(which: str) -> Any:
    """A validator of a schema's files (``report``, ``comparison``, ``workflow-report``...).

    Skipped, failed in CI, without jsonschema.
    """
    require("jsonschema")
    import jsonschema

    schema = json_schema(SCHEMA_FILES[f"{which}.schema.json"])
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _assert_valid(which: str, data: Any) -> None:
    validator = _validator(which)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message[:300]}" for e in errors[:5]
    )


def assert_valid_report(data: Any) -> None:
    """``data`` (a report's JSON) is what docs/schema/report.schema.json describes."""
    _assert_valid("report", data)


def assert_valid_comparison(data: Any) -> None:
    """``data`` (a comparison's JSON) is what docs/schema/comparison.schema.json describes."""
    _assert_valid("comparison", data)


# --------------------------------------------------------------------------------------------
# The committed files


@pytest.mark.parametrize("name", list(SCHEMA_FILES))
def test_the_committed_schema_is_the_classes(name: str) -> None:
    path = SCHEMA_DIR / name
    assert path.is_file(), f"{path} is missing: run {COMMAND} docs/schema"
    assert path.read_text(encoding="utf-8") == schema_text(SCHEMA_FILES[name]), (
        f"{path} is stale (a class of pytest_gta.results changed): run {COMMAND} docs/schema"
    )


def test_the_command_writes_the_files_and_check_names_a_stale_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--check", str(tmp_path)]) == 1
    assert main([str(tmp_path)]) == 0
    for name, cls in SCHEMA_FILES.items():
        assert (tmp_path / name).read_text(encoding="utf-8") == schema_text(cls)
    assert main(["--check", str(tmp_path)]) == 0
    stale = tmp_path / "comparison.schema.json"
    stale.write_text(stale.read_text().replace("Table4", "Table 4"))
    capsys.readouterr()
    assert main(["--check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == f"{stale} is stale: run {COMMAND} {tmp_path}\n"


def test_the_schemas_say_what_a_field_is() -> None:
    """Each field's docstring is its description, so the schema documents the JSON too."""
    schema = comparison_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    run = schema["$defs"]["ComparedRun"]
    assert run["additionalProperties"] is False
    assert "every table" in run["properties"]["label"]["description"]
    assert schema["properties"]["schema"]["description"] == "``pytest-gta-comparison/1``."
    assert report_schema()["properties"]["schema"]["description"] == "``pytest-gta-report/1``."


# --------------------------------------------------------------------------------------------
# Real files


def test_a_run_and_its_comparison_are_what_the_schemas_say(
    pytester: pytest.Pytester, sample_dataset: Any
) -> None:
    run = gta(pytester, ORACLE, SAMPLE_DATA, BOTH_MODES, FAST_SIM, "--gta-ids=0,3,12")
    assert run.ret == 0, run.output[-2000:]
    assert_valid_report(run.report)
    typed = load_report(run.report_path, "gta.json").report
    runs = [RunInput("first", ("gta.json",), typed), RunInput("second", ("gta.json",), typed)]
    comparison = build_comparison(runs, sample_dataset, leaderboard=["2026-02"], samples=50)
    data = json.loads(dump_comparison(comparison))
    assert_valid_comparison(data)
    # The schemas are not vacuous: a wrong kind, a missing field, an unknown one are refused.
    for broken in (
        {**data, "level": "0.95"},
        {k: v for k, v in data.items() if k != "matrix"},
        {**data, "runs": [{**data["runs"][0], "colour": "red"}]},
    ):
        with pytest.raises(AssertionError):
            assert_valid_comparison(broken)
    report = copy.deepcopy(run.report)
    report["cases"][0]["outcome"] = "won"
    with pytest.raises(AssertionError):
        assert_valid_report(report)


def test_every_benchmarks_report_is_what_its_schema_says() -> None:
    """The stored GTA-Workflow reports (written before the ``benchmark`` field) and a scored
    report validate against their schemas; an atomic report is no Workflow report."""
    stored = ROOT / "tests" / "data" / "reports" / "2026-12-07-099ba9a-workflow"
    for name in ("run", "low", "shard-1-of-2", "shard-2-of-2"):
        _assert_valid("workflow-report", json.loads((stored / f"{name}.json").read_text()))
    scored = {
        "benchmark": "arith",
        "model": "exact",
        "label": "exact",
        "dataset": "data",
        "metrics": {"exact": 100.0, "pass_rate": 100.0},
        "counted": 1,
        "errors": 0,
        "cases": [
            {
                "id": "1",
                "nodeid": "gta::test_case[1]",
                "outcome": "passed",
                "message": "",
                "passed": True,
                "scores": {"exact": 1.0},
            }
        ],
    }
    _assert_valid("scored-report", scored)
    atomic_path = (
        ROOT / "tests" / "data" / "reports" / "2026-11-28-cfe0abc" / "oracle-both-modes.json"
    )
    atomic = json.loads(atomic_path.read_text())
    with pytest.raises(AssertionError):
        _assert_valid("workflow-report", atomic)
