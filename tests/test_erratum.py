"""The erratum (pytest_gta/erratum.json): the release's unsound queries, shown with every score.

The file ships with the package. Its faulty-reference entries are the quirks that sink a
reference, computed from the real release (``pytest_gta.erratum_build``); the tests here compute
them again and hold the file to them, and hold it to the release (digests, the dataset's sha256,
no reference answer quoted). Its reader reads a file from outside like every other reader:
whatever the file holds, a usage error naming the file and the field. The report gives each case
its query's faults and the paper's metrics a second time over the sound queries, by the same
formulas: built here in-process from really scored cases of the sample, with an erratum written
for the test, and shown by every renderer. A black-box run of release queries checks the whole
way, terminal, JUnit, JSON, markdown, HTML and ``--gta-compare``, with and without xdist.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.dataset import Dataset
from pytest_gta.erratum import ERRATUM_PATH, load_erratum, parse_erratum, query_sha256
from pytest_gta.erratum import shipped_erratum as shipped
from pytest_gta.erratum_build import LIVE_WEB, UNSOUND, erratum_of, faulty_entries, main
from pytest_gta.errors import GtaUsageError
from pytest_gta.quirks import WEAK_SUBJECTIVE, find_quirks
from pytest_gta.report import html, runs_html, runs_text, table
from pytest_gta.report.runs import RunInput, build_comparison
from pytest_gta.results.erratum import ERRATUM_VERSION, ErratumEntry
from pytest_gta.results.io import dump_report, parse_report
from pytest_gta.validation import load_dataset
from tests.helpers.gta_run import FAST_SIM, ORACLE, gta
from tests.helpers.optional import require
from tests.helpers.paths import ROOT
from tests.test_hostile_files import EDITS, _edited
from tests.test_results_io import JSON, sample_report, scored_case

#: The entries per kind on the release (docs/dataset.md, "The erratum").
COUNTS = {
    "no_final_answer": 16,
    "unanswered_call": 2,
    "answer_not_in_chain": 1,
    "rejected_call": 3,
    "missing_file": 1,
    "answer_misses_reference": 12,
    "weak_subjective_reference": 1,
    "live_web": 6,
}
#: The queries the erratum names on the release: every failure of the oracle among them.
NAMED = {
    "5", "12", "14", "15", "19", "34", "35", "44", "45", "46", "47", "48", "49", "67", "69",
    "71", "72", "83", "89", "94", "115", "127", "157", "165", "166", "170", "171", "175", "176",
    "197", "198", "206", "211", "213", "214", "226",
}  # fmt: skip
#: What the shipped file holds, as (query, kind) pairs.
PAIRS = {(e.query, e.kind) for e in shipped().file.entries}


# --------------------------------------------------------------------------------------------
# The shipped file, against the release


def test_the_shipped_erratum_names_36_queries_by_kind() -> None:
    erratum = shipped()
    assert erratum.version == ERRATUM_VERSION == "gta-erratum/1"
    counts: dict[str, int] = {}
    for entry in erratum.file.entries:
        counts[entry.kind] = counts.get(entry.kind, 0) + 1
    assert counts == COUNTS
    assert {e.query for e in erratum.file.entries} == NAMED
    assert list(erratum.kinds) == [*(k.key for k in UNSOUND), LIVE_WEB]


def test_the_shipped_erratum_is_what_its_schema_says() -> None:
    require("jsonschema")
    import jsonschema

    schema = json.loads((ROOT / "docs" / "schema" / "erratum.schema.json").read_text())
    jsonschema.validate(json.loads(ERRATUM_PATH.read_text()), schema)


def test_the_erratum_is_of_the_release(release_dataset: Dataset) -> None:
    erratum = shipped()
    assert erratum.file.dataset_sha256 == release_dataset.sha256
    digests = {q.qid: query_sha256(q) for q in release_dataset}
    assert len(set(digests.values())) == 229  # no two queries share a digest
    for entry in erratum.file.entries:
        assert entry.query_sha256 == digests[entry.query], entry.query
    named = erratum.of_dataset(release_dataset)
    assert set(named) == NAMED
    assert list(named) == [q for q in release_dataset.queries if q in NAMED]  # dataset order
    assert erratum.use(release_dataset, named).same_dataset is True


def test_every_quirk_that_sinks_a_replay_is_in_the_erratum(release_dataset: Dataset) -> None:
    sinking = {(q.qid, q.kind.key) for q in find_quirks(release_dataset) if q.fails}
    assert sinking  # the release has them: 17 step and 16 e2e cases the oracle fails
    assert sinking <= PAIRS


def test_the_faulty_entries_are_computed_from_the_release(release_dataset: Dataset) -> None:
    computed = faulty_entries(release_dataset)
    kept = [e for e in shipped().file.entries if e.kind not in (LIVE_WEB, WEAK_SUBJECTIVE.key)]
    assert computed == kept


@pytest.mark.slow  # loads the similarity model
def test_the_whole_file_is_what_the_command_writes(release_root: Path, minilm, tmp_path) -> None:
    dataset = load_dataset(release_root)
    computed = faulty_entries(dataset, minilm, "all-MiniLM-L6-v2")
    curated = [e for e in shipped().file.entries if e.kind == LIVE_WEB]
    assert erratum_of(dataset, computed, curated) == shipped().file
    assert [e.query for e in computed if e.kind == WEAK_SUBJECTIVE.key] == ["165"]
    # The command: --check holds the file to the release; a stale file is named.
    assert main([str(release_root), "--check"]) == 0
    stale = tmp_path / "erratum.json"
    shutil.copy(ERRATUM_PATH, stale)
    text = stale.read_text().replace("0.22 similar", "0.99 similar")
    stale.write_text(text)
    assert main([str(release_root), "--check", "--output", str(stale)]) == 1
    assert main([str(release_root), "--output", str(stale)]) == 0
    assert stale.read_text() == ERRATUM_PATH.read_text()


def test_live_web_entries_are_google_search_queries(release_dataset: Dataset) -> None:
    live = [e.query for e in shipped().file.entries if e.kind == LIVE_WEB]
    assert live == ["5", "127", "197", "198", "213", "214"]
    for qid in live:
        assert "GoogleSearch" in release_dataset[qid].called_tools, qid


def test_no_evidence_quotes_a_reference_answer(release_dataset: Dataset) -> None:
    for entry in shipped().file.entries:
        query = release_dataset[entry.query]
        ref = query.gt_answer
        said = [
            *(
                [a for group in ref["whitelist"] for a in group]
                if isinstance(ref, dict)
                else ref or []
            ),
        ]
        last = query.dialogs[-1].get("content")
        if isinstance(last, str):
            said.append(last.strip())
        # Short numbers ("2", "25") occur in any sentence ("1 of its 2 groups"); the rest never.
        evidence = entry.evidence.lower()
        quoted = [s for s in said if not (s.isdigit() and len(s) < 3) and s.lower() in evidence]
        assert not quoted, (entry.query, entry.kind, quoted)


# --------------------------------------------------------------------------------------------
# Matching by content


def copy_of_release(release_root: Path, target: Path, queries: dict[str, Any]) -> Dataset:
    """A dataset of release queries (``{new id: query value}``), with their images."""
    target.mkdir()
    shutil.copy(release_root / "toolmeta.json", target)
    (target / "image").mkdir()
    for value in queries.values():
        for file in value["files"]:
            shutil.copy(release_root / file["path"], target / file["path"])
    (target / "dataset.json").write_text(json.dumps(queries))
    return load_dataset(target)


def test_entries_follow_a_query_by_content_not_by_id(release_root: Path, tmp_path) -> None:
    data = json.loads((release_root / "dataset.json").read_text())
    changed = json.loads(json.dumps(data["198"]))
    changed["gt_answer"]["whitelist"] = [["2697"]]  # the alias fixed: no longer faulty
    dataset = copy_of_release(
        release_root,
        tmp_path / "d",
        {"a": data["19"], "b": data["0"], "c": changed, "d": data["5"]},
    )
    named = shipped().of_dataset(dataset)
    assert {qid: [e.kind for e in entries] for qid, entries in named.items()} == {
        "a": ["answer_misses_reference"],
        "d": ["live_web"],
    }
    use = shipped().use(dataset, named)
    assert use.same_dataset is False
    assert use.queries == {"answer_misses_reference": ["a"], "live_web": ["d"]}


def test_the_sample_has_no_query_of_the_release(sample_dataset: Dataset) -> None:
    assert shipped().of_dataset(sample_dataset) == {}


# --------------------------------------------------------------------------------------------
# Hostile files: read, or a usage error naming the file and the field

SHIPPED = json.loads(ERRATUM_PATH.read_text())


def _read_or_named(label: str, data: Any) -> str | None:
    try:
        parse_erratum(label, data)
    except GtaUsageError as exc:
        message = str(exc)
        assert message.startswith(f"{label}: ")
        assert "pytest_gta.erratum_build" in message  # where the file comes from
        return message
    return None


@settings(max_examples=100, deadline=None)
@given(data=JSON)
def test_property_any_json_is_read_or_a_usage_error(data: Any) -> None:
    _read_or_named("any.json", data)
    _read_or_named("any.json", {**SHIPPED, "entries": data})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=EDITS)
def test_property_a_mutated_erratum_is_read_or_names_the_field(edits) -> None:
    _read_or_named("mutated.json", _edited(SHIPPED, edits))


@settings(max_examples=60, deadline=None)
@given(
    index=st.integers(0, len(SHIPPED["entries"]) - 1),
    field=st.sampled_from(["query", "query_sha256", "kind", "evidence"]),
    value=JSON,
)
def test_property_a_bad_entry_is_named_by_its_index(index: int, field: str, value: Any) -> None:
    data = json.loads(json.dumps(SHIPPED))
    data["entries"][index][field] = value
    message = _read_or_named("e.json", data)
    if message is not None:
        assert f"entries[{index}]" in message


@settings(max_examples=60, deadline=None)
@given(content=st.binary(max_size=64))
def test_property_any_bytes_in_a_file_are_a_usage_error(tmp_path_factory, content: bytes) -> None:
    path = tmp_path_factory.mktemp("bytes") / "e.json"
    path.write_bytes(content)
    with pytest.raises(GtaUsageError, match=r"^bytes\.json: "):
        load_erratum(path, "bytes.json")


def _entry_edit(index: int, **fields: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(SHIPPED))
    data["entries"][index].update(fields)
    return data


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ([], "e.json: not an erratum (version null, expected 'gta-erratum/1')"),
        ({**SHIPPED, "version": "gta-erratum/2"}, "version is 'gta-erratum/2': this pytest-gta"),
        (_entry_edit(0, kind="nonsense"), "entries[0].kind is 'nonsense': not one of the"),
        (_entry_edit(1, query_sha256="xyz"), "entries[1].query_sha256 is 'xyz': not a sha256"),
        (_entry_edit(2, evidence="two\nlines"), "entries[2].evidence is 'two\\nlines': must be"),
        (_entry_edit(3, evidence=7), "entries[3].evidence is 7: Input should be a valid string"),
        (_entry_edit(4, answer="x"), "entries[4].answer is not a field of this erratum version"),
        ({**SHIPPED, "kinds": {"live_web": 3}}, "kinds.live_web is 3: Input should be a valid"),
        (
            {**SHIPPED, "entries": [SHIPPED["entries"][0], SHIPPED["entries"][0]]},
            "entries[1] names query '5' with kind live_web, as entries[0] does",
        ),
    ],
    ids=["array", "version", "kind", "digest", "lines", "number", "extra", "kinds", "twice"],
)
def test_a_wrong_file_is_named_with_its_field(data: Any, said: str) -> None:
    with pytest.raises(GtaUsageError) as info:
        parse_erratum("e.json", data)
    assert said in str(info.value)


def test_a_missing_or_unreadable_file_is_a_usage_error(tmp_path) -> None:
    with pytest.raises(GtaUsageError, match=r"^gone\.json: no such file; the erratum is"):
        load_erratum(tmp_path / "gone.json", "gone.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(GtaUsageError, match=r"^bad\.json: invalid JSON at line 1"):
        load_erratum(tmp_path / "bad.json", "bad.json")
    with pytest.raises(GtaUsageError, match=r"^dir: is a directory, not a regular file; "):
        load_erratum(tmp_path, "dir")


# --------------------------------------------------------------------------------------------
# The report: each case's faults, and the metrics over the sound queries


def erratum_for(dataset: Dataset, faults: dict[str, str]) -> Any:
    """An erratum naming ``faults`` ({query id: kind}) of ``dataset``."""
    entries = [
        ErratumEntry(
            query=qid,
            query_sha256=query_sha256(dataset[qid]),
            kind=kind,
            evidence=f"query {qid} is faulty",
        ).model_dump()
        for qid, kind in faults.items()
    ]
    return parse_erratum("test.json", {**SHIPPED, "entries": entries})


@pytest.fixture(scope="module")
def cases_and_ids(sample_dataset):
    ids = [q for q in sample_dataset.queries if sample_dataset[q].type == "objective"][:3]

    def make() -> list[Any]:
        cases = [scored_case(sample_dataset, q, "e2e", f"t::e2e-{q}") for q in ids]
        cases += [scored_case(sample_dataset, q, "step", f"t::step-{q}") for q in ids]
        return cases

    return make, ids


def _build(sample_dataset, cases, erratum) -> Any:
    return sample_report(sample_dataset, cases, erratum=erratum)


def test_the_sound_metrics_are_the_official_ones_over_the_sound_queries(
    sample_dataset, cases_and_ids
) -> None:
    make, ids = cases_and_ids
    faulty = erratum_for(sample_dataset, {ids[0]: "answer_misses_reference"})
    none = erratum_for(sample_dataset, {})
    report = _build(sample_dataset, make(), faulty)
    without = _build(sample_dataset, make(), none)
    sound_only = _build(sample_dataset, [c for c in make() if c.query_id != ids[0]], none)
    # The official numbers do not move; the second set is the official aggregate of the rest.
    assert report.metrics == without.metrics
    assert json.dumps(report.metrics.to_json_value()) == json.dumps(without.metrics.to_json_value())
    assert report.metrics_sound == sound_only.metrics
    assert report.metrics_sound != report.metrics
    assert report.denominators_sound == sound_only.denominators
    assert report.denominators_sound.e2e.queries == 2
    assert report.denominators.e2e.queries == 3
    assert without.metrics_sound == without.metrics
    assert report.dataset.erratum.queries == {"answer_misses_reference": [ids[0]]}
    assert report.dataset.erratum.same_dataset is False
    # Each case of the query carries its fault, JUnit's properties too.
    data = json.loads(dump_report(report))
    for case in data["cases"]:
        faulty_case = case["query_id"] == ids[0]
        assert case.get("erratum") == (
            [{"kind": "answer_misses_reference", "evidence": f"query {ids[0]} is faulty"}]
            if faulty_case
            else None
        )
        assert case["properties"].get("gta_erratum") == (
            "answer_misses_reference" if faulty_case else None
        )
    # Written and read back, the same report.
    assert parse_report("r.json", data).report == report


def test_every_renderer_shows_the_faults_and_the_sound_rows(sample_dataset, cases_and_ids):
    make, ids = cases_and_ids
    report = _build(sample_dataset, make(), erratum_for(sample_dataset, {ids[1]: "live_web"}))
    e2e = report.metrics_sound.e2e
    text = "\n".join(table.render_text(report))
    rows = re.findall(r"^  sound refs only \(2 of 3 queries\)(.*)$", text, re.M)
    assert len(rows) == 2, text  # step, then end to end
    assert rows[1].split()[4] == f"{e2e.ans_acc:.2f}"  # P, O, L, C F1, then AnsAcc
    assert "erratum gta-erratum/1: 1 of the run's 3 queries have a faulty reference" in text
    kind = "answer depends on the live web when the data was written"
    assert f"erratum: {kind}: 1 query ({ids[1]})" in text
    markdown = table.render_markdown(report)
    assert "## Erratum: queries whose reference is faulty or live" in markdown
    said = f"query {ids[1]} (step-{ids[1]} failed, e2e-{ids[1]} passed)"
    assert f"- {said}: live_web: query {ids[1]} is faulty" in markdown
    assert "|   sound refs only (2 of 3 queries) |" in markdown
    page = html.render_html(report, sample_dataset, None)
    assert page.count('<section class="erratum">') == 2  # the query's two cases
    assert f"<li><b>live_web</b>: query {ids[1]} is faulty</li>" in page
    assert page.count('data-erratum="live_web"') == 2
    assert page.count('data-erratum="sound"') == 4
    assert '<select data-filter="erratum"><option value="">all</option>' in page
    assert "<td>  sound refs only (2 of 3 queries)</td>" in page


def test_a_comparison_shows_the_sound_table_even_for_reports_written_before_it(
    sample_dataset, cases_and_ids
) -> None:
    make, ids = cases_and_ids
    faulty = erratum_for(sample_dataset, {ids[2]: "rejected_call"})
    report = _build(sample_dataset, make(), faulty)
    # A report of an earlier version: no metrics_sound; the comparison computes it.
    older = parse_report("old.json", json.loads(dump_report(report))).report
    older.metrics_sound = older.denominators_sound = None
    runs = [RunInput("now", ("now.json",), report), RunInput("then", ("old.json",), older)]
    comparison = build_comparison(runs, sample_dataset, samples=20)
    # The shipped erratum names no sample query: the older report's own are all sound.
    assert comparison.run("then").metrics_sound == older.metrics
    assert comparison.run("now").metrics_sound == report.metrics_sound
    sound = comparison.tables.table4_sound.e2e
    assert [row.label for row in sound.rows] == ["now", "then"]
    assert sound.rows[0].values["ans_acc"] == report.metrics_sound.e2e.ans_acc
    text = "\n".join(runs_text.render_text(comparison))
    assert "Table 4, end-to-end mode, sound refs only (percent over the queries" in text
    assert re.search(r"^now \(2 of 3 queries\) ", text, re.M), text
    assert re.search(r"^then \(all\) ", text, re.M), text
    assert "## Table 4, end-to-end mode, sound refs only" in runs_text.render_markdown(comparison)
    page = runs_html.render_comparison_html(comparison)
    assert 'class="cmp-table table4 sound"' in page
    assert '<span class="ci"> (2 of 3 queries)</span>' in page


# --------------------------------------------------------------------------------------------
# A run of release queries, black box: every output


@pytest.mark.slow
def test_a_run_of_release_queries_shows_the_erratum_everywhere(
    pytester: pytest.Pytester, release_root: Path
) -> None:
    pytester.makeini("[pytest]\n")
    run = gta(
        pytester,
        f"--gta-data={release_root}",
        ORACLE,
        "--gta-mode=step,e2e",
        FAST_SIM,
        "--gta-ids=0,1,5,19,89",
        "--gta-report-md=r.md",
        "--gta-report-html=r.html",
        "--junitxml=j.xml",
        "-p",
        "no:randomly",
    )
    # The oracle fails 19 (its reference answer misses its whitelist) and step-89 (a call the
    # official parser rejects); 5 (live web) passes, but it is not sound either.
    run.result.assert_outcomes(passed=7, failed=3)
    output = run.output
    assert "erratum (answer_misses_reference): the reference chain's final answer" in output
    assert "erratum gta-erratum/1: 3 of the run's 5 queries have a faulty reference" in output
    report = run.report
    assert report["denominators_sound"]["step"]["queries"] == 2
    # Over the two sound queries the oracle is perfect: every metric but the F1 of a category
    # neither query calls (0 by the official formula).
    assert report["metrics_sound"]["step"] == {
        "inst_acc": 100.0, "tool_acc": 100.0, "arg_acc": 100.0, "summ_acc": 100.0,
        "tool_call": 10, "tool_call_error": 0,
    }  # fmt: skip
    assert report["metrics_sound"]["e2e"]["ans_acc"] == 100.0
    assert report["metrics_sound"]["e2e"]["o_f1"] == 0.0
    assert report["metrics"]["step"]["arg_acc"] < 100.0  # 89's rejected calls, officially
    sound_row = "  sound refs only (2 of 5 queries)"
    numbers = r"\s+100\.00" * 4 + r"\s+10\s+0$"
    assert re.search(rf"^{re.escape(sound_row)}{numbers}", output, re.M), output
    kinds = {c["id"]: [n["kind"] for n in c.get("erratum", [])] for c in report["cases"]}
    assert kinds["step-0"] == kinds["e2e-1"] == []
    assert kinds["e2e-5"] == ["live_web"]
    assert kinds["step-89"] == ["rejected_call"]
    junit = (pytester.path / "j.xml").read_text()
    assert junit.count('name="gta_erratum" value="live_web"') == 2
    assert junit.count('name="gta_erratum" value="rejected_call"') == 2
    assert junit.count('name="gta_erratum"') == 6
    assert 'name="gta_step_arg_acc_sound" value="100.0"' in junit  # the suite's property
    markdown = (pytester.path / "r.md").read_text()
    assert "- query 19 (step-19 failed, e2e-19 failed): answer_misses_reference:" in markdown
    assert f"| {sound_row} | 100.00 | 100.00 | 100.00 | 100.00 | 10 | 0 |" in markdown
    page = (pytester.path / "r.html").read_text()
    assert page.count('<section class="erratum">') == 6
    assert f"<td>{sound_row}</td><td>100.00</td>" in page

    # --gta-compare: the run beside itself, the sound table in every output.
    shutil.copy(pytester.path / "gta.json", pytester.path / "again.json")
    compared = gta(
        pytester,
        "--gta-compare",
        "gta.json",
        "again.json",
        f"--gta-data={release_root}",
        "--gta-report-md=c.md",
        "--gta-report-html=c.html",
        report="c.json",
    )
    assert compared.ret == 0, compared.output
    assert re.search(r"^oracle \[react\] \(2 of 5 queries\)\s+100\.00\*", compared.output, re.M)
    sound = compared.report["tables"]["table4_sound"]["step"]["rows"]
    assert [r["values"]["arg_acc"] for r in sound] == [100.0, 100.0]
    assert "sound refs only" in (pytester.path / "c.md").read_text()
    assert "(2 of 5 queries)</span>" in (pytester.path / "c.html").read_text()
