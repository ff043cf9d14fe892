"""The self-contained HTML report (``--gta-report-html``) and the fragments pytest-html shows.

One file a person opens in a browser, offline: the run's header and the paper's tables (the very
rows the terminal prints, from :mod:`pytest_gta.report.table`), the plots, every case as a row
that can be filtered, sorted and searched, and per case a drill-down with the query, its images,
the model's turns beside the reference chain (first divergence marked), the generated images
and the scoring detail. What the page says (the facts, why a case failed, which step diverged,
how it was scored) is decided in :mod:`pytest_gta.report.explain`; this module writes markup,
the transcript's steps with :mod:`pytest_gta.report.html_transcript`.

Everything is inlined: the stylesheet, one script (allowed by its sha256 in a strict
Content-Security-Policy, so nothing else can run), the plots as SVG and the images as ``data:``
URIs kept once per content in a JSON block. The drill-downs are ``<template>`` elements, parsed
but not laid out until opened, so a 229-query page stays quick to open.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_gta.dataset import Dataset, Query
from pytest_gta.flags import OPT_REPORT_HTML_MAX_MB
from pytest_gta.report.explain import (
    CaseRow,
    case_facts,
    case_table,
    e2e_divergence,
    facts,
    generated_images,
    reference_steps,
    run_warnings,
    scoring,
)
from pytest_gta.report.html_transcript import (
    ImageHtml,
    agent_html,
    opening_html,
    reference_html,
    step_mode_html,
    task_html,
    turns_html,
    why_html,
)
from pytest_gta.report.images import ImageStore, StoredImage
from pytest_gta.report.page import clip, esc, scripted_page
from pytest_gta.report.plots import Plot, all_plots
from pytest_gta.report.robustness import faulted_steps, faults_html
from pytest_gta.report.table import gate_lines, identity_facts, sections
from pytest_gta.results.case import CaseResult
from pytest_gta.results.report import RunReport
from pytest_gta.vocabulary import CATEGORY_NAMES, OUTCOMES

#: The page's pieces, with the transcript's that the GTA-Workflow page takes from here.
__all__ = [
    "PAGE_OVERHEAD",
    "case_detail",
    "cases_html",
    "gates_html",
    "header_html",
    "render_html",
    "scoring_html",
    "select_html",
    "summary_html",
    "table_html",
    "tables_html",
]

#: Bytes of the page besides its markup and images (stylesheet, script), with room to spare.
PAGE_OVERHEAD = 64 * 1024


# --------------------------------------------------------------------------------------------
# Tables and header (also pytest-html's summary)


def table_html(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """One of the report's tables, as the terminal shows it."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f'<table class="gta-table"><caption>{esc(title)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def gates_html(report: RunReport) -> str:
    """The gates' verdicts and what they mean for the exit status ("" without gates)."""
    lines = gate_lines(report)
    if not lines:
        return ""
    kinds = {"gate FAIL": "gate-fail", "gate PASS": "gate-pass"}
    items = "".join(
        f'<li class="{kinds.get(line[:9], "gate-sum")}">{esc(line)}</li>' for line in lines
    )
    return f'<section id="gates"><h2>Gates</h2><ul class="gates">{items}</ul></section>'


def tables_html(report: RunReport) -> str:
    """Every table of the terminal summary, the gates and the notes."""
    parts = [table_html(title, headers, rows) for title, headers, rows in sections(report)]
    parts.append(gates_html(report))
    if report.notes:
        parts.append(
            '<section id="notes"><h2>Notes</h2><ul>'
            + "".join(f"<li>{esc(n)}</li>" for n in report.notes)
            + "</ul></section>"
        )
    return "".join(parts)


def header_html(report: RunReport) -> str:
    """The run's facts, the outcome counts and the state (interrupted, stopped)."""
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts(report))
    badges = "".join(
        f'<span class="badge {o}">{report.outcomes.get(o)} {o}</span>' for o in OUTCOMES
    )
    state = "".join(f'<p class="warn">{esc(line)}</p>' for line in run_warnings(report))
    return f'{state}<p class="outcomes">{badges}</p><dl class="facts">{rows}</dl>'


def summary_html(report: RunReport) -> str:
    """Header and tables: what pytest-html's summary shows of a GTA run."""
    return f'<div class="gta-summary">{header_html(report)}{tables_html(report)}</div>'


# --------------------------------------------------------------------------------------------
# One case


