"""Splitting a run across CI jobs (``--gta-shard``) and merging their reports (``--gta-merge``).

The contract: the shards of a split, merged, give the report of one run of all the cases, with
the same metrics bit for bit; reports of another run are refused with the difference named.
"""

from __future__ import annotations

import copy
import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gta.errors import GtaUsageError
from pytest_gta.options.cases import parse_shard
from pytest_gta.report import merge
from pytest_gta.results import io as report_io
from pytest_gta.results.io import parse_report
from pytest_gta.shard import Shard, split
from tests.helpers import gta_run
from tests.helpers.gta_run import (
    BOTH_MODES,
    FAST_SIM,
    ORACLE,
    SAMPLE_DATA,
    gta_process,
    read_report,
    untimed,
)
from tests.helpers.paths import SAMPLE

ALL = 17
#: Keys of the report that a merge must reproduce exactly.
METRIC_KEYS = (
    "metrics",
    "metrics_excluding_errors",
    "errors",
    "tool_calls",
    "denominators",
    "outcomes",
    "outcomes_by_mode",
    "by_type",
    "usage",
    "settings",
    "model",
    "protocol",
    "stopped",
    "interrupted",
)
#: A model that passes, fails and errors, in both modes, with continuous similarity scores.
SCRIPT = {
    "default": "Final Answer: I do not know",
    "responses": {
        "e2e-0": [
            'Thought: read it\nAction: OCR\nAction Input: {"image": "{data}/image/image_0.jpg"}',
            "Final Answer: 9.24",
        ],
        "e2e-1": [{"error": "connection refused"}],
        "step-4": [{"error": "connection refused"}],
        "step-0": [
            'Action: OCR\nAction Input: {"image": "{data}/image/image_0.jpg"}',
            'Action: Calculator\nAction Input: {"expression": "1.29+3.45+4.50"}',
            "Final Answer: 9.24",
        ],
        "e2e-7": ["Final Answer: a dog and a cat are sitting on a sofa"],
    },
}


def _case_key(case):
    keys = ("id", "outcome", "score", "message", "properties", "primitives")
    return untimed({k: case[k] for k in keys})


def _junit(path):
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        props.pop("gta_model_s", None)  # a clock reading
        outcome = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        out[(case.get("classname"), case.get("name"))] = (props, outcome)
    return out


# -- the split --------------------------------------------------------------------------------


@given(
    st.dictionaries(st.text(min_size=1, max_size=6), st.integers(1, 8), max_size=40),
    st.integers(1, 7),
    st.randoms(use_true_random=False),
)
def test_split_places_every_case_once_balanced_and_independent_of_order(weights, total, rnd):
    shards = split(weights, total)
    assert len(shards) == total
    placed = [key for shard in shards for key in shard]
    assert sorted(placed) == sorted(weights)
    loads = [sum(weights[k] for k in shard) for shard in shards]
    if weights:
        assert max(loads) - min(loads) <= max(weights.values())
    items = list(weights.items())
    rnd.shuffle(items)
    assert split(dict(items), total) == shards


def test_split_is_the_documented_greedy():
    # heaviest first, each to the lightest shard, ties by id and by lowest shard
    weights = {"a": 3, "b": 3, "c": 2, "d": 1, "e": 1}
    assert split(weights, 2) == [["a", "c"], ["b", "d", "e"]]
    assert split({}, 3) == [[], [], []]


@pytest.mark.parametrize("value", ["2/3", " 1/1 ", "3/3"])
def test_shard_values(value):
    shard = parse_shard(value)
    assert str(shard) == value.strip()


@pytest.mark.parametrize("value", ["0/3", "4/3", "3", "a/b", "", "1/0", "-1/2", "1/2/3", "1.0/2"])
def test_bad_shard_values_are_usage_errors_with_an_example(value):
    with pytest.raises(
        pytest.UsageError, match=r"--gta-shard=.*: give K/N .* e\.g\. --gta-shard=2/3"
    ):
        parse_shard(value)


@given(st.text(max_size=12))
def test_any_shard_text_is_a_shard_or_a_usage_error(value):
    try:
        shard = parse_shard(value)
    except pytest.UsageError as exc:
        message = str(exc)
        shard = None
    if shard is None:
        assert "--gta-shard" in message
    else:
        assert isinstance(shard, Shard)
        assert 1 <= shard.index <= shard.total


# -- runs ---------------------------------------------------------------------------------------


