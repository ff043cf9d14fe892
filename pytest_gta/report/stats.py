"""Confidence intervals and paired tests for GTA's metrics, resampling over queries.

A CI gate on a 229-query benchmark must tell a real regression from noise, so each metric gets
an interval and a comparison against a baseline gets a paired test. The unit of resampling is
the *query*: the queries are the sample drawn from the population of tasks, while the steps of
one query and the epochs of one query are correlated (clustered), so resampling steps or epochs
would overstate the precision. Epochs are therefore averaged within their query first.

Every official metric (``pytest_gta.scoring.metrics``) is a function of sums over queries of
per-query components: a ratio metric is ``sum(num) / sum(den) * 100`` and a category F1 is the
official quirky ``f1(hits, predicted, reference)`` on summed counts. A resample of queries is
then a vector of counts, its sums a matrix product, and its metrics vectorised formulas on the
sums: 2000 resamples of 229 queries take milliseconds instead of 2000 replays of the
evaluator's loop, with the same numbers (the official loop sums similarities in float32, we sum
in float64, which differs only by float32 rounding).

Everything is seeded (``SEED``): the same run gives the same interval and p-value, so a gate
does not flip between two reruns of an unchanged report. NumPy only: SciPy is no runtime
dependency (the tests check the permutation test and the binomial against it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from pytest_gta.scoring.metrics import E2ECaseScore, StepCaseScore
from pytest_gta.vocabulary import CATEGORY_NAMES

CaseScore: TypeAlias = StepCaseScore | E2ECaseScore
FloatArray: TypeAlias = npt.NDArray[np.float64]

#: The metrics that get intervals, per mode, in report order. ``pass_rate`` is the percentage
#: of queries whose case passed (a clustered mean over epochs when a query ran several times).
CI_METRICS: dict[str, tuple[str, ...]] = {
    "step": ("inst_acc", "tool_acc", "arg_acc", "summ_acc", "pass_rate"),
    "e2e": ("ans_acc", "ans_acc_img", "p_f1", "o_f1", "l_f1", "c_f1", "pass_rate"),
}
#: Fixed seed: the same run gives the same interval, a rerun of CI the same verdict.
SEED = 20240613
#: Resamples per interval or test: Monte Carlo error of a 95% bound about 0.1 of its
#: bootstrap standard error, and still milliseconds for a 229-query run.
DEFAULT_SAMPLES = 2000
METHOD_CI = "percentile bootstrap over queries"
METHOD_DIFF = "paired percentile bootstrap over queries"
METHOD_TEST = "paired permutation test over queries"

# Column layout of a component vector. Ratio metrics are (numerator, denominator) pairs.
_STEP_COLUMNS = (
    "inst",
    "inst_den",
    "tool",
    "arg",
    "tool_den",
    "summ",
    "summ_den",
    "passed",
    "queries",
)
_E2E_COLUMNS = (
    "ans",
    "ans_den",
    "ans_img",
    "queries",
    "passed",
    *(f"{part}:{category}" for category in CATEGORY_NAMES for part in ("hits", "pred", "ref")),
)
_COLUMNS: dict[str, tuple[str, ...]] = {"step": _STEP_COLUMNS, "e2e": _E2E_COLUMNS}
_COL: dict[str, dict[str, int]] = {
    mode: {name: i for i, name in enumerate(names)} for mode, names in _COLUMNS.items()
}

#: Ties between a resampled statistic and the observed one are decided with this relative
#: tolerance (at least this many percentage points), so float noise of a different summation
#: order does not turn an equal value into a more or less extreme one.
_TIE_TOLERANCE = 1e-9


def _columns(mode: str) -> tuple[str, ...]:
    try:
        return _COLUMNS[mode]
    except KeyError:
        raise ValueError(f"unknown mode {mode!r}: expected one of {sorted(_COLUMNS)}") from None


def components(mode: str, score: CaseScore, passed: float) -> FloatArray:
    """One case's contribution to the sums behind every metric of its mode.

    The counts replay what ``aggregate_step`` / ``aggregate_e2e`` add for this case, so that
    summing the vectors of any multiset of cases and applying :func:`metrics_of` gives the
    official numbers for that multiset (a bootstrap resample included).

    Args:
        mode: ``step`` or ``e2e``.
        score: The case's metric primitives, of the mode's type.
        passed: 1.0 when the case passed, else 0.0 (counted by ``pass_rate``).

    Returns:
        A float64 vector, one entry per component column of the mode.

    Raises:
        ValueError: An unknown mode.
        TypeError: A score of the other mode's type.
    """
    columns = _columns(mode)
    # Summed as Python floats, then one array: the same float64 additions as in numpy, without
    # numpy's per-item overhead (this runs once per case per comparison: 17,000 times for
    # --gta-compare of 20 release runs).
    out = [0.0] * len(columns)
    col = _COL[mode]
    out[col["passed"]] = float(passed)
    out[col["queries"]] = 1.0
    if mode == "step":
        if not isinstance(score, StepCaseScore):
            raise TypeError(f"step mode needs a StepCaseScore, not {type(score).__name__}")
        out[col["inst_den"]] = out[col["summ_den"]] = float(score.has_answer_ref)
        for step in score.steps:
            out[col["inst"]] += step.inst_ok
            if step.gt_type == "tool":
                out[col["inst_den"]] += 1
                out[col["tool_den"]] += 1
            # The official loop reads the answer only when the tool did not match (elif).
            if step.tool_ok:
                out[col["tool"]] += 1
                out[col["arg"]] += step.args_ok
            elif step.answer is not None:
                out[col["summ"]] += step.answer.value
        return np.array(out, dtype=np.float64)
    if not isinstance(score, E2ECaseScore):
        raise TypeError(f"e2e mode needs an E2ECaseScore, not {type(score).__name__}")
    out[col["ans_den"]] = float(score.has_answer_ref)
    if score.answer is not None:
        out[col["ans"]] += score.answer.value
        out[col["ans_img"]] += score.answer.value
    if score.imggen is not None:
        out[col["ans_img"]] += score.imggen.value
    for category in CATEGORY_NAMES:
        out[col[f"hits:{category}"]] = float(score.hits.get(category, 0))
        out[col[f"pred:{category}"]] = float(score.predicted.get(category, 0))
        out[col[f"ref:{category}"]] = float(score.reference.get(category, 0))
    return np.array(out, dtype=np.float64)


def query_matrix(mode: str, clusters: Sequence[Sequence[tuple[CaseScore, float]]]) -> FloatArray:
    """Per query the mean of its epochs' component vectors: the rows that get resampled.

    A query run for several epochs is one cluster: its epochs share the task, so they are
    averaged rather than counted as independent queries (which would narrow every interval
    by about the square root of the number of epochs).

    Args:
        mode: ``step`` or ``e2e``.
        clusters: Per query (in dataset order), its ``(score, passed)`` pairs, one per epoch.

    Returns:
        An array of shape ``(n_queries, k)``.

    Raises:
        ValueError: An unknown mode, or a query without any epoch.
    """
    k = len(_columns(mode))
    matrix = np.zeros((len(clusters), k), dtype=np.float64)
    for row, cluster in enumerate(clusters):
        if not cluster:
            raise ValueError(f"query #{row} has no epoch: each query needs at least one case")
        if len(cluster) == 1:  # one epoch: its vector is the mean (and costs no np.mean)
            matrix[row] = components(mode, *cluster[0])
        else:
            matrix[row] = np.mean([components(mode, s, p) for s, p in cluster], axis=0)
    return matrix


def _ratio(num: FloatArray, den: FloatArray) -> FloatArray:
    """``num / den * 100`` in the official order of operations; NaN where ``den == 0``."""
    with np.errstate(all="ignore"):
        value = num / den * 100
    return np.where(den == 0, np.nan, value)


def _f1(hits: FloatArray, predicted: FloatArray, reference: FloatArray) -> FloatArray:
    """The official ``f1`` (its 1e-5 terms and precision above 1 kept), vectorised."""
    with np.errstate(all="ignore"):
        precision = hits / (predicted + 1e-5)
        recall = np.where(reference != 0, hits / reference, 0.0)
        return np.asarray(2 * precision * recall / (precision + recall + 1e-5) * 100)


def metrics_of(mode: str, sums: npt.ArrayLike) -> dict[str, FloatArray]:
    """The official metric formulas applied to summed components.

    Args:
        mode: ``step`` or ``e2e``.
        sums: Component sums of shape ``(..., k)``, e.g. ``query_matrix(...).sum(axis=0)`` or
            one row per resample.

    Returns:
        Per metric of ``CI_METRICS[mode]``, an array of shape ``(...)``: NaN where the official
        code gives ``None`` (a zero denominator; the F1s are 0 there, as officially).

    Raises:
        ValueError: An unknown mode or a last axis that is not the mode's component count.
    """
    columns = _columns(mode)
    s = np.asarray(sums, dtype=np.float64)
    if s.ndim == 0 or s.shape[-1] != len(columns):
        raise ValueError(f"{mode} sums need a last axis of {len(columns)}, got shape {s.shape}")
    c = _COL[mode]

    def col(name: str) -> FloatArray:
        return s[..., c[name]]

    out: dict[str, FloatArray] = {}
    if mode == "step":
        out["inst_acc"] = _ratio(col("inst"), col("inst_den"))
        out["tool_acc"] = _ratio(col("tool"), col("tool_den"))
        out["arg_acc"] = _ratio(col("arg"), col("tool_den"))
        out["summ_acc"] = _ratio(col("summ"), col("summ_den"))
    else:
        out["ans_acc"] = _ratio(col("ans"), col("ans_den"))
        out["ans_acc_img"] = _ratio(col("ans_img"), col("queries"))
        for category in CATEGORY_NAMES:
            out[f"{category[0]}_f1"] = _f1(
                col(f"hits:{category}"), col(f"pred:{category}"), col(f"ref:{category}")
            )
    out["pass_rate"] = _ratio(col("passed"), col("queries"))
    return out


def _checked(mode: str, matrix: npt.ArrayLike, name: str = "matrix") -> FloatArray:
    m = np.asarray(matrix, dtype=np.float64)
    k = len(_columns(mode))
    if m.ndim != 2 or m.shape[1] != k:
        raise ValueError(f"{mode} {name} needs shape (n_queries, {k}), got {m.shape}")
    return m


def _check_resampling(samples: int, level: float | None = None) -> None:
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    if level is not None and not 0 < level < 1:
        raise ValueError(f"level must be strictly between 0 and 1, got {level}")


@functools.lru_cache(maxsize=4)
def _resample_counts(n: int, samples: int, seed: int) -> FloatArray:
    """How often each query is drawn in each resample, shape ``(samples, n)`` (read-only).

    The draw is ``default_rng(seed).integers(0, n, size=(samples, n))`` (documented, so that
    an independent reimplementation can replay it); counting instead of gathering rows keeps
    memory at ``samples * n`` rather than ``samples * n * k``. The same draw serves every
    interval of a run and every pair of ``--gta-compare`` (38 for 20 runs), so it is made once.
    """
    idx = np.random.default_rng(seed).integers(0, n, size=(samples, n))
    offsets = (np.arange(samples) * n)[:, None]
    counts = np.bincount((idx + offsets).ravel(), minlength=samples * n)
    return _read_only(counts.reshape(samples, n).astype(np.float64))


def _read_only(array: FloatArray) -> FloatArray:
    """``array``, no longer writable: a cached draw is shared by every caller."""
    array.setflags(write=False)
    return array


def percentile_intervals(
    values: dict[str, FloatArray], level: float
) -> dict[str, tuple[float, float] | None]:
    """Percentile interval of each metric's resampled values, ignoring undefined resamples."""
    out: dict[str, tuple[float, float] | None] = {}
    for name, draws in values.items():
        if not np.isfinite(draws).any():
            out[name] = None  # undefined in every resample (or overflowing hostile input)
            continue
        with np.errstate(all="ignore"):
            low, high = np.nanquantile(
                np.where(np.isinf(draws), np.nan, draws), [(1 - level) / 2, (1 + level) / 2]
            )
        # Hostile magnitudes can overflow the interpolation; no interval beats an infinite one.
        out[name] = (float(low), float(high)) if np.isfinite([low, high]).all() else None
    return out


