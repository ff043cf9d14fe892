"""The self-contained HTML report (``--gta-report-html``) and the fragments pytest-html shows.

One file a person opens in a browser, offline: the run's header and the paper's tables (the very
rows the terminal prints, from :mod:`pytest_gta.report.table`), the plots, every case as a row
that can be filtered, sorted and searched, and per case a drill-down with the query, its images,
the model's turns beside the reference chain (first divergence marked), the generated images
and the scoring detail.

Everything is inlined: the stylesheet, one script (allowed by its sha256 in a strict
Content-Security-Policy, so nothing else can run), the plots as SVG and the images as ``data:``
URIs kept once per content in a JSON block. The drill-downs are ``<template>`` elements, parsed
but not laid out until opened, so a 229-query page stays quick to open.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from pytest_gta.dataset import Dataset, Query
from pytest_gta.report.images import ImageStore, StoredImage
from pytest_gta.report.plots import Plot, all_plots, call_parts
from pytest_gta.report.table import gate_lines, header_lines, sections
from pytest_gta.scoring.answer import blacklist_hit, whitelist_hits
from pytest_gta.vocabulary import CATEGORY_NAMES, OUTCOMES, tool_category

#: Text of a tool output or reply beyond this many characters is cut, saying so.
MAX_TEXT = 20_000
#: Bytes of the page besides its markup and images (stylesheet, script), with room to spare.
PAGE_OVERHEAD = 64 * 1024
_SURROGATES = re.compile("[\ud800-\udfff]")

#: Renders an image reference (the path as a step wrote it) as HTML, or "" if it has none.
ImageHtml = Callable[[str], str]


def esc(value: Any) -> str:
    """Text for HTML (attributes included), never markup."""
    return html.escape(str(value), quote=True)


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters)"


def _asset(name: str) -> str:
    return resources.files("pytest_gta.report").joinpath("assets").joinpath(name).read_text("utf-8")


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


def gates_html(report: Mapping[str, Any]) -> str:
    """The gates' verdicts and what they mean for the exit status ("" without gates)."""
    lines = gate_lines(report)
    if not lines:
        return ""
    kinds = {"gate FAIL": "gate-fail", "gate PASS": "gate-pass"}
    items = "".join(
        f'<li class="{kinds.get(line[:9], "gate-sum")}">{esc(line)}</li>' for line in lines
    )
    return f'<section id="gates"><h2>Gates</h2><ul class="gates">{items}</ul></section>'


def tables_html(report: Mapping[str, Any]) -> str:
    """Every table of the terminal summary, the gates and the notes."""
    parts = [table_html(title, headers, rows) for title, headers, rows in sections(report)]
    parts.append(gates_html(report))
    notes = report.get("notes") or []
    if notes:
        parts.append(
            '<section id="notes"><h2>Notes</h2><ul>'
            + "".join(f"<li>{esc(n)}</li>" for n in notes)
            + "</ul></section>"
        )
    return "".join(parts)


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "n/a"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def facts(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The run's header as (label, value) pairs: what ran, on what, how, at what cost."""
    dataset = report.get("dataset") or {}
    settings = report.get("settings") or {}
    out = [
        ("model", f"{report.get('model')} (protocol {report.get('protocol')})"),
        ("modes", ", ".join(settings.get("modes") or [])),
        (
            "dataset",
            f"{dataset.get('path')} ({dataset.get('source', '')}; {dataset.get('queries')} "
            f"queries, {dataset.get('selected')} selected)",
        ),
        ("dataset sha256", str(dataset.get("sha256"))),
    ]
    if settings.get("tools"):
        out.append(("tools", str(settings["tools"])))
    routes = settings.get("tool_routes")
    if isinstance(routes, Mapping) and routes:
        out.append(("tool routes", ", ".join(f"{k}: {v}" for k, v in routes.items())))
    backends = settings.get("tool_backends")
    if isinstance(backends, Mapping):
        sandbox = [
            f"{name}: {info['sandbox']}"
            for name, info in backends.items()
            if isinstance(info, Mapping) and info.get("sandbox")
        ]
        if sandbox:
            out.append(("sandbox", ", ".join(sandbox)))
    if settings.get("sim_model"):
        out.append(
            ("similarity", f"{settings['sim_model']} (pass at >= {settings.get('sim_threshold')})")
        )
    generation = settings.get("generation")
    if isinstance(generation, Mapping) and generation:
        out.append(("generation", ", ".join(f"{k} {v}" for k, v in generation.items())))
    for key in ("limit", "ids", "max_turns", "shard"):
        if settings.get(key) is not None:
            out.append((key.replace("_", " "), str(settings[key])))
    if isinstance(report.get("epochs"), int) and report["epochs"] > 1:
        out.append(("epochs", str(report["epochs"])))
    usage = report.get("usage") or {}
    if usage.get("calls") or usage.get("cached_calls"):
        cost = usage.get("cost_usd")
        out.append(
            (
                "usage",
                f"{usage.get('calls')} model calls ({usage.get('cached_calls')} from the cache), "
                f"{usage.get('input_tokens')} tokens in, {usage.get('output_tokens')} out"
                + ("" if cost is None else f", about ${float(cost):.4f}"),
            )
        )
    out.append(("duration", _duration(report.get("duration_s"))))
    out.append(("pytest-gta", str(settings.get("pytest_gta", ""))))
    return out


def header_html(report: Mapping[str, Any]) -> str:
    """The run's facts, the outcome counts and the state (interrupted, stopped)."""
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts(report))
    outcomes = report.get("outcomes") or {}
    badges = "".join(
        f'<span class="badge {o}">{esc(outcomes.get(o, 0))} {o}</span>' for o in OUTCOMES
    )
    state = ""
    lines = header_lines(report)
    if lines and lines[0].startswith("INTERRUPTED"):
        state = f'<p class="warn">{esc(lines[0])}</p>'
    if report.get("stopped"):
        state += f'<p class="warn">stopped early: {esc(report["stopped"])}</p>'
    return f'{state}<p class="outcomes">{badges}</p><dl class="facts">{rows}</dl>'


