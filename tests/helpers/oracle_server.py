"""A fake model that answers like a perfect one, slowly, behind a real OpenAI-compatible server.

:class:`PerfectModel` is the ``default`` answer of a
:class:`~tests.helpers.scripted_server.ScriptedServer`: for each chat completion it finds the query
by its text among the messages (and, where several queries share a text, as the real release's do,
by their files message) and the step by the assistant messages so far (the reference prefix in step
mode, its own earlier replies end to end, which equal the reference because it answers correctly),
waits ``latency`` seconds in the request's own thread, and replies with that reference step rendered
as ReAct text by the ``oracle`` model's renderer. Past a chain that ends on a call (16 of the
release's) it closes the episode with a short final answer, as the ``oracle`` model does. It counts
requests, the most it held at once and the usage tokens it reported, so tests and
``benchmarks/concurrency.py`` see how many requests a run keeps in flight without timing anything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pytest_gta.dataset import Dataset
from pytest_gta.models.oracle import end_to_end_turn, render_reference
from pytest_gta.protocol.react import files_message
from pytest_gta.types import CaseContext, ModelRequest
from tests.helpers.scripted_server import Recorded, ScriptedServer, Step, chat_completion

#: What the fake model answers for a query it does not know, or is told to get wrong.
UNKNOWN = "Thought: I do not know this query.\nFinal Answer: unknown"


def _text(content: Any) -> str:
    """A message's text, whether the SDK sent a string or a list of parts."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class PerfectModel:
    """Answers each chat completion with the reference step it asks for, after ``latency``."""

    def __init__(
        self,
        dataset: Dataset,
        latency: float,
        served: str = "oracle-http",
        wrong: frozenset[str] = frozenset(),
        sampled: Callable[[str, Any], bool] | None = None,
    ) -> None:
        self.dataset = dataset
        self.latency = latency
        self.served = served
        #: Queries answered wrongly at once (their cases fail).
        self.wrong = wrong
        #: ``sampled(qid, seed)``: whether a sampled reply of that request's seed is wrong, so
        #: a "sampling" model differs from epoch to epoch, deterministically.
        self.sampled = sampled
        #: Query text, then the files message that goes with it (``None``: no files), to id.
        #: The release has queries alike but for their image ("Can you explain this meme?" ten
        #: times), which only the files message tells apart.
        self.by_text: dict[str, dict[str | None, str]] = {}
        for query in dataset:
            files = dataset.abs_files(query)
            opening = files_message(files) if files else None
            self.by_text.setdefault(query.text, {})[opening] = query.qid
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Start counting afresh (one pytest run)."""
        with self._lock:
            self.calls = 0
            self.in_flight = 0
            self.peak = 0
            self.prompt_tokens = 0
            self.completion_tokens = 0
            self.unknown = 0

    def reply(self, messages: list[Any], seed: Any = None) -> str | None:
        """The reference step a perfect model writes next; ``None`` for an unknown query."""
        messages = [m for m in messages if isinstance(m, dict)]
        qid = self.find(messages)
        if qid is None:
            return None
        if qid in self.wrong or (self.sampled is not None and self.sampled(qid, seed)):
            return UNKNOWN
        query = self.dataset[qid]
        dialogs = self.dataset.reference_dialogs(query)
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        # Step mode never asks past the chain; end to end, the oracle's own rule closes a chain
        # that ends on a call (and repeats a final answer), so both models make the same calls.
        assistants = [dialogs[i] for i in query.assistant_indices]
        request = ModelRequest((), (), CaseContext(qid, "e2e", turn))
        return render_reference(end_to_end_turn(assistants, request))

    def find(self, messages: list[dict[str, Any]]) -> str | None:
        """The id of the query the messages ask about: by its text, then by its files."""
        texts = [_text(m.get("content")) for m in messages]
        by_files = next((self.by_text[t] for t in texts if t in self.by_text), None)
        if by_files is None:
            return None
        if len(by_files) == 1:
            return next(iter(by_files.values()))
        return next((by_files[t] for t in texts if t in by_files), None)

    @contextmanager
    def answering(self) -> Iterator[None]:
        """Count one request in flight for its duration, after waiting ``latency`` in it."""
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            time.sleep(self.latency)
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    def count_tokens(self, prompt_chars: int, reply_chars: int) -> tuple[int, int]:
        """(prompt, completion) tokens of one answer, added to the totals.

        About four characters a token: what the harness adds up in the report's usage.
        """
        prompt, completion = prompt_chars // 4 + 1, reply_chars // 4 + 1
        with self._lock:
            self.prompt_tokens += prompt
            self.completion_tokens += completion
        return prompt, completion

    def __call__(self, record: Recorded) -> Step:
        try:
            sent = record.json
        except ValueError:
            sent = None
        messages = sent.get("messages") if isinstance(sent, dict) else None
        messages = (
            [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
        )
        with self.answering():
            text = self.reply(messages, sent.get("seed") if isinstance(sent, dict) else None)
        if text is None:
            with self._lock:
                self.unknown += 1
            text = UNKNOWN
        prompt, completion = self.count_tokens(
            sum(len(_text(m.get("content"))) for m in messages), len(text)
        )
        body = chat_completion(text, prompt_tokens=prompt, completion_tokens=completion)
        body["model"] = self.served
        return Step(body)


class OracleServer(ScriptedServer):
    """``with OracleServer(dataset, latency) as server``: a :class:`PerfectModel` on 127.0.0.1."""

    def __init__(
        self,
        dataset: Dataset,
        latency: float = 0.0,
        served: str = "oracle-http",
        wrong: frozenset[str] = frozenset(),
        sampled: Callable[[str, Any], bool] | None = None,
    ) -> None:
        self.model = PerfectModel(dataset, latency, served, wrong, sampled)
        super().__init__(models=[served], default=self.model)

    @property
    def calls(self) -> int:
        """Chat completions answered since the last :meth:`reset`."""
        return self.model.calls

    @property
    def peak(self) -> int:
        """The most chat completions held at once since the last :meth:`reset`."""
        return self.model.peak

    def reset(self) -> None:
        """Start counting afresh."""
        self.model.reset()