def gta(pytester, *args):
    return gta_run.gta(pytester, FAST_SIM, SAMPLE_DATA, BOTH_MODES, *args, report=None).result


def report_of(pytester, name):
    return read_report(pytester.path / name)


def test_three_shards_merge_into_the_single_run(pytester, dist_args):
    script = pytester.path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    model = f"--gta-model=mock:{script}"
    whole = gta(pytester, model, "--gta-report=all.json", "--junitxml=all.xml", *dist_args)
    assert whole.ret == 1  # the model fails some cases
    shards = []
    for k in (1, 2, 3):
        result = gta(pytester, model, f"--gta-shard={k}/3", f"--gta-report=s{k}.json", *dist_args)
        assert result.ret == 1
        result.stdout.fnmatch_lines([f"gta: shard {k}/3: the selected cases split 3 ways*"])
        if not dist_args:
            result.stdout.fnmatch_lines([f"gta: shard {k}/3: * of {2 * ALL} cases"])
        shards.append(report_of(pytester, f"s{k}.json"))
    # every case in exactly one shard, and the shard says which
    ids = [c["id"] for s in shards for c in s["cases"]]
    assert sorted(ids) == sorted(c["id"] for c in report_of(pytester, "all.json")["cases"])
    for k, shard in enumerate(shards, 1):
        assert shard["settings"]["shard"] == f"{k}/3"
        assert shard["shard"]["spec"] == f"{k}/3"
        assert shard["shard"]["selected"] == 2 * ALL
        assert shard["shard"]["cases"] == sorted(c["id"] for c in shard["cases"])

    merged = pytester.runpytest(
        "--gta-merge",
        "s1.json",
        "s2.json",
        "s3.json",
        "--gta-report=merged.json",
        "--gta-report-md=merged.md",
        "--junitxml=merged.xml",
    )
    assert merged.ret == 0, merged.stderr.str()
    merged.stdout.fnmatch_lines(
        [
            f"pytest-gta: merged 3 reports: {2 * ALL} cases of *",
            "*GTA results*",
            "merged from 3 reports: shards 1/3, 2/3, 3/3",
            "Table 4, step-by-step mode (percent)",
            "Table 4, end-to-end mode, errored cases excluded (percent)",
        ]
    )
    single, joined = report_of(pytester, "all.json"), report_of(pytester, "merged.json")
    assert single["outcomes"]["failed"]
    assert single["outcomes"]["error"]
    assert 0 < single["metrics"]["step"]["summ_acc"] < 100
    for key in METRIC_KEYS:
        assert untimed(joined[key]) == untimed(single[key]), key
    assert [_case_key(c) for c in joined["cases"]] == [_case_key(c) for c in single["cases"]]
    assert joined["dataset"]["sha256"] == single["dataset"]["sha256"]
    assert joined["dataset"]["selected"] == ALL
    assert joined["merged"]["shards"] == ["1/3", "2/3", "3/3"]
    assert {key.split(": ")[0] for key in joined["timings"]} <= {
        "shard 1/3",
        "shard 2/3",
        "shard 3/3",
    }
    assert "## Table 4, end-to-end mode (percent)" in (pytester.path / "merged.md").read_text()
    # the merged JUnit XML carries what the single run's does
    assert _junit(pytester.path / "merged.xml") == _junit(pytester.path / "all.xml")


def test_shard_applies_to_the_cases_selected_with_k(pytester):
    halves = []
    for k in (1, 2):
        result = gta(pytester, "--gta-model=oracle", "-k", "e2e", f"--gta-shard={k}/2")
        result.stdout.fnmatch_lines([f"gta: shard {k}/2: * of {ALL} cases"])
        passed = result.parseoutcomes()["passed"]
        halves.append(passed)
    assert sum(halves) == ALL
    assert abs(halves[0] - halves[1]) <= 3


def test_shard_applies_after_last_failed(pytester):
    # --lf deselects in a hook wrapper, after every plain collection_modifyitems implementation
    script = pytester.path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    model = f"--gta-model=mock:{script}"
    outcomes = gta(pytester, model).parseoutcomes()
    rerun = outcomes["failed"] + outcomes["errors"]
    ran = 0
    for k in (1, 2):
        result = gta(pytester, model, "--lf", f"--gta-shard={k}/2")
        result.stdout.fnmatch_lines([f"gta: shard {k}/2: * of {rerun} cases"])
        counts = result.parseoutcomes()
        ran += counts.get("failed", 0) + counts.get("errors", 0) + counts.get("passed", 0)
    assert ran == rerun