def summary_html(report: Mapping[str, Any]) -> str:
    """Header and tables: what pytest-html's summary shows of a GTA run."""
    return f'<div class="gta-summary">{header_html(report)}{tables_html(report)}</div>'


# --------------------------------------------------------------------------------------------
# One case


def _json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, indent=1)
    except (TypeError, ValueError):
        return str(value)


def _content_html(content: Any, image: ImageHtml) -> str:
    """A tool output (``{type, content}`` items, or anything else) with images shown."""
    items = content if isinstance(content, list) else [content]
    parts = []
    for item in items:
        if isinstance(item, Mapping) and item.get("type") == "image":
            path = str(item.get("content"))
            parts.append(image(path) or f'<code class="path">[image]({esc(path)})</code>')
        elif isinstance(item, Mapping) and "content" in item:
            parts.append(f"<pre>{esc(_clip(_json_text(item.get('content'))))}</pre>")
        elif item is not None:
            parts.append(f"<pre>{esc(_clip(_json_text(item)))}</pre>")
    return "".join(parts) or '<span class="muted">(empty)</span>'


def _args_html(arguments: Any, image: ImageHtml) -> str:
    if not isinstance(arguments, Mapping):
        return f"<pre>{esc(_clip(_json_text(arguments)))}</pre>"
    rows = []
    for key, value in arguments.items():
        shown = image(value) if isinstance(value, str) else ""
        rows.append(
            f"<tr><th>{esc(key)}</th><td><pre>{esc(_clip(_json_text(value), 4000))}</pre>"
            f"{shown}</td></tr>"
        )
    return f'<table class="args">{"".join(rows)}</table>'


def _step_html(step: Any, image: ImageHtml, extra: str = "", cls: str = "") -> str:
    """A recorded or reference step: a call, a tool output or an answer."""
    if not isinstance(step, Mapping):
        return f'<li class="step {cls}"><pre>{esc(_clip(_json_text(step)))}</pre>{extra}</li>'
    role = step.get("role")
    if step.get("tool_calls"):
        parts = call_parts(step)
        name, args = parts if parts else ("?", step.get("tool_calls"))
        error = step.get("error")
        err = ""
        if isinstance(error, Mapping):
            err = (
                f'<p class="error-record">{esc(error.get("type"))}: '
                f"{esc(_clip(str(error.get('msg')), 2000))}</p>"
            )
        return (
            f'<li class="step call {cls}"><span class="role">call</span> '
            f'<b class="tool">{esc(name)}</b> <span class="cat">{esc(tool_category(name))}</span>'
            f"{_args_html(args, image)}{err}{extra}</li>"
        )
    if role == "tool":
        return (
            f'<li class="step output {cls}"><span class="role">output</span>'
            f"{_content_html(step.get('content'), image)}{extra}</li>"
        )
    if role == "assistant":
        return (
            f'<li class="step answer {cls}"><span class="role">answer</span>'
            f"<pre>{esc(_clip(str(step.get('content'))))}</pre>{extra}</li>"
        )
    return (
        f'<li class="step {cls}"><span class="role">{esc(role)}</span>'
        f"<pre>{esc(_clip(_json_text(step.get('content'))))}</pre>{extra}</li>"
    )


