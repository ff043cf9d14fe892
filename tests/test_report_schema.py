"""The report schema's one writer and one reader (pytest_gta.report.schema).

The reader reads files from other machines and other versions: whatever a file holds, it
either reads the report or says which file and field are wrong, never a traceback. Reports are
built here in-process from really scored cases (no pytest subprocess), so these tests are fast.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.case import Case
from pytest_gta.detail import CaseDetail
from pytest_gta.errors import GtaUsageError
from pytest_gta.outward import Cleaner
from pytest_gta.report.build import build_report
from pytest_gta.report.merge import merge_reports
from pytest_gta.report.schema import (
    MERGE_HOW,
    SCHEMA,
    CaseRecord,
    RunReport,
    case_entry,
    dump_report,
    load_report,
    parse_report,
)
from pytest_gta.results.case import Verdict
from pytest_gta.run.runner import CaseResult
from pytest_gta.scoring.metrics import score_e2e_case, unanswered_step_case
from pytest_gta.scoring.verdict import judge_e2e
from tests.test_hostile_files import EDITS, _edited

SETTINGS = {"modes": ["step", "e2e"], "sim_model": "m", "sim_threshold": 0.5, "pytest_gta": "x"}


def scored_record(dataset: Any, qid: str, mode: str, nodeid: str) -> CaseRecord:
    """A case as the collector records it, its detail written by CaseResult.detail()."""
    query = dataset[qid]
    if mode == "e2e":
        # The reference replayed: a real episode's predictions, scored as the runner scores.
        gold = [dict(d) for d in query.dialogs[1:]]
        score = score_e2e_case(gold, gold, query.gt_answer, None)
        verdict = judge_e2e(gold, gold, query.gt_answer, score, 0.5)
    else:
        gold = [query.dialogs[i] for i in query.assistant_indices]
        score = unanswered_step_case(gold, query.gt_answer)
        verdict = Verdict.of(False, 0.0, "no step was answered", turn=0)
    result = CaseResult(
        case=Case(mode, query),  # type: ignore[arg-type]
        model="m",
        predictions=gold,
        gold=gold,
        score=score,
        verdict=verdict,
        replies=["Thought: done"],
        duration=0.25,
        backends={"OCR": "replay"},
    )
    return CaseRecord(
        mode=mode,
        qid=qid,
        nodeid=nodeid,
        outcome="passed" if result.passed else "failed",
        properties=dict(result.properties()),
        detail=result.detail(),
        message="",
    )


@pytest.fixture(scope="module")
def objective_ids(sample_dataset) -> list[str]:
    return [q for q in sample_dataset.queries if sample_dataset[q].type == "objective"][:3]


@pytest.fixture(scope="module")
def report(sample_dataset, objective_ids) -> RunReport:
    """A report as a session builds it: scored cases, an errored one, a skipped one."""
    records = [scored_record(sample_dataset, q, "e2e", f"t::e2e-{q}") for q in objective_ids]
    records.append(scored_record(sample_dataset, objective_ids[0], "step", "t::step-0"))
    records.append(CaseRecord("step", objective_ids[1], "t::step-1", "error", message="down"))
    records.append(CaseRecord("step", objective_ids[2], "t::step-2", "skipped", message="no"))
    return build_report(
        model="m",
        protocol="react",
        dataset=sample_dataset,
        data_source="sample",
        settings=SETTINGS,
        records=records,
        samples=20,
    )


def test_a_written_report_reads_back_into_the_same_report(tmp_path, report, sample_dataset):
    path = tmp_path / "r.json"
    path.write_text(dump_report(report), encoding="utf-8")
    read = load_report(path, "r.json")
    assert read.label == "r.json"
    assert [r.case_id for r in read.records] == [c["id"] for c in report["cases"]]
    assert [r.outcome for r in read.records] == [c["outcome"] for c in report["cases"]]
    assert {r.outcome for r in read.records} == {"passed", "failed", "error", "skipped"}
    # An errored or skipped case was never scored: no detail to read back.
    assert [r.detail is None for r in read.records] == [
        c["primitives"] is None for c in report["cases"]
    ]
    # What the reader rebuilds is what build_report reads: the same report, bit for bit.
    again = build_report(
        model="m",
        protocol="react",
        dataset=sample_dataset,
        data_source="sample",
        settings=SETTINGS,
        records=read.records,
        samples=20,
    )
    assert dump_report(again) == dump_report(report)


def test_entries_come_from_the_detail_payload(report):
    by_id = {c["id"]: c for c in report["cases"]}
    failed = next(c for c in report["cases"] if c["mode"] == "step" and c["outcome"] == "failed")
    assert failed["message"] == "no step was answered"  # the verdict's, not pytest's
    assert failed["primitives"] is not None
    assert failed["score"] == 0.0
    errored = next(c for c in by_id.values() if c["outcome"] == "error")
    assert errored["message"] == "down"
    assert (errored["steps"], errored["primitives"], errored["images"]) == ([], None, {})
    e2e = next(c for c in by_id.values() if c["mode"] == "e2e")
    assert e2e["backends"] == {"OCR": "replay"}
    assert e2e["duration"] == 0.25
    assert e2e["replies"] == ["Thought: done"]
    assert all(k.startswith("gta_") for k in e2e["properties"])


def test_case_entry_is_made_without_a_record():
    detail: CaseDetail = {
        "score": {"x": 1},
        "verdict": {"score": 0.5, "passed": False, "message": "wrong tool"},
        "steps": [{"role": "assistant"}],
        "replies": ["r"],
        "backends": {},
        "duration": 1.0,
        "images": {"a.png": "k"},
    }
    entry = case_entry(
        "e2e",
        "7",
        2,
        query_type="objective",
        outcome="failed",
        message="pytest's text",
        nodeid="",
        properties={"gta_score": 0.5, "other": 1},
        detail=detail,
    )
    assert entry["id"] == "e2e-7@epoch2"
    assert entry["message"] == "wrong tool"
    assert entry["properties"] == {"gta_score": 0.5}
    assert entry["images"] == {"a.png": "k"}
    assert entry["primitives"] == {"x": 1}


def test_another_schema_version_is_named(report):
    old = dict(report, schema="pytest-gta-report/0")
    with pytest.raises(GtaUsageError) as info:
        parse_report("old.json", old)
    message = str(info.value)
    assert message.startswith("old.json: schema is pytest-gta-report/0")
    assert f"({SCHEMA})" in message
    assert message.endswith(MERGE_HOW)


@pytest.mark.parametrize("schema", [None, "gta/1", 1])
def test_a_file_of_something_else_says_it_is_not_a_report(report, schema):
    with pytest.raises(GtaUsageError) as info:
        parse_report("x.json", dict(report, schema=schema))
    assert str(info.value) == (
        f"x.json: not a pytest-gta report (schema {schema!r}, expected {SCHEMA!r}); {MERGE_HOW}"
    )


def test_a_baseline_message_says_where_baselines_come_from(tmp_path):
    path = tmp_path / "b.json"
    path.write_text("[1, 2", encoding="utf-8")
    with pytest.raises(GtaUsageError) as info:
        load_report(path, "b.json", "BASELINES COME FROM RUNS")
    assert str(info.value).startswith("b.json: ")
    assert str(info.value).endswith("; BASELINES COME FROM RUNS")
    with pytest.raises(GtaUsageError, match=r"^gone\.json: no such file; "):
        load_report(tmp_path / "gone.json", "gone.json")


def test_a_missing_field_is_named(report):
    broken = copy.deepcopy(report)
    del broken["cases"][1]["query_id"]
    with pytest.raises(GtaUsageError, match=r"^r: cases\[1\]\.query_id is missing; "):
        parse_report("r", broken)
    broken = copy.deepcopy(report)
    broken["cases"][0]["replies"] = ["ok", 3]
    with pytest.raises(GtaUsageError, match=r"^r: cases\[0\]\.replies holds a number 3, not "):
        parse_report("r", broken)


# --------------------------------------------------------------------------------------------
# Hostile files: whatever a file holds, a usage error naming it, never a traceback

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)


def _read_or_usage_error(label: str, data: Any, dataset: Any = None) -> None:
    """Read ``data``; what the reader lets through must merge (no traceback further on)."""
    problem = None
    try:
        read = parse_report(label, data)
        if dataset is not None:
            # Cleaned as the finisher cleans it: steps are kept as recorded, NaN included.
            merged = Cleaner().value(merge_reports([read], dataset, samples=20))
            assert json.loads(dump_report(merged))["schema"] == SCHEMA
    except GtaUsageError as exc:
        problem = str(exc)
    if problem is not None:
        assert problem.startswith(f"{label}: ")
    else:
        assert read.label == label
        assert len(read.records) == len(data["cases"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=EDITS)
def test_property_a_mutated_report_is_read_or_a_usage_error(report, sample_dataset, edits):
    # The same edits as the merge's property test, in-process (fast, so many more).
    _read_or_usage_error("hostile.json", _edited(report, edits), sample_dataset)


@settings(max_examples=100, deadline=None)
@given(data=JSON)
def test_property_any_json_is_read_or_a_usage_error(data):
    _read_or_usage_error("any.json", data)


@settings(max_examples=60, deadline=None)
@given(content=st.binary(max_size=64))
def test_property_any_bytes_in_a_file_are_a_usage_error(tmp_path_factory, content):
    path: Path = tmp_path_factory.mktemp("bytes") / "r.json"
    path.write_bytes(content)
    with pytest.raises(GtaUsageError) as info:
        load_report(path, "bytes.json")
    assert str(info.value).startswith("bytes.json: ")


def test_dump_report_refuses_nan(report):
    broken = copy.deepcopy(report)
    broken["metrics"]["e2e"]["ans_acc"] = float("nan")
    with pytest.raises(ValueError, match="not JSON compliant"):
        dump_report(broken)
    assert json.loads(dump_report(report))["schema"] == SCHEMA
