"""The two GTA evaluation modes, independent of any model or tool implementation.

*Step-by-step* replays the reference chain: one model call per reference assistant message, on
the reference prefix, parsed once and validated but never executed (OpenCompass
``infer_every_with_gt`` + ``LagentAgent.next_step``). *End-to-end* lets the model drive the ReAct
loop against real tool backends for up to ten turns (``infer_every`` + Lagent ``ReAct.chat``).

Both produce prediction steps in the official record format, so one scorer serves our runs and
re-scored OpenCompass prediction files alike.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from collections.abc import Generator as Generator_
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gta.dataset import Dataset, Query
from pytest_gta.models.base import BaseModelAdapter
from pytest_gta.protocol import native
from pytest_gta.protocol import react as p
from pytest_gta.types import (
    CaseContext,
    ChatMessage,
    ModelOutput,
    ModelRequest,
    ToolCall,
    ToolMeta,
    Usage,
)
from pytest_gta.vocabulary import ProtocolName

#: Lagent ReAct ``max_turn`` in the GTA configuration.
MAX_TURNS = 10


def stamped(output: ModelOutput, seconds: float) -> ModelOutput:
    """``output`` with the seconds its caller waited on the model (:attr:`ModelOutput.model_s`).

    An output already stamped keeps its time: it was generated earlier by another call (the
    batch before the loop, a pool thread) and the call that returned it only handed it over.
    The time is the caller's wall clock around the model call, so a reply from the response
    cache counts the (tiny) time the cache took, and a retried request its retries.
    """
    if not isinstance(output, ModelOutput) or output.model_s is not None:
        return output  # a third-party adapter's duck-typed output is left as it is
    return dataclasses.replace(output, model_s=seconds)


def timed_generate(model: BaseModelAdapter, request: ModelRequest) -> ModelOutput:
    """``model.generate(request)``, its output stamped with the seconds the call took."""
    start = time.perf_counter()
    output = model.generate(request)
    return stamped(output, time.perf_counter() - start)


def generate_all(model: BaseModelAdapter, requests: Sequence[ModelRequest]) -> list[ModelOutput]:
    """Answer independent requests with the adapter's :meth:`~BaseModelAdapter.generate_batch`.

    Each output is stamped with its share of the call's time (:func:`stamped`): a batch engine
    answers the requests together, so no request has a time of its own, and an even split keeps
    a case's model time the sum of its requests' whatever else shared the batch.

    Raises:
        RuntimeError: when the adapter answers a different number of requests than it was asked.
    """
    start = time.perf_counter()
    outputs = list(model.generate_batch(requests))
    if len(outputs) != len(requests):
        raise RuntimeError(
            f"{type(model).__name__}.generate_batch returned {len(outputs)} outputs for "
            f"{len(requests)} requests"
        )
    share = (time.perf_counter() - start) / max(1, len(outputs))
    return [stamped(output, share) for output in outputs]


class Prefetched(BaseModelAdapter):
    """Step-mode answers generated ahead of time: in one batch, or in a pool of threads.

    Step mode knows every prompt before the first case runs, so an engine that batches (vLLM
    in-process) can answer them all in one call, and a remote endpoint can be sent many at once
    (:mod:`pytest_gta.run.pipeline`, whose answers are futures). Cases then take their answers from
    here; a request that was not prefetched, or whose messages differ, goes to the model as
    usual.
    """

    def __init__(
        self,
        model: BaseModelAdapter,
        answers: dict[CaseContext, tuple[Any, ModelOutput | Future[ModelOutput]]],
    ) -> None:
        self.model = model
        self.name = model.name
        self.protocol = model.protocol
        self._answers = answers

    @classmethod
    def run(cls, model: BaseModelAdapter, requests: Sequence[ModelRequest]) -> Prefetched:
        """Answer ``requests`` with one :func:`generate_all` call."""
        outputs = generate_all(model, requests)
        answers: dict[CaseContext, tuple[Any, ModelOutput | Future[ModelOutput]]] = {
            r.case: (r.messages, out) for r, out in zip(requests, outputs, strict=True)
        }
        return cls(model, answers)

    def _take(self, request: ModelRequest) -> ModelOutput | None:
        found = self._answers.pop(request.case, None)
        if found is None or found[0] != request.messages:
            return None
        answer = found[1]
        if not isinstance(answer, Future):
            return answer
        # Being generated in a pool thread (pytest_gta.run.pipeline): its failure (the model
        # unreachable, the budget spent) is raised here, in the case; work the pool dropped
        # when it stopped goes to the model, which refuses it if the budget is spent.
        try:
            return answer.result()
        except CancelledError:
            return None

    def generate(self, request: ModelRequest) -> ModelOutput:
        """The prefetched answer, or the model's."""
        return self._take(request) or self.model.generate(request)

    def generate_batch(self, requests: Sequence[ModelRequest]) -> list[ModelOutput]:
        """Prefetched answers, the rest from the model in one batch."""
        taken = [self._take(r) for r in requests]
        missing = [r for r, out in zip(requests, taken, strict=True) if out is None]
        fresh = iter(generate_all(self.model, missing) if missing else [])
        return [out if out is not None else next(fresh) for out in taken]