#: The model column of a step with no prediction (a run cut short).
NO_PREDICTION = '<li class="muted">(no prediction)</li>'


def _call_indices(steps: Sequence[Any]) -> list[int]:
    return [i for i, s in enumerate(steps) if isinstance(s, Mapping) and s.get("tool_calls")]


def _raw_reply(reply: Any) -> str:
    return f"<details><summary>raw reply</summary>{_reply_html(str(reply))}</details>"


def _reply_html(reply: str) -> str:
    """A model turn's raw text, its ReAct parts marked."""
    marked = esc(_clip(reply))
    for word in ("Thought:", "Action Input:", "Action:", "Final Answer:"):
        marked = marked.replace(esc(word), f'<b class="kw">{esc(word)}</b>')
    return f'<pre class="reply">{marked}</pre>'


@dataclass(frozen=True)
class Divergence:
    """Where the model's chain first left the reference's (indices into the shown lists)."""

    reference: int | None
    model: int | None
    why: str


def e2e_divergence(reference: Sequence[Any], steps: Sequence[Any]) -> Divergence | None:
    """The first call that differs from the reference chain's call at the same position.

    End-to-end scoring does not align steps (it counts calls per category); for a reader the
    first call of another tool, the first failed call, or a chain that stops early or runs on is
    where to look. Indices point into the step lists as shown (calls, outputs and the answer).
    """
    ref_calls = _call_indices(reference)
    got_calls = _call_indices(steps)
    for n in range(max(len(ref_calls), len(got_calls))):
        ref_i = ref_calls[n] if n < len(ref_calls) else None
        got_i = got_calls[n] if n < len(got_calls) else None
        if ref_i is None:
            return Divergence(None, got_i, "the model called a tool after the reference answered")
        ref_parts = call_parts(reference[ref_i])
        if got_i is None:
            expected = ref_parts[0] if ref_parts else "?"
            return Divergence(ref_i, None, f"the model answered; the reference called {expected}")
        got_parts = call_parts(steps[got_i])
        expected = ref_parts[0] if ref_parts else "?"
        got = got_parts[0] if got_parts else "?"
        if expected != got:
            return Divergence(
                ref_i, got_i, f"expected a call to {expected}; the model called {got}"
            )
        if isinstance(steps[got_i].get("error"), Mapping):
            return Divergence(ref_i, got_i, f"the call to {got} failed")
    return None


def step_divergence(primitives: Any) -> int | None:
    """The first step-mode step the model got wrong (wrong kind, tool, arguments or an error)."""
    outcomes = primitives.get("steps") if isinstance(primitives, Mapping) else None
    for index, outcome in enumerate(outcomes or []):
        if not isinstance(outcome, Mapping):
            continue
        if outcome.get("error") or outcome.get("pred_type") != outcome.get("gt_type"):
            return index
        if outcome.get("gt_type") == "tool" and not (
            outcome.get("tool_ok") and outcome.get("args_ok")
        ):
            return index
    return None


def _score_text(raw: Any) -> str:
    if isinstance(raw, list | tuple) and len(raw) == 2:
        kind, value = raw
        try:
            return f"{float(value):.4f} ({kind})"
        except (TypeError, ValueError):
            return "n/a"
    return "n/a"


def final_answer(steps: Sequence[Any]) -> str | None:
    """The model's answer: the content of its last assistant step without a call."""
    for step in reversed(steps):
        if (
            isinstance(step, Mapping)
            and step.get("role") == "assistant"
            and not step.get("tool_calls")
        ):
            return str(step.get("content"))
    return None