def scoring_html(case: CaseResult, query: Query | None, threshold: float | None) -> str:
    """How the case was scored: answer checks, similarity against the threshold, counts."""
    scored = scoring(case, query, threshold)
    if scored is None:
        return '<p class="muted">not scored (the case did not finish)</p>'
    parts = []
    if scored.show_answer:
        parts.append(f"<p>model's answer: <q>{esc(clip(scored.answer or '(none)', 4000))}</q></p>")
    check = scored.objective
    if check is not None:
        rows = "".join(
            f'<tr class="{"hit" if hit else "miss"}"><td>{"hit" if hit else "missing"}</td>'
            f"<td>{esc(' | '.join(group))}</td></tr>"
            for group, hit in check.groups
        )
        parts.append(
            '<table class="checks"><caption>whitelist (every group must hit)</caption>'
            f"{rows}</table>"
        )
        if check.blacklist is not None:
            black = check.blacklist_hit
            parts.append(
                f'<p class="{"miss" if black else "hit"}">blacklist: '
                + (f"hit <q>{esc(black)}</q>" if black else "no hit")
                + f" ({esc(' | '.join(check.blacklist))})</p>"
            )
    elif scored.references is not None:
        parts.append(
            "<p>reference answers (cosine similarity to the closest counts):</p><ol>"
            + "".join(f"<li>{esc(r)}</li>" for r in scored.references)
            + "</ol>"
        )
        parts.append(
            f"<p>similarity {esc(scored.similarity)}; passes at &gt;= {esc(scored.threshold)}</p>"
        )
    if case.mode == "e2e":
        if scored.imggen:
            parts.append(f"<p>image generation (Ans+I) score {esc(scored.imggen)}</p>")
        elif scored.answer_score:
            parts.append(f"<p>answer score {esc(scored.answer_score)}</p>")
        rows = "".join(
            f"<tr><td>{c}</td><td>{esc(ref)}</td><td>{esc(got)}</td><td>{esc(hit)}</td></tr>"
            for c, ref, got, hit in scored.categories
        )
        parts.append(
            '<table class="checks"><caption>tool calls per category (F1 counts)</caption>'
            "<tr><th>category</th><th>reference</th><th>model</th><th>matched</th></tr>"
            f"{rows}</table>"
        )
    else:
        rows = "".join(
            f"<tr><td>{o.number}</td><td>{esc(o.gt_type)}</td><td>{esc(o.pred_type)}</td>"
            f"<td>{_mark(o.tool_ok)}</td><td>{_mark(o.args_ok)}</td>"
            f"<td>{esc(o.answer)}</td><td>{esc(o.error)}</td></tr>"
            for o in scored.steps
        )
        parts.append(
            '<table class="checks"><caption>per reference step</caption>'
            "<tr><th>step</th><th>reference</th><th>model</th><th>tool</th><th>args</th>"
            f"<th>answer</th><th>error</th></tr>{rows}</table>"
        )
    return "".join(parts)


def _mark(value: bool) -> str:
    return '<span class="hit">yes</span>' if value else '<span class="miss">no</span>'


def _turns(case: CaseResult, image: ImageHtml, mark: int | None, why: str) -> str:
    """The model's end-to-end turns: reply (thought, action, input), the call, its output."""
    return turns_html(case.steps, case.replies, image, mark, why, faulted_steps(case.faults))


def case_detail(
    case: CaseResult, query: Query | None, *, threshold: float | None, image: ImageHtml
) -> str:
    """Everything about one case, for its drill-down (and pytest-html's extra)."""
    said = case_facts(case)
    meta = [
        f'<span class="badge {esc(said.outcome)}">{esc(said.outcome)}</span>',
        f"score {said.score:.3f}",
        f"mode {esc(said.mode)}",
        f"type {esc(said.type)}",
        f"duration {said.duration}",
        f"tokens {said.tokens}",
    ]
    if said.backends:
        meta.append("tools: " + esc(", ".join(said.backends)))
    parts = [
        f'<h3 id="case-{esc(case.id)}">{esc(case.id)}</h3>',
        f'<p class="meta">{" · ".join(meta)}</p>',
    ]
    if said.message:
        cls = "error-record" if said.message_is_error else "why"
        parts.append(f'<pre class="{cls}">{esc(clip(said.message, 4000))}</pre>')
    if said.erratum:
        faults = "".join(f"<li><b>{esc(k)}</b>: {esc(e)}</li>" for k, e in said.erratum)
        parts.append(
            '<section class="erratum"><h4>Erratum: the reference of this query is faulty or '
            f"depends on the live web</h4><ul>{faults}</ul></section>"
        )
    parts.append(faults_html(case.faults))
    if query is not None:
        inputs = "".join(image(f.path) for f in query.files)
        parts.append(
            f'<section class="query"><h4>Query</h4><p>{esc(query.text)}</p>'
            f'<div class="gallery">{inputs}</div>'
            f"<p class=muted>tools offered: {esc(', '.join(query.tool_names))}</p></section>"
        )
    if said.mode == "step":
        parts.append(
            f'<section class="chains"><h4>Steps</h4>{step_mode_html(case, query, image)}</section>'
        )
    else:
        reference = reference_steps(query)[1:] if query is not None else []
        divergence = e2e_divergence(reference, case.steps)
        why = divergence.why if divergence else ""
        model_mark = divergence.model if divergence else None
        # An agent's turns are its logged tool calls and its answer (what the server saw).
        who = "agent" if case.agent is not None else "model"
        ref_mark = divergence.reference if divergence else None
        # A model was given the ReAct prompt; an agent, a task (its prompts are its own).
        start = opening_html if who == "model" else task_html
        parts.append(
            f'<section class="chains"><h4>The {who}\'s turns beside the reference chain</h4>'
            + (why_html(why) if divergence else "")
            + (start(query) if query is not None else "")
            + '<div class="pair"><div><h5>reference chain</h5>'
            + (reference_html(reference, image, ref_mark, why) if query is not None else "")
            + f"</div><div><h5>{who} (what it {'called' if who == 'agent' else 'saw and did'})</h5>"
            f"{_turns(case, image, model_mark, why)}</div></div></section>"
        )
    if case.agent is not None:
        parts.append(agent_html(case.agent, case.tool_log, case.exchanges))
    made = [image(p) for p in generated_images(case)]
    if any(made):
        parts.append(
            '<section class="generated"><h4>Generated images</h4>'
            f'<div class="gallery">{"".join(made)}</div></section>'
        )
    parts.append(
        f'<section class="scoring"><h4>Scoring</h4>{scoring_html(case, query, threshold)}</section>'
    )
    return "".join(parts)


