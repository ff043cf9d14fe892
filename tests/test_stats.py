"""Statistics for regression gates: every number checked against an independent computation.

The reference computations are the official aggregation (``aggregate_step``/``aggregate_e2e``)
replayed over resampled lists of case scores, brute-force enumeration of swap patterns,
``scipy.stats.permutation_test`` and ``scipy.stats.binomtest``; the simulations check that
the intervals cover a known truth and the one-sided test keeps its level.
"""

from __future__ import annotations

import itertools
import math
import zlib
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats as scipy_stats

from pytest_gta.report import stats as stats_module
from pytest_gta.report.stats import (
    CI_METRICS,
    DEFAULT_SAMPLES,
    SEED,
    PairedTest,
    bootstrap_ci,
    components,
    mcnemar,
    metrics_of,
    paired_bootstrap_ci,
    permutation_test,
    query_matrix,
)
from pytest_gta.scoring.aggregate import aggregate_e2e, aggregate_step
from pytest_gta.scoring.metrics import (
    E2ECaseScore,
    Score,
    StepCaseScore,
    StepOutcome,
    score_e2e_case,
    score_step_case,
    unanswered_step_case,
)
from pytest_gta.scoring.verdict import judge_e2e, judge_step
from pytest_gta.vocabulary import CATEGORY_NAMES, ERROR_KINDS

AGGREGATE = {"step": aggregate_step, "e2e": aggregate_e2e}
WIDTH = {"step": 9, "e2e": 17}


class HashSimilarity:
    """A cheap deterministic stand-in for the sentence model: float32 like the real one."""

    def sim(self, a: str, b: str) -> np.float32:
        if a == b:
            return np.float32(1.0)
        return np.float32((zlib.crc32(f"{a}\x00{b}".encode()) % 997) / 997)


def official(mode: str, cases: list[tuple[Any, float]]) -> dict[str, Any]:
    """The official metrics of (score, passed) pairs plus the pass rate, as reports hold them."""
    out = dict(AGGREGATE[mode]([score for score, _ in cases]))
    out["pass_rate"] = 100 * sum(p for _, p in cases) / len(cases) if cases else None
    return out


def has_f32(cases: list[tuple[Any, float]]) -> bool:
    def kinds(score: Any) -> list[str]:
        if isinstance(score, StepCaseScore):
            return [s.answer.kind for s in score.steps if s.answer is not None]
        return [x.kind for x in (score.answer, score.imggen) if x is not None]

    return any(k == "f32" for score, _ in cases for k in kinds(score))


def tolerance(expected: float, cases: list[tuple[Any, float]]) -> float:
    """1e-6 points, plus the float32 rounding of the official loop where it sums similarities.

    Each float32 addition of a non-negative term rounds by at most 2**-24 of the running sum,
    and the percentage is a float32 division and product: (n + 2) roundings of the value.
    """
    slack = (len(cases) + 3) * 2.0**-24 * abs(expected) if has_f32(cases) else 0.0
    return 1e-6 + slack


def assert_official(mode: str, ours: dict[str, Any], cases: list[tuple[Any, float]]) -> None:
    expected = official(mode, cases)
    assert set(ours) == set(CI_METRICS[mode])
    for name, value in ours.items():
        want = expected[name]
        if want is None:
            assert np.isnan(value), name
        else:
            assert abs(float(value) - want) <= tolerance(want, cases), (name, value, want)


def singletons(cases: list[tuple[Any, float]]) -> list[list[tuple[Any, float]]]:
    return [[case] for case in cases]


# ---------------------------------------------------------------------------------------------
# Real case scores: the sample's reference chains, answered right, wrong and not at all


def _broken_call(message: dict[str, Any]) -> dict[str, Any]:
    function = message["tool_calls"][0]["function"]
    wrong = {"name": function["name"], "arguments": {"image": "nowhere.jpg"}}
    return {"role": "assistant", "tool_calls": [{"type": "function", "function": wrong}]}