def scoring_html(case: Mapping[str, Any], query: Query | None, threshold: Any) -> str:
    """How the case was scored: answer checks, similarity against the threshold, counts."""
    primitives = case.get("primitives")
    if not isinstance(primitives, Mapping):
        return '<p class="muted">not scored (the case did not finish)</p>'
    parts = []
    steps = case.get("steps") or []
    answer = final_answer(steps)
    ref = query.gt_answer if query is not None else None
    if case.get("mode") == "e2e":
        answer_score = primitives.get("answer")
    else:
        outcomes = primitives.get("steps") or []
        last = outcomes[-1] if outcomes and isinstance(outcomes[-1], Mapping) else {}
        answer_score = last.get("answer")
    if query is not None:
        parts.append(f"<p>model's answer: <q>{esc(_clip(answer or '(none)', 4000))}</q></p>")
    if isinstance(ref, Mapping) and answer is not None:
        try:
            hits = whitelist_hits(answer, ref)
            black = blacklist_hit(answer, ref)
        except (KeyError, TypeError, re.error):
            hits, black = [], None
        rows = "".join(
            f'<tr class="{"hit" if hit else "miss"}"><td>{"hit" if hit else "missing"}</td>'
            f"<td>{esc(' | '.join(map(str, group)))}</td></tr>"
            for group, hit in zip(ref.get("whitelist", []), hits, strict=False)
        )
        parts.append(
            '<table class="checks"><caption>whitelist (every group must hit)</caption>'
            f"{rows}</table>"
        )
        blacklist = ref.get("blacklist")
        if blacklist:
            parts.append(
                f'<p class="{"miss" if black else "hit"}">blacklist: '
                + (f"hit <q>{esc(black)}</q>" if black else "no hit")
                + f" ({esc(' | '.join(str(a) for g in blacklist for a in g))})</p>"
            )
    elif isinstance(ref, list):
        parts.append(
            "<p>reference answers (cosine similarity to the closest counts):</p><ol>"
            + "".join(f"<li>{esc(r)}</li>" for r in ref)
            + "</ol>"
        )
        parts.append(
            f"<p>similarity {esc(_score_text(answer_score))}; passes at &gt;= {esc(threshold)}</p>"
        )
    if case.get("mode") == "e2e":
        if primitives.get("imggen") is not None:
            parts.append(
                f"<p>image generation (Ans+I) score {esc(_score_text(primitives['imggen']))}</p>"
            )
        elif answer_score is not None and not isinstance(ref, list):
            parts.append(f"<p>answer score {esc(_score_text(answer_score))}</p>")
        rows = "".join(
            f"<tr><td>{c}</td><td>{esc(primitives.get('reference', {}).get(c, 0))}</td>"
            f"<td>{esc(primitives.get('predicted', {}).get(c, 0))}</td>"
            f"<td>{esc(primitives.get('hits', {}).get(c, 0))}</td></tr>"
            for c in CATEGORY_NAMES
        )
        parts.append(
            '<table class="checks"><caption>tool calls per category (F1 counts)</caption>'
            "<tr><th>category</th><th>reference</th><th>model</th><th>matched</th></tr>"
            f"{rows}</table>"
        )
    else:
        rows = "".join(
            f"<tr><td>{n + 1}</td><td>{esc(o.get('gt_type'))}</td>"
            f"<td>{esc(o.get('pred_type'))}</td>"
            f"<td>{_mark(o.get('tool_ok'))}</td><td>{_mark(o.get('args_ok'))}</td>"
            f"<td>{esc(_score_text(o.get('answer')) if o.get('answer') else '')}</td>"
            f"<td>{esc(o.get('error') or '')}</td></tr>"
            for n, o in enumerate(primitives.get("steps") or [])
            if isinstance(o, Mapping)
        )
        parts.append(
            '<table class="checks"><caption>per reference step</caption>'
            "<tr><th>step</th><th>reference</th><th>model</th><th>tool</th><th>args</th>"
            f"<th>answer</th><th>error</th></tr>{rows}</table>"
        )
    return "".join(parts)


def _mark(value: Any) -> str:
    return '<span class="hit">yes</span>' if value else '<span class="miss">no</span>'


