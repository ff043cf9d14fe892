"""A run as Inspect AI eval logs (``--gta-inspect-log=DIR``), built with ``inspect_ai``'s own types.

A team that evaluates with `Inspect <https://inspect.aisi.org.uk/>`_ browses its runs in
``inspect view``; a GTA run written here opens there beside them. The log is made from the
finished report (the typed :class:`~pytest_gta.results.report.RunReport`, already cleaned of
secrets and non-finite numbers, see :mod:`pytest_gta.outward`) and the dataset, through
Inspect's pydantic models and its ``write_eval_log``, so the file is whatever Inspect itself
would write and read.

One log per mode: Inspect's results, its headline metric and its sample list are per task, and
GTA's two modes are two tasks with different metrics (Table 4's two halves), so each is a task
``gta_step`` / ``gta_e2e`` of one run (the logs share the ``run_id``). A sample is a case;
Inspect identifies a sample by its id *and* epoch and groups a sample's epochs by id, so with
``--gta-epochs`` the id is the case id without its epoch (``e2e-17``) and the epoch is Inspect's
(1-based, in the order of the run's epochs); the case's own id (``e2e-17@epoch1``) is in the
sample's metadata.

``inspect_ai`` is imported inside the functions only: a heavy optional dependency (pydantic
models, fsspec, botocore) that must never be on the plugin's import path; the session checks
it is installed when the option is given (:func:`pytest_gta.options.report.check_inspect_log`).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import JsonValue

from pytest_gta.case import Case
from pytest_gta.dataset import Dataset, Query
from pytest_gta.files import write_output
from pytest_gta.report.inspect_transcript import e2e_messages, field_of, step_messages, text_of
from pytest_gta.report.robustness import faults_json
from pytest_gta.results.base import Doc, Number
from pytest_gta.results.case import CaseResult
from pytest_gta.results.primitives import E2EPrimitives, StepPrimitives
from pytest_gta.results.report import E2EMetrics, Interval, RunReport, StepMetrics
from pytest_gta.vocabulary import ERROR_KINDS, MODES, Mode

if TYPE_CHECKING:
    from inspect_ai.log import EvalError, EvalLog, EvalResults, EvalSample
    from inspect_ai.model import ModelOutput

#: The scorer's name in the logs (each sample's ``scores`` key, the results' score).
SCORER = "gta"
#: Inspect's task per mode.
TASKS: dict[str, str] = {"step": "gta_step", "e2e": "gta_e2e"}
TASK_TITLES: dict[str, str] = {"step": "GTA step-by-step", "e2e": "GTA end-to-end"}
#: Table 4's metrics per mode, in the order Inspect shows them: its headline is the first
#: (InstAcc for step mode, AnsAcc end to end, the paper's lead numbers). The report's metric
#: sections list them in that order, so the names come from there (a renderer never scores).
MODE_METRICS: dict[str, tuple[str, ...]] = {
    "step": tuple(StepMetrics.model_fields),
    "e2e": tuple(E2EMetrics.model_fields),
}
#: Base62, as Inspect's own ids (shortuuid) look: no ``_`` or ``-``, which its file names split on.
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#: Outcomes of a case that was scored (Inspect's "completed" samples).
_SCORED = ("passed", "failed")


# --------------------------------------------------------------------------------------------
# Ids, sections and file names


def _short_id(*parts: Any) -> str:
    """A 22-character base62 id derived from ``parts`` (writing a report twice: the same id)."""
    number = int.from_bytes(hashlib.sha256(text_of(list(parts)).encode()).digest()[:16], "big")
    out = []
    for _ in range(22):
        number, digit = divmod(number, 62)
        out.append(_ALPHABET[digit])
    return "".join(out)


def _utc(value: str | None) -> str | None:
    """An ISO-8601 time as Inspect writes it (UTC, ``+00:00``, seconds); ``None`` if unreadable."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds")


def _json(section: Doc | None) -> JsonValue:
    """A report section as the report file writes it, so the log's metadata reads the same."""
    return None if section is None else cast(JsonValue, section.to_json_value())


def _json_map(sections: Mapping[str, Doc] | None) -> JsonValue:
    """A ``{name: section}`` of the report (``by_type``, ``metrics_by_epoch``) as JSON."""
    return None if sections is None else {key: _json(value) for key, value in sections.items()}


def log_file_name(created: str, mode: str, task_id: str) -> str:
    """Inspect's ``{created}_{task}_{id}.eval``, each part cleaned as Inspect cleans them.

    ``mode`` is a mode (its task's name is used) or a task's own name (``gta_workflow``).

    ``inspect view`` and ``list_eval_logs`` read the task and id from the name; Inspect writes
    ``_``, ``/``, ``:`` and ``+`` in a part as ``-`` so that ``_`` separates the parts.
    """

    def clean(part: str) -> str:
        for char in "_/:+":
            part = part.replace(char, "-")
        return part

    return f"{clean(created)}_{clean(TASKS.get(mode, mode))}_{clean(task_id)}.eval"