def test_other_tests_run_in_the_first_shard_only(pytester):
    pytester.makepyfile(
        test_own="""
        def test_own_check():
            pass

        def test_query(gta_result):
            assert gta_result.passed
        """
    )
    first = gta(pytester, "--gta-model=oracle", "--gta-shard=1/2", "-v")
    second = gta(pytester, "--gta-model=oracle", "--gta-shard=2/2", "-v")
    first.stdout.fnmatch_lines(["*test_own_check PASSED*"])
    first.stdout.fnmatch_lines(["*also collected 1 test(s) that are not GTA cases*test_own_check*"])
    assert "test_own_check" not in second.stdout.str()  # neither run nor named in a note
    total = first.parseoutcomes()["passed"] + second.parseoutcomes()["passed"]
    assert total == 2 * ALL + 1


def test_shard_from_the_ini_file(pytester):
    pytester.makeini("[pytest]\ngta_shard = 2/2\n")
    result = gta(pytester, "--gta-model=oracle", "--gta-report=r.json")
    assert report_of(pytester, "r.json")["settings"]["shard"] == "2/2"
    result.stdout.fnmatch_lines([f"gta: shard 2/2: * of {2 * ALL} cases"])


# -- refusals -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shard_reports(tmp_path_factory):
    """Reports of a 3-way split of the oracle run, and of a run of all cases (subprocesses)."""
    where = tmp_path_factory.mktemp("shards")
    base = (FAST_SIM, ORACLE, SAMPLE_DATA, BOTH_MODES)
    reports = {
        f"s{k}": gta_process(where, *base, f"--gta-shard={k}/3", report=f"s{k}.json").report
        for k in (1, 2, 3)
    }
    reports["all"] = gta_process(where, *base, report="all.json").report
    return reports


def write(pytester, name, data):
    (pytester.path / name).write_text(data if isinstance(data, str) else json.dumps(data))
    return name


def merge_run(pytester, *names, extra=()):
    return gta_run.gta(pytester, "--gta-merge", *names, *extra, report="m.json").result


def test_oracle_shards_merge(pytester, shard_reports):
    names = [write(pytester, f"s{k}.json", shard_reports[f"s{k}"]) for k in (1, 2, 3)]
    result = merge_run(pytester, *names)
    assert result.ret == 0
    joined = report_of(pytester, "m.json")
    for key in METRIC_KEYS:
        assert untimed(joined[key]) == untimed(shard_reports["all"][key]), key


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.update(model="other"), "s2.json: model is other, s1.json has oracle"),
        (
            lambda r: r["settings"].update(sim_model="all-mpnet-base-v2"),
            "s2.json: settings.sim_model is all-mpnet-base-v2, s1.json has all-MiniLM-L6-v2",
        ),
        (
            lambda r: r["settings"]["budget"].update(max_tokens_total=1000),
            "s2.json: settings.budget.max_tokens_total is 1000, s1.json has null",
        ),
        (lambda r: r["dataset"].update(sha256="0" * 64), "s2.json: dataset.sha256 is 0000"),
        (lambda r: r.update(protocol="native"), "s2.json: protocol is native, s1.json has react"),
    ],
)
def test_reports_of_another_run_are_refused(pytester, shard_reports, change, message):
    other = copy.deepcopy(shard_reports["s2"])
    change(other)
    result = merge_run(
        pytester, write(pytester, "s1.json", shard_reports["s1"]), write(pytester, "s2.json", other)
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-gta: {message}*"])
    assert not (pytester.path / "m.json").exists()


def test_a_case_in_two_reports_is_refused(pytester, shard_reports):
    one = write(pytester, "all.json", shard_reports["all"])
    two = write(pytester, "s1.json", shard_reports["s1"])
    result = merge_run(pytester, one, two)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-gta: s1.json: case * is also in all.json*"])


def test_a_shard_given_twice_or_of_another_split_is_refused(pytester, shard_reports):
    again = write(pytester, "again.json", shard_reports["s1"])
    result = merge_run(pytester, write(pytester, "s1.json", shard_reports["s1"]), again)
    result.stderr.fnmatch_lines(["*again.json: shard 1/3 is given twice (also s1.json)*"])
    other = copy.deepcopy(shard_reports["s2"])
    other["shard"].update(spec="2/4", total=4)
    other["settings"]["shard"] = "2/4"
    result = merge_run(pytester, "s1.json", write(pytester, "s2.json", other))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*s2.json: shard 2/4 is not of the split s1.json is a shard of (1/3)*"]
    )


