"""What the in-process engines (vLLM, Hugging Face transformers) share.

An engine that holds model weights in this process is big and not thread-safe, and it is fastest
when it answers many conversations in one batch. :class:`BatchEngine` gives each engine one
worker thread, the only thread that touches the weights: requests from any thread (a step-mode
batch, concurrent ``generate`` calls) are queued, gathered for a moment, and answered together.
The weights load on the first request, not when the adapter is built, because pytest builds the
model in every process (the xdist controller too, which never generates).

:class:`EngineChat` is the adapter side: the request rules of the official harness under ReAct
(:mod:`pytest_gta.models.generation`), chat-template messages and tool schemas under ``native``
(tool calls parsed from the generated text), and :meth:`EngineChat.generate_batch`, all on top of
the shared cache, budget and concurrency limit of :class:`~pytest_gta.models.chat.ChatAdapter`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pytest_gta.errors import GtaInfrastructureError
from pytest_gta.models.chat import ChatAdapter, Prepared, endpoint_limit
from pytest_gta.models.generation import official_messages, react_max_tokens
from pytest_gta.models.openai_convert import native_tools
from pytest_gta.models.tool_text import parse_tool_calls, template_messages
from pytest_gta.types import ModelOutput, ModelRequest, Usage

#: How long the worker waits for more requests after the first one of a batch (seconds). Short
#: against a generation, long enough for threads released together to land in one batch.
GATHER_WINDOW = 0.005

Payload = Mapping[str, Any]


@dataclass
class _Job:
    """Payloads submitted together, each with the future of its output."""

    payloads: list[Payload]
    futures: list[Future[ModelOutput]]


class BatchEngine:
    """Weights loaded on first use, and the worker thread that alone runs them.

    Subclasses implement :meth:`run_batch`; jobs queued while the worker is busy (or within
    :data:`GATHER_WINDOW` of the first) are answered by one :meth:`run_batch` call per
    :meth:`group_key`.
    """

    #: How the engine is named in messages ("the vLLM engine failed on ...").
    kind = "in-process"

    def __init__(self, load: Callable[[], Any], model: str, window: float = GATHER_WINDOW) -> None:
        self._load = load
        self.model = model
        self.window = window
        #: What ``load`` returned (the weights), once loaded.
        self.handle: Any = None
        self._load_error: GtaInfrastructureError | None = None
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- to implement ---------------------------------------------------------------------
    def run_batch(self, payloads: list[Payload]) -> list[ModelOutput]:
        """Generate for payloads that share a :meth:`group_key`, in order (worker thread)."""
        raise NotImplementedError

    def group_key(self, payload: Payload) -> str:
        """Payloads with the same key may share one :meth:`run_batch` call."""
        return ""

    def summary(self) -> str | None:
        """One line on the work done so far, for the progress output (``None``: nothing)."""
        return None

    # -- shared machinery -----------------------------------------------------------------
    def describe_failure(self, exc: BaseException) -> str:
        """How a failure of the engine reads in a case's error message."""
        return f"{type(exc).__name__}: {exc}"

    def _ensure_started(self) -> None:
        """Load the weights (in the calling thread) and start the worker; call under the lock."""
        if self._closed:
            raise GtaInfrastructureError(f"the {self.kind} engine of {self.model} was shut down")
        if self._load_error is not None:
            raise self._load_error
        if self.handle is None:
            try:
                self.handle = self._load()
            except GtaInfrastructureError as exc:
                self._load_error = exc
                raise
            except Exception as exc:
                # Loading again for every case would only repeat the failure, slowly.
                self._load_error = GtaInfrastructureError(
                    f"{self.kind} could not load {self.model}: {self.describe_failure(exc)}"
                )
                raise self._load_error from None
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name=f"pytest-gta-engine[{self.model}]", daemon=True
            )
            self._thread.start()

    def load(self) -> None:
        """Load the weights now (before the first case, so no case is charged for it)."""
        with self._lock:
            self._ensure_started()

    def submit(self, payloads: Sequence[Payload]) -> list[Future[ModelOutput]]:
        """Queue payloads for the next batch, together; one future per payload, in order.

        Payloads submitted in one call always share a batch, so a caller that submits a
        round of requests at once gets the same batches on every run.
        """
        futures: list[Future[ModelOutput]] = [Future() for _ in payloads]
        with self._lock:
            self._ensure_started()
            self._queue.put(_Job(list(payloads), futures))
        return futures

    def run(self, payloads: Sequence[Payload]) -> list[ModelOutput]:
        """Generate for ``payloads`` (possibly batched with other threads' requests).

        Raises:
            GtaInfrastructureError: the first payload that failed (see :meth:`submit` for
                answers per payload).
        """
        return [future.result() for future in self.submit(payloads)] if payloads else []

    def close(self) -> None:
        """Stop the worker after the jobs already queued and drop the weights.

        Later submissions fail.
        """
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
            if thread is not None:
                self._queue.put(None)
        if thread is not None:
            thread.join()
        self.handle = None

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs = [job]
            deadline = time.monotonic() + self.window
            stop = False
            while not stop:
                try:
                    more = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                else:
                    jobs.append(more)
            members = [
                (payload, future)
                for job in jobs
                for payload, future in zip(job.payloads, job.futures, strict=True)
            ]
            try:
                groups: dict[str, list[tuple[Payload, Future[ModelOutput]]]] = {}
                for member in members:
                    groups.setdefault(self.group_key(member[0]), []).append(member)
                for group in groups.values():
                    self._answer(group)
            except Exception as exc:  # a bug here must not leave a caller waiting forever
                error = GtaInfrastructureError(
                    f"the {self.kind} engine's worker failed on {self.model}: {exc!r}"
                )
                for _, future in members:
                    if not future.done():
                        future.set_exception(error)
            if stop:
                return

    def _answer(self, members: list[tuple[Payload, Future[ModelOutput]]]) -> None:
        """One :meth:`run_batch` call for ``members``; if it fails, one call per member.

        Engines fail a whole batch for one bad conversation (a prompt longer than the model's
        window, say); answering the rest one by one keeps the error in its own case.
        """
        try:
            outputs = self.run_batch([payload for payload, _ in members])
            if len(outputs) != len(members):
                raise RuntimeError(f"{len(outputs)} outputs for {len(members)} conversations")
        except Exception as exc:
            if len(members) > 1:
                for member in members:
                    self._answer([member])
                return
            members[0][1].set_exception(
                GtaInfrastructureError(
                    f"the {self.kind} engine failed on {self.model}: {self.describe_failure(exc)}"
                )
            )
            return
        for (_, future), output in zip(members, outputs, strict=True):
            future.set_result(output)


