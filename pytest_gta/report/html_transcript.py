"""A case's transcript as HTML: recorded steps, the model's turns, the reference chain, the agent.

How a step is drawn (a call with its arguments and error, a tool's output with its images, an
answer, a raw reply with its ReAct parts marked) is the same wherever a transcript is shown: in
the run's page and pytest-html's extras (:mod:`pytest_gta.report.html`, whose drill-down puts
these pieces beside the facts and the scoring) and in the GTA-Workflow page
(:mod:`pytest_gta.report.workflow_html`, which draws a task's turns and its agent with them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_gta.dataset import Query
from pytest_gta.report.explain import duration_text, opening, step_pairs, step_view, turns_of
from pytest_gta.report.page import clip, esc
from pytest_gta.results.case import CaseResult
from pytest_gta.results.recorded import AgentRun, Exchange, LoggedToolCall, Step

#: Renders an image reference (the path as a step wrote it) as HTML, or "" if it has none.
ImageHtml = Callable[[str], str]


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
            parts.append(f"<pre>{esc(clip(_json_text(item.get('content'))))}</pre>")
        elif item is not None:
            parts.append(f"<pre>{esc(clip(_json_text(item)))}</pre>")
    return "".join(parts) or '<span class="muted">(empty)</span>'


def _args_html(arguments: Any, image: ImageHtml) -> str:
    if not isinstance(arguments, Mapping):
        return f"<pre>{esc(clip(_json_text(arguments)))}</pre>"
    rows = []
    for key, value in arguments.items():
        shown = image(value) if isinstance(value, str) else ""
        rows.append(
            f"<tr><th>{esc(key)}</th><td><pre>{esc(clip(_json_text(value), 4000))}</pre>"
            f"{shown}</td></tr>"
        )
    return f'<table class="args">{"".join(rows)}</table>'


def _step_html(step: Step, image: ImageHtml, extra: str = "", cls: str = "") -> str:
    """A recorded or reference step: a call, a tool output or an answer."""
    view = step_view(step)
    if view.kind == "raw":
        shown = esc(clip(_json_text(view.content)))
        return f'<li class="step {cls}"><pre>{shown}</pre>{extra}</li>'
    if view.kind == "call":
        err = ""
        if view.error is not None:
            err = (
                f'<p class="error-record">{esc(view.error[0])}: '
                f"{esc(clip(view.error[1], 2000))}</p>"
            )
        return (
            f'<li class="step call {cls}"><span class="role">call</span> '
            f'<b class="tool">{esc(view.tool)}</b> <span class="cat">{esc(view.category)}</span>'
            f"{_args_html(view.arguments, image)}{err}{extra}</li>"
        )
    if view.kind == "output":
        return (
            f'<li class="step output {cls}"><span class="role">output</span>'
            f"{_content_html(view.content, image)}{extra}</li>"
        )
    if view.kind == "answer":
        return (
            f'<li class="step answer {cls}"><span class="role">answer</span>'
            f"<pre>{esc(clip(str(view.content)))}</pre>{extra}</li>"
        )
    return (
        f'<li class="step {cls}"><span class="role">{esc(view.role)}</span>'
        f"<pre>{esc(clip(_json_text(view.content)))}</pre>{extra}</li>"
    )


#: The model column of a step with no prediction (a run cut short).
NO_PREDICTION = '<li class="muted">(no prediction)</li>'


def _raw_reply(reply: str) -> str:
    return f"<details><summary>raw reply</summary>{_reply_html(reply)}</details>"


def _reply_html(reply: str) -> str:
    """A model turn's raw text, its ReAct parts marked."""
    marked = esc(clip(reply))
    for word in ("Thought:", "Action Input:", "Action:", "Final Answer:"):
        marked = marked.replace(esc(word), f'<b class="kw">{esc(word)}</b>')
    return f'<pre class="reply">{marked}</pre>'


def why_html(why: str) -> str:
    """Why the chain left the reference, under the step where it did."""
    return f'<p class="diverge-why">first divergence: {esc(why)}</p>'


def turns_html(
    steps: Sequence[Step],
    replies: Sequence[str],
    image: ImageHtml,
    mark: int | None = None,
    why: str = "",
    faulted: Mapping[int, str] | None = None,
) -> str:
    """Recorded steps as a chain: each call (arguments, error), output and answer.

    Each call or answer is shown with the raw reply it came from; ``mark`` is the step where
    the chain left the reference (with ``why``); ``faulted`` the steps whose call met an
    injected tool fault, and which (``--gta-tool-faults``).
    """
    items = []
    faulted = faulted or {}
    for index, turn in enumerate(turns_of(steps, replies, mark)):
        extra = _raw_reply(turn.reply) if turn.reply is not None else ""
        if turn.diverges:
            extra += why_html(why)
        classes = ["diverge"] if turn.diverges else []
        if index in faulted:
            extra += f'<p class="fault-injected">tool fault injected: {esc(faulted[index])}</p>'
            classes.append("faulted")
        items.append(_step_html(turn.step, image, extra, " ".join(classes)))
    return f'<ol class="chain model">{"".join(items)}</ol>'


