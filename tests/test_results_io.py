"""The results model's one writer and one reader (pytest_gta.results.io, .migrate).

The reader reads files from other machines and other versions: whatever a file holds, it
either reads the report or says which file and field are wrong, never a traceback. Reports are
built here in-process from really scored cases (no pytest subprocess), so these tests are fast;
the real reports of earlier versions are in tests/data/reports/ (their README says which run
wrote each).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.case import Case
from pytest_gta.errors import GtaUsageError
from pytest_gta.outward import Cleaner
from pytest_gta.report.build import build_report, complete_verdicts
from pytest_gta.report.merge import coverage_warnings, merge_reports
from pytest_gta.results.case import CaseResult, Verdict
from pytest_gta.results.io import (
    MERGE_HOW,
    CaseWire,
    case_from_wire,
    case_to_wire,
    dump_report,
    load_report,
    parse_report,
)
from pytest_gta.results.report import SCHEMA, RunReport
from pytest_gta.run.runner import case_result
from pytest_gta.scoring.metrics import score_e2e_case, unanswered_step_case
from pytest_gta.scoring.verdict import judge_e2e
from pytest_gta.types import Usage
from tests.helpers.report_builders import TODAY, run_settings
from tests.test_hostile_files import EDITS, _edited

SETTINGS = run_settings(sim_model="m", pytest_gta="x")
#: The keys a case gained when the results model kept the verdict, usage and model time whole.
NEW_CASE_KEYS = ("verdict", "usage", "model_s")
#: The keys a report gained with the erratum (issue 32): the sound-reference metrics.
NEW_REPORT_KEYS = ("metrics_sound", "denominators_sound")


def scored_case(dataset: Any, qid: str, mode: str, nodeid: str) -> CaseResult:
    """A case as a worker makes it (:func:`~pytest_gta.run.runner.case_result`)."""
    query = dataset[qid]
    if mode == "e2e":
        # The reference replayed: a real episode's predictions, scored as the runner scores.
        gold = [dict(d) for d in query.dialogs[1:]]
        score: Any = score_e2e_case(gold, gold, query.gt_answer, None)
        verdict = judge_e2e(gold, gold, query.gt_answer, score, 0.5)
    else:
        gold = [dict(query.dialogs[i]) for i in query.assistant_indices]
        score = unanswered_step_case(gold, query.gt_answer)
        verdict = Verdict.of(False, 0.0, "no step was answered", turn=0)
    result, _ = case_result(
        Case("step" if mode == "step" else "e2e", query),
        predictions=gold,
        score=score,
        verdict=verdict,
        replies=["Thought: done"],
        usage=Usage(10, 5, 1, 0),
        duration=0.25,
        backends={"OCR": "replay"},
        agent=None,
        model_s=0.125,
    )
    result.nodeid = nodeid
    return result


@pytest.fixture(scope="module")
def objective_ids(sample_dataset) -> list[str]:
    return [q for q in sample_dataset.queries if sample_dataset[q].type == "objective"][:3]


def cases_of(sample_dataset, objective_ids) -> list[CaseResult]:
    cases = [scored_case(sample_dataset, q, "e2e", f"t::e2e-{q}") for q in objective_ids]
    cases.append(scored_case(sample_dataset, objective_ids[0], "step", "t::step-0"))
    cases.append(CaseResult.unscored("step", objective_ids[1], outcome="error", message="down"))
    cases.append(CaseResult.unscored("step", objective_ids[2], outcome="skipped", message="no"))
    return cases


def sample_report(dataset: Any, cases: list[CaseResult], **extra: Any) -> RunReport:
    """The report of ``cases`` of the sample, as a session of model ``m`` builds it."""
    return build_report(
        model="m",
        protocol="react",
        dataset=dataset,
        data_source="sample",
        settings=SETTINGS,
        cases=cases,
        samples=20,
        **extra,
    )


@pytest.fixture(scope="module")
def report(sample_dataset, objective_ids) -> RunReport:
    """A report as a session builds it: scored cases, an errored one, a skipped one."""
    return sample_report(sample_dataset, cases_of(sample_dataset, objective_ids))


def test_a_written_report_reads_back_into_the_same_report(tmp_path, report, sample_dataset):
    path = tmp_path / "r.json"
    path.write_text(dump_report(report), encoding="utf-8")
    read = load_report(path, "r.json")
    assert read.label == "r.json"
    assert [c.id for c in read.cases] == [c.id for c in report.cases]
    assert {c.outcome for c in read.cases} == {"passed", "failed", "error", "skipped"}
    # What the reader reads is what build_report reads: the same report, bit for bit.
    again = build_report(
        model="m",
        protocol="react",
        dataset=sample_dataset,
        data_source="sample",
        settings=SETTINGS,
        cases=read.cases,
        samples=20,
    )
    assert dump_report(again) == dump_report(report) == path.read_text()


def test_the_case_keeps_its_whole_verdict_and_flat_properties(report):
    failed = next(c for c in report.cases if c.mode == "step" and c.outcome == "failed")
    assert failed.message == "no step was answered"  # the verdict's
    assert failed.verdict is not None
    assert failed.verdict.turn == 0
    assert failed.primitives is not None
    assert failed.score == 0.0
    errored = next(c for c in report.cases if c.outcome == "error")
    assert errored.message == "down"
    assert (errored.steps, errored.primitives, errored.images, errored.verdict) == (
        [],
        None,
        {},
        None,
    )
    e2e = next(c for c in report.cases if c.mode == "e2e")
    assert e2e.backends == {"OCR": "replay"}
    assert (e2e.duration, e2e.replies, e2e.model_s) == (0.25, ["Thought: done"], 0.125)
    assert e2e.verdict is not None
    assert e2e.verdict.answer_check is not None
    assert all(e2e.verdict.answer_check.whitelist)
    cases = json.loads(dump_report(report))["cases"]
    written = next(c for c in cases if c["id"] == e2e.id)["properties"]
    assert (written["gta_tokens_in"], written["gta_model_s"]) == (10, 0.125)
    assert (written["gta_model"], written["gta_passed"]) == ("m", True)


def test_a_case_travels_from_a_worker_as_its_own_json(report):
    case = report.cases[0]
    arrived = case_from_wire(case_to_wire(CaseWire(case, nonfinite=2)))
    assert arrived.case == case
    assert arrived.nonfinite == 2
    with pytest.raises(ValueError, match="not a GTA case"):
        case_from_wire('{"case": {"id": 1}}')


def test_another_schema_version_is_named(report):
    old = dict(report.to_json_value(), schema="pytest-gta-report/2")
    with pytest.raises(GtaUsageError) as info:
        parse_report("new.json", old)
    message = str(info.value)
    assert message.startswith("new.json: schema is pytest-gta-report/2")
    assert f"({SCHEMA})" in message
    assert message.endswith(MERGE_HOW)


@pytest.mark.parametrize("schema", [None, "gta/1", 1])
def test_a_file_of_something_else_says_it_is_not_a_report(report, schema):
    with pytest.raises(GtaUsageError) as info:
        parse_report("x.json", dict(report.to_json_value(), schema=schema))
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


def test_a_missing_or_wrong_field_is_named(report):
    broken = report.to_json_value()
    del broken["cases"][1]["query_id"]
    with pytest.raises(GtaUsageError, match=r"^r: cases\[1\]\.query_id is missing; "):
        parse_report("r", broken)
    broken = report.to_json_value()
    broken["cases"][0]["replies"] = ["ok", 3]
    with pytest.raises(GtaUsageError, match=r"^r: cases\[0\]\.replies\[1\] is 3: "):
        parse_report("r", broken)
    broken = report.to_json_value()
    broken["cases"][0]["outcome"] = "won"
    with pytest.raises(GtaUsageError, match=r"^r: cases\[0\]\.outcome is 'won': Input should be "):
        parse_report("r", broken)
    broken = report.to_json_value()
    broken["metrics"]["e2e"]["ans_acc"] = True
    with pytest.raises(GtaUsageError, match=r"^r: metrics\.e2e\.ans_acc is true: "):
        parse_report("r", broken)
    broken = report.to_json_value()
    broken["settings"]["sim_treshold"] = 0.5
    with pytest.raises(GtaUsageError, match=r"settings\.sim_treshold is not a field of "):
        parse_report("r", broken)


def test_a_report_written_before_merge_support_is_refused_with_what_to_do(report):
    old = report.to_json_value()
    del old["cases"][0]["primitives"]
    with pytest.raises(GtaUsageError, match=r"primitives is missing: .* re-run that shard"):
        parse_report("old.json", old)


def test_a_hook_field_stays_typed_as_json(report):
    copy = report.model_copy(deep=True)
    copy.hook_fields["checkpoint"] = "step-12000"
    text = dump_report(copy)
    assert json.loads(text)["checkpoint"] == "step-12000"
    assert list(json.loads(text))[-1] == "checkpoint"  # after the report's own fields
    assert parse_report("r", json.loads(text)).report.hook_fields == {"checkpoint": "step-12000"}


def test_dump_report_refuses_nan(report):
    broken = report.model_copy(deep=True)
    assert broken.metrics.e2e is not None
    broken.metrics.e2e.ans_acc = float("nan")
    with pytest.raises(ValueError, match="not JSON compliant"):
        dump_report(broken)
    assert json.loads(dump_report(report))["schema"] == SCHEMA


# --------------------------------------------------------------------------------------------
# Reports written by earlier versions: read, migrated, and written back as they were


def without_new_case_keys(text: str) -> str:
    data = json.loads(text)
    for case in data["cases"]:
        for key in NEW_CASE_KEYS:
            case.pop(key)
    # A report built today (a merge) checks its queries against the erratum; the sample's
    # queries are none of the release's, so its sound-reference metrics are the official ones.
    if "metrics_sound" in data:
        assert data["metrics_sound"] == data["metrics"]
        assert data["denominators_sound"] == data["denominators"]
        assert data["dataset"].pop("erratum")["queries"] == {}
    for key in NEW_REPORT_KEYS:
        data.pop(key, None)
    # Every report says its benchmark since issue 40 (the second key, after the schema).
    assert list(data)[:2] == ["schema", "benchmark"]
    assert data.pop("benchmark") == "gta-atomic"
    return json.dumps(data, indent=2) + "\n"


@pytest.mark.parametrize(
    "name",
    [
        "oracle-both-modes",
        "wrong-with-baseline",
        "shard-1-of-2",
        "shard-2-of-2",
        "merged",
        "agent",
        "epochs",
    ],
)
def test_todays_reports_read_and_write_back_unchanged(sample_dataset, name):
    """A report of 2026-11-28 (before the results model) written back: the same text, with
    each case's verdict, usage and model time added (judged again from its primitives)."""
    path = TODAY / f"{name}.json"
    report = load_report(path, name).report
    assert all(c.verdict is None for c in report.cases)  # the verdict was not kept whole
    complete_verdicts(report.cases, sample_dataset, report.settings.sim_threshold)
    for case in report.cases:
        assert (case.verdict is not None) == (case.primitives is not None)
        if case.verdict is not None and case.outcome in ("passed", "failed"):
            assert case.verdict.passed == (case.outcome == "passed")
            if case.outcome == "failed":
                # File paths are the dataset's, wherever it was then and is now.
                now = case.verdict.message.replace(sample_dataset.root_str, report.dataset.path)
                assert now in case.message
    text = dump_report(report)
    assert without_new_case_keys(text) == path.read_text()