def _turns(case: Mapping[str, Any], image: ImageHtml, mark: int | None, why: str) -> str:
    """The model's end-to-end turns: reply (thought, action, input), the call, its output."""
    steps = case.get("steps") or []
    replies = case.get("replies") or []
    items = []
    turn = 0
    for index, step in enumerate(steps):
        is_output = isinstance(step, Mapping) and step.get("role") == "tool"
        extra = ""
        if not is_output and turn < len(replies):
            extra = (
                f"<details><summary>raw reply</summary>{_reply_html(str(replies[turn]))}</details>"
            )
            turn += 1
        cls = "diverge" if index == mark else ""
        if index == mark:
            extra += f'<p class="diverge-why">first divergence: {esc(why)}</p>'
        items.append(_step_html(step, image, extra, cls))
    return f'<ol class="chain model">{"".join(items)}</ol>'


def _reference(query: Query, image: ImageHtml, mark: int | None, why: str) -> str:
    items = []
    for index, step in enumerate(query.dialogs[1:]):
        extra = f'<p class="diverge-why">first divergence: {esc(why)}</p>' if index == mark else ""
        items.append(_step_html(step, image, extra, "diverge" if index == mark else ""))
    return f'<ol class="chain reference">{"".join(items)}</ol>'


def _step_mode(case: Mapping[str, Any], query: Query | None, image: ImageHtml) -> str:
    """Step mode: per reference step, what it was and what the model predicted from its prefix."""
    steps = case.get("steps") or []
    replies = case.get("replies") or []
    wrong = step_divergence(case.get("primitives"))
    indices = query.assistant_indices if query is not None else tuple(range(len(steps)))
    rows = []
    for n, index in enumerate(indices):
        reference = query.dialogs[index] if query is not None else None
        model = steps[n] if n < len(steps) else None
        reply = replies[n] if n < len(replies) else None
        cls = " diverge" if n == wrong else ""
        why = '<p class="diverge-why">first divergence</p>' if n == wrong else ""
        rows.append(
            f'<div class="pair{cls}"><div><h5>reference step {n + 1}</h5><ol class="chain">'
            f"{_step_html(reference, image) if reference is not None else ''}</ol></div>"
            f'<div><h5>model</h5><ol class="chain">'
            f"{_step_html(model, image) if model is not None else NO_PREDICTION}"
            f"</ol>{why}" + (_raw_reply(reply) if reply is not None else "") + "</div></div>"
        )
    return (
        '<p class="muted">Each step is one model call on the reference prefix before it (the '
        "system prompt, the files, the query and the reference steps so far).</p>" + "".join(rows)
    )


def generated_images(case: Mapping[str, Any]) -> list[str]:
    """Paths of images the case's tools produced (tool outputs of type image), in order."""
    paths = []
    for step in case.get("steps") or []:
        if not isinstance(step, Mapping) or step.get("role") != "tool":
            continue
        content = step.get("content")
        for item in content if isinstance(content, list) else [content]:
            if isinstance(item, Mapping) and item.get("type") == "image":
                paths.append(str(item.get("content")))
    return list(dict.fromkeys(paths))


def case_detail(
    case: Mapping[str, Any], query: Query | None, *, threshold: Any, image: ImageHtml
) -> str:
    """Everything about one case, for its drill-down (and pytest-html's extra)."""
    tokens = _tokens(case)
    outcome = str(case.get("outcome"))
    meta = [
        f'<span class="badge {esc(outcome)}">{esc(outcome)}</span>',
        f"score {float(case.get('score') or 0.0):.3f}",
        f"mode {esc(case.get('mode'))}",
        f"type {esc(case.get('type'))}",
        f"duration {_duration(case.get('duration'))}",
        f"tokens {tokens}",
    ]
    backends = case.get("backends") or {}
    if backends:
        meta.append("tools: " + esc(", ".join(f"{k} by {v}" for k, v in backends.items())))
    parts = [
        f'<h3 id="case-{esc(case.get("id"))}">{esc(case.get("id"))}</h3>',
        f'<p class="meta">{" · ".join(meta)}</p>',
    ]
    if case.get("message"):
        cls = "error-record" if outcome == "error" else "why"
        parts.append(f'<pre class="{cls}">{esc(_clip(str(case["message"]), 4000))}</pre>')
    if query is not None:
        inputs = "".join(image(f.path) for f in query.files)
        parts.append(
            f'<section class="query"><h4>Query</h4><p>{esc(query.text)}</p>'
            f'<div class="gallery">{inputs}</div>'
            f"<p class=muted>tools offered: {esc(', '.join(query.tool_names))}</p></section>"
        )
    if case.get("mode") == "step":
        parts.append(
            f'<section class="chains"><h4>Steps</h4>{_step_mode(case, query, image)}</section>'
        )
    else:
        reference = list(query.dialogs[1:]) if query is not None else []
        divergence = e2e_divergence(reference, case.get("steps") or [])
        why = divergence.why if divergence else ""
        model_mark = divergence.model if divergence else None
        ref_mark = divergence.reference if divergence else None
        opening = ""
        if query is not None:
            files = ", ".join(f"`{f.path}`" for f in query.files)
            opening = (
                '<ol class="chain opening">'
                f'<li class="step system"><span class="role">system</span> the ReAct protocol '
                f"prompt, describing the tools {esc(', '.join(query.tool_names))}</li>"
                + (
                    f'<li class="step user"><span class="role">user</span> The related files '
                    f"are at {esc(files)}</li>"
                    if files
                    else ""
                )
                + f'<li class="step user"><span class="role">user</span> {esc(query.text)}</li>'
                "</ol>"
            )
        parts.append(
            '<section class="chains"><h4>The model\'s turns beside the reference chain</h4>'
            + (f'<p class="diverge-why">first divergence: {esc(why)}</p>' if divergence else "")
            + f"{opening}"
            '<div class="pair"><div><h5>reference chain</h5>'
            + (_reference(query, image, ref_mark, why) if query is not None else "")
            + "</div><div><h5>model (what it saw and did)</h5>"
            f"{_turns(case, image, model_mark, why)}</div></div></section>"
        )
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