# --------------------------------------------------------------------------------------------
# Samples


def _final_answer(case: CaseResult) -> str:
    """The case's answer: the agent's own, else the last assistant step without calls.

    Unlike ``CaseResult.final_answer``, an answer step without content is passed over, and a
    non-text one is shown as JSON, as the transcript shows it.
    """
    if case.agent is not None and case.agent.answer is not None:
        return case.agent.answer
    for step in reversed(case.steps):
        if step.is_answer and step.content is not None:
            return text_of(step.content)
    return ""


def _target(query: Query | None) -> str | list[str]:
    """The reference answer as Inspect's target (the full one is in the sample's metadata).

    Objective queries: one entry per whitelist group, its alternatives joined by `` / `` (the
    official match needs every group, any one of its alternatives); subjective queries: the
    reference texts; image queries (no reference answer) and unknown shapes: empty.
    """
    answer = query.gt_answer if query is not None else None
    if isinstance(answer, Mapping):
        groups = answer.get("whitelist")
        if isinstance(groups, list):
            return [
                " / ".join(text_of(a) for a in g) if isinstance(g, list) else text_of(g)
                for g in groups
            ]
        return ""
    if isinstance(answer, list):
        return [text_of(a) for a in answer]
    return "" if answer is None else text_of(answer)


def _error_counts(case: CaseResult) -> dict[str, int | None]:
    """The case's errored calls by Table 5 class, as its ``gta_errors_*`` properties count them.

    ``None`` each where the case was not scored (:func:`~pytest_gta.results.case.case_properties`).
    """
    primitives = case.primitives
    if isinstance(primitives, StepPrimitives):
        return {k: sum(s.error == k for s in primitives.steps) for k in ERROR_KINDS}
    if isinstance(primitives, E2EPrimitives):
        return {k: primitives.errors.get(k) for k in ERROR_KINDS}
    return dict.fromkeys(ERROR_KINDS)


def _sample(
    case: CaseResult, dataset: Dataset, epochs: Mapping[int, int], model: str
) -> EvalSample:
    """One case as an Inspect sample: input, target, transcript, output, score, metadata."""
    from inspect_ai.log import EvalSample  # a heavy optional dependency
    from inspect_ai.model import (
        ChatMessageUser,
        ModelUsage,
    )
    from inspect_ai.scorer import Score

    mode, qid = case.mode, case.query_id
    query = dataset.queries.get(qid)
    text = query.text if query is not None else ""
    answer = _final_answer(case)
    transcript = (
        step_messages(case, dataset, query, model) if mode == "step" else e2e_messages(case, model)
    )
    outcome = case.outcome
    message = case.message
    usage = {}
    if case.usage is not None and case.usage.any:
        used_in, used_out = case.usage.input_tokens, case.usage.output_tokens
        usage[model] = ModelUsage(
            input_tokens=used_in, output_tokens=used_out, total_tokens=used_in + used_out
        )
    files = dataset.abs_files(query) if query is not None else []
    metadata: dict[str, Any] = {
        "case_id": case.id,
        "query_id": qid,
        "mode": mode,
        "type": case.type,
        "epoch": case.epoch,
        "outcome": outcome,
        "nodeid": case.nodeid,
        "files": files,
        "tools": list(query.tool_names) if query is not None else [],
        "categories": list(query.categories) if query is not None else [],
        "reference": query.gt_answer if query is not None else None,
        "backends": dict(case.backends),
        "errors": _error_counts(case),
        "error_kind": "harness" if outcome == "error" else None,
    }
    if case.agent is not None:
        metadata["agent"] = _json(case.agent)
    if case.faults is not None:
        metadata["faults"] = faults_json(case.faults)
    return EvalSample(
        id=Case.format_id(mode, qid),
        epoch=epochs[case.epoch or 0],
        input=text,
        target=_target(query),
        messages=[ChatMessageUser(content=text, source="input"), *transcript],
        output=answer_output(answer, model),
        scores={
            SCORER: Score(
                value=float(case.score),
                answer=answer,
                explanation=message or None,
                metadata={"outcome": outcome, "properties": dict(case.properties)},
            )
        },
        metadata=metadata,
        model_usage=usage,
        total_time=case.duration,
        uuid=_short_id("sample", model, case.id, case.nodeid),
        error=error_record(message) if outcome == "error" else None,
    )


# --------------------------------------------------------------------------------------------
# The log of one mode


