"""The fault layer's pure parts: the spec, the draw, the damage, the log, the sums (issue 41)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pytest_gta import tools
from pytest_gta.dataset import Dataset, Query
from pytest_gta.errors import GtaToolError, GtaUsageError
from pytest_gta.faults import (
    ANSWERED,
    FAULT_KINDS,
    FaultLog,
    FaultSpec,
    answered,
    corrupted,
    parse_fault_spec,
)
from pytest_gta.report.robustness import robustness_of
from pytest_gta.results.robustness import FaultEntry
from pytest_gta.tools import ToolContext, ToolInvocation, ToolSet
from pytest_gta.types import ResultItem, ToolMeta, ToolResult


def test_a_spec_reads_rates_per_tool_seed_and_delay() -> None:
    spec = parse_fault_spec("error=0.1, timeout=0.05,OCR:error=0.3,delay=0.5,seed=7")
    assert spec.rates == {"error": 0.1, "timeout": 0.05}
    assert spec.rates_for("OCR") == {"error": 0.3, "timeout": 0.05}
    assert spec.rates_for("Calculator") == {"error": 0.1, "timeout": 0.05}
    assert (spec.seed, spec.delay, spec.tools) == (7, 0.5, ("OCR",))
    assert spec.text() == "error=0.1,timeout=0.05,OCR:error=0.3,delay=0.5,seed=7"
    assert parse_fault_spec(spec.text()) == spec


def test_rates_of_zero_are_no_faults() -> None:
    assert not parse_fault_spec("error=0,seed=3").active
    assert parse_fault_spec("OCR:slow=0.01").active
    # The layer is not put in place for a spec that can fault nothing.
    assert ToolSet([], faults=parse_fault_spec("error=0")).faults is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "the spec is empty"),
        ("error", "each item is KEY=VALUE"),
        ("error=1.5", "a rate is a number from 0 to 1"),
        ("error=nan", "a rate is a number from 0 to 1"),
        ("error=-0.1", "a rate is a number from 0 to 1"),
        ("boom=0.1", "'boom' is not a kind of fault"),
        ("OCR:boom=0.1", "'boom' is not a kind of fault"),
        ("error=0.1,error=0.2", "error is given twice"),
        ("seed=-1", "the seed is an integer"),
        ("seed=99999999999999999999", "the seed is an integer"),
        ("delay=600", "the delay is seconds from 0 to 60"),
        ("error=0.6,empty=0.6", "the rates in all add up to 1.2, over 1"),
        ("error=0.5,OCR:empty=0.6", "the rates for OCR add up to 1.1, over 1"),
        ("bad tool:error=0.1", "a tool's rate is TOOL:KIND=RATE"),
    ],
)
def test_a_bad_spec_is_a_usage_error_naming_the_option(text: str, said: str) -> None:
    with pytest.raises(GtaUsageError) as caught:
        parse_fault_spec(text)
    message = str(caught.value)
    assert message.startswith("--gta-tool-faults: ")
    assert said in message
    assert "e.g. --gta-tool-faults=error=0.1,timeout=0.05,seed=7" in message


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_spec_or_a_usage_error(text: str) -> None:
    try:
        spec = parse_fault_spec(text)
    except GtaUsageError as exc:
        message = str(exc)
    else:
        assert parse_fault_spec(spec.text()) == spec
        return
    assert "--gta-tool-faults" in message
    assert len(message) < 1000  # a huge value is not echoed whole


_RATE = st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.2, 0.25])


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(FAULT_KINDS), _RATE, max_size=4),
    st.dictionaries(
        st.sampled_from(["OCR", "Calculator", "Google.Search"]),
        st.dictionaries(st.sampled_from(FAULT_KINDS), _RATE, min_size=1, max_size=3),
        max_size=2,
    ),
    st.integers(0, 2**63 - 1),
)
def test_a_written_spec_reads_back_as_itself(
    rates: dict[str, float], per_tool: dict[str, dict[str, float]], seed: int
) -> None:
    spec = FaultSpec(rates, per_tool, seed)
    assume(all(sum(spec.rates_for(t).values()) <= 1 for t in ("", *per_tool)))
    assert parse_fault_spec(spec.text()) == spec


def test_the_draw_depends_only_on_seed_query_epoch_call_and_tool() -> None:
    spec = parse_fault_spec("error=0.2,timeout=0.1,empty=0.1,corrupt=0.1,slow=0.1,seed=11")
    draws = [spec.draw("q1", 0, i, "OCR") for i in range(200)]
    # The same again, from many threads at once: no shared random state.
    again: list[Any] = [None] * 200

    def fill(start: int) -> None:
        for i in range(start, 200, 8):
            again[i] = spec.draw("q1", 0, i, "OCR")

    threads = [threading.Thread(target=fill, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert again == draws
    assert draws != [spec.draw("q1", 1, i, "OCR") for i in range(200)]  # another epoch
    assert draws != [spec.draw("q2", 0, i, "OCR") for i in range(200)]  # another query
    other_seed = parse_fault_spec("error=0.2,timeout=0.1,empty=0.1,corrupt=0.1,slow=0.1,seed=12")
    assert draws != [other_seed.draw("q1", 0, i, "OCR") for i in range(200)]


def test_the_draws_meet_their_rates() -> None:
    spec = parse_fault_spec("error=0.2,empty=0.05,OCR:error=0.5,seed=1")
    n = 20_000
    calc = [spec.draw("q", 0, i, "Calculator") for i in range(n)]
    ocr = [spec.draw("q", 0, i, "OCR") for i in range(n)]
    assert abs(calc.count("error") / n - 0.2) < 0.015
    assert abs(calc.count("empty") / n - 0.05) < 0.01
    assert abs(ocr.count("error") / n - 0.5) < 0.015
    assert {"timeout", "corrupt", "slow"}.isdisjoint(calc + ocr)
    none = parse_fault_spec("error=0,seed=1")
    assert {none.draw("q", 0, i, "OCR") for i in range(1000)} == {None}


def test_corruption_makes_a_number_wrong_or_cuts_the_text() -> None:
    numbers = ToolResult.text("total 21.08, items 7")
    damaged = [corrupted(numbers, p).items[0].content for p in (0.0, 0.9)]
    assert damaged == ["total 21.09, items 7", "total 21.08, items 8"]
    assert corrupted(ToolResult.text("a receipt from FreshMart"), 0.3).format() == "a receipt fr"
    image = ToolResult((ResultItem("image", "/out/a.png"),))
    assert corrupted(image, 0.5) == ToolResult(())
    assert corrupted(ToolResult.text("9"), 0.0).format() == "0"


def _call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A recorded call step and its tool return, as the loop records them."""
    return {
        "role": "assistant",
        "tool_calls": [{"type": "function", "function": {"name": tool, "arguments": arguments}}],
    }