def _tokens(case: Mapping[str, Any]) -> int:
    """The case's tokens in and out (0 for recorded predictions)."""
    props = case.get("properties") or {}
    return int(props.get("gta_tokens_in", 0) or 0) + int(props.get("gta_tokens_out", 0) or 0)


def _case_row(case: Mapping[str, Any], query: Query | None, flip: str) -> str:
    tokens = _tokens(case)
    tools = list(query.called_tools) if query is not None else []
    categories = list(query.categories) if query is not None else []
    search = " ".join(
        [
            str(case.get("id")),
            query.text if query is not None else "",
            str(case.get("message") or ""),
            *tools,
        ]
    ).lower()
    duration = case.get("duration")
    score = float(case.get("score") or 0.0)
    seconds = float(duration) if isinstance(duration, int | float) else -1.0
    flag = f' <span class="flip {flip}">{flip}</span>' if flip else ""
    return (
        f'<tr class="case" data-id="{esc(case.get("id"))}" '
        f'data-outcome="{esc(case.get("outcome"))}" '
        f'data-mode="{esc(case.get("mode"))}" data-type="{esc(case.get("type"))}" '
        f'data-cats="{esc(" ".join(categories))}" data-tools="{esc(" ".join(tools))}" '
        f'data-flip="{esc(flip)}" data-search="{esc(search)}">'
        f'<td><a href="#case={esc(case.get("id"))}">{esc(case.get("id"))}</a>{flag}</td>'
        f"<td>{esc(case.get('mode'))}</td><td>{esc(case.get('type'))}</td>"
        f"<td>{esc(', '.join(tools))}</td>"
        f'<td><span class="badge {esc(case.get("outcome"))}">{esc(case.get("outcome"))}</span></td>'
        f'<td data-sort="{score:.6f}">{score:.3f}</td>'
        f'<td data-sort="{seconds:.6f}">{_duration(duration) if seconds >= 0 else ""}</td>'
        f'<td data-sort="{tokens}">{tokens or ""}</td>'
        f'<td class="msg">{esc(_clip(str(case.get("message") or ""), 160))}</td></tr>'
    )


def _flips(report: Mapping[str, Any]) -> dict[str, str]:
    comparison = report.get("comparison")
    if not isinstance(comparison, Mapping):
        return {}
    out = {}
    for kind in ("regressed", "fixed"):
        for entry in comparison.get("flipped", {}).get(kind, []):
            key = (entry.get("mode"), str(entry.get("query_id")))
            out["{}-{}".format(*key)] = kind
    return out


def _select(name: str, label: str, values: Sequence[str]) -> str:
    options = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
    return (
        f'<label>{esc(label)} <select data-filter="{name}"><option value="">all</option>'
        f"{options}</select></label>"
    )