def test_a_missing_shard_is_a_warning(pytester, shard_reports):
    names = [write(pytester, f"s{k}.json", shard_reports[f"s{k}"]) for k in (1, 3)]
    result = merge_run(pytester, *names)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["pytest-gta: warning: shard(s) 2/3 not given to --gta-merge*"])
    joined = report_of(pytester, "m.json")
    assert any("2/3 not given" in note for note in joined["notes"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "bad.json: invalid JSON at line 1*"),
        (b"\xff\xfe", "bad.json: not UTF-8 text*"),
        ("[1]", "bad.json: not a pytest-gta report*"),
        ({"schema": "other/1"}, "bad.json: not a pytest-gta report (schema 'other/1'*"),
        ("[" * 5000 + "]" * 5000, "bad.json: nested too deeply*"),
    ],
)
def test_malformed_files_are_usage_errors_naming_the_file(pytester, content, message):
    path = pytester.path / "bad.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        write(pytester, "bad.json", content)
    result = merge_run(pytester, "bad.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-gta: {message}"])


def test_missing_fields_and_files_are_named(pytester, shard_reports, monkeypatch):
    broken = copy.deepcopy(shard_reports["s1"])
    del broken["cases"][2]["primitives"]
    result = merge_run(pytester, write(pytester, "old.json", broken))
    result.stderr.fnmatch_lines(
        ["*old.json: cases[[]2].primitives is missing: *re-run that shard*"]
    )
    broken = copy.deepcopy(shard_reports["s1"])
    broken["cases"][0]["primitives"] = {"has_answer_ref": True}
    result = merge_run(pytester, write(pytester, "bad.json", broken))
    result.stderr.fnmatch_lines(["*bad.json: cases[[]0].primitives.answer is missing*"])
    result = merge_run(pytester, "nothere.json")
    result.stderr.fnmatch_lines(
        ["*nothere.json: no such file; --gta-merge reads the --gta-report*"]
    )
    monkeypatch.setattr(report_io, "MAX_REPORT_BYTES", 100)
    result = merge_run(pytester, write(pytester, "big.json", shard_reports["s1"]))
    result.stderr.fnmatch_lines(["*big.json: * bytes is larger than any report*"])


def test_the_dataset_is_found_or_named(pytester, shard_reports, tmp_path):
    moved = copy.deepcopy(shard_reports["s1"])
    moved["dataset"]["path"] = str(tmp_path / "gone")
    # the report's path is gone: the bundled sample has the same sha256
    assert merge_run(pytester, write(pytester, "s1.json", moved)).ret == 0
    copied = tmp_path / "copy"
    shutil.copytree(SAMPLE, copied)
    with (copied / "dataset.json").open("a") as fh:
        fh.write("\n")
    result = merge_run(pytester, "s1.json", extra=[f"--gta-data={copied}"])
    result.stderr.fnmatch_lines(
        ["*--gta-data=*: its dataset.json has sha256 *, the shards ran on*"]
    )
    for report in (moved,):
        report["dataset"]["sha256"] = "f" * 64
    result = merge_run(pytester, write(pytester, "s1.json", moved))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*which is not on this machine*--gta-data=DIR*"])


# -- hostile reports ----------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value[:3]):
            yield from _paths(child, (*prefix, index))


@settings(max_examples=150, deadline=None)
@given(where=st.integers(0, 10**6), replace=st.booleans(), value=JSON)
def test_a_hostile_report_is_a_usage_error_or_merges(
    shard_reports, sample_dataset, where, replace, value
):
    # One value replaced or one key removed anywhere in a real shard report.
    report = copy.deepcopy(shard_reports["s1"])
    report["cases"] = report["cases"][:3]
    paths = list(_paths(report))[1:]
    path = paths[where % len(paths)]
    holder = report
    for key in path[:-1]:
        holder = holder[key]
    if replace:
        holder[path[-1]] = value
    elif isinstance(holder, dict):
        del holder[path[-1]]
    try:
        merged = merge.merge_reports([parse_report("hostile.json", report)], sample_dataset)
    except GtaUsageError as exc:
        merged, message = None, str(exc)
    if merged is None:
        assert message.startswith("hostile.json: ")
    else:
        json.dumps(merged.to_json_value(), allow_nan=True)
