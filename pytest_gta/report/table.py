"""Pure renderers of the typed report: terminal text and markdown.

They only read the report (:class:`~pytest_gta.results.report.RunReport`), never score, so what
is printed, written as markdown and written as JSON can never disagree. The metric registry
below names each column the way the paper does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_gta.flags import OPT_MERGE
from pytest_gta.outward import terminal_text
from pytest_gta.report.robustness import robustness_tables
from pytest_gta.results.report import (
    AgentIsolation,
    BaselineComparison,
    E2EIntervals,
    E2EMetrics,
    E2ESpread,
    Interval,
    LeaderboardRow,
    NoMetrics,
    Quirk,
    RunReport,
    RunUsage,
    Spread,
    StepIntervals,
    StepMetrics,
    StepSpread,
)


@dataclass(frozen=True)
class Column:
    """A metric column: report key, paper label, and whether it is a percentage."""

    key: str
    label: str
    percent: bool = True
    higher_is_better: bool = True


STEP_COLUMNS = (
    Column("inst_acc", "InstAcc"),
    Column("tool_acc", "ToolAcc"),
    Column("arg_acc", "ArgAcc"),
    Column("summ_acc", "SummAcc"),
    Column("tool_call", "Calls", percent=False),
    Column("tool_call_error", "Call errors", percent=False, higher_is_better=False),
)
E2E_COLUMNS = (
    Column("p_f1", "P F1"),
    Column("o_f1", "O F1"),
    Column("l_f1", "L F1"),
    Column("c_f1", "C F1"),
    Column("ans_acc", "AnsAcc"),
    Column("ans_acc_img", "Ans+I"),
    Column("tool_call", "Calls", percent=False),
    Column("tool_call_error", "Call errors", percent=False, higher_is_better=False),
)
#: Notes beyond this many are left to the JSON report, so the summary stays readable.
MAX_NOTES = 10
MODE_TITLES = {"step": "step-by-step mode", "e2e": "end-to-end mode"}
MODE_COLUMNS = {"step": STEP_COLUMNS, "e2e": E2E_COLUMNS}


def fmt(value: float | None, percent: bool = True) -> str:
    """A metric for display: two decimals for percentages, ``n/a`` for undefined."""
    if value is None:
        return "n/a"
    if percent:
        return f"{float(value):.2f}"
    return str(value)


def aligned(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A table as terminal lines: the first column left-aligned, the others right-aligned."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]
    lines = []
    for row in (headers, *rows):
        cells = [
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


#: What markdown acts on in text taken from a report: raw HTML (``<``, ``>``, ``&``), links and
#: images (``[``, ``]``), code spans, ``*`` emphasis, a table's ``|``, and the backslash itself.
_MARKDOWN_ACTIVE = re.compile(r"[\\`*\[\]<>&|]")
#: Around text a renderer wants bold: made ``**`` after the text is escaped (control characters,
#: which :func:`markdown_text` never lets through from the text itself).
STRONG_ON, STRONG_OFF = "\x02", "\x03"
_STRONG = re.compile(f"({STRONG_ON}|{STRONG_OFF})")


def strong(text: str) -> str:
    """``text`` to be shown bold by :func:`markdown_text`."""
    return f"{STRONG_ON}{text}{STRONG_OFF}"


def markdown_text(text: str) -> str:
    """Text from a report (a label, a model, a path, a note) as markdown shows it: literally.

    Markdown files go to job summaries and pull requests, where a label like
    ``<img src=...>`` or ``[x](...)`` would render; each active character is escaped, a control
    character shown as its escape, a line break made a space (it would end a table row), and
    only :func:`strong`'s marks become ``**``.
    """
    out = []
    for part in _STRONG.split(str(text)):
        if part in (STRONG_ON, STRONG_OFF):
            out.append("**")
            continue
        flat = terminal_text(part.replace("\r", " ").replace("\n", " "))
        out.append(_MARKDOWN_ACTIVE.sub(lambda m: "\\" + m.group(), flat))
    return "".join(out)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A table as markdown lines, every cell shown literally, the numbers' columns right-aligned."""
    lines = ["| " + " | ".join(markdown_text(h) for h in headers) + " |"]
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|")
    lines += ["| " + " | ".join(markdown_text(c) for c in row) + " |" for row in rows]
    return lines