def test_the_log_says_what_the_producer_did_after_each_fault() -> None:
    image = {"image": "/data/receipt.jpg"}
    log = FaultLog()
    first = log.start("OCR")
    log.hit(first, "OCR", "error", image)
    second = log.start("OCR")  # a retry
    log.hit(second, "OCR", "timeout", image)
    log.start("Calculator")  # another tool next
    third = log.start("Plot")
    log.hit(third, "Plot", "empty", {"command": "plot()"})
    tool = {"role": "tool", "content": []}
    steps = [
        _call("OCR", image),
        tool,
        _call("NoAction", {"text": ""}),  # a malformed turn: it reached no tool
        tool,
        _call("OCR", image),
        tool,
        _call("Calculator", {"expression": "1+1"}),
        tool,
        _call("Plot", {"command": "plot()"}),
        tool,
        {"role": "assistant", "content": "42"},
    ]
    assert log.finish(steps) == [
        {"call": 0, "tool": "OCR", "fault": "error", "next": "OCR", "step": 0},
        {"call": 1, "tool": "OCR", "fault": "timeout", "next": "Calculator", "step": 4},
        {"call": 3, "tool": "Plot", "fault": "empty", "next": ANSWERED, "step": 8},
    ]
    stopped = FaultLog()
    stopped.hit(stopped.start("OCR"), "OCR", "slow", image)
    # No answer at the end, and a call the steps do not hold: no step to point at.
    assert stopped.finish([_call("Calculator", {"expression": "2"}), tool]) == [
        {"call": 0, "tool": "OCR", "fault": "slow", "next": None}
    ]


def test_an_episode_ends_with_an_answer_only_on_a_final_assistant_message() -> None:
    call = {"role": "assistant", "tool_calls": [{"function": {"name": "OCR"}}]}
    assert answered([call, {"role": "tool"}, {"role": "assistant", "content": "42"}])
    assert not answered([call, {"role": "tool"}])
    assert not answered([])