def test_todays_shards_merge_into_todays_merged_report(sample_dataset):
    reports = [load_report(TODAY / f"shard-{k}-of-2.json", f"shard{k}.json") for k in (1, 2)]
    merged = merge_reports(reports, sample_dataset, coverage_warnings(reports))
    merged.notes = list(dict.fromkeys(merged.notes))
    # The dataset is where this checkout has it, not where the shards' run had it.
    written = dump_report(merged).replace(sample_dataset.root_str, reports[0].report.dataset.path)
    assert without_new_case_keys(written) == (TODAY / "merged.json").read_text()


EARLIER = TODAY.parent
#: Every report an earlier version wrote, by its directory (the version's date and commit).
EARLIER_REPORTS = sorted(
    p for p in EARLIER.glob("2026-11-2[2-6]-*/*.json") if p.name != "mock.json"
)


@pytest.mark.parametrize("path", EARLIER_REPORTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_earlier_report_is_read_or_refused_with_what_to_do(path):
    data = json.loads(path.read_text())
    if "primitives" not in data["cases"][0]:  # before --gta-merge: nothing to rebuild from
        with pytest.raises(GtaUsageError, match=r"primitives is missing: .* re-run that shard"):
            load_report(path, path.name)
        return
    report = load_report(path, path.name).report
    assert len(report.cases) == len(data["cases"])
    assert [c.outcome for c in report.cases] == [c["outcome"] for c in data["cases"]]
    assert report.identity.model == data["model"]
    # Written in today's shape, it reads back into the same report.
    again = parse_report(path.name, json.loads(dump_report(report))).report
    assert dump_report(again) == dump_report(report)


def test_shards_of_an_earlier_version_merge_into_its_unsharded_run(sample_dataset):
    version = EARLIER / "2026-11-26-32de296"
    shards = [load_report(version / f"gta-shard-{k}of2.json", f"s{k}") for k in (1, 2)]
    merged = merge_reports(shards, sample_dataset, samples=20)
    whole = load_report(version / "run.json", "run.json").report
    assert merged.metrics == whole.metrics
    assert merged.outcomes == whole.outcomes
    assert all((c.verdict is None) == (c.primitives is None) for c in merged.cases)


def test_a_report_without_an_identity_gets_one_from_its_fields(report):
    old = report.to_json_value()
    del old["identity"], old["label"]
    read = parse_report("old.json", old).report
    assert read.label == "m [react]"
    assert read.identity.label_given is False
    assert (read.identity.git, read.identity.started_at) == (None, None)
    assert read.identity.dataset_sha256 == report.dataset.sha256


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
            merged = merge_reports([read], dataset, samples=20)
            cleaned = RunReport.model_validate(Cleaner().value(merged.to_json_value()))
            assert json.loads(dump_report(cleaned))["schema"] == SCHEMA
    except GtaUsageError as exc:
        problem = str(exc)
    if problem is not None:
        assert problem.startswith(f"{label}: ")
    else:
        assert read.label == label
        assert len(read.cases) == len(data["cases"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=EDITS)
def test_property_a_mutated_report_is_read_or_a_usage_error(report, sample_dataset, edits):
    # The same edits as the merge's property test, in-process (fast, so many more).
    _read_or_usage_error("hostile.json", _edited(report.to_json_value(), edits), sample_dataset)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=EDITS)
def test_property_a_mutated_stored_report_is_read_or_a_usage_error(sample_dataset, edits):
    stored = json.loads((TODAY / "wrong-with-baseline.json").read_text())
    _read_or_usage_error("stored.json", _edited(stored, edits), sample_dataset)


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