E = TypeVar("E", bound=BatchEngine)


class EngineRegistry(Generic[E]):
    """The engines of this process, one per model and arguments (one copy of the weights)."""

    def __init__(self) -> None:
        self._engines: dict[str, E] = {}
        self._lock = threading.Lock()

    def get(self, key: str, build: Callable[[], E]) -> E:
        """The engine for ``key``, built (not loaded) on first use."""
        with self._lock:
            engine = self._engines.get(key)
            if engine is None:
                engine = self._engines[key] = build()
            return engine

    def shutdown(self) -> None:
        """Stop every engine's worker and forget the engines (tests; handing a GPU back)."""
        with self._lock:
            engines = list(self._engines.values())
            self._engines.clear()
        for engine in engines:
            engine.close()


class EngineChat(ChatAdapter):
    """A chat adapter whose transport is a :class:`BatchEngine` in this process.

    Subclasses set :attr:`engine`, :attr:`served` (the name the official ``max_tokens`` rule
    reads), :attr:`stop` and :attr:`vision`. The payload is ``{model, protocol, messages, tools,
    sampling}``; under ReAct the messages and ``max_tokens`` are the official ones.
    """

    #: Ask the plugin to answer a run's step-mode prompts in one batch before its loop, and
    #: to run its end-to-end episodes in lockstep batches (:mod:`pytest_gta.run.ahead`).
    prefetch_steps = True
    prefetch_episodes = True
    #: Never threads: the engine batches whatever arrives together, so threads would make the
    #: batches (and, on a GPU, the numbers) depend on timing. Without xdist the run is batched
    #: ahead; under xdist each case batches its own steps, or a managed server (--gta-serve).
    concurrency = 1

    engine: BatchEngine
    served: str
    stop: list[str]
    vision: bool = False

    def prepare(self, request: ModelRequest) -> Prepared | ModelOutput:
        """Chat messages, tools and sampling parameters; the official ones under ReAct."""
        settings = self.settings
        tools: list[dict[str, Any]] | None = None
        if request.protocol == "native":
            messages = template_messages(request.messages, self.vision)
            tools = native_tools(request) or None
            max_tokens = settings.max_tokens
        else:
            messages = official_messages(request.messages)
            max_tokens = react_max_tokens(self.served, request.messages, settings.max_tokens)
        if max_tokens <= 0:
            # The official rule: a prompt that fills the window gets '' and no generation.
            return ModelOutput("", Usage())
        sampling: dict[str, Any] = {"temperature": settings.temperature, "max_tokens": max_tokens}
        if self.stop:
            sampling["stop"] = list(self.stop)
        seed = settings.seed_for(request.case.epoch)
        if seed is not None:
            sampling["seed"] = seed
        payload = {
            "model": self.served,
            "protocol": request.protocol,
            "messages": messages,
            "tools": tools,
            "sampling": sampling,
        }
        return Prepared(payload)

    @staticmethod
    def finish(payload: Payload, raw: ModelOutput) -> ModelOutput:
        """The engine's raw text as a reply: tool calls parsed out under ``native``."""
        if payload.get("protocol") == "native":
            text, calls = parse_tool_calls(raw.text)
            return ModelOutput(text, raw.usage, calls)
        return ModelOutput(raw.text.strip(), raw.usage)

    def send(self, prepared: Prepared) -> ModelOutput:
        """One request, answered in the worker's next batch."""
        return self.finish(prepared.payload, self.engine.run([prepared.payload])[0])

    def warm_up(self) -> None:
        """Load the weights before the first case (the plugin calls this outside any case)."""
        self.engine.load()

    def work_summary(self) -> str | None:
        """What the engine did so far, in one line (printed after the batched generation)."""
        return self.engine.summary()

    def generate_each(self, requests: Sequence[ModelRequest]) -> list[ModelOutput | BaseException]:
        """Answer independent requests with one engine batch for all cache misses.

        Cached answers and prompts that fill the official window cost no generation; the
        budget is checked once before the batch and charged per answer, as ``generate`` does.
        A request the engine fails on gets its exception in its slot; the others their output.
        """
        outputs: list[ModelOutput | BaseException | None] = [None] * len(requests)
        pending: list[tuple[int, Prepared, str | None]] = []
        for index, request in enumerate(requests):
            try:
                prepared = self.prepare(request)
            except Exception as exc:  # e.g. an image the request names cannot be read
                outputs[index] = exc
                continue
            if isinstance(prepared, ModelOutput):
                outputs[index] = prepared
                continue
            key, hit = self.lookup(prepared, request.case.epoch)
            if hit is not None:
                outputs[index] = hit
            else:
                pending.append((index, prepared, key))
        if pending:
            if self.budget is not None:
                self.budget.check()
            payloads = [prepared.payload for _, prepared, _ in pending]
            with endpoint_limit(self.endpoint, self.settings.max_concurrency):
                futures = self.engine.submit(payloads)
                for (index, prepared, key), future in zip(pending, futures, strict=True):
                    try:
                        raw = future.result()
                    except Exception as exc:
                        outputs[index] = exc
                    else:
                        outputs[index] = self.settle(key, self.finish(prepared.payload, raw))
        return [o if o is not None else ModelOutput("") for o in outputs]

    def generate_batch(self, requests: Sequence[ModelRequest]) -> list[ModelOutput]:
        """Answer independent requests in one batch (see :meth:`generate_each`).

        Raises:
            GtaInfrastructureError: the first request that failed.
        """
        outputs = self.generate_each(requests)
        for output in outputs:
            if isinstance(output, BaseException):
                raise output
        return [o for o in outputs if isinstance(o, ModelOutput)]