def _resampled(
    mode: str,
    matrices: Sequence[FloatArray],
    statistic: Callable[..., dict[str, FloatArray]],
    samples: int,
    level: float,
    seed: int,
) -> dict[str, tuple[float, float] | None]:
    n = matrices[0].shape[0]
    if n == 0:
        return dict.fromkeys(CI_METRICS[mode], None)
    counts = _resample_counts(n, samples, seed)
    with np.errstate(all="ignore"):
        sums = [counts @ m for m in matrices]
    return percentile_intervals(statistic(*sums), level)


def bootstrap_ci(
    mode: str,
    matrix: npt.ArrayLike,
    *,
    samples: int = DEFAULT_SAMPLES,
    level: float = 0.95,
    seed: int = SEED,
) -> dict[str, tuple[float, float] | None]:
    """Percentile bootstrap interval of each metric, resampling queries with replacement.

    The percentile method needs no normality assumption and respects the metrics' bounds
    (an AnsAcc near 100 gets an asymmetric interval). Resample ``b`` takes the queries
    ``idx[b]`` of ``idx = default_rng(seed).integers(0, n, size=(samples, n))``; the bounds
    are NumPy's default (linear) ``nanquantile`` at ``(1 - level) / 2`` and
    ``(1 + level) / 2`` of the resampled metric, ignoring resamples where it is undefined.

    Args:
        mode: ``step`` or ``e2e``.
        matrix: The run's :func:`query_matrix`.
        samples: Number of resamples.
        level: Coverage of the interval.
        seed: Seed of the draw (the default makes reruns give identical intervals).

    Returns:
        Per metric of ``CI_METRICS[mode]`` the ``(low, high)`` interval in percent, or ``None``
        where the metric is undefined in every resample (e.g. SummAcc without answer queries).

    Raises:
        ValueError: A matrix of the wrong shape, ``samples < 1`` or a level outside (0, 1).
    """
    m = _checked(mode, matrix)
    _check_resampling(samples, level)
    return _resampled(mode, [m], lambda s: metrics_of(mode, s), samples, level, seed)


