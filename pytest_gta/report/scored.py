"""A scored benchmark's outputs: the terminal's table, markdown, the HTML page, the Inspect log.

Renderers of :mod:`pytest_gta.results.scored` (they never score): what a third party's
benchmark gets without writing a renderer. The page is static markup under a strict
Content-Security-Policy (no script, no request); report text is escaped everywhere.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_gta.report.inspect_log import answer_output, error_record, save_logs
from pytest_gta.report.page import clip, esc
from pytest_gta.results.scored import ScoredCase, ScoredReport, ScoredRuns

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample

#: The page's policy: its own styles and nothing else.
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def headline(report: ScoredReport) -> str:
    """Which benchmark, model and data; how many cases counted and errored."""
    return (
        f"{report.benchmark}: {report.label} ({report.model}) on {report.dataset}; "
        f"{report.counted} cases counted, {report.errors} errors"
    )


def _gates(report: ScoredReport) -> list[str]:
    if report.gates is None:
        return []
    lines = [f"gates: {'passed' if report.gates.passed else 'FAILED'}"]
    lines += [f"  {'ok ' if v.passed else 'NO '} {v.reason}" for v in report.gates.verdicts]
    return lines


def _comparison(report: ScoredReport) -> list[str]:
    found = report.comparison
    if found is None:
        return []
    lines = [f"against {found.baseline_label} ({found.matched} cases paired):"]
    for name, row in found.metrics.items():
        p = "" if row.p_drop is None else f", p(drop) {row.p_drop:.4f}"
        diff = "-" if row.difference is None else f"{row.difference:+.2f}"
        lines.append(f"  {name}: {_num(row.baseline)} -> {_num(row.this)} ({diff}{p})")
    if found.regressed:
        lines.append(f"  regressed: {', '.join(found.regressed)}")
    return lines


def table_lines(report: ScoredReport) -> list[str]:
    """The terminal's table: the metrics, each case, the comparison and the gates."""
    names = list(report.metrics)
    lines = [headline(report), "  ".join(f"{n:>12}" for n in names)]
    lines.append("  ".join(f"{_num(report.metrics[n]):>12}" for n in names))
    for case in report.cases:
        scores = ", ".join(f"{k} {_num(v)}" for k, v in case.scores.items())
        lines.append(f"  {case.id}: {case.outcome} ({scores or 'no score'})")
    return [*lines, *_comparison(report), *_gates(report), *report.notes]


def render_markdown(report: ScoredReport) -> str:
    """The run as markdown (the GitHub job summary's too)."""
    names = list(report.metrics)
    out = [f"## {report.benchmark}: {report.label}", "", headline(report), ""]
    out += ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    out += ["| " + " | ".join(_num(report.metrics[n]) for n in names) + " |", ""]
    out += ["| case | outcome | scores | message |", "|---|---|---|---|"]
    for case in report.cases:
        scores = ", ".join(f"{k} {_num(v)}" for k, v in case.scores.items())
        message = case.message.replace("|", "\\|").replace("\n", " ")
        out.append(f"| {case.id} | {case.outcome} | {scores} | {message} |")
    extra = [*_comparison(report), *_gates(report), *report.notes]
    return "\n".join([*out, "", *(f"- {line.strip()}" for line in extra)]).rstrip() + "\n"


def _case_html(case: ScoredCase) -> str:
    scores = "".join(f"<td>{esc(_num(v))}</td>" for v in case.scores.values())
    detail = json.dumps(case.detail, indent=1, ensure_ascii=False)
    return (
        f'<tr class="{esc(case.outcome)}"><td>{esc(case.id)}</td><td>{esc(case.outcome)}</td>'
        f"{scores}<td>{esc(clip(case.message))}</td>"
        f"<td><details><summary>detail</summary><pre>{esc(clip(detail))}</pre></details></td></tr>"
    )