# --------------------------------------------------------------------------------------------
# The page


def _case_row(row: CaseRow) -> str:
    flag = f' <span class="flip {row.flip}">{row.flip}</span>' if row.flip else ""
    if row.erratum:
        flag += f' <span class="erratum" title="{esc(", ".join(row.erratum))}">erratum</span>'
    return (
        f'<tr class="case" data-id="{esc(row.id)}" '
        f'data-outcome="{esc(row.outcome)}" '
        f'data-mode="{esc(row.mode)}" data-type="{esc(row.type)}" '
        f'data-cats="{esc(" ".join(row.categories))}" data-tools="{esc(" ".join(row.tools))}" '
        f'data-flip="{esc(row.flip)}" data-erratum="{esc(" ".join(row.erratum) or "sound")}" '
        f'data-search="{esc(row.search)}">'
        f'<td><a href="#case={esc(row.id)}">{esc(row.id)}</a>{flag}</td>'
        f"<td>{esc(row.mode)}</td><td>{esc(row.type)}</td>"
        f"<td>{esc(', '.join(row.tools))}</td>"
        f'<td><span class="badge {esc(row.outcome)}">{esc(row.outcome)}</span></td>'
        f'<td data-sort="{row.score:.6f}">{row.score:.3f}</td>'
        f'<td data-sort="{row.seconds:.6f}">{row.duration}</td>'
        f'<td data-sort="{row.tokens}">{row.tokens or ""}</td>'
        f'<td class="msg">{esc(clip(row.message, 160))}</td></tr>'
    )


def select_html(name: str, label: str, values: Sequence[str]) -> str:
    """A filter of the case table: rows whose ``data-NAME`` has the chosen value ("all": any)."""
    options = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
    return (
        f'<label>{esc(label)} <select data-filter="{name}"><option value="">all</option>'
        f"{options}</select></label>"
    )


def cases_html(report: RunReport, dataset: Dataset | None) -> str:
    """The case table (flipped cases first when there is a baseline) and its filters."""
    table = case_table(report, dataset)
    rows = "".join(_case_row(row) for row in table.rows)
    filters = "".join(
        [
            select_html("outcome", "outcome", list(OUTCOMES)),
            select_html("mode", "mode", table.modes),
            select_html("type", "type", table.types),
            select_html("cats", "category", list(CATEGORY_NAMES)),
            select_html("tools", "tool", table.tools),
            *([select_html("flip", "baseline", ["regressed", "fixed"])] if table.flipped else []),
            *(
                [select_html("erratum", "reference", ["sound", *table.erratum])]
                if table.erratum
                else []
            ),
            '<label>search <input type="search" id="search" '
            'placeholder="id, query, message, tool"></label>',
        ]
    )
    headers = "".join(
        f'<th data-col="{i}" data-kind="{kind}" tabindex="0">{esc(name)}</th>'
        for i, (name, kind) in enumerate(
            [
                ("case", "text"),
                ("mode", "text"),
                ("type", "text"),
                ("tools", "text"),
                ("outcome", "text"),
                ("score", "num"),
                ("duration", "num"),
                ("tokens", "num"),
                ("message", "text"),
            ]
        )
    )
    note = (
        '<p class="muted">Cases that flipped against the baseline come first.</p>'
        if table.flipped
        else ""
    )
    shown = len(table.rows)
    return (
        f'<section id="cases"><h2>Cases</h2>{note}<div class="filters">{filters}'
        f'<span id="shown">{shown} of {shown} cases</span></div>'
        f'<table id="case-table"><thead><tr>{headers}</tr></thead><tbody>{rows}</tbody></table>'
        "</section>"
    )