@dataclass
class Turn:
    """One model call of an episode: what was sent, what came back, what it became."""

    messages: tuple[ChatMessage, ...]
    reply: str
    record: p.ActionRecord
    usage: Usage | None = None
    #: Seconds the turn waited on the model (:attr:`ModelOutput.model_s`); ``None``: unknown.
    model_s: float | None = None


@dataclass
class Episode:
    """A finished case: official-format predictions and references plus the transcript."""

    mode: str
    #: step: one prediction per reference assistant message; e2e: the recorded steps.
    predictions: list[dict[str, Any]]
    #: step: the reference assistant messages; e2e: the reference messages after the query.
    gold: list[dict[str, Any]]
    turns: list[Turn] = field(default_factory=list)

    @property
    def usage(self) -> Usage:
        """Tokens used by all turns."""
        total = Usage()
        for turn in self.turns:
            if turn.usage is not None:
                total += turn.usage
        return total

    @property
    def model_s(self) -> float | None:
        """Seconds the episode waited on the model, over its turns (``None``: none was timed)."""
        timed = [turn.model_s for turn in self.turns if turn.model_s is not None]
        return sum(timed) if timed else None


def system_message(metas: Sequence[ToolMeta], protocol: ProtocolName) -> ChatMessage:
    """The protocol system message: the ReAct template, or a short native instruction."""
    if protocol == "native":
        return ChatMessage("system", native.NATIVE_SYSTEM_PROMPT)
    return ChatMessage("system", p.render_system_prompt(metas))


def step_requests(
    dataset: Dataset, query: Query, protocol: ProtocolName = "react", *, epoch: int = 0
) -> list[tuple[ModelRequest, dict[str, Any]]]:
    """Every step-mode request of a query with the reference message it is scored against.

    The prompt is the protocol system message followed by the reference prefix rendered by
    :func:`~pytest_gta.protocol.react.react_style_history`; the last call also gets the
    "summarize" user message. Messages are never merged, so a request opens with two system
    messages when the query has files.
    """
    dialogs = dataset.reference_dialogs(query)
    metas = tuple(dataset.tool_metas(query))
    system = system_message(metas, protocol)
    files = dataset.abs_files(query)
    indices = query.assistant_indices
    out = []
    for n, i in enumerate(indices):
        history: list[dict[str, Any]] = list(dialogs[:i])
        if n == len(indices) - 1:
            history.append({"role": "user", "content": p.SUMMARIZE_PROMPT})
        if protocol == "native":
            rendered = native.step_history(history, files, dataset.root_str)
        else:
            rendered = p.react_style_history(history, files)
        request = ModelRequest(
            (system, *rendered), metas, CaseContext(query.qid, "step", i, epoch), protocol
        )
        out.append((request, dialogs[i]))
    return out


def _seconds(output: ModelOutput) -> float | None:
    """The output's stamped model time (a duck-typed output has none)."""
    seconds = getattr(output, "model_s", None)
    return float(seconds) if isinstance(seconds, int | float) else None


def _parse(
    output: ModelOutput, protocol: ProtocolName
) -> tuple[str, p.ParsedReply, ToolCall | None]:
    """(transcript reply, parsed turn, native call) of one model output."""
    if protocol == "native":
        parsed, call = native.parse_output(output)
        return native.transcript(output), parsed, call
    reply = output.text.strip()
    return reply, p.parse_reply(reply), None


def run_step(dataset: Dataset, query: Query, model: BaseModelAdapter, *, epoch: int = 0) -> Episode:
    """Step-by-step mode: every reference step predicted once from the reference prefix."""
    protocol = model.protocol
    pairs = step_requests(dataset, query, protocol, epoch=epoch)
    outputs = generate_all(model, [r for r, _ in pairs])
    tools = {t.name: t for t in dataset.tool_metas(query)}
    # Only the dataset's files exist for the model (see protocol.convert_arguments).
    visible = (os.path.realpath(dataset.root_str),)
    episode = Episode("step", [], [])
    for (request, gold), output in zip(pairs, outputs, strict=True):
        reply, parsed, _ = _parse(output, protocol)
        record = p.execute(parsed, tools, p.validate_only, visible=visible)
        episode.predictions.append(record.to_step())
        episode.gold.append(gold)
        episode.turns.append(Turn(request.messages, reply, record, output.usage, _seconds(output)))
    return episode


def e2e_opening(
    dataset: Dataset, query: Query, protocol: ProtocolName = "react"
) -> list[ChatMessage]:
    """The history an end-to-end episode starts from: the files message and the query."""
    files = dataset.abs_files(query)
    images = native.images_of(files) if protocol == "native" else ()
    opening = [ChatMessage("user", p.files_message(files), images=images)] if files else []
    opening.append(ChatMessage("user", query.text))
    return opening