def render_html(report: ScoredReport, max_bytes: int | None = None) -> str:
    """The run as one static page (escaped; ``max_bytes`` cuts the case rows, saying so)."""
    names = list(report.metrics)
    score_names = sorted({k for c in report.cases for k in c.scores})
    head = "".join(f"<th>{esc(n)}</th>" for n in names)
    values = "".join(f"<td>{esc(_num(report.metrics[n]))}</td>" for n in names)
    rows = [_case_html(c) for c in report.cases]
    shown = rows
    note = ""
    if max_bytes is not None:
        total, shown = 0, []
        for row in rows:
            total += len(row.encode("utf-8"))
            if total > max_bytes:
                note = f"<p>{len(rows) - len(shown)} case rows left out (the page's size limit)</p>"
                break
            shown.append(row)
    extra = "".join(f"<li>{esc(line)}</li>" for line in [*_comparison(report), *_gates(report)])
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        f"<title>{esc(report.benchmark)}: {esc(report.label)}</title>"
        "<style>table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
        ".failed,.error{background:#ffebe9}</style></head><body>"
        f"<h1>{esc(report.benchmark)}: {esc(report.label)}</h1><p>{esc(headline(report))}</p>"
        f"<table><tr>{head}</tr><tr>{values}</tr></table><ul>{extra}</ul>"
        "<table><tr><th>case</th><th>outcome</th>"
        + "".join(f"<th>{esc(n)}</th>" for n in score_names)
        + f"<th>message</th><th></th></tr>{''.join(shown)}</table>{note}"
        + "".join(f"<p>{esc(n)}</p>" for n in report.notes)
        + "</body></html>\n"
    )


def runs_lines(runs: ScoredRuns) -> list[str]:
    """``--gta-compare``'s table: one row per run."""
    names = sorted({n for r in runs.runs for n in r.metrics})
    lines = ["run".ljust(24) + "".join(f"{n:>14}" for n in names)]
    for run in runs.runs:
        lines.append(
            run.label[:24].ljust(24) + "".join(f"{_num(run.metrics.get(n)):>14}" for n in names)
        )
    return [*lines, *runs.notes]


def runs_markdown(runs: ScoredRuns) -> str:
    """``--gta-compare``'s table as markdown."""
    names = sorted({n for r in runs.runs for n in r.metrics})
    out = ["| run | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for run in runs.runs:
        values = " | ".join(_num(run.metrics.get(n)) for n in names)
        out.append(f"| {run.label.replace('|', '/')} | {values} |")
    return "\n".join([*out, *(f"- {n}" for n in runs.notes)]) + "\n"


def _sample(case: ScoredCase, epochs: dict[int, int], model: str) -> EvalSample:
    from inspect_ai.log import EvalSample  # a heavy optional dependency
    from inspect_ai.scorer import Score

    answer = json.dumps(case.detail, ensure_ascii=False)
    return EvalSample(
        id=case.id.partition("@")[0],
        epoch=epochs[case.epoch or 0],
        input=case.id,
        target="",
        output=answer_output(answer, model),
        scores={
            name: Score(value=0.0 if value is None else value)
            for name, value in case.scores.items()
        },
        metadata={"nodeid": case.nodeid, "outcome": case.outcome, "passed": case.passed},
        total_time=case.duration,
        error=error_record(case.message) if case.outcome == "error" else None,
    )


def scored_log(report: ScoredReport, created: str) -> EvalLog:
    """The Inspect log of a scored run."""
    from inspect_ai.log import (  # a heavy optional dependency
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalResults,
        EvalScore,
        EvalSpec,
        EvalStats,
    )

    cases = report.cases
    epochs = {e: n + 1 for n, e in enumerate(sorted({c.epoch or 0 for c in cases}))}
    metrics = {
        name: EvalMetric(name=name, value=value)
        for name, value in report.metrics.items()
        if value is not None
    }
    return EvalLog(
        status="success",
        eval=EvalSpec(
            created=created,
            task=report.benchmark,
            task_id=f"{report.benchmark}-{created}",
            dataset=EvalDataset(
                name=report.benchmark,
                location=report.dataset,
                samples=len({c.id.partition("@")[0] for c in cases}),
                shuffled=False,
            ),
            model=report.model or "unknown",
            config=EvalConfig(epochs=max(len(epochs), 1)),
            metadata={"label": report.label},
        ),
        results=EvalResults(
            total_samples=len(cases),
            completed_samples=report.counted - report.errors,
            scores=[EvalScore(name=report.benchmark, scorer=report.benchmark, metrics=metrics)],
        ),
        stats=EvalStats(started_at=created, completed_at=created),
        samples=[_sample(c, epochs, report.model or "unknown") for c in cases],
    )


def write_scored_inspect_log(
    report: ScoredReport, directory: Path, now: datetime | None = None
) -> Path:
    """Write the run's Inspect log into ``directory`` (made if missing); the file written.

    Raises:
        OSError: ``directory`` or the file cannot be written.
    """
    moment = now or datetime.now(timezone.utc)
    created = moment.astimezone(timezone.utc).isoformat(timespec="seconds")
    return save_logs([(scored_log(report, created), report.benchmark)], directory)[0]
