"""Dataset quirks (pytest_gta.quirks): named once, scored as the official pipeline scores them.

The release's shapes are made here on copies of the sample (the real release is tested in
tests/test_release.py); each test says which release queries have the shape.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.errors import DatasetError
from pytest_gta.models.oracle import CLOSING_ANSWER, OracleModel
from pytest_gta.quirks import (
    KINDS,
    WEAK_SUBJECTIVE,
    FailedReplay,
    explain_replay_failures,
    find_quirks,
    kind_of,
    replay_failure_notes,
    summarize,
    summary_lines,
)
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import CaseContext, ModelRequest
from pytest_gta.validation import load_dataset
from tests.helpers.gta_run import FAST_SIM
from tool_backends.replay import ReplayBackend


def copy_sample(sample_root: Path, target: Path, change) -> Path:
    shutil.copytree(sample_root, target)
    path = target / "dataset.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return target


def _no_answer(data: dict[str, Any]) -> None:
    # Release 12, 44-49, 157, 166, 175, 176: an image query ends on its generated image.
    data["10"]["dialogs"].pop()


def _unanswered_draw(data: dict[str, Any]) -> None:
    # Release 34/35's shape, with a valid call: the last DrawBox carries text, nothing replied.
    dialogs = data["11"]["dialogs"]
    del dialogs[-2:]
    dialogs[-1]["content"] = "The two mugs are boxed."


def _foreign_output(data: dict[str, Any]) -> None:
    # Release 118: reference image outputs are paths on the authors' machine.
    for message in data["11"]["dialogs"]:
        if message["role"] == "tool" and message["content"]["type"] == "image":
            message["content"]["content"] = "C:\\Users\\someone\\generated\\image\\x.png"


def test_kinds_have_distinct_keys_and_can_be_looked_up() -> None:
    assert len({k.key for k in KINDS}) == len(KINDS)
    assert all(kind_of(k.key) is k for k in KINDS)
    assert kind_of("nonsense") is None


def test_summary_names_each_kind_once_in_order(sample_root, tmp_path) -> None:
    def change(data: dict[str, Any]) -> None:
        _no_answer(data)
        _unanswered_draw(data)

    dataset = load_dataset(copy_sample(sample_root, tmp_path / "d", change))
    # (queries 13-16 of the sample carry quirks of their own)
    summary = summarize(find_quirks(dataset, [dataset["10"], dataset["11"]]))
    assert [e["kind"] for e in summary] == ["no_final_answer", "unanswered_call", "call_with_text"]
    assert summary[0]["queries"] == ["10", "11"]
    assert summary[0]["details"] == ["10: ends on a tool's output", "11: ends on a call"]
    assert summary[0]["replay_fails"] == {}
    assert summary_lines(summary) == [
        "reference chain ends without a final answer: 2 queries (10, 11)",
        "reference call with no tool reply: 1 query (11)",
        "reference call carrying text: 1 query (11)",
    ]
    assert summary_lines(summary, shown=1)[0].endswith("(10, ... (1 more))")


def test_the_sample_has_no_replay_failing_quirk(sample_dataset) -> None:
    # The oracle self-check on the sample passes every case: no quirk it meets sinks a replay.
    assert all(not quirk.fails for quirk in find_quirks(sample_dataset))


def test_failures_are_put_down_to_quirks_or_to_the_harness(sample_root, tmp_path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["0"]["dialogs"][1]["tool_calls"][0]["function"]["arguments"]["extra"] = 1

    dataset = load_dataset(copy_sample(sample_root, tmp_path / "d", change))
    failed = [
        ("step-0", "0", "step", None),  # the rejected reference call
        ("e2e-0", "0", "e2e", None),  # a text answer survives a rejected call: not explained
        ("step-7", "7", "step", 0.31),  # subjective, below the threshold
        ("e2e-8", "8", "e2e", 0.93),  # subjective, above: not explained
        ("e2e-404", "404", "e2e", None),  # not in the dataset: ignored
    ]
    explained = explain_replay_failures(dataset, failed, threshold=0.5)
    assert [(f.case_id, f.kind.key if f.kind else None) for f in explained] == [
        ("step-0", "rejected_call"),
        ("e2e-0", None),
        ("step-7", WEAK_SUBJECTIVE.key),
        ("e2e-8", None),
    ]
    notes = replay_failure_notes(explained, "oracle")
    assert notes == [
        "oracle: 1 case(s) cannot pass on this data, a dataset quirk (reference call the "
        "official parser rejects; see docs/dataset.md): step-0",
        "oracle: 1 case(s) cannot pass on this data, a dataset quirk (reference answer below "
        "the similarity threshold; see docs/dataset.md): step-7",
        "oracle: 2 failed case(s) that no dataset quirk explains, which points at the harness "
        "(please report it): e2e-0, e2e-8",
    ]
    assert replay_failure_notes([FailedReplay("step-1", "1", "step", WEAK_SUBJECTIVE)], "m")


def test_rejected_image_call_sinks_the_image_query_end_to_end_only_without_a_good_call(
    sample_root, tmp_path
) -> None:
    # Release 34/35: DrawBox without its image; Ans+I needs an error-free DrawBox call.
    def one_bad(data: dict[str, Any]) -> None:
        data["11"]["dialogs"][3]["tool_calls"][0]["function"]["arguments"].pop("image")

    def both_bad(data: dict[str, Any]) -> None:
        one_bad(data)
        data["11"]["dialogs"][5]["tool_calls"][0]["function"]["arguments"].pop("image")

    one = load_dataset(copy_sample(sample_root, tmp_path / "one", one_bad))
    both = load_dataset(copy_sample(sample_root, tmp_path / "both", both_bad))
    assert {q.fails for q in find_quirks(one, [one["11"]])} == {("step",)}
    assert {q.fails for q in find_quirks(both, [both["11"]])} == {("step", "e2e")}


# --------------------------------------------------------------------------------------------
# Replay and the oracle on the shapes


def _replay(dataset, qid: str, call_index: int, tmp_path: Path):
    query = dataset[qid]
    call = query.calls[call_index]
    meta = dataset.toolmeta[call.name]
    arguments = {k: dataset.absolutize(v) for k, v in dict(call.arguments).items()}
    invocation = ToolInvocation(meta, arguments, arguments)
    return ReplayBackend().call(invocation, ToolContext(dataset, query, tmp_path / "out"))


def test_replay_answers_an_unanswered_image_call_with_the_placeholder(sample_root, tmp_path):
    dataset = load_dataset(copy_sample(sample_root, tmp_path / "d", _unanswered_draw))
    [item] = _replay(dataset, "11", -1, tmp_path).items
    assert (item.type, item.content) == (
        "image",
        str(dataset.root / "image" / "dummy_generated_image.jpg"),
    )


def test_replay_answers_an_unanswered_text_call_as_the_official_dummy_tool(sample_root, tmp_path):
    def change(data: dict[str, Any]) -> None:
        del data["0"]["dialogs"][2]  # OCR's output: the Calculator call follows directly

    dataset = load_dataset(copy_sample(sample_root, tmp_path / "d", change))
    # Not the next message (the Calculator call): the official DummyTool's answer.
    assert _replay(dataset, "0", 0, tmp_path).format() == "Dummy Result"


def test_replay_serves_the_placeholder_for_a_foreign_output(sample_root, tmp_path):
    dataset = load_dataset(copy_sample(sample_root, tmp_path / "d", _foreign_output))
    [item] = _replay(dataset, "11", 1, tmp_path).items
    assert item.content == str(dataset.root / "image" / "dummy_generated_image.jpg")
    quirks = find_quirks(dataset, [dataset["11"]])
    assert [q.kind.key for q in quirks] == ["foreign_output", "foreign_output"]


def _e2e_turns(dataset, qid: str, turns: int) -> list[str]:
    oracle = OracleModel(dataset)
    return [
        oracle.generate(
            ModelRequest((), (), CaseContext(qid, "e2e", turn, 0), "react")
        ).text.splitlines()[-1]
        for turn in range(turns)
    ]


def test_the_oracle_closes_a_chain_without_an_answer(sample_root, tmp_path):
    def change(data: dict[str, Any]) -> None:
        _no_answer(data)
        _unanswered_draw(data)

    dataset = load_dataset(copy_sample(sample_root, tmp_path / "d", change))
    # 10: OCR, Plot, AddText, then (no answer in the chain) the closing answer, once.
    turns = _e2e_turns(dataset, "10", 5)
    assert [t.split(":")[0] for t in turns[:3]] == ["Action Input"] * 3
    assert turns[3:] == [f"Final Answer: {CLOSING_ANSWER}"] * 2
    # 11 ends on a call carrying text: that text closes the episode.
    assert _e2e_turns(dataset, "11", 4)[-1] == "Final Answer: The two mugs are boxed."
    # A chain with its answer repeats it past the end (the loop ends at the first answer).
    assert _e2e_turns(dataset, "0", 4)[2:] == [_e2e_turns(dataset, "0", 3)[-1]] * 2


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
def test_the_oracle_passes_the_replayable_shapes_in_both_modes(
    pytester: pytest.Pytester, sample_root, tmp_path
):
    def change(data: dict[str, Any]) -> None:
        _no_answer(data)
        _unanswered_draw(data)
        _foreign_output(data)

    root = copy_sample(sample_root, tmp_path / "d", change)
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest(
        f"--gta-data={root}",
        "--gta-model=oracle",
        "--gta-mode=step,e2e",
        "--gta-ids=10,11",
        "--gta-report=gta.json",
        FAST_SIM,
    )
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "dataset quirk: reference chain ends without a final answer: 2 queries (10, 11)",
            "dataset quirk: reference call with no tool reply: 1 query (11)",
            "dataset quirk: reference call carrying text: 1 query (11)",
            "dataset quirk: reference image output names no file of the dataset: 1 query (11)",
        ]
    )
    report = json.loads((pytester.path / "gta.json").read_text())
    assert [e["kind"] for e in report["dataset"]["quirks"]] == [
        "no_final_answer",
        "unanswered_call",
        "call_with_text",
        "foreign_output",
    ]
    steps = {c["id"]: c["primitives"]["steps"] for c in report["cases"] if c["mode"] == "step"}
    # No summary step where the chain has no answer: the calls alone are scored.
    assert [s["gt_type"] for s in steps["step-10"]] == ["tool", "tool", "tool"]
    assert [s["gt_type"] for s in steps["step-11"]] == ["tool", "tool", "tool"]
    e2e = {c["id"]: c for c in report["cases"] if c["mode"] == "e2e"}
    assert e2e["e2e-10"]["steps"][-1] == {"role": "assistant", "content": f" {CLOSING_ANSWER}"}
    assert report["tool_calls"]["e2e"] == {"successful": 6, "failed": 0}
    assert not [n for n in report["notes"] if n.startswith("oracle:")]


def test_quirks_of_a_selection_only(pytester: pytest.Pytester, sample_root, tmp_path):
    root = copy_sample(sample_root, tmp_path / "d", _no_answer)
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest(
        f"--gta-data={root}", "--gta-model=oracle", "--gta-mode=step", "--gta-ids=0",
        "--gta-report=gta.json", FAST_SIM,
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    assert "dataset quirk" not in result.stdout.str()
    assert json.loads((pytester.path / "gta.json").read_text())["dataset"]["quirks"] == []


# --------------------------------------------------------------------------------------------
# Hostile reference arguments: a usage error or named quirks, never a traceback

JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
ARGUMENTS = (
    st.dictionaries(
        st.sampled_from(["image", "text", "bbox", "", "\ud800"]), JSON_VALUES, max_size=4
    )
    | st.text(max_size=60)
    | JSON_VALUES
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(arguments=ARGUMENTS, drop_tail=st.integers(min_value=0, max_value=5))
def test_any_reference_arguments_load_as_quirks_or_are_refused(
    sample_root, tmp_path_factory, arguments, drop_tail
):
    def change(data: dict[str, Any]) -> None:
        dialogs = data["2"]["dialogs"]
        dialogs[1]["tool_calls"][0]["function"]["arguments"] = arguments
        if drop_tail:
            del dialogs[-drop_tail:]

    root = tmp_path_factory.mktemp("hostile") / "d"
    try:
        raw = json.dumps(arguments)
    except (ValueError, UnicodeEncodeError):  # pragma: no cover - all strategies are JSON
        return
    assert raw
    copy_sample(sample_root, root, change)
    try:
        dataset = load_dataset(root)
    except DatasetError as exc:
        refused = str(exc)
    else:
        refused = ""
    if refused:
        assert "query '2'" in refused
        return
    quirks = find_quirks(dataset)
    summary = summarize(quirks)
    assert all(isinstance(line, str) for line in summary_lines(summary))
    json.dumps(summary)