def metric_value(metrics: StepMetrics | E2EMetrics | LeaderboardRow, key: str) -> float | None:
    """A Table 4 metric by its column key (``None``: undefined, or not a metric of the section)."""
    value = getattr(metrics, key, None)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def interval_of(intervals: StepIntervals | E2EIntervals | None, key: str) -> Interval | None:
    """A metric's bootstrap interval by its column key (``None``: the section has none)."""
    value = getattr(intervals, key, None)
    return value if isinstance(value, Interval) else None


def spread_of(spread: StepSpread | E2ESpread, key: str) -> Spread | None:
    """A metric's spread over epochs by its column key (``None``: never measured)."""
    value = getattr(spread, key, None)
    return value if isinstance(value, Spread) else None


Section = tuple[str, list[str], list[list[str]]]


def sections(report: RunReport) -> list[Section]:
    """(title, headers, rows) of every table, shared by both renderers."""
    sections: list[Section] = []
    model = report.title
    board = report.leaderboard
    for suffix in ("", ", errored cases excluded"):
        if suffix and not report.outcomes.error:
            continue
        by_mode = report.metrics_excluding_errors if suffix else report.metrics
        for mode, metrics in by_mode.items():
            if isinstance(metrics, NoMetrics):
                continue
            columns = MODE_COLUMNS[mode]
            rows = [[model, *(fmt(metric_value(metrics, c.key), c.percent) for c in columns)]]
            if not suffix:
                rows += _uncertainty_rows(report, mode, columns)
                rows += sound_rows(report, mode, columns)
            if board is not None and not suffix:
                label = f"leaderboard {board.board}: {board.model} [react]"
                rows.append([label, *(fmt(board.get(c.key), c.percent) for c in columns)])
            sections.append(
                (
                    f"Table 4, {MODE_TITLES[mode]}{suffix} (percent)",
                    ["model", *(c.label for c in columns)],
                    rows,
                )
            )
    if report.errors:
        rows = []
        for mode, counts in report.errors.items():
            total = counts.total()
            shares = [
                fmt(n / total * 100) if total else "-"
                for n in (counts.format, counts.args, counts.other)
            ]
            rows.append([mode, str(total), *shares])
        sections.append(
            (
                "Table 5, error types (percent of errored tool calls)",
                ["mode", "errored calls", "format", "argument format", "N/A"],
                rows,
            )
        )
    if report.tool_calls:
        sections.append(
            (
                "Figure 6, tool calls",
                ["mode", "successful", "failed"],
                [[m, str(c.successful), str(c.failed)] for m, c in report.tool_calls.items()],
            )
        )
    if report.outcomes_by_mode:
        sections.append(
            (
                "Outcomes",
                ["mode", "passed", "failed", "error", "skipped", "pass rate"],
                [
                    [
                        m,
                        *(str(n) for n in (o.passed, o.failed, o.error, o.skipped)),
                        fmt(report.pass_rate.get(m)),
                    ]
                    for m, o in report.outcomes_by_mode.items()
                ],
            )
        )
    sections += robustness_tables(report.robustness)
    sections += _comparison_sections(report.comparison)
    return sections


#: How the tables name the metrics over the queries the erratum does not name.
SOUND_LABEL = "sound refs only"


def sound_counts(report: RunReport, mode: str) -> tuple[int, int] | None:
    """(sound queries, queries) of ``mode``, where the erratum left some out (else ``None``)."""
    sound = report.denominators_sound.get(mode) if report.denominators_sound else None
    every = report.denominators.get(mode)
    if sound is None or every is None or sound.queries == every.queries:
        return None
    return sound.queries, every.queries