def reference_html(chain: Sequence[Step], image: ImageHtml, mark: int | None, why: str) -> str:
    """The reference chain, the step at ``mark`` marked as where the model's left it."""
    items = []
    for index, step in enumerate(chain):
        extra = why_html(why) if index == mark else ""
        items.append(_step_html(step, image, extra, "diverge" if index == mark else ""))
    return f'<ol class="chain reference">{"".join(items)}</ol>'


def step_mode_html(case: CaseResult, query: Query | None, image: ImageHtml) -> str:
    """Step mode: per reference step, what it was and what the model predicted from its prefix."""
    rows = []
    for pair in step_pairs(case, query):
        cls = " diverge" if pair.diverges else ""
        why = '<p class="diverge-why">first divergence</p>' if pair.diverges else ""
        rows.append(
            f'<div class="pair{cls}"><div><h5>reference step {pair.number}</h5><ol class="chain">'
            f"{_step_html(pair.reference, image) if pair.reference is not None else ''}</ol></div>"
            f'<div><h5>model</h5><ol class="chain">'
            f"{_step_html(pair.model, image) if pair.model is not None else NO_PREDICTION}"
            f"</ol>{why}"
            + (_raw_reply(pair.reply) if pair.reply is not None else "")
            + "</div></div>"
        )
    return (
        '<p class="muted">Each step is one model call on the reference prefix before it (the '
        "system prompt, the files, the query and the reference steps so far).</p>" + "".join(rows)
    )


def opening_html(query: Query) -> str:
    """What a model was given before its first turn: the ReAct prompt, the files, the query."""
    said = opening(query)
    return (
        '<ol class="chain opening">'
        f'<li class="step system"><span class="role">system</span> the ReAct protocol '
        f"prompt, describing the tools {esc(said.tools)}</li>"
        + (
            f'<li class="step user"><span class="role">user</span> The related files '
            f"are at {esc(said.files)}</li>"
            if said.files
            else ""
        )
        + f'<li class="step user"><span class="role">user</span> {esc(said.query)}</li>'
        "</ol>"
    )


def task_html(query: Query) -> str:
    """What an agent under test was given: the task, not a prompt (it writes its own)."""
    said = opening(query)
    files = (
        f'<li class="step user"><span class="role">files</span> {esc(said.files)} (given as '
        "absolute paths)</li>"
        if said.files
        else ""
    )
    return (
        '<ol class="chain opening">'
        f'<li class="step user"><span class="role">task</span> {esc(said.query)}</li>{files}'
        f'<li class="step system"><span class="role">tools</span> {esc(said.tools)}, over MCP '
        "and the task's tool client; the agent's own prompts are in its model exchanges "
        "below</li></ol>"
    )


def agent_html(
    agent: AgentRun,
    tool_log: Sequence[LoggedToolCall] | None,
    exchanges: Sequence[Exchange] | None,
) -> str:
    """The agent under test's run: how it ended, its stderr's end, its model traffic."""
    facts = [f"agent {esc(agent.name)}", f"duration {duration_text(agent.duration)}"]
    if agent.exit_status is not None:
        facts.append(f"exit status {esc(agent.exit_status)}")
    calls = tool_log or []
    facts.append(f"{len(calls)} tool call(s) logged by the server")
    parts = [f'<section class="agent"><h4>Agent</h4><p class="meta">{" · ".join(facts)}</p>']
    if agent.stderr_tail:
        parts.append(
            f"<details><summary>stderr (end)</summary><pre>"
            f"{esc(clip(agent.stderr_tail, 4000))}</pre></details>"
        )
    if exchanges:
        items = []
        for number, exchange in enumerate(exchanges, 1):
            said = [f"#{number} {esc(exchange.api)}", f"status {esc(exchange.status)}"]
            said.append(duration_text(exchange.duration))
            if exchange.usage is not None:
                usage = exchange.usage
                said.append(f"{usage.input_tokens} tokens in, {usage.output_tokens} out")
            if exchange.streamed:
                said.append("streamed")
            if exchange.cached:
                said.append("cached")
            if exchange.retries:
                said.append(f"{esc(exchange.retries)} retries")
            items.append(
                f"<li><details><summary>{' · '.join(said)}</summary>"
                f"<h5>request</h5><pre>{esc(clip(_json_text(exchange.request), 8000))}"
                f"</pre><h5>reply</h5><pre>{esc(clip(exchange.reply, 8000))}"
                "</pre></details></li>"
            )
        parts.append(
            f"<h5>model exchanges through the proxy ({len(exchanges)})</h5>"
            f'<ol class="exchanges">{"".join(items)}</ol>'
        )
    return "".join(parts) + "</section>"
