"""Turning per-case records into the run's report (controller only).

The report is a plain dict, the contract of ``--gta-report``, of the shape
:class:`~pytest_gta.report.schema.RunReport` describes.
Metrics are aggregated here, in dataset order, from the primitives each case carried, so the
numbers do not depend on which process ran which case. Cases that errored are counted as wrong
in ``metrics`` (as the official numbers would count a missing answer) and left out of
``metrics_excluding_errors``; skipped cases are in neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from pytest_gta.datainfo import dataset_statistics
from pytest_gta.dataset import Dataset
from pytest_gta.install.manifest import read_install_record
from pytest_gta.models.oracle import ORACLE
from pytest_gta.quirks import explain_replay_failures, find_quirks, replay_failure_notes, summarize
from pytest_gta.report import stats
from pytest_gta.report.schema import (
    SCHEMA,
    USAGE_PROPERTIES,
    CaseEntry,
    CaseRecord,
    Identity,
    Interval,
    RunReport,
    make_identity,
)
from pytest_gta.results.case import CaseResult
from pytest_gta.results.io import parse_report
from pytest_gta.results.report import RunReport as TypedReport
from pytest_gta.scoring.metrics import (
    E2ECaseScore,
    StepCaseScore,
    aggregate_e2e,
    aggregate_step,
    unanswered_e2e_case,
    unanswered_step_case,
)
from pytest_gta.scoring.verdict import judge
from pytest_gta.vocabulary import ERROR_KINDS, MODEL_S_PROPERTY, MODES, OUTCOMES

TABLE5_NOTE = (
    "Table 5 error types are our mapping (the official repository has no code for it): "
    "format = NoAction + InvalidAction, args = ARGS_ERROR, other (N/A) = other API errors."
)


CaseScore = StepCaseScore | E2ECaseScore


def case_score(record: CaseRecord, dataset: Dataset) -> CaseScore:
    """The case's metric primitives; an errored case without them scores as unanswered."""
    if record.detail is not None:
        score = record.detail["score"]
        cached = record.parsed_score
        # Parsed once per payload: a detail replaced later is parsed anew.
        if cached is not None and cached[0] is score:
            parsed: CaseScore = cached[1]
            return parsed
        parsed = (
            StepCaseScore.from_json(score)
            if record.mode == "step"
            else E2ECaseScore.from_json(score)
        )
        record.parsed_score = (score, parsed)
        return parsed
    if record.mode == "step":
        query = dataset[record.qid]
        steps = [query.dialogs[i] for i in query.assistant_indices]
        return unanswered_step_case(steps, query.gt_answer)
    query = dataset[record.qid]
    return unanswered_e2e_case(list(query.dialogs[1:]), query.gt_answer)


def ordered(records: Iterable[CaseRecord], dataset: Dataset) -> list[CaseRecord]:
    """The records of the dataset's queries by mode, dataset order and epoch (others dropped)."""
    known = [r for r in records if r.qid in dataset.queries]
    mode_order: dict[str, int] = {m: i for i, m in enumerate(MODES)}
    return sorted(
        known,
        key=lambda r: (mode_order.get(r.mode, 99), dataset[r.qid].position, r.epoch or 0),
    )


def mode_metrics(mode: str, scores: Sequence[CaseScore]) -> dict[str, Any]:
    """The mode's official metrics over case scores already in dataset order."""
    if mode == "step":
        return aggregate_step([s for s in scores if isinstance(s, StepCaseScore)])
    return aggregate_e2e([s for s in scores if isinstance(s, E2ECaseScore)])


def by_epoch(records: Sequence[CaseRecord]) -> dict[int | None, list[CaseRecord]]:
    """Records grouped by sampling epoch, each group in the order given (dataset order)."""
    groups: dict[int | None, list[CaseRecord]] = {}
    for record in records:
        groups.setdefault(record.epoch, []).append(record)
    return dict(sorted(groups.items(), key=lambda item: item[0] or 0))