def cases_html(report: Mapping[str, Any], dataset: Dataset | None) -> str:
    """The case table (flipped cases first when there is a baseline) and its filters."""
    flips = _flips(report)
    cases = list(report.get("cases", []))
    order = {"regressed": 0, "fixed": 1}

    def query_of(case: Mapping[str, Any]) -> Query | None:
        return None if dataset is None else dataset.queries.get(str(case.get("query_id")))

    def flip_of(case: Mapping[str, Any]) -> str:
        return flips.get(f"{case.get('mode')}-{case.get('query_id')}", "")

    cases.sort(key=lambda c: order.get(flip_of(c), 2))
    rows = "".join(_case_row(c, query_of(c), flip_of(c)) for c in cases)
    queries = [q for q in map(query_of, cases) if q is not None]
    tools = sorted({t for q in queries for t in q.called_tools})
    filters = "".join(
        [
            _select("outcome", "outcome", list(OUTCOMES)),
            _select("mode", "mode", sorted({str(c.get("mode")) for c in cases})),
            _select("type", "type", sorted({str(c.get("type")) for c in cases})),
            _select("cats", "category", list(CATEGORY_NAMES)),
            _select("tools", "tool", tools),
            *([_select("flip", "baseline", ["regressed", "fixed"])] if flips else []),
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
        '<p class="muted">Cases that flipped against the baseline come first.</p>' if flips else ""
    )
    return (
        f'<section id="cases"><h2>Cases</h2>{note}<div class="filters">{filters}'
        f'<span id="shown">{len(cases)} of {len(cases)} cases</span></div>'
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
    report: Mapping[str, Any],
    dataset: Dataset | None,
    store: ImageStore | None,
    *,
    max_bytes: int = 10 * 1024 * 1024,
) -> str:
    """The whole page (see the module docstring); ``max_bytes`` bounds it, images first to go."""
    settings = report.get("settings") or {}
    threshold = settings.get("sim_threshold")
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
    for case in report.get("cases", []):
        query = None if dataset is None else dataset.queries.get(str(case.get("query_id")))
        keys = case.get("images") if isinstance(case.get("images"), Mapping) else {}

        def image(written: str, keys: Mapping[str, Any] = keys) -> str:
            key = keys.get(written)
            return images.reference(key, written) if isinstance(key, str) else ""

        body = case_detail(case, query, threshold=threshold, image=image)
        templates.append(f'<template id="t-{esc(case.get("id"))}">{body}</template>')
    text_bytes = len(markup) + sum(len(t) for t in templates) + PAGE_OVERHEAD
    entries = images.data(max(0, max_bytes - text_bytes))
    notes = []
    if images.dropped or images.dropped_full:
        notes.append(
            f"To stay under {max_bytes / (1024 * 1024):g} MB (--gta-report-html-max-mb), "
            f"{images.dropped_full} full-size image(s) are shown as thumbnails only and "
            f"{images.dropped} image(s) are left out."
        )
    if store is None:
        notes.append("No images: this report was rendered without the run's image store.")
    note_html = "".join(f'<p class="warn">{esc(n)}</p>' for n in notes)
    script = _asset("report.js")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = (
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )
    title = f"GTA report: {report.get('model')} [{report.get('protocol')}]"
    data = json.dumps(entries, separators=(",", ":")).replace("</", "<\\/")
    page = (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{_asset('report.css')}</style></head>"
        f'<body><header><h1>{esc(title)}</h1><nav><a href="#tables">tables</a> '
        '<a href="#plots">plots</a> <a href="#cases">cases</a></nav></header><main>'
        f'{note_html}<section id="run">{head_parts[0]}</section>'
        f'<section id="tables"><h2>Tables</h2>{head_parts[1]}</section>'
        f"{head_parts[2]}{head_parts[3]}"
        '<section id="drilldown" hidden></section>'
        '<div id="lightbox" hidden><img alt="full size"><p></p></div>'
        f"{''.join(templates)}"
        f'<script type="application/json" id="gta-images">{data}</script>'
        f"</main><script>{script}</script></body></html>\n"
    )
    return _SURROGATES.sub("\ufffd", page)


def _plots_html(plots: Sequence[Plot]) -> str:
    figures = "".join(
        f'<figure id="{esc(p.slug)}">{p.svg}<figcaption>{esc(p.caption)}</figcaption></figure>'
        for p in plots
    )
    return f'<section id="plots"><h2>Plots</h2><div class="plots">{figures}</div></section>'