def sound_rows(report: RunReport, mode: str, columns: Sequence[Column]) -> list[list[str]]:
    """Under a run's row: Table 4 over the queries with a sound reference (``metrics_sound``).

    Shown where the erratum names a query of the mode (else it is the row above); ``n/a``
    throughout when it names them all.
    """
    counts = sound_counts(report, mode)
    if counts is None or report.metrics_sound is None:
        return []
    metrics = report.metrics_sound.get(mode)
    label = f"  {SOUND_LABEL} ({counts[0]} of {counts[1]} queries)"
    if not isinstance(metrics, StepMetrics | E2EMetrics):
        return [[label, *("n/a" for _ in columns)]]
    return [[label, *(fmt(metric_value(metrics, c.key), c.percent) for c in columns)]]


def erratum_lines(report: RunReport, *, shown: int) -> list[str]:
    """What the erratum names among the run's queries: a line, then one per kind."""
    use = report.dataset.erratum
    if use is None:
        return []
    named = use.named()
    if not named:
        return [f"erratum {use.version}: no query of this run is named in it"]
    lines = [
        f"erratum {use.version}: {len(named)} of the run's {report.dataset.selected} queries "
        f"have a faulty reference or a live-web answer; Table 4's '{SOUND_LABEL}' rows leave "
        "them out (the official rows keep them)"
    ]
    for kind, queries in use.queries.items():
        lines.append(f"erratum: {count_line(use.kinds.get(kind, kind), queries, shown)}")
    return lines


def erratum_items(report: RunReport) -> list[str]:
    """Per query and fault the erratum names: the query, its cases' outcomes, the evidence."""
    cases: dict[str, list[str]] = {}
    notes: dict[str, list[tuple[str, str]]] = {}
    for case in report.cases:
        if case.erratum:
            cases.setdefault(case.query_id, []).append(f"{case.id} {case.outcome}")
            notes.setdefault(case.query_id, [(n.kind, n.evidence) for n in case.erratum])
    return [
        f"query {qid} ({', '.join(cases[qid])}): {kind}: {evidence}"
        for qid, faults in notes.items()
        for kind, evidence in faults
    ]


def bounds_text(low: float | None, high: float | None) -> str:
    """``[low, high]`` to one decimal, as the tables show an interval (``n/a``: none)."""
    if low is None or high is None:
        return "n/a"
    return f"[{float(low):.1f}, {float(high):.1f}]"


def interval_text(interval: Interval | None) -> str:
    """An interval as the tables show it, ``[low, high]`` to one decimal (``n/a``: none)."""
    return "n/a" if interval is None else bounds_text(interval.low, interval.high)


def _uncertainty_rows(report: RunReport, mode: str, columns: Sequence[Column]) -> list[list[str]]:
    """Under a run's row: its intervals and, with epochs, the spread over them."""
    rows = []
    intervals = report.metrics_ci.get(mode)
    if intervals is not None:
        # One level for the whole run: the pass rate's interval has it like every other.
        level = intervals.pass_rate.level
        rows.append(
            [
                f"  {float(level) * 100:g}% CI",
                *(
                    interval_text(interval_of(intervals, c.key)) if c.percent else ""
                    for c in columns
                ),
            ]
        )
    spread = report.metrics_spread.get(mode)
    if spread is not None:
        spreads = [spread_of(spread, c.key) for c in columns]
        epochs = max((s.epochs for s in spreads if s is not None), default=0)
        rows.append(
            [
                f"  sd over {epochs} epochs",
                *(f"±{s.std:.2f}" if s is not None else "n/a" for s in spreads),
            ]
        )
    return rows