def bootstrap_draws(
    mode: str, matrix: npt.ArrayLike, *, samples: int = DEFAULT_SAMPLES, seed: int = SEED
) -> dict[str, FloatArray]:
    """Each metric over the resamples :func:`bootstrap_ci` draws (same seed, same draw).

    For comparisons that need the resampled values themselves, e.g. how often a resample of
    this run reaches a published number (NaN where a resample leaves the metric undefined).
    """
    m = _checked(mode, matrix)
    _check_resampling(samples)
    if m.shape[0] == 0:
        return {name: np.full(samples, np.nan) for name in CI_METRICS[mode]}
    with np.errstate(all="ignore"):
        return metrics_of(mode, _resample_counts(m.shape[0], samples, seed) @ m)


def _difference(mode: str, this: FloatArray, base: FloatArray) -> dict[str, FloatArray]:
    mine, theirs = metrics_of(mode, this), metrics_of(mode, base)
    with np.errstate(all="ignore"):
        return {name: mine[name] - theirs[name] for name in mine}


def _paired(mode: str, this: npt.ArrayLike, base: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    a, b = _checked(mode, this, "this"), _checked(mode, base, "base")
    if a.shape != b.shape:
        raise ValueError(
            f"paired matrices need the same queries in the same order: {a.shape} vs {b.shape}"
        )
    return a, b


def paired_bootstrap_ci(
    mode: str,
    this: npt.ArrayLike,
    base: npt.ArrayLike,
    *,
    samples: int = DEFAULT_SAMPLES,
    level: float = 0.95,
    seed: int = SEED,
) -> dict[str, tuple[float, float] | None]:
    """Percentile interval of ``metric(this) - metric(base)``, resampling query pairs.

    Both runs answered the same queries, so a resample keeps each query's two rows together:
    the variation between queries (easy and hard ones) cancels in the difference, which makes
    the interval much narrower than one from two independent intervals.

    Args:
        mode: ``step`` or ``e2e``.
        this: The current run's :func:`query_matrix`.
        base: The baseline's matrix, rows for the same queries in the same order.
        samples: Number of resamples (the same ``idx`` draw as :func:`bootstrap_ci`).
        level: Coverage of the interval.
        seed: Seed of the draw.

    Returns:
        Per metric the ``(low, high)`` interval of the difference in percentage points, or
        ``None`` where it is undefined in every resample.

    Raises:
        ValueError: Matrices of the wrong or of different shapes, bad ``samples`` or ``level``.
    """
    a, b = _paired(mode, this, base)
    _check_resampling(samples, level)
    return _resampled(mode, [a, b], lambda sa, sb: _difference(mode, sa, sb), samples, level, seed)


@dataclass(frozen=True)
class PairedTest:
    """P-values of a paired comparison of this run against a baseline.

    Attributes:
        p_value: Two-sided: how surprising a difference this large in either direction is if
            the two runs do equally well.
        p_drop: One-sided, against the alternative that this run is worse (difference < 0):
            what a regression gate looks at.
    """

    p_value: float
    p_drop: float


@functools.lru_cache(maxsize=4)
def _swap_patterns(n: int, samples: int, seed: int) -> tuple[FloatArray, bool]:
    """Which queries swap their two rows, one row per permutation, and whether it is exact.

    Made once per ``(n, samples, seed)``, read-only, like :func:`_resample_counts`.
    """
    if n < samples.bit_length() and 2**n <= samples:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
        return _read_only(bits.astype(np.float64)), True
    coins = np.random.default_rng(seed).integers(0, 2, size=(samples, n))
    return _read_only(coins.astype(np.float64)), False


def permutation_test(
    mode: str,
    this: npt.ArrayLike,
    base: npt.ArrayLike,
    *,
    samples: int = DEFAULT_SAMPLES,
    seed: int = SEED,
) -> dict[str, PairedTest | None]:
    """Paired permutation test of ``metric(this) - metric(base)`` per metric.

    Under the null hypothesis the two runs are interchangeable on every query, so swapping the
    two rows of any subset of queries gives an equally likely pair of runs. Unlike a z-test it
    needs no normality and holds for any of the metric formulas, the F1 quirks included.
    Swap patterns are one fair coin per query (``default_rng(seed).integers(0, 2,
    size=(samples, n))``), or all ``2**n`` of them when ``2**n <= samples`` (exact).

    With ``d`` the observed difference and ``d*`` the permuted ones, ``p_drop`` counts
    ``d* <= d`` and ``p_value`` counts ``|d*| >= |d|``: as ``(1 + count) / (1 + N)`` for
    random patterns (the observed pair counts as one, so a p-value is never 0) and as
    ``count / 2**n`` for exact enumeration (which includes the identity). Ties are decided
    with a tolerance of 1e-9 relative (at least 1e-9 points); patterns under which the
    metric is undefined are left out of the counts and of ``N``.

    Args:
        mode: ``step`` or ``e2e``.
        this: The current run's :func:`query_matrix`.
        base: The baseline's matrix, rows for the same queries in the same order.
        samples: Number of random swap patterns (and the limit for exact enumeration).
        seed: Seed of the draw.

    Returns:
        Per metric a :class:`PairedTest`, or ``None`` where the metric is undefined.

    Raises:
        ValueError: Matrices of the wrong or of different shapes, or ``samples < 1``.
    """
    a, b = _paired(mode, this, base)
    _check_resampling(samples)
    n = a.shape[0]
    with np.errstate(all="ignore"):
        total_a, total_b = a.sum(axis=0), b.sum(axis=0)
        observed = _difference(mode, total_a, total_b)
        patterns, exact = _swap_patterns(n, samples, seed)
        moved = patterns @ (b - a)
        permuted = _difference(mode, total_a + moved, total_b - moved)
    return {
        name: _tested(float(observed[name]), permuted[name], exact) for name in CI_METRICS[mode]
    }


def _tested(d: float, draws: FloatArray, exact: bool) -> PairedTest | None:
    """The p-values of the observed difference ``d`` among the permuted ones."""
    draws = draws[np.isfinite(draws)]
    if not math.isfinite(d):
        return None
    tol = _TIE_TOLERANCE * max(1.0, abs(d))
    drops = int(np.count_nonzero(draws <= d + tol))
    extreme = int(np.count_nonzero(np.abs(draws) >= abs(d) - tol))
    if exact:
        # The identity pattern is among the draws, so the count is never 0.
        valid = max(len(draws), 1)
        return PairedTest(p_value=extreme / valid, p_drop=drops / valid)
    valid = len(draws) + 1
    return PairedTest(p_value=(1 + extreme) / valid, p_drop=(1 + drops) / valid)


def mean_permutation_test(
    differences: npt.ArrayLike, *, samples: int = DEFAULT_SAMPLES, seed: int = SEED
) -> PairedTest | None:
    """Paired permutation test of the mean of per-item differences (``this - base``).

    The same test as :func:`permutation_test` for a plain mean (a GTA-Workflow root score per
    task): swapping an item's two values flips the sign of its difference, with the same swap
    patterns, exact enumeration and counting. ``None`` without items.
    """
    d = np.asarray(differences, dtype=np.float64).ravel()
    _check_resampling(samples)
    if d.size == 0:
        return None
    patterns, exact = _swap_patterns(d.size, samples, seed)
    with np.errstate(all="ignore"):
        permuted = ((1.0 - 2.0 * patterns) @ d) / d.size
    return _tested(float(d.mean()), permuted, exact)


def mean_bootstrap_draws(
    values: npt.ArrayLike, *, samples: int = DEFAULT_SAMPLES, seed: int = SEED
) -> FloatArray:
    """The mean of ``values`` over :func:`bootstrap_ci`'s resamples (same seed, same draw)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    _check_resampling(samples)
    if v.size == 0:
        return np.full(samples, np.nan)
    with np.errstate(all="ignore"):
        return (_resample_counts(v.size, samples, seed) @ v) / v.size


def mcnemar(regressed: int, fixed: int) -> PairedTest:
    """Exact McNemar test on pass/fail pairs of the same queries.

    Only discordant queries carry information about a change; under the null hypothesis each
    of them is a regression or a fix with probability 1/2, so ``regressed`` is
    Binomial(``regressed + fixed``, 1/2). Computed with exact integers (no SciPy at runtime);
    the two-sided p-value equals ``scipy.stats.binomtest(regressed, n, 0.5).pvalue``, which
    for p = 1/2 is twice the smaller tail, at most 1.

    Args:
        regressed: Queries that passed in the baseline and fail now.
        fixed: Queries that failed in the baseline and pass now.

    Returns:
        ``p_value`` two-sided and ``p_drop = P(X >= regressed)``; both 1.0 without discordant
        queries.

    Raises:
        ValueError: A negative count.
    """
    if regressed < 0 or fixed < 0:
        raise ValueError(f"counts must not be negative, got {regressed} and {fixed}")
    n = regressed + fixed
    if n == 0:
        return PairedTest(p_value=1.0, p_drop=1.0)
    whole = 2**n
    # P(X >= regressed) = P(X <= fixed) by symmetry.
    upper = _lower_tail(n, fixed)
    two_sided = min(whole, 2 * _lower_tail(n, min(regressed, fixed)))
    return PairedTest(p_value=two_sided / whole, p_drop=upper / whole)


def _lower_tail(n: int, k: int) -> int:
    """``sum(comb(n, i) for i in range(k + 1))``, each term from the last (linear in ``k``)."""
    term = total = 1
    for i in range(k):
        term = term * (n - i) // (i + 1)
        total += term
    return total
