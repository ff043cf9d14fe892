"""Scoring: iscorrect, simscore, per-case primitives and the official aggregation formulas.

Expected values are derived by hand from SPEC section 5 in the comments next to them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gta.scoring.aggregate import aggregate_e2e, aggregate_step, f1
from pytest_gta.scoring.answer import iscorrect
from pytest_gta.scoring.metrics import (
    E2ECaseScore,
    Score,
    StepCaseScore,
    imggen_score,
    score_e2e_case,
    score_step_case,
    unanswered_e2e_case,
    unanswered_step_case,
)
from pytest_gta.scoring.similarity import simscore
from pytest_gta.scoring.verdict import judge_e2e, judge_step


class FakeSimilarity:
    """Hand-chosen similarities; unknown pairs are 0.1."""

    def __init__(self, table: dict[tuple[str, str], float] | None = None) -> None:
        self.table = table or {}
        self.calls: list[tuple[str, str]] = []

    def sim(self, a: str, b: str) -> np.float32:
        self.calls.append((a, b))
        return np.float32(self.table.get((a, b), 0.1))


def call(name, args, error=None):
    step = {"role": "assistant"}
    if error:
        step["error"] = {"type": error, "msg": "boom"}
    step["tool_calls"] = [{"type": "function", "function": {"name": name, "arguments": args}}]
    return step


def answer(text):
    return {"role": "assistant", "content": text}


def ret(content="ok"):
    return {
        "role": "tool",
        "content": None if content is None else [{"type": "text", "content": content}],
    }


def gold_tool(name, content="ok"):
    return {"role": "tool", "name": name, "content": {"type": "text", "content": content}}


OBJ = {"whitelist": [["2", "two"]], "blacklist": None}


# ---------------------------------------------------------------------------------------------
# iscorrect: the official regex, \b quirks included


@pytest.mark.parametrize(
    ("pred", "ref", "expected"),
    [
        ("You need 2 boxes.", OBJ, True),
        ("You need TWO boxes.", OBJ, True),
        ("You need 22 boxes.", OBJ, False),
        ("It costs $5.", {"whitelist": [["$5"]], "blacklist": None}, False),  # \b before $
        ("It costs US$5.", {"whitelist": [["$5"]], "blacklist": None}, True),
        ("About 3.5 kg", {"whitelist": [["3"]], "blacklist": None}, True),  # 3 inside 3.5
        ("Paris and Rome", {"whitelist": [["Paris"], ["Rome"]], "blacklist": []}, True),
        ("Paris only", {"whitelist": [["Paris"], ["Rome"]], "blacklist": []}, False),
        ("Eiffel Tower", {"whitelist": [["Eiffel"]], "blacklist": [["Louvre"], ["Arc"]]}, True),
        (
            "Eiffel, not the arc",
            {"whitelist": [["Eiffel"]], "blacklist": [["Louvre"], ["Arc"]]},
            False,
        ),
        ("9 balls", {"whitelist": [["9"]], "blacklist": [[]]}, False),  # empty group matches
    ],
    ids=[
        "alias",
        "case-insensitive",
        "word-boundary",
        "dollar-never",
        "dollar-after-word",
        "three-in-3.5",
        "two-groups",
        "missing-group",
        "blacklist-miss",
        "blacklist-hit",
        "empty-blacklist-group",
    ],
)
def test_iscorrect(pred, ref, expected):
    assert iscorrect(pred, ref) is expected


def test_simscore_keeps_integer_zero_and_first_strict_maximum():
    sim = FakeSimilarity({("p", "a"): 0.0, ("p", "b"): 0.0})
    result = simscore(sim, "p", ["a", "b"])
    assert result == 0
    assert type(result) is int
    sim = FakeSimilarity({("p", "a"): 0.5, ("p", "b"): 0.75, ("p", "c"): 0.75})
    result = simscore(sim, "p", ["a", "b", "c"])
    assert isinstance(result, np.float32)
    assert result == np.float32(0.75)


def test_score_roundtrip_preserves_official_scalar_types():
    for native, kind in [(True, "bool"), (0, "int"), (np.float32(0.1), "f32")]:
        score = Score.of(native)
        assert score.kind == kind
        back = Score.from_json(json.loads(json.dumps(score.to_json())))
        assert type(back.native()) is type(native)
        assert back.native() == native


# ---------------------------------------------------------------------------------------------
# Step-by-step mode


def step_cases(sim):
    # A: objective. OCR right; Calculator right name, wrong args; answer correct.
    a_gold = [
        call("OCR", {"image": "/d/a.jpg"}),
        call("Calculator", {"expression": "1+1"}),
        answer("2"),
    ]
    a_pred = [
        call("OCR", {"image": "/d/a.jpg"}),
        call("Calculator", {"expression": "2"}),
        answer(" 2"),
    ]
    # B: subjective. InvalidAction instead of OCR; answer with similarity 0.5.
    b_gold = [call("OCR", {"image": "/d/b.jpg"}), answer("ref")]
    b_pred = [call("InvalidAction", {"text": "x"}, "API_ERROR"), answer("guess")]
    # C: image generation. DrawBox with an argument error; the answer step still matches type.
    c_gold = [call("DrawBox", {"image": "/d/c.jpg", "bbox": "(1, 2, 3, 4)"}), answer("saved")]
    c_pred = [call("DrawBox", '{"image": oops}', "ARGS_ERROR"), answer("done")]
    return [
        score_step_case(a_pred, a_gold, OBJ, sim),
        score_step_case(b_pred, b_gold, ["r1", "r2", "r3"], sim),
        score_step_case(c_pred, c_gold, None, sim),
    ]


def test_step_metrics_by_hand():
    sim = FakeSimilarity({("guess", "r1"): 0.5})
    metrics = aggregate_step(step_cases(sim))
    # denominators: 4 reference tool steps, 2 queries with an answer (A, B)
    # InstAcc: A 3 + B 1 (answer) + C 1 (answer; counted though C has no gt_answer) = 5 / 6
    assert metrics["inst_acc"] == pytest.approx(5 / 6 * 100)
    # ToolAcc: A OCR, A Calculator, C DrawBox (error allowed) = 3 / 4
    assert metrics["tool_acc"] == 75.0
    # ArgAcc: only A's OCR; the errored call's arguments are the raw string = 1 / 4
    assert metrics["arg_acc"] == 25.0
    # SummAcc: True + float32(0.5) over 2 answer queries
    assert metrics["summ_acc"] == 75.0
    assert isinstance(metrics["summ_acc"], float)
    assert metrics["tool_call"] == 4
    assert metrics["tool_call_error"] == 2


def test_inst_acc_exceeds_100_for_a_perfect_model_with_image_queries():
    gold = [call("DrawBox", {"image": "x"}), answer("saved")]
    cases = [score_step_case(gold, gold, None, None)]
    # 2 matching steps over (1 tool step + 0 answer queries)
    assert aggregate_step(cases)["inst_acc"] == 200.0


def test_step_zero_denominators_are_undefined():
    assert aggregate_step([])["tool_acc"] is None
    assert aggregate_step([])["summ_acc"] is None


def test_step_summary_accumulates_in_float32_like_the_official_loop():
    # numpy scalar rules: int 0 + bool -> int; + float32 -> float32; the quotient stays float32
    sim = FakeSimilarity({("p", "r"): 0.1})
    cases = [
        score_step_case([answer("p")], [answer("x")], ["r"], sim),
        score_step_case([answer("2")], [answer("2")], OBJ, sim),
        score_step_case([answer("p")], [answer("x")], ["r"], sim),
    ]
    expected = (0 + np.float32(0.1) + True + np.float32(0.1)) / 3 * 100
    assert isinstance(expected, np.float32)
    assert aggregate_step(cases)["summ_acc"] == float(expected)


def test_step_transport_roundtrip_is_exact():
    sim = FakeSimilarity({("guess", "r1"): 0.3})
    cases = step_cases(sim)
    moved = [StepCaseScore.from_json(json.loads(json.dumps(c.to_json()))) for c in cases]
    assert aggregate_step(moved) == aggregate_step(cases)


def test_unanswered_step_case_counts_in_denominators_only():
    gold = [call("OCR", {"image": "a"}), answer("2")]
    metrics = aggregate_step([unanswered_step_case(gold, OBJ)])
    assert metrics == {
        "inst_acc": 0.0,
        "tool_acc": 0.0,
        "arg_acc": 0.0,
        "summ_acc": 0.0,
        "tool_call": 0,
        "tool_call_error": 0,
    }


def test_step_zip_truncates_like_the_official_evaluator():
    gold = [call("OCR", {"image": "a"}), answer("2")]
    scored = score_step_case([call("OCR", {"image": "a"})], gold, OBJ, None)
    assert len(scored.steps) == 1


# ---------------------------------------------------------------------------------------------
# End-to-end mode


def e2e_cases(sim):
    draw = {"image": "/d/c.jpg", "bbox": "(1, 2, 3, 4)"}
    text = {"image": "/d/c.jpg", "text": "hi", "position": "mm"}
    return [
        # A objective: OCR ok, Calculator args error then ok, answer " 2" (correct)
        score_e2e_case(
            [
                call("OCR", {"image": "/d/a.jpg"}),
                ret(),
                call("Calculator", "1 +", "ARGS_ERROR"),
                ret(None),
                call("Calculator", {"expression": "1+1"}),
                ret("2"),
                answer(" 2"),
            ],
            [
                call("OCR", {"image": "a"}),
                gold_tool("OCR"),
                call("Calculator", {"expression": "1+1"}),
                gold_tool("Calculator"),
                answer("2"),
            ],
            OBJ,
            sim,
        ),
        # B subjective: NoAction, then an answer with similarity 0.25
        score_e2e_case(
            [call("NoAction", {"text": ""}, "API_ERROR"), ret(None), answer("hello")],
            [call("ImageDescription", {"image": "b"}), gold_tool("ImageDescription"), answer("r")],
            ["r1"],
            sim,
        ),
        # C image: DrawBox (sim 0.5) and AddText (sim 0.8): factor 0.4
        score_e2e_case(
            [call("DrawBox", draw), ret(), call("AddText", text), ret(), answer("done")],
            [
                call("DrawBox", draw),
                gold_tool("DrawBox"),
                call("AddText", text),
                gold_tool("AddText"),
                answer("saved"),
            ],
            None,
            sim,
        ),
        # D image without any image tool in the reference: factor stays 1 (quirk)
        score_e2e_case([], [call("OCR", {"image": "d"}), gold_tool("OCR"), answer("x")], None, sim),
        # E image whose DrawBox was never called: factor 0
        score_e2e_case(
            [call("OCR", {"image": "e"}), ret(), answer("x")],
            [call("DrawBox", draw), gold_tool("DrawBox"), answer("x")],
            None,
            sim,
        ),
    ]


def e2e_sim():
    draw = json.dumps({"image": "/d/c.jpg", "bbox": "(1, 2, 3, 4)"})
    text = json.dumps({"image": "/d/c.jpg", "text": "hi", "position": "mm"})
    return FakeSimilarity({("hello", "r1"): 0.25, (draw, draw): 0.5, (text, text): 0.8})


def test_e2e_metrics_by_hand():
    metrics = aggregate_e2e(e2e_cases(e2e_sim()))
    # AnsAcc: (True + 0.25) / 2 answer queries
    assert metrics["ans_acc"] == pytest.approx(62.5, abs=1e-5)
    # Ans+I: (1 + 0.25 + 0.4 + 1 + 0) / 5 queries
    assert metrics["ans_acc_img"] == pytest.approx(2.65 / 5 * 100, abs=1e-4)
    # perception: reference OCR (A, D) + ImageDescription (B) = 3; predicted OCR (A, E) = 2;
    # hits: A's OCR = 1
    p, r = 1 / (2 + 1e-5), 1 / 3
    assert metrics["p_f1"] == pytest.approx(2 * p * r / (p + r + 1e-5) * 100, rel=1e-12)
    # logic: reference Calculator (A) = 1; predicted Calculator x2 (the errored one counts); hit 1
    p, r = 1 / (2 + 1e-5), 1.0
    assert metrics["l_f1"] == pytest.approx(2 * p * r / (p + r + 1e-5) * 100, rel=1e-12)
    # operation: reference DrawBox, AddText (C) + DrawBox (E) = 3; predicted 2; hits 2
    p, r = 2 / (2 + 1e-5), 2 / 3
    assert metrics["o_f1"] == pytest.approx(2 * p * r / (p + r + 1e-5) * 100, rel=1e-12)
    assert metrics["c_f1"] == 0.0  # no creativity reference calls
    # calls: A 3, B 1 (NoAction), C 2, E 1; NoAction and the ARGS_ERROR are the errors
    assert metrics["tool_call"] == 7
    assert metrics["tool_call_error"] == 2


def test_e2e_error_kinds_follow_table5_mapping():
    a, b = e2e_cases(e2e_sim())[:2]
    assert a.errors == {"format": 0, "args": 1, "other": 0}
    assert b.errors == {"format": 1, "args": 0, "other": 0}
    other = score_e2e_case([call("OCR", {"image": "x"}, "API_ERROR"), ret(None)], [], OBJ, None)
    assert other.errors == {"format": 0, "args": 0, "other": 1}


def test_f1_precision_can_exceed_one():
    # two reference Calculator calls, one predicted: both are hits
    scored = score_e2e_case(
        [call("Calculator", {"expression": "1"}), ret(), answer("2")],
        [
            call("Calculator", {"expression": "1"}),
            gold_tool("Calculator"),
            call("Calculator", {"expression": "2"}),
            gold_tool("Calculator"),
            answer("2"),
        ],
        OBJ,
        None,
    )
    assert scored.hits["logic"] == 2
    assert scored.predicted["logic"] == 1
    p, r = 2 / (1 + 1e-5), 1.0
    assert p > 1
    assert f1(2, 1, 2) == pytest.approx(2 * p * r / (p + r + 1e-5) * 100)


def test_imggen_uses_last_error_free_call_and_json_text_reference_first():
    sim = FakeSimilarity()
    first = {"image": "a", "bbox": "(0, 0, 1, 1)"}
    last = {"image": "a", "bbox": "(5, 5, 6, 6)"}
    preds = [
        call("DrawBox", first),
        ret(),
        call("DrawBox", last),
        ret(),
        call("DrawBox", {"image": "bad"}, "API_ERROR"),
        ret(None),
    ]
    ref = {"image": "a", "bbox": "(5, 5, 6, 6)"}
    imggen_score(preds, [call("DrawBox", ref)], sim)
    assert sim.calls == [(json.dumps(ref), json.dumps(last))]


def test_e2e_answer_needs_last_step_to_be_a_non_empty_answer():
    gold = [call("OCR", {"image": "a"}), gold_tool("OCR"), answer("2")]
    ends_on_tool = score_e2e_case([call("OCR", {"image": "a"}), ret("2")], gold, OBJ, None)
    empty = score_e2e_case([answer("")], gold, OBJ, None)
    thought_last = score_e2e_case(
        [{"role": "assistant", "content": "the answer is 2", "meta": {"type": "thought"}}],
        gold,
        OBJ,
        None,
    )
    assert ends_on_tool.answer is None
    assert empty.answer is None
    assert thought_last.answer == Score("bool", 1.0)  # any assistant content counts, as official


def test_unanswered_e2e_case_is_wrong_even_for_a_chain_without_image_tools():
    gold = [call("OCR", {"image": "d"}), gold_tool("OCR"), answer("x")]
    scored = unanswered_e2e_case(gold, None)
    assert scored.imggen == Score("int", 0.0)
    assert scored.reference["perception"] == 1
    assert aggregate_e2e([scored])["ans_acc_img"] == 0.0


def test_e2e_transport_roundtrip_is_exact():
    cases = e2e_cases(e2e_sim())
    moved = [E2ECaseScore.from_json(json.loads(json.dumps(c.to_json()))) for c in cases]
    assert aggregate_e2e(moved) == aggregate_e2e(cases)


# ---------------------------------------------------------------------------------------------
# Verdicts


def test_step_verdict_names_first_diverging_step():
    sim = FakeSimilarity({("guess", "r1"): 0.5})
    a = step_cases(sim)[0]
    gold = [
        call("OCR", {"image": "/d/a.jpg"}),
        call("Calculator", {"expression": "1+1"}),
        answer("2"),
    ]
    pred = [
        call("OCR", {"image": "/d/a.jpg"}),
        call("Calculator", {"expression": "2"}),
        answer(" 2"),
    ]
    verdict = judge_step(pred, gold, OBJ, a, 0.5)
    assert not verdict.passed
    assert verdict.message.startswith("step 2/3: arguments differ")
    assert '"expression": "1+1"' in verdict.message
    assert '"expression": "2"' in verdict.message
    assert verdict.score == pytest.approx(2 / 3)
    perfect = score_step_case(gold, gold, OBJ, None)
    assert judge_step(gold, gold, OBJ, perfect, 0.5).passed


def test_e2e_verdicts():
    sim = e2e_sim()
    a, b, c, _, e = e2e_cases(sim)
    assert judge_e2e([answer(" 2")], [], OBJ, a, 0.5).passed
    failed = judge_e2e([answer("hello")], [], ["r1"], b, 0.5)
    assert not failed.passed
    assert "0.250 < --gta-sim-threshold 0.5" in failed.message
    assert judge_e2e([answer("hello")], [], ["r1"], b, 0.2).passed
    assert judge_e2e([], [], None, c, 0.5).passed  # factor 0.4 > 0
    draw = call("DrawBox", {"image": "/d/c.jpg", "bbox": "(1, 2, 3, 4)"})
    missing = judge_e2e([call("OCR", {"image": "e"}), ret(), answer("x")], [draw], None, e, 0.5)
    assert not missing.passed
    assert "DrawBox was never called without error" in missing.message
    wrong = score_e2e_case([answer("three")], [], OBJ, None)
    message = judge_e2e([answer("three")], [], OBJ, wrong, 0.5).message
    assert "expected the answer to mention one of ['2', 'two']" in message


# ---------------------------------------------------------------------------------------------
# Differential check: per-case primitives + aggregation == the SPEC's formulas applied directly


def direct_step(records, sim):
    """SPEC section 5 step formulas, written straight from the text over raw records."""
    total_tool = total_answer = inst = tool = arg = calls = errors = 0
    summ = 0
    for preds, golds, ref in records:
        if ref:
            total_answer += 1
        for pred, gt in zip(preds, golds, strict=False):
            p_type = "tool" if "tool_calls" in pred else "answer"
            g_type = "tool" if "tool_calls" in gt else "answer"
            if p_type == g_type and "error" not in pred:
                inst += 1
            total_tool += g_type == "tool"
            if p_type == "tool":
                calls += 1
                errors += "error" in pred
            if p_type == g_type == "tool":
                pf, gf = pred["tool_calls"][0]["function"], gt["tool_calls"][0]["function"]
                if pf["name"] == gf["name"]:
                    tool += 1
                    arg += pf["arguments"] == gf["arguments"]
            elif p_type == g_type == "answer":
                if isinstance(ref, dict):
                    summ += iscorrect(pred["content"], ref)
                elif isinstance(ref, list):
                    summ += simscore(sim, pred["content"], ref)
    pct = lambda n, d: float(n / d * 100) if d else None  # noqa: E731
    return {
        "inst_acc": pct(inst, total_tool + total_answer),
        "tool_acc": pct(tool, total_tool),
        "arg_acc": pct(arg, total_tool),
        "summ_acc": pct(summ, total_answer),
        "tool_call": calls,
        "tool_call_error": errors,
    }


class HashSimilarity:
    def sim(self, a: str, b: str) -> np.float32:
        return np.float32(max(0, (hash((a, b)) % 2000) / 1000 - 0.5))


names = st.sampled_from(["OCR", "Calculator", "DrawBox", "NoAction"])
arguments = st.sampled_from([{"x": 1}, {"x": 2}, "raw"])
texts = st.sampled_from(["2", "two", "22", "none", "a b"])
pred_steps = st.one_of(
    st.builds(
        lambda n, a, e: call(n, a, e),
        names,
        arguments,
        st.sampled_from([None, "ARGS_ERROR", "API_ERROR"]),
    ),
    st.builds(answer, texts),
)
refs = st.sampled_from([OBJ, ["two", "a b"], None, {"whitelist": [["a"]], "blacklist": [["b"]]}])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(pred_steps, max_size=4), st.lists(pred_steps, min_size=1, max_size=4), refs
        ),
        max_size=6,
    )
)
def test_step_aggregation_matches_direct_formulas(records):
    sim = HashSimilarity()
    ours = aggregate_step(
        [StepCaseScore.from_json(score_step_case(p, g, r, sim).to_json()) for p, g, r in records]
    )
    assert ours == direct_step(records, sim)