#: How many flipped cases the tables list (the JSON report has them all).
MAX_FLIPPED = 20
METRIC_LABELS = {c.key: c.label for c in (*STEP_COLUMNS, *E2E_COLUMNS)} | {"pass_rate": "pass rate"}


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{float(value):.4f}"


def baseline_label(comparison: BaselineComparison) -> str:
    """How tables and plots name the baseline: as given, with the leaderboard board it took."""
    label = comparison.baseline
    board = comparison.board
    if isinstance(board, str) and board and not label.endswith(f"@{board}"):
        label += f" (board {board})"
    return label


def _comparison_sections(comparison: BaselineComparison | None) -> list[Section]:
    if comparison is None:
        return []
    sections: list[Section] = []
    level = float(comparison.level) * 100
    paired = comparison.paired
    for mode, metrics in comparison.metrics.items():
        counts = comparison.cases.get(mode)
        title = f"Comparison with {baseline_label(comparison)}, {MODE_TITLES.get(mode, mode)}"
        if counts is not None:
            title += f" ({counts.matched} queries matched)"
        headers = ["metric", "baseline", "this run", "difference", f"{level:g}% CI"]
        headers += ["p", "p(drop)"] if paired else ["p(below)"]
        rows = []
        for metric, row in metrics.items():
            cells = [
                METRIC_LABELS.get(metric, metric),
                fmt(row.baseline),
                fmt(row.this),
                "n/a" if row.difference is None else f"{float(row.difference):+.2f}",
                interval_text(row.ci),
            ]
            cells += [_p(row.p_value), _p(row.p_drop)] if paired else [_p(row.p_drop)]
            rows.append(cells)
        sections.append((title, headers, rows))
    for entries, title in (
        (comparison.flipped.regressed, "Regressed cases"),
        (comparison.flipped.fixed, "Fixed cases"),
    ):
        if not entries:
            continue
        rows = [
            [
                e.id,
                fmt(e.baseline_pass_rate * 100),
                fmt(e.pass_rate * 100),
                ",".join(e.outcomes),
                (e.nodeids or [""])[0],
            ]
            for e in entries[:MAX_FLIPPED]
        ]
        shown = f", the first {MAX_FLIPPED} here" if len(entries) > MAX_FLIPPED else ""
        sections.append(
            (
                f"{title} ({len(entries)}{shown}; pass rate in percent, baseline -> this run)",
                ["case", "baseline", "this run", "outcome", "node id"],
                rows,
            )
        )
    return sections


def gate_lines(report: RunReport) -> list[str]:
    """The gates' verdicts, one line each, then what they mean for the exit status."""
    gates = report.gates
    if gates is None:
        return []
    verdicts = gates.verdicts
    lines = [f"gate {'PASS' if v.passed else 'FAIL'}: {v.reason}" for v in verdicts]
    errored = report.outcomes.error
    failed = report.outcomes.failed
    if not gates.passed:
        held = sum(1 for v in verdicts if v.passed)
        lines.append(
            f"gates: {len(verdicts) - held} of {len(verdicts)} failed: the run fails "
            "(exit status 1)"
        )
    elif errored:
        lines.append(
            f"gates: all held, but {errored} case(s) errored (a harness or endpoint failure): the "
            "run fails (exit status 1)"
        )
    else:
        lines.append(
            "gates: all held: the run passes (exit status 0)"
            + (
                f"; {failed} query case(s) failed, which the gates, not the exit status, judge"
                if failed
                else ""
            )
        )
    return lines


def identity_facts(report: RunReport) -> list[tuple[str, str]]:
    """The run's label (when one was given), commit and dates, as (name, value) pairs.

    What tells this run from the others a team keeps; an identity filled in for an older
    report has no commit or dates, and shows none.
    """
    identity = report.identity
    out = []
    # Shown when chosen: by --gta-label, or by a hook that renamed the run.
    if identity.label_given or report.label != identity.label:
        out.append(("label", report.label))
    git = identity.git
    if git is not None:
        commit = git.short
        if git.branch:
            commit += f" on {git.branch}"
        if git.dirty:
            commit += ", dirty (tracked files differ from it)"
        out.append(("commit", commit))
    for value, name in ((identity.started_at, "started"), (identity.finished_at, "finished")):
        if value is not None:
            out.append((name, value))
    return out