def answer_output(answer: str, model: str) -> ModelOutput:
    """A sample's output: the final answer as the model's one choice."""
    from inspect_ai.model import (  # a heavy optional dependency
        ChatCompletionChoice,
        ChatMessageAssistant,
        ModelOutput,
    )

    message = ChatMessageAssistant(content=answer, model=model, source="generate")
    choice = ChatCompletionChoice(message=message, stop_reason="stop")
    return ModelOutput(model=model, choices=[choice], completion=answer)


def _number(section: Doc | None, name: str) -> Number | None:
    """The metric ``name`` of a metrics section (``None``: undefined, or not in the section)."""
    value = getattr(section, name, None)
    return value if isinstance(value, int | float) else None


def _results(report: RunReport, mode: str, cases: Sequence[CaseResult]) -> EvalResults:
    """Inspect's results: every Table 4 metric and the pass rate, each with its interval."""
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore  # a heavy optional dependency

    values = report.metrics.get(mode)
    pass_rate = report.pass_rate.get(mode)
    intervals = report.metrics_ci.get(mode)
    metrics = {}
    for name in (*MODE_METRICS[mode], "pass_rate"):
        value = pass_rate if name == "pass_rate" else _number(values, name)
        if value is None:
            continue  # undefined here (no answer queries): Inspect's metrics are numbers
        interval = getattr(intervals, name, None)  # the counts (tool_call) have none
        metadata = interval.to_json_value() if isinstance(interval, Interval) else None
        metrics[name] = EvalMetric(name=name, value=value, metadata=metadata)
    scored = sum(1 for c in cases if c.outcome in _SCORED)
    return EvalResults(
        total_samples=len(cases),
        completed_samples=scored,
        scores=[
            EvalScore(
                name=SCORER,
                scorer=SCORER,
                scored_samples=scored,
                unscored_samples=len(cases) - scored,
                metrics=metrics,
                metadata={
                    "percent": True,
                    "outcomes": _json(report.outcomes_by_mode.get(mode)),
                    "errors": _json(report.errors.get(mode)),
                    "tool_calls": _json(report.tool_calls.get(mode)),
                    "denominators": _json(report.denominators.get(mode)),
                    "by_type": _json_map(report.by_type.get(mode)),
                },
            )
        ],
        metadata=_by_mode(report, mode) or None,
    )


def _by_mode(report: RunReport, mode: str) -> dict[str, JsonValue]:
    """This mode's part of the report's per-mode sections beside the metrics, where it has one."""
    found = {
        "metrics_excluding_errors": _json(report.metrics_excluding_errors.get(mode)),
        "metrics_spread": _json(report.metrics_spread.get(mode)),
        "metrics_by_epoch": _json_map(report.metrics_by_epoch.get(mode)),
    }
    return {key: value for key, value in found.items() if value is not None}


def _status(report: RunReport) -> tuple[Literal["success", "cancelled", "error"], str | None]:
    """Inspect's status: ``cancelled`` after Ctrl-C/SIGTERM, ``error`` when the run stopped."""
    if report.interrupted:
        how = report.interrupted_by
        return "cancelled", f"interrupted{f' by {how}' if how else ''}"
    if report.stopped:
        return "error", report.stopped
    return "success", None