def epoch_metrics(
    mode: str, records: Sequence[CaseRecord], dataset: Dataset
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The mode's metrics over ``records`` (dataset order): the mean over epochs, and each epoch's.

    A single run (one epoch) gets the official aggregate itself, its types and rounding
    untouched. With ``--gta-epochs`` each epoch is aggregated as the official evaluator would
    aggregate a run, then every metric is averaged over the epochs that have it.
    """
    per_epoch = {
        str(epoch): mode_metrics(mode, [case_score(r, dataset) for r in group])
        for epoch, group in by_epoch(records).items()
    }
    if len(per_epoch) == 1:
        return next(iter(per_epoch.values())), per_epoch
    mean: dict[str, Any] = {}
    for key in next(iter(per_epoch.values())):
        values = [m[key] for m in per_epoch.values() if m.get(key) is not None]
        mean[key] = float(sum(values) / len(values)) if values else None
    return mean, per_epoch


def query_pass_rates(records: Sequence[CaseRecord]) -> dict[str, float]:
    """Per query, the share of its epochs that passed (a repeated run's flakiness per query)."""
    counts: dict[str, list[int]] = {}
    for record in records:
        slot = counts.setdefault(record.qid, [0, 0])
        slot[0] += record.outcome == "passed"
        slot[1] += 1
    return {qid: passed / total for qid, (passed, total) in counts.items()}


def query_clusters(
    records: Sequence[CaseRecord], dataset: Dataset
) -> dict[str, list[tuple[CaseScore, float]]]:
    """Per query id (in the order given), its epochs' (score, passed) pairs.

    The query is the unit of resampling of every interval and test (:mod:`.stats`).
    """
    out: dict[str, list[tuple[CaseScore, float]]] = {}
    for record in records:
        passed = 1.0 if record.outcome == "passed" else 0.0
        out.setdefault(record.qid, []).append((case_score(record, dataset), passed))
    return out


def interval(bounds: tuple[float, float] | None, level: float, method: str) -> Interval:
    """An interval as the report writes it (``None`` bounds: it could not be computed)."""
    if bounds is None:
        return {"low": None, "high": None, "level": level, "method": method}
    return {"low": float(bounds[0]), "high": float(bounds[1]), "level": level, "method": method}


def metrics_ci(
    ran_by_mode: Mapping[str, Sequence[CaseRecord]],
    dataset: Dataset,
    *,
    level: float,
    samples: int,
) -> dict[str, dict[str, Interval]]:
    """The report's ``metrics_ci``: per mode and metric, ``low``/``high``/``level``/``method``.

    Errored cases count as wrong, as in ``metrics``; skipped cases are not in ``ran_by_mode``.
    """
    out: dict[str, dict[str, Interval]] = {}
    for mode, records in ran_by_mode.items():
        clusters = query_clusters(records, dataset)
        matrix = stats.query_matrix(mode, list(clusters.values()))
        bounds = stats.bootstrap_ci(mode, matrix, samples=samples, level=level)
        method = f"{stats.METHOD_CI} ({samples} resamples, seed {stats.SEED})"
        out[mode] = {metric: interval(bounds[metric], level, method) for metric in bounds}
    return out


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


def _errors(scores: Sequence[CaseScore]) -> dict[str, int]:
    totals: dict[str, int] = dict.fromkeys(ERROR_KINDS, 0)
    for score in scores:
        errors = score.errors() if isinstance(score, StepCaseScore) else score.errors
        for kind in ERROR_KINDS:
            totals[kind] += int(errors.get(kind, 0))
    return totals


def usage_totals(
    records: Sequence[CaseRecord], prices: tuple[float, float] | None
) -> dict[str, Any]:
    """Token totals of the cases; ``cost_usd`` counts only calls not served from the cache.

    A case's cached calls are a share of its calls; its paid tokens are estimated by that share
    when the case mixes both (the exact paid total is in each worker's ledger, not per case).
    ``model_s`` is the seconds the cases waited on the model (their ``gta_model_s``; 0.0 when
    none was called), so a run's model time adds up the same with and without xdist or shards.
    """
    totals: dict[str, Any] = dict.fromkeys(USAGE_PROPERTIES.values(), 0)
    paid_in = paid_out = 0.0
    model_s = 0.0
    for record in records:
        props = record.properties
        seconds = props.get(MODEL_S_PROPERTY)
        if isinstance(seconds, int | float) and not isinstance(seconds, bool):
            model_s += float(seconds)
        values = {key: int(props.get(prop, 0) or 0) for prop, key in USAGE_PROPERTIES.items()}
        for key, value in values.items():
            totals[key] += value
        made = values["calls"] + values["cached_calls"]
        share = values["calls"] / made if made else 0.0
        paid_in += values["input_tokens"] * share
        paid_out += values["output_tokens"] * share
    totals["cost_usd"] = (
        None if prices is None else (paid_in * prices[0] + paid_out * prices[1]) / 1_000_000
    )
    totals["model_s"] = round(model_s, 6)
    return totals


def _denominators(mode: str, records: Sequence[CaseRecord], dataset: Dataset) -> dict[str, int]:
    queries = [dataset[r.qid] for r in records]
    out = {
        "queries": len(queries),
        "answer_queries": sum(1 for q in queries if q.gt_answer),
        "reference_tool_calls": sum(len(q.calls) for q in queries),
    }
    if mode == "step":
        out["reference_steps"] = sum(len(q.assistant_indices) for q in queries)
    return out


def _queries_of(records: Sequence[CaseRecord], dataset: Dataset) -> list[Any]:
    """The distinct queries of ``records`` (already in dataset order)."""
    return [dataset[qid] for qid in dict.fromkeys(r.qid for r in records)]


def _replay_notes(
    model: str, records: Sequence[CaseRecord], dataset: Dataset, settings: Mapping[str, Any]
) -> list[str]:
    """Why a reference replay failed the cases it failed: dataset quirks, or a harness defect."""
    failed = []
    for record in records:
        if record.outcome != "failed":
            continue
        key = "gta_summ_score" if record.mode == "step" else "gta_answer_score"
        similarity = record.properties.get(key)
        failed.append(
            (
                record.case_id,
                record.qid,
                record.mode,
                similarity if isinstance(similarity, int | float) else None,
            )
        )
    threshold = settings.get("sim_threshold")
    explained = explain_replay_failures(
        dataset, failed, float(threshold) if isinstance(threshold, int | float) else 0.5
    )
    return replay_failure_notes(explained, model)


def build_report(
    *,
    model: str,
    protocol: str,
    dataset: Dataset,
    data_source: str,
    settings: Mapping[str, Any],
    records: Sequence[CaseRecord],
    warnings: Sequence[str] = (),
    leaderboard: Mapping[str, Any] | None = None,
    prices: tuple[float, float] | None = None,
    stopped: str | None = None,
    interrupted: bool = False,
    interrupted_by: str | None = None,
    timings: Mapping[str, Any] | None = None,
    shard: Mapping[str, Any] | None = None,
    confidence: float = 0.95,
    samples: int = 2000,
    identity: Identity | None = None,
) -> RunReport:
    """The run's report dict (see module docstring).

    ``confidence`` and ``samples`` set the metrics' bootstrap intervals (``metrics_ci``).
    ``identity`` is what identifies the run (the session's label, commit and dates); without
    one, the run is identified by its model, protocol or agent and dataset alone.
    """
    if identity is None:
        agent = settings.get("agent")
        name = agent.get("name") if isinstance(agent, Mapping) else None
        version = settings.get("pytest_gta")
        identity = make_identity(
            model=model,
            protocol=protocol,
            agent=name if isinstance(name, str) else None,
            dataset_sha256=dataset.sha256,
            version=version if isinstance(version, str) else None,
        )
    by_key: dict[tuple[str, str, int | None], CaseRecord] = {}
    duplicates = []
    for record in records:
        key = (record.mode, record.qid, record.epoch)
        if key in by_key:
            duplicates.append(record.case_id)
        by_key[key] = record
    notes = list(warnings)
    if duplicates:
        notes.append(
            f"{len(duplicates)} case(s) ran more than once ({', '.join(duplicates[:5])}); the "
            "metrics use the last result of each"
        )
    in_order = ordered(by_key.values(), dataset)
    modes = [m for m in MODES if any(r.mode == m for r in in_order)]
    metrics: dict[str, Any] = {}
    metrics_ok: dict[str, Any] = {}
    metrics_by_epoch: dict[str, Any] = {}
    spread: dict[str, Any] = {}
    pass_rate: dict[str, float] = {}
    errors: dict[str, Any] = {}
    calls: dict[str, Any] = {}
    denominators: dict[str, Any] = {}
    ran_by_mode: dict[str, list[CaseRecord]] = {}
    for mode in modes:
        ran = [r for r in in_order if r.mode == mode and r.outcome != "skipped"]
        if not ran:
            continue
        ran_by_mode[mode] = ran
        scores = [case_score(r, dataset) for r in ran]
        clean = [r for r in ran if r.outcome != "error"]
        metrics[mode], per_epoch = epoch_metrics(mode, ran, dataset)
        metrics_ok[mode] = epoch_metrics(mode, clean, dataset)[0] if clean else {}
        if len(per_epoch) > 1:
            metrics_by_epoch[mode] = per_epoch
            spread[mode] = _spread(per_epoch)
        pass_rate[mode] = sum(r.outcome == "passed" for r in ran) / len(ran) * 100
        errors[mode] = _errors(scores)
        # Counts over every case that ran, every epoch's included (Table 5, Figure 6).
        pooled = mode_metrics(mode, scores)
        total, failed = pooled["tool_call"], pooled["tool_call_error"]
        calls[mode] = {"successful": total - failed, "failed": failed}
        unique = list({r.qid: r for r in ran}.values())
        denominators[mode] = _denominators(mode, unique, dataset)
    outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
    by_mode: dict[str, dict[str, int]] = {}
    cases: list[CaseEntry] = []
    for record in in_order:
        outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
        by_mode.setdefault(record.mode, dict.fromkeys(OUTCOMES, 0))[record.outcome] += 1
        cases.append(record.entry(dataset[record.qid].type))
    if any(sum(counts.values()) for counts in errors.values()):
        notes.append(TABLE5_NOTE)
    by_type: dict[str, dict[str, dict[str, Any]]] = {}
    for case in cases:
        if case["outcome"] == "skipped":
            continue
        slot = by_type.setdefault(str(case["mode"]), {}).setdefault(
            str(case["type"]), {"cases": 0, "passed": 0, "score_sum": 0.0}
        )
        slot["cases"] += 1
        slot["passed"] += case["outcome"] == "passed"
        slot["score_sum"] += float(case["score"])
    for types in by_type.values():
        for slot in types.values():
            slot["mean_score"] = slot.pop("score_sum") / slot["cases"]
    # An agent under test beside the oracle is not a reference replay: its failures are its own.
    if model == ORACLE and not settings.get("agent"):
        notes += _replay_notes(model, in_order, dataset, settings)
    if stopped:
        notes.append(f"the session stopped early: {stopped}; the metrics cover the cases that ran")
    if interrupted:
        how = f" ({interrupted_by})" if interrupted_by else ""
        notes.append(
            f"the run was interrupted{how}: the metrics cover only the cases that finished"
        )
    return {
        "schema": SCHEMA,
        "model": model,
        "protocol": protocol,
        "label": identity["label"],
        "identity": identity,
        "leaderboard": None if leaderboard is None else dict(leaderboard),
        "usage": usage_totals(in_order, prices),
        "stopped": stopped,
        "interrupted": interrupted,
        "interrupted_by": interrupted_by if interrupted else None,
        "timings": None if timings is None else dict(timings),
        "shard": None if shard is None else dict(shard),
        "dataset": {
            "path": dataset.root_str,
            "sha256": dataset.sha256,
            "queries": len(dataset),
            "selected": len({r.qid for r in in_order}),
            "source": data_source,
            "install": read_install_record(dataset.root),
            "statistics": dataset_statistics(dataset),
            # Of the queries that ran: a filtered run names only the quirks it met.
            "quirks": summarize(find_quirks(dataset, _queries_of(in_order, dataset))),
        },
        "settings": dict(settings),
        "metrics": metrics,
        "metrics_ci": metrics_ci(ran_by_mode, dataset, level=confidence, samples=samples),
        "metrics_excluding_errors": metrics_ok,
        "pass_rate": pass_rate,
        "epochs": max((len(by_epoch(ran)) for ran in ran_by_mode.values()), default=1),
        "metrics_by_epoch": metrics_by_epoch,
        "metrics_spread": spread,
        "query_pass_rates": {
            mode: query_pass_rates(ran) for mode, ran in ran_by_mode.items() if mode in spread
        },
        "errors": errors,
        "tool_calls": calls,
        "denominators": denominators,
        "outcomes": outcomes,
        "outcomes_by_mode": by_mode,
        "by_type": by_type,
        "notes": notes,
        "cases": cases,
    }


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
        dialogs = dataset.reference_dialogs(query)
        gold = [dialogs[i] for i in query.assistant_indices] if case.mode == "step" else dialogs[1:]
        raw = case.primitives.to_json_value()
        try:
            scored: CaseScore = (
                StepCaseScore.from_json(raw) if case.mode == "step" else E2ECaseScore.from_json(raw)
            )
            steps = cast(list[dict[str, Any]], [s.root for s in case.steps])
            case.verdict = judge(case.mode, steps, gold, query.gt_answer, scored, float(threshold))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            continue


def typed_report(report: Mapping[str, Any], dataset: Dataset | None) -> TypedReport:
    """TRANSITIONAL: the typed report of a report dict built by :func:`build_report`.

    While the session still builds the report as a dict, the renderers that already take the
    typed report get it through here. Removed once :func:`build_report` returns the model.
    """
    typed = parse_report("", dict(report), "").report
    if dataset is not None:
        complete_verdicts(typed.cases, dataset, typed.settings.sim_threshold)
    return typed
