"""Turning the cases of a run into its report (controller only).

The report is a :class:`~pytest_gta.results.report.RunReport`, the contract of
``--gta-report``. Metrics are aggregated here, in dataset order, from the primitives each case
carried, so the numbers do not depend on which process ran which case. Cases that errored are
counted as wrong in ``metrics`` (as the official numbers would count a missing answer) and left
out of ``metrics_excluding_errors``; skipped cases are in neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from pytest_gta.datainfo import dataset_statistics
from pytest_gta.dataset import Dataset, Query
from pytest_gta.erratum import Erratum, shipped_erratum
from pytest_gta.install.manifest import read_install_record
from pytest_gta.models.oracle import ORACLE
from pytest_gta.quirks import explain_replay_failures, find_quirks, replay_failure_notes, summarize
from pytest_gta.report import stats
from pytest_gta.report.robustness import robustness_of
from pytest_gta.results.base import PerMode
from pytest_gta.results.case import CaseResult
from pytest_gta.results.erratum import ErratumEntry
from pytest_gta.results.migrate import default_label
from pytest_gta.results.primitives import ErrorCounts, StepPrimitives
from pytest_gta.results.recorded import CaseUsage
from pytest_gta.results.report import (
    SCHEMA,
    ByType,
    CallCounts,
    DatasetInfo,
    E2EDenominators,
    E2EIntervals,
    E2EMetrics,
    E2ESpread,
    Identity,
    Interval,
    LeaderboardRow,
    NoMetrics,
    OutcomeCounts,
    RunReport,
    RunSettings,
    RunUsage,
    ShardInfo,
    StepDenominators,
    StepIntervals,
    StepMetrics,
    StepSpread,
    TypeStats,
)
from pytest_gta.scoring.aggregate import aggregate_e2e, aggregate_step
from pytest_gta.scoring.metrics import (
    E2ECaseScore,
    StepCaseScore,
    unanswered_e2e_case,
    unanswered_step_case,
)
from pytest_gta.scoring.verdict import judge
from pytest_gta.vocabulary import ERROR_KINDS, MODES, OUTCOMES

TABLE5_NOTE = (
    "Table 5 error types are our mapping (the official repository has no code for it): "
    "format = NoAction + InvalidAction, args = ARGS_ERROR, other (N/A) = other API errors."
)

CaseScore = StepCaseScore | E2ECaseScore
#: Where a case keeps its parsed primitives (:meth:`CaseResult.memo`).
_PARSED = "report.build.parsed"


def case_score(case: CaseResult, dataset: Dataset) -> CaseScore:
    """The case's metric primitives; an errored case without them scores as unanswered.

    Parsed once per case (``--gta-compare`` reads a reference run's cases for every other run).
    """
    primitives = case.primitives
    if primitives is not None:
        memo = case.memo()
        cached = memo.get(_PARSED)
        # Parsed once per primitives object: primitives replaced later are parsed anew.
        if cached is not None and cached[0] is primitives:
            parsed: CaseScore = cached[1]
            return parsed
        raw = primitives.to_json_value()
        parsed = (
            StepCaseScore.from_json(raw)
            if isinstance(primitives, StepPrimitives)
            else E2ECaseScore.from_json(raw)
        )
        memo[_PARSED] = (primitives, parsed)
        return parsed
    query = dataset[case.query_id]
    if case.mode == "step":
        return unanswered_step_case(reference_of(query, "step"), query.gt_answer)
    return unanswered_e2e_case(reference_of(query, "e2e"), query.gt_answer)


def reference_of(query: Query, mode: str) -> list[dict[str, Any]]:
    """The reference steps a case of ``mode`` is scored against (step: the assistant steps)."""
    dialogs = cast(Sequence[dict[str, Any]], query.dialogs)
    if mode == "step":
        return [dialogs[i] for i in query.assistant_indices]
    return list(dialogs[1:])


def ordered(cases: Iterable[CaseResult], dataset: Dataset) -> list[CaseResult]:
    """The cases of the dataset's queries by mode, dataset order and epoch (others dropped)."""
    known = [c for c in cases if c.query_id in dataset.queries]
    mode_order: dict[str, int] = {m: i for i, m in enumerate(MODES)}
    return sorted(
        known,
        key=lambda c: (mode_order.get(c.mode, 99), dataset[c.query_id].position, c.epoch or 0),
    )


def mode_metrics(mode: str, scores: Sequence[CaseScore]) -> dict[str, Any]:
    """The mode's official metrics over case scores already in dataset order."""
    if mode == "step":
        return aggregate_step([s for s in scores if isinstance(s, StepCaseScore)])
    return aggregate_e2e([s for s in scores if isinstance(s, E2ECaseScore)])


def by_epoch(cases: Sequence[CaseResult]) -> dict[int | None, list[CaseResult]]:
    """Cases grouped by sampling epoch, each group in the order given (dataset order)."""
    groups: dict[int | None, list[CaseResult]] = {}
    for case in cases:
        groups.setdefault(case.epoch, []).append(case)
    return dict(sorted(groups.items(), key=lambda item: item[0] or 0))


def epoch_metrics(
    mode: str, cases: Sequence[CaseResult], dataset: Dataset
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The mode's metrics over ``cases`` (dataset order): the mean over epochs, and each epoch's.

    A single run (one epoch) gets the official aggregate itself, its types and rounding
    untouched. With ``--gta-epochs`` each epoch is aggregated as the official evaluator would
    aggregate a run, then every metric is averaged over the epochs that have it.
    """
    per_epoch = {
        str(epoch): mode_metrics(mode, [case_score(c, dataset) for c in group])
        for epoch, group in by_epoch(cases).items()
    }
    if len(per_epoch) == 1:
        return next(iter(per_epoch.values())), per_epoch
    mean: dict[str, Any] = {}
    for key in next(iter(per_epoch.values())):
        values = [m[key] for m in per_epoch.values() if m.get(key) is not None]
        mean[key] = float(sum(values) / len(values)) if values else None
    return mean, per_epoch


def query_pass_rates(cases: Sequence[CaseResult]) -> dict[str, float]:
    """Per query, the share of its epochs that passed (a repeated run's flakiness per query)."""
    counts: dict[str, list[int]] = {}
    for case in cases:
        slot = counts.setdefault(case.query_id, [0, 0])
        slot[0] += case.outcome == "passed"
        slot[1] += 1
    return {qid: passed / total for qid, (passed, total) in counts.items()}


def query_clusters(
    cases: Sequence[CaseResult], dataset: Dataset
) -> dict[str, list[tuple[CaseScore, float]]]:
    """Per query id (in the order given), its epochs' (score, passed) pairs.

    The query is the unit of resampling of every interval and test (:mod:`.stats`).
    """
    out: dict[str, list[tuple[CaseScore, float]]] = {}
    for case in cases:
        passed = 1.0 if case.outcome == "passed" else 0.0
        out.setdefault(case.query_id, []).append((case_score(case, dataset), passed))
    return out


def interval(bounds: tuple[float, float] | None, level: float, method: str) -> Interval:
    """An interval as the report writes it (``None`` bounds: it could not be computed)."""
    if bounds is None:
        return Interval(low=None, high=None, level=level, method=method)
    return Interval(low=float(bounds[0]), high=float(bounds[1]), level=level, method=method)


def metrics_ci(
    ran_by_mode: Mapping[str, Sequence[CaseResult]],
    dataset: Dataset,
    *,
    level: float,
    samples: int,
) -> PerMode[StepIntervals, E2EIntervals]:
    """The report's ``metrics_ci``: per mode and metric, ``low``/``high``/``level``/``method``.

    Errored cases count as wrong, as in ``metrics``; skipped cases are not in ``ran_by_mode``.
    """
    out: dict[str, Any] = {}
    for mode, cases in ran_by_mode.items():
        clusters = query_clusters(cases, dataset)
        matrix = stats.query_matrix(mode, list(clusters.values()))
        bounds = stats.bootstrap_ci(mode, matrix, samples=samples, level=level)
        method = f"{stats.METHOD_CI} ({samples} resamples, seed {stats.SEED})"
        out[mode] = {metric: interval(bounds[metric], level, method) for metric in bounds}
    return PerMode[StepIntervals, E2EIntervals](
        step=StepIntervals(**out["step"]) if "step" in out else None,
        e2e=E2EIntervals(**out["e2e"]) if "e2e" in out else None,
    )


def _spread(per_epoch: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Each metric's sample standard deviation, minimum and maximum over the epochs."""
    out: dict[str, Any] = {}
    for key in next(iter(per_epoch.values())):
        values = [float(m[key]) for m in per_epoch.values() if m.get(key) is not None]
        if not values:
            out[key] = None
            continue
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
        out[key] = {
            "std": var**0.5,
            "min": min(values),
            "max": max(values),
            "epochs": len(values),
        }
    return out


def _errors(scores: Sequence[CaseScore]) -> ErrorCounts:
    totals: dict[str, int] = dict.fromkeys(ERROR_KINDS, 0)
    for score in scores:
        errors = score.errors() if isinstance(score, StepCaseScore) else score.errors
        for kind in ERROR_KINDS:
            totals[kind] += int(errors.get(kind, 0))
    return ErrorCounts(**totals)


def usage_totals(cases: Sequence[CaseResult], prices: tuple[float, float] | None) -> RunUsage:
    """Token totals of the cases; ``cost_usd`` counts only calls not served from the cache.

    A case's cached calls are a share of its calls; its paid tokens are estimated by that share
    when the case mixes both (the exact paid total is in each worker's ledger, not per case).
    ``model_s`` is the seconds the cases waited on the model (their ``model_s``; 0.0 when
    none was called), so a run's model time adds up the same with and without xdist or shards.
    """
    totals = CaseUsage(input_tokens=0, output_tokens=0, calls=0, cached_calls=0)
    paid_in = paid_out = 0.0
    model_s = 0.0
    for case in cases:
        if case.model_s is not None:
            model_s += float(case.model_s)
        usage = case.usage
        if usage is None:
            continue
        totals.input_tokens += usage.input_tokens
        totals.output_tokens += usage.output_tokens
        totals.calls += usage.calls
        totals.cached_calls += usage.cached_calls
        made = usage.calls + usage.cached_calls
        share = usage.calls / made if made else 0.0
        paid_in += usage.input_tokens * share
        paid_out += usage.output_tokens * share
    cost = None if prices is None else (paid_in * prices[0] + paid_out * prices[1]) / 1_000_000
    return RunUsage(
        input_tokens=totals.input_tokens,
        output_tokens=totals.output_tokens,
        calls=totals.calls,
        cached_calls=totals.cached_calls,
        cost_usd=cost,
        model_s=round(model_s, 6),
    )


def _denominators(
    mode: str, cases: Sequence[CaseResult], dataset: Dataset
) -> StepDenominators | E2EDenominators:
    queries = [dataset[c.query_id] for c in cases]
    counts = {
        "queries": len(queries),
        "answer_queries": sum(1 for q in queries if q.gt_answer),
        "reference_tool_calls": sum(len(q.calls) for q in queries),
    }
    if mode == "step":
        steps = sum(len(q.assistant_indices) for q in queries)
        return StepDenominators(**counts, reference_steps=steps)
    return E2EDenominators(**counts)


def _queries_of(cases: Sequence[CaseResult], dataset: Dataset) -> list[Query]:
    """The distinct queries of ``cases`` (already in dataset order)."""
    return [dataset[qid] for qid in dict.fromkeys(c.query_id for c in cases)]


def _answer_similarity(case: CaseResult) -> float | None:
    """The score of the case's answer: the summary step's (step mode) or the final answer's."""
    primitives = case.primitives
    if primitives is None:
        return None
    if isinstance(primitives, StepPrimitives):
        answer = next((s.answer for s in primitives.steps if s.answer is not None), None)
    else:
        answer = primitives.answer
    return None if answer is None else float(answer[1])


def _replay_notes(
    model: str, cases: Sequence[CaseResult], dataset: Dataset, threshold: Any
) -> list[str]:
    """Why a reference replay failed the cases it failed: dataset quirks, or a harness defect."""
    failed = [
        (case.id, case.query_id, case.mode, _answer_similarity(case))
        for case in cases
        if case.outcome == "failed"
    ]
    usable = isinstance(threshold, int | float) and not isinstance(threshold, bool)
    explained = explain_replay_failures(dataset, failed, float(threshold) if usable else 0.5)
    return replay_failure_notes(explained, model)


def _by_type(cases: Sequence[CaseResult]) -> dict[str, ByType]:
    sums: dict[str, dict[str, list[float]]] = {}
    for case in cases:
        if case.outcome == "skipped":
            continue
        slot = sums.setdefault(case.mode, {}).setdefault(case.type, [0, 0, 0.0])
        slot[0] += 1
        slot[1] += case.outcome == "passed"
        slot[2] += float(case.score)
    return {
        mode: {
            name: TypeStats(cases=int(n), passed=int(ok), mean_score=total / n)
            for name, (n, ok, total) in types.items()
        }
        for mode, types in sums.items()
    }


def default_identity(
    model: str, protocol: str, settings: RunSettings, dataset: Dataset
) -> Identity:
    """A run's identity from its model, protocol or agent and dataset alone (no commit, dates)."""
    agent = settings.agent.name if settings.agent is not None else None
    shown = None if agent is not None else protocol
    return Identity(
        label=default_label(model, shown, agent),
        label_given=False,
        model=model,
        protocol=shown,
        agent=agent,
        git=None,
        started_at=None,
        finished_at=None,
        dataset_sha256=dataset.sha256,
        pytest_gta=settings.pytest_gta,
    )


def _per_mode(values: Mapping[str, Any], step: Any, e2e: Any) -> Any:
    """A :class:`PerMode` of ``values`` (keyed by mode), each made by its mode's class."""
    return PerMode[Any, Any](
        step=step(values["step"]) if "step" in values else None,
        e2e=e2e(values["e2e"]) if "e2e" in values else None,
    )


def _metrics_of(mode: str, values: Mapping[str, Any]) -> StepMetrics | E2EMetrics | NoMetrics:
    if not values:
        return NoMetrics()
    return StepMetrics(**values) if mode == "step" else E2EMetrics(**values)


#: Per mode, Table 4 (or ``NoMetrics``) and its denominators.
SoundSections = tuple[
    PerMode[StepMetrics | NoMetrics, E2EMetrics | NoMetrics],
    PerMode[StepDenominators, E2EDenominators],
]


def sound_sections(
    cases: Sequence[CaseResult], dataset: Dataset, named: Mapping[str, Any]
) -> SoundSections:
    """``metrics_sound`` and ``denominators_sound``: ``metrics`` over the sound references.

    The official aggregate, case by case as ``metrics``, over the cases (dataset order) whose
    query ``named`` (the erratum's queries of the run) leaves out; errored cases count as
    wrong, skipped ones are in neither.
    """
    metrics: dict[str, Any] = {}
    denominators: dict[str, Any] = {}
    for mode in MODES:
        ran = [c for c in cases if c.mode == mode and c.outcome != "skipped"]
        if not ran:
            continue
        sound = [c for c in ran if c.query_id not in named]
        metrics[mode] = epoch_metrics(mode, sound, dataset)[0] if sound else {}
        unique = list({c.query_id: c for c in sound}.values())
        denominators[mode] = _denominators(mode, unique, dataset)
    return (
        _per_mode(metrics, lambda v: _metrics_of("step", v), lambda v: _metrics_of("e2e", v)),
        _per_mode(denominators, _same, _same),
    )


def erratum_of_run(
    cases: Sequence[CaseResult], dataset: Dataset, erratum: Erratum
) -> dict[str, tuple[ErratumEntry, ...]]:
    """Query id -> the erratum's entries, for the queries of ``cases`` that it names."""
    return erratum.of_dataset(dataset, dict.fromkeys(c.query_id for c in cases))


def build_report(
    *,
    model: str,
    protocol: str,
    dataset: Dataset,
    data_source: str,
    settings: RunSettings,
    cases: Sequence[CaseResult],
    warnings: Sequence[str] = (),
    leaderboard: LeaderboardRow | None = None,
    prices: tuple[float, float] | None = None,
    stopped: str | None = None,
    interrupted: bool = False,
    interrupted_by: str | None = None,
    timings: Mapping[str, Mapping[str, float]] | None = None,
    shard: ShardInfo | None = None,
    confidence: float = 0.95,
    samples: int = 2000,
    identity: Identity | None = None,
    erratum: Erratum | None = None,
) -> RunReport:
    """The run's report (see module docstring).

    ``confidence`` and ``samples`` set the metrics' bootstrap intervals (``metrics_ci``).
    ``identity`` is what identifies the run (the session's label, commit and dates); without
    one, the run is identified by its model, protocol or agent and dataset alone. ``erratum``
    (default: the one that ships, :func:`pytest_gta.erratum.shipped_erratum`) gives each case
    the faults of its query and ``metrics_sound`` the queries it leaves out.
    """
    if identity is None:
        identity = default_identity(model, protocol, settings, dataset)
    by_key: dict[tuple[str, str, int | None], CaseResult] = {}
    duplicates = []
    for case in cases:
        key = (case.mode, case.query_id, case.epoch)
        if key in by_key:
            duplicates.append(case.id)
        by_key[key] = case
    notes = list(warnings)
    if duplicates:
        notes.append(
            f"{len(duplicates)} case(s) ran more than once ({', '.join(duplicates[:5])}); the "
            "metrics use the last result of each"
        )
    in_order = ordered(by_key.values(), dataset)
    erratum = shipped_erratum() if erratum is None else erratum
    named = erratum_of_run(in_order, dataset, erratum)
    for case in in_order:
        case.erratum = [entry.note() for entry in named.get(case.query_id, ())]
    metrics_sound, denominators_sound = sound_sections(in_order, dataset, named)
    modes = [m for m in MODES if any(c.mode == m for c in in_order)]
    metrics: dict[str, Any] = {}
    metrics_ok: dict[str, Any] = {}
    metrics_by_epoch: dict[str, Any] = {}
    spread: dict[str, Any] = {}
    pass_rate: dict[str, float] = {}
    errors: dict[str, ErrorCounts] = {}
    calls: dict[str, CallCounts] = {}
    denominators: dict[str, Any] = {}
    ran_by_mode: dict[str, list[CaseResult]] = {}
    for mode in modes:
        ran = [c for c in in_order if c.mode == mode and c.outcome != "skipped"]
        if not ran:
            continue
        ran_by_mode[mode] = ran
        scores = [case_score(c, dataset) for c in ran]
        clean = [c for c in ran if c.outcome != "error"]
        metrics[mode], per_epoch = epoch_metrics(mode, ran, dataset)
        metrics_ok[mode] = epoch_metrics(mode, clean, dataset)[0] if clean else {}
        if len(per_epoch) > 1:
            metrics_by_epoch[mode] = per_epoch
            spread[mode] = _spread(per_epoch)
        pass_rate[mode] = sum(c.outcome == "passed" for c in ran) / len(ran) * 100
        errors[mode] = _errors(scores)
        # Counts over every case that ran, every epoch's included (Table 5, Figure 6).
        pooled = mode_metrics(mode, scores)
        total, failed = pooled["tool_call"], pooled["tool_call_error"]
        calls[mode] = CallCounts(successful=total - failed, failed=failed)
        unique = list({c.query_id: c for c in ran}.values())
        denominators[mode] = _denominators(mode, unique, dataset)
    outcomes = dict.fromkeys(OUTCOMES, 0)
    by_mode: dict[str, dict[str, int]] = {}
    for case in in_order:
        outcomes[case.outcome] += 1
        by_mode.setdefault(case.mode, dict.fromkeys(OUTCOMES, 0))[case.outcome] += 1
    if any(e.total() for e in errors.values()):
        notes.append(TABLE5_NOTE)
    # An agent under test beside the oracle is not a reference replay: its failures are its own.
    # Nor under injected faults or left-out tools: the run asked for those failures.
    replayed = settings.tool_faults is None and not settings.tools_left_out
    if model == ORACLE and settings.agent is None and replayed:
        notes += _replay_notes(model, in_order, dataset, settings.sim_threshold)
    if stopped:
        notes.append(f"the session stopped early: {stopped}; the metrics cover the cases that ran")
    if interrupted:
        how = f" ({interrupted_by})" if interrupted_by else ""
        notes.append(
            f"the run was interrupted{how}: the metrics cover only the cases that finished"
        )
    return RunReport(
        schema=SCHEMA,
        model=model,
        protocol=protocol,
        label=identity.label,
        identity=identity,
        leaderboard=leaderboard,
        usage=usage_totals(in_order, prices),
        stopped=stopped,
        interrupted=interrupted,
        interrupted_by=interrupted_by if interrupted else None,
        timings=None if timings is None else {k: dict(v) for k, v in timings.items()},
        shard=shard,
        dataset=DatasetInfo.model_validate(
            {
                "path": dataset.root_str,
                "sha256": dataset.sha256,
                "queries": len(dataset),
                "selected": len({c.query_id for c in in_order}),
                "source": data_source,
                "install": read_install_record(dataset.root),
                "statistics": dataset_statistics(dataset),
                # Of the queries that ran: a filtered run names only the quirks it met.
                "quirks": summarize(find_quirks(dataset, _queries_of(in_order, dataset))),
                "erratum": erratum.use(dataset, named),
            }
        ),
        settings=settings,
        metrics=_per_mode(metrics, StepMetrics.model_validate, E2EMetrics.model_validate),
        metrics_ci=metrics_ci(ran_by_mode, dataset, level=confidence, samples=samples),
        metrics_excluding_errors=_per_mode(
            metrics_ok, lambda v: _metrics_of("step", v), lambda v: _metrics_of("e2e", v)
        ),
        metrics_sound=metrics_sound,
        pass_rate=_per_mode(pass_rate, float, float),
        epochs=max((len(by_epoch(ran)) for ran in ran_by_mode.values()), default=1),
        metrics_by_epoch=_per_mode(
            metrics_by_epoch,
            lambda v: {k: StepMetrics.model_validate(m) for k, m in v.items()},
            lambda v: {k: E2EMetrics.model_validate(m) for k, m in v.items()},
        ),
        metrics_spread=_per_mode(spread, StepSpread.model_validate, E2ESpread.model_validate),
        query_pass_rates=_per_mode(
            {mode: query_pass_rates(ran) for mode, ran in ran_by_mode.items() if mode in spread},
            dict,
            dict,
        ),
        errors=_per_mode(errors, _same, _same),
        tool_calls=_per_mode(calls, _same, _same),
        denominators=_per_mode(denominators, _same, _same),
        denominators_sound=denominators_sound,
        outcomes=OutcomeCounts(**outcomes),
        outcomes_by_mode=_per_mode(
            by_mode, OutcomeCounts.model_validate, OutcomeCounts.model_validate
        ),
        by_type=_per_mode(_by_type(in_order), dict, dict),
        notes=notes,
        cases=in_order,
        robustness=(
            None
            if settings.tool_faults is None
            else robustness_of(
                settings.tool_faults, ((c.faults, c.outcome == "passed") for c in in_order)
            )
        ),
    )


def _same(value: Any) -> Any:
    return value


def complete_verdicts(cases: Sequence[CaseResult], dataset: Dataset, threshold: Any) -> None:
    """Give the scored cases of an earlier report version their whole verdict.

    Reports written before the verdict was kept whole (:mod:`pytest_gta.results.migrate`) have
    each case's metric primitives: the official scorer judges them again, with the query's
    reference, exactly as it judged them when the case ran. A case whose query is not in
    ``dataset``, or whose recorded steps the scorer cannot read, keeps no verdict.
    """
    usable = isinstance(threshold, int | float) and not isinstance(threshold, bool)
    for case in cases:
        if case.verdict is not None or case.primitives is None or not usable:
            continue
        query = dataset.queries.get(case.query_id)
        if query is None:
            continue
        try:
            steps = cast(list[dict[str, Any]], [s.root for s in case.steps])
            scored = case_score(case, dataset)
            dialogs = dataset.reference_dialogs(query)
            # As the run scored it: the reference with the dataset's absolute file paths.
            gold = (
                [dialogs[i] for i in query.assistant_indices]
                if case.mode == "step"
                else dialogs[1:]
            )
            case.verdict = judge(case.mode, steps, gold, query.gt_answer, scored, float(threshold))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            continue