def quirk_lines(quirks: Sequence[Quirk], *, shown: int) -> list[str]:
    """One line per kind of quirk: ``title: N queries (ids)``.

    The line ``--gta-data-info`` prints for each (:func:`pytest_gta.quirks.summary_lines`),
    written here from the report's typed quirks: the quirks module scores, a renderer does not.
    """
    return [count_line(quirk.title, quirk.queries, shown) for quirk in quirks]


def count_line(title: str, queries: Sequence[str], shown: int) -> str:
    """``title: N queries (ids)``, the first ``shown`` ids listed."""
    noun = "query" if len(queries) == 1 else "queries"
    ids = ", ".join(queries[:shown])
    if len(queries) > shown:
        ids += f", ... ({len(queries) - shown} more)"
    return f"{title}: {len(queries)} {noun} ({ids})"


def header_lines(report: RunReport) -> list[str]:
    """The lines above the tables: what ran on what, how, and at what cost."""
    dataset = report.dataset
    settings = report.settings
    lines = []
    if report.interrupted:
        finished = sum(1 for c in report.cases if c.outcome != "skipped")
        how = f" ({report.interrupted_by})" if report.interrupted_by else ""
        lines.append(f"INTERRUPTED{how}: these tables cover the {finished} case(s) that finished")
    agent = settings.agent
    # An agent asks its model its own way: the protocol is not the run's.
    how = "" if agent is not None else f"  protocol: {report.protocol}"
    lines.append(f"model: {report.model}{how}  modes: {','.join(settings.modes)}")
    if agent is not None and agent.name:
        lines.append(f"agent under test: {agent.name} ({agent.kind})")
        lines += isolation_lines(agent.isolation)
    run = [f"{name}: {value}" for name, value in identity_facts(report) if name != "finished"]
    if run:
        lines.append("  ".join(run))
    lines += [
        f"dataset: {dataset.path} ({dataset.source}; {dataset.queries} queries, "
        f"{dataset.selected} selected; sha256 {dataset.sha256[:16]})",
    ]
    # One line per kind; how each is scored: --gta-data-info, the report's dataset.quirks.
    lines += [f"dataset quirk: {line}" for line in quirk_lines(dataset.quirks, shown=12)]
    lines += erratum_lines(report, shown=12)
    if report.epochs > 1:
        lines.append(
            f"epochs: {report.epochs} (every case ran {report.epochs} times: the metrics are the "
            "mean over the epochs, the 'sd' rows their spread)"
        )
    shard = report.shard
    if shard is not None:
        lines.append(
            f"shard: {shard.spec} ({len(shard.cases)} of {shard.selected} selected cases; "
            f"pytest {OPT_MERGE} joins the shards)"
        )
    merged = report.merged
    if merged is not None:
        lines.append(
            f"merged from {len(merged.reports)} reports"
            + (f": shards {', '.join(merged.shards)}" if merged.shards else "")
        )
    extras = []
    if settings.tools:
        extras.append(f"tools: {settings.tools}")
    if settings.sim_model:
        extras.append(f"similarity: {settings.sim_model} (pass at >= {settings.sim_threshold})")
    if extras:
        lines.append("  ".join(extras))
    generation = settings.generation
    if generation:
        # Built-in adapters describe these; a third-party describe() may say anything else.
        shown = [k for k in ("temperature", "max_tokens", "seed", "cache") if k in generation]
        parts = [f"{k} {generation[k]}" for k in shown or generation]
        if generation.get("base_url"):
            parts.append(f"endpoint {generation['base_url']}")
        lines.append("generation: " + ", ".join(parts))
    timings = report.timings or {}
    loads = []
    for key, what in (("model_load_s", "model"), ("similarity_load_s", "similarity model")):
        seconds = [t[key] for t in timings.values() if key in t]
        if seconds:
            loads.append(f"{what} {max(seconds):.1f} s")
    if loads:
        lines.append(f"loading (outside the cases' own time): {', '.join(loads)}")
    memory = [
        f"{process} {t['peak_rss_mb']:.0f} MB"
        for process, t in sorted(timings.items())
        if "peak_rss_mb" in t
    ]
    if memory:
        lines.append(f"peak memory per process: {', '.join(memory)}")
    usage = report.usage
    if usage.calls or usage.cached_calls:
        cost = usage.cost_usd
        lines.append(
            f"usage: {usage.calls} model calls ({usage.cached_calls} more from the cache), "
            f"{usage.input_tokens} tokens in, {usage.output_tokens} out"
            + ("" if cost is None else f", about ${cost:.4f}")
            + model_time(usage)
        )
    return lines