def mode_log(report: RunReport, dataset: Dataset, mode: str, created: str) -> EvalLog:
    """The Inspect log of one mode of the run."""
    from inspect_ai.log import (  # a heavy optional dependency (see the module doc)
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalPlan,
        EvalPlanStep,
        EvalSpec,
        EvalStats,
    )
    from inspect_ai.model import ModelUsage

    settings = report.settings
    identity = report.identity
    model = report.model or "unknown"
    cases = [c for c in report.cases if c.mode == mode]
    epochs = {e: n + 1 for n, e in enumerate(sorted({c.epoch or 0 for c in cases}))}
    run_key = (created, model, report.label, report.dataset.sha256)
    task_id = _short_id("task", *run_key, mode)
    samples = [_sample(c, dataset, epochs, model) for c in cases]
    agent = _json(settings.agent)
    protocol = report.protocol
    # The agent's settings as Python writes a dict: what the solver has always been named.
    solver = f"agent {agent}" if agent else f"gta_{mode}_{protocol}"
    status, why = _status(report)
    base_url = field_of(settings.generation, "base_url")  # without its password (outward)
    used_in = sum(c.usage.input_tokens for c in cases if c.usage is not None and c.usage.any)
    used_out = sum(c.usage.output_tokens for c in cases if c.usage is not None and c.usage.any)
    task_args = {
        key: value
        for key, value in (
            ("tools", settings.tools),
            ("sim_model", settings.sim_model),
            ("sim_threshold", settings.sim_threshold),
            ("max_turns", settings.max_turns),
            ("limit", settings.limit),
            ("ids", settings.ids),
            ("shard", settings.shard),
        )
        if value is not None
    }
    metadata: dict[str, Any] = {
        "pytest_gta": settings.pytest_gta,
        "dataset_sha256": report.dataset.sha256,
        "dataset_source": report.dataset.source,
        "protocol": protocol,
        "agent": agent,
        "settings": _json(settings),
        "usage": _json(report.usage),
        "leaderboard": _json(report.leaderboard),
        "notes": list(report.notes),
    }
    optional: dict[str, JsonValue] = {
        "label": report.label,
        "identity": _json(identity),
        "shard": _json(report.shard),
        "merged": _json(report.merged),
        "gates": _json(report.gates),
        "duration_s": report.duration_s,
    }
    metadata.update({key: value for key, value in optional.items() if value is not None})
    return EvalLog(
        status=status,
        eval=EvalSpec(
            eval_id=_short_id("eval", *run_key, mode),
            run_id=_short_id("run", *run_key),
            created=created,
            task=TASKS[mode],
            task_id=task_id,
            task_version=settings.pytest_gta,
            task_display_name=TASK_TITLES[mode],
            task_args={"mode": mode, "protocol": protocol, **task_args},
            solver=solver,
            tags=["gta", mode, report.label],
            dataset=EvalDataset(
                name="gta",
                location=report.dataset.path,
                samples=len({c.query_id for c in cases}),
                sample_ids=list(dict.fromkeys(Case.format_id(mode, c.query_id) for c in cases)),
                shuffled=False,
            ),
            model=model,
            model_base_url=base_url if isinstance(base_url, str) else None,
            config=EvalConfig(
                epochs=max(report.epochs, 1),
                limit=settings.limit,
                sample_id=settings.ids,
            ),
            packages={"pytest-gta": settings.pytest_gta},
            metadata=metadata,
        ),
        plan=EvalPlan(
            name="gta",
            steps=[
                EvalPlanStep(
                    solver=solver,
                    params={
                        "mode": mode,
                        "protocol": protocol,
                        "agent": agent,
                        "max_turns": settings.max_turns,
                        "tool_routes": settings.tool_routes,
                    },
                )
            ],
        ),
        results=_results(report, mode, cases),
        stats=EvalStats(
            started_at=_utc(identity.started_at) or created,
            completed_at=_utc(identity.finished_at) or "",
            model_usage=(
                {
                    model: ModelUsage(
                        input_tokens=used_in,
                        output_tokens=used_out,
                        total_tokens=used_in + used_out,
                    )
                }
                if used_in or used_out
                else {}
            ),
        ),
        error=error_record(why) if why else None,
        samples=samples,
    )


def eval_logs(report: RunReport, dataset: Dataset, now: datetime | None = None) -> list[EvalLog]:
    """The run's Inspect logs, one per mode it ran (in Table 4's order).

    ``created`` is when the run started (the report's ``identity.started_at``), else ``now``.
    """
    moment = now or datetime.now(timezone.utc)
    created = _utc(report.identity.started_at) or moment.astimezone(timezone.utc).isoformat(
        timespec="seconds"
    )
    modes: list[Mode] = [m for m in MODES if m in report.settings.modes]
    return [mode_log(report, dataset, mode, created) for mode in modes]


def write_inspect_logs(report: RunReport, dataset: Dataset, directory: Path) -> list[Path]:
    """Write the run's logs into ``directory`` (made if missing); the files written.

    Raises:
        OSError: ``directory`` or a file cannot be written.
    """
    return save_logs(
        [(log, str(log.eval.task_args["mode"])) for log in eval_logs(report, dataset)], directory
    )


def save_logs(logs: Sequence[tuple[EvalLog, str]], directory: Path) -> list[Path]:
    """Write each ``(log, task name)`` into ``directory`` (made if missing); the files written.

    Each is written by Inspect's ``write_eval_log`` into a private temporary directory, then
    put in place as every report file is (:func:`~pytest_gta.files.write_output`: whole or not
    at all, following the umask), so ``inspect view`` never lists a half-written log. Every
    benchmark's logs are written here (GTA-Workflow's, a scored benchmark's).

    Raises:
        OSError: ``directory`` or a file cannot be written.
    """
    from inspect_ai.log import write_eval_log  # a heavy optional dependency

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="gta-inspect-") as scratch:
        for log, task in logs:
            name = log_file_name(log.eval.created, task, log.eval.task_id)
            staged = Path(scratch) / name
            write_eval_log(log, str(staged), format="eval")
            write_output(directory / name, staged.read_bytes())
            written.append(directory / name)
    return written


def error_record(message: str) -> EvalError:
    """An errored sample's ``error``: the message (all the report keeps of what broke)."""
    from inspect_ai.log import EvalError  # a heavy optional dependency

    return EvalError(message=message or "error", traceback=message, traceback_ansi=message)
