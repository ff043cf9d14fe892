"""The proxy answering for a model without an HTTP endpoint: the model itself, called in-process.

A model run in this process (``transformers``, ``vllm``, ``llamacpp``), or that runs nothing
(``oracle``, ``mock:`` scripts, a hook's adapter), has no URL an agent's SDK could call. The
proxy answers for it, in the three APIs it serves (:mod:`pytest_gta.proxy.local_requests`
reads the request, :mod:`pytest_gta.proxy.local_replies` writes the answer, streamed if asked),
calling the adapter's ``generate`` as the project's own loop does. So the answer goes through
the same path as a turn of that loop: the adapter's response cache (a rerun replays, a hit
costs nothing), the session's budget (checked first here too; spent: HTTP 402 and the case
stops as a budgeted run does), its usage; and the proxy records the exchange as it records a
forwarded one.

Each request is one call of the model: a :class:`~pytest_gta.types.ModelRequest` of the
native protocol (the agent brings its own prompt and tools; the model's chat template renders
them, and the in-process engines read calls from the text), with the case's query, the
end-to-end mode and the case's request number as its turn (what ``oracle`` and ``mock:``
scripts answer by) and the case's sampling epoch. A model that is not written for threads is
called by one request at a time (:class:`~pytest_gta.proxy.upstream.LocalModel`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

from pytest_gta.errors import GtaBudgetExhausted
from pytest_gta.models.usage import Budget
from pytest_gta.proxy.forward import EVENT_STREAM, AgentGone, Incoming, Outcome, Reply
from pytest_gta.proxy.local_replies import said, stream_events, whole_reply
from pytest_gta.proxy.local_requests import Asked, read_request
from pytest_gta.proxy.upstream import LocalModel
from pytest_gta.proxy.wire import BadRequest, elide_images, reply_of, request_body
from pytest_gta.types import CaseContext, ModelOutput, ModelRequest, Usage

log = logging.getLogger("pytest_gta.proxy")


class LocalAnswerer:
    """Answers agents' requests from a model in this process (the proxy's forwarder for it)."""

    def __init__(self, local: LocalModel, *, budget: Budget | None) -> None:
        self.upstream = local
        self.budget = budget

    def answer(self, incoming: Incoming, out: Reply, outcome: Outcome) -> None:
        """Answer ``incoming`` on ``out`` from the model, noting what happened in ``outcome``.

        As :meth:`~pytest_gta.proxy.forward.Forwarder.answer`: never raises for anything the
        agent sent or the model did, and ``outcome`` is complete before the last bytes go out.

        Raises:
            AgentGone: the agent stopped reading a whole answer.
        """
        try:
            asked = self.read(incoming, outcome)
        except BadRequest as exc:
            if outcome.request is None:
                outcome.request = f"[not answered: {exc}]"
            outcome.failed(out, 400, "invalid_request_error", str(exc))
            return
        context = CaseContext(incoming.query, "e2e", incoming.next_turn(), incoming.epoch)
        request = ModelRequest(asked.messages, asked.tools, context, protocol="native")
        outcome.attempts = 1
        try:
            output = self.generate(request)
        except GtaBudgetExhausted as exc:
            outcome.budget = exc
            outcome.failed(out, 402, "budget_exhausted", f"pytest-gta: {exc}")
            return
        except Exception as exc:  # the model broke: the agent gets an error, the case a record
            name = self.upstream.model
            log.warning("model proxy: %s failed on a request: %r", name, exc)
            outcome.failed(out, 502, "model_error", f"{name}: {type(exc).__name__}: {exc}")
            return
        self.send(incoming.api, asked, output, context.index, outcome, out)

    def read(self, incoming: Incoming, outcome: Outcome) -> Asked:
        """The agent's request, noted in ``outcome`` (:class:`BadRequest`: not answerable)."""
        body = request_body(incoming.raw)
        asked_for = body.get("model")
        outcome.requested_model = asked_for if isinstance(asked_for, str) else None
        body["model"] = self.upstream.model
        outcome.streamed = body.get("stream") is True
        outcome.request = elide_images(body)
        return read_request(incoming.api, body)

    def generate(self, request: ModelRequest) -> ModelOutput:
        """The model's answer, one request at a time unless it takes more."""
        if self.budget is not None:
            self.budget.check()
        with self.upstream.slots:
            return self.upstream.adapter.generate(request)

    def send(
        self, api: str, asked: Asked, output: ModelOutput, turn: int, outcome: Outcome, out: Reply
    ) -> None:
        """Write ``output`` as ``api``'s answer (streamed if asked) and book it."""
        answer = said(output, [t.name for t in asked.tools], self.upstream.model, turn)
        body = whole_reply(api, answer)
        usage = output.usage or Usage()
        cached = usage.cached_calls > 0 and not usage.calls
        outcome.usage = replace(usage, calls=0 if cached else 1, cached_calls=1 if cached else 0)
        outcome.status, outcome.cached = 200, cached
        outcome.reply = reply_of(api, body).text
        if not asked.stream:
            out.send(200, json.dumps(body).encode(), "application/json", {})
            return
        complete = False
        try:
            out.start(200, EVENT_STREAM)
            for event in stream_events(api, answer, asked.include_usage):
                out.chunk(event)
            complete = True
        except AgentGone:
            outcome.error = "the agent closed the connection before the stream ended"
        try:
            out.end(complete)
        except AgentGone:
            pass