def test_the_sums_count_kinds_tools_recoveries_and_retries() -> None:
    hits = [
        ([{"call": 0, "tool": "OCR", "fault": "error", "next": "OCR"}], True),
        (
            [
                {"call": 0, "tool": "OCR", "fault": "empty", "next": "Calculator"},
                {"call": 2, "tool": "Calculator", "fault": "error", "next": ANSWERED},
            ],
            False,
        ),
        ([], True),
    ]
    entries = [([FaultEntry.model_validate(h) for h in case], passed) for case, passed in hits]
    summary = robustness_of("error=0.1,seed=0", entries)
    assert summary.to_json_value() == {
        "spec": "error=0.1,seed=0",
        "calls_faulted": 3,
        "by_kind": {"error": 2, "empty": 1},
        "by_tool": {"Calculator": 1, "OCR": 2},
        "faulted_cases": 2,
        "recovered_cases": 1,
        "recovery": 0.5,
        "retried_calls": 1,
    }
    assert robustness_of("x", [([], True), (None, False)]).recovery is None


# -- the layer in ToolSet.runner: the one place every producer's calls pass -------------------


@dataclass
class _Counting:
    """A backend that answers a fixed text and counts its calls."""

    answer: str = "the receipt says 21.08"
    name: str = "counting"
    calls: list[str] = field(default_factory=list)

    def offers(self, tool: str) -> bool:
        return True

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        self.calls.append(invocation.name)
        return ToolResult.text(self.answer)


def _context(tmp_path: Path, epoch: int = 0) -> ToolContext:
    meta = ToolMeta("OCR", "", (), ())
    query = Query("7", 0, (meta,), (), ({"role": "user", "content": "?"},), None)
    dataset = Dataset(tmp_path, {"7": query}, {"OCR": meta}, "0" * 64)
    return ToolContext(dataset, query, tmp_path, epoch=epoch)


def _run_all(spec: str, tmp_path: Path, calls: int = 40) -> tuple[list[Any], _Counting, Any]:
    backend = _Counting()
    toolset = ToolSet([backend], faults=parse_fault_spec(spec))
    context = _context(tmp_path)
    meta = ToolMeta("OCR", "", (), ())
    run = toolset.runner({"OCR": toolset.backends[0]}, context)
    seen: list[Any] = []
    for _ in range(calls):
        try:
            seen.append(run(meta, {}, {}).format())
        except GtaToolError as exc:
            seen.append(f"error: {exc}")
    return seen, backend, context.faults.finish([])


def test_each_kind_reads_as_a_real_failure_and_only_the_report_knows(tmp_path: Path) -> None:
    seen, backend, hits = _run_all(
        "error=0.2,timeout=0.2,empty=0.2,corrupt=0.2,slow=0.1,delay=0.001,seed=5", tmp_path
    )
    by_call = {h["call"]: h["fault"] for h in hits}
    assert set(by_call.values()) == set(FAULT_KINDS)
    for index, fault in by_call.items():
        said = seen[index]
        if fault == "error":
            assert said == "error: OCR failed: HTTPError: 503 Server Error: Service Unavailable"
        elif fault == "timeout":
            assert said.startswith("error: OCR failed: ReadTimeout:")
        elif fault == "empty":
            assert said == ""
        elif fault == "corrupt":
            assert said in ("the receipt says 21.09",)
        else:
            assert said == "the receipt says 21.08"
    for said in seen:
        assert "inject" not in said.lower()
        assert "fault" not in said.lower()
    # error, timeout and empty never reach the backend; corrupt and slow do.
    untouched = sum(f in ("error", "timeout", "empty") for f in by_call.values())
    assert len(backend.calls) == len(seen) - untouched
    assert [s for i, s in enumerate(seen) if i not in by_call] == ["the receipt says 21.08"] * (
        len(seen) - len(by_call)
    )


def test_a_slow_call_is_held_back_then_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(tools.time, "sleep", slept.append)
    seen, _, hits = _run_all("slow=1,delay=0.05,seed=0", tmp_path, calls=3)
    assert slept == [0.05, 0.05, 0.05]
    assert seen == ["the receipt says 21.08"] * 3
    assert [h["fault"] for h in hits] == ["slow"] * 3


def test_the_same_calls_meet_the_same_faults_again(tmp_path: Path) -> None:
    spec = "error=0.3,empty=0.2,seed=9"
    assert _run_all(spec, tmp_path)[2] == _run_all(spec, tmp_path)[2]
    assert _run_all(spec, tmp_path)[2] != _run_all("error=0.3,empty=0.2,seed=10", tmp_path)[2]