def isolation_lines(isolation: AgentIsolation | None) -> list[str]:
    """How the agent was isolated, and what the start-up probe got (nothing: older reports)."""
    if isolation is None:
        return []
    failed = [f.check for f in isolation.probe if not f.held]
    line = f"agent sandbox: {isolation.mechanism}, network {isolation.network}"
    if not isolation.isolated:
        line += f"; NOT isolated: {'; '.join([*isolation.gaps, *failed])}"
    lines = [line]
    if isolation.attempts:
        # Where the agent is not isolated, why no sandbox was built; else the slower way taken.
        label = "agent sandbox not built" if isolation.gaps else "agent sandbox note"
        lines.append(f"{label}: {'; '.join(isolation.attempts)}")
    if isolation.probe:
        held = len(isolation.probe) - len(failed)
        lines.append(
            f"agent sandbox probe: {held} of {len(isolation.probe)} attempts of a cheating agent "
            "held" + (f" (got through: {'; '.join(failed)})" if failed else "")
        )
    return lines


def model_time(usage: RunUsage) -> str:
    """``, 12.3 s waiting on the model`` when the report has the cases' model time."""
    seconds = usage.model_s
    if isinstance(seconds, int | float) and seconds > 0:
        return f", {seconds:.1f} s waiting on the model"
    return ""


def render_text(report: RunReport) -> list[str]:
    """The terminal summary, line by line."""
    lines = header_lines(report)
    for title, headers, rows in sections(report):
        lines += ["", title, *aligned(headers, rows)]
    gates = gate_lines(report)
    if gates:
        lines += ["", *gates]
    notes = report.notes
    for note in notes[:MAX_NOTES]:
        lines.append(f"note: {note}")
    if len(notes) > MAX_NOTES:
        lines.append(f"note: ... and {len(notes) - MAX_NOTES} more notes in the JSON report")
    return lines


def render_markdown(report: RunReport) -> str:
    """The same tables as markdown, for CI job summaries and pull requests."""
    lines = ["# GTA results", "", *markdown_items(header_lines(report))]
    for title, headers, rows in sections(report):
        lines += ["", f"## {markdown_text(title)}", "", *markdown_table(headers, rows)]
    faults = erratum_items(report)
    if faults:
        lines += ["", "## Erratum: queries whose reference is faulty or live", ""]
        lines += markdown_items(faults)
    gates = gate_lines(report)
    if gates:
        lines += ["", "## Gates", "", *markdown_items(gates)]
    if report.notes:
        lines += ["", "## Notes", "", *markdown_items(report.notes)]
    return "\n".join(lines) + "\n"


def markdown_items(lines: Sequence[str]) -> list[str]:
    """Lines as a markdown list, each shown literally (:func:`markdown_text`)."""
    return [f"- {markdown_text(line)}" for line in lines]