def _variants(gold: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Predictions for a chain: the reference, one with wrong first arguments and a wrong
    answer, and one that stops after its first call (no answer)."""
    wrong = [dict(m) for m in gold]
    first_call = next(i for i, m in enumerate(wrong) if "tool_calls" in m)
    wrong[first_call] = _broken_call(wrong[first_call])
    if "tool_calls" not in wrong[-1]:
        wrong[-1] = {"role": "assistant", "content": "I cannot tell from the image."}
    return {"right": gold, "wrong": wrong, "stopped": gold[: first_call + 1]}


def sample_cases(dataset: Any, mode: str, variant: str) -> list[tuple[Any, float]]:
    """(score, passed) of each sample query under one variant of predictions."""
    similarity = HashSimilarity()
    out: list[tuple[Any, float]] = []
    for query in dataset:
        dialogs = dataset.reference_dialogs(query)
        ref = query.gt_answer
        if mode == "step":
            gold = [dialogs[i] for i in query.assistant_indices]
            if variant == "stopped":
                scored = unanswered_step_case(gold, ref)
                out.append((scored, 0.0))
                continue
            pred = _variants(gold)[variant]
            scored = score_step_case(pred, gold, ref, similarity)
            verdict = judge_step(pred, gold, ref, scored, 0.5)
        else:
            gold = dialogs[1:]
            pred = _variants(gold)[variant]
            scored = score_e2e_case(pred, gold, ref, similarity)
            verdict = judge_e2e(pred, gold, ref, scored, 0.5)
        out.append((scored, float(verdict.passed)))
    return out


@pytest.fixture(scope="module")
def real(sample_dataset) -> dict[tuple[str, str], list[tuple[Any, float]]]:
    return {
        (mode, variant): sample_cases(sample_dataset, mode, variant)
        for mode in ("step", "e2e")
        for variant in ("right", "wrong", "stopped")
    }


def mixed(real: dict[tuple[str, str], list[tuple[Any, float]]], mode: str, shift: int):
    """Per query one of the three variants (a run that is right on some queries only)."""
    variants = ("right", "wrong", "stopped")
    n = len(real[(mode, "right")])
    return [real[(mode, variants[(q + shift) % 3])][q] for q in range(n)]


@pytest.mark.parametrize("mode", ["step", "e2e"])
@pytest.mark.parametrize("variant", ["right", "wrong", "stopped", "mixed"])
def test_metrics_of_summed_rows_equal_the_official_aggregate_on_the_sample(real, mode, variant):
    cases = mixed(real, mode, 0) if variant == "mixed" else real[(mode, variant)]
    assert len(cases) == 17
    matrix = query_matrix(mode, singletons(cases))
    assert matrix.shape == (17, WIDTH[mode])
    assert_official(mode, metrics_of(mode, matrix.sum(axis=0)), cases)


def test_sample_variants_really_differ(real):
    # The comparisons below would be vacuous if every variant scored the same.
    right = official("e2e", real[("e2e", "right")])
    wrong = official("e2e", real[("e2e", "wrong")])
    assert right["ans_acc"] > wrong["ans_acc"]
    assert official("step", real[("step", "wrong")])["arg_acc"] < 100
    assert has_f32(real[("e2e", "right")])


# ---------------------------------------------------------------------------------------------
# Hypothesis: any list of case scores the scorer can produce


scores = st.one_of(
    st.booleans().map(Score.of),
    st.just(Score.of(0)),
    st.floats(0, 1, width=32).map(lambda v: Score.of(np.float32(v))),
)
step_outcomes = st.builds(
    StepOutcome,
    gt_type=st.sampled_from(["tool", "answer"]),
    pred_type=st.sampled_from(["tool", "answer", "none"]),
    error=st.sampled_from([None, *ERROR_KINDS]),
    tool_ok=st.booleans(),
    args_ok=st.booleans(),
    answer=st.none() | scores,
)
step_scores = st.builds(
    StepCaseScore,
    has_answer_ref=st.booleans(),
    steps=st.lists(step_outcomes, max_size=6).map(tuple),
)
by_category = st.dictionaries(st.sampled_from(CATEGORY_NAMES), st.integers(0, 6))
e2e_scores = st.builds(
    E2ECaseScore,
    has_answer_ref=st.booleans(),
    answer=st.none() | scores,
    imggen=st.none() | scores,
    predicted=by_category,
    reference=by_category,
    hits=by_category,
)
passes = st.sampled_from([0.0, 1.0])


@settings(max_examples=150)
@given(cases=st.lists(st.tuples(step_scores, passes), max_size=25))
def test_step_components_sum_to_the_official_metrics(cases):
    matrix = query_matrix("step", singletons(cases))
    assert_official("step", metrics_of("step", matrix.sum(axis=0)), cases)


@settings(max_examples=150)
@given(cases=st.lists(st.tuples(e2e_scores, passes), max_size=25))
def test_e2e_components_sum_to_the_official_metrics(cases):
    matrix = query_matrix("e2e", singletons(cases))
    assert_official("e2e", metrics_of("e2e", matrix.sum(axis=0)), cases)


@settings(max_examples=60)
@given(
    cases=st.lists(st.tuples(e2e_scores, passes), min_size=1, max_size=8),
    epochs=st.integers(1, 4),
)
def test_epochs_of_a_query_are_averaged_into_one_row(cases, epochs):
    # The same outcome in every epoch is the same cluster as a single epoch.
    repeated = query_matrix("e2e", [[case] * epochs for case in cases])
    once = query_matrix("e2e", singletons(cases))
    np.testing.assert_allclose(repeated, once, rtol=1e-12)


def test_epoch_mean_counts_each_query_once():
    right = (E2ECaseScore(True, answer=Score.of(True)), 1.0)
    wrong = (E2ECaseScore(True, answer=Score.of(False)), 0.0)
    # Query 0 right in 1 of 4 epochs, query 1 right in all 4: (25 + 100) / 2.
    matrix = query_matrix("e2e", [[right, wrong, wrong, wrong], [right] * 4])
    metrics = metrics_of("e2e", matrix.sum(axis=0))
    assert metrics["ans_acc"] == pytest.approx(62.5)
    assert metrics["pass_rate"] == pytest.approx(62.5)
    # The interval is that of two queries, not eight cases: duplicated epochs do not narrow it.
    single = query_matrix("e2e", [[wrong], [right]])
    assert bootstrap_ci("e2e", single) == bootstrap_ci(
        "e2e", query_matrix("e2e", [[wrong] * 3, [right] * 3])
    )


def test_bad_arguments_name_the_problem():
    step = StepCaseScore(True, ())
    with pytest.raises(ValueError, match="unknown mode"):
        components("table", step, 1.0)
    with pytest.raises(TypeError, match="E2ECaseScore"):
        components("e2e", step, 1.0)
    with pytest.raises(TypeError, match="StepCaseScore"):
        components("step", E2ECaseScore(True), 1.0)
    with pytest.raises(ValueError, match="no epoch"):
        query_matrix("step", [[(step, 1.0)], []])
    with pytest.raises(ValueError, match="last axis of 9"):
        metrics_of("step", np.zeros(17))
    with pytest.raises(ValueError, match=r"shape \(n_queries, 17\)"):
        bootstrap_ci("e2e", np.zeros((3, 9)))
    with pytest.raises(ValueError, match="same queries"):
        permutation_test("step", np.zeros((3, 9)), np.zeros((4, 9)))
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap_ci("step", np.zeros((3, 9)), np.zeros((3, 9)), level=1.0)
    with pytest.raises(ValueError, match="samples"):
        bootstrap_ci("step", np.zeros((3, 9)), samples=0)


# ---------------------------------------------------------------------------------------------
# Bootstrap intervals against the official aggregation of each resample


def direct_bootstrap(
    mode: str,
    this: list[tuple[Any, float]],
    base: list[tuple[Any, float]] | None = None,
    *,
    samples: int,
    level: float,
) -> dict[str, tuple[float, float] | None]:
    """The documented algorithm with the official loop as the statistic, one resample at a time."""
    n = len(this)
    idx = np.random.default_rng(SEED).integers(0, n, size=(samples, n))
    draws: dict[str, list[float]] = {name: [] for name in CI_METRICS[mode]}
    for row in idx:
        mine = official(mode, [this[i] for i in row])
        theirs = None if base is None else official(mode, [base[i] for i in row])
        for name in draws:
            value = mine[name]
            if theirs is not None:
                value = None if value is None or theirs[name] is None else value - theirs[name]
            draws[name].append(np.nan if value is None else float(value))
    out: dict[str, tuple[float, float] | None] = {}
    for name, values in draws.items():
        array = np.array(values)
        if np.isnan(array).all():
            out[name] = None
        else:
            low, high = np.nanquantile(array, [(1 - level) / 2, (1 + level) / 2])
            out[name] = (float(low), float(high))
    return out


def assert_intervals(ours, expected, cases) -> None:
    assert set(ours) == set(expected)
    for name, interval in expected.items():
        if interval is None:
            assert ours[name] is None, name
            continue
        assert ours[name] is not None, name
        for got, want in zip(ours[name], interval, strict=True):
            # Differences of two float32-summed values: the slack of both.
            assert abs(got - want) <= 2 * tolerance(100.0, cases), (name, ours[name], interval)


@pytest.mark.parametrize("mode", ["step", "e2e"])
@pytest.mark.parametrize("level", [0.95, 0.8])
def test_bootstrap_ci_equals_resampling_the_official_aggregate(real, mode, level):
    cases = mixed(real, mode, 1)
    matrix = query_matrix(mode, singletons(cases))
    ours = bootstrap_ci(mode, matrix, samples=400, level=level)
    assert_intervals(ours, direct_bootstrap(mode, cases, samples=400, level=level), cases)
    assert ours == bootstrap_ci(mode, matrix, samples=400, level=level)  # seeded: reproducible


def test_a_shared_draw_cannot_be_changed_by_its_users():
    """The draws are made once per (n, samples, seed) and shared: no caller may change one."""
    counts = stats_module._resample_counts(5, 40, SEED)
    assert counts is stats_module._resample_counts(5, 40, SEED)
    assert counts.sum(axis=1).tolist() == [5.0] * 40  # each resample draws n queries
    patterns, exact = stats_module._swap_patterns(30, 40, SEED)
    assert not exact
    for array in (counts, patterns):
        with pytest.raises(ValueError, match="read-only"):
            array[0, 0] = 99.0
    # One pattern per subset when all 2**n fit: the exact test.
    bits, exact = stats_module._swap_patterns(3, 40, SEED)
    assert exact
    assert sorted(map(tuple, bits.tolist())) == sorted(itertools.product([0.0, 1.0], repeat=3))


@pytest.mark.parametrize("mode", ["step", "e2e"])
def test_paired_bootstrap_ci_equals_resampling_both_official_aggregates(real, mode):
    this, base = mixed(real, mode, 1), mixed(real, mode, 2)
    ours = paired_bootstrap_ci(
        mode,
        query_matrix(mode, singletons(this)),
        query_matrix(mode, singletons(base)),
        samples=400,
    )
    assert_intervals(ours, direct_bootstrap(mode, this, base, samples=400, level=0.95), this)


def test_undefined_metrics_have_no_interval_and_no_test():
    # Image-generation queries only: no answer reference, so AnsAcc (and SummAcc) are None.
    cases = [(E2ECaseScore(False, imggen=Score.of(np.float32(0.5))), 1.0)] * 5
    matrix = query_matrix("e2e", singletons(cases))
    assert bootstrap_ci("e2e", matrix)["ans_acc"] is None
    assert bootstrap_ci("e2e", matrix)["ans_acc_img"] == pytest.approx((50.0, 50.0))
    assert permutation_test("e2e", matrix, matrix)["ans_acc"] is None
    steps = [(StepCaseScore(False, (StepOutcome("tool", "tool", tool_ok=True),)), 1.0)] * 3
    step_matrix = query_matrix("step", singletons(steps))
    assert paired_bootstrap_ci("step", step_matrix, step_matrix)["summ_acc"] is None
    assert paired_bootstrap_ci("step", step_matrix, step_matrix)["tool_acc"] == (0.0, 0.0)


def test_no_queries_means_no_statistics():
    empty = np.zeros((0, 9))
    assert bootstrap_ci("step", empty) == dict.fromkeys(CI_METRICS["step"], None)
    assert paired_bootstrap_ci("step", empty, empty) == dict.fromkeys(CI_METRICS["step"], None)
    assert permutation_test("step", empty, empty) == dict.fromkeys(CI_METRICS["step"], None)


# ---------------------------------------------------------------------------------------------
# Permutation test against SciPy and against enumeration with the official loop


def objective_matrix(correct: np.ndarray) -> np.ndarray:
    """Objective queries answered right or wrong: AnsAcc is then 100 x the mean."""
    cases = [(E2ECaseScore(True, answer=Score.of(bool(c))), float(c)) for c in correct]
    return query_matrix("e2e", singletons(cases))


def scipy_pvalues(x: np.ndarray, y: np.ndarray, resamples: int, seed: int) -> PairedTest:
    def statistic(a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
        return np.mean(a, axis=axis) - np.mean(b, axis=axis)

    def run(alternative: str) -> float:
        result = scipy_stats.permutation_test(
            (x, y),
            statistic,
            permutation_type="samples",
            vectorized=True,
            n_resamples=resamples,
            alternative=alternative,
            rng=np.random.default_rng(seed),
        )
        return float(result.pvalue)

    return PairedTest(p_value=run("two-sided"), p_drop=run("less"))


@pytest.mark.parametrize("n", range(2, 11))  # SciPy needs two pairs
def test_exact_permutation_test_equals_scipy(n):
    rng = np.random.default_rng(n)
    for _ in range(4):
        x = (rng.random(n) < 0.4).astype(float)
        y = (rng.random(n) < 0.7).astype(float)
        ours = permutation_test("e2e", objective_matrix(x), objective_matrix(y))
        # 2**10 <= 2000 and <= 9999: both enumerate every swap pattern.
        expected = scipy_pvalues(x, y, resamples=9999, seed=0)
        assert ours["ans_acc"] is not None
        assert ours["ans_acc"].p_drop == pytest.approx(expected.p_drop, rel=1e-12, abs=0)
        assert ours["ans_acc"].p_value == pytest.approx(expected.p_value, rel=1e-12, abs=0)
        assert ours["pass_rate"] == ours["ans_acc"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sampled_permutation_test_agrees_with_scipy_within_monte_carlo_error(seed):
    rng = np.random.default_rng(seed)
    n = 60
    x = (rng.random(n) < 0.5).astype(float)
    y = (rng.random(n) < 0.62).astype(float)
    ours = permutation_test("e2e", objective_matrix(x), objective_matrix(y))["ans_acc"]
    expected = scipy_pvalues(x, y, resamples=20000, seed=seed)
    assert ours is not None
    for got, want in [(ours.p_value, expected.p_value), (ours.p_drop, expected.p_drop)]:
        # Both are Monte Carlo estimates: 4 standard errors of their difference.
        error = math.sqrt(max(want * (1 - want), 1e-4) * (1 / DEFAULT_SAMPLES + 1 / 20000))
        assert abs(got - want) <= 4 * error, (got, want)


def test_exact_permutation_test_of_f1_equals_enumeration_with_the_official_loop():
    rng = np.random.default_rng(7)
    n = 6

    def random_case() -> E2ECaseScore:
        ref = {c: int(rng.integers(0, 3)) for c in CATEGORY_NAMES}
        hits = {c: int(rng.integers(0, ref[c] + 1)) for c in CATEGORY_NAMES}
        pred = {c: int(rng.integers(0, 4)) for c in CATEGORY_NAMES}
        answer = Score.of(np.float32(rng.random()))
        return E2ECaseScore(True, answer=answer, predicted=pred, reference=ref, hits=hits)

    this = [(random_case(), float(rng.integers(0, 2))) for _ in range(n)]
    base = [(random_case(), float(rng.integers(0, 2))) for _ in range(n)]
    ours = permutation_test(
        "e2e", query_matrix("e2e", singletons(this)), query_matrix("e2e", singletons(base))
    )
    observed = {
        k: v - official("e2e", base)[k] for k, v in official("e2e", this).items() if k in ours
    }
    permuted: dict[str, list[float]] = {name: [] for name in ours}
    for swaps in itertools.product([False, True], repeat=n):
        a = [base[i] if s else this[i] for i, s in enumerate(swaps)]
        b = [this[i] if s else base[i] for i, s in enumerate(swaps)]
        mine, theirs = official("e2e", a), official("e2e", b)
        for name in permuted:
            permuted[name].append(mine[name] - theirs[name])
    for name, draws in permuted.items():
        d = observed[name]
        tol = 1e-6  # the float32 answers; the F1s and pass rate are exact
        drops = sum(v <= d + tol for v in draws) / 2**n
        extreme = sum(abs(v) >= abs(d) - tol for v in draws) / 2**n
        assert ours[name] == PairedTest(p_value=extreme, p_drop=drops), name


def test_identical_runs_are_never_a_regression():
    x = np.array([1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0] * 10, dtype=float)
    result = permutation_test("e2e", objective_matrix(x), objective_matrix(x))
    assert all(r == PairedTest(1.0, 1.0) for r in result.values() if r is not None)


# ---------------------------------------------------------------------------------------------
# McNemar


@pytest.mark.parametrize("regressed", range(31))
def test_mcnemar_equals_scipy_binomtest(regressed):
    for fixed in [*range(31), 57, 120]:
        n = regressed + fixed
        result = mcnemar(regressed, fixed)
        if n == 0:
            assert result == PairedTest(1.0, 1.0)
            continue
        two_sided = scipy_stats.binomtest(regressed, n, 0.5, alternative="two-sided").pvalue
        greater = scipy_stats.binomtest(regressed, n, 0.5, alternative="greater").pvalue
        assert result.p_value == pytest.approx(two_sided, rel=1e-10)
        assert result.p_drop == pytest.approx(greater, rel=1e-10)


def test_mcnemar_large_counts_and_bad_input():
    result = mcnemar(2100, 1900)
    expected = scipy_stats.binomtest(2100, 4000, 0.5, alternative="greater").pvalue
    assert result.p_drop == pytest.approx(expected, rel=1e-8)
    assert result.p_value == pytest.approx(2 * expected, rel=1e-8)
    with pytest.raises(ValueError, match="negative"):
        mcnemar(-1, 3)


# ---------------------------------------------------------------------------------------------
# Simulation: coverage of a known truth and the level of the one-sided test


SIMULATIONS = 300
QUERIES = 100


def simulated_pair(rng: np.random.Generator, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """Fresh queries from a population (success probability p ~ U(0.3, 0.9), so AnsAcc = 60)
    answered by a baseline with p and by a model with p + shift: the true AnsAcc difference is
    100 x shift points."""
    p = rng.uniform(0.3, 0.9, QUERIES)
    base = (rng.random(QUERIES) < p).astype(float)
    this = (rng.random(QUERIES) < p + shift).astype(float)
    return objective_matrix(this), objective_matrix(base)


def p_drop(this: np.ndarray, base: np.ndarray) -> float:
    result = permutation_test("e2e", this, base)["ans_acc"]
    assert result is not None
    return result.p_drop


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
def test_simulated_intervals_cover_the_truth_and_the_gate_keeps_its_level():
    # The band for each rate is about 2.5 binomial standard errors of 300 runs
    # (sqrt(0.95 x 0.05 / 300) = 0.013) around the nominal rate.
    rng = np.random.default_rng(2026)
    covered_diff = covered_level = false_alarms = detected = 0
    for _ in range(SIMULATIONS):
        this, base = simulated_pair(rng, -0.1)
        low, high = paired_bootstrap_ci("e2e", this, base)["ans_acc"] or (np.nan, np.nan)
        covered_diff += low <= -10.0 <= high
        low, high = bootstrap_ci("e2e", base)["ans_acc"] or (np.nan, np.nan)
        covered_level += low <= 60.0 <= high
        detected += p_drop(this, base) < 0.05
        same, base = simulated_pair(rng, 0.0)
        false_alarms += p_drop(same, base) < 0.05
    assert 0.91 <= covered_diff / SIMULATIONS <= 0.99
    assert 0.91 <= covered_level / SIMULATIONS <= 0.99
    assert 0.02 <= false_alarms / SIMULATIONS <= 0.08
    # And it has power: a 10-point drop on 100 queries is flagged in about 40% of runs (normal
    # approximation: se of the difference 6.5 points, power 0.46; the seeded draw gives 0.35).
    assert detected / SIMULATIONS >= 0.25


# ---------------------------------------------------------------------------------------------
# Hostile and degenerate matrices


def matrices(width: int, rows: int = 6):
    return hnp.arrays(
        np.float64,
        st.tuples(st.integers(0, rows), st.just(width)),
        elements=st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.sampled_from([0.0, 1.0, 1e308, -1e308, 2.0**53]),
        ),
    )


def assert_well_formed(mode, intervals, paired, tests) -> None:
    for result in (intervals, paired):
        assert set(result) == set(CI_METRICS[mode])
        for interval in result.values():
            if interval is not None:
                low, high = interval
                assert math.isfinite(low)
                assert math.isfinite(high)
                assert low <= high
    assert set(tests) == set(CI_METRICS[mode])
    for test in tests.values():
        if test is not None:
            assert 0.0 <= test.p_drop <= 1.0
            assert 0.0 <= test.p_value <= 1.0


@pytest.mark.parametrize("mode", ["step", "e2e"])
@settings(max_examples=60)
@given(data=st.data())
@example(data=None)
def test_hostile_matrices_never_raise(mode, data):
    width = WIDTH[mode]
    if data is None:  # degenerate by hand: one query, all zeros
        this = base = np.zeros((1, width))
    else:
        this = data.draw(matrices(width))
        base = data.draw(hnp.arrays(np.float64, this.shape, elements=st.floats()))
    intervals = bootstrap_ci(mode, this, samples=50)
    paired = paired_bootstrap_ci(mode, this, base, samples=50)
    tests = permutation_test(mode, this, base, samples=50)
    assert_well_formed(mode, intervals, paired, tests)


@pytest.mark.parametrize("mode", ["step", "e2e"])
@pytest.mark.parametrize("fill", [0.0, 1.0, 1e12])
@pytest.mark.parametrize("n", [1, 2, 229])
def test_degenerate_matrices(mode, fill, n):
    matrix = np.full((n, WIDTH[mode]), fill)
    intervals = bootstrap_ci(mode, matrix, samples=100)
    tests = permutation_test(mode, matrix, matrix, samples=100)
    assert_well_formed(mode, intervals, paired_bootstrap_ci(mode, matrix, matrix), tests)
    if fill == 0.0:  # nothing counted: ratios undefined, the F1s 0 as officially
        assert intervals["pass_rate"] is None
    else:  # every resample equals the run itself
        value = float(metrics_of(mode, matrix.sum(axis=0))["pass_rate"])
        assert intervals["pass_rate"] == pytest.approx((value, value))
        assert tests["pass_rate"] == PairedTest(1.0, 1.0)
