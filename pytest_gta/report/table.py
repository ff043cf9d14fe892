"""Pure renderers of a report dict: terminal text and markdown.

They only read the report, so what is printed, written as markdown and written as JSON can never
disagree. The metric registry below names each column the way the paper does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gta.flags import OPT_MERGE
from pytest_gta.quirks import summary_lines


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


def fmt(value: Any, percent: bool = True) -> str:
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


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A table as markdown lines, the numbers' columns right-aligned."""
    lines = ["| " + " | ".join(headers) + " |"]
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|")
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def sections(report: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of every table, shared by both renderers."""
    sections = []
    model = f"{report.get('model')} [{report.get('protocol', 'react')}]"
    board = report.get("leaderboard") or None
    for metrics_key, suffix in (
        ("metrics", ""),
        ("metrics_excluding_errors", ", errored cases excluded"),
    ):
        if metrics_key == "metrics_excluding_errors" and not report["outcomes"].get("error"):
            continue
        for mode, metrics in report.get(metrics_key, {}).items():
            if not metrics:
                continue
            columns = MODE_COLUMNS[mode]
            rows = [[model, *(fmt(metrics.get(c.key), c.percent) for c in columns)]]
            if not suffix:
                rows += _uncertainty_rows(report, mode, columns)
            if board is not None and not suffix:
                label = f"leaderboard {board['board']}: {board['model']} [react]"
                rows.append([label, *(fmt(board.get(c.key), c.percent) for c in columns)])
            sections.append(
                (
                    f"Table 4, {MODE_TITLES[mode]}{suffix} (percent)",
                    ["model", *(c.label for c in columns)],
                    rows,
                )
            )
    errors = report.get("errors", {})
    if errors:
        rows = []
        for mode, counts in errors.items():
            total = sum(counts.values())
            shares = [
                fmt(counts[k] / total * 100) if total else "-" for k in ("format", "args", "other")
            ]
            rows.append([mode, str(total), *shares])
        sections.append(
            (
                "Table 5, error types (percent of errored tool calls)",
                ["mode", "errored calls", "format", "argument format", "N/A"],
                rows,
            )
        )
    calls = report.get("tool_calls", {})
    if calls:
        sections.append(
            (
                "Figure 6, tool calls",
                ["mode", "successful", "failed"],
                [[m, str(c["successful"]), str(c["failed"])] for m, c in calls.items()],
            )
        )
    by_mode = report.get("outcomes_by_mode", {})
    if by_mode:
        rates = report.get("pass_rate", {})
        sections.append(
            (
                "Outcomes",
                ["mode", "passed", "failed", "error", "skipped", "pass rate"],
                [
                    [
                        m,
                        *(str(o.get(k, 0)) for k in ("passed", "failed", "error", "skipped")),
                        fmt(rates.get(m)),
                    ]
                    for m, o in by_mode.items()
                ],
            )
        )
    sections += _comparison_sections(report.get("comparison"))
    return sections


def interval_text(interval: Any) -> str:
    """An interval as the tables show it, ``[low, high]`` to one decimal (``n/a``: none)."""
    if not isinstance(interval, Mapping) or interval.get("low") is None:
        return "n/a"
    return f"[{float(interval['low']):.1f}, {float(interval['high']):.1f}]"


def _uncertainty_rows(
    report: Mapping[str, Any], mode: str, columns: Sequence[Column]
) -> list[list[str]]:
    """Under a run's row: its intervals and, with epochs, the spread over them."""
    rows = []
    intervals = report.get("metrics_ci", {}).get(mode, {})
    if intervals:
        level = next((i.get("level") for i in intervals.values() if i), 0.95)
        rows.append(
            [
                f"  {float(level) * 100:g}% CI",
                *(interval_text(intervals.get(c.key)) if c.percent else "" for c in columns),
            ]
        )
    spread = report.get("metrics_spread", {}).get(mode, {})
    if spread:
        epochs = max((s.get("epochs", 0) for s in spread.values() if s), default=0)
        rows.append(
            [
                f"  sd over {epochs} epochs",
                *(
                    f"±{float(spread[c.key]['std']):.2f}" if spread.get(c.key) else "n/a"
                    for c in columns
                ),
            ]
        )
    return rows


#: How many flipped cases the tables list (the JSON report has them all).
MAX_FLIPPED = 20
METRIC_LABELS = {c.key: c.label for c in (*STEP_COLUMNS, *E2E_COLUMNS)} | {"pass_rate": "pass rate"}


def _p(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):.4f}"