class _Images:
    """The page's images: each stored image once, thumbnails first, full sizes within budget."""

    def __init__(self, store: ImageStore | None) -> None:
        self.store = store
        #: Keys in the order the page first refers to them, with the stored image.
        self.order: dict[str, StoredImage] = {}
        self.dropped_full = 0
        self.dropped = 0

    def reference(self, key: str, written: str) -> str:
        """The HTML of one image reference; its data goes in the JSON block, once."""
        if self.store is None:
            return ""
        if key not in self.order:
            stored = self.store.get(key)
            if stored is None:
                return ""
            self.order[key] = stored
        name = written.rsplit("/", 1)[-1]
        return (
            f'<button type="button" class="thumb" data-img="{esc(key)}" title="{esc(written)}">'
            f'<img alt="{esc(name)}" data-key="{esc(key)}"><span>{esc(name)}</span></button>'
        )

    def data(self, budget: int) -> dict[str, dict[str, str]]:
        """``{key: {thumb, full?}}`` as ``data:`` URIs: every thumbnail that fits, then fulls."""
        entries: dict[str, dict[str, str]] = {}
        if self.store is None:
            return entries
        used = 0
        for key, stored in self.order.items():
            thumb = self.store.data_uri(stored, "thumb")
            if thumb is None or used + len(thumb) > budget:
                self.dropped += 1
                continue
            used += len(thumb)
            entries[key] = {"thumb": thumb}
        for key, stored in self.order.items():
            if key not in entries or stored.full == stored.thumb:
                continue
            full = self.store.data_uri(stored, "full")
            if full is None or used + len(full) > budget:
                self.dropped_full += 1
                continue
            used += len(full)
            entries[key]["full"] = full
        return entries


def render_html(
    report: RunReport,
    dataset: Dataset | None,
    store: ImageStore | None,
    *,
    max_bytes: int = 10 * 1024 * 1024,
) -> str:
    """The whole page (see the module docstring); ``max_bytes`` bounds it, images first to go."""
    threshold = report.settings.sim_threshold
    plots = all_plots(report, dataset)
    head_parts = [
        header_html(report),
        tables_html(report),
        _plots_html(plots),
        cases_html(report, dataset),
    ]
    markup = "".join(head_parts)
    images = _Images(store)
    templates = []
    for case in report.cases:
        query = None if dataset is None else dataset.queries.get(case.query_id)

        def image(written: str, keys: Mapping[str, str] = case.images) -> str:
            key = keys.get(written)
            return images.reference(key, written) if key is not None else ""

        body = case_detail(case, query, threshold=threshold, image=image)
        templates.append(f'<template id="t-{esc(case.id)}">{body}</template>')
    text_bytes = len(markup) + sum(len(t) for t in templates) + PAGE_OVERHEAD
    entries = images.data(max(0, max_bytes - text_bytes))
    notes = []
    if images.dropped or images.dropped_full:
        notes.append(
            f"To stay under {max_bytes / (1024 * 1024):g} MB ({OPT_REPORT_HTML_MAX_MB}), "
            f"{images.dropped_full} full-size image(s) are shown as thumbnails only and "
            f"{images.dropped} image(s) are left out."
        )
    if store is None:
        notes.append("No images: this report was rendered without the run's image store.")
    note_html = "".join(f'<p class="warn">{esc(n)}</p>' for n in notes)
    title = f"GTA report: {report.title}"
    if any(name == "label" for name, _ in identity_facts(report)):
        title = f"GTA report: {report.label}"
    body = (
        f'<header><h1>{esc(title)}</h1><nav><a href="#tables">tables</a> '
        '<a href="#plots">plots</a> <a href="#cases">cases</a></nav></header><main>'
        f'{note_html}<section id="run">{head_parts[0]}</section>'
        f'<section id="tables"><h2>Tables</h2>{head_parts[1]}</section>'
        f"{head_parts[2]}{head_parts[3]}"
    )
    return scripted_page(title, body, "".join(templates), entries)


def _plots_html(plots: Sequence[Plot]) -> str:
    figures = "".join(
        f'<figure id="{esc(p.slug)}">{p.svg}<figcaption>{esc(p.caption)}</figcaption></figure>'
        for p in plots
    )
    return f'<section id="plots"><h2>Plots</h2><div class="plots">{figures}</div></section>'
