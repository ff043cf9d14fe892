"""The ``transformers`` engine: chat payloads decoded in batches, on reused key/value states.

Speed on a CPU comes from three things, all in :class:`TransformersEngine`:

* **Prefix reuse.** The prompts of a run share long prefixes: an end-to-end episode's turns
  each extend the previous one, and a query's step prompts extend each other. The key/value
  states of recently seen token sequences are kept
  (:class:`~pytest_gta.models.hf_cache.PrefixStore`), so a request only computes the tokens
  after its longest cached prefix.
* **Batching.** Conversations submitted together (a query's steps, a run's prefetched steps,
  concurrent episodes) decode as one batch: on a CPU a decode step reads every weight once,
  whatever the batch size, so eight rows cost little more than one.
* **Preallocated key/value buffers.** Rows decode into buffers sized for the whole reply
  (:func:`~pytest_gta.models.hf_cache.growing_layer_class`), instead of re-allocating the cache
  on every token.

That fast path needs a decoder with plain full-attention key/value caches (Llama, Qwen, Mistral
without sliding windows, SmolLM...). Other architectures (sliding windows, linear attention) are
served by ``model.generate`` on a left-padded batch, without prefix reuse.

The weights load on the first request (:func:`~pytest_gta.models.hf_weights.load_pretrained`),
in the engine's worker thread (:class:`~pytest_gta.models.local_engine.BatchEngine`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_gta.errors import GtaInfrastructureError
from pytest_gta.models.hf_cache import (
    PrefixStore,
    cache_keyword,
    cache_of,
    growing_layer_class,
    plain_cache,
)
from pytest_gta.models.hf_weights import Weights, load_pretrained
from pytest_gta.models.local_engine import BatchEngine, Payload
from pytest_gta.types import ModelOutput, Usage

#: A decoding batch drops its finished rows once at most this share of them is still live.
COMPACT_AT = 0.6


# -- rows and batches -----------------------------------------------------------------------------
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
        # deferred: torch stays off the import path until a model loads
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


# -- the engine -----------------------------------------------------------------------------------
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
    #: The ``forward`` keyword that takes the key/value cache
    #: (see :func:`~pytest_gta.models.hf_cache.cache_keyword`).
    cache_arg: str = "past_key_values"

    @property
    def fast(self) -> bool:
        """Whether requests take the fast path (prefix reuse, preallocated buffers)."""
        return self.empty is not None


def eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
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
        start = time.perf_counter()
        model, tokenizer = load_pretrained(
            self.weights, self.load_args, name=self.model, threads=self.threads
        )
        eos = eos_ids(model, tokenizer)
        window = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        empty = plain_cache(model)
        seconds = time.perf_counter() - start
        return Loaded(model, tokenizer, eos, window, empty, seconds, cache_keyword(model))

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
        # deferred: torch stays off the import path until a model loads
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
        # deferred: torch stays off the import path until a model loads
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
        # deferred: torch stays off the import path until a model loads
        import torch

        growing = growing_layer_class()
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
            **{loaded.cache_arg: cache_of(layers)},
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
        # deferred: torch stays off the import path until a model loads
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
            batch_layers.append(growing_layer_class()(kbuf, vbuf, longest))
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
                **{loaded.cache_arg: cache_of(batch.layers)},
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
        # deferred: torch stays off the import path until a model loads
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
        # deferred: torch stays off the import path until a model loads
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