#: An end-to-end episode in progress: yields its model requests, is sent their outputs, and
#: returns the finished :class:`Episode`.
EpisodeSteps = Generator_[ModelRequest, ModelOutput, Episode]


def e2e_episode(
    dataset: Dataset,
    query: Query,
    protocol: ProtocolName,
    run_tool: p.ToolRunner,
    *,
    max_turns: int = MAX_TURNS,
    base_dir: Path | None = None,
    epoch: int = 0,
    visible: p.Visible | None = None,
) -> EpisodeSteps:
    """End-to-end mode as a generator: the Lagent ReAct loop against real tool backends.

    The loop is written once and driven two ways: one request at a time
    (:func:`drive`), or many episodes in lockstep so that a batch engine answers every live
    episode's turn in one batch (:func:`run_lockstep`). Without a finish within ``max_turns``
    the episode ends on the last tool step, as the official harness records it (the default
    answer is never written as a step).

    ``visible`` are the files that exist for the model (the case's
    :attr:`~pytest_gta.tools.ToolContext.reach`: its files, its outputs, never the benchmark's
    own files); without it, the dataset's directory.
    """
    if visible is None:
        visible = (os.path.realpath(dataset.root_str),)
    metas = tuple(dataset.tool_metas(query))
    tools = {t.name: t for t in metas}
    system = system_message(metas, protocol)
    history = e2e_opening(dataset, query, protocol)
    gold = dataset.reference_dialogs(query)[1:]
    episode = Episode("e2e", [], gold)
    for turn in range(max_turns):
        messages = [system, *history]
        if turn == max_turns - 1:
            messages.append(ChatMessage("system", p.FORCE_STOP_PROMPT))
        request = ModelRequest(
            tuple(messages), metas, CaseContext(query.qid, "e2e", turn, epoch), protocol
        )
        output = yield request
        reply, parsed, call = _parse(output, protocol)
        if call is None:
            history.append(ChatMessage("assistant", output.text.strip()))
        else:
            history.append(ChatMessage("assistant", output.text.strip(), tool_calls=(call,)))
        record = p.execute(parsed, tools, run_tool, base_dir, visible)
        episode.turns.append(Turn(request.messages, reply, record, output.usage, _seconds(output)))
        episode.predictions.append(record.to_step())
        if record.is_finish:
            break
        episode.predictions.append(record.to_tool_return())
        if call is None:
            history.append(ChatMessage("system", record.observation()))
        else:
            history.append(native.tool_message(record, call))
    return episode


def drive(steps: EpisodeSteps, model: BaseModelAdapter) -> Episode:
    """Run an episode (:func:`e2e_episode`) to its end, one ``model`` call per request."""
    try:
        request = next(steps)
        while True:
            request = steps.send(timed_generate(model, request))
    except StopIteration as done:
        episode: Episode = done.value
        return episode


def run_lockstep(
    model: BaseModelAdapter,
    episodes: Sequence[EpisodeSteps],
    progress: Callable[[int, int], None] | None = None,
) -> list[Episode | BaseException]:
    """Drive many episodes together: each round, every live episode's turn in one batch.

    The rounds make the batches a function of the episodes alone (not of thread timing), so
    a batch engine gives the same replies on every run. An episode that fails (a tool server
    down, the model unreachable for its request) ends with its exception in its slot; the
    others go on. ``progress(round, live)`` is called before each round.
    """
    results: list[Episode | BaseException | None] = [None] * len(episodes)
    pending: dict[int, ModelRequest] = {}

    def advance(index: int, output: ModelOutput | None) -> None:
        steps = episodes[index]
        try:
            pending[index] = next(steps) if output is None else steps.send(output)
        except StopIteration as done:
            results[index] = done.value
            pending.pop(index, None)
        except Exception as exc:  # this episode's failure, recorded for its own case
            results[index] = exc
            pending.pop(index, None)

    for index in range(len(episodes)):
        advance(index, None)
    rounds = 0
    while pending:
        rounds += 1
        if progress is not None:
            progress(rounds, len(pending))
        order = sorted(pending)
        start = time.perf_counter()
        try:
            answers = model.generate_each([pending[i] for i in order])
        except Exception as exc:  # the whole round failed (the budget ran out, say)
            answers = [exc] * len(order)
        # The round is one batch: each live episode's turn gets an even share of its time.
        share = (time.perf_counter() - start) / len(order)
        answers = [a if isinstance(a, BaseException) else stamped(a, share) for a in answers]
        for index, answer in zip(order, answers, strict=True):
            if isinstance(answer, BaseException):
                results[index] = answer
                pending.pop(index)
                episodes[index].close()
            else:
                advance(index, answer)
    return [r if r is not None else RuntimeError("episode did not finish") for r in results]