def baseline_label(comparison: Mapping[str, Any]) -> str:
    """How tables and plots name the baseline: as given, with the leaderboard board it took."""
    label = str(comparison.get("baseline"))
    board = comparison.get("board")
    if board and not label.endswith(f"@{board}"):
        label += f" (board {board})"
    return label


def _comparison_sections(comparison: Any) -> list[tuple[str, list[str], list[list[str]]]]:
    if not isinstance(comparison, Mapping):
        return []
    sections = []
    level = float(comparison.get("level", 0.95)) * 100
    paired = comparison.get("paired", True)
    for mode, metrics in comparison.get("metrics", {}).items():
        counts = comparison.get("cases", {}).get(mode, {})
        title = f"Comparison with {baseline_label(comparison)}, {MODE_TITLES.get(mode, mode)}"
        if counts:
            title += f" ({counts.get('matched')} queries matched)"
        headers = ["metric", "baseline", "this run", "difference", f"{level:g}% CI"]
        headers += ["p", "p(drop)"] if paired else ["p(below)"]
        rows = []
        for metric, row in metrics.items():
            cells = [
                METRIC_LABELS.get(metric, metric),
                fmt(row.get("baseline")),
                fmt(row.get("this")),
                "n/a" if row.get("difference") is None else f"{float(row['difference']):+.2f}",
                interval_text(row.get("ci")),
            ]
            cells += (
                [_p(row.get("p_value")), _p(row.get("p_drop"))]
                if paired
                else [_p(row.get("p_drop"))]
            )
            rows.append(cells)
        sections.append((title, headers, rows))
    flipped = comparison.get("flipped", {})
    for kind, title in (("regressed", "Regressed cases"), ("fixed", "Fixed cases")):
        entries = flipped.get(kind, [])
        if not entries:
            continue
        rows = [
            [
                e["id"],
                fmt(float(e["baseline_pass_rate"]) * 100),
                fmt(float(e["pass_rate"]) * 100),
                ",".join(e.get("outcomes", [])),
                (e.get("nodeids") or [""])[0],
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


def gate_lines(report: Mapping[str, Any]) -> list[str]:
    """The gates' verdicts, one line each, then what they mean for the exit status."""
    gates = report.get("gates")
    if not isinstance(gates, Mapping):
        return []
    lines = []
    for verdict in gates.get("verdicts", []):
        mark = "PASS" if verdict.get("passed") else "FAIL"
        lines.append(f"gate {mark}: {verdict.get('reason')}")
    errored = int(report.get("outcomes", {}).get("error", 0))
    failed = int(report.get("outcomes", {}).get("failed", 0))
    if not gates.get("passed"):
        held = sum(1 for v in gates.get("verdicts", []) if v.get("passed"))
        lines.append(
            f"gates: {len(gates.get('verdicts', [])) - held} of {len(gates.get('verdicts', []))} "
            "failed: the run fails (exit status 1)"
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


def identity_facts(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The run's label (when one was given), commit and dates, as (name, value) pairs.

    What tells this run from the others a team keeps; an older report (or a hook's) without an
    identity has none of it, and nothing is shown.
    """
    found = report.get("identity")
    identity: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    out = []
    label = report.get("label")
    # Shown when chosen: by --gta-label, or by a hook that renamed the run.
    if isinstance(label, str) and (identity.get("label_given") or label != identity.get("label")):
        out.append(("label", label))
    git = identity.get("git")
    if isinstance(git, Mapping) and git.get("short"):
        commit = str(git["short"])
        if git.get("branch"):
            commit += f" on {git['branch']}"
        if git.get("dirty"):
            commit += ", dirty (tracked files differ from it)"
        out.append(("commit", commit))
    for key, name in (("started_at", "started"), ("finished_at", "finished")):
        if isinstance(identity.get(key), str):
            out.append((name, identity[key]))
    return out


def header_lines(report: Mapping[str, Any]) -> list[str]:
    """The lines above the tables: what ran on what, how, and at what cost."""
    dataset = report["dataset"]
    settings = report.get("settings", {})
    lines = []
    if report.get("interrupted"):
        finished = sum(1 for c in report.get("cases", []) if c.get("outcome") != "skipped")
        how = f" ({report['interrupted_by']})" if report.get("interrupted_by") else ""
        lines.append(f"INTERRUPTED{how}: these tables cover the {finished} case(s) that finished")
    lines += [
        f"model: {report['model']}  protocol: {report['protocol']}  "
        f"modes: {','.join(settings.get('modes', []))}",
    ]
    agent = settings.get("agent")
    if isinstance(agent, Mapping) and agent.get("name"):
        lines.append(f"agent under test: {agent['name']} ({agent.get('kind')})")
    run = [f"{name}: {value}" for name, value in identity_facts(report) if name != "finished"]
    if run:
        lines.append("  ".join(run))
    lines += [
        f"dataset: {dataset['path']} ({dataset.get('source', '')}; {dataset['queries']} queries, "
        f"{dataset.get('selected', dataset['queries'])} selected; sha256 {dataset['sha256'][:16]})",
    ]
    quirks = dataset.get("quirks")
    if isinstance(quirks, list) and quirks:
        # One line per kind; how each is scored: --gta-data-info, the report's dataset.quirks.
        lines += [f"dataset quirk: {line}" for line in summary_lines(quirks, shown=12)]
    epochs = report.get("epochs")
    if isinstance(epochs, int) and epochs > 1:
        lines.append(
            f"epochs: {epochs} (every case ran {epochs} times: the metrics are the mean over the "
            "epochs, the 'sd' rows their spread)"
        )
    shard = report.get("shard")
    if isinstance(shard, Mapping):
        lines.append(
            f"shard: {shard.get('spec')} ({len(shard.get('cases', []))} of "
            f"{shard.get('selected')} selected cases; pytest {OPT_MERGE} joins the shards)"
        )
    merged = report.get("merged")
    if isinstance(merged, Mapping):
        lines.append(
            f"merged from {len(merged.get('reports', []))} reports"
            + (f": shards {', '.join(merged['shards'])}" if merged.get("shards") else "")
        )
    extras = []
    if settings.get("tools"):
        extras.append(f"tools: {settings['tools']}")
    if settings.get("sim_model"):
        extras.append(
            f"similarity: {settings['sim_model']} (pass at >= {settings.get('sim_threshold')})"
        )
    if extras:
        lines.append("  ".join(extras))
    generation = settings.get("generation")
    if isinstance(generation, Mapping) and generation:
        # Built-in adapters describe these; a third-party describe() may say anything else.
        shown = [k for k in ("temperature", "max_tokens", "seed", "cache") if k in generation]
        parts = [f"{k} {generation[k]}" for k in shown or generation]
        if generation.get("base_url"):
            parts.append(f"endpoint {generation['base_url']}")
        lines.append("generation: " + ", ".join(parts))
    timings = report.get("timings") or {}
    loads = []
    for key, what in (("model_load_s", "model"), ("similarity_load_s", "similarity model")):
        seconds = [t[key] for t in timings.values() if isinstance(t, Mapping) and key in t]
        if seconds:
            loads.append(f"{what} {max(seconds):.1f} s")
    if loads:
        lines.append(f"loading (outside the cases' own time): {', '.join(loads)}")
    memory = [
        f"{process} {t['peak_rss_mb']:.0f} MB"
        for process, t in sorted(timings.items())
        if isinstance(t, Mapping) and isinstance(t.get("peak_rss_mb"), int | float)
    ]
    if memory:
        lines.append(f"peak memory per process: {', '.join(memory)}")
    usage = report.get("usage") or {}
    if usage.get("calls") or usage.get("cached_calls"):
        cost = usage.get("cost_usd")
        lines.append(
            f"usage: {usage['calls']} model calls ({usage['cached_calls']} more from the cache), "
            f"{usage['input_tokens']} tokens in, {usage['output_tokens']} out"
            + ("" if cost is None else f", about ${cost:.4f}")
            + model_time(usage)
        )
    return lines


def model_time(usage: Mapping[str, Any]) -> str:
    """``, 12.3 s waiting on the model`` when the report has the cases' model time."""
    seconds = usage.get("model_s")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
        return f", {seconds:.1f} s waiting on the model"
    return ""


def render_text(report: Mapping[str, Any]) -> list[str]:
    """The terminal summary, line by line."""
    lines = header_lines(report)
    for title, headers, rows in sections(report):
        lines += ["", title, *aligned(headers, rows)]
    gates = gate_lines(report)
    if gates:
        lines += ["", *gates]
    notes = list(report.get("notes", []))
    for note in notes[:MAX_NOTES]:
        lines.append(f"note: {note}")
    if len(notes) > MAX_NOTES:
        lines.append(f"note: ... and {len(notes) - MAX_NOTES} more notes in the JSON report")
    return lines


def render_markdown(report: Mapping[str, Any]) -> str:
    """The same tables as markdown, for CI job summaries and pull requests."""
    lines = ["# GTA results", "", *[f"- {line}" for line in header_lines(report)]]
    for title, headers, rows in sections(report):
        lines += ["", f"## {title}", "", *markdown_table(headers, rows)]
    gates = gate_lines(report)
    if gates:
        lines += ["", "## Gates", "", *[f"- {line}" for line in gates]]
    notes = report.get("notes", [])
    if notes:
        lines += ["", "## Notes", "", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"
